"""The ``hpq`` process entry: Ctrl-C is one line and exit 130 from the first instant.

Why a module of its own: the console script and ``python -m hpq`` import the CLI (click, then
boto3 and the rest lazily) before any handler in it can run; a Ctrl-C in those first ~0.3 s was a
KeyboardInterrupt traceback. This file imports only the standard library and installs the handler
before anything else is imported. Standard library only, like the rest of the ``hpq`` package root.
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


def main() -> None:
    hard_interrupts()
    from hpq.cli.main import main as cli_main

    cli_main(process_entry=True)


if __name__ == "__main__":
    main()
