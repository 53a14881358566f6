"""Process entry of the node commands (run-nccl-test, run-nccom-test, run-nanogpt): clean exits.

Why: the commands' own code reports its results; what it cannot see is the process around it.
A Ctrl-C while Python imports, or after ``main`` returned, was a KeyboardInterrupt traceback; a
closed stdout (``>&-``) silently dropped every result line while the benchmark ran on; a reader
that left (``| head``) ended in a BrokenPipeError traceback. Here each is one line on stderr:
Ctrl-C exit 130, a closed stdout exit 2 (before anything runs), a reader gone exit 1.
The bin wrappers install the same Ctrl-C handler (``interrupt_handler``) before any import.
Standard library only (python3.7+ on the nodes).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

INTERRUPTED = 130
USAGE = 2
FAILED = 1


def _say(line):
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass  # stderr closed too: the exit status still tells


def interrupt_handler(name):
    """A SIGINT handler that ends the process at once: one line, exit 130 (nothing to clean up yet)."""
    def handler(signum, frame):
        _say("%s: interrupted" % name)
        os._exit(INTERRUPTED)
    return handler


def _silence_stdout():
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
    except OSError:
        pass


def run(module, name):
    """Import ``module`` and return its ``main()``'s exit code; every way out is one line at most."""
    signal.signal(signal.SIGINT, interrupt_handler(name))
    if sys.stdout is None:
        _say("%s: error: standard output is closed" % name)
        return USAGE
    main = importlib.import_module(module).main
    # While main runs, Ctrl-C is a KeyboardInterrupt: its own handlers stop what it started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, interrupt_handler(name))
        _say("%s: interrupted" % name)
        return INTERRUPTED
    except BrokenPipeError:
        signal.signal(signal.SIGINT, interrupt_handler(name))
        _silence_stdout()
        _say("%s: error: standard output was closed by its reader" % name)
        return FAILED
    signal.signal(signal.SIGINT, interrupt_handler(name))
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        _say("%s: error: standard output was closed by its reader" % name)
        return FAILED
    except (OSError, ValueError) as exc:
        _silence_stdout()
        _say("%s: error: cannot write standard output: %s" % (name, getattr(exc, "strerror", None) or exc))
        return FAILED
    return code
