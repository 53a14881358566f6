"""Stages ``slurm`` (every worker idle), ``doctor`` (faults named) and ``ssh`` (node to node as the default user)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpq.rehearsal import faults, validate
from hpq.rehearsal.node import Node
from hpq.rehearsal.plan import Plan
from hpq.rehearsal.stages.base import Failure, Say, tail
from hpq.validation.slurm import SshShell


@dataclass
class SlurmInput:
    plan: Plan
    shell: SshShell
    controller: Node  # whose slurmctld.log a failure points to
    timeout: float


@dataclass
class SlurmNodes:
    states: dict[str, str]  # Slurm node name -> state
    idle: list[str]


def wait_slurm(inp: SlurmInput, say: Say) -> SlurmNodes:
    want = validate.worker_hostnames(inp.plan)
    states, waited = validate.wait_idle(inp.shell, want, inp.timeout)
    idle = [n for n in want if states.get(n) == "idle"]
    if len(idle) != len(want):
        bad = {n: states.get(n, "missing") for n in want if states.get(n) != "idle"}
        log = inp.controller.host_path("/var/log/slurm/slurmctld.log")
        raise Failure("slurm", f"not idle after {waited:.0f}s: " + ", ".join(f"{k} {v}" for k, v in bad.items()),
                      node="controller", log=str(log), last_lines=tail(log),
                      found={"slurm_nodes": states, "slurm_nodes_idle": len(idle)})
    say("slurm", f"scontrol over SSH on the controller: {len(idle)}/{len(want)} nodes idle ({', '.join(idle)})")
    return SlurmNodes(states, idle)


@dataclass
class SshInput:
    plan: Plan
    shell: SshShell
    timeout: float


def check_ssh(inp: SshInput, say: Say) -> dict[str, Any]:
    """Node to node as the default user, the way mpirun reaches the other nodes: from the controller to each
    worker with the cluster key of the ssh-keys step (without /fsx: once its Slurm job has finished)."""
    shell = inp.shell
    jobs = validate.wait_key_jobs(shell, inp.timeout)
    data: dict[str, Any] = {"key_jobs": jobs, "hops": []}
    for job in jobs:
        say("ssh", f"the ssh-keys step's Slurm job {job['id']}: {job['state']} on {job['nodes']}")
        if job["state"] != "COMPLETED":
            raise Failure("ssh", f"the ssh-keys step's Slurm job {job['id']} is {job['state']}", node="controller",
                          found={"ssh": data})
    for spec in inp.plan.worker_nodes:
        hop = validate.ssh_hop(shell, spec.hostname)
        data["hops"].append(hop)
        if not hop["ok"]:
            raise Failure("ssh", f"ssh {spec.hostname} hostname as {shell.target.user} on the controller exited "
                                 f"{hop['exit_code']}, answered {hop['hostname']!r} with key {hop['key']}",
                          node=spec.name, last_lines=hop.get("stderr_tail"), found={"ssh": data})
        say("ssh", f"{shell.target.user}@controller -> {spec.hostname}: answered, key {hop['key']}")
    return data


@dataclass
class DoctorInput:
    plan: Plan
    nodes: Mapping[str, Node]
    shell: SshShell
    faults: list[tuple[str, str]]  # (node, kind) injected first
    cluster_arn: str
    timeout: float


def run_doctor(inp: DoctorInput, say: Say) -> dict[str, Any]:
    """The doctor on every worker (faults injected first); it must name each fault and nothing else."""
    doc = faults.doctor_stage(inp.plan, dict(inp.nodes), inp.shell, inp.faults, inp.cluster_arn, say,
                              int(inp.timeout))
    faulty = {node for node, _ in inp.faults}
    extra = [f"{f['node']}: {f['kind']}" for f in doc["findings"] if f["node"] not in faulty]
    if doc["missed"] or extra or (not faulty and doc["outcome"] != "PASS"):
        raise Failure("doctor", "; ".join([f"not named: {', '.join(doc['missed'])}"] * bool(doc["missed"])
                                          + [f"not injected: {', '.join(extra)}"] * bool(extra))
                      or doc["message"].splitlines()[0], found={"doctor": doc})
    say("doctor", doc["message"].splitlines()[0])
    return doc


@dataclass
class PrologInput:
    plan: Plan
    nodes: Mapping[str, Node]
    shell: SshShell
    faults: list[tuple[str, str]]
    timeout: float = 90.0


def check_prolog(inp: PrologInput, say: Say) -> dict[str, Any]:
    """``--prolog`` (EnableNodeProlog=true): the faults injected, then one job step on each worker, as a user
    submits it, under the real slurmd running hpq's Prolog. A worker with a fault the prolog drains for
    (faults.PROLOG_DRAINS) must refuse the job and be drained with hpq's reason; every other worker must run it
    and stay in service."""
    faults.inject_all(inp.plan, dict(inp.nodes), inp.faults, say, who="prolog")
    sick = {node for node, kind in inp.faults if kind in faults.PROLOG_DRAINS}
    out: dict[str, Any] = {"workers": []}
    wrong = []
    for spec in inp.plan.worker_nodes:
        host = spec.hostname
        rc, stdout, stderr = inp.shell.run(f"timeout {int(inp.timeout)} srun -N1 -w {host} hostname",
                                           timeout=inp.timeout + 30)
        _, shown, _ = inp.shell.run(f"scontrol show node {host}", timeout=30)
        state = next((w.split("=", 1)[1] for w in shown.split() if w.startswith("State=")), "")
        reason = shown.split("Reason=", 1)[1].strip() if "Reason=" in shown else ""
        ran, drained = rc == 0 and host in stdout, "DRAIN" in state
        out["workers"].append({"node": spec.name, "host": host, "faults": [k for n, k in inp.faults if n == spec.name],
                               "drains": spec.name in sick, "job_ran": ran, "state": state, "reason": reason,
                               "srun_exit": rc, "srun_error": (stderr or "").strip().splitlines()[-1:]})
        if spec.name in sick and (ran or not drained or not reason.startswith("hpq prolog: ")):
            wrong.append(f"{spec.name} should be drained by the prolog, but the job {'ran' if ran else 'did not run'}"
                         f" and it is {state or 'in an unknown state'} ({reason or 'no reason'})")
        elif spec.name not in sick and (not ran or drained):
            wrong.append(f"{spec.name} should run the job, but the job {'ran' if ran else 'did not run'} and it is "
                         f"{state or 'in an unknown state'} ({reason or 'no reason'})")
        say("prolog", f"{spec.name}: job {'ran' if ran else 'refused'}, {state}" + (f": {reason[:160]}" if reason else ""))
    out["ok"] = not wrong
    if wrong:
        raise Failure("prolog", "; ".join(wrong), found={"prolog": out})
    return out
