"""What the doctor proposes and does: HyperPod's own view of each node, the plan (the exact commands), and
applying it (drain through Slurm, reboot and replace through SageMaker's HyperPod API).

AWS references (request and response shapes, error codes):
- ListClusterNodes / ClusterNodeSummary (InstanceId, InstanceGroupName, InstanceStatus {Status, Message},
  PrivateDnsHostname): https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListClusterNodes.html
  and API_ClusterNodeSummary.html; DescribeClusterNode (NodeDetails.PrivateDnsHostname):
  API_DescribeClusterNode.html; the Status values (Running | Failure | Pending | ShuttingDown |
  SystemUpdating | DeepHealthCheckInProgress | NotFound): API_ClusterInstanceStatusDetails.html.
- BatchRebootClusterNodes / BatchReplaceClusterNodes: request ``{"ClusterName", "NodeIds": [1..25 of
  i-[a-f0-9]{8}(?:[a-f0-9]{9})?]}``, response ``{"Successful": [ids], "Failed": [{"NodeId", "ErrorCode",
  "Message"}]}`` with ErrorCode InstanceIdNotFound | InvalidInstanceStatus | InstanceIdInUse |
  InternalServerError: API_BatchRebootClusterNodes.html, API_BatchReplaceClusterNodes.html,
  API_BatchRebootClusterNodesError.html, API_BatchReplaceClusterNodesError.html (all under
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/). Replacing destroys the node's volumes.
- Draining: ``scontrol update NodeName=... State=DRAIN Reason=...`` and ``State=RESUME`` (scontrol(1)) on Slurm;
  ``kubectl cordon``/``uncordon`` on EKS (the EKS backend patches ``spec.unschedulable`` as kubectl does).

The Slurm node name of a HyperPod node is the first label of its PrivateDnsHostname (``ip-10-1-2-3``), which is
how the doctor's per-node reports (tagged with SLURMD_NODENAME) meet HyperPod's instance ids. On EKS a HyperPod
node registers as ``hyperpod-<instance id>`` (``hyperpod-i-048cd15160ee28917``, as ``kubectl get nodes`` prints it
in AWS's guidance repository aws-solutions-library-samples/guidance-for-protein-language-esm-model-training-with-
nvidia-bionemo-framework, source/hyperpod_eks/README.md), so the Kubernetes node name and the instance id are one
prefix apart.

The node actions are one object per backend (:class:`SlurmNodes` here, validation/eks.EksBackend on EKS):
``drain_command``/``resume_command`` (the text a person types), ``drain``/``resume`` (do it; the error text or
""), and ``orchestrator`` (how HyperPod's view is keyed).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from hpq.errors import UsageError
from hpq.scripts import run_node_doctor, xid_catalog
from hpq.validation.backend import run_test
from hpq.validation.request import NCCL, TestRequest

BATCH_MAX = 25  # node ids per BatchReboot/BatchReplaceClusterNodes request (API reference)
REASON_MAX = 200
RUNNING = "Running"
Echo = Callable[[str], None]


@dataclass
class NodeView:
    """One node as HyperPod sees it."""

    node: str  # the Slurm node name (first label of PrivateDnsHostname)
    instance_id: str
    group: str
    status: str
    message: str = ""
    instance_type: str = ""


EVENTS_WINDOW_S = 24 * 3600  # HyperPod's recent events shown beside the findings: the last day
EVENTS_MAX = 50


def cluster_events(sm: Any, cluster: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """HyperPod's recent cluster events, newest first (ListClusterEvents, every page up to EVENTS_MAX): each
    as ``{"time", "level", "resource", "group", "instance_id", "description", "event_id"}``. The API answers only
    for clusters in Continuous node provisioning mode; its error is the caller's to show.
    Reference: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListClusterEvents.html."""
    now = now or datetime.now(timezone.utc)
    out: list[dict[str, Any]] = []
    token = None
    while len(out) < EVENTS_MAX:
        kwargs: dict[str, Any] = {"ClusterName": cluster, "SortOrder": "Descending", "MaxResults": 50,
                                  "EventTimeAfter": now - timedelta(seconds=EVENTS_WINDOW_S)}
        if token:
            kwargs["NextToken"] = token
        page = sm.list_cluster_events(**kwargs)
        for e in page.get("Events", []):
            when = e.get("EventTime")
            out.append({"time": when.isoformat() if hasattr(when, "isoformat") else str(when),
                        "level": e.get("EventLevel", ""), "resource": e.get("ResourceType", ""),
                        "group": e.get("InstanceGroupName", ""), "instance_id": e.get("InstanceId", ""),
                        "description": e.get("Description", ""), "event_id": e.get("EventId", "")})
        token = page.get("NextToken")
        if not token:
            break
    return out[:EVENTS_MAX]


def _slurm_name(hostname: str) -> str:
    return hostname.split(".", 1)[0] if hostname else ""


EKS_NODE_PREFIX = "hyperpod-"


def eks_node_name(instance_id: str) -> str:
    """The Kubernetes node name HyperPod gives an instance (``hyperpod-i-...``)."""
    return EKS_NODE_PREFIX + instance_id


def node_summaries(sm: Any, cluster: str) -> list[dict[str, Any]]:
    """ListClusterNodes' ClusterNodeSummaries, every page."""
    summaries: list[dict[str, Any]] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"ClusterName": cluster}
        if token:
            kwargs["NextToken"] = token
        page = sm.list_cluster_nodes(**kwargs)
        summaries += page.get("ClusterNodeSummaries", [])
        token = page.get("NextToken")
        if not token:
            break
    return summaries


