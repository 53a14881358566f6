"""Ctrl-C as one line and exit 130, for the moments when nothing is left to clean up.

Used by the process entry (hpq.console: before anything else is imported) and by the command line
after a command finished (hpq.cli.main). Standard library only, like the rest of the ground floor.
"""

import os
import signal

INTERRUPTED_EXIT = 130


def _interrupted(signum, frame):  # noqa: ARG001 - the signal handler's signature
    try:
        os.write(2, b"hpq: interrupted\n")
    except OSError:
        pass  # stderr closed: the exit status still says it
    os._exit(INTERRUPTED_EXIT)


def hard_interrupts() -> None:
    """From now on Ctrl-C ends the process at once with one line (nothing left to clean up)."""
    try:
        signal.signal(signal.SIGINT, _interrupted)
    except ValueError:
        pass  # not the main thread (an embedding program): its own handling stays
