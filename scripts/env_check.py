"""The transport environment a job's ranks really had, printed into its log and checked against the worker type's.

hpq's launches start every rank through ``wrap``: a few lines of sh that, on each node's first local
rank, print the rank's transport variables (``transport.owns``: NCCL_*, FI_*, GLOO_*, HPQ_TRANSPORT,
HPQ_TORCH_BACKEND) as one delimited block, then ``exec`` the program (same process, same signals)::

    hpq-env: ip-10-1-0-7 begin
    hpq-env: ip-10-1-0-7 FI_PROVIDER=efa
    hpq-env: ip-10-1-0-7 end

``check`` parses those blocks and compares each node's with what the launch meant to give (the
worker type's environment, ``hpq nccl-env TYPE``, plus the launch's own NCCL_DEBUG settings): a
variable the worker type does not set, one it sets that is missing, or a different value is a
problem, named with where it most likely came from (the environment the job was submitted from, or
the worker node itself). A log without any block (a foreign log) gives no opinion. Standard library
only (ships to nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from hpq.lifecycle import transport

MARK = "hpq-env: "


def _key_pattern() -> str:
    """The ERE that selects the transport's own variables in ``env`` output (one source: transport.owns)."""
    parts = [p for p in transport.OWNED_PREFIXES] + ["%s=" % k for k in transport.OWNED_KEYS]
    return "^(%s)" % "|".join(parts)


# $@ is the rank's program. First local rank of a node: Open MPI's rank first (its daemons run as one Slurm
# task per node, so SLURM_LOCALID is 0 in every rank mpirun starts), then Slurm's, then torchrun-style.
# The node is named as Slurm names it (SLURMD_NODENAME, set in every task), else by its kernel host name.
REPORT_SCRIPT = r"""r=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${LOCAL_RANK:-0}}}
if [ "$r" = 0 ]; then
  h=${SLURMD_NODENAME:-$(uname -n)}
  echo "%(mark)s$h begin"
  env | LC_ALL=C sort | grep -E '%(pattern)s' | while IFS= read -r line; do echo "%(mark)s$h $line"; done
  echo "%(mark)s$h end"
fi
exec "$@"
""" % {"mark": MARK, "pattern": _key_pattern()}


def wrap(argv: Sequence[str]) -> List[str]:
    """``argv`` started through the report script (``sh -c SCRIPT hpq-env ARGV...``)."""
    return ["sh", "-c", REPORT_SCRIPT, "hpq-env"] + list(argv)


@dataclass
class Blocks:
    """What a log says: each node's variables, and nodes whose block began but never ended."""

    nodes: Dict[str, Dict[str, str]] = field(default_factory=dict)
    unfinished: List[str] = field(default_factory=list)


def parse(text: str) -> Blocks:
    """Every ``hpq-env:`` block of ``text`` (a prefix before the mark, e.g. ``srun --label``'s, is allowed)."""
    out = Blocks()
    open_nodes: Dict[str, Dict[str, str]] = {}
    for line in text.splitlines():
        at = line.find(MARK)
        if at < 0:
            continue
        host, _, rest = line[at + len(MARK):].partition(" ")
        if not host:
            continue
        if rest == "begin":
            open_nodes[host] = {}
        elif rest == "end":
            if host in open_nodes:
                out.nodes[host] = open_nodes.pop(host)
        elif host in open_nodes and "=" in rest:
            key, _, value = rest.partition("=")
            open_nodes[host][key] = value
    out.unfinished = sorted(open_nodes)
    return out


@dataclass
class EnvCheck:
    """The comparison; ``ok`` is None when the log has no block at all (no opinion)."""

    expected: Dict[str, str]
    effective: Dict[str, Dict[str, str]]
    problems: List[str]
    ok: Optional[bool]

    def to_dict(self) -> Dict[str, object]:
        return {"expected": dict(self.expected), "effective": {h: dict(v) for h, v in self.effective.items()},
                "problems": list(self.problems), "ok": self.ok}


def _source(key: str, value: str, inherited: Mapping[str, str]) -> str:
    if inherited.get(key) == value:
        return ("inherited from the environment the job was launched from (%s=%s there: a CPU controller or "
                "login node's setting)" % (key, value))
    return "not from the launching environment: set on the worker itself (its profile, a Slurm TaskProlog?)"


def compare(blocks: Blocks, expected: Mapping[str, str], inherited: Mapping[str, str], label: str,
            nodes: Optional[int] = None, unjudged: Sequence[str] = ()) -> List[str]:
    """Problems, one line each: every node's transport variables must be exactly ``expected``'s.

    ``expected`` is filtered to the transport's own keys; ``inherited`` is the launching process's
    environment (to name a variable's source); ``label`` names the expectation in messages;
    ``unjudged`` keys (the launcher's own logging settings, e.g. NCCL_DEBUG) may be anything.
    """
    want = {k: v for k, v in expected.items() if transport.owns(k) and k not in unjudged}
    found: Dict[str, List[str]] = {}
    for host in sorted(blocks.nodes):
        have = {k: v for k, v in blocks.nodes[host].items() if k not in unjudged}
        for key in sorted(set(have) | set(want)):
            if key not in want:
                msg = "%s=%s is set in the job but %s does not set it; %s" % (
                    key, have[key], label, _source(key, have[key], inherited))
            elif key not in have:
                msg = "%s is missing in the job; %s sets %s=%s" % (key, label, key, want[key])
            elif have[key] != want[key]:
                msg = "%s=%s in the job, %s sets %s=%s; %s" % (key, have[key], label, key, want[key],
                                                               _source(key, have[key], inherited))
            else:
                continue
            found.setdefault(msg, []).append(host)
    problems = ["%s (on %s)" % (msg, ", ".join(hosts)) for msg, hosts in found.items()]
    for host in blocks.unfinished:
        problems.append("the hpq-env block of %s has no end line (the log is cut short)" % host)
    if nodes and len(blocks.nodes) < nodes:
        problems.append("hpq-env blocks from %d of %d node(s): the rest of the job's environment is unknown"
                        % (len(blocks.nodes), nodes))
    return problems


def check(text: str, expected: Mapping[str, str], inherited: Mapping[str, str], label: str,
          nodes: Optional[int] = None, required: bool = False, unjudged: Sequence[str] = ()) -> EnvCheck:
    """Parse ``text`` and compare.

    A text without any block is no opinion (``ok`` None, no problems): a foreign log. ``required``
    (hpq's own launch, which always prints one) makes that a problem instead: no evidence is no pass.
    """
    blocks = parse(text)
    want = {k: v for k, v in expected.items() if transport.owns(k)}
    if not blocks.nodes and not blocks.unfinished:
        if required:
            return EnvCheck(want, {}, ["the job printed no hpq-env block: its ranks' transport environment is "
                                       "unknown"], False)
        return EnvCheck(want, {}, [], None)
    problems = compare(blocks, want, inherited, label, nodes, unjudged)
    return EnvCheck(want, blocks.nodes, problems, not problems)
