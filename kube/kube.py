"""A small in-process Kubernetes API client for an EKS cluster: no kubeconfig file, no aws CLI.

Why not ``aws eks update-kubeconfig`` + kubectl: it rewrites the user's
~/.kube/config, needs two extra tools, and breaks differently on every laptop.
EKS only needs the endpoint and CA from ``eks:DescribeCluster`` and a bearer
token that is a presigned ``sts:GetCallerIdentity`` URL (the same function the
Helm Lambda uses). The handful of calls ``hpq eks`` makes (create, get, delete,
list pods, follow a log) are plain REST, so the standard library suffices and
the tests can drive it over real HTTP against a small local server.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hpq.errors import OperationFailed, UsageError

# apiVersion/kind -> (API path prefix, plural, namespaced) for every kind hpq eks applies.
KINDS: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "PersistentVolume"): ("/api/v1", "persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims", True),
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs", True),
    ("kubeflow.org/v2beta1", "MPIJob"): ("/apis/kubeflow.org/v2beta1", "mpijobs", True),
    ("kubeflow.org/v1", "PyTorchJob"): ("/apis/kubeflow.org/v1", "pytorchjobs", True),
    ("storage.k8s.io/v1", "CSIDriver"): ("/apis/storage.k8s.io/v1", "csidrivers", False),
}
CRD_HINT = {
    "mpijobs": "the MPI operator (kubeflow.org/v2beta1 MPIJob) is not installed: it comes with the HyperPod "
               "dependency chart (Helm stack)",
    "pytorchjobs": "the Kubeflow training operator (PyTorchJob) is not installed: it comes with the HyperPod "
                   "dependency chart (Helm stack)",
}


class KubeError(OperationFailed):
    """An API call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class ClusterAccess:
    name: str
    server: str
    ca_data: str | None  # base64 PEM, as EKS returns it
    token: str


def resolve_eks_cluster(session: Any, cluster: str) -> tuple[str, str, str]:
    """(EKS cluster name, endpoint, CA) for an EKS cluster name or a HyperPod cluster name that uses EKS."""
    from hpq.aws.session import aws_errors, client, error_code

    eks = client(session, "eks")
    try:
        info = eks.describe_cluster(name=cluster)["cluster"]
    except Exception as exc:  # noqa: BLE001 - only "not found" falls through to HyperPod
        if error_code(exc) != "ResourceNotFoundException":
            with aws_errors("eks:DescribeCluster"):
                raise
        name = _hyperpod_eks_name(session, cluster)
        with aws_errors("eks:DescribeCluster"):
            info = eks.describe_cluster(name=name)["cluster"]
    endpoint = info.get("endpoint")
    ca = (info.get("certificateAuthority") or {}).get("data")
    if not endpoint:
        raise OperationFailed(f"EKS cluster {info.get('name', cluster)} has no API endpoint yet "
                              f"(status {info.get('status')})")
    return str(info.get("name") or cluster), str(endpoint), ca


