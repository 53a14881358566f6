"""Signals held back while a block runs, delivered when it is done: a Ctrl-C lands between two whole steps.

Its own module, not hpq.interrupts: that one is imported first by the process entry and must import nothing
but os and signal before Ctrl-C becomes one line (tests/cli/test_properties_laptop.py sends SIGINT then).
"""

import contextlib
import signal
import threading


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
