"""What HyperPod does to a node, done by the rehearsal: the stand-in for the service and its agents.

Sources for every shape here (read, not copied):
- awslabs/awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/
  hyperpod-mental-model.md: resource_config.json (ClusterConfig, ClusterType "Slurm", SlurmConfig
  PrimaryControllerIp; InstanceGroups[].Instances[] with InstanceName ``<group>-<n>``, InstanceId,
  AgentIpAddress, CustomerIpAddress, InstanceLabel null on non-topology types); the cluster agent
  writing the controller's /opt/slurm/etc/slurm.conf with ``NodeName=ip-a-b-c-d`` lines and
  ``PartitionName=dev Nodes=ALL``; login nodes running slurmd and joining ``dev``; the lifecycle
  prefix staged at /tmp/<bucket>/<prefix>/ and OnCreate run there as root with no arguments;
- .../Extensions/detect-node/README.md: InstanceName ``controller-1`` for group ``controller``;
- .../LifecycleScripts/base-config/on_create.sh: ``SAGEMAKER_RESOURCE_CONFIG_PATH`` in OnCreate's
  environment (the reference falls back to /opt/ml/config/resource_config.json without it);
- the SageMaker API reference (ClusterLifeCycleConfig: OnCreate is a file name under SourceS3Uri;
  ClusterSlurmConfig: NodeType Controller | Login | Compute, PartitionNames).

What is a guess and says so: downloaded files keep no mode bits (S3 has none) and only the OnCreate
entry is made executable, then run directly (its shebang matters, per the mental-model doc's note
on CRLF and shebangs); the agent's slurm.conf carries only the settings below (Slurm 22.05 from
Debian instead of HyperPod's build: proctrack/linuxproc and no cgroup plugins, since the nodes
share this host's cgroups).
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpq.cfn.common import HYPERPOD_UNIVERSAL_PARTITION  # HyperPod's own all-nodes partition
from hpq.errors import OperationFailed
from hpq.lifecycle import names
from hpq.lifecycle.identity import CONTROLLER, LOGIN, WORKER
from hpq.standins.fsx import MOUNTS_FILE

RESOURCE_CONFIG = names.RESOURCE_CONFIG
SLURM_CONF = "/opt/slurm/etc/slurm.conf"
SLURMCTLD_PORT = 6817


class HyperPodError(OperationFailed):
    pass


# ---------------------------------------------------------------------------- the cluster request


@dataclass
class GroupRequest:
    name: str
    instance_type: str
    count: int
    source_s3_uri: str
    on_create: str
    node_type: str | None = None  # SlurmConfig.NodeType (API-driven model), when the template sets it
    partitions: list[str] = field(default_factory=list)


def groups_from_request(cluster: dict[str, Any]) -> list[GroupRequest]:
    out = []
    for g in cluster.get("InstanceGroups") or []:
        lcc = g.get("LifeCycleConfig") or {}
        slurm = g.get("SlurmConfig") or {}
        out.append(GroupRequest(str(g["InstanceGroupName"]), str(g["InstanceType"]), int(g["InstanceCount"]),
                                str(lcc.get("SourceS3Uri", "")), str(lcc.get("OnCreate", "")),
                                slurm.get("NodeType"), [str(p) for p in slurm.get("PartitionNames") or []]))
    return out


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise HyperPodError(f"LifeCycleConfig.SourceS3Uri {uri!r} is not an s3:// URI")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    return bucket, prefix.strip("/")


def roles_of(groups: list[GroupRequest], legacy_params: dict[str, Any] | None) -> dict[str, str]:
    """Group -> role, as HyperPod knows it: SlurmConfig.NodeType, else the legacy provisioning_parameters.json
    in the lifecycle prefix (controller_group / login_group); every other group computes."""
    by_type = {"Controller": CONTROLLER, "Login": LOGIN, "Compute": WORKER}
    legacy = legacy_params or {}
    roles = {}
    for g in groups:
        if g.node_type in by_type:
            roles[g.name] = by_type[g.node_type]
        elif g.name == legacy.get("controller_group"):
            roles[g.name] = CONTROLLER
        elif g.name == legacy.get("login_group"):
            roles[g.name] = LOGIN
        else:
            roles[g.name] = WORKER
    return roles


# ---------------------------------------------------------------------------- on-node files


def resource_config(plan: Any, cluster_arn: str) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for n in plan.nodes:
        g = groups.setdefault(n.group, {"Name": n.group, "InstanceType": n.instance_type, "Instances": []})
        g["Instances"].append({
            "InstanceName": n.instance_name if plan.orchestrator == "slurm" else f"hyperpod-{n.instance_id}",
            "InstanceId": n.instance_id,
            # HyperPod's agent network is separate from the customer VPC; the rehearsal has only the one.
            "AgentIpAddress": agent_ip(n),
            "CustomerIpAddress": n.ip,
            "InstanceLabel": None,
        })
    if plan.orchestrator == "slurm":
        ctl = plan.controller
        config: dict[str, Any] = {"ClusterArn": cluster_arn, "ClusterName": plan.cluster_name, "ClusterType": "Slurm",
                                  "SlurmConfig": {"PrimaryControllerIp": ctl.ip if ctl else ""}}
    else:
        config = {"ClusterArn": cluster_arn, "ClusterName": plan.cluster_name, "ClusterType": "Kubernetes",
                  "KubernetesConfig": plan_eks_config(plan)}
    return {"ClusterConfig": config, "InstanceGroups": list(groups.values())}


def plan_eks_config(plan: Any) -> dict[str, Any]:
    eks = plan.eks
    return {"EksClusterName": eks.get("name", ""), "EksClusterEndpoint": eks.get("endpoint", ""),
            "EksClusterCertificateAuthority": eks.get("ca", ""), "EksServiceIpv4Cidr": "172.20.0.0/16"}


def agent_ip(n: Any) -> str:
    last = int(n.ip.rsplit(".", 1)[1])
    return f"172.16.0.{last}"


# What the cluster agent stand-in writes into every controller's slurm.conf besides the cluster's own names,
# nodes and partitions, in its order. Slurm 22.05 from Debian, not HyperPod's build: proctrack/linuxproc and no
# cgroup plugins, since the nodes share this host's cgroups (see the module docstring).
AGENT_SETTINGS: dict[str, str] = {
    "SlurmctldPort": str(SLURMCTLD_PORT),
    "SlurmdPort": "6818",
    "SlurmUser": "root",
    "AuthType": "auth/munge",
    "CredType": "cred/munge",
    "StateSaveLocation": "/var/spool/slurmctld",
    "SlurmdSpoolDir": "/var/spool/slurmd",
    "SlurmctldPidFile": "/run/slurmctld.pid",
    "SlurmdPidFile": "/run/slurmd.pid",
    "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
    "SlurmdLogFile": "/var/log/slurm/slurmd.log",
    "ProctrackType": "proctrack/linuxproc",
    "TaskPlugin": "task/none",
    "JobAcctGatherType": "jobacct_gather/none",
    "MpiDefault": "none",
    "ReturnToService": "2",
    "SchedulerType": "sched/backfill",
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_Core",
    "SlurmdTimeout": "120",
    "InactiveLimit": "0",
    "KillWait": "5",
}


def agent_slurm_conf(cluster_name: str, controller_host: str, node_lines: list[str], partition_lines: list[str],
                     settings: dict[str, str | None] | None = None, source: str = "hpq rehearse") -> str:
    """slurm.conf as the cluster agent writes it (before the lifecycle adds configless): ClusterName,
    SlurmctldHost, ``AGENT_SETTINGS`` with ``settings`` replacing or adding values (None drops one), then the
    ``NodeName=`` and ``PartitionName=`` lines. Also tests/slurm_cluster.py's one-host cluster."""
    values: dict[str, str | None] = {**AGENT_SETTINGS, **(settings or {})}
    lines = [f"# slurm.conf written by the HyperPod cluster agent stand-in ({source})",
             f"ClusterName={cluster_name}", f"SlurmctldHost={controller_host}"]
    lines += [f"{key}={value}" for key, value in values.items() if value is not None]
    return "\n".join(lines + node_lines + partition_lines) + "\n"


