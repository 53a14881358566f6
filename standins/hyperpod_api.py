"""The emulated HyperPod node API: ListClusterNodes, DescribeClusterNode, BatchRebootClusterNodes,
BatchReplaceClusterNodes and ListClusterEvents, which moto does not have (moto 5 lists nodes with ids like ``group-0``, not EC2 ids,
and has no reboot or replace).

It answers as a boto3 SageMaker client would (same method names, same response shapes) and refuses what the
real API refuses: every request is validated against botocore's own SageMaker service model (required members,
types, minimum lengths), then against the constraints the API reference adds that botocore does not check
(at most 25 NodeIds, each matching ``i-[a-f0-9]{8}(?:[a-f0-9]{9})?``, the cluster's name or ARN), raising
botocore's ClientError with the API's error codes (ValidationException, ResourceNotFound). Per node, the
batch calls answer ``Failed`` entries with the documented ErrorCodes (InstanceIdNotFound for a node not in the
cluster, InvalidInstanceStatus for one that is not Running).
References: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BatchRebootClusterNodes.html,
API_BatchReplaceClusterNodes.html, API_BatchRebootClusterNodesError.html, API_ListClusterNodes.html,
API_DescribeClusterNode.html, API_ClusterInstanceStatusDetails.html.

What happens to a node: a reboot is ``Pending`` for ``settle_s`` then ``Running`` again with the same id; a
replacement is ``ShuttingDown`` for ``settle_s`` then ``Running`` under a new instance id (HyperPod provisions
new hardware). ``on_reboot``/``on_replace`` let the rehearsal make the node's machine follow (clear a fault).

Events (API_ListClusterEvents.html, API_ClusterEventSummary.html): each reboot or replacement records an
``Instance`` event (EventId, ClusterArn, ClusterName, InstanceGroupName, InstanceId, ResourceType, EventTime,
Description, EventLevel Info); the descriptions are this emulation's own words, not HyperPod's. The API answers
only for clusters whose NodeProvisioningMode is Continuous (its reference says so): ``continuous=False``
refuses with a ValidationException, as hpq must expect from any other cluster.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

NODE_ID = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")
BATCH_MAX = 25


@dataclass
class EmulatedNode:
    instance_id: str
    group: str
    instance_type: str
    hostname: str  # PrivateDnsHostname, e.g. ip-10-1-0-5.us-west-2.compute.internal
    ip: str = ""
    status: str = "Running"
    message: str = ""
    launch_time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    ready_at: float = 0.0  # monotonic time when a reboot/replacement ends


def _client_error(code: str, message: str, operation: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class EmulatedHyperPodApi:
    """The node half of the SageMaker API for one cluster."""

    def __init__(self, cluster_name: str, cluster_arn: str, nodes: list[EmulatedNode], settle_s: float = 2.0,
                 on_reboot: Callable[[EmulatedNode], None] | None = None,
                 on_replace: Callable[[EmulatedNode], None] | None = None, continuous: bool = True):
        self.name, self.arn = cluster_name, cluster_arn
        self.continuous = continuous
        self.events: list[dict[str, Any]] = []
        self.nodes = {n.instance_id: n for n in nodes}
        self.settle_s = settle_s
        self.on_reboot, self.on_replace = on_reboot, on_replace
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._replaced = 0
        import botocore.session

        self._model = botocore.session.get_session().get_service_model("sagemaker")

    # ------------------------------------------------------------------ request checks

    def _validate(self, operation: str, params: dict[str, Any]) -> None:
        from botocore.exceptions import ParamValidationError
        from botocore.validate import ParamValidator

        self.calls.append((operation, dict(params)))
        shape = self._model.operation_model(operation).input_shape
        report = ParamValidator().validate(params, shape)
        if report.has_errors():
            raise ParamValidationError(report=report.generate_report())
        cluster = params.get("ClusterName")
        if cluster not in (self.name, self.arn):
            raise _client_error("ResourceNotFound", f"Cluster with name {cluster} not found.", operation)

    def _tick(self) -> None:
        """Nodes whose reboot or replacement has had its time are Running again."""
        now = time.monotonic()
        for n in list(self.nodes.values()):
            if n.status != "Running" and n.ready_at and now >= n.ready_at:
                n.status, n.message, n.ready_at = "Running", "", 0.0

    @staticmethod
    def _summary(n: EmulatedNode) -> dict[str, Any]:
        return {"InstanceGroupName": n.group, "InstanceId": n.instance_id, "InstanceType": n.instance_type,
                "LaunchTime": n.launch_time, "InstanceStatus": {"Status": n.status, "Message": n.message},
                "PrivateDnsHostname": n.hostname}

    # ------------------------------------------------------------------ the API

    def list_cluster_nodes(self, **params: Any) -> dict[str, Any]:
        self._validate("ListClusterNodes", params)
        with self._lock:
            self._tick()
            nodes = sorted(self.nodes.values(), key=lambda n: (n.launch_time, n.instance_id))
            group = params.get("InstanceGroupNameContains")
            return {"ClusterNodeSummaries": [self._summary(n) for n in nodes if not group or group in n.group]}

    def describe_cluster_node(self, **params: Any) -> dict[str, Any]:
        self._validate("DescribeClusterNode", params)
        with self._lock:
            self._tick()
            n = self.nodes.get(params.get("NodeId", ""))
            if n is None:
                raise _client_error("ResourceNotFound", f"Node {params.get('NodeId')} not found.",
                                    "DescribeClusterNode")
            return {"NodeDetails": {**self._summary(n), "PrivatePrimaryIp": n.ip}}

    def _event(self, n: EmulatedNode, description: str, level: str = "Info") -> None:
        self.events.append({"EventId": f"evt-{len(self.events) + 1:06d}", "ClusterArn": self.arn,
                            "ClusterName": self.name, "InstanceGroupName": n.group, "InstanceId": n.instance_id,
                            "ResourceType": "Instance", "EventTime": datetime.now(timezone.utc),
                            "Description": description, "EventLevel": level})

    def list_cluster_events(self, **params: Any) -> dict[str, Any]:
        """Newest first by default (SortOrder Descending), filtered as the request asks, MaxResults a page."""
        self._validate("ListClusterEvents", params)
        if not self.continuous:
            raise _client_error("ValidationException", "ListClusterEvents is only supported for clusters with "
                                "NodeProvisioningMode Continuous.", "ListClusterEvents")
        with self._lock:
            events = [e for e in self.events
                      if (not params.get("NodeId") or e["InstanceId"] == params["NodeId"])
                      and (not params.get("InstanceGroupName") or e["InstanceGroupName"] == params["InstanceGroupName"])
                      and (not params.get("ResourceType") or e["ResourceType"] == params["ResourceType"])
                      and (not params.get("EventTimeAfter") or e["EventTime"] > params["EventTimeAfter"])
                      and (not params.get("EventTimeBefore") or e["EventTime"] < params["EventTimeBefore"])]
        events.sort(key=lambda e: e["EventTime"], reverse=params.get("SortOrder", "Descending") == "Descending")
        start = int(params.get("NextToken") or 0)
        size = params.get("MaxResults") or 100
        page = events[start:start + size]
        out: dict[str, Any] = {"Events": page}
        if start + size < len(events):
            out["NextToken"] = str(start + size)
        return out

    def _batch(self, operation: str, params: dict[str, Any], act: Callable[[EmulatedNode], None]) -> dict[str, Any]:
        self._validate(operation, params)
        ids = params.get("NodeIds")
        if not ids and not params.get("NodeLogicalIds"):
            raise _client_error("ValidationException", "Either NodeIds or NodeLogicalIds must be provided.",
                                operation)
        if ids and len(ids) > BATCH_MAX:
            raise _client_error("ValidationException", f"NodeIds: at most {BATCH_MAX} instance ids.", operation)
        for i in ids or []:
            if not NODE_ID.fullmatch(i):
                raise _client_error("ValidationException", f"Value '{i}' at 'nodeIds' failed to satisfy constraint: "
                                    "Member must satisfy regular expression pattern: "
                                    "i-[a-f0-9]{8}(?:[a-f0-9]{9})?", operation)
        ok: list[str] = []
        failed: list[dict[str, str]] = []
        with self._lock:
            self._tick()
            for i in ids or []:
                n = self.nodes.get(i)
                if n is None:
                    failed.append({"NodeId": i, "ErrorCode": "InstanceIdNotFound",
                                   "Message": f"Instance {i} does not exist in the cluster."})
                elif n.status != "Running":
                    failed.append({"NodeId": i, "ErrorCode": "InvalidInstanceStatus",
                                   "Message": f"Instance {i} is {n.status}."})
                else:
                    act(n)
                    ok.append(i)
        return {"Successful": ok, "Failed": failed}

    def batch_reboot_cluster_nodes(self, **params: Any) -> dict[str, Any]:
        def reboot(n: EmulatedNode) -> None:
            n.status, n.message, n.ready_at = "Pending", "Rebooting", time.monotonic() + self.settle_s
            self._event(n, f"Instance {n.instance_id} reboot requested (BatchRebootClusterNodes)")
            if self.on_reboot:
                self.on_reboot(n)

        return self._batch("BatchRebootClusterNodes", params, reboot)

    def batch_replace_cluster_nodes(self, **params: Any) -> dict[str, Any]:
        def replace(n: EmulatedNode) -> None:
            old = n.instance_id
            self._replaced += 1
            n.instance_id = "i-%017x" % (int(old[2:], 16) ^ (0xabc000 + self._replaced))
            del self.nodes[old]
            self.nodes[n.instance_id] = n
            n.status, n.message = "ShuttingDown", "Replacing"
            n.ready_at = time.monotonic() + self.settle_s
            n.launch_time = datetime.now(timezone.utc)
            self._event(n, f"Instance {old} replaced by {n.instance_id} (BatchReplaceClusterNodes)")
            if self.on_replace:
                self.on_replace(n)

        return self._batch("BatchReplaceClusterNodes", params, replace)
