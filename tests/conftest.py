"""Session-wide test set-up.

The test command may run from a virtualenv that is not on PATH (``/tmp/v/bin/python -m pytest``):
console scripts the tests start by name (torchrun, aws, moto_server, cfn-lint) live in the
interpreter's own scripts directory, so that directory goes first on PATH for every subprocess.

Under ``pytest --cov`` (dev/test.sh), coverage measures subprocesses of the test interpreter by
itself (``patch = subprocess`` in pyproject.toml). Node-side code, though, runs under the node's
own python3 (/usr/bin/python3, as on a HyperPod node), which has no coverage installed: a folder
holding only a link to the coverage package and a ``sitecustomize`` that starts it goes first on
PYTHONPATH, so those processes are measured too. Without --cov nothing of this happens.
"""

from __future__ import annotations

import os
import sysconfig
import tempfile
from pathlib import Path

import pytest

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
