"""Ctrl-C as one line and exit 130, for the moments when nothing is left to clean up.

Used by the process entry (hpq.console: before anything else is imported) and by the command line
after a command finished (hpq.cli.main). Standard library only, like the rest of the ground floor.
"""

import contextlib
import os
import signal
import threading

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


@contextlib.contextmanager
def held_back(signals=(signal.SIGINT, signal.SIGTERM)):
    """``signals`` recorded, not acted on, while the block runs; the first one is delivered again, to the handler
    it had before, once the block is done (a Ctrl-C then lands between two whole steps, never inside one).

    Python runs signal handlers in the main thread whichever thread the kernel handed the signal to, so a
    signal mask on the main thread alone does not hold a signal back once the process has other threads: the
    handlers are swapped instead. Off the main thread no handler can be set; Python's handlers never run there
    either, so there is nothing to hold back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = {s: signal.getsignal(s) for s in signals}
    for s in signals:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            signal.raise_signal(pending[0])
