"""`hpq doctor` on an EKS cluster: node_doctor as one Kubernetes Job per node, all at once, bounded in time.

EKS nodes carry no hpq node commands (the lifecycle installs none there), so the checks travel with the Job:
a ConfigMap holds node_doctor and the modules it imports (the same files the Slurm nodes run, standard
library only), and each Job's pod, pinned to its node with ``nodeName`` (it bypasses the scheduler, so a
cordoned node is still checked), copies them to the host's /tmp and runs them with the host's python3 in the
host's namespaces (``nsenter -t 1``), because every check reads the host, not a container:

- ``hostPID`` + ``privileged``: nsenter into PID 1's mount, UTS, IPC, network and PID namespaces needs both;
  there the tools are the host's own (nvidia-smi and the driver, ``dmesg``/``/dev/kmsg`` for Xid events,
  ``fi_info`` from /opt/amazon/efa, ``systemctl`` for kubelet, /sys/class/infiniband counters, the root and
  /opt/sagemaker file systems). AWS's own HyperPod health-monitoring agent reads the kernel log the same way
  through a hostPath of /dev/kmsg (aws/sagemaker-hyperpod-cli,
  helm_chart/HyperPodHelmChart/charts/health-monitoring-agent/templates/health-monitoring-agent.yaml), and
  tolerates every NoSchedule/NoExecute taint, as these Jobs do (a sick node is often tainted).
- ``hostPath /tmp`` (read-write): the one place the pod writes, a directory named by the pod's uid, removed
  when the checks end.
- No GPU, EFA or CPU request: the doctor must run beside a training job that holds every device.
- ``/fsx`` is not checked (``--fsx ''``): on EKS FSx reaches pods through the CSI driver, not a host mount.

Each pod prints node_doctor's JSON report; the node that does not answer within the bound (image pull,
a hung tool, a node that is gone) gets an entry with the reason and no report, which hpq.validation.doctor
judges INCONCLUSIVE. The entries form the same document run-node-doctor prints on Slurm, so the one judge
(validation/doctor.py) reads both.
"""

from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Callable
from typing import Any

from hpq.kube.jobs import INSTANCE_LABEL, job_state, pod_summary
from hpq.kube.kube import KubeClient, KubeError
from hpq.lifecycle import bundle, catalog
from hpq.scripts import run_node_doctor
from hpq.validation.request import TestRequest

Echo = Callable[[str], None]

ENTRY = "hpq/scripts/node_doctor.py"
# sh, mkdir, cp, rm and nsenter (busybox applets); the host's python3 runs the checks. --image replaces it.
DEFAULT_IMAGE = "public.ecr.aws/docker/library/busybox:1.36"
NODE_TIMEOUT_S = run_node_doctor.NODE_TIMEOUT_S  # the checks' own bound, as on Slurm
START_GRACE_S = 60  # on top: the image pull and the pod's start
MOUNT = "/hpq-doctor"
HOST_TMP = "/host-tmp"
JOB_LABEL = "hpq.aws/job"
NODE_LABEL = "hpq.aws/node"


def import_closure(entry: str = ENTRY) -> tuple[str, ...]:
    """The bundle files ``python3 -m`` of ``entry`` loads: its hpq imports, followed to the end, with every
    package's ``__init__``. Walked from the source, so a module node_doctor starts importing travels with the
    Job without a list to keep (a test runs node_doctor from exactly these files)."""
    src = bundle.node_bundle_files()
    seen: set[str] = set()
    todo = [entry]
    while todo:
        key = todo.pop()
        if key in seen or key not in src:
            continue
        seen.add(key)
        parts = key.split("/")
        todo += ["/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts))]
        with open(src[key], encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name == "hpq" or name.startswith("hpq."):
                    path = name.replace(".", "/")
                    todo += [path + ".py", path + "/__init__.py"]
    return tuple(sorted(seen))


def modules() -> dict[str, str]:
    """ConfigMap key -> file text of node_doctor's closure (keys cannot hold '/': '/' becomes '.')."""
    src = bundle.node_bundle_files()
    out = {}
    for key in import_closure():
        with open(src[key], encoding="utf-8") as fh:
            out[key.replace("/", ".")] = fh.read()
    return out


def node_names(client: KubeClient, count: int | None) -> list[tuple[str, str]]:
    """(node name, instance type) of the nodes to check: every node with an instance type hpq knows (the
    HyperPod nodes, ``ml.`` types), in natural order; the first ``count`` when given."""
    found = []
    for node in client.list_nodes():
        name = str((node.get("metadata") or {}).get("name") or "")
        itype = ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL, "")
        if name and itype in catalog.CATALOG:
            found.append((name, itype))
    found.sort(key=lambda n: run_node_doctor.natural(n[0]))
    return found[:count] if count else found


def script(instance_type: str) -> str:
    """The pod's shell: stage the modules on the host, run node_doctor there, clean up, keep its status."""
    d = "hpq-doctor-$POD_UID"
    return (f"set -e; mkdir -p {HOST_TMP}/{d}; cp -rL {MOUNT}/hpq {HOST_TMP}/{d}/; set +e; "
            f"nsenter -t 1 -m -u -i -n -p -- env PYTHONPATH=/tmp/{d} python3 -s -m hpq.scripts.node_doctor "
            f"--output json --fsx '' --instance-type {instance_type}; rc=$?; rm -rf {HOST_TMP}/{d}; exit $rc")


def config_map(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                   "labels": {JOB_LABEL: name}},
            "data": modules()}


