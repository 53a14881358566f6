"""What the rehearsal checks of its cluster beyond the tests themselves, and how it reaches the controller.

Everything goes over real SSH (paramiko, hpq's own ``aws/ssh.py``) to the sshd running in the
controller's namespace, as the node's default user, through hpq.validation's :class:`SshShell`: the
only stand-in is the missing SSM hop (``hpq test`` on a real cluster tunnels the same SSH through
``aws ssm start-session``). The tests (nccl, nanogpt, sweep) go through the one validation interface
(``hpq.validation.backend.run_test`` with the Slurm backend, named ``rehearsal``, whose network is a
stand-in: the bandwidth is reported, not held to the catalog) and are judged by the same judges as
``hpq test``. What stays here is the rehearsal's own: Slurm node states, the lifecycle's key jobs, the
controller-to-worker SSH hop, and the environment the job's ranks really had.
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

from hpq.lifecycle import catalog, transport
from hpq.lifecycle.ssh_keys import JOB_NAME, KEY_NAME
from hpq.rehearsal import backend
from hpq.rehearsal.plan import LOGIN, NODE_IFACE, WORKER, Plan
from hpq.scripts import env_check
from hpq.validation.request import NANOGPT, NCCL, SWEEP, TestRequest
from hpq.validation.slurm import SshShell, node_command

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


def slurm_states(shell: SshShell) -> dict[str, str]:
    code, out, err = shell.run(NODE_STATES_COMMAND)
    if code != 0:
        return {}
    return parse_node_states(out)


def wait_idle(shell: SshShell, nodes: list[str], timeout: float) -> tuple[dict[str, str], float]:
    """Poll ``sinfo`` until every node in ``nodes`` is idle; (last states, seconds waited)."""
    t0 = time.time()
    states: dict[str, str] = {}
    while True:
        states = slurm_states(shell)
        if nodes and all(states.get(n) == "idle" for n in nodes):
            return states, time.time() - t0
        if time.time() - t0 > timeout:
            return states, time.time() - t0
        time.sleep(0.5)


# Slurm's terminal job states (slurm 22.05 squeue(1), JOB STATE CODES): a key job in one of them is over.
JOB_DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                   "DEADLINE", "PREEMPTED")


def key_jobs(shell: SshShell) -> list[dict[str, str]]:
    """The lifecycle's SSH key jobs (lifecycle/ssh_keys.JOB_NAME) as ``scontrol -o show job`` lists them: a finished
    job stays listed for MinJobAge (300 s by default, slurm.conf(5))."""
    code, out, _ = shell.run("scontrol -o show job")
    jobs = []
    for line in out.splitlines() if code == 0 else []:
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("JobName") == JOB_NAME:
            jobs.append({"id": fields.get("JobId", ""), "state": fields.get("JobState", ""),
                         "nodes": fields.get("NodeList", "")})
    return jobs


def wait_key_jobs(shell: SshShell, timeout: float) -> list[dict[str, str]]:
    """Poll until every key job is in a terminal state (or ``timeout``); the jobs as last seen."""
    deadline = time.time() + timeout
    while True:
        jobs = key_jobs(shell)
        if all(j["state"] in JOB_DONE_STATES for j in jobs) or time.time() > deadline:
            return jobs
        time.sleep(0.5)


def ssh_hop(shell: SshShell, host: str, timeout: float = 60.0) -> dict[str, Any]:
    """``ssh HOST hostname`` on the controller as the default user, as mpirun reaches a node: which host answered
    and which key it accepted (``ssh -v`` prints ``Server accepts key: PATH ...``, OpenSSH sshconnect2.c)."""
    code, out, err = shell.run(f"ssh -n -v -o BatchMode=yes -o ConnectTimeout=10 {shlex.quote(host)} hostname",
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
BRIDGE_NOTE = ("bandwidth over the emulated bridge (gloo on this machine's CPUs) is reported, not judged: it says "
               "nothing about the instance type's network")


def _gpus(worker_type: str) -> int | None:
    """GPUS_PER_NODE 1 when the type has several GPUs (the rehearsal's nodes have none), else left out."""
    try:
        count = catalog.lookup(worker_type).accelerator_count
    except catalog.UnknownInstanceType:
        count = 1
    return None if count == 1 else 1


def nccl_request(workers: int, worker_type: str, extra: str, timeout: float = 3600) -> TestRequest:
    """``run-nccl-test N [1] EXTRA --expect none``, bounded on the controller by ``timeout``."""
    return TestRequest(NCCL, workers, _gpus(worker_type), None, backend.BRIDGE_EXPECT, tuple(shlex.split(extra)),
                       int(timeout))


def nanogpt_request(workers: int, worker_type: str, extra: str, timeout: float = 3600) -> TestRequest:
    """``run-nanogpt N [1] --model tiny EXTRA``."""
    return TestRequest(NANOGPT, workers, _gpus(worker_type), None, None,
                       ("--model", "tiny", *shlex.split(extra)), int(timeout))


def sweep_request(nodes: int, worker_type: str, extra: str, budget: float, timeout: float = 3600) -> TestRequest:
    """``run-nccl-test --sweep N [1] --budget S EXTRA --output json``."""
    return TestRequest(SWEEP, nodes, _gpus(worker_type), None, None,
                       ("--budget", str(int(budget)), *shlex.split(extra)), int(timeout))


def command(request: TestRequest) -> str:
    """The request's node command line, as the backend runs it on the controller."""
    return shlex.join(node_command(request))


def nccl_command(workers: int, worker_type: str, extra: str) -> str:
    return command(nccl_request(workers, worker_type, extra))


def nanogpt_command(workers: int, worker_type: str, extra: str) -> str:
    return command(nanogpt_request(workers, worker_type, extra))


def sweep_command(nodes: int, worker_type: str, extra: str, budget: float) -> str:
    return command(sweep_request(nodes, worker_type, extra, budget))


def stage_data(result: Any) -> dict[str, Any]:
    """A judged test as the rehearsal's JSON keeps it: the result's fields (outcome, ok, exit_code, test,
    backend, cluster, ...) under the judge's evidence, whose own keys (the nccl-tests report's ``backend``,
    the sweep's ``message``) keep the meaning they had in the rehearsal's JSON."""
    return {**result.to_dict(), **result.data}


# run-nccl-test sets these itself (its --nccl-debug, default INFO with INIT,NET): logging, not transport.
LAUNCH_LOGGING_KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def expected_environment(worker_type: str) -> dict[str, str]:
    """``hpq nccl-env TYPE --iface ens5``: the transport function for the type, on a node whose default route is
    the rehearsal's interface and whose EFA devices are the type's own (node.EFA_DEVICES)."""
    entry = catalog.lookup(worker_type)
    probe = transport.NodeProbe(efa_devices=entry.efa_interfaces, default_iface=NODE_IFACE)
    return dict(transport.node_environment(worker_type, probe).variables)


def job_environment(shell: SshShell, out: str, worker_type: str, nodes: int) -> dict[str, Any]:
    """The ranks' own hpq-env blocks (printed on the workers inside the job) against the worker type's environment.

    ``{expected, effective, problems, ok, message}``; no block at all is a failure here (hpq's own launch always
    prints one). The controller's login environment names where a stray variable came from.
    """
    code, login_env, _ = shell.run("env")
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


def worker_hostnames(plan: Plan) -> list[str]:
    return [n.hostname for n in plan.nodes if n.role in (WORKER, LOGIN)]
