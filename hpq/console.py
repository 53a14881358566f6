"""The ``hpq`` process entry: Ctrl-C is one line and exit 130 from the first instant.

Why a module of its own: the console script and ``python -m hpq`` import the CLI (click, then
boto3 and the rest lazily) before any handler in it can run; a Ctrl-C in those first ~0.3 s was a
KeyboardInterrupt traceback. This file installs the handler (hpq.interrupts, standard library only)
before the command line is imported. It is the roof of the house, not its ground floor: nothing
imports it (dev/import_graph.py draws it as ``hpq.entry``).
"""

from hpq.interrupts import hard_interrupts


def main() -> None:
    hard_interrupts()
    import hpq.cli.main  # after the handler: importing the command line takes a while

    hpq.cli.main.main(process_entry=True)


if __name__ == "__main__":
    main()
