"""What a test needs, as pytest markers (registered in pyproject.toml; selection: tests/README.md).

- ``daemons``: starts real daemons or servers as processes (slurmctld/slurmd/munged, sshd, moto_server,
  Prometheus, mpirun's workers, a rehearsal's network namespaces, a browser);
- ``root``: needs root (mount or network namespaces, a uid switch, the Slurm daemons);
- ``torch``: needs torch (imports it, or runs torchrun / the torch programs);
- ``unit``: none of these: runs anywhere the test extra is installed, in seconds.

``slow`` is separate and unchanged (CI and dev scripts select on it). What a test needs is derived from the
fixtures it uses (``NEEDS_BY_FIXTURE``, their whole closure, so ``aws_env`` brings moto_server's); where no
fixture says it, the test (or its module's ``pytestmark``) carries the mark itself.
"""

from __future__ import annotations

from collections.abc import Iterable

KINDS = ("daemons", "root", "torch")
UNIT = "unit"

NEEDS_BY_FIXTURE: dict[str, frozenset[str]] = {
    "moto_server": frozenset({"daemons"}),
    "moto_server_paging": frozenset({"daemons"}),
    "sshd": frozenset({"daemons"}),
    "slurm_cluster": frozenset({"daemons", "root"}),
    "mpi_world": frozenset({"daemons", "root"}),
}


def needs(fixturenames: Iterable[str], marks: Iterable[str]) -> set[str]:
    """The markers a test gets: the kinds its fixtures or own marks name, else ``unit``."""
    marks = set(marks)
    found = {kind for kind in KINDS if kind in marks}
    for name in fixturenames:
        found |= NEEDS_BY_FIXTURE.get(name, frozenset())
    return found or {UNIT}
