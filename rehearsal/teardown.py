"""One teardown stack for the rehearsal: every stage pushes the undo of what it created, right after creating it.

Why one stack: the undos then run in the reverse order of creation on every way out (success, a failure, Ctrl-C,
SIGTERM/SIGHUP) from one place, a failing undo is reported without stopping the others, and a kept rehearsal
(``--keep``) skips exactly the undos that remove what ``hpq rehearse shell`` still needs.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hpq.signals_held import held_back

HELD_BACK = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # held back while the stack unwinds
RAISED = (signal.SIGTERM, signal.SIGHUP)  # turned into Interrupted while the stages run (SIGINT: KeyboardInterrupt)

Problems = Iterable[str] | None  # what an undo says it could not remove (None or empty: all gone)


class Interrupted(BaseException):
    """A signal stopped the stages; the stack still unwinds."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Undo:
    name: str
    action: Callable[[], Problems]
    when_kept: Callable[[], Problems] | None = None  # what runs instead on a kept run (None: nothing)
    kept_too: bool = False  # runs on a kept run as well (log collection)
    only_if_failed: bool = False
    only_if_passed: bool = False


class TeardownStack:
    """Undos in creation order; :meth:`close` runs them newest first, once."""

    def __init__(self) -> None:
        self.undos: list[Undo] = []
        self.closed = False

    def push(self, name: str, action: Callable[[], Problems], *, when_kept: Callable[[], Problems] | None = None,
             kept_too: bool = False, only_if_failed: bool = False, only_if_passed: bool = False) -> None:
        self.undos.append(Undo(name, action, when_kept, kept_too, only_if_failed, only_if_passed))

    def close(self, failed: bool, keep: bool = False) -> list[str]:
        """Run every undo that applies, newest first, with SIGINT/SIGTERM/SIGHUP held back until all have run.

        Returns what was left behind: each undo's own problems, and ``NAME: error`` for an undo that raised."""
        if self.closed:
            return []
        self.closed = True
        problems: list[str] = []
        with held_back(HELD_BACK):
            while self.undos:
                undo = self.undos.pop()
                if (undo.only_if_failed and not failed) or (undo.only_if_passed and failed):
                    continue
                action = undo.action
                if keep and not undo.kept_too:
                    if undo.when_kept is None:
                        continue
                    action = undo.when_kept
                try:
                    problems.extend(action() or [])
                except Exception as exc:  # noqa: BLE001 - one failing undo must not stop the others
                    problems.append(f"{undo.name}: {type(exc).__name__}: {exc}")
        return problems


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread while the block runs."""

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.getsignal(s) for s in RAISED}
    for s in RAISED:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