def hyperpod_view(sm: Any, cluster: str, orchestrator: str = "slurm") -> dict[str, NodeView]:
    """Node name -> NodeView, from ListClusterNodes (every page). Slurm: the name is the first label of
    PrivateDnsHostname (DescribeClusterNode where the summary has none; a node without a host name yet is kept
    under its instance id). EKS: ``hyperpod-<instance id>``, the Kubernetes node's name."""
    summaries = node_summaries(sm, cluster)
    view: dict[str, NodeView] = {}
    for s in summaries:
        status = s.get("InstanceStatus") or {}
        if orchestrator == "eks":
            name = eks_node_name(s["InstanceId"])
            view[name] = NodeView(name, s["InstanceId"], s.get("InstanceGroupName", ""), status.get("Status", ""),
                                  status.get("Message", ""), s.get("InstanceType", ""))
            continue
        hostname = s.get("PrivateDnsHostname") or ""
        if not hostname:
            details = sm.describe_cluster_node(ClusterName=cluster, NodeId=s["InstanceId"]).get("NodeDetails", {})
            hostname = details.get("PrivateDnsHostname") or ""
        name = _slurm_name(hostname) or s["InstanceId"]
        view[name] = NodeView(name, s["InstanceId"], s.get("InstanceGroupName", ""), status.get("Status", ""),
                              status.get("Message", ""), s.get("InstanceType", ""))
    return view


SLOW_NODE = "slow_node"


