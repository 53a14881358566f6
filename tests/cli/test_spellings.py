"""One spelling per concept across every hpq command (issue 25 item 5).

The checker walks the whole click tree (every command, every group's subcommands), sorts each
parameter into a concept by what it holds (its destination name and type, never by how it is spelled),
and reports every parameter whose spelling is not the concept's canonical one in
hpq.cli.common_options.SPELLINGS. It is proven on broken twins (small click trees that spell a concept
a second way). docs/cli.md's table must list the same concepts and spellings.
Old spellings (common_options.DeprecatedSpelling) still parse into the same value, with one note line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpq.cli import inputs
from hpq.cli.common_options import SPELLINGS, DeprecatedSpelling, deprecated_spelling
from hpq.cli.inputs.choices import InstanceType
from hpq.cli.main import cli
from hpq.lifecycle import transport

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def walk(cmd: click.Command, path: tuple[str, ...] = ("hpq",)) -> Iterator[tuple[str, click.Command]]:
    """Every leaf command with its full name, through lazy and nested groups."""
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=path[-1])
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            yield from walk(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def concept_of(param: click.Parameter) -> str | None:
    """Which concept a parameter holds, judged by its destination and type (not its spelling)."""
    name, kind = param.name or "", param.type
    if isinstance(kind, click.Choice) and tuple(kind.choices) == tuple(transport.PROFILES):
        return "NCCL profile"
    if isinstance(kind, click.Choice) and "json" in kind.choices or name in ("output", "fmt", "format"):
        return "output format"
    if name in ("out", "output_dir", "out_dir"):
        return "output file or folder"
    if name == "profile":
        return "AWS profile"
    if name in ("region", "regions"):
        return "AWS region"
    if isinstance(kind, InstanceType) and name != "controller_type":
        return "instance type"
    if name in ("nodes", "workers", "count", "node_count", "instances"):
        return "node count"
    if name in ("yes", "assume_yes"):
        return "assume yes"
    if kind is inputs.STACK:
        return "stack"
    if kind in (inputs.HYPERPOD_CLUSTER, inputs.EKS_CLUSTER):
        return "cluster"
    return None


def spelling(param: click.Parameter) -> tuple[str, ...]:
    if isinstance(param, click.Argument):
        return (param.name or "",)
    return tuple(sorted(param.opts))


def disagreements(root: click.Command) -> list[str]:
    """Every parameter spelled other than its concept's canonical spelling (hidden old spellings aside)."""
    found = []
    for where, cmd in walk(root):
        for param in cmd.params:
            if isinstance(param, DeprecatedSpelling):
                continue
            concept = concept_of(param)
            if concept is None:
                continue
            want = tuple(sorted(SPELLINGS[concept][0]))
            have = spelling(param)
            if isinstance(param, click.Argument):
                want = tuple(w for w in want if not w.startswith("-")) or (param.name or "",)
                if concept == "instance type":
                    want = ("instance_type",)
                if concept == "node count":
                    want = ("nodes",)
            if have != want:
                found.append(f"{where}: {concept} is spelled {'/'.join(have)}, not {'/'.join(want)}")
    return found


def test_every_command_spells_each_concept_one_way():
    assert disagreements(cli) == []


def test_the_walk_sees_every_command_and_concept():
    """The checker must see the tree it judges: all commands, and each concept used somewhere."""
    names = [w for w, _ in walk(cli)]
    assert len(names) >= 30 and "hpq test nccl" in names and "hpq rehearse run" in names
    seen = {concept_of(p) for _, c in walk(cli) for p in c.params}
    assert set(SPELLINGS) <= seen


def _twin(*commands: click.Command) -> click.Group:
    group = click.Group("hpq")
    for c in commands:
        group.add_command(c)
    return group


@click.command("good")
@click.option("--output", type=click.Choice(["table", "json"]))
@click.option("--nodes", "-n", type=int)
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
def _good(output: str, nodes: int, cluster: str) -> None:
    pass


@click.command("bad-format")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]))
def _bad_format(fmt: str) -> None:
    pass


@click.command("bad-workers")
@click.option("--workers", type=int)
def _bad_workers(workers: int) -> None:
    pass


@click.command("bad-profile")
@click.option("--profile", type=click.Choice(transport.PROFILES))
def _bad_profile(profile: str) -> None:
    pass


@click.command("bad-stack")
@click.argument("name", type=inputs.STACK)
def _bad_stack(name: str) -> None:
    pass


@click.command("bad-type")
@click.option("--instance-type", "-i", type=inputs.INSTANCE_TYPE)
def _bad_type(instance_type: str) -> None:
    pass


@pytest.mark.parametrize("broken", [_bad_format, _bad_workers, _bad_profile, _bad_stack, _bad_type],
                         ids=lambda c: c.name)
