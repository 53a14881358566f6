"""Which expected series reached the workspace, per node, and what a missing one most likely means.

``hpq observe STACK --check`` asks the workspace (Prometheus HTTP API, ``GET /api/v1/query``; AMP's query API is
the same, signed with SigV4: https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-query-APIs.html)
one instant query per expected metric, ``count by (instance, job) (<metric>{cluster="<cluster>"})``, and one for
``up``. The answers are the API's documented envelope, ``{"status": "success", "data": {"resultType": "vector",
"result": [{"metric": {...}, "value": [t, "v"]}]}}`` (https://prometheus.io/docs/prometheus/latest/querying/api/).

What each node should send is what the lifecycle's observability step installs there (lifecycle/observability.py):
node_exporter on every node (its CPU, memory, filesystem and network families and hpq's textfile collector), and,
once per cluster, the controller's Slurm writer (scripts/slurm_metrics.py). The node's ``instance`` label is its
Slurm node name, ``ip-a-b-c-d`` (the agent's relabelling), the first label of HyperPod's PrivateDnsHostname.
DCGM and EFA series are listed as not collected on GPU/EFA nodes (hpq installs neither exporter yet: no pinned
image digest), never counted as present or as missing.

Verdict: PASS only when every expected series of every node is there; FAIL when any is missing; INCONCLUSIVE when
the workspace could not be asked or the cluster has no nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# metric -> the job (scrape target) that emits it, as the agent names jobs (lifecycle/observability.py PORTS).
NODE_SERIES = {
    "node_cpu_seconds_total": "node_exporter",
    "node_memory_MemAvailable_bytes": "node_exporter",
    "node_filesystem_avail_bytes": "node_exporter",
    "node_network_receive_bytes_total": "node_exporter",
    "node_textfile_scrape_error": "node_exporter",  # the textfile collector hpq's results go through
}
CLUSTER_SERIES = {  # once per cluster, from the controller
    "slurm_metrics_up": "node_exporter",
    "slurm_nodes_total": "node_exporter",
}
NOT_COLLECTED = {
    "gpu": "DCGM_FI_DEV_GPU_UTIL (hpq installs no DCGM exporter yet: no pinned image digest)",
    "efa": "node_amazonefa_* (hpq installs no EFA exporter yet: no pinned image digest)",
}

Query = Callable[[str], list[dict[str, Any]]]


class QueryFailed(Exception):
    """The workspace could not be asked (endpoint, credentials, IAM); the message says which."""


@dataclass
class Node:
    instance: str  # the ``instance`` label the node's series carry (ip-a-b-c-d)
    instance_id: str = ""
    instance_type: str = ""
    group: str = ""
    gpu: bool = False
    efa: bool = False


@dataclass
class NodeReport:
    node: Node
    expected: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # metric -> likely cause
    not_collected: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"instance": self.node.instance, "instance_id": self.node.instance_id,
                "instance_type": self.node.instance_type, "group": self.node.group,
                "expected": self.expected, "present": self.present, "missing": self.missing,
                "not_collected": self.not_collected}


def instance_label(private_dns_hostname: str) -> str:
    """``ip-10-1-0-5.us-west-2.compute.internal`` -> ``ip-10-1-0-5`` (the Slurm node name HyperPod gives)."""
    return private_dns_hostname.split(".", 1)[0]


def escape(value: str) -> str:
    """A PromQL string literal's body (double-quoted: backslash and double quote escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def promql(metric: str, cluster: str) -> str:
    return f'count by (instance, job) ({metric}{{cluster="{escape(cluster)}"}})'


def _by_instance(result: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """instance -> {job: value} from a vector result."""
    out: dict[str, dict[str, float]] = {}
    for row in result:
        labels = row.get("metric") or {}
        try:
            value = float((row.get("value") or [0, "nan"])[1])
        except (TypeError, ValueError):
            continue
        out.setdefault(str(labels.get("instance", "")), {})[str(labels.get("job", ""))] = value
    return out


def _cause(metric: str, job: str, up: dict[str, float] | None, any_series: bool) -> str:
    if not any_series:
        return ("nothing from this node: its Prometheus agent is not running or cannot remote-write "
                "(hpq-prometheus-agent.service's log: IAM aps:RemoteWrite on the workspace, the endpoint)")
    if up is None or job not in up:
        return f"the agent does not scrape {job} here (not installed: see the lifecycle log's observability line)"
    if up[job] == 0:
        return f"{job} is down: the agent's scrape of it fails (up == 0)"
    return f"{job} answers but does not emit {metric} (collector off or the hardware absent)"


def check(cluster: str, nodes: list[Node], query: Query) -> dict[str, Any]:
    """The verdict and, per node, the expected, present and missing series (QueryFailed -> INCONCLUSIVE)."""
    metrics = dict(NODE_SERIES, **CLUSTER_SERIES)
    try:
        up = _by_instance(query(f'up{{cluster="{escape(cluster)}"}}'))
        found = {m: _by_instance(query(promql(m, cluster))) for m in metrics}
    except QueryFailed as exc:
        return {"cluster": cluster, "verdict": "INCONCLUSIVE", "reason": str(exc), "nodes": [], "cluster_series": {}}
    reports = []
    for node in nodes:
        any_series = node.instance in up or any(node.instance in f for f in found.values())
        rep = NodeReport(node, expected=sorted(NODE_SERIES))
        for metric, job in sorted(NODE_SERIES.items()):
            if job in found[metric].get(node.instance, {}):
                rep.present.append(metric)
            else:
                rep.missing[metric] = _cause(metric, job, up.get(node.instance), any_series)
        rep.not_collected = [NOT_COLLECTED[k] for k, on in (("gpu", node.gpu), ("efa", node.efa)) if on]
        reports.append(rep)
    cluster_series = {}
    for metric in sorted(CLUSTER_SERIES):
        where = sorted(found[metric])
        cluster_series[metric] = ({"present": True, "instances": where} if where else
                                  {"present": False, "cause": "the controller's hpq-slurm-metrics.service does not "
                                   "write (see the lifecycle log's observability line on the controller)"})
    expected = sum(len(r.expected) for r in reports) + len(CLUSTER_SERIES)
    present = sum(len(r.present) for r in reports) + sum(1 for v in cluster_series.values() if v["present"])
    if not nodes:
        verdict, reason = "INCONCLUSIVE", "the cluster lists no nodes"
    elif present == expected:
        verdict, reason = "PASS", f"all {expected} expected series are in the workspace"
    else:
        verdict, reason = "FAIL", f"{expected - present} of {expected} expected series are missing"
    return {"cluster": cluster, "verdict": verdict, "reason": reason, "expected": expected, "present": present,
            "nodes": [r.as_dict() for r in reports], "cluster_series": cluster_series}