def slurm_conf(plan: Any, cpus: int, memory_mb: int, partitions: dict[str, list[str]]) -> str:
    """The controller's slurm.conf as the cluster agent writes it (before the lifecycle adds configless)."""
    ctl = plan.controller
    assert ctl is not None
    nodes = [f"NodeName={n.hostname} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN"
             for n in plan.nodes if n.role != CONTROLLER]
    # The groups' own partitions, then HyperPod's universal partition with every node, login nodes included
    # ("All nodes are automatically added to the universal dev partition": cfn/common.py). A group that names
    # that partition itself gets no second line.
    parts = [f"PartitionName={name} Nodes={','.join(members)} Default={'YES' if i == 0 else 'NO'} "
             "MaxTime=INFINITE State=UP" for i, (name, members) in enumerate(partitions.items())
             if name != HYPERPOD_UNIVERSAL_PARTITION]
    parts.append(f"PartitionName={HYPERPOD_UNIVERSAL_PARTITION} Nodes=ALL Default={'NO' if parts else 'YES'} "
                 "MaxTime=INFINITE State=UP")
    return agent_slurm_conf(plan.cluster_name, ctl.hostname, nodes, parts)


def partitions_of(plan: Any, groups: list[GroupRequest]) -> dict[str, list[str]]:
    """API-driven model: partitions from the Compute groups' PartitionNames (HyperPod's ``dev`` is added anyway)."""
    out: dict[str, list[str]] = {}
    for g in groups:
        for p in g.partitions:
            out.setdefault(p, []).extend(n.hostname for n in plan.nodes if n.group == g.name)
    return out