def test_a_second_spelling_is_caught_on_a_broken_twin(broken: click.Command):
    assert disagreements(_twin(_good)) == []
    found = disagreements(_twin(_good, broken))
    assert len(found) == 1 and found[0].startswith(f"hpq {broken.name}:"), found


def test_docs_cli_table_matches_the_code():
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| ([^|`]+?) \| ((?:`[^`]+`(?:, )?)+) \|", line)
        if m:
            rows[m.group(1).strip()] = tuple(re.findall(r"`([^`]+)`", m.group(2)))
    want = {c: tuple(s if not s[0].isalpha() else s.upper() for s in spell) for c, (spell, _) in SPELLINGS.items()}
    assert rows == want


# Every old spelling: (old argv, new argv) for one command; both must parse to the same values.
OLD_SPELLINGS = {
    ("hpq nccl-env", "--format"): (["ml.p5.48xlarge", "--format", "json"], ["ml.p5.48xlarge", "--output", "json"]),
    ("hpq nccl-env", "--profile"): (["ml.p5.48xlarge", "--profile", "legacy"],
                                    ["ml.p5.48xlarge", "--nccl-profile", "legacy"]),
    ("hpq nccl-report", "-i"): (["-", "-i", "ml.p5.48xlarge"], ["-", "-t", "ml.p5.48xlarge"]),
    ("hpq nccl-report", "-o"): (["-", "-o", "json"], ["-", "--output", "json"]),
    ("hpq rehearse run", "--workers"): (["--workers", "3"], ["--nodes", "3"]),
}


def _old_spellings() -> dict[tuple[str, str], click.Command]:
    return {(w, p.opts[0]): c for w, c in walk(cli) for p in c.params if isinstance(p, DeprecatedSpelling)}


def test_every_old_spelling_has_a_case_here():
    assert set(_old_spellings()) == set(OLD_SPELLINGS)


@pytest.mark.parametrize("key", sorted(OLD_SPELLINGS), ids=lambda k: f"{k[0]} {k[1]}")
def test_old_spelling_still_works_and_says_so(key: tuple[str, str], capsys: pytest.CaptureFixture[str]):
    cmd = _old_spellings()[key]
    old, new = OLD_SPELLINGS[key]
    params_old = cmd.make_context(key[0], list(old)).params
    note = capsys.readouterr().err
    params_new = cmd.make_context(key[0], list(new)).params
    assert capsys.readouterr().err == ""
    assert params_old == params_new
    assert note.count("\n") == 1 and note.startswith(f"hpq: note: {key[1]} is deprecated"), note
    default = cmd.make_context(key[0], list(new[:-2])).params  # every case ends in the option and its value
    assert default != params_new, "the case must set something other than the default"


def test_giving_both_spellings_is_refused():
    cmd = _old_spellings()[("hpq nccl-env", "--format")]
    for args in (["ml.p5.48xlarge", "--format", "json", "--output", "sh"],
                 ["ml.p5.48xlarge", "--output", "sh", "--format", "json"]):
        with pytest.raises(click.UsageError, match="old spelling of --output"):
            cmd.make_context("nccl-env", args)


def test_old_spelling_end_to_end_changes_the_output():
    """Through the real entry point: --profile legacy (old) gives legacy's variables, with the note."""
    run = [sys.executable, "-m", "hpq", "nccl-env", "ml.p5.48xlarge"]
    old = subprocess.run([*run, "--profile", "legacy", "--format", "json"], capture_output=True, text=True)
    new = subprocess.run([*run, "--nccl-profile", "legacy", "--output", "json"], capture_output=True, text=True)
    plain = subprocess.run([*run, "--output", "json"], capture_output=True, text=True)
    assert old.returncode == new.returncode == 0
    assert old.stdout == new.stdout != plain.stdout and "NCCL_BUFFSIZE" in new.stdout
    assert [ln.split(" is ")[0] for ln in old.stderr.splitlines()] == ["hpq: note: --profile", "hpq: note: --format"]


def test_deprecated_helper_on_a_twin():
    """The helper itself: the old spelling fills the canonical value; absent, the default stays."""
    @click.command()
    @deprecated_spelling("--format", canonical="output", new_flag="--output", type=click.Choice(["a", "b"]))
    @click.option("--output", type=click.Choice(["a", "b"]), default="a")
    def twin(output: str) -> None:
        click.echo(output)

    r = CliRunner().invoke(twin, ["--format", "b"])
    assert r.exit_code == 0 and r.stdout.splitlines()[-1] == "b"
    assert CliRunner().invoke(twin, []).stdout == "a\n"
    assert "--format" not in CliRunner().invoke(twin, ["--help"]).stdout
