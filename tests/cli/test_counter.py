"""hpq.cli.printing.counter: ``\\r`` in place on a terminal, whole lines elsewhere (a CI log). Issue 25: `hpq lint`
wrote its 40 counters with ``\\r`` and no newline into CI logs, all on one line."""

from __future__ import annotations

import io

from hpq.cli import printing


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(stream: io.StringIO, total: int) -> str:
    report = printing.counter("cfn-lint", stream)
    for done in range(1, total + 1):
        report(done, total)
    return stream.getvalue()


def test_a_log_gets_one_whole_line_per_tenth_and_the_last():
    text = run(io.StringIO(), 40)
    assert "\r" not in text and text.endswith("\n")
    assert text.splitlines() == [f"hpq: cfn-lint {i}/40 files" for i in (1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40)]
    assert run(io.StringIO(), 3).splitlines() == [f"hpq: cfn-lint {i}/3 files" for i in (1, 2, 3)]


def test_a_terminal_gets_one_line_rewritten_in_place():
    text = run(Terminal(), 40)
    assert text.count("\r") == 40 and text.count("\n") == 1 and text.endswith("\rhpq: cfn-lint 40/40 files\n")
