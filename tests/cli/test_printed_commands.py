"""Every ``hpq ...`` line hpq prints for the user to run (deploy's "next:" block, the failure hints, the
one-line "follow with: / run:" suggestions in messages and help) parses with the current command line: the
command path resolves and every option and argument is accepted, without running anything. Issue 25: the
"next:" block still taught `hpq remote-nccl-test CLUSTER 2` and `hpq eks nccl-test --help`."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest

from hpq.aws import deploy, events
from hpq.cli.main import cli
from hpq.vocab import VARIANTS
from tests.support import CHECKOUT

SAMPLES = {"CLUSTER": "my-cluster", "STACK": "hpq-slurm-gpu", "NAME": "my-cluster", "INSTANCE_TYPE": "ml.g5.16xlarge",
           "TYPE": "ml.g5.16xlarge", "NODES": "2", "VARIANT": "slurm-gpu", "BUCKET": "my-hpq-bucket"}
# f-string fields, by a word in their expression -> a value of that kind
FIELDS = (("type", "ml.g5.16xlarge"), ("variant", "slurm-gpu"), ("reg", "us-west-2"), ("target", "out"),
          ("bucket", "my-hpq-bucket"))
FOLDERS = ("cli", "aws", "validation", "views", "rehearsal", "kube")
# A suggestion in a message: in backticks, or after "with: " / "run: " up to the end of the phrase.
SUGGESTION = re.compile(r"`(hpq [^`]+)`|(?:with|run): (hpq [^;,)\"]+)")


def parses(line: str) -> None:
    """Resolve ``line`` through the click groups and parse its arguments (conversions included), or raise."""
    words = shlex.split(line)
    assert words[0] == "hpq", line
    cmd: click.Command = cli
    try:
        ctx = cmd.make_context("hpq", words[1:], resilient_parsing=False)
        while isinstance(cmd, click.Group):
            rest = [*ctx.protected_args, *ctx.args]
            name, sub, rest = cmd.resolve_command(ctx, rest)
            assert sub is not None, f"{line}: no command {name!r}"
            cmd = sub
            ctx = sub.make_context(name, rest, parent=ctx)
    except click.MissingParameter:
        pass  # a command named in prose ("see `hpq status`"): its path and the options it names did resolve
    except click.exceptions.Exit as done:  # --help and other eager options stop the parse with status 0
        assert done.exit_code == 0, line


def concrete(line: str) -> str | None:
    """The line with its placeholders filled in; None for a pattern rather than a command (``...``, a|b, [X])."""
    line = line.strip().rstrip(".:")
    if any(mark in line for mark in ("...", "|", "[", "COMMAND", "<")):
        return None
    for field, sample in FIELDS:
        line = re.sub(r"\{[^{}]*" + field + r"[^{}]*\}", sample, line)
    line = re.sub(r"\{[^{}]*\}", "my-cluster", line)
    return " ".join(SAMPLES.get(w, w) for w in line.split(" "))


def strings_of(path: Path) -> list[str]:
    """The string literals of a module but its docstrings; f-string fields become ``{}``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                               for v in node.values))
        elif id(node) in parts:
            continue
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
    return out


def printed_suggestions() -> list[str]:
    found = set()
    for folder in FOLDERS:
        for path in sorted((Path(CHECKOUT) / folder).rglob("*.py")):
            for text in strings_of(path):
                for m in SUGGESTION.finditer(text):
                    line = concrete(m.group(1) or m.group(2))
                    if line:
                        found.add(line)
    return sorted(found)


def next_blocks() -> list[str]:
    return sorted({c for v in VARIANTS for c in deploy.next_commands(v, "hpq-" + v, {}, "us-west-2")
                   if c.startswith("hpq ")})


def hint_lines() -> list[str]:
    return sorted({concrete(m.group(1)) for _, hint in events.HINTS for m in SUGGESTION.finditer(hint)
                   if m.group(1) and concrete(m.group(1))})


def test_the_scan_finds_the_lines_users_are_told_to_run():
    lines = printed_suggestions()
    assert "hpq status my-cluster --follow --region us-west-2" in lines  # deploy --no-wait
    assert any(line.startswith("hpq check-quotas ml.g5.16xlarge 2") for line in hint_lines())
    assert "hpq test nccl hpq-slurm-gpu 2 --region us-west-2" in next_blocks()


@pytest.mark.parametrize("line", next_blocks() + hint_lines() + printed_suggestions())
def test_every_printed_command_parses(line):
    parses(line)


@pytest.mark.parametrize("line", ["hpq remote-nccl-tests my-cluster 2", "hpq test nccl my-cluster 2 --no-such",
                                  "hpq eks nccl-tst --help", "hpq test nccl my-cluster two"])
def test_a_stale_line_is_caught(line):
    """Broken twins: a renamed command, an option that does not exist, a value the type refuses."""
    with pytest.raises(click.ClickException):
        parses(line)


def taught_paths() -> set[str]:
    """The command paths (``hpq test nccl``, ``hpq status``) README.md and docs/quickstart.md teach in code lines."""
    out = set()
    for doc in ("README.md", "docs/quickstart.md"):
        for m in re.finditer(r"^\s*(hpq(?: [a-z][a-z-]*){1,2})", (Path(CHECKOUT) / doc).read_text(), re.M):
            out.add(m.group(1))
    return out


def command_path(line: str) -> str:
    """``hpq test nccl`` of ``hpq test nccl my-cluster 2 --region r`` (the words that name groups and commands)."""
    words, cmd, path = shlex.split(line)[1:], cli, ["hpq"]
    ctx = click.Context(cli)
    while isinstance(cmd, click.Group) and words:
        cmd = cmd.get_command(ctx, words[0])
        path.append(words.pop(0))
    return " ".join(path)


def test_the_next_block_teaches_what_the_quickstart_teaches():
    """Not an older command that still parses (remote-nccl-test, eks nccl-test): the one the docs teach."""
    taught = {" ".join(p.split()[:3]) for p in taught_paths()} | {" ".join(p.split()[:2]) for p in taught_paths()}
    for line in next_blocks():
        assert command_path(line) in taught, (line, sorted(taught))
    stale = "hpq remote-nccl-test my-cluster 2 --region us-west-2"  # broken twin: what the block printed before
    assert command_path(stale) not in taught
