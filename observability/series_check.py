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
GPU workers also send the DCGM fields hpq's GPU writer reads (scripts/gpu_metrics.py: the seed's six and
uncorrectable ECC, one series per GPU of the type), and EFA workers the EFA devices and their traffic counters
(scripts/efa_metrics.py, one info series per EFA device), both through node_exporter's textfile collector;
Trainium workers the device series hpq's Neuron writer writes from neuron-monitor at all times
(scripts/neuron_metrics.py). A writer's series are evidence only while its up series is 1 and its file is fresh
(node_textfile_mtime_seconds): node_exporter serves a stopped writer's last file forever. Shown, never counted:
the EFA sick-link counters (older drivers lack them) and the Neuron runtime series (only while an application
runs).

Verdict: PASS only when every expected series of every node is there; FAIL when any is missing; INCONCLUSIVE when
the workspace could not be asked or the cluster has no nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from hpq.lifecycle import catalog, observability
from hpq.scripts import efa_metrics, gpu_metrics, neuron_metrics

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
GPU_SERIES = {metric: "node_exporter" for metric in (  # GPU workers: hpq-gpu-metrics.service's file
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")}
EFA_SERIES = {metric: "node_exporter" for metric in (  # EFA workers: hpq-efa-metrics.service's file
    "node_amazonefa_info", "node_amazonefa_rx_bytes", "node_amazonefa_tx_bytes")}
# The sick-link counters: asked for and shown, never required. Older EFA drivers do not expose them (AWS's own
# real scrape, tests/observability/data/exporters/efa_exporter_sample.txt, has none), so their absence says
# nothing about the node.
EFA_SICK_LINK = ("node_amazonefa_retrans_timeout_events", "node_amazonefa_unresponsive_remote_events",
                 "node_amazonefa_impaired_remote_conn_events")
NEURON_SERIES = {metric: "node_exporter" for metric in (  # Trainium workers: hpq-neuron-metrics.service's file
    "neuron_hardware_info", "hardware_ecc_events_total", "system_vcpu_usage_ratio")}
# hpq's writers on workers: hardware -> (unit, its up series, its textfile, the series it owes)
# (the unit as the lifecycle names it, the file as the writer names it)
WRITERS = {
    "gpu": (observability.WRITERS["gpu_metrics"][0], "hpq_gpu_metrics_up", gpu_metrics.OUTPUT_NAME, GPU_SERIES),
    "efa": (observability.WRITERS["efa_metrics"][0], "hpq_efa_metrics_up", efa_metrics.OUTPUT_NAME, EFA_SERIES),
    "neuron": (observability.WRITERS["neuron_metrics"][0], "hpq_neuron_metrics_up", neuron_metrics.OUTPUT_NAME,
               NEURON_SERIES),
}
WRITER_OF = {m: (unit, up) for unit, up, _, series in WRITERS.values() for m in series}
# A writer rewrites its file every 30 s; node_exporter serves the last one forever, so a file older than this
# means the writer stopped and its values are stale (node_exporter's node_textfile_mtime_seconds).
STALE_S = 150.0
# metric -> what its count per node must reach: one series per GPU, one info per EFA device
COUNTED = {"DCGM_FI_DEV_GPU_UTIL": "gpu_count", "node_amazonefa_info": "efa_count"}
NOT_COLLECTED = {
    "neuron": "neuroncore_utilization_ratio, neuron_runtime_memory_used_bytes, execution_*: only while a Neuron "
              "application runs (not expected)",
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
    neuron: bool = False
    gpu_count: int = 0  # what the type has (0: not known, not checked)
    efa_count: int = 0

    def kinds(self) -> list[str]:
        return [k for k, on in (("gpu", self.gpu), ("efa", self.efa), ("neuron", self.neuron)) if on]

    def expected(self) -> dict[str, str]:
        """metric -> job, for this node's hardware."""
        out = dict(NODE_SERIES)
        if self.gpu:
            out.update(GPU_SERIES)
        if self.efa:
            out.update(EFA_SERIES)
        if self.neuron:
            out.update(NEURON_SERIES)
        return out


def node_for(instance: str, instance_id: str, instance_type: str, group: str) -> Node:
    """A node whose hardware (GPU, EFA, Trainium) is what hpq's catalog says of its type (ml. or not)."""
    entry = catalog.CATALOG.get(instance_type)
    gpu = bool(entry and entry.accelerator == catalog.GPU)
    return Node(instance, instance_id, instance_type, group, gpu=gpu, efa=bool(entry and entry.has_efa),
                neuron=bool(entry and entry.accelerator == catalog.TRAINIUM),
                gpu_count=entry.accelerator_count if entry and gpu else 0,
                efa_count=entry.efa_interfaces if entry else 0)


@dataclass
class NodeReport:
    node: Node
    expected: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # metric -> likely cause
    not_collected: list[str] = field(default_factory=list)
    optional: dict[str, bool] = field(default_factory=dict)  # shown, never counted (EFA_SICK_LINK)

    def as_dict(self) -> dict[str, Any]:
        return {"instance": self.node.instance, "instance_id": self.node.instance_id,
                "instance_type": self.node.instance_type, "group": self.node.group,
                "expected": self.expected, "present": self.present, "missing": self.missing,
                "not_collected": self.not_collected, "optional": self.optional}


def instance_label(private_dns_hostname: str) -> str:
    """``ip-10-1-0-5.us-west-2.compute.internal`` -> ``ip-10-1-0-5`` (the Slurm node name HyperPod gives)."""
    return private_dns_hostname.split(".", 1)[0]


def escape(value: str) -> str:
    """A PromQL string literal's body (double-quoted: backslash and double quote escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def promql(metric: str, cluster: str) -> str:
    return f'count by (instance, job) ({metric}{{cluster="{escape(cluster)}"}})'


def _samples(result: Iterable[dict[str, Any]]) -> Iterable[tuple[dict[str, Any], float]]:
    """(labels, value) of each row of a vector result; a row whose value is not a number is skipped."""
    for row in result:
        try:
            value = float((row.get("value") or [0, "nan"])[1])
        except (TypeError, ValueError):
            continue
        yield row.get("metric") or {}, value


def _by_instance(result: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """instance -> {job: value} from a vector result."""
    out: dict[str, dict[str, float]] = {}
    for labels, value in _samples(result):
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
    if metric in WRITER_OF:
        unit, up_series = WRITER_OF[metric]
        return (f"{job} answers but {unit} wrote no {metric} (not running, or its tool failed: see its journal "
                f"and {up_series})")
    return f"{job} answers but does not emit {metric} (collector off or the hardware absent)"


def _ages(result: Iterable[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(instance, writer kind) -> seconds since its textfile was written, from node_textfile_mtime_seconds."""
    names = {textfile: kind for kind, (_, _, textfile, _) in WRITERS.items()}
    out: dict[tuple[str, str], float] = {}
    for labels, age in _samples(result):
        kind = names.get(str(labels.get("file", "")).rsplit("/", 1)[-1])
        if kind:
            out[(str(labels.get("instance", "")), kind)] = age
    return out


def _judge_writer(rep: NodeReport, kind: str, up: dict[str, float], age: float | None) -> None:
    """A writer that says it failed, or whose file stopped changing, owes its series anew: present becomes missing."""
    unit, up_series, textfile, series = WRITERS[kind]
    if any(v == 0 for v in up.values()):
        why = (f"{unit} reports {up_series} 0: its tool failed or found no device (the unit's journal says which); "
               "what it wrote is not evidence")
    elif age is not None and age > STALE_S:
        why = (f"{unit}'s {textfile} was last written {age:.0f}s ago (over {STALE_S:.0f}s): the writer stopped, "
               "its values are stale")
    else:
        return
    for metric in sorted(series):
        if metric in rep.present:
            rep.present.remove(metric)
            rep.missing[metric] = why


def check(cluster: str, nodes: list[Node], query: Query) -> dict[str, Any]:
    """The verdict and, per node, the expected, present and missing series (QueryFailed -> INCONCLUSIVE)."""
    metrics = dict(NODE_SERIES, **CLUSTER_SERIES)
    for node in nodes:
        metrics.update(node.expected())
    kinds = sorted({k for node in nodes for k in node.kinds()})
    if any(node.efa for node in nodes):
        metrics.update({m: "node_exporter" for m in EFA_SICK_LINK})
    c = escape(cluster)
    try:
        up = _by_instance(query(f'up{{cluster="{c}"}}'))
        found = {m: _by_instance(query(promql(m, cluster))) for m in metrics}
        writer_up = {k: _by_instance(query(f'{WRITERS[k][1]}{{cluster="{c}"}}')) for k in kinds}
        ages = _ages(query(f'time() - node_textfile_mtime_seconds{{cluster="{c}"}}')) if kinds else {}
    except QueryFailed as exc:
        return {"cluster": cluster, "verdict": "INCONCLUSIVE", "reason": str(exc), "nodes": [], "cluster_series": {}}
    reports = []
    for node in nodes:
        any_series = node.instance in up or any(node.instance in f for f in found.values())
        expected_here = node.expected()
        rep = NodeReport(node, expected=sorted(expected_here))
        for metric, job in sorted(expected_here.items()):
            count = found[metric].get(node.instance, {}).get(job)
            want = getattr(node, COUNTED[metric]) if metric in COUNTED else 0
            if count is None:
                rep.missing[metric] = _cause(metric, job, up.get(node.instance), any_series)
            elif want and count < want:
                rep.missing[metric] = (f"{count:.0f} of the {want} {'GPUs' if metric in GPU_SERIES else 'EFA devices'}"
                                       f" of {node.instance_type} report it: the tool sees fewer than the type has "
                                       "(hpq doctor on this node says which)")
            else:
                rep.present.append(metric)
        for kind in node.kinds():
            _judge_writer(rep, kind, writer_up[kind].get(node.instance, {}), ages.get((node.instance, kind)))
        if node.efa:
            rep.optional = {m: "node_exporter" in found[m].get(node.instance, {}) for m in EFA_SICK_LINK}
            if not all(rep.optional.values()):
                rep.not_collected.append("the EFA sick-link counters (retransmit timeouts, unresponsive remote, "
                                         "impaired connections): not shown by this node's EFA driver (older drivers "
                                         "lack them; not expected)")
        if node.neuron:
            rep.not_collected.append(NOT_COLLECTED["neuron"])
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
