"""Stand-ins for the EKS tests (kube/, validation/): moto (EKS) over HTTP, and a small HTTPS server that
speaks the part of the Kubernetes API ``hpq eks`` uses (the ``moto_aws`` and ``fake_kube`` fixtures of
tests/conftest.py).

No Kubernetes API server can run on this machine, so the last is a stand-in; everything else (HTTP, TLS
with a real CA check, boto3 against moto) is real. The helm stand-in is tests/kube/helm_standin.py.
"""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import ssl
import textwrap
import threading
import time
import urllib.parse
from typing import Any

from tests.moto_server import set_aws_env
from tests.support import serve_http

# ------------------------------------------------------------------------------- moto (EKS) over HTTP


def moto_aws(moto_server, monkeypatch, tmp_path):
    """boto3 reaches the suite's moto server over HTTP (AWS_ENDPOINT_URL), dummy credentials, us-west-2.

    No reset between tests (the server is shared by the whole session): tests create what they
    need idempotently and use names no other test deletes."""
    set_aws_env(monkeypatch, moto_server, tmp_path, region="us-west-2")
    return moto_server


def create_eks_cluster(name: str) -> dict[str, Any]:
    import boto3

    eks = boto3.client("eks", region_name="us-west-2")
    if name in eks.list_clusters()["clusters"]:
        return eks.describe_cluster(name=name)["cluster"]
    eks.create_cluster(name=name, roleArn="arn:aws:iam::123456789012:role/eks",
                       resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]})
    return eks.describe_cluster(name=name)["cluster"]


# ------------------------------------------------------------------------------- Kubernetes API stand-in


