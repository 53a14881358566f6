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
- Draining: ``scontrol update NodeName=... State=DRAIN Reason=...`` and ``State=RESUME`` (scontrol(1)).

The Slurm node name of a HyperPod node is the first label of its PrivateDnsHostname (``ip-10-1-2-3``), which is
how the doctor's per-node reports (tagged with SLURMD_NODENAME) meet HyperPod's instance ids.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from hpq.scripts import xid_catalog
from hpq.validation.backend import run_test

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


def _slurm_name(hostname: str) -> str:
    return hostname.split(".", 1)[0] if hostname else ""


def hyperpod_view(sm: Any, cluster: str) -> dict[str, NodeView]:
    """Slurm node name -> NodeView, from ListClusterNodes (every page), DescribeClusterNode where the summary
    has no PrivateDnsHostname. A node HyperPod lists without a host name yet is kept under its instance id."""
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
    view: dict[str, NodeView] = {}
    for s in summaries:
        hostname = s.get("PrivateDnsHostname") or ""
        if not hostname:
            details = sm.describe_cluster_node(ClusterName=cluster, NodeId=s["InstanceId"]).get("NodeDetails", {})
            hostname = details.get("PrivateDnsHostname") or ""
        status = s.get("InstanceStatus") or {}
        name = _slurm_name(hostname) or s["InstanceId"]
        view[name] = NodeView(name, s["InstanceId"], s.get("InstanceGroupName", ""), status.get("Status", ""),
                              status.get("Message", ""), s.get("InstanceType", ""))
    return view


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


def plan(nodes: list[dict[str, Any]], view: dict[str, NodeView], cluster: str) -> list[Step]:
    """Per node with an action: drain it first (jobs stay off it), then reboot or replace it through HyperPod.
    A node HyperPod does not list (or no view at all) can only be drained: its step says so."""
    steps: list[Step] = []
    for n in nodes:
        action = n.get("action", xid_catalog.ACTION_NONE)
        if action == xid_catalog.ACTION_NONE:
            continue
        worst = [f for f in n.get("findings", []) if f.get("action") == action]
        reason = "hpq doctor: " + "; ".join(f"{f.get('kind')}: {f.get('evidence')}" for f in worst[:2])
        steps.append(Step(n["node"], xid_catalog.ACTION_DRAIN, drain_command(n["node"], reason), reason))
        if action in (xid_catalog.ACTION_REBOOT, xid_catalog.ACTION_REPLACE):
            v = view.get(n["node"])
            if v is None:
                steps.append(Step(n["node"], action, "", reason, error="not in ListClusterNodes: cannot " + action))
            else:
                steps.append(Step(n["node"], action, api_command(action, cluster, [v.instance_id]), reason,
                                  v.instance_id))
    return steps


def apply(steps: list[Step], shell: Any, sm: Any, cluster: str, echo: Echo) -> None:
    """Do the plan: drains on the controller, then one API request per action and 25 nodes. Each step records
    whether it was done, and why not (the API's ErrorCode and Message, or scontrol's error)."""
    for s in steps:
        if s.action != xid_catalog.ACTION_DRAIN:
            continue
        code, out, err = shell.run(s.command, timeout=60)
        s.done = code == 0
        s.error = "" if s.done else (err or out).strip()[-300:] or f"exit {code}"
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


def wait_running(sm: Any, cluster: str, nodes: list[str], timeout_s: float, echo: Echo,
                 poll_s: float = 15.0) -> dict[str, str]:
    """Poll ListClusterNodes until every named node is listed Running again (a replaced node keeps its Slurm
    name in this view only if its host name is kept; one not listed is reported as such). Node -> last status."""
    deadline = time.monotonic() + timeout_s
    seen_down: set[str] = set()
    while True:
        view = hyperpod_view(sm, cluster)
        status = {n: (view[n].status if n in view else "NotFound") for n in nodes}
        seen_down |= {n for n, s in status.items() if s != RUNNING}
        # Running again after having been seen not running, or Running at the deadline's end.
        if all(s == RUNNING for s in status.values()) and (seen_down >= set(nodes) or time.monotonic() > deadline):
            return status
        if time.monotonic() > deadline:
            return status
        echo("waiting for " + ", ".join(f"{n} ({s})" for n, s in status.items() if s != RUNNING or n not in seen_down))
        time.sleep(poll_s)


def fix(cluster: str, steps: list[Step], backend: Any, sm: Any, request: Any, wait_s: float, echo: Echo,
        poll_s: float = 15.0) -> dict[str, Any]:
    """Apply the plan, wait for rebooted/replaced nodes to be Running, resume them in Slurm, run the doctor again.

    Exit 0 only when every node acted on passes the re-check; 1 when a step failed or a node still fails;
    3 when a node is only drained (a person decides) or did not come back in ``wait_s``."""
    apply(steps, backend.shell, sm, cluster, echo)
    failed = [s for s in steps if not s.done]
    acted = sorted({s.node for s in steps if s.done and s.action in (xid_catalog.ACTION_REBOOT, xid_catalog.ACTION_REPLACE)})
    drained_only = sorted({s.node for s in steps} - {s.node for s in steps if s.action != xid_catalog.ACTION_DRAIN})
    status: dict[str, str] = {}
    if acted:
        status = wait_running(sm, cluster, acted, wait_s, echo, poll_s)
        for node in acted:
            if status.get(node) == RUNNING:
                code, out, err = backend.shell.run(resume_command(node), timeout=60)
                echo(f"{node}: Running again; resume {'done' if code == 0 else 'FAILED: ' + (err or out).strip()}")
    recheck = run_test(backend, request, echo)
    by_node = {n["node"]: n for n in recheck.data.get("nodes", [])}
    still = [n for n in acted if by_node.get(n, {}).get("verdict") != "PASS"]
    if failed or any(by_node.get(n, {}).get("verdict") == "FAIL" for n in acted):
        code, word = 1, "FAIL"
    elif still or drained_only:
        code, word = 3, "INCONCLUSIVE"
    else:
        code, word = 0, "PASS"
    parts = []
    if acted:
        parts.append(f"rebooted/replaced {', '.join(acted)}: "
                     + ", ".join(f"{n} {by_node.get(n, {}).get('verdict', 'not checked')}" for n in acted))
    if drained_only:
        parts.append(f"drained {', '.join(drained_only)} (a person decides; then: "
                     + "; ".join(resume_command(n) for n in drained_only) + ")")
    if failed:
        parts.append("failed: " + "; ".join(f"{s.node} {s.action}: {s.error}" for s in failed))
    return {"outcome": word, "exit_code": code, "message": f"{word}: --fix: " + "; ".join(parts),
            "steps": [s.to_dict() for s in steps], "status": status, "recheck": recheck.to_dict()}
