"""Run one test as Kubernetes objects: apply, wait with progress, follow the result log, clean up.

It judges nothing: the runner hands back an :class:`Outcome` (job state, message, the result pod's log) and
the EKS backend (hpq.validation.eks) turns it into the raw outcome every backend's judge reads.

The runner talks only through :class:`hpq.kube.kube.KubeClient` (create, get,
delete, list pods/nodes, logs), so tests drive it over real HTTP against a small
local server. Cleanup runs in ``finally`` by the caller, also on Ctrl-C, and a
leftover from an interrupted earlier run (HTTP 409) is deleted and re-created,
so re-running is always safe.
"""

from __future__ import annotations

import http.client
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpq.errors import OperationFailed, UsageError
from hpq.kube.kube import KubeClient, KubeError
from hpq.lifecycle import catalog

INSTANCE_LABEL = "node.kubernetes.io/instance-type"
# HyperPod's node health label and its values: "Schedulable" passed the basic health checks;
# "Unschedulable" is running deep health checks; "UnschedulablePendingReplacement" and
# "UnschedulablePendingReboot" failed them. Source: Resilience-related Kubernetes labels by SageMaker
# HyperPod, https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HEALTH_SCHEDULABLE = "Schedulable"
HEALTH_CHECKING = "Unschedulable"
# The EFA device plugin's extended resource (what the pods request; AWS's MPIJob manifests ask for it).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Waiting reasons that do not fix themselves; after PULL_GRACE_S they end the run with the message.
STUCK_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError", "CrashLoopBackOff"}


class RunTimeout(Exception):
    """The whole run took longer than its limit."""


@dataclass
class Plan:
    """Which object is the job, and which pod's log carries the result."""

    test: str
    namespace: str
    name: str
    objects: list[dict[str, Any]]
    job_api: str
    job_kind: str
    log_selector: str
    log_container: str | None
    follow: bool  # follow one pod's log live (MPI launcher, PyTorch master) or collect all pods at the end


def plan_for(test: str, objects: list[dict[str, Any]]) -> Plan:
    jobs = [o for o in objects if o["kind"] in ("MPIJob", "PyTorchJob", "Job")]
    if len(jobs) != 1:
        raise UsageError(f"expected one job object in the {test} manifests, found {len(jobs)}")
    job = jobs[0]
    name, ns = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    if job["kind"] == "MPIJob":
        return Plan(test, ns, name, objects, job["apiVersion"], "MPIJob",
                    f"hpq.aws/job={name},hpq.aws/role=launcher", "launcher", True)
    if job["kind"] == "PyTorchJob":
        return Plan(test, ns, name, objects, job["apiVersion"], "PyTorchJob",
                    f"hpq.aws/job={name},training.kubeflow.org/replica-type=master", "pytorch", True)
    return Plan(test, ns, name, objects, job["apiVersion"], "Job", f"hpq.aws/job={name}", None, False)


@dataclass
class Outcome:
    state: str  # Succeeded, Failed, TimedOut
    message: str
    log: str
    pods: list[str] = field(default_factory=list)
    # pod -> the Kubernetes node it ran on (spec.nodeName, set when the scheduler binds it). A pod's host name
    # is its own name (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go: Spec.Hostname = pod name),
    # so this is how a host a rank line prints becomes a node a user can cordon.
    pod_nodes: dict[str, str] = field(default_factory=dict)


def job_state(obj: dict[str, Any] | None) -> tuple[str | None, str]:
    """(Succeeded|Failed|None, message) from a job's status conditions (kubeflow or batch/v1)."""
    if not obj:
        return "Failed", "the job object disappeared (deleted by someone else?)"
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if str(cond.get("status")) != "True":
            continue
        kind = cond.get("type")
        if kind in ("Succeeded", "Complete"):
            return "Succeeded", cond.get("message") or ""
        if kind == "Failed":
            return "Failed", cond.get("message") or cond.get("reason") or "job failed"
    return None, ""


