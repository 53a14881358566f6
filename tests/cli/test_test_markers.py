"""The markers that say what a test needs (tests/markers.py, pyproject's markers): derived from the fixtures a
test uses, so ``pytest -m unit`` selects exactly the tests that start nothing and need neither root nor torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests import markers
from tests.support import CHECKOUT

SLURM_TESTS = Path(__file__).resolve().parents[1] / "scripts" / "test_node_env_shells.py"


def test_fixtures_say_what_a_test_needs():
    assert markers.needs(["tmp_path", "monkeypatch"], []) == {"unit"}
    assert markers.needs(["slurm_cluster", "tmp_path"], []) == {"daemons", "root"}
    assert markers.needs(["aws_env", "moto_server"], []) == {"daemons"}  # aws_env's closure holds moto_server
    assert markers.needs(["tmp_path"], ["slow", "torch"]) == {"torch"}  # an explicit mark; slow says nothing


def _collected(*args: str) -> list[str]:
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 5), res.stdout[-2000:] + res.stderr[-2000:]  # 5: nothing selected
    return sorted(line for line in res.stdout.splitlines() if "::" in line)


def _uses(path: Path, fixture: str) -> tuple[set[str], set[str]]:
    """Test function names in ``path`` that take ``fixture`` as a parameter, and those that do not."""
    tree = ast.parse(path.read_text())
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    using = {n.name for n in tests if fixture in {a.arg for a in n.args.args}}
    return using, {n.name for n in tests} - using


def test_a_test_of_the_slurm_fixture_is_daemons_and_root_and_the_others_unit():
    """On a file that mixes both: the ids -m unit and -m daemons select, against the file's own parameters."""
    using, rest = _uses(SLURM_TESTS, "slurm_cluster")
    assert using and rest, "the file no longer mixes tests with and without slurm_cluster: pick another"
    rel = str(SLURM_TESTS.relative_to(CHECKOUT))

    def names(ids: list[str]) -> set[str]:
        return {i.split("::", 1)[1].split("[", 1)[0] for i in ids}

    assert names(_collected(rel, "-m", "unit")) == rest
    assert names(_collected(rel, "-m", "daemons and root")) == using
    assert names(_collected(rel, "-m", "daemons or root or torch")) == using
    assert _collected(rel, "-m", "unit and (daemons or root or torch)") == []
    assert len(_collected(rel)) == len(_collected(rel, "-m", "unit")) + len(_collected(rel, "-m", "not unit"))


def test_slow_selects_as_before():
    """``-m slow`` / ``-m 'not slow'`` (CI and dev scripts) split the file exactly as its own marks say."""
    rel = str(SLURM_TESTS.relative_to(CHECKOUT))
    slow, fast = _collected(rel, "-m", "slow"), _collected(rel, "-m", "not slow")
    assert slow and not set(slow) & set(fast) and len(slow) + len(fast) == len(_collected(rel))
    using, _ = _uses(SLURM_TESTS, "slurm_cluster")  # in this file exactly the real-Slurm tests are slow
    assert {i.split("::", 1)[1].split("[", 1)[0] for i in slow} == using


def _fixture_names(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if "pytest.fixture" in ast.unparse(deco):
                    named = [k.value.value for k in getattr(deco, "keywords", []) if k.arg == "name"]
                    out.add(named[0] if named else node.name)
    return out


def test_no_test_module_imports_a_fixture():
    """Fixtures come from the conftest.py of the folder (or tests/conftest.py), never imported by hand: an import
    hides from pytest and from the markers where a fixture is defined, and needs a ``noqa: F811``."""
    root = Path(CHECKOUT) / "tests"
    trees = {p: ast.parse(p.read_text()) for p in root.rglob("*.py")}
    fixtures = set().union(*(_fixture_names(t) for t in trees.values()))
    assert {"slurm_cluster", "moto_server", "fake_helm", "env"} <= fixtures  # the scan finds them
    imported = [f"{p.relative_to(root)}: {a.name} from {n.module}" for p, t in trees.items()
                if p.name.startswith("test_") for n in ast.walk(t)
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tests")
                for a in n.names if a.name in fixtures]
    assert imported == []
