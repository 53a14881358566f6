"""Session-wide test set-up.

The test command may run from a virtualenv that is not on PATH (``/tmp/v/bin/python -m pytest``):
console scripts the tests start by name (torchrun, aws, moto_server, cfn-lint) live in the
interpreter's own scripts directory, so that directory goes first on PATH for every subprocess.

Under ``pytest --cov`` (dev/test.sh), coverage measures subprocesses of the test interpreter by
itself (``patch = subprocess`` in pyproject.toml). Node-side code, though, runs under the node's
own python3 (/usr/bin/python3, as on a HyperPod node), which has no coverage installed: a folder
holding only a link to the coverage package and a ``sitecustomize`` that starts it goes first on
PYTHONPATH, so those processes are measured too. Without --cov nothing of this happens.

Hypothesis (the property tests) runs under one registered profile, ``ci``, unless
``HYPOTHESIS_PROFILE`` names another: derandomized (the examples follow from each test's own code,
so every run of the suite tries the same inputs and a failure in CI is one a developer reproduces
with the same command), a fixed number of examples (the suite's time stays bounded: a few seconds per
property test) and no per-example deadline (on a busy machine a deadline turns slowness into "Flaky"
failures), no example database written into the checkout.
``HYPOTHESIS_PROFILE=explore`` searches randomly and longer, to find new cases; each one found is
kept in its test as an ``@example``.
"""

from __future__ import annotations

import os
import sysconfig
import tempfile
from pathlib import Path

import pytest

# The fixtures every folder's tests use, registered once here instead of imported by hand in each file.
pytest_plugins = [f"tests.{name}" for name in ("fixtures_aws", "fixtures_cfn", "fixtures_eks", "fixtures_imds",
                                               "fixtures_mpi", "fixtures_slurm", "fixtures_sshd")]

# The tests are not installed with hpq: they import as ``tests`` from the checkout (pyproject's pytest
# ``pythonpath``); the few processes that run a test module (the SSH relay, the leak probe) are given the
# checkout on PYTHONPATH themselves (tests/support.CHECKOUT), never every process: a node's python3 must
# find only its own bundle's hpq.

_scripts = sysconfig.get_path("scripts")
if _scripts and _scripts not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _scripts + os.pathsep + os.environ.get("PATH", "")


def _measure_node_python() -> None:
    if not (os.environ.get("COVERAGE_PROCESS_CONFIG") or os.environ.get("COVERAGE_PROCESS_START")):
        return
    import coverage

    boot = Path(tempfile.mkdtemp(prefix="hpq-coverage-boot-"))
    (boot / "coverage").symlink_to(Path(coverage.__file__).resolve().parent)
    (boot / "sitecustomize.py").write_text("import coverage\ncoverage.process_startup()\n")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot), os.environ.get("PYTHONPATH")) if p)


_measure_node_python()


def _hypothesis_profiles() -> None:
    try:
        from hypothesis import settings
    except ImportError:  # only the property tests need it; they fail on their own import
        return
    settings.register_profile("ci", derandomize=True, max_examples=60, deadline=None, database=None,
                              print_blob=True)
    settings.register_profile("explore", max_examples=2000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """After pytest-cov's table, the same data by package and per cli/ module (dev/coverage_by_package.py)."""
    if not config.getoption("cov_source", None):
        return
    import contextlib
    import importlib.util
    import io

    data = Path(str(config.rootpath)) / ".coverage"
    script = Path(str(config.rootpath)) / "dev" / "coverage_by_package.py"
    if not data.exists() or not script.exists():
        return
    spec = importlib.util.spec_from_file_location("hpq_coverage_by_package", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        module.main(["--data-file", str(data)])
    terminalreporter.write_sep("-", "line coverage by package")
    terminalreporter.write(out.getvalue())