def self_signed_cert(tmp_path) -> tuple[str, str, str]:
    """(cert file, key file, base64 PEM as EKS returns certificateAuthority.data) for 127.0.0.1."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    cert_file.write_bytes(pem)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file), base64.b64encode(pem).decode()


PLURALS = {"configmaps": "ConfigMap", "jobs": "Job", "mpijobs": "MPIJob", "pytorchjobs": "PyTorchJob",
           "persistentvolumeclaims": "PersistentVolumeClaim"}


class FakeKube:
    """State and behaviour of the API stand-in; a scenario says how the 'operator' plays the job out.

    Scenario keys: ``logs`` (role -> lines), ``final`` (Succeeded/Failed), ``pending_ticks`` (job
    GETs before pods run), ``waiting`` ((reason, message) a pod stays in), ``unschedulable`` (message),
    ``installed`` (plurals the cluster serves; others 404 like a missing CRD), ``end_at_tick`` (the
    job ends at that job GET, before its log could be followed), ``break_log`` (a followed log's
    connection drops after that many lines), ``attempts`` (one list of log lines per run of the
    launcher container: every run but the last exits 1 and the kubelet restarts the container in the
    same pod, as restartPolicy OnFailure does), ``token_ttl`` (requests a bearer token is good for;
    then the API answers 401 until a new token comes, as EKS does after a token's 15 minutes),
    ``node_logs`` (node name -> the log lines of a pod pinned there with ``nodeName``), ``node_final``
    (node name -> the end state of the batch/v1 Job whose pod is pinned there), ``hang`` (node names whose
    pinned Job never ends: a node that does not answer), ``pair_logs`` (sorted pair of hostnames -> the
    launcher's log lines of an MPIJob whose workers a required node affinity on ``kubernetes.io/hostname`` pins
    to those two nodes), ``pair_final`` (the same key -> that MPIJob's end state). Worker pods pinned to a
    hostname no node carries stay Pending with the scheduler's PodScheduled=False condition, as the real
    scheduler leaves them (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/).

    ``PATCH /api/v1/nodes/NAME`` (kubectl cordon/uncordon) is served as the API server serves it: only with a
    patch media type (others: 415 Unsupported Media Type), 404 NotFound for a node it does not have.

    DELETE honours ``propagationPolicy`` (body DeleteOptions or query), as the API server does:
    Foreground keeps the object (deletionTimestamp, finalizer foregroundDeletion) until its pods are
    gone, Background removes the object and then its pods, Orphan leaves the pods. Without one, each
    kind's default applies: a batch/v1 Job orphans its pods (kept for backward compatibility:
    Kubernetes pkg/registry/batch/job/strategy.go DefaultGarbageCollectionPolicy; the Jobs concept
    page says the same; DeleteOptions.propagationPolicy in the API reference: "the resource-specific
    default policy"; seen on EKS in github.com/juliacomputing/kuber.jl issue 52), custom resources such as
    MPIJob and PyTorchJob delete them in the background.
    The simulated garbage collector is asynchronous like the real one: it acts GC_DELAY requests later.
    """

    GC_DELAY = 3

    def __init__(self, token_prefix: str = "k8s-aws-v1.") -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.cluster_objects: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, name): cluster-scoped, read-only
        self.pods: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.nodes: list[dict[str, Any]] = []
        self.token_prefix = token_prefix
        self.scenario: dict[str, Any] = {"logs": {}, "final": "Succeeded", "pending_ticks": 1}
        self.ticks = 0
        self.delete_policies: list[tuple[str, str, str]] = []  # (plural, name, policy applied)
        self.pending_gc: list[tuple[int, str, str, str, str]] = []  # (due request, plural, ns, name, policy)
        self.pod_name_clashes: list[str] = []  # new pods that met a lingering pod of the same name
        self.token_uses: dict[str, int] = {}
        self.expired_tokens: set[str] = set()
        self.restarts: dict[str, int] = {}  # pod -> restartCount of its followed container
        self.patches: list[tuple[str, Any]] = []  # (node, patch body) accepted
        self.lock = threading.RLock()
        self.url = ""
        self.ca_data = ""

    def add_nodes(self, instance_type: str, count: int, ready: bool = True, efa: int | None = None,
                  health: str | None = "Schedulable", names: list[str] | None = None) -> None:
        """Nodes as a HyperPod EKS cluster's API server lists them: the instance-type label, HyperPod's
        ``sagemaker.amazonaws.com/node-health-status`` label (None: a node HyperPod does not manage), and
        ``status.allocatable`` with the device plugins' resources (``vpc.amazonaws.com/efa``: the type's
        EFA count from the catalog unless ``efa`` says otherwise; ``nvidia.com/gpu`` or
        ``aws.amazon.com/neuron``). Label and resource names: AWS's HyperPod EKS docs
        (sagemaker-hyperpod-eks-resiliency-node-labels) and awsome-distributed-ai's nccl-tests MPIJob."""
        from hpq.lifecycle import catalog

        try:
            entry = catalog.lookup(instance_type)
        except catalog.UnknownInstanceType:
            entry = None
        for _ in range(count):
            name = names[_] if names else f"node-{len(self.nodes)}"
            # The kubelet labels every node with its hostname (EKS: the node name), which pods pin to
            # (https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetesiohostname).
            labels = {"node.kubernetes.io/instance-type": instance_type, "kubernetes.io/hostname": name}
            if health is not None:
                labels["sagemaker.amazonaws.com/node-health-status"] = health
            allocatable = {"cpu": "191450m", "memory": "2097152Ki", "pods": "737"}
            if entry is not None and entry.is_accelerated:
                key = "nvidia.com/gpu" if entry.accelerator == catalog.GPU else "aws.amazon.com/neuron"
                allocatable[key] = str(entry.accelerator_count)
                have = entry.efa_interfaces if efa is None else efa
                if have:
                    allocatable["vpc.amazonaws.com/efa"] = str(have)
            self.nodes.append({"metadata": {"name": name, "labels": labels}, "spec": {},
                               "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                                          "allocatable": allocatable}})

    # --------------------------------------------------------------- simulated operator

    def _spawn_pods(self, plural: str, obj: dict[str, Any]) -> None:
        name, ns = obj["metadata"]["name"], obj["metadata"].get("namespace", "default")
        spec = obj.get("spec", {})
        if plural == "mpijobs":
            hosts = self.pinned_hosts(obj)
            for role, rs in spec["mpiReplicaSpecs"].items():
                for i in range(rs.get("replicas", 1)):
                    pod = f"{name}-launcher" if role == "Launcher" else f"{name}-worker-{i}"
                    self._add_pod(pod, ns, name, rs["template"], role.lower(), {})
                    self.pods[pod]["_hosts"] = hosts
        elif plural == "pytorchjobs":
            for role, rs in spec["pytorchReplicaSpecs"].items():
                for i in range(rs.get("replicas", 1)):
                    self._add_pod(f"{name}-{role.lower()}-{i}", ns, name, rs["template"], role.lower(),
                                  {"training.kubeflow.org/replica-type": role.lower()})
        elif plural == "jobs":
            for i in range(spec.get("completions", 1)):
                self._add_pod(f"{name}-{i}", ns, name, spec["template"], "pod", {"job-name": name})

    def _add_pod(self, pod: str, ns: str, owner: str, template: dict[str, Any], role: str,
                 extra: dict[str, str]) -> None:
        labels = dict(template.get("metadata", {}).get("labels") or {}) | extra
        if pod in self.pods:  # the controller's create would fail with AlreadyExists
            self.pod_name_clashes.append(pod)
        self.pods[pod] = {"metadata": {"name": pod, "namespace": ns, "labels": labels,
                                       "creationTimestamp": f"2026-01-01T00:00:{len(self.pods):02d}Z"},
                          "status": {"phase": "Pending"}, "_owner": owner, "_role": role,
                          "_node": (template.get("spec") or {}).get("nodeName")}

    def tick(self) -> None:
        """One job GET = one step of the simulated operator."""
        with self.lock:
            self.ticks += 1
            for pod in self.pods.values():
                st = pod["status"]
                if self._unplaceable(pod):
                    st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} "
                                                    "node(s) didn't match Pod's node affinity/selector."}]
                elif self.scenario.get("unschedulable"):
                    st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": self.scenario["unschedulable"]}]
                elif self.scenario.get("waiting"):
                    reason, msg = self.scenario["waiting"]
                    st["containerStatuses"] = [{"name": "c", "state": {"waiting": {"reason": reason,
                                                                                    "message": msg}}}]
                elif self.ticks >= self.scenario.get("pending_ticks", 1) and st["phase"] == "Pending":
                    pod["spec"] = {"nodeName": self._bind(pod)}
                    st["phase"] = "Running"
            end_at = self.scenario.get("end_at_tick")
            if end_at is not None and self.ticks >= end_at:  # the job ends before anyone follows a log
                for obj in self.objects.values():
                    if obj["kind"] != "ConfigMap":
                        self.finish(obj)
            if (self.ticks >= self.scenario.get("pending_ticks", 1) + 2 and not self.scenario.get("waiting")
                    and not self.scenario.get("unschedulable")):
                for (plural, _ns, _name), obj in self.objects.items():
                    if plural in ("jobs",) and self._pinned(obj) not in self.scenario.get("hang", ()):
                        self.finish(obj)

    def _bind(self, pod: dict[str, Any]) -> str:
        """The node the scheduler binds a pod to, which the API then shows as its ``spec.nodeName``
        (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#scheduling): the node a
        template names, a worker's own of the nodes its affinity pins (worker-i to the i-th), else the nodes
        in turn, skipping those a sibling pod already has (hpq's manifests spread a job's pods, one per node,
        with pod anti-affinity on kubernetes.io/hostname)."""
        if pod.get("_node"):
            return str(pod["_node"])
        name = pod["metadata"]["name"]
        hosts = pod.get("_hosts")
        if pod["_role"] == "worker" and hosts:
            index = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 0
            return hosts[index % len(hosts)]
        names = [n["metadata"]["name"] for n in self.nodes] or ["node-0"]
        taken = [(p.get("spec") or {}).get("nodeName") for p in self.pods.values()
                 if p is not pod and p["_owner"] == pod["_owner"]]
        free = [n for n in names if n not in taken]
        return free[0] if free else names[len(taken) % len(names)]

    @staticmethod
    def pinned_hosts(obj: dict[str, Any]) -> tuple[str, ...] | None:
        """The hostnames an MPIJob's workers are pinned to (required nodeAffinity In), sorted; None: not pinned."""
        worker = ((obj.get("spec") or {}).get("mpiReplicaSpecs") or {}).get("Worker") or {}
        affinity = (((worker.get("template") or {}).get("spec") or {}).get("affinity") or {}).get("nodeAffinity")
        terms = ((affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms") or []
        for term in terms:
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "In":
                    return tuple(sorted(expr.get("values") or []))
        return None

    def _unplaceable(self, pod: dict[str, Any]) -> bool:
        """A worker pinned to a hostname that no node carries: the scheduler cannot place it."""
        hosts = pod.get("_hosts")
        known = {(n["metadata"].get("labels") or {}).get("kubernetes.io/hostname") for n in self.nodes}
        return pod["_role"] == "worker" and hosts is not None and not set(hosts) <= known

    @staticmethod
    def _pinned(obj: dict[str, Any]) -> str | None:
        return ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeName")

    def finish(self, obj: dict[str, Any]) -> None:
        final = (self.scenario.get("node_final", {}).get(self._pinned(obj))
                 or self.scenario.get("pair_final", {}).get(self.pinned_hosts(obj))
                 or self.scenario.get("final", "Succeeded"))
        kind = "Complete" if obj["kind"] == "Job" and final == "Succeeded" else final
        obj["status"] = {"conditions": [{"type": "Running", "status": "False"},
                                        {"type": kind, "status": "True", "message": f"job {final.lower()}"}]}
        for pod in self.pods.values():
            if pod["_owner"] == obj["metadata"]["name"]:
                pod["status"]["phase"] = final if final in ("Succeeded", "Failed") else "Succeeded"

    def log_lines(self, pod: str) -> list[str]:
        role = self.pods[pod]["_role"]
        attempts = self.scenario.get("attempts")
        if attempts and role == "launcher":
            return list(attempts[min(self.restarts.get(pod, 0), len(attempts) - 1)])
        logs = self.scenario.get("logs", {})
        node = self.pods[pod].get("_node")
        if node and node in self.scenario.get("node_logs", {}):
            return list(self.scenario["node_logs"][node])
        hosts = self.pods[pod].get("_hosts")
        if role == "launcher" and hosts is not None and hosts in self.scenario.get("pair_logs", {}):
            return list(self.scenario["pair_logs"][hosts])
        lines = logs.get(pod) or logs.get(role) or []
        return list(lines)

    def _container_status(self, pod: str, state: dict[str, Any]) -> None:
        self.pods[pod]["status"]["containerStatuses"] = [
            {"name": "launcher", "restartCount": self.restarts.get(pod, 0), "state": state}]

    def log_done(self, pod: str) -> None:
        """The followed container ended: restarted in its pod if the scenario says so, else the job is finished."""
        with self.lock:
            attempts = self.scenario.get("attempts")
            if attempts and self.pods[pod]["_role"] == "launcher" and self.restarts.get(pod, 0) < len(attempts) - 1:
                # Exit 1 under restartPolicy OnFailure: the kubelet starts the container again in the same pod.
                self.restarts[pod] = self.restarts.get(pod, 0) + 1
                self._container_status(pod, {"running": {"startedAt": "2026-01-01T00:01:00Z"}})
                return
            owner = self.pods[pod]["_owner"]
            for (_p, _ns, name), obj in self.objects.items():
                if name == owner and obj["kind"] != "ConfigMap":
                    self.finish(obj)

    def delete(self, plural: str, ns: str, name: str, policy: str | None) -> dict[str, Any]:
        """DELETE as the API server does it (see the class doc); returns the object as the answer shows it."""
        obj = self.objects[(plural, ns, name)]
        policy = policy or ("Orphan" if plural == "jobs" else "Background")
        self.delete_policies.append((plural, name, policy))
        self.deleted.append((plural, name))
        if policy == "Orphan":
            del self.objects[(plural, ns, name)]
            for pod in self.pods.values():
                if pod["_owner"] == name:
                    pod["_owner"] = ""  # ownerReference dropped: the pod lives on
        elif policy == "Background":
            del self.objects[(plural, ns, name)]
            self.pending_gc.append((len(self.requests) + self.GC_DELAY, plural, ns, name, policy))
        else:  # Foreground: the object stays, marked, until the collector removed its pods
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:02:00Z"
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self.pending_gc.append((len(self.requests) + self.GC_DELAY, plural, ns, name, policy))
        return obj

    def collect_garbage(self, everything: bool = False) -> None:
        """The garbage collector's pass over what is due (or ``everything``, as if time passed): pods of
        deleted owners go, then Foreground owners themselves."""
        with self.lock:
            due = [g for g in self.pending_gc if everything or g[0] <= len(self.requests)]
            for entry in due:
                _, plural, ns, name, policy = entry
                for pod in [p for p, v in self.pods.items() if v["_owner"] == name]:
                    del self.pods[pod]
                    self.restarts.pop(pod, None)
                if policy == "Foreground":
                    self.objects.pop((plural, ns, name), None)
                self.pending_gc.remove(entry)

    def authorized(self, header: str) -> bool:
        """A bearer token of the EKS form, not expired (``token_ttl`` requests per token)."""
        if not header.startswith("Bearer " + self.token_prefix):
            return False
        token = header[len("Bearer "):]
        with self.lock:
            if token in self.expired_tokens:
                return False
            self.token_uses[token] = self.token_uses.get(token, 0) + 1
            ttl = self.scenario.get("token_ttl")
            if ttl is not None and self.token_uses[token] > ttl:
                self.expired_tokens.add(token)
                return False
        return True


def serve_fake_kube(tmp_path):
    """A FakeKube served over HTTPS on 127.0.0.1 (self-signed, its CA as EKS returns it); yields it, then stops."""
    kube = FakeKube()
    cert, key, ca_data = self_signed_cert(tmp_path)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _status(self, code: int, reason: str, message: str) -> None:
            self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                              "message": message, "code": code})

        def _route(self, method: str) -> None:
            url = urllib.parse.urlparse(self.path)
            query = urllib.parse.parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with kube.lock:
                kube.requests.append((method, url.path, query))
            kube.collect_garbage()
            if not kube.authorized(self.headers.get("Authorization", "")):
                return self._status(401, "Unauthorized", "Unauthorized")
            parts = url.path.strip("/").split("/")
            if url.path == "/api/v1/nodes":
                return self._send(200, {"kind": "NodeList", "items": kube.nodes})
            if url.path.startswith("/api/v1/nodes/"):
                return self._node(method, urllib.parse.unquote(url.path[len("/api/v1/nodes/"):]), body)
            if "namespaces" not in parts and len(parts) >= 2 and method == "GET":
                # a cluster-scoped object such as /apis/storage.k8s.io/v1/csidrivers/NAME
                obj = kube.cluster_objects.get((parts[-2], parts[-1]))
                if obj is not None:
                    return self._send(200, obj)
                return self._status(404, "NotFound", f'{parts[-2]} "{parts[-1]}" not found')
            # /api/v1/namespaces/NS/PLURAL[/NAME[/log]] or /apis/G/V/namespaces/NS/PLURAL[/NAME]
            try:
                i = parts.index("namespaces")
            except ValueError:
                return self._status(404, "NotFound", "the server could not find the requested resource")
            ns, rest = parts[i + 1], parts[i + 2:]
            plural = rest[0] if rest else ""
            installed = kube.scenario.get("installed")
            if plural != "pods" and installed is not None and plural not in installed:
                raw = b"404 page not found\n"  # what the API server answers for a resource type it lacks
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return None
            if plural == "pods":
                return self._pods(method, ns, rest[1:], query)
            key_name = rest[1] if len(rest) > 1 else None
            with kube.lock:
                if method == "POST" and key_name is None:
                    name = body["metadata"]["name"]
                    if (plural, ns, name) in kube.objects:
                        return self._status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                    obj = json.loads(json.dumps(body))
                    obj["metadata"]["uid"] = f"uid-{len(kube.created)}"
                    kube.objects[(plural, ns, name)] = obj
                    kube.created.append(obj)
                    kube._spawn_pods(plural, obj)
                    return self._send(201, obj)
                obj = kube.objects.get((plural, ns, key_name))
                if obj is None:
                    return self._status(404, "NotFound", f'{plural} "{key_name}" not found')
                if method == "GET":
                    kube.tick()
                    return self._send(200, obj)
                if method == "DELETE":
                    if (body or {}).get("kind", "DeleteOptions") != "DeleteOptions":
                        return self._status(400, "BadRequest", "the body of a DELETE must be DeleteOptions")
                    policy = (body or {}).get("propagationPolicy") or (query.get("propagationPolicy") or [None])[0]
                    if policy not in (None, "Orphan", "Background", "Foreground"):
                        return self._status(400, "BadRequest", f"invalid propagationPolicy {policy!r}")
                    return self._send(200, kube.delete(plural, ns, key_name, policy))
            return self._status(405, "MethodNotAllowed", method)

        def _node(self, method: str, name: str, body: Any) -> None:
            with kube.lock:
                node = next((n for n in kube.nodes if n["metadata"]["name"] == name), None)
                if node is None:
                    return self._status(404, "NotFound", f'nodes "{name}" not found')
                if method == "GET":
                    return self._send(200, node)
                if method != "PATCH":
                    return self._status(405, "MethodNotAllowed", method)
                kind = self.headers.get("Content-Type", "")
                if kind not in ("application/strategic-merge-patch+json", "application/merge-patch+json",
                                "application/json-patch+json", "application/apply-patch+yaml"):
                    return self._status(415, "UnsupportedMediaType",
                                        f'the body of the request was in an unknown format - accepted media types '
                                        f'include: application/json-patch+json, application/merge-patch+json, '
                                        f'application/apply-patch+yaml (got "{kind}")')
                kube.patches.append((name, body))
                node.setdefault("spec", {}).update((body or {}).get("spec") or {})
                if node["spec"].get("unschedulable") is False:
                    del node["spec"]["unschedulable"]  # what the API server keeps of a false default
                return self._send(200, node)

        def _pods(self, method: str, ns: str, rest: list[str], query: dict[str, list[str]]) -> None:
            if method != "GET":
                return self._status(405, "MethodNotAllowed", method)
            if not rest:
                selector = dict(kv.split("=", 1) for kv in (query.get("labelSelector", [""])[0].split(",")) if kv)
                with kube.lock:
                    items = [{k: v for k, v in p.items() if not k.startswith("_")} for p in kube.pods.values()
                             if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
                return self._send(200, {"kind": "PodList", "items": items})
            pod = rest[0]
            if pod not in kube.pods:
                return self._status(404, "NotFound", f'pods "{pod}" not found')
            if len(rest) > 1 and rest[1] == "log":
                if kube.pods[pod]["status"]["phase"] == "Pending":
                    return self._status(400, "BadRequest", f'container in pod "{pod}" is waiting to start')
                if kube.scenario.get("attempts") and kube.pods[pod]["_role"] == "launcher" \
                        and "containerStatuses" not in kube.pods[pod]["status"]:
                    with kube.lock:
                        kube._container_status(pod, {"running": {"startedAt": "2026-01-01T00:00:30Z"}})
                lines = kube.log_lines(pod)
                if query.get("follow") == ["true"]:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    cut = kube.scenario.get("break_log")
                    for line in lines[:cut]:
                        chunk = (line + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        time.sleep(0.002)
                    if cut is not None:  # the connection drops mid-stream; the job goes on
                        self.close_connection = True
                        return None
                    kube.log_done(pod)
                    self.wfile.write(b"0\r\n\r\n")
                    return None
                raw = "".join(line + "\n" for line in lines).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return None
            with kube.lock:
                return self._send(200, {k: v for k, v in kube.pods[pod].items() if not k.startswith("_")})

        def do_GET(self):  # noqa: N802
            self._route("GET")

        def do_POST(self):  # noqa: N802
            self._route("POST")

        def do_DELETE(self):  # noqa: N802
            self._route("DELETE")

        def do_PATCH(self):  # noqa: N802
            self._route("PATCH")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = serve_http(Handler, ctx)
    kube.url = f"https://127.0.0.1:{server.server_address[1]}"
    kube.ca_data = ca_data
    yield kube
    server.shutdown()
    server.server_close()


def kube_client(kube: FakeKube, token: str = "k8s-aws-v1.test-token") -> Any:
    from hpq.kube.kube import ClusterAccess, KubeClient

    return KubeClient(ClusterAccess("test-eks", kube.url, kube.ca_data, token), timeout=10)


FSX_CSI_DRIVER_OBJECT = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                         "metadata": {"name": "fsx.csi.aws.com"},
                         "spec": {"attachRequired": False, "podInfoOnMount": False}}


def nccl_tests_output(busbw: float, sizes: tuple[int, ...] = (8388608, 134217728, 2147483648)) -> list[str]:
    """nccl-tests all_reduce_perf output (format of nccl-tests 2.x) with a chosen bus bandwidth."""
    head = textwrap.dedent("""\
        # nThread 1 nGpus 1 minBytes 8 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
        #
        # Using devices
        #  Rank  0 Group  0 Pid     45 on hpq-nccl-test-worker-0 device  0 [0x00] NVIDIA A10G
        #  Rank  1 Group  0 Pid     46 on hpq-nccl-test-worker-1 device  0 [0x00] NVIDIA A10G
        #
        #                                                              out-of-place                       in-place
        #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)""").splitlines()
    rows = []
    for size in sizes:
        bw = busbw if size >= 134217728 else busbw / 3
        t = size / (bw * 1e3)
        rows.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {t:8.1f} {bw:7.2f} {bw:7.2f}      0 "
                    f"{t:8.1f} {bw:7.2f} {bw:7.2f}      0")
    tail = ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw * 0.7:.4f} ", "#"]
    return head + rows + tail
