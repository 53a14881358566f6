"""Stages ``nccl``, ``nanogpt`` and ``sweep``: the tests a user runs (``hpq test``), through the validation
interface over SSH to the controller, with their progress said as it comes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpq.rehearsal import netns, throttle, validate
from hpq.rehearsal.backend import RehearsalBackend
from hpq.rehearsal.plan import NODE_IFACE, Plan
from hpq.rehearsal.stages import progress
from hpq.rehearsal.stages.base import Failure, Say
from hpq.scripts import sweep
from hpq.validation.backend import run_test
from hpq.validation.request import TestRequest
from hpq.validation.result import TestResult


@dataclass
class WorkloadInput:
    plan: Plan
    backend: RehearsalBackend  # over a login shell on the controller
    args: str  # the node program's extra words (--nccl-args, --nanogpt-args, --sweep-args)
    timeout: float  # each command, bounded on the controller
    logdir: str = ""  # where a failed run keeps the controller's /fsx/hpq-results (sweep)
    throttle: dict[int, str] = field(default_factory=dict)  # worker index -> tc rate (sweep)


@dataclass
class NcclOutcome:
    data: dict[str, Any]
    environment: dict[str, Any]


def run_one(stage: str, inp: WorkloadInput, request: TestRequest, say: Say,
            on_stdout: Callable[[str], None] | None = None, on_stderr: Callable[[str], None] | None = None
            ) -> TestResult:
    """One test through the validation interface (the judge every backend uses), said as a user would run it.

    The node program's own lines stay in its log (kept on failure); the stage's progress says what ``on_stdout``
    and ``on_stderr`` pick from them, and the verdict."""
    target = inp.backend.controller.target
    say(stage, f"ssh {target.user}@{target.host} {validate.command(request)}")
    inp.backend.on_stderr_line = on_stderr or (lambda line: None)
    return run_test(inp.backend, request, on_stdout or (lambda line: None))


def run_nccl(inp: WorkloadInput, say: Say) -> NcclOutcome:
    workers = len(inp.plan.worker_nodes)
    request = validate.nccl_request(workers, inp.plan.worker_type, inp.args, inp.timeout)
    with progress.Watch(say, "nccl", progress.nccl_row) as watch:
        result = run_one("nccl", inp, request, say, watch.on_line)
    data = validate.stage_data(result)
    data["bandwidth_note"] = validate.BRIDGE_NOTE
    say("nccl", result.message)
    raw = inp.backend.last_raw
    env = validate.job_environment(inp.backend.controller, raw.log if raw else "", inp.plan.worker_type, workers)
    say("nccl", env["message"])
    found = {"nccl": data, "environment": env}
    if result.exit_code:
        raise Failure("nccl", result.message, node="controller", last_lines=data.get("stderr_tail"), found=found)
    if not env["ok"]:
        raise Failure("nccl", env["message"], node="controller", found=found)
    return NcclOutcome(data, env)


def run_nanogpt(inp: WorkloadInput, say: Say) -> dict[str, Any]:
    request = validate.nanogpt_request(len(inp.plan.worker_nodes), inp.plan.worker_type, inp.args, inp.timeout)
    with progress.Watch(say, "nanogpt", progress.nanogpt_iteration) as watch:
        result = run_one("nanogpt", inp, request, say, watch.on_line)
    data = validate.stage_data(result)
    say("nanogpt", result.message)
    if result.exit_code:
        raise Failure("nanogpt", result.message, node="controller", log=data.get("log"),
                      last_lines=data.get("stderr_tail"), found={"nanogpt": data})
    return data


def run_sweep(inp: WorkloadInput, say: Say) -> dict[str, Any]:
    """Throttle the chosen workers' links, run the pairwise sweep as a user does, judge what it named."""
    p = inp.plan
    workers = p.worker_nodes
    injected: list[dict[str, Any]] = []
    for index, rate in sorted(inp.throttle.items()):
        spec = workers[index]
        netns.shape(spec.netns, NODE_IFACE, rate)
        shown = netns.egress_rate(spec.netns, NODE_IFACE)
        injected.append({"index": index, "node": spec.name, "slurm_node": spec.hostname, "rate": rate,
                         "tc_rate_bytes_per_s": shown})
        say(spec.name, f"--throttle {index}={rate}: egress of {NODE_IFACE} limited with tc tbf "
                       f"inside its namespace ({shown} bytes/s as tc reports it)")
    request = validate.sweep_request(len(validate.worker_hostnames(p)), p.worker_type, inp.args,
                                     max(60.0, inp.timeout - 60), inp.timeout)

    def on_stderr(line: str) -> None:
        if line.startswith("# round") or line.startswith("#   "):
            say("sweep", line.lstrip("# "))

    result = run_one("sweep", inp, request, say, on_stderr=on_stderr)
    raw = inp.backend.last_raw
    doc = sweep.extract_json(raw.log) if raw else None
    code = raw.exit_code if raw else result.exit_code
    expected = {t["slurm_node"]: t["rate"] for t in injected}
    names = {n.hostname: n.name for n in p.nodes}
    check = throttle.judge(doc, code, expected, names)
    data: dict[str, Any] = validate.stage_data(result) if doc is not None else {
        **result.to_dict(), "slow_nodes": None, "scores": None, "pairs": None}
    data.update({"command": validate.command(request), "remote_exit_code": code, "throttled": injected,
                 "expected_slow_nodes": sorted(expected), "check": {"ok": check.ok, "message": check.message},
                 "bandwidth_note": validate.BRIDGE_NOTE})
    data.pop("stderr_tail", None)
    if not check.ok and raw and raw.stderr.strip():
        data["stderr_tail"] = raw.stderr_tail()
    if doc is not None:
        say("sweep", f"run-nccl-test --sweep: {doc.get('message', '')}")
    say("sweep", f"rehearsal check: {check.message}")
    if not check.ok:
        raise Failure("sweep", check.message, node=check.node, log=kept_result_path(inp.logdir, data.get("result")),
                      last_lines=data.get("stderr_tail"), found={"sweep": data})
    return data


def kept_result_path(logdir: str, node_path: Any) -> str | None:
    """Where a failed rehearsal keeps a file of the controller's /fsx/hpq-results (stages.nodes.keep_results)."""
    if not logdir or not isinstance(node_path, str) or not node_path.startswith("/fsx/hpq-results/"):
        return node_path if isinstance(node_path, str) else None
    return os.path.join(logdir, "fsx-hpq-results", node_path[len("/fsx/hpq-results/"):])