def host_resources() -> tuple[int, int]:
    """CPUs and memory (MB) every node reports: they all share this host."""
    cpus = os.cpu_count() or 1
    with open("/proc/meminfo") as fh:
        total_kb = int(next(line for line in fh if line.startswith("MemTotal")).split()[1])
    return cpus, max(256, total_kb // 1024 // 2)


# ---------------------------------------------------------------------------- staging and OnCreate


def stage_prefix(s3: Any, node: Any, bucket: str, prefix: str) -> tuple[str, int]:
    """Download s3://bucket/prefix/ into the node's /tmp/<bucket>/<prefix>/ (no mode bits, like any download)."""
    workdir = posixpath.join("/tmp", bucket, prefix) if prefix else posixpath.join("/tmp", bucket)
    host_dir = node.dir / "tmp" / bucket / prefix
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=(prefix + "/") if prefix else ""):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) + 1:] if prefix else obj["Key"]
            if not rel or rel.endswith("/"):
                continue
            dest = host_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            os.chmod(dest, 0o644)
            count += 1
    if not count:
        raise HyperPodError(f"nothing under s3://{bucket}/{prefix}/ to run on {node.spec.name}")
    return workdir, count


@dataclass
class StepRecord:
    name: str
    seconds: float | None = None
    status: str = "running"  # running | done | warning | failed | skipped
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds, "status": self.status, "detail": self.detail}


