"""The rehearsal's result: its JSON summary from what the stages returned (or had found when one failed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpq.rehearsal import aws
from hpq.rehearsal.plan import CONTROLLER, Plan
from hpq.standins import hyperpod

# Keys a stage fills (through its output, or Failure.found when it failed); None when it did not run.
STAGE_KEYS = ("ssh", "nccl", "environment", "nanogpt", "sweep", "doctor")


def node_results(plan: Plan | None, runs: Mapping[str, hyperpod.LifecycleRun],
                 slurm_ready: Mapping[str, float]) -> list[dict[str, Any]]:
    out = []
    for spec in (plan.nodes if plan else []):
        run = runs.get(spec.name)
        out.append({
            "name": spec.name, "role": spec.role, "group": spec.group, "hostname": spec.hostname,
            "slurm_node": spec.hostname if spec.role != CONTROLLER else None,
            "ip": spec.ip, "instance_id": spec.instance_id, "instance_type": spec.instance_type,
            "lifecycle_seconds": run.seconds if run else None,
            "lifecycle_exit_code": run.exit_code if run else None,
            "steps": [s.to_dict() for s in run.steps] if run else [],
            "slurm_ready_seconds": slurm_ready.get(spec.name),
        })
    return out


def summary(*, variant: str, run_id: str, passed: bool, seconds: float, stage_seconds: dict[str, float],
            plan: Plan | None, moto: aws.EmbeddedMoto | None, deployed: aws.Deployed | None,
            nodes: list[dict[str, Any]], found: Mapping[str, Any], without_fsx: bool, kept: bool,
            logs: str | None) -> dict[str, Any]:
    p, d = plan, deployed
    return {
        "variant": variant, "run_id": run_id, "result": "pass" if passed else "fail",
        "seconds": round(seconds, 1), "stages": dict(stage_seconds),
        "worker_instance_type": p.worker_type if p else None,
        "network": {"bridge": p.bridge, "subnet": p.subnet} if p else None,
        "aws": {"emulation": "moto", "endpoint": moto.url if moto else None,
                "stack": d.stack_name if d else None, "outputs": d.outputs if d else {},
                "notes": d.notes if d else []},
        "cluster": {"name": p.cluster_name if p else None, "arn": d.cluster_arn if d else None},
        "nodes": nodes,
        "slurm_nodes_idle": found.get("slurm_nodes_idle", 0),
        "without_fsx": without_fsx, "ssh": found.get("ssh"),
        "nccl": found.get("nccl"), "environment": found.get("environment"),
        "nanogpt": found.get("nanogpt"),
        "sweep": found.get("sweep"), "doctor": found.get("doctor"),
        "kept": kept, "logs": logs,
    }
