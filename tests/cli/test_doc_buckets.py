"""Every bucket a reader may paste from the docs or the help passes the CLI's own bucket check. Issue 25: the
README and quickstart said `hpq deploy slurm-gpu MY-BUCKET`, which the CLI refuses ("invalid S3 bucket name
'MY-BUCKET'", exit 2). docs/bad-input.md is left out: it lists refused inputs on purpose."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpq.cli import inputs
from hpq.cli.main import cli
from tests.support import CHECKOUT

ROOT = Path(CHECKOUT)
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "bad-input.md")]
# The metavar in a usage line and patterns that are not values ("...", "<TAB>", "eks-*") are not pasted as is.
NOT_A_VALUE = re.compile(r"^(BUCKET|VARIANT)$|\.\.\.|[<>*]")


def buckets_in(text: str) -> list[str]:
    """The BUCKET argument of every `hpq deploy VARIANT BUCKET` / `hpq publish BUCKET` in ``text``."""
    found = []
    for m in re.finditer(r"hpq (deploy|publish) ([^\n`|#]*)", text):
        try:
            words = [w for w in shlex.split(m.group(2)) if not w.startswith("-")]
        except ValueError:
            continue
        index = 1 if m.group(1) == "deploy" else 0
        if len(words) > index and not NOT_A_VALUE.search(words[index]) and not NOT_A_VALUE.search(words[0]):
            found.append(words[index])
    return found


def help_texts() -> str:
    runner = CliRunner()
    return "\n".join(runner.invoke(cli, [name, "--help"]).output for name in ("deploy", "publish"))


def all_buckets() -> list[tuple[str, str]]:
    out = [(p.relative_to(ROOT).as_posix(), b) for p in DOCS for b in buckets_in(p.read_text(encoding="utf-8"))]
    return sorted(set(out + [("--help", b) for b in buckets_in(help_texts())]))


def test_the_docs_name_buckets():
    where = {w for w, _ in all_buckets()}
    assert {"README.md", "docs/quickstart.md", "--help"} <= where, where


@pytest.mark.parametrize("where,bucket", all_buckets())
def test_every_bucket_placeholder_passes_the_bucket_check(where, bucket):
    inputs.BUCKET.convert(bucket, None, None)


def test_the_old_placeholder_is_caught():
    """Broken twin: what the README said before is refused by the same check and found by the same scan."""
    assert buckets_in("hpq deploy slurm-gpu MY-BUCKET --region us-west-2   # x") == ["MY-BUCKET"]
    with pytest.raises(click.BadParameter):
        inputs.BUCKET.convert("MY-BUCKET", None, None)