def job(name: str, namespace: str, node: str, instance_type: str, image: str, cm: str,
        deadline_s: int) -> dict[str, Any]:
    """One node's Job: pinned with nodeName, no retries, ended by the API server at ``deadline_s``."""
    items = [{"key": k.replace("/", "."), "path": k} for k in import_closure()]
    labels = {JOB_LABEL: cm, NODE_LABEL: name}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline_s, "ttlSecondsAfterFinished": 3600,
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "nodeName": node, "restartPolicy": "Never", "hostPID": True,
                         "tolerations": [{"operator": "Exists", "effect": "NoSchedule"},
                                         {"operator": "Exists", "effect": "NoExecute"}],
                         "containers": [{
                             "name": "doctor", "image": image, "command": ["sh", "-c", script(instance_type)],
                             "securityContext": {"privileged": True},
                             "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                             "volumeMounts": [{"name": "code", "mountPath": MOUNT, "readOnly": True},
                                              {"name": "host-tmp", "mountPath": HOST_TMP}]}],
                         "volumes": [{"name": "code", "configMap": {"name": cm, "items": items}},
                                     {"name": "host-tmp", "hostPath": {"path": "/tmp", "type": "Directory"}}]}}}}


class NodeJobs:
    """The doctor's Jobs on one cluster: create, wait (bounded), collect the fan-out document, delete."""

    def __init__(self, client: KubeClient, namespace: str = "default", image: str | None = None,
                 poll_s: float = 5.0, node_timeout_s: float = NODE_TIMEOUT_S, keep: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.namespace = namespace
        self.image = image or DEFAULT_IMAGE
        self.poll_s = poll_s
        self.node_timeout_s = node_timeout_s
        self.keep = keep
        self.clock = clock
        self.name = f"hpq-doctor-{os.urandom(3).hex()}"
        self.created: list[tuple[str, str]] = []  # (kind, name) to delete

    def run(self, request: TestRequest, echo: Echo) -> tuple[int, str]:
        """(status like run-node-doctor's, the fan-out JSON line) for the request's nodes."""
        started = self.clock()
        nodes = node_names(self.client, request.nodes)
        if not nodes:
            return 3, json.dumps({"nodes": [], "seconds": 0.0, "error": "no node with a known ml. instance type"})
        deadline_s = int(self.node_timeout_s + START_GRACE_S)
        self.client.create(config_map(self.name, self.namespace))
        self.created.append(("ConfigMap", self.name))
        jobs: dict[str, str] = {}
        for i, (node, itype) in enumerate(nodes):
            jname = f"{self.name}-{i}"
            self.client.create(job(jname, self.namespace, node, itype, self.image, self.name, deadline_s))
            self.created.append(("Job", jname))
            jobs[node] = jname
        echo(f"running node_doctor on {len(nodes)} node(s) as Jobs {self.name}-* in namespace {self.namespace}")
        entries: dict[str, dict[str, Any]] = {}
        bound = min(float(request.timeout_s), deadline_s + 2 * self.poll_s)
        while True:
            for node, jname in jobs.items():
                if node not in entries:
                    obj = self.client.get("batch/v1", "Job", self.namespace, jname)
                    state, message = job_state(obj)
                    if state is not None:
                        entries[node] = self._entry(node, jname, state, message)
            if len(entries) == len(jobs) or self.clock() - started > bound:
                break
            time.sleep(self.poll_s)
        for node, jname in jobs.items():
            if node not in entries:
                entries[node] = {"node": node, "state": "", "exit_code": None, "report": None,
                                 "error": f"no answer in {int(bound)} s ({self._pod_state(jname)})"}
        ordered = [entries[n] for n, _ in nodes]
        doc = {"nodes": ordered, "seconds": round(self.clock() - started, 2)}
        return run_node_doctor.overall(ordered), json.dumps(doc)

    def _pods(self, jname: str) -> list[dict[str, Any]]:
        return self.client.list_pods(self.namespace, f"job-name={jname}")

    def _pod_state(self, jname: str) -> str:
        pods = self._pods(jname)
        if not pods:
            return "no pod"
        state, problem = pod_summary(pods[-1])
        return f"{state}: {problem}" if problem else state

    def _entry(self, node: str, jname: str, state: str, message: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"node": node, "state": state, "exit_code": 0 if state == "Succeeded" else None,
                                 "report": None, "error": ""}
        pods = self._pods(jname)
        log = ""
        if pods:
            try:
                log = self.client.pod_log(self.namespace, str(pods[-1]["metadata"]["name"]))
            except KubeError as exc:
                log = ""
                message = f"{message}; log not read: {exc}"
        report = run_node_doctor.last_json(log)
        if report is None:
            tail = (log.strip().splitlines() or [""])[-1]
            entry["error"] = f"no report (job {state}{': ' + message if message else ''}){': ' + tail[:300] if tail else ''}"
        else:
            entry["report"] = report
        return entry

    def cleanup(self, echo: Echo) -> None:
        """Delete the Jobs (their pods with them) and the ConfigMap; safe to call twice."""
        created, self.created = self.created, []
        if self.keep:
            echo(f"--keep: leaving Jobs {self.name}-* and ConfigMap {self.name} in namespace {self.namespace}")
            return
        for kind, name in created:
            api = "batch/v1" if kind == "Job" else "v1"
            try:
                self.client.delete(api, kind, self.namespace, name)
            except KubeError as exc:
                echo(f"could not delete {kind} {name}: {exc}")
