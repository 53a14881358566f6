"""The rehearsal as a validation backend: ``hpq test nccl|nanogpt|sweep NAME`` on a kept rehearsal.

A rehearsal's cluster is the Slurm backend (hpq.validation.slurm) over SSH straight to the controller's
namespace, named ``rehearsal``, on a network that stands in for the instance type's (a veth bridge, gloo on
this machine's CPUs). The rehearsal's own stages use it, and so does ``hpq test`` once :func:`find` has
found the cluster in the local rehearsal state (no AWS call: the emulated account stops with the rehearsal).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path

from hpq.aws.ssh import SshTarget
from hpq.errors import UsageError
from hpq.rehearsal import image, state
from hpq.rehearsal.plan import CONTROLLER, Plan
from hpq.validation.backend import ClusterFacts, Echo
from hpq.validation.request import NCCL, NCCOM, TestRequest
from hpq.validation.result import RawOutcome, TestResult
from hpq.validation.slurm import SlurmBackend, SshShell

NAME = "rehearsal"  # the backend every result of a rehearsal's test names
CLUSTER_NAME_RE = re.compile(r"hpq-rehearse-([0-9a-f]{6})")  # plan.new_plan's cluster names
BRIDGE_EXPECT = "none"  # the bridge's bandwidth is reported, not held to the catalog (docs/rehearse.md)


def controller_shell(host: str, key: str, known_hosts: str, user: str = image.DEFAULT_USER) -> SshShell:
    """A login shell on the controller: SSH straight to its namespace's sshd (no SSM hop in a rehearsal)."""
    return SshShell(SshTarget(host, None, user, 22, key, known_hosts, connect_timeout=20.0))


def facts(plan: Plan) -> ClusterFacts:
    """What the rehearsal knows of its cluster without asking anything: its name and its workers' type."""
    return ClusterFacts(plan.cluster_name, plan.orchestrator, plan.worker_type)


class _Routed:
    """The controller's shell with the node program's stderr sent where the backend's ``on_stderr_line`` says
    (the rehearsal's own progress), else where the Slurm backend sends it (the user's stderr)."""

    def __init__(self, backend: RehearsalBackend):
        self.backend = backend

    def run(self, command: str, echo: Callable[[bytes], None] | None = None, timeout: float | None = None,
            on_stderr_line: Callable[[str], None] | None = None) -> tuple[int, str, str]:
        return self.backend.controller.run(command, echo, timeout, self.backend.on_stderr_line or on_stderr_line)


class RehearsalBackend(SlurmBackend):
    """The Slurm backend over the rehearsal's bridge.

    A bandwidth test without ``--expect`` runs and is judged with ``--expect none`` (a veth bridge says nothing
    about the type's network); the last raw outcome is kept, for the rehearsal's own checks of it (the ranks'
    environment blocks, the sweep's report).
    """

    def __init__(self, shell: SshShell, cluster: ClusterFacts):
        self.controller = shell
        self.on_stderr_line: Callable[[str], None] | None = None  # None: the user's stderr, as on any cluster
        super().__init__(_Routed(self), cluster, name=NAME, stand_in_network=True)
        self.last_raw: RawOutcome | None = None

    @staticmethod
    def on_bridge(request: TestRequest) -> TestRequest:
        if request.test in (NCCL, NCCOM) and request.expect is None:
            return dataclasses.replace(request, expect=BRIDGE_EXPECT)
        return request

    def run(self, request: TestRequest, instance_type: str | None, echo: Echo) -> RawOutcome:
        self.last_raw = None
        self.last_raw = super().run(self.on_bridge(request), instance_type, echo)
        return self.last_raw

    def judge(self, request: TestRequest, raw: RawOutcome, instance_type: str | None) -> TestResult:
        return super().judge(self.on_bridge(request), raw, instance_type)


def find(cluster: str) -> RehearsalBackend | None:
    """The backend of the rehearsal whose cluster is named ``cluster`` (``hpq-rehearse-<run id>``), from the local
    rehearsal state; None when no rehearsal on this machine has that name (then the cluster is a real one).

    A recorded rehearsal that cannot serve (an EKS one, its controller gone, its files unreadable without root)
    is a UsageError naming why, not a lookup in AWS for a cluster that only ever existed here."""
    m = CLUSTER_NAME_RE.fullmatch(cluster)
    if m is None:
        return None
    path = state.STATE_DIR / f"{m.group(1)}.json"
    if not path.exists():
        return None
    st = state.RunState.load(path)  # StateError (exit 2) when it cannot be trusted or read (not root)
    if st.cluster_name not in ("", cluster):
        return None
    if not st.variant.startswith("slurm"):
        raise UsageError(f"rehearsal {st.run_id} ({st.variant}) has no Slurm controller and no Kubernetes API server: "
                         "nothing runs the tests there (docs/rehearse.md)")
    ctl = next((n for n in st.nodes if n.role == CONTROLLER), None)
    if ctl is None or state.holder(ctl) is None or not st.ssh_key:
        raise UsageError(f"rehearsal {st.run_id} is not running (its controller is gone): start one with "
                         "`hpq rehearse --keep`, remove this one with `hpq rehearse down`")
    if not os.access(st.ssh_key, os.R_OK):
        raise UsageError(f"rehearsal {st.run_id}: cannot read its SSH key {st.ssh_key}: run as root, like hpq rehearse")
    shell = controller_shell(ctl.ip, st.ssh_key, str(Path(st.workdir) / "ssh" / "known_hosts"))
    return RehearsalBackend(shell, ClusterFacts(cluster, "slurm", st.worker_type or None))