def pod_summary(pod: dict[str, Any]) -> tuple[str, str]:
    """(short state, problem text) for progress lines and stuck detection."""
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return "Unschedulable", cond.get("message") or cond.get("reason") or "unschedulable"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return waiting["reason"], waiting.get("message") or waiting["reason"]
    return phase, ""


def _name(pod: dict[str, Any]) -> str:
    return str(pod.get("metadata", {}).get("name", "?"))


def _selected(pods: list[dict[str, Any]], selector: str) -> list[dict[str, Any]]:
    """The pods an equality label selector ("k=v,k2=v2") picks, without asking the API again."""
    want = dict(kv.split("=", 1) for kv in selector.split(",") if kv)
    return [p for p in pods if all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v
                                   for k, v in want.items())]


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p.get("metadata", {}).get("creationTimestamp") or "", default=None)


class Runner:
    def __init__(self, client: KubeClient, plan: Plan, echo: Callable[[str], None] = print,
                 poll_s: float = 5.0, timeout_s: float = 3600.0, stuck_grace_s: float = 180.0,
                 schedule_grace_s: float = 600.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.plan, self.echo = client, plan, echo
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self.stuck_grace_s, self.schedule_grace_s = stuck_grace_s, schedule_grace_s
        self.clock, self.sleep = clock, sleep
        self.created: list[dict[str, Any]] = []
        self._start = clock()
        self._last_line = ""
        self._last_print = 0.0
        self._problem_since: dict[str, float] = {}
        self.pod_nodes: dict[str, str] = {}

    # ------------------------------------------------------------------ apply / cleanup

    def apply(self) -> None:
        for obj in self.plan.objects:
            meta = obj["metadata"]
            try:
                self.client.create(obj)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                self.echo(f"{obj['kind']} {meta['name']} is left over from an earlier run: replacing it")
                # Foreground: the old object stays until its pods are gone, so the new pods cannot meet
                # old ones of the same name.
                self.client.delete(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"],
                                   propagation="Foreground")
                self._wait_gone(obj)
                self.client.create(obj)
            self.created.append(obj)
            self.echo(f"created {obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " "))

    def _wait_gone(self, obj: dict[str, Any], limit_s: float = 180.0) -> None:
        meta = obj["metadata"]
        end = self.clock() + limit_s
        while self.client.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]) is not None:
            if self.clock() > end:
                raise OperationFailed(f"old {obj['kind']} {meta['name']} is still being deleted after {limit_s:.0f}s")
            self.sleep(min(self.poll_s, 2.0))

    def cleanup(self) -> None:
        """Delete what this run created, newest first; report but never raise (runs in finally)."""
        for obj in reversed(self.created):
            meta = obj["metadata"]
            try:
                self.client.delete(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
                self.echo(f"deleted {obj['kind']} {meta['name']}")
            except Exception as exc:  # noqa: BLE001 - cleanup must go on to the next object
                self.echo(f"warning: could not delete {obj['kind']} {meta['name']}: {exc}")
        self.created.clear()

    # ------------------------------------------------------------------ waiting

    def elapsed(self) -> float:
        return self.clock() - self._start

    def _job(self) -> dict[str, Any] | None:
        return self.client.get(self.plan.job_api, self.plan.job_kind, self.plan.namespace, self.plan.name)

    def _progress(self, pods: list[dict[str, Any]]) -> None:
        """One line when the pod states change (or every 30 s); fail on a problem that does not go away."""
        now = self.clock()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self.pod_nodes[_name(pod)] = str(node)
        counts = Counter(pod_summary(p)[0] for p in pods)
        line = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no pods yet"
        if line != self._last_line or now - self._last_print >= 30:
            self.echo(f"[{int(self.elapsed()):>4}s] {self.plan.name}: {line}")
            self._last_line, self._last_print = line, now
        seen = set()
        for pod in pods:
            state, problem = pod_summary(pod)
            key = f"{_name(pod)}:{state}"
            if not problem:
                continue
            seen.add(key)
            first = self._problem_since.setdefault(key, now)
            grace = self.schedule_grace_s if state == "Unschedulable" else self.stuck_grace_s
            if first == now:
                self.echo(f"  {_name(pod)}: {state}: {problem}")
            if state in STUCK_REASONS | {"Unschedulable"} and now - first >= grace:
                hint = (" (not enough nodes of that type with free GPUs/EFA, or the device plugins are missing)"
                        if state == "Unschedulable" else "")
                raise OperationFailed(f"pod {_name(pod)} stuck {int(now - first)}s in {state}: {problem}{hint}")
        for key in list(self._problem_since):
            if key not in seen:
                del self._problem_since[key]

    def _deadline_check(self) -> None:
        if self.elapsed() > self.timeout_s:
            raise RunTimeout

    def attempt(self, pod: dict[str, Any]) -> tuple[str, int]:
        """(pod, restart count of the log container): a container restarted in its pod is a new attempt."""
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if self.plan.log_container in (None, cs.get("name")):
                return _name(pod), int(cs.get("restartCount") or 0)
        return _name(pod), 0

    def wait_log_pod(self, followed: set[tuple[str, int]] | None = None
                     ) -> tuple[dict[str, Any] | None, str | None, str]:
        """Poll until a result pod attempt not yet followed can give logs, or the job ends: (pod, state, message)."""
        while True:
            self._deadline_check()
            state, message = job_state(self._job())
            pods = self.client.list_pods(self.plan.namespace, f"hpq.aws/job={self.plan.name}")
            self._progress(pods)
            if state:
                return None, state, message
            if self.plan.follow:
                pod = _newest(_selected(pods, self.plan.log_selector))  # the log pods are job pods too
                if (pod and (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
                        and self.attempt(pod) not in (followed or set())):
                    return pod, None, ""
            self.sleep(self.poll_s)

    def wait_done(self) -> tuple[str, str]:
        while True:
            self._deadline_check()
            state, message = job_state(self._job())
            if state:
                return state, message
            self._progress(self.client.list_pods(self.plan.namespace, f"hpq.aws/job={self.plan.name}"))
            self.sleep(self.poll_s)

    # ------------------------------------------------------------------ the run

    def run(self) -> Outcome:
        """Apply, wait, follow, judge nothing: the caller turns the Outcome into a verdict."""
        self.apply()
        lines: list[str] = []
        pods_seen: list[str] = []
        try:
            pod, state, message = self.wait_log_pod()
            followed: set[tuple[str, int]] = set()
            while pod is not None:
                attempt, this_run = self.attempt(pod), []
                if _name(pod) not in pods_seen:
                    pods_seen.append(_name(pod))
                self.echo(f"--- log of {_name(pod)}" + (f" (restart {attempt[1]})" if attempt[1] else "") + " ---")
                try:
                    for line in self.client.follow_log(self.plan.namespace, _name(pod), self.plan.log_container):
                        self.echo(line)
                        this_run.append(line)
                    followed.add(attempt)
                except (OSError, http.client.HTTPException) as exc:  # quiet too long, or the stream broke
                    followed.add(attempt)
                    self.echo(f"(log stream ended: {exc or type(exc).__name__}; waiting for the job instead)")
                except KubeError as exc:  # 400: the container is between runs (restarting); try again
                    if exc.status != 400:
                        raise
                    self.echo(f"(no log yet: {exc}; waiting)")
                    self.sleep(self.poll_s)
                if this_run:
                    lines = this_run  # judge the latest run: a launcher that failed once, then passed, passed
                state, message = job_state(self._job())
                if state:
                    break
                # The launcher container may run again (restartPolicy OnFailure, backoffLimit) in its pod or
                # in a new pod: follow that run too.
                pod, state, message = self.wait_log_pod(followed)
            if state is None:
                state, message = self.wait_done()
            if self.plan.follow and not pods_seen:
                # The job ended before its result pod could be followed (fast failure): read what it left.
                last = _newest(self.client.list_pods(self.plan.namespace, self.plan.log_selector))
                if last is not None and (last.get("status") or {}).get("phase") != "Pending":
                    pods_seen.append(_name(last))
                    lines += self._safe_log(_name(last)).splitlines()
                    for line in lines:
                        self.echo(line)
            if not self.plan.follow:
                for p in self.client.list_pods(self.plan.namespace, self.plan.log_selector):
                    pods_seen.append(_name(p))
                    text = self._safe_log(_name(p))
                    self.echo(f"--- log of {_name(p)} ---")
                    for line in text.splitlines():
                        self.echo(line)
                        lines.append(line)
        except RunTimeout:
            return Outcome("TimedOut", f"no result after {int(self.timeout_s)}s", "\n".join(lines), pods_seen,
                           dict(self.pod_nodes))
        return Outcome(state, message, "\n".join(lines), pods_seen, dict(self.pod_nodes))

    def _safe_log(self, pod: str) -> str:
        try:
            return self.client.pod_log(self.plan.namespace, pod, self.plan.log_container)
        except KubeError as exc:
            return f"(no log: {exc})"


# ---------------------------------------------------------------------- cluster facts


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _health(node: dict[str, Any]) -> str | None:
    """HyperPod's health label (None on a node HyperPod does not manage, e.g. a plain EKS node group)."""
    value = ((node.get("metadata") or {}).get("labels") or {}).get(HEALTH_LABEL)
    return str(value) if value is not None else None


def usable(node: dict[str, Any]) -> bool:
    """Ready, and Schedulable by HyperPod's health label where the node carries one."""
    health = _health(node)
    return _ready(node) and (health is None or health == HEALTH_SCHEDULABLE)


def node_types(client: KubeClient) -> Counter[str]:
    """Usable nodes (Ready and, on HyperPod, labelled Schedulable) per instance type label."""
    counts: Counter[str] = Counter()
    for node in client.list_nodes():
        labels = node.get("metadata", {}).get("labels") or {}
        if usable(node) and labels.get(INSTANCE_LABEL):
            counts[labels[INSTANCE_LABEL]] += 1
    return counts


@dataclass
class NodeFacts:
    """What the API server says about the nodes of one instance type, for the validate test's judge."""

    instance_type: str
    usable: list[str] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)
    health_checking: list[str] = field(default_factory=list)  # HyperPod deep health checks in progress
    unhealthy: list[str] = field(default_factory=list)  # "name (label value)": failed HyperPod's checks
    efa_short: list[str] = field(default_factory=list)  # "name: N of M": fewer EFA devices than the type has

    def to_dict(self) -> dict[str, Any]:
        return {"instance_type": self.instance_type, "usable": self.usable, "not_ready": self.not_ready,
                "health_checking": self.health_checking, "unhealthy": self.unhealthy, "efa_short": self.efa_short}


def _allocatable(node: dict[str, Any], resource: str) -> int:
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return int(str(raw)) if raw is not None else 0
    except ValueError:
        return 0


def node_facts(client: KubeClient, instance_type: str) -> NodeFacts:
    """Per node of ``instance_type``: Ready, HyperPod's health label, and the EFA devices it exposes
    (``status.allocatable["vpc.amazonaws.com/efa"]``) against the catalog's count for the type."""
    entry = catalog.lookup(instance_type)
    facts = NodeFacts(entry.name)
    for node in client.list_nodes():
        meta = node.get("metadata") or {}
        label = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        try:
            if not label or catalog.normalize(str(label)) != entry.name:
                continue
        except catalog.UnknownInstanceType:
            continue
        name = str(meta.get("name") or "?")
        health = _health(node)
        if not _ready(node):
            facts.not_ready.append(name)
        elif health == HEALTH_CHECKING:
            facts.health_checking.append(name)
        elif health is not None and health != HEALTH_SCHEDULABLE:
            facts.unhealthy.append(f"{name} ({HEALTH_LABEL}={health})")
        else:
            facts.usable.append(name)
        if entry.has_efa and _ready(node):
            have = _allocatable(node, EFA_RESOURCE)
            if have < entry.efa_interfaces:
                facts.efa_short.append(f"{name}: {have} of {entry.efa_interfaces}")
    return facts


def pick_instance_type(client: KubeClient, requested: str | None, nodes: int) -> str:
    """The accelerated type to test: the one asked for, else the most common GPU/Trainium type present."""
    counts = node_types(client)
    accelerated = {}
    for label, n in counts.items():
        try:
            entry = catalog.lookup(label)
        except catalog.UnknownInstanceType:
            continue
        if entry.is_accelerated:
            accelerated[entry.name] = accelerated.get(entry.name, 0) + n
    if requested:
        name = catalog.normalize(requested)
    elif accelerated:
        name = max(sorted(accelerated), key=lambda k: accelerated[k])
    else:
        seen = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none"
        raise UsageError(f"no Ready GPU or Trainium nodes in the cluster (nodes: {seen}); pass --instance-type")
    have = accelerated.get(name, 0)
    if have < nodes:
        raise UsageError(f"the test needs {nodes} Ready {name} node(s); the cluster has {have}")
    return name


# ---------------------------------------------------------------------- FSx for Lustre

FSX_CSI_DRIVER = "fsx.csi.aws.com"


def fsx_addon_hint() -> str:
    """How to add the driver: the same add-on and service account the hpq EKS stack installs (cfn/eks.py)."""
    from hpq.cfn.eks import FSX_CSI_ADDON, FSX_CSI_SERVICE_ACCOUNT

    return (f"Install the EKS add-on {FSX_CSI_ADDON} with an IAM role (AmazonFSxFullAccess, trusted by "
            f"pods.eks.amazonaws.com) through EKS Pod Identity for kube-system/{FSX_CSI_SERVICE_ACCOUNT} "
            "(https://docs.aws.amazon.com/eks/latest/userguide/fsx-csi-create.html): `aws eks create-addon "
            f"--cluster-name CLUSTER --addon-name {FSX_CSI_ADDON} --pod-identity-associations "
            f"serviceAccount={FSX_CSI_SERVICE_ACCOUNT},roleArn=ROLE_ARN` (the hpq EKS stack installs it); "
            "or run without --fsx-claim")


def check_fsx_claim(client: KubeClient, namespace: str, claim: str) -> None:
    """Fail before creating anything when pods that mount ``claim`` could never start.

    Without the FSx for Lustre CSI driver (CSIDriver ``fsx.csi.aws.com``) the kubelet cannot mount the
    volume and the pods wait in ContainerCreating/Pending until the run times out; without the claim
    they are unschedulable.
    """
    if client.get("storage.k8s.io/v1", "CSIDriver", None, FSX_CSI_DRIVER) is None:
        raise OperationFailed(
            f"--fsx-claim {claim}: the cluster has no FSx for Lustre CSI driver (no CSIDriver {FSX_CSI_DRIVER}), "
            f"so the pods that mount the claim would never start. {fsx_addon_hint()}.")
    pvc = client.get("v1", "PersistentVolumeClaim", namespace, claim)
    if pvc is None:
        raise UsageError(f"--fsx-claim {claim}: no PersistentVolumeClaim {claim!r} in namespace {namespace}; create "
                         "it from the stack outputs: hpq eks render fsx --fsx-id ... --fsx-dns ... --fsx-mount-name ... "
                         f"--name {claim} --namespace {namespace} | kubectl apply -f -")
    phase = (pvc.get("status") or {}).get("phase")
    if phase == "Lost":
        raise OperationFailed(f"--fsx-claim {claim}: the claim's volume is Lost (its PersistentVolume was deleted)")