def sweep_findings(sweep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Slurm node -> a ``slow_node`` finding, from ``hpq test sweep --output json`` (or run-nccl-test --sweep's
    document): each node in ``slow_nodes``, with its score against the cluster median as the evidence.

    A node slow with every partner (scripts/sweep.py) has its cause in itself but no failing check to say which:
    critical, action reboot (retrains the PCIe and EFA links, resets the GPUs' clocks); the re-check after --fix
    and a sweep pair with a healthy node say whether that was enough. Refuses a document that is not a sweep."""
    if not isinstance(sweep, dict) or not isinstance(sweep.get("slow_nodes"), list):
        raise UsageError("--sweep-result: not the JSON of `hpq test sweep --output json` (no slow_nodes list)")
    scores = sweep.get("scores") or {}
    median = sweep.get("median_gbps")
    out = {}
    for node in sweep["slow_nodes"]:
        score = scores.get(node)
        have = "?" if score is None else f"{score:.2f}"
        want = "?" if median is None else f"{median:.2f}"
        evidence = f"pairwise sweep: {have} GB/s against the cluster median {want} GB/s (slow with every partner)"
        out[str(node)] = {"kind": SLOW_NODE, "severity": xid_catalog.SEVERITY_CRITICAL, "action": xid_catalog.ACTION_REBOOT,
                          "evidence": evidence}
    return out


def merge_sweep(nodes: list[dict[str, Any]], sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The doctor's node entries with the sweep's slow nodes added as findings (a node the doctor did not report
    gets an entry of its own), each node's verdict and action recomputed: the same plan and --fix path."""
    slow = sweep_findings(sweep)
    merged = [dict(n, findings=list(n.get("findings", []))) for n in nodes]
    by_node = {n["node"]: n for n in merged}
    for node, finding in slow.items():
        entry = by_node.get(node)
        if entry is None:
            entry = {"node": node, "verdict": "FAIL", "findings": [], "unchecked": [], "fingerprint": {}}
            merged.append(entry)
            by_node[node] = entry
        entry["findings"].append(finding)
        entry["verdict"] = "FAIL"
        entry["action"] = max((f.get("action", xid_catalog.ACTION_NONE) for f in entry["findings"]),
                              key=xid_catalog.ACTIONS.index)
    return merged


@dataclass
class Step:
    """One action on one node, as the exact command a person would type."""

    node: str
    action: str  # drain, reboot, replace (resume after a node came back)
    command: str
    reason: str
    instance_id: str = ""
    done: bool = False
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def drain_command(node: str, reason: str) -> str:
    return f"sudo scontrol update NodeName={shlex.quote(node)} State=DRAIN Reason={shlex.quote(reason[:REASON_MAX])}"


def resume_command(node: str) -> str:
    return f"sudo scontrol update NodeName={shlex.quote(node)} State=RESUME"


def api_command(action: str, cluster: str, ids: list[str]) -> str:
    verb = {xid_catalog.ACTION_REBOOT: "batch-reboot-cluster-nodes", xid_catalog.ACTION_REPLACE: "batch-replace-cluster-nodes"}[action]
    return f"aws sagemaker {verb} --cluster-name {shlex.quote(cluster)} --node-ids {' '.join(ids)}"


class SlurmNodes:
    """Slurm's node actions: scontrol on the controller through the backend's shell."""

    orchestrator = "slurm"

    def __init__(self, shell: Any = None):
        self.shell = shell

    drain_command = staticmethod(drain_command)
    resume_command = staticmethod(resume_command)

    def drain(self, node: str, reason: str) -> str:
        return self._run(drain_command(node, reason))

    def resume(self, node: str) -> str:
        return self._run(resume_command(node))

    def _run(self, command: str) -> str:
        code, out, err = self.shell.run(command, timeout=60)
        return "" if code == 0 else (err or out).strip()[-300:] or f"exit {code}"


def actions_for(backend: Any) -> Any:
    """The backend's node actions: its own (EKS), else Slurm's through its shell."""
    return backend if hasattr(backend, "drain") else SlurmNodes(getattr(backend, "shell", None))


def plan(nodes: list[dict[str, Any]], view: dict[str, NodeView], cluster: str, actions: Any = None) -> list[Step]:
    """Per node with an action: drain it first (jobs stay off it), then reboot or replace it through HyperPod.
    A node HyperPod does not list (or no view at all) can only be drained: its step says so."""
    actions = actions or SlurmNodes()
    steps: list[Step] = []
    for n in nodes:
        action = n.get("action", xid_catalog.ACTION_NONE)
        if action == xid_catalog.ACTION_NONE:
            continue
        worst = [f for f in n.get("findings", []) if f.get("action") == action]
        reason = "hpq doctor: " + "; ".join(f"{f.get('kind')}: {f.get('evidence')}" for f in worst[:2])
        steps.append(Step(n["node"], xid_catalog.ACTION_DRAIN, actions.drain_command(n["node"], reason), reason))
        if action in (xid_catalog.ACTION_REBOOT, xid_catalog.ACTION_REPLACE):
            v = view.get(n["node"])
            if v is None:
                steps.append(Step(n["node"], action, "", reason, error="not in ListClusterNodes: cannot " + action))
            else:
                steps.append(Step(n["node"], action, api_command(action, cluster, [v.instance_id]), reason,
                                  v.instance_id))
    return steps


def apply(steps: list[Step], actions: Any, sm: Any, cluster: str, echo: Echo) -> None:
    """Do the plan: drains (scontrol on the controller, or cordons), then one API request per action and 25
    nodes. Each step records whether it was done, and why not (the API's ErrorCode and Message, or the drain's
    error)."""
    for s in steps:
        if s.action != xid_catalog.ACTION_DRAIN:
            continue
        s.error = actions.drain(s.node, s.reason)
        s.done = not s.error
        echo(f"{s.node}: drain {'done' if s.done else 'FAILED: ' + s.error}")
    for action, call in ((xid_catalog.ACTION_REBOOT, sm.batch_reboot_cluster_nodes),
                         (xid_catalog.ACTION_REPLACE, sm.batch_replace_cluster_nodes)):
        todo = [s for s in steps if s.action == action and s.instance_id and not s.error]
        for i in range(0, len(todo), BATCH_MAX):
            chunk = todo[i:i + BATCH_MAX]
            answer = call(ClusterName=cluster, NodeIds=[s.instance_id for s in chunk])
            ok = set(answer.get("Successful") or [])
            failed = {f.get("NodeId"): f for f in answer.get("Failed") or []}
            for s in chunk:
                s.done = s.instance_id in ok
                if not s.done:
                    f = failed.get(s.instance_id, {})
                    s.error = f"{f.get('ErrorCode', 'not acknowledged')}: {f.get('Message', '')}".strip()
                echo(f"{s.node}: {action} {s.instance_id} {'requested' if s.done else 'FAILED: ' + s.error}")


def instance_groups(sm: Any, cluster: str) -> dict[str, str]:
    """Instance id -> InstanceGroupName of every node HyperPod lists now: taken before a replacement, so the
    instance that appears in the group afterwards can be told from those that were there."""
    return {s["InstanceId"]: s.get("InstanceGroupName", "") for s in node_summaries(sm, cluster)}


@dataclass
class Back:
    """A node acted on, followed until it is back. A reboot keeps the instance; a replacement gives the group a
    new instance (BatchReplaceClusterNodes answers only the old ids, API_BatchReplaceClusterNodes.html), found in
    ListClusterNodes as the instance of the same InstanceGroupName that was not listed before the request."""

    node: str  # the name the doctor knew it by
    action: str  # reboot | replace
    old_id: str
    group: str
    instance_id: str = ""  # the instance now: the same after a reboot, the new one after a replacement
    name: str = ""  # its node name now: the Slurm name, or hyperpod-<instance id> on EKS
    status: str = "NotFound"  # HyperPod's InstanceStatus.Status of instance_id
    ready: str = ""  # EKS: the Kubernetes node's Ready condition (Ready | NotReady | absent); "" where not asked
    seen_down: bool = False

    @property
    def back(self) -> bool:
        return self.status == RUNNING and self.ready in ("", "Ready")


def _host_label(sm: Any, cluster: str, summary: dict[str, Any]) -> str:
    hostname = summary.get("PrivateDnsHostname") or ""
    if not hostname:
        details = sm.describe_cluster_node(ClusterName=cluster, NodeId=summary["InstanceId"]).get("NodeDetails", {})
        hostname = details.get("PrivateDnsHostname") or ""
    return _slurm_name(hostname)


def follow(sm: Any, cluster: str, acted: list[Step], groups: dict[str, str], actions: Any, timeout_s: float,
           echo: Echo, poll_s: float = 15.0) -> list[Back]:
    """Poll ListClusterNodes until every node acted on is back: a rebooted instance Running again after having
    been seen not Running (or Running at the deadline); a replaced node's new instance (same group, an id not in
    ``groups``, the earliest launched first when one group had several replaced) Running. Where the actions can
    read the orchestrator's node (EKS: ``node_ready``), that node must also be Ready: on EKS the new instance
    registers as a new Kubernetes node, ``hyperpod-<new id>``. Bounded by ``timeout_s`` in all."""
    eks = actions.orchestrator == "eks"
    ready_of = getattr(actions, "node_ready", None)
    backs = [Back(s.node, s.action, s.instance_id, groups.get(s.instance_id, ""),
                  instance_id=s.instance_id if s.action == xid_catalog.ACTION_REBOOT else "",
                  name=s.node if s.action == xid_catalog.ACTION_REBOOT else "",
                  ready="" if ready_of is None else "not checked") for s in acted]
    deadline = time.monotonic() + timeout_s
    while True:
        summaries = node_summaries(sm, cluster)
        by_id = {s["InstanceId"]: s for s in summaries}
        claimed = {b.instance_id for b in backs if b.instance_id}
        for b in backs:
            if b.action == xid_catalog.ACTION_REPLACE and not b.instance_id and b.group:
                new = [s for s in summaries if s.get("InstanceGroupName") == b.group
                       and s["InstanceId"] not in groups and s["InstanceId"] not in claimed]
                if new:
                    pick = min(new, key=lambda s: (str(s.get("LaunchTime", "")), s["InstanceId"]))
                    b.instance_id, b.seen_down = pick["InstanceId"], True
                    claimed.add(b.instance_id)
                    b.name = eks_node_name(b.instance_id) if eks else (_host_label(sm, cluster, pick) or b.node)
                    echo(f"{b.node}: replaced by {b.instance_id} in group {b.group} (node {b.name})")
            summary = by_id.get(b.instance_id) if b.instance_id else None
            b.status = (summary.get("InstanceStatus") or {}).get("Status", "") if summary else "NotFound"
            b.seen_down |= b.status != RUNNING
            if ready_of is not None and b.status == RUNNING:
                b.ready = ready_of(b.name)
        late = time.monotonic() > deadline
        if late or all(b.back and b.seen_down for b in backs):
            return backs
        echo("waiting for " + ", ".join(
            f"{b.name or b.node} ({b.status if b.instance_id else 'no new instance in group ' + (b.group or '?')}"
            + (f", Kubernetes {b.ready}" if b.status == RUNNING and b.ready else "") + ")"
            for b in backs if not (b.back and b.seen_down)))
        time.sleep(poll_s)


def _resume(b: Back, actions: Any, echo: Echo) -> None:
    """Resume a node that is back. A rebooted node is the same node object: Slurm RESUME, or uncordon on EKS.
    A replaced node on Slurm takes the old Slurm name (the assumption :func:`_line` states), whose DRAIN
    slurmctld keeps: RESUME. On EKS the new instance is a new Node object: cordoning set ``spec.unschedulable``
    on the old object, and a kubelet registers its node schedulable (kubelet ``--register-schedulable``,
    default true: https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/; cordon is a field
    of the Node object: https://kubernetes.io/docs/concepts/architecture/nodes/#manual-node-administration),
    so there is nothing to uncordon."""
    if b.action == xid_catalog.ACTION_REPLACE and actions.orchestrator == "eks":
        echo(f"{b.name}: Ready; a new Kubernetes node (registered schedulable): no uncordon needed")
        return
    error = actions.resume(b.name)
    echo(f"{b.name}: back; resume {'done' if not error else 'FAILED: ' + error}")


def _line(b: Back, verdict: str, orchestrator: str, wait_s: float) -> str:
    """One node's part of the fix report: what was done, the node re-checked, its verdict."""
    if b.action == xid_catalog.ACTION_REBOOT:
        return f"{b.node} {verdict} (rebooted {b.old_id})"
    if not b.instance_id:
        return (f"{b.node} INCONCLUSIVE (replaced {b.old_id}: no new instance in group {b.group or '?'} "
                f"within {int(wait_s)} s)")
    line = f"{b.name} {verdict} (replaced {b.node} {b.old_id} by {b.instance_id}"
    if orchestrator != "eks":
        line += (f"; assumed: the new instance keeps the Slurm name, taken as the first label of its "
                 f"PrivateDnsHostname, {b.name}")
    return line + ")"


PAIR_UNPINNED_EKS = ("not run: the EKS nccl-test MPIJob (manifests/nccl_test.yaml.j2) places its workers by "
                     "instance type and HyperPod's health label only and cannot be pinned to two named nodes; "
                     "`hpq test nccl` over the cluster is the check")


def pair_partner(nodes: list[dict[str, Any]], exclude: set[str]) -> str:
    """A healthy partner for a fixed node: the first node (natural order) the re-check passed that was not
    acted on; "" when there is none."""
    healthy = [n["node"] for n in nodes if n.get("verdict") == "PASS" and n["node"] not in exclude]
    return min(healthy, key=run_node_doctor.natural) if healthy else ""


def sweep_pair(backend: Any, orchestrator: str, node: str, partner: str, timeout_s: int,
               echo: Echo) -> dict[str, Any]:
    """The fixed node and a healthy one as a 2-node nccl test pinned to them (run-nccl-test --nodelist through
    the controller, srun -w / salloc -w), judged by the nccl judge as `hpq test nccl` is: a slow or failing
    pair is a FAIL. Not run (INCONCLUSIVE, with the reason) without a partner or on EKS (see PAIR_UNPINNED_EKS).
    ``ran`` says whether its verdict is evidence."""
    entry: dict[str, Any] = {"node": node, "partner": partner, "ran": False, "outcome": "INCONCLUSIVE",
                             "exit_code": 3, "command": "", "message": ""}
    if orchestrator == "eks":
        entry["message"] = PAIR_UNPINNED_EKS
    elif not partner:
        entry["message"] = "not run: no healthy node the re-check passed to pair it with"
    else:
        request = TestRequest(NCCL, nodes=2, extra=("--nodelist", f"{node},{partner}"), timeout_s=timeout_s)
        echo(f"{node}: nccl test paired with {partner}")
        result = run_test(backend, request, echo)
        entry.update(ran=True, outcome=result.outcome, exit_code=result.exit_code,
                     command=f"run-nccl-test 2 --nodelist {node},{partner}",
                     message=(result.message.splitlines() or [""])[0])
    return entry


def fix(cluster: str, steps: list[Step], backend: Any, sm: Any, request: Any, wait_s: float, echo: Echo,
        poll_s: float = 15.0) -> dict[str, Any]:
    """Apply the plan, follow rebooted/replaced nodes until they are back (a replaced node under its new
    instance id, and on EKS its new Kubernetes node Ready), resume them, run the doctor again and judge the node
    as it is now; then each node that passed, paired with a healthy node in a pinned 2-node nccl test
    (:func:`sweep_pair`).

    Exit 0 only when every node acted on passes the re-check and every pair that ran passes; 1 when a step
    failed, a node still fails or a pair fails; 3 when a node is only drained (a person decides), did not come
    back in ``wait_s``, or a pair that ran was inconclusive. A pair that could not be run (EKS; no healthy
    partner) is reported INCONCLUSIVE with its reason and does not count as evidence either way."""
    actions = actions_for(backend)
    acting = [s for s in steps if s.action in (xid_catalog.ACTION_REBOOT, xid_catalog.ACTION_REPLACE)]
    groups = instance_groups(sm, cluster) if any(s.action == xid_catalog.ACTION_REPLACE for s in acting) else {}
    apply(steps, actions, sm, cluster, echo)
    failed = [s for s in steps if not s.done]
    acted = sorted((s for s in acting if s.done), key=lambda s: s.node)
    drained_only = sorted({s.node for s in steps} - {s.node for s in acting})
    backs = follow(sm, cluster, acted, groups, actions, wait_s, echo, poll_s) if acted else []
    for b in backs:
        if b.back:
            _resume(b, actions, echo)
    recheck = run_test(backend, request, echo)
    by_node = {n["node"]: n for n in recheck.data.get("nodes", [])}
    verdicts = {b.node: (by_node.get(b.name, {}).get("verdict", "not checked") if b.back else "not back")
                for b in backs}
    healed = [b for b in backs if verdicts[b.node] == "PASS"]
    partner = pair_partner(recheck.data.get("nodes", []), {b.name for b in backs})
    pairs = [sweep_pair(backend, actions.orchestrator, b.name, partner, request.timeout_s, echo) for b in healed]
    ran = [p for p in pairs if p["ran"]]  # a pair that could not be run is reported, not counted as evidence
    if failed or "FAIL" in verdicts.values() or any(p["outcome"] == "FAIL" for p in ran):
        code, word = 1, "FAIL"
    elif any(v != "PASS" for v in verdicts.values()) or drained_only or any(p["outcome"] != "PASS" for p in ran):
        code, word = 3, "INCONCLUSIVE"
    else:
        code, word = 0, "PASS"
    parts = []
    if backs:
        parts.append("rebooted/replaced: " + "; ".join(
            _line(b, verdicts[b.node] if b.back else f"not back (HyperPod {b.status}"
                  + (f", Kubernetes {b.ready}" if b.ready else "") + ")", actions.orchestrator, wait_s)
            for b in backs))
    if pairs:
        parts.append("sweep pair: " + "; ".join(
            f"{p['node']}+{p['partner'] or '?'} {p['outcome']} ({p['message']})" for p in pairs))
    if drained_only:
        parts.append(f"drained {', '.join(drained_only)} (a person decides; then: "
                     + "; ".join(actions.resume_command(n) for n in drained_only) + ")")
    if failed:
        parts.append("failed: " + "; ".join(f"{s.node} {s.action}: {s.error}" for s in failed))
    return {"outcome": word, "exit_code": code, "message": f"{word}: --fix: " + "; ".join(parts),
            "steps": [s.to_dict() for s in steps], "status": {b.node: b.status for b in backs},
            "followed": [dict(asdict(b), back=b.back) for b in backs], "pairs": pairs,
            "recheck": recheck.to_dict()}
