"""CloudFormation custom resource ``Custom::HyperPodHelmChart``: install the HyperPod dependency chart.

CloudFormation has no Helm, and an EKS-orchestrated HyperPod cluster needs the
device plugins, EFA plugin, training/MPI operators and health agent installed
before it is created. This Lambda runs ``helm`` from a kubectl/helm layer.

Why it looks the way it does (the public references get these wrong):
- It ALWAYS answers CloudFormation: success, failure with the reason, also on an
  unexpected exception and, through a watchdog timer, shortly before the Lambda
  times out. Otherwise the stack hangs for an hour.
- ``helm upgrade --install`` always with an explicit ``--namespace`` and the
  pinned chart version, and WITHOUT ``--wait``: the chart goes in before HyperPod
  creates any node, so its Deployments (training-operator, mpi-operator, one replica
  each) stay Pending until then and a wait for workloads can only time out and roll the
  stack back. AWS's console stack runs a plain ``helm install``
  (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/resources/helm-chart-injector/
  lambda_function/lambda_function.py) and its Terraform module sets ``wait = false``
  (awslabs/awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/
  hyperpod-eks-tf/modules/helm_chart/main.tf). Helm still waits for hooks (helm 4's
  default ``--wait=hookOnly``; helm 3 always did) within ``--timeout``, which fits the
  Lambda's time. No ``--wait`` value is passed at all, so helm 3 and helm 4 both parse it.
- A failed ``helm uninstall`` is reported as FAILED (with helm's words), but a
  delete of something never created (failed create, missing release, cluster
  already gone) succeeds so that rollbacks and deletes finish.
- No aws-iam-authenticator or aws CLI: the kubeconfig carries a bearer token
  presigned with STS (``k8s-aws-v1.``), built from ``eks:DescribeCluster``.
  The function's role gets cluster access through an EKS access entry.

Embedded verbatim as inline Lambda code (python3.12, handler ``index.handler``):
standard library and boto3 only, one file. Properties: ClusterName, Namespace,
ReleaseName, ChartSource (https .tgz/.zip URL, oci:// reference or
s3://bucket/key; ``{version}`` in it is replaced by ChartVersion), ChartPath
(chart folder inside an archive), ChartVersion, Values (JSON object string).
"""

import base64
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request
import zipfile

SUCCESS = "SUCCESS"
FAILED = "FAILED"
DEFAULT_NAMESPACE = "kube-system"
DEFAULT_RELEASE = "dependencies"  # AWS's name for this release in kube-system (cfn/helm.py says where)
# Where kubectl/helm layers put helm: the CDK kubectl layer (/opt/helm/helm, /opt/kubectl/kubectl), the
# SageMaker HyperPod cluster-setup layer (/opt/python/bin), a plain layer (/opt/bin), then PATH.
HELM_CANDIDATES = ("/opt/helm/helm", "/opt/python/bin/helm", "/opt/bin/helm", "/opt/kubectl/helm")
LAYER_PATHS = ("/opt/helm", "/opt/kubectl", "/opt/python/bin", "/opt/bin")
REASON_LIMIT = 1500  # CloudFormation rejects response bodies over 4 KiB
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a namespace: up to 63 characters
RELEASE_MAX = 53  # helm's limit for a release name
_NOT_FOUND = re.compile(r"release: not found", re.IGNORECASE)


class HandlerError(Exception):
    """An expected failure: its message becomes the Reason CloudFormation shows."""


class ClusterGone(HandlerError):
    """The EKS cluster does not exist: fatal for Create/Update, 'nothing to do' for Delete."""


def log(msg):
    print("[hpq-helm] " + msg, flush=True)


# --------------------------------------------------------------------------- CloudFormation reply


