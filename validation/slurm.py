"""The Slurm backend: the node programs run on the controller over SSH, as a user would type them.

The same backend serves a real cluster (SSH tunnelled through SSM to the controller, aws/ssh.py) and the
rehearsal (SSH straight to the controller's namespace): only the :class:`SshShell`'s target differs. The
node programs are hpq's own (scripts/bin: run-nccl-test, run-nccom-test, run-nanogpt, run-node-doctor), which the lifecycle
installs on every node; they launch through Slurm themselves (srun/sbatch), print the log on stdout and
judge it with the same code the laptop's judge uses.
"""

from __future__ import annotations

import io
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpq.aws import ssh
from hpq.errors import UsageError
from hpq.scripts import nccl_report
from hpq.validation import doctor, judges
from hpq.validation.backend import ClusterFacts, Echo
from hpq.validation.request import DOCTOR, NANOGPT, NCCL, NCCOM, SWEEP, VALIDATE, TestRequest
from hpq.validation.result import TIMED_OUT, RawOutcome, TestResult

# The node program behind each test, and how its arguments are spelled (NODES [GPUS] then the program's own).
PROGRAM = {NCCL: ["run-nccl-test"], NCCOM: ["run-nccom-test"], NANOGPT: ["run-nanogpt"],
           SWEEP: ["run-nccl-test", "--sweep"], DOCTOR: ["run-node-doctor"],
           VALIDATE: ["run-node-doctor", "--fsx", "", "--efa-window", "0"]}  # validate: the doctor's device counts
JSON_OUT = (SWEEP, DOCTOR, VALIDATE)  # stdout is the program's JSON report; its progress is on stderr
KILL_GRACE_S = 10  # coreutils timeout: SIGTERM at the limit, SIGKILL this much later


class _LineTap(io.BytesIO):
    """A BytesIO that also hands every complete line to a callback as it is written."""

    def __init__(self, on_line: Callable[[str], None]):
        super().__init__()
        self._feed = _lines(on_line)

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._feed(bytes(data))
        return super().write(data)


@dataclass
class SshShell:
    """A login shell on the controller over SSH (``target``: an aws.ssh.SshTarget, through SSM or direct)."""

    target: Any

    def run(self, command: str, echo: Callable[[bytes], None] | None = None, timeout: float | None = None,
            on_stderr_line: Callable[[str], None] | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``command`` in a login shell on the node.

        ``timeout`` bounds it on the node (coreutils ``timeout``: SIGTERM, SIGKILL KILL_GRACE_S later; exit 124).
        ``echo`` sees stdout as it arrives; ``on_stderr_line`` each line of stderr (progress).
        """
        if timeout:
            command = f"timeout -k {KILL_GRACE_S} {int(timeout)} {command}"
        out = io.BytesIO()
        err = _LineTap(on_stderr_line) if on_stderr_line else io.BytesIO()
        code = ssh.run(self.target, ssh.remote_command([command]), stdout=out, stderr=err, on_stdout=echo)
        return code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")


def node_command(request: TestRequest, programs: dict[str, list[str]] = PROGRAM) -> list[str]:
    """The command line of the request's node program (what `hpq remote CLUSTER -- ...` would run)."""
    if request.test not in programs:
        raise UsageError(f"{request.test} has no Slurm node program yet")
    args = list(programs[request.test])
    if request.test in (DOCTOR, VALIDATE):  # NODES: the first N nodes; none: every node
        return args + ([str(request.nodes)] if request.nodes else []) + list(request.extra) + ["--output", "json"]
    nodes = request.node_count
    if nodes is not None:
        args.append(str(nodes))
        if request.gpus is not None:
            args.append(str(request.gpus))
    elif request.gpus is not None:
        raise UsageError("GPUS needs NODES before it")
    args += list(request.extra)
    if request.expect is not None:
        args += ["--expect", nccl_report.expect_label(nccl_report.parse_expect(request.expect))]
    if request.nccl_debug is not None and request.test in (NCCL, NANOGPT, SWEEP):
        args += ["--nccl-debug", request.nccl_debug]
    if request.test == SWEEP:
        args += ["--output", "json"]
    return args


def _lines(echo: Echo) -> Callable[[bytes], None]:
    """Bytes as they arrive -> whole lines to ``echo``."""
    partial = [b""]

    def feed(data: bytes) -> None:
        lines = (partial[0] + data).split(b"\n")
        partial[0] = lines.pop()
        for line in lines:
            echo(line.decode("utf-8", "replace"))

    return feed


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class SlurmBackend:
    """Tests on a Slurm-orchestrated cluster, run from its controller."""

    def __init__(self, shell: Any, facts: ClusterFacts | Callable[[], ClusterFacts], name: str = "slurm",
                 stand_in_network: bool = False, programs: dict[str, list[str]] | None = None):
        self.shell = shell
        self.programs = {**PROGRAM, **(programs or {})}  # `hpq remote-nccl-test --runner CMD` replaces one
        self.name = name
        self._facts = facts
        self.stand_in_network = stand_in_network  # the rehearsal's bridge: bandwidth reported, transport waived

    def resolve(self) -> ClusterFacts:
        if callable(self._facts):
            self._facts = self._facts()
        return self._facts

    def run(self, request: TestRequest, instance_type: str | None, echo: Echo) -> RawOutcome:
        args = node_command(request, self.programs)
        command = shlex.join(args)
        _to_stderr(f"running on the controller: {command}")
        stdout_echo = None if request.test in JSON_OUT else _lines(echo)  # their stdout is their JSON report
        # The node program's stderr (srun's errors, the sweep's progress) goes to the user's stderr as it comes.
        code, out, err = self.shell.run(command, stdout_echo, request.timeout_s, on_stderr_line=_to_stderr)
        raw = RawOutcome(code, out, err, command=command, state="timed out" if code == TIMED_OUT else "exited")
        if request.test == NANOGPT:
            path = _result_path(out)
            if path:
                rc, text, _ = self.shell.run(f"cat {shlex.quote(path)}")
                if rc == 0:
                    raw.files["result.json"] = text
        return raw

    def judge(self, request: TestRequest, raw: RawOutcome, instance_type: str | None) -> TestResult:
        cluster = self.resolve().name
        if request.test in (NCCL, NCCOM):
            return judges.judge_bandwidth(request, raw, instance_type, self.name, cluster, self.stand_in_network)
        if request.test == SWEEP:
            return judges.judge_sweep(request, raw, instance_type, self.name, cluster)
        if request.test in (DOCTOR, VALIDATE):
            return doctor.judge(request, raw, instance_type, self.name, cluster, devices=request.test == VALIDATE)
        return judges.judge_nanogpt(request, raw, instance_type, self.name, cluster)

    def cleanup(self) -> None:
        """Nothing to remove: the node programs run in the foreground and Slurm ends their jobs with them."""


def _result_path(out: str) -> str | None:
    """The ``# result: PATH.json`` line run-nanogpt prints last."""
    for line in reversed(out.splitlines()):
        if line.startswith("# result: ") and line.rstrip().endswith(".json"):
            return line[len("# result: "):].strip()
    return None
