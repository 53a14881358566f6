"""An offline character-level training corpus, generated on the spot.

Nodes may have no internet, and shipping a text file means shipping someone's text. This
makes deterministic English-like prose from a small grammar (subjects, verbs, objects,
places, numbers, punctuation): regular enough that a small model's loss falls quickly,
varied enough that it does not collapse to memorising one line. Same seed, same text,
on every rank. Standard library only.
"""

from __future__ import annotations

import random

_SUBJECTS = ["the engineer", "a cluster", "the scheduler", "every node", "the controller", "my job",
             "the storage", "a worker", "the network", "our team", "the model", "each rank"]
_VERBS = ["starts", "checks", "sends", "reads", "writes", "waits for", "mounts", "trains", "measures",
          "restarts", "reports", "builds", "loads", "saves"]
_OBJECTS = ["the data", "a checkpoint", "the gradients", "the logs", "a new batch", "the results",
            "the weights", "a message", "the file system", "the hostfile", "the metrics", "a report"]
_PLACES = ["on the first try", "before noon", "across the nodes", "over the fabric", "in the shared folder",
           "without a warning", "at full speed", "after the restart", "for every step", "in a few seconds"]
_OPENERS = ["then", "later", "meanwhile", "after that", "so", "still", "today", "once again"]


def sentence(rng: random.Random) -> str:
    parts = []
    if rng.random() < 0.3:
        parts.append(rng.choice(_OPENERS) + ",")
    parts += [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
    if rng.random() < 0.6:
        parts.append(rng.choice(_PLACES))
    if rng.random() < 0.2:
        parts.append("%d times" % rng.randint(2, 64))
    text = " ".join(parts)
    text = text[0].upper() + text[1:]
    return text + rng.choice([".", ".", ".", "!", "?"])


def generate(n_chars: int = 1 << 20, seed: int = 1234) -> str:
    """About ``n_chars`` characters of prose in paragraphs."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        para = " ".join(sentence(rng) for _ in range(rng.randint(2, 6))) + "\n\n"
        out.append(para)
        size += len(para)
    return "".join(out)[:n_chars]