def parse_step_line(line: str) -> tuple[str, str, float | None, str] | None:
    """The lifecycle's own log lines (lifecycle/main.py run_steps): step X: start | done in Ns | done in Ns, with a
    warning (a ``Degraded`` result: status ``warning``) | FAILED after Ns | skipped."""
    import re

    m = re.search(r"step (\S+): (start|done in ([0-9.]+)s(, with a warning)?|FAILED after ([0-9.]+)s|skipped)"
                  r"(?:[: ]\s*(.*))?$", line)
    if not m:
        return None
    name, what = m.group(1), m.group(2)
    detail = (m.group(6) or "").strip()
    if what == "start":
        return name, "running", None, detail
    if what.startswith("done"):
        return name, "warning" if m.group(4) else "done", float(m.group(3)), detail
    if what.startswith("FAILED"):
        return name, "failed", float(m.group(5)), detail
    return name, "skipped", 0.0, detail


@dataclass
class LifecycleRun:
    node: Any
    log_path: str  # on the host
    proc: subprocess.Popen | None = None
    started: float = 0.0
    finished: float | None = None
    exit_code: int | None = None
    steps: list[StepRecord] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        return None if self.finished is None else round(self.finished - self.started, 1)

    def step(self, name: str) -> StepRecord:
        for s in self.steps:
            if s.name == name:
                return s
        rec = StepRecord(name)
        self.steps.append(rec)
        return rec

    def failed_step(self) -> StepRecord | None:
        return next((s for s in self.steps if s.status == "failed"), None) or \
            next((s for s in self.steps if s.status == "running"), None)


def oncreate_env(node_endpoint: str, extra: dict[str, str]) -> dict[str, str]:
    """OnCreate's environment: what a node has, plus the documented overrides the rehearsal needs."""
    env = {
        "SAGEMAKER_RESOURCE_CONFIG_PATH": RESOURCE_CONFIG,
        # The emulated AWS endpoint (a real node reaches AWS through the VPC's endpoints).
        "AWS_ENDPOINT_URL": node_endpoint,
        # The FSx stand-in's mount table, where /fsx shows as a Lustre mount (standins/fsx.py).
        "HPQ_PROC_MOUNTS": MOUNTS_FILE,
        # A failed OnCreate waits for HyperPod's agent to ship its log to CloudWatch (60 s by default); the
        # rehearsal has no such agent and reads the log itself, so the documented wait is set to none.
        "HPQ_FAIL_LOG_WAIT_S": "0",
    }
    env.update(extra)
    return env


def start_oncreate(node: Any, workdir: str, entry: str, env: dict[str, str], log_path: str) -> LifecycleRun:
    """chmod the entry, run it from the staged prefix as root with no arguments; output to ``log_path``."""
    entry_path = posixpath.join(workdir, entry)
    script = f"cd {shlex.quote(workdir)} && chmod +x {shlex.quote(entry_path)} && exec {shlex.quote(entry_path)}"
    argv = node.command(["/bin/sh", "-c", script], env)
    run = LifecycleRun(node, log_path)
    run.started = time.time()
    run.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return run


def follow(run: LifecycleRun, on_event: Callable[[LifecycleRun, StepRecord], None]) -> None:
    """Read the run's output to the end (in a thread): log it, update steps, report transitions."""
    assert run.proc is not None and run.proc.stdout is not None
    with open(run.log_path, "ab") as log:
        for raw in run.proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode("utf-8", "replace").rstrip("\n")
            run.lines.append(line)
            if len(run.lines) > 400:
                del run.lines[:100]
            parsed = parse_step_line(line)
            if parsed:
                name, status, seconds, detail = parsed
                rec = run.step(name)
                rec.status, rec.seconds, rec.detail = status, seconds, detail
                on_event(run, rec)
    run.exit_code = run.proc.wait()
    run.finished = time.time()


def write_node_files(node: Any, rc: dict[str, Any]) -> None:
    node.write(RESOURCE_CONFIG, json.dumps(rc, indent=2) + "\n")


def read_legacy_params(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    key = f"{prefix}/{names.PROVISIONING_PARAMETERS}" if prefix else names.PROVISIONING_PARAMETERS
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except Exception:  # noqa: BLE001 - absent is the API-driven model's normal case
        return None
