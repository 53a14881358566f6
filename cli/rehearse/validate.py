"""Validation the way a user runs it: SSH into the controller, Slurm state, run-nccl-test, run-nanogpt.

Everything goes over real SSH (paramiko, hpq's own ``cli/aws/ssh.py``) to the sshd running in the
controller's namespace, as the node's default user; the only stand-in is the missing SSM hop
(``hpq remote`` tunnels the same SSH through ``aws ssm start-session``). The NCCL output is judged
by the same code as ``hpq remote-nccl-test`` (``cli/commands/remote.nccl_verdict``: the nccl-tests
parser and the instance catalog); run-nanogpt's own result JSON is read back from the controller.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from hpq.cli.rehearse import image
from hpq.cli.rehearse import plan as plan_mod


@dataclass
class Remote:
    host: str
    key: str
    known_hosts: str
    user: str = image.DEFAULT_USER

    def target(self) -> Any:
        from hpq.cli.aws.ssh import SshTarget

        return SshTarget(self.host, None, self.user, 22, self.key, self.known_hosts, connect_timeout=20.0)

    def run(self, command: str, echo: Any = None, timeout: float | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``command`` in a login shell on the node.

        ``timeout`` bounds it on the node (coreutils ``timeout``: SIGTERM, SIGKILL 10 s later; exit 124).
        """
        from hpq.cli.aws import ssh as aws_ssh

        if timeout:
            command = f"timeout -k 10 {int(timeout)} {command}"
        out, err = io.BytesIO(), io.BytesIO()
        code = aws_ssh.run(self.target(), aws_ssh.remote_command([command]), stdout=out, stderr=err,
                           on_stdout=echo)
        return code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")


def slurm_states(remote: Remote) -> dict[str, str]:
    code, out, err = remote.run("sinfo -h -N -o '%N %T'")
    if code != 0:
        return {}
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)


def wait_idle(remote: Remote, nodes: list[str], timeout: float) -> tuple[dict[str, str], float]:
    """Poll ``sinfo`` until every node in ``nodes`` is idle; (last states, seconds waited)."""
    t0 = time.time()
    states: dict[str, str] = {}
    while True:
        states = slurm_states(remote)
        if nodes and all(states.get(n) == "idle" for n in nodes):
            return states, time.time() - t0
        if time.time() - t0 > timeout:
            return states, time.time() - t0
        time.sleep(0.5)


def nccl_command(workers: int, worker_type: str, extra: str) -> str:
    """``run-nccl-test N`` (one process per node on these CPU-only nodes when the type has several GPUs)."""
    from hpq.lifecycle import catalog

    args = ["run-nccl-test", str(workers)]
    try:
        gpus = catalog.lookup(worker_type).accelerator_count
    except catalog.UnknownInstanceType:
        gpus = 1
    if gpus != 1:
        args.append("1")
    return shlex.join(args) + (" " + extra if extra else "")


TIMED_OUT = 124


def run_nccl(remote: Remote, command: str, worker_type: str, nodes: int, timeout: float | None = None,
             echo: Any = None) -> tuple[dict[str, Any], int, str]:
    from hpq.cli.commands.remote import nccl_verdict

    code, out, err = remote.run(command, echo, timeout)
    data, exit_code, message = nccl_verdict(out, worker_type, code, nodes)
    if code == TIMED_OUT:
        message = f"FAIL: {command} did not finish within {timeout:.0f}s (stopped); {message}"
    data["command"] = command
    if exit_code and err.strip():
        data["stderr_tail"] = err.strip().splitlines()[-10:]
    return data, exit_code, message


def nanogpt_command(workers: int, worker_type: str, extra: str) -> str:
    from hpq.lifecycle import catalog

    args = ["run-nanogpt", str(workers)]
    try:
        gpus = catalog.lookup(worker_type).accelerator_count
    except catalog.UnknownInstanceType:
        gpus = 1
    if gpus != 1:
        args.append("1")
    args += ["--model", "tiny"]
    return shlex.join(args) + (" " + extra if extra else "")


def run_nanogpt(remote: Remote, command: str, timeout: float | None = None,
                echo: Any = None) -> tuple[dict[str, Any], int, str]:
    code, out, err = remote.run(command, echo, timeout)
    m = re.search(r"^# result: (\S+\.json)\s*$", out, re.M)
    result: dict[str, Any] = {"command": command, "exit_status": code}
    if m:
        rc, text, _ = remote.run(f"cat {shlex.quote(m.group(1))}")
        if rc == 0:
            try:
                result = {**json.loads(text), "command": command}
            except ValueError:
                pass
    ok = code == 0 and bool(result.get("ok", code == 0))
    tail = (out.strip().splitlines() or [""])[-1]
    message = "PASS: run-nanogpt finished and its ranks agree" if ok else \
        f"FAIL: run-nanogpt exited {code}: {tail or err.strip()[-300:]}"
    if code == TIMED_OUT:
        message = f"FAIL: {command} did not finish within {timeout:.0f}s (stopped)"
    if not ok and err.strip():
        result["stderr_tail"] = err.strip().splitlines()[-10:]
    return result, 0 if ok else 1, message


def worker_hostnames(plan: plan_mod.Plan) -> list[str]:
    return [n.hostname for n in plan.nodes if n.role in (plan_mod.WORKER, plan_mod.LOGIN)]