class Responder:
    """Sends exactly one response per request, whichever path (result, exception, watchdog) comes first."""

    def __init__(self, event, context):
        self.event = event
        self.context = context
        self._lock = threading.Lock()
        self.sent = None

    def send(self, status, reason, physical_id=None, data=None):
        with self._lock:
            if self.sent is not None:
                log(f"response already sent ({self.sent}); dropping {status}: {reason}")
                return False
            self.sent = status
        reason = " ".join(str(reason).split())
        if len(reason) > REASON_LIMIT:
            reason = reason[: REASON_LIMIT - 20] + " ... [truncated]"
        stream = getattr(self.context, "log_stream_name", "") or ""
        if status == FAILED and stream:
            reason = reason + f" (log stream: {stream})"
        body = json.dumps({
            "Status": status,
            "Reason": reason,
            "PhysicalResourceId": physical_id or self.event.get("PhysicalResourceId") or failed_id(self.event),
            "StackId": self.event.get("StackId", ""),
            "RequestId": self.event.get("RequestId", ""),
            "LogicalResourceId": self.event.get("LogicalResourceId", ""),
            "NoEcho": False,
            "Data": data or {},
        }).encode()
        log(f"responding {status}: {reason}")
        url = self.event.get("ResponseURL", "")
        for attempt in range(5):
            try:
                req = urllib.request.Request(url, data=body, method="PUT",
                                             headers={"Content-Type": "", "Content-Length": str(len(body))})
                with urllib.request.urlopen(req, timeout=15) as resp:
                    log(f"CloudFormation answered HTTP {resp.status}")
                return True
            except Exception as exc:  # noqa: BLE001 - keep trying, then give up loudly
                log(f"PUT to ResponseURL failed (attempt {attempt + 1}): {exc}")
                time.sleep(min(2 ** attempt, 8))
        return False


def failed_id(event):
    """Id for a resource that was never created: a later Delete of it is a no-op."""
    return "hpq-helm-not-created-" + str(event.get("RequestId", "unknown"))[:36]


# --------------------------------------------------------------------------- properties


def properties(event):
    props = event.get("ResourceProperties") or {}
    cluster = str(props.get("ClusterName") or "").strip()
    namespace = str(props.get("Namespace") or DEFAULT_NAMESPACE).strip()
    release = str(props.get("ReleaseName") or DEFAULT_RELEASE).strip()
    source = str(props.get("ChartSource") or "").strip()
    version = str(props.get("ChartVersion") or "").strip()
    if not cluster:
        raise HandlerError("ClusterName is required")
    for label, value in (("Namespace", namespace), ("ReleaseName", release)):
        if not _DNS1123.match(value):
            raise HandlerError(f"{label} {value!r} is not a valid name (lowercase letters, digits, '-')")
    if len(release) > RELEASE_MAX:
        raise HandlerError(f"ReleaseName {release!r} is longer than {RELEASE_MAX} characters")
    if not source:
        raise HandlerError("ChartSource is required (https URL, oci:// reference or s3://bucket/key)")
    if "{version}" in source:
        if not version:
            raise HandlerError("ChartSource contains {version} but ChartVersion is empty")
        source = source.replace("{version}", version)
    raw_values = props.get("Values")
    if isinstance(raw_values, dict):
        values = raw_values
    elif raw_values in (None, ""):
        values = {}
    else:
        try:
            values = json.loads(raw_values)
        except ValueError as exc:
            raise HandlerError(f"Values is not valid JSON: {exc}") from None
        if not isinstance(values, dict):
            raise HandlerError("Values must be a JSON object")
    return {
        "cluster": cluster, "namespace": namespace, "release": release, "source": source,
        "path": str(props.get("ChartPath") or "").strip().strip("/"), "version": version, "values": values,
    }


def physical_id(p):
    return f"{p['cluster']}/{p['namespace']}/{p['release']}"


def parse_physical_id(pid):
    """(cluster, namespace, release) from our id, or None for an id of something never created."""
    parts = str(pid or "").split("/")
    if len(parts) != 3 or not all(parts) or not _DNS1123.match(parts[1]) or not _DNS1123.match(parts[2]):
        return None
    return parts[0], parts[1], parts[2]


# --------------------------------------------------------------------------- EKS access


def _boto3():
    import boto3

    return boto3