def _hyperpod_eks_name(session: Any, cluster: str) -> str:
    from hpq.aws.session import client, error_code

    try:
        hp = client(session, "sagemaker").describe_cluster(ClusterName=cluster)
    except Exception as exc:  # noqa: BLE001
        if error_code(exc) in ("ResourceNotFound", "ValidationException"):
            raise UsageError(f"no EKS or HyperPod cluster named {cluster!r} in this region") from None
        from hpq.aws.session import aws_errors

        with aws_errors("sagemaker:DescribeCluster"):
            raise
    arn = ((hp.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn")
    if not arn:
        raise UsageError(f"HyperPod cluster {cluster!r} is orchestrated by Slurm, not EKS: use hpq test")
    return eks_name_from_arn(str(arn))


def eks_name_from_arn(arn: str) -> str:
    """The EKS cluster's name from its ARN (``arn:<partition>:eks:<region>:<account>:cluster/<name>``, the
    pattern of DescribeCluster's Orchestrator.Eks.ClusterArn:
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterOrchestratorEksConfig.html)."""
    head, _, name = arn.rpartition(":cluster/")
    if not head.startswith("arn:") or ":eks:" not in head + ":" or not name:
        raise UsageError(f"not an EKS cluster ARN: {arn!r}")
    return name


def cluster_access(session: Any, cluster: str) -> ClusterAccess:
    """Endpoint, CA and a fresh token for ``cluster`` (valid ~15 minutes; refresh() makes a new one)."""
    from hpq.aws.session import aws_errors, region_of
    from hpq.cfn.handlers.helm import eks_token

    name, endpoint, ca = resolve_eks_cluster(session, cluster)
    with aws_errors("sts:GetCallerIdentity (presign)"):
        token = eks_token(name, region_of(session), session)
    return ClusterAccess(name, endpoint, ca, token)


class KubeClient:
    """JSON over HTTPS with a bearer token; verifies the server with the cluster's own CA."""

    def __init__(self, access: ClusterAccess, timeout: float = 30.0, token_refresh: Any = None) -> None:
        self.access = access
        self.server = access.server.rstrip("/")
        self.timeout = timeout
        self._refresh = token_refresh
        self._ssl = self._context(access.ca_data) if self.server.startswith("https") else None

    @staticmethod
    def _context(ca_data: str | None) -> ssl.SSLContext:
        if not ca_data:
            return ssl.create_default_context()
        pem = base64.b64decode(ca_data).decode()
        return ssl.create_default_context(cadata=pem)

    # ------------------------------------------------------------------ plumbing

    def _open(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
              timeout: float | None = None, content_type: str = "application/json") -> Any:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            req = urllib.request.Request(url, data=data, method=method, headers={
                "Authorization": f"Bearer {self.access.token}",
                "Accept": "application/json",
                "Content-Type": content_type,
                "User-Agent": "hpq",
            })
            try:
                return urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl)
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 0 and self._refresh is not None:
                    self.access = self._refresh()  # token expired (15 min): get a new one, retry once
                    continue
                raise self._error(exc, method, path) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise KubeError(f"cannot reach the Kubernetes API at {self.server}: {reason}; a private-only "
                                "EKS endpoint is reachable only from inside the VPC") from None
        raise AssertionError("unreachable")

    def _error(self, exc: urllib.error.HTTPError, method: str, path: str) -> KubeError:
        try:
            status = json.loads(exc.read().decode() or "{}")
        except ValueError:
            status = {}
        message = status.get("message") or exc.reason
        reason = status.get("reason", "")
        if exc.code == 401:
            message = ("the cluster rejected the token (401): the AWS identity has no EKS access entry for this "
                       "cluster, or the clock is off")
        elif exc.code == 403:
            message = f"forbidden: {message}; grant the identity an EKS access entry with a cluster admin policy"
        elif exc.code == 404 and path.rstrip("/").split("/")[-1] in CRD_HINT:
            # A collection that 404s (often with a plain-text body) is a resource type the cluster lacks.
            message = CRD_HINT[path.rstrip("/").split("/")[-1]]
        return KubeError(f"{method} {path}: {message}", exc.code, reason)

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json") -> Any:
        with self._open(method, path, query, body, content_type=content_type) as resp:
            raw = resp.read().decode()
        return json.loads(raw) if raw else {}

    # ------------------------------------------------------------------ objects

    @staticmethod
    def path_for(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
        try:
            prefix, plural, namespaced = KINDS[(api_version, kind)]
        except KeyError:
            raise UsageError(f"hpq eks does not know how to apply {api_version} {kind}") from None
        path = prefix + (f"/namespaces/{namespace}" if namespaced else "") + "/" + plural
        return path + ("/" + name if name else "")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata", {})
        return self.request("POST", self.path_for(obj["apiVersion"], obj["kind"], meta.get("namespace")), body=obj)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path_for(api_version, kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str,
               propagation: str = "Background") -> bool:
        """Delete the object and its pods; False if it was already gone.

        The propagation policy is always said: without one a batch/v1 Job orphans its pods (the API's
        default for that kind, kept for backward compatibility). Background returns at once and the
        garbage collector removes the pods; Foreground keeps the object until its pods are gone, which
        is what a caller that re-creates the same names must wait for.
        """
        try:
            self.request("DELETE", self.path_for(api_version, kind, namespace, name),
                         body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        out = self.request("GET", f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})
        return list(out.get("items") or [])

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/v1/nodes").get("items") or [])

    def cordon(self, node: str, unschedulable: bool = True) -> dict[str, Any]:
        """``kubectl cordon NODE`` (``uncordon``: False): ``spec.unschedulable`` as a strategic merge patch, the
        patch kubectl itself sends (kubernetes/kubectl, pkg/drain/cordon.go, PatchOrReplaceWithContext). The API
        answers 404 for a node it does not have, which is raised like any error."""
        return self.request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(node, safe='')}",
                            body={"spec": {"unschedulable": unschedulable}},
                            content_type="application/strategic-merge-patch+json")

    def pod_log(self, namespace: str, pod: str, container: str | None = None) -> str:
        with self._open("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log", {"container": container}) as resp:
            return resp.read().decode(errors="replace")

    def follow_log(self, namespace: str, pod: str, container: str | None = None,
                   idle_timeout: float = 900.0) -> Iterator[str]:
        """Lines of a running container's log as they are written, until the container ends."""
        resp = self._open("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log",
                          {"container": container, "follow": "true"}, timeout=idle_timeout)
        # read1, not line iteration: iterating a chunked response ends quietly when the connection drops
        # mid-stream (http.client's peek swallows the IncompleteRead), which would look like the end of the
        # log. read1 raises it, so the caller knows the stream broke and the container may still run.
        with resp:
            pending = b""
            while True:
                data = resp.read1(65536)
                if not data:
                    break
                *whole, pending = (pending + data).split(b"\n")
                for raw in whole:
                    yield raw.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")

