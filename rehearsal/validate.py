"""Validation the way a user runs it: SSH into the controller, Slurm state, run-nccl-test, run-nanogpt.

Everything goes over real SSH (paramiko, hpq's own ``aws/ssh.py``) to the sshd running in the
controller's namespace, as the node's default user; the only stand-in is the missing SSM hop
(``hpq remote`` tunnels the same SSH through ``aws ssm start-session``). The NCCL output is judged
by the same code as ``hpq remote-nccl-test`` (``validation/judges.bandwidth``: the nccl-tests
parser, with ``--expect none``: the bridge's bandwidth is reported, not held to the catalog);
run-nanogpt's own result JSON is read back from the controller; the pairwise sweep
(``run-nccl-test --sweep --output json``) sends its JSON back on stdout, its progress on stderr.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpq.rehearsal import image
from hpq.rehearsal import plan as plan_mod


@dataclass
class Remote:
    host: str
    key: str
    known_hosts: str
    user: str = image.DEFAULT_USER

    def target(self) -> Any:
        from hpq.aws.ssh import SshTarget

        return SshTarget(self.host, None, self.user, 22, self.key, self.known_hosts, connect_timeout=20.0)

    def run(self, command: str, echo: Any = None, timeout: float | None = None,
            on_stderr_line: Callable[[str], None] | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``command`` in a login shell on the node.

        ``timeout`` bounds it on the node (coreutils ``timeout``: SIGTERM, SIGKILL 10 s later; exit 124).
        ``on_stderr_line`` sees each line of stderr as it arrives (progress).
        """
        from hpq.aws import ssh as aws_ssh

        if timeout:
            command = f"timeout -k 10 {int(timeout)} {command}"
        out = io.BytesIO()
        err = _LineTap(on_stderr_line) if on_stderr_line else io.BytesIO()
        code = aws_ssh.run(self.target(), aws_ssh.remote_command([command]), stdout=out, stderr=err,
                           on_stdout=echo)
        return code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")


class _LineTap(io.BytesIO):
    """A BytesIO that also hands every complete line to a callback as it is written."""

    def __init__(self, on_line: Callable[[str], None]):
        super().__init__()
        self._on_line = on_line
        self._partial = b""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        lines = (self._partial + bytes(data)).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._on_line(line.decode("utf-8", "replace"))
        return super().write(data)


# Every NodeName slurmctld knows, one line each, whether or not a partition holds it: a login node (NodeType
# Login, no PartitionNames in the API-driven model) runs slurmd but is in no partition, so sinfo never lists it.
NODE_STATES_COMMAND = "scontrol -o show nodes"


