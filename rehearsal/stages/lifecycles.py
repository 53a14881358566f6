"""Stage ``lifecycle``: OnCreate on every node at once, as HyperPod runs it; step lines as they happen."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from hpq.rehearsal import aws, validate
from hpq.rehearsal.node import Node
from hpq.rehearsal.plan import CONTROLLER, Plan
from hpq.rehearsal.stages.base import TAIL_LINES, Failure, Say
from hpq.rehearsal.teardown import TeardownStack
from hpq.standins import hyperpod


@dataclass
class LifecycleInput:
    plan: Plan
    nodes: Mapping[str, Node]
    groups: list[hyperpod.GroupRequest]
    logdir: str
    node_url: str  # the emulated AWS endpoint as the nodes reach it
    node_env: dict[str, dict[str, str]]  # {"": every node, "<node name>": that node only}


@dataclass
class Lifecycles:
    runs: dict[str, hyperpod.LifecycleRun]
    # node name -> seconds from its OnCreate start to idle in Slurm; filled by a poller until the stack unwinds
    slurm_ready: dict[str, float] = field(default_factory=dict)


def start_lifecycles(inp: LifecycleInput, stack: TeardownStack, say: Say, out: Lifecycles | None = None) -> Lifecycles:
    """Start OnCreate on every node (controller first, as HyperPod provisions it first), and return at once.

    ``out`` (the caller's, when given) is filled as each run starts: a failure part way still reports those."""
    s3 = aws.session().client("s3")
    common = inp.node_env.get("", {})
    group_of = {g.name: g for g in inp.groups}
    out = out if out is not None else Lifecycles({})
    for spec in inp.plan.nodes:
        g = group_of[spec.group]
        bucket, prefix = hyperpod.split_s3_uri(g.source_s3_uri)
        node = inp.nodes[spec.name]
        workdir, count = hyperpod.stage_prefix(s3, node, bucket, prefix)
        log_path = os.path.join(inp.logdir, f"{spec.name}.lifecycle.log")
        env = hyperpod.oncreate_env(inp.node_url, {**common, **inp.node_env.get(spec.name, {})})
        run = hyperpod.start_oncreate(node, workdir, g.on_create, env, log_path)
        out.runs[spec.name] = run
        say(spec.name, f"OnCreate {g.on_create} in {workdir} ({count} files from s3://{bucket}/{prefix})")
        threading.Thread(target=hyperpod.follow, args=(run, lambda r, rec: say_step(say, r, rec)), daemon=True).start()
    if inp.plan.orchestrator == "slurm":
        stop = threading.Event()
        stack.push("Slurm readiness poller", stop.set, kept_too=True)
        threading.Thread(target=_poll_slurm_ready, args=(inp.plan, inp.nodes, out, stop), daemon=True).start()
    return out


def wait_lifecycles(lc: Lifecycles, timeout: float, say: Say) -> None:
    """Until every OnCreate has exited 0; the first that fails or outlives ``timeout`` is the failure."""
    deadline = time.time() + timeout
    pending = dict(lc.runs)
    while pending:
        for name, run in list(pending.items()):
            if run.finished is not None:
                del pending[name]
                if run.exit_code == 0:
                    say(name, f"OnCreate finished in {run.seconds:.1f}s")
                else:
                    raise lifecycle_failure(run, f"OnCreate exited {run.exit_code}")
        if pending and time.time() > deadline:
            run = next(iter(pending.values()))
            raise lifecycle_failure(run, f"OnCreate still running after {timeout:.0f}s")
        time.sleep(0.1)


def say_step(say: Say, run: hyperpod.LifecycleRun, rec: hyperpod.StepRecord) -> None:
    if rec.status == "running":
        say(run.node.spec.name, f"step {rec.name} ...")
    elif rec.status == "failed":
        say(run.node.spec.name, f"step {rec.name} FAILED after {rec.seconds}s: {rec.detail}")
    elif rec.status == "warning":
        say(run.node.spec.name, f"step {rec.name} done with a warning ({rec.seconds}s): {rec.detail}")
    else:
        say(run.node.spec.name, f"step {rec.name} {rec.status} ({rec.seconds}s)")


def lifecycle_failure(run: hyperpod.LifecycleRun, why: str) -> Failure:
    step = run.failed_step()
    cause = why
    if step is not None and step.detail:
        cause = f"{why}: {step.detail}"
    elif run.lines:
        errors = [ln for ln in run.lines if "ERROR" in ln or "FAILED" in ln or "rror" in ln]
        if errors:
            cause = f"{why}: {errors[-1].strip()}"
    return Failure("lifecycle", cause, node=run.node.spec.name, step=step.name if step else None,
                   log=run.log_path, last_lines=[ln for ln in run.lines[-TAIL_LINES:]])


def _poll_slurm_ready(plan: Plan, nodes: Mapping[str, Node], lc: Lifecycles, stop: threading.Event) -> None:
    """Record when each Slurm node first shows idle (for the node-start-to-ready figure)."""
    ctl = nodes.get(plan.controller.name) if plan.controller else None
    want = {n.hostname: n.name for n in plan.nodes if n.role != CONTROLLER}
    while ctl is not None and want and len(lc.slurm_ready) < len(want) and not stop.is_set():
        res = ctl.run(validate.NODE_STATES_COMMAND.split(), check=False, timeout=10)
        for host, state in validate.parse_node_states(res.stdout.decode(errors="replace")).items():
            if state == "idle" and host in want:
                name = want[host]
                run = lc.runs.get(name)
                if name not in lc.slurm_ready and run is not None:
                    lc.slurm_ready[name] = round(time.time() - run.started, 1)
        if all(r.finished is not None and r.exit_code for r in lc.runs.values()):
            return
        stop.wait(0.5)
