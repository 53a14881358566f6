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

Fixtures: the ones tests in several folders use are defined here; a folder's own are in its conftest.py
(tests/README.md lists them). No test module imports a fixture. Every test is marked by what it needs
(``unit``, ``daemons``, ``root``, ``torch``: tests/markers.py), derived from its fixtures and explicit marks.
"""

from __future__ import annotations

import os
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpq.standins import imds
from tests import cfn_render, kube_standins, markers
from tests import moto_server as moto
from tests import slurm_cluster as slurm
from tests import sshd as sshd_standin

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with what it needs (tests/markers.py): ``-m unit`` selects those that need nothing."""
    for item in items:
        have = {m.name for m in item.iter_markers()}
        for name in sorted(markers.needs(item.fixturenames, have) - have):
            item.add_marker(getattr(pytest.mark, name))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``root`` fails at once, saying so, when not run as root: a skip would count as passing
    (CI runs the suite as root; leave these out with ``-m "not root"``)."""
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.fail(f"{item.nodeid} needs root (tests/README.md); CI runs the suite as root: run as root, "
                    "or leave these tests out with -m 'not root'", pytrace=False)


# ------------------------------------------------------------------------------- fixtures of several folders


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of an ``hpq rehearse`` run (rehearsal/, validation/): this one without AWS_/HPQ_/SLURM_
    settings, the rehearsal's logs under the test's tmp_path."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HPQ_", "SLURM_"))}
    e["HPQ_REHEARSE_LOG_DIR"] = str(tmp_path / "logs")
    return e


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a plain ``moto_server`` (session-wide; tests use unique resource names): tests/moto_server.py."""
    yield from moto.moto_server(tmp_path_factory)


@pytest.fixture
def aws_env(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """boto3 pointed at ``moto_server`` (AWS_ENDPOINT_URL, dummy credentials, no config files), us-east-1."""
    moto.set_aws_env(monkeypatch, moto_server, tmp_path)
    return moto_server


@pytest.fixture
def moto_aws(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The same for the EKS tests, in us-west-2 (no reset between tests: names no other test deletes)."""
    return kube_standins.moto_aws(moto_server, monkeypatch, tmp_path)


@pytest.fixture
def fake_kube(tmp_path: Path) -> Iterator[kube_standins.FakeKube]:
    """The Kubernetes API stand-in over HTTPS (tests/kube_standins.py)."""
    yield from kube_standins.serve_fake_kube(tmp_path)


@pytest.fixture(scope="session")
def rendered() -> dict[tuple[str, str], dict[str, dict]]:
    """(variant, size) -> {file name: template dict}, with default parameters (tests/cfn_render.py)."""
    return cfn_render.render_all()


@pytest.fixture
def imds_factory() -> Iterator:
    """``imds_factory(nodes, **faults)``: IMDS stand-ins (hpq.standins.imds, the rehearsal's) for ``nodes`` (URL
    prefix -> answers: ``instance-id``, ``instance-type`` as IMDS reports it, ``region``; "" is the root) with the
    faults of :class:`hpq.standins.imds.Faults`; all stopped at teardown. ``http://127.0.0.1:PORT/<node>`` is
    node ``<node>``'s IMDS."""
    started: list[imds.Server] = []

    def make(nodes: dict[str, dict[str, str]] | None = None, **faults) -> imds.Server:
        answers = nodes or {"": DEFAULT_IMDS_NODE}
        srv = imds.start({k: imds.Metadata.of(v) for k, v in answers.items()}, imds.Faults(**faults))
        started.append(srv)
        return srv

    yield make
    for srv in started:
        imds.stop(srv)


DEFAULT_IMDS_NODE = {"instance-id": "i-0123456789abcdef0", "instance-type": "p5.48xlarge"}


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.SlurmCluster]:
    """A running configless Slurm cluster (controller + node-1 + node-2) set up by the lifecycle: tests/slurm_cluster.py."""
    yield from slurm.start(tmp_path_factory)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sshd_standin.Sshd]:
    """A real OpenSSH sshd on 127.0.0.1 with a relay as its ProxyCommand (SSM's stand-in): tests/sshd.py."""
    yield from sshd_standin.start(tmp_path_factory)


@pytest.fixture(autouse=True)
def _results_saved_in_the_tests_folder(tmp_path_factory: pytest.TempPathFactory,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`hpq test` and `hpq doctor` save each result under $XDG_STATE_HOME (hpq.validation.saved): in a folder of
    the test's own, never the home of whoever runs the suite (subprocesses inherit it)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