def region_name():
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def describe_cluster(cluster, region):
    """Endpoint and CA of the cluster; raises ClusterGone when it does not exist."""
    client = _boto3().client("eks", region_name=region)
    try:
        info = client.describe_cluster(name=cluster)["cluster"]
    except client.exceptions.ResourceNotFoundException:
        raise ClusterGone(f"EKS cluster {cluster!r} not found in {region}") from None
    endpoint = info.get("endpoint")
    ca = (info.get("certificateAuthority") or {}).get("data")
    if not endpoint or not ca:
        raise HandlerError(f"EKS cluster {cluster!r} has no endpoint yet (status {info.get('status')})")
    return endpoint, ca


def eks_token(cluster, region, session=None):
    """Bearer token EKS accepts: a presigned sts:GetCallerIdentity URL naming the cluster (k8s-aws-v1.)."""
    boto3 = _boto3()
    session = session or boto3.session.Session()
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    # Regional STS host: the one EKS's authenticator expects for a regional token.
    sts = session.client("sts", region_name=region, endpoint_url=f"https://sts.{region}.{suffix}")

    def add_cluster_header(request, **_kwargs):
        request.headers["x-k8s-aws-id"] = cluster

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def kubeconfig(cluster, endpoint, ca_data, token):
    """A kubeconfig (as a dict; JSON is valid YAML for helm) with a static bearer token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "users": [{"name": "hpq", "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "hpq"}}],
        "current-context": cluster,
    }


# --------------------------------------------------------------------------- helm


def find_helm():
    override = os.environ.get("HPQ_HELM_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise HandlerError(f"HPQ_HELM_BIN={override} is not executable")
        return override
    for cand in HELM_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("helm")
    if found:
        return found
    raise HandlerError("helm not found: attach the kubectl/helm Lambda layer "
                       f"(looked in {', '.join(HELM_CANDIDATES)} and PATH)")


class Helm:
    """Runs helm with a private kubeconfig and writable homes under /tmp (Lambda's only writable path)."""

    def __init__(self, workdir, kube, deadline, margin):
        self.exe = find_helm()
        self.deadline = deadline
        self.margin = margin
        cfg = os.path.join(workdir, "kubeconfig")
        with open(cfg, "w") as fh:
            json.dump(kube, fh)
        os.chmod(cfg, 0o600)
        env = dict(os.environ)
        extra = [p for p in LAYER_PATHS if os.path.isdir(p)]
        env["PATH"] = os.pathsep.join(extra + [env.get("PATH", "/usr/bin:/bin")])
        for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
            env[var] = os.path.join(workdir, "helm", sub)
            os.makedirs(env[var], exist_ok=True)
        env["HOME"] = workdir
        env["KUBECONFIG"] = cfg
        self.env = env

    def seconds_left(self):
        return self.deadline - time.time() - self.margin

    def run(self, args):
        """(exit code, combined output); a helm that outlives the Lambda's budget is killed."""
        if self.seconds_left() < 3:
            raise HandlerError(f"not enough Lambda time left to run helm {args[0]}")
        # Killed only after the watchdog has answered (it fires at deadline - margin), before Lambda ends.
        budget = self.deadline - time.time() - self.margin / 2
        log("helm " + " ".join(args))
        try:
            res = subprocess.run([self.exe] + list(args), env=self.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=budget)
        except subprocess.TimeoutExpired:
            raise HandlerError(f"helm {args[0]} did not finish within the Lambda's time") from None
        out = res.stdout or ""
        log(f"helm {args[0]} -> exit {res.returncode}\n{out[-4000:]}")
        return res.returncode, out

    def wait_timeout(self, reserve=15):
        """Seconds for helm --timeout (hooks): what is left of the Lambda minus the reply margin and a reserve."""
        return max(30, int(self.seconds_left() - reserve))


def tail(text, n=600):
    text = " ".join((text or "").split())
    return text[-n:]


# --------------------------------------------------------------------------- chart source


def fetch_chart(source, path, workdir):
    """A chart reference helm understands: an oci:// ref, a .tgz file, or a chart directory."""
    scheme = urllib.parse.urlparse(source).scheme
    if scheme == "oci":
        return source, True
    if scheme == "s3":
        parsed = urllib.parse.urlparse(source)
        name = os.path.basename(parsed.path) or "chart"
        local = os.path.join(workdir, "download-" + name)
        s3 = _boto3().client("s3", region_name=region_name())
        try:
            s3.download_file(parsed.netloc, parsed.path.lstrip("/"), local)
        except Exception as exc:  # noqa: BLE001 - reported as the reason
            raise HandlerError(f"cannot download {source}: {exc}") from None
    elif scheme == "https":
        name = os.path.basename(urllib.parse.urlparse(source).path) or "chart"
        local = os.path.join(workdir, "download-" + name)
        try:
            req = urllib.request.Request(source, headers={"User-Agent": "hpq-helm"})
            with urllib.request.urlopen(req, timeout=120) as resp, open(local, "wb") as out:
                shutil.copyfileobj(resp, out)
        except Exception as exc:  # noqa: BLE001
            raise HandlerError(f"cannot download {source}: {exc}") from None
    else:
        raise HandlerError(f"unsupported ChartSource {source!r}: use https://, oci:// or s3://")
    return unpack(local, path, workdir), False


def _safe_members(names, dest):
    root = os.path.realpath(dest)
    for name in names:
        target = os.path.realpath(os.path.join(dest, name))
        if target != root and not target.startswith(root + os.sep):
            raise HandlerError(f"archive member {name!r} escapes the extraction directory")


def unpack(archive, path, workdir):
    """Extract a .zip/.tgz when a ChartPath is given or it is a zip; a bare chart .tgz goes to helm as is."""
    is_zip = zipfile.is_zipfile(archive)
    if not is_zip and not path:
        return archive
    dest = os.path.join(workdir, "chart-src")
    os.makedirs(dest, exist_ok=True)
    try:
        if is_zip:
            with zipfile.ZipFile(archive) as zf:
                _safe_members(zf.namelist(), dest)
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                _safe_members(tf.getnames(), dest)
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(dest, filter="data")
                else:
                    tf.extractall(dest)
    except (zipfile.BadZipFile, tarfile.TarError) as exc:
        raise HandlerError(f"ChartSource is not a readable archive: {exc}") from None
    return locate_chart(dest, path)


def locate_chart(dest, path):
    """The chart folder: ChartPath under the archive root, or under its single top folder (GitHub archives)."""
    roots = [dest]
    entries = [e for e in os.listdir(dest) if not e.startswith(".")]
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        roots.append(os.path.join(dest, entries[0]))
    for root in roots:
        cand = os.path.join(root, path) if path else root
        if os.path.isfile(os.path.join(cand, "Chart.yaml")):
            return cand
    top = ", ".join(sorted(entries)[:10]) or "empty"
    raise HandlerError(f"no Chart.yaml at ChartPath {path!r} in the archive (top level: {top})")


def has_dependencies(chart_dir):
    try:
        with open(os.path.join(chart_dir, "Chart.yaml")) as fh:
            return re.search(r"^dependencies\s*:", fh.read(), re.MULTILINE) is not None
    except OSError:
        return False


# --------------------------------------------------------------------------- operations


def install(p, helm, workdir, on_upgrade):
    """``on_upgrade()`` runs just before ``helm upgrade``: from then on a release may exist on the cluster."""
    chart, is_oci = fetch_chart(p["source"], p["path"], workdir)
    if os.path.isdir(chart) and has_dependencies(chart):
        sub = "build" if os.path.isfile(os.path.join(chart, "Chart.lock")) else "update"
        rc, out = helm.run(["dependency", sub, chart])
        if rc != 0:
            raise HandlerError(f"helm dependency {sub} failed: {tail(out)}")
    args = ["upgrade", "--install", p["release"], chart, "--namespace", p["namespace"], "--create-namespace",
            "--history-max", "5"]
    if is_oci and p["version"]:
        args += ["--version", p["version"]]
    if p["values"]:
        values_file = os.path.join(workdir, "values.json")
        with open(values_file, "w") as fh:
            json.dump(p["values"], fh)
        args += ["--values", values_file]
    # No --wait: see the module docstring (nothing can run before HyperPod adds nodes).
    args += ["--timeout", f"{helm.wait_timeout()}s"]
    on_upgrade()
    rc, out = helm.run(args)
    if rc != 0:
        raise HandlerError(f"helm upgrade --install {p['release']} in {p['namespace']} failed: {tail(out)}")
    return f"installed {p['release']} (chart {p['source']} {p['version']}) in namespace {p['namespace']}"


def uninstall(cluster, namespace, release, helm):
    # No --wait either: the HyperPod nodes are gone by now (the cluster is deleted first), so waiting
    # for pods to terminate could only time out; hooks are still waited for within --timeout.
    rc, out = helm.run(["uninstall", release, "--namespace", namespace,
                        "--timeout", f"{helm.wait_timeout()}s"])
    if rc == 0:
        return f"uninstalled {release} from namespace {namespace}"
    if _NOT_FOUND.search(out or ""):
        return f"release {release} was not installed in {cluster}/{namespace}: nothing to delete"
    raise HandlerError(f"helm uninstall {release} in {namespace} failed: {tail(out)}")


def connect(cluster, region, workdir, deadline, margin):
    endpoint, ca = describe_cluster(cluster, region)
    return Helm(workdir, kubeconfig(cluster, endpoint, ca, eks_token(cluster, region)), deadline, margin)


def dispatch(event, deadline, margin, progress):
    """(status, reason, physical id, data) for one request.

    ``progress["pid"]`` is the id a failure reports. A Create keeps the no-op id until helm upgrade
    starts, so the rollback Delete of a Create that never reached the cluster (bad properties, no helm
    layer, download failed) succeeds without needing helm; after that the id names the release, which
    helm may have half-installed, so the Delete looks for it. Updates and Deletes keep their id."""
    kind = event.get("RequestType")
    region = region_name()
    workdir = tempfile.mkdtemp(prefix="hpq-helm-")
    try:
        if kind == "Delete":
            target = parse_physical_id(event.get("PhysicalResourceId"))
            if target is None:
                return SUCCESS, "nothing to delete: the release was never created", None, {}
            cluster, namespace, release = target
            try:
                helm = connect(cluster, region, workdir, deadline, margin)
            except ClusterGone as exc:
                return SUCCESS, f"{exc}: nothing to uninstall", None, {}
            return SUCCESS, uninstall(cluster, namespace, release, helm), None, {}
        if kind not in ("Create", "Update"):
            raise HandlerError(f"unknown RequestType {kind!r}")
        p = properties(event)
        pid = physical_id(p)
        helm = connect(p["cluster"], region, workdir, deadline, margin)
        mark = (lambda: progress.update(pid=pid)) if kind == "Create" else (lambda: None)
        reason = install(p, helm, workdir, on_upgrade=mark)
        data = {"ReleaseName": p["release"], "Namespace": p["namespace"], "ChartVersion": p["version"],
                "ChartSource": p["source"]}
        return SUCCESS, reason, pid, data
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def handler(event, context):
    """Lambda entry point (index.handler)."""
    log(f"request {event.get('RequestType')} {event.get('LogicalResourceId')}")
    responder = Responder(event, context)
    progress = {"pid": event.get("PhysicalResourceId") or failed_id(event)}
    watchdog = None
    try:
        margin = float(os.environ.get("HPQ_HELM_MARGIN_S", "20"))
        remaining = context.get_remaining_time_in_millis() / 1000.0 if context else 900.0
        deadline = time.time() + remaining

        def on_timeout():
            responder.send(FAILED, f"timed out: the Lambda was about to reach its time limit ({int(remaining)}s) "
                           "before helm finished; see its CloudWatch log", progress["pid"])

        watchdog = threading.Timer(max(remaining - margin, 0.5), on_timeout)
        watchdog.daemon = True
        watchdog.start()
        status, reason, pid, data = dispatch(event, deadline, margin, progress)
        responder.send(status, reason, pid or progress["pid"], data)
    except HandlerError as exc:
        responder.send(FAILED, str(exc), progress["pid"])
    except Exception as exc:  # noqa: BLE001 - CloudFormation must hear about every failure
        traceback.print_exc()
        responder.send(FAILED, f"unexpected {type(exc).__name__}: {exc}", progress["pid"])
    finally:
        if watchdog is not None:
            watchdog.cancel()
    return {"Status": responder.sent}