def parse_node_states(text: str) -> dict[str, str]:
    """``scontrol -o show nodes`` -> {NodeName: base state in lower case} (IDLE+CLOUD -> idle, DOWN* -> down)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields and "State" in fields:
            out[fields["NodeName"]] = fields["State"].split("+")[0].rstrip("*~#!%$@^-").lower()
    return out


def slurm_states(remote: Remote) -> dict[str, str]:
    code, out, err = remote.run(NODE_STATES_COMMAND)
    if code != 0:
        return {}
    return parse_node_states(out)


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


# Slurm's terminal job states (slurm 22.05 squeue(1), JOB STATE CODES): a key job in one of them is over.
JOB_DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                   "DEADLINE", "PREEMPTED")


def key_jobs(remote: Remote) -> list[dict[str, str]]:
    """The lifecycle's SSH key jobs (lifecycle/ssh_keys.JOB_NAME) as ``scontrol -o show job`` lists them: a finished
    job stays listed for MinJobAge (300 s by default, slurm.conf(5))."""
    from hpq.lifecycle.ssh_keys import JOB_NAME

    code, out, _ = remote.run("scontrol -o show job")
    jobs = []
    for line in out.splitlines() if code == 0 else []:
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("JobName") == JOB_NAME:
            jobs.append({"id": fields.get("JobId", ""), "state": fields.get("JobState", ""),
                         "nodes": fields.get("NodeList", "")})
    return jobs


def wait_key_jobs(remote: Remote, timeout: float) -> list[dict[str, str]]:
    """Poll until every key job is in a terminal state (or ``timeout``); the jobs as last seen."""
    deadline = time.time() + timeout
    while True:
        jobs = key_jobs(remote)
        if all(j["state"] in JOB_DONE_STATES for j in jobs) or time.time() > deadline:
            return jobs
        time.sleep(0.5)


def ssh_hop(remote: Remote, host: str, timeout: float = 60.0) -> dict[str, Any]:
    """``ssh HOST hostname`` on the controller as the default user, as mpirun reaches a node: which host answered
    and which key it accepted (``ssh -v`` prints ``Server accepts key: PATH ...``, OpenSSH sshconnect2.c)."""
    from hpq.lifecycle.ssh_keys import KEY_NAME

    code, out, err = remote.run(f"ssh -n -v -o BatchMode=yes -o ConnectTimeout=10 {shlex.quote(host)} hostname",
                                timeout=timeout)
    accepted = re.search(r"Server accepts key: (\S+)", err)
    answered = out.strip()
    key = accepted.group(1) if accepted else None
    ok = code == 0 and answered == host and bool(key) and key.endswith("/" + KEY_NAME)
    hop = {"to": host, "exit_code": code, "hostname": answered, "key": key, "ok": ok}
    if not ok:
        hop["stderr_tail"] = [ln for ln in err.strip().splitlines() if not ln.startswith("debug")][-10:]
    return hop


# The rehearsal's nodes talk over a Linux bridge and run gloo on shared CPU cores: their bandwidth
# says nothing about the instance type's network, so the single run is judged with --expect none
# (complete, clean, no wrong elements) and its bandwidth is reported, not held to the catalog.
NCCL_EXPECT = "none"
BRIDGE_NOTE = ("bandwidth over the emulated bridge (gloo on this machine's CPUs) is reported, not judged: it says "
               "nothing about the instance type's network")


def _node_args(command: list[str], nodes: int, worker_type: str) -> list[str]:
    """NODES, and GPUS_PER_NODE 1 when the type has several GPUs (the rehearsal's nodes have none)."""
    from hpq.lifecycle import catalog

    args = command + [str(nodes)]
    try:
        gpus = catalog.lookup(worker_type).accelerator_count
    except catalog.UnknownInstanceType:
        gpus = 1
    if gpus != 1:
        args.append("1")
    return args


def nccl_command(workers: int, worker_type: str, extra: str) -> str:
    """``run-nccl-test N ... --expect none`` (one process per node when the type has several GPUs)."""
    args = _node_args(["run-nccl-test"], workers, worker_type)
    return shlex.join(args) + (" " + extra if extra else "") + " --expect " + NCCL_EXPECT


TIMED_OUT = 124


def run_nccl(remote: Remote, command: str, worker_type: str, nodes: int, timeout: float | None = None,
             echo: Any = None) -> tuple[dict[str, Any], int, str]:
    from hpq.validation import judges

    code, out, err = remote.run(command, echo, timeout)
    data, exit_code, message = judges.bandwidth(out, worker_type, code, nodes, NCCL_EXPECT, stand_in_network=True)
    if code == TIMED_OUT:
        message = f"FAIL: {command} did not finish within {timeout:.0f}s (stopped); {message}"
    data["command"] = command
    data["bandwidth_note"] = BRIDGE_NOTE
    if exit_code and err.strip():
        data["stderr_tail"] = err.strip().splitlines()[-10:]
    data["environment_of_job"] = job_environment(remote, out, worker_type, nodes)
    return data, exit_code, message


# run-nccl-test sets these itself (its --nccl-debug, default INFO with INIT,NET): logging, not transport.
LAUNCH_LOGGING_KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def expected_environment(worker_type: str) -> dict[str, str]:
    """``hpq nccl-env TYPE --iface ens5``: the transport function for the type, on a node whose default route is
    the rehearsal's interface and whose EFA devices are the type's own (node.EFA_DEVICES)."""
    from hpq.lifecycle import catalog, transport

    entry = catalog.lookup(worker_type)
    probe = transport.NodeProbe(efa_devices=entry.efa_interfaces, default_iface=plan_mod.NODE_IFACE)
    return dict(transport.node_environment(worker_type, probe).variables)


def job_environment(remote: Remote, out: str, worker_type: str, nodes: int) -> dict[str, Any]:
    """The ranks' own hpq-env blocks (printed on the workers inside the job) against the worker type's environment.

    ``{expected, effective, problems, ok, message}``; no block at all is a failure here (hpq's own launch always
    prints one). The controller's login environment names where a stray variable came from.
    """
    from hpq.scripts import env_check

    code, login_env, _ = remote.run("env")
    inherited = dict(line.split("=", 1) for line in login_env.splitlines() if "=" in line) if code == 0 else {}
    result = env_check.check(out, expected_environment(worker_type), inherited, f"`hpq nccl-env {worker_type}`",
                             nodes, required=True, unjudged=LAUNCH_LOGGING_KEYS).to_dict()
    if result["ok"]:
        message = (f"PASS: the job's ranks on {len(result['effective'])} worker(s) had exactly the {worker_type} "
                   f"transport environment (hpq nccl-env {worker_type})")
    else:
        message = "FAIL: the job's transport environment is not the worker type's: " + "; ".join(result["problems"])
    result["message"] = message
    return result


def sweep_command(nodes: int, worker_type: str, extra: str, budget: float) -> str:
    """``run-nccl-test --sweep N [1] --output json --budget S`` and the rehearsal's sweep arguments."""
    args = _node_args(["run-nccl-test", "--sweep"], nodes, worker_type)
    args += ["--output", "json", "--budget", str(int(budget))]
    return shlex.join(args) + (" " + extra if extra else "")


def run_sweep(remote: Remote, command: str, timeout: float | None = None,
              on_progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any] | None, int, str]:
    """(the sweep's JSON or None, run-nccl-test's exit status, its stderr) of a sweep run over SSH."""
    from hpq.scripts import sweep as node_sweep

    code, out, err = remote.run(command, None, timeout, on_stderr_line=on_progress)
    return node_sweep.extract_json(out), code, err


def nanogpt_command(workers: int, worker_type: str, extra: str) -> str:
    args = _node_args(["run-nanogpt"], workers, worker_type) + ["--model", "tiny"]
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
