"""The EKS backend: each test runs as Kubernetes objects (MPIJob, PyTorchJob, Job) on the cluster's nodes.

The request is rendered into manifests (hpq.manifests.render: resources from the instance catalog, the
NCCL/EFA environment from the same function Slurm nodes use), applied and followed by hpq.kube.jobs.Runner
over an in-process API client (hpq.kube.kube: endpoint and CA from eks:DescribeCluster, an STS token).
What came back is a :class:`RawOutcome` like any backend's: exit status 0 when the job Succeeded, 124 when
the run was stopped at its time limit, 1 otherwise; the log of the pod that carries the result; for validate,
what the API server says of the nodes. The verdict is the test's one judge (validation/judges.py), so the
same nccl-tests log reaches the same verdict here and on Slurm.

Which EKS cluster: a HyperPod cluster's DescribeCluster names it in ``Orchestrator.Eks.ClusterArn``
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeCluster.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterOrchestratorEksConfig.html); ``hpq eks``
also takes an EKS cluster's own name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from hpq.aws.session import make_session
from hpq.errors import UsageError
from hpq.kube import jobs
from hpq.kube.kube import KubeClient, KubeError, cluster_access, eks_name_from_arn
from hpq.lifecycle import catalog
from hpq.manifests.render import RenderRequest, check_request, render_objects
from hpq.validation import doctor, judges
from hpq.validation.backend import ClusterFacts, Echo
from hpq.validation.eks_doctor import NodeJobs
from hpq.validation.eks_sweep import SWEEP_NAME, PairJobs
from hpq.validation.request import DOCTOR, NANOGPT, NCCL, NCCOM, SWEEP, VALIDATE, TestRequest
from hpq.validation.result import TIMED_OUT, RawOutcome, TestResult

# The manifests each test runs (hpq.manifests.render.TESTS). On Trainium the nccl-test manifests run
# nccom-test (the Neuron collectives benchmark), which is what nccom asks for.
# The sweep runs nccl-test manifests, one MPIJob per pair of nodes (validation/eks_sweep.py).
MANIFESTS = {NCCL: "nccl-test", NCCOM: "nccl-test", NANOGPT: "nanogpt", VALIDATE: "validate", SWEEP: "nccl-test"}
# Which tests each EKS option shapes beyond every test's own (image, namespace, name, keep, fsx_claim); given
# to another test it would be ignored without a word, so it is refused.
OPTION_TESTS = {"program": (NANOGPT,), "program_args": (NANOGPT,), "mpirun": (NCCL, SWEEP), "fsx_claim": tuple(MANIFESTS),
                "name": tuple(MANIFESTS)}


@dataclass(frozen=True)
class EksOptions:
    """How the test objects are made on EKS (the ``Reach.eks`` keys of validation/pick.py)."""

    image: str | None = None  # None: the manifests' pinned default for the test and type
    namespace: str = "default"
    name: str | None = None  # None: hpq-<manifests>
    keep: bool = False  # leave the objects for kubectl debugging
    fsx_claim: str | None = None  # a PersistentVolumeClaim mounted at /fsx
    program: str | None = None  # nanogpt: the training program file (None: hpq's nanoGPT)
    program_args: str = ""  # nanogpt: its arguments, split as a shell would
    mpirun: str | None = None  # nccl on GPUs: mpirun's absolute path in the image

    def __post_init__(self) -> None:
        # What does not depend on the test or the instance type is refused before any AWS call.
        check_request(RenderRequest("nanogpt", namespace=self.namespace, name=self.name, program=self.program,
                                    program_args=self.program_args))

    @classmethod
    def of(cls, values: dict[str, Any]) -> EksOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown EKS option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def given(self) -> list[str]:
        """The options set away from their defaults."""
        return [f.name for f in fields(self) if getattr(self, f.name) != f.default]


def connect(cluster: str, region: str | None, profile: str | None) -> KubeClient:
    """An API client for the EKS cluster ``cluster`` (its name, or a HyperPod cluster's that runs on EKS)."""
    session = make_session(region, profile)
    return KubeClient(cluster_access(session, cluster), token_refresh=lambda: cluster_access(session, cluster))


class EksBackend:
    """Tests on an EKS-orchestrated cluster, as Kubernetes jobs."""

    name = "eks"
    orchestrator = "eks"  # how HyperPod's view keys nodes (validation/doctor_fix.hyperpod_view)

    def __init__(self, cluster: str, options: EksOptions, client: Callable[[], KubeClient],
                 facts: ClusterFacts | None = None, poll_s: float = 5.0):
        self.cluster = cluster  # what the user named (HyperPod or EKS cluster name)
        self.options = options
        self._connect = client
        self._client: KubeClient | None = None
        self._facts = facts
        self.poll_s = poll_s
        self._runner: jobs.Runner | None = None
        self._doctor: NodeJobs | None = None
        self._sweep: PairJobs | None = None
        self._echo: Echo = lambda line: None

    @classmethod
    def for_cluster(cls, cl: Any, facts: ClusterFacts, reach: Any, session: Any) -> EksBackend:
        """For a HyperPod cluster DescribeCluster answered for (``cl``: aws.hyperpod.Cluster): its EKS cluster
        is the one ``Orchestrator.Eks.ClusterArn`` names."""
        if not cl.eks_cluster_arn:
            raise UsageError(f"HyperPod cluster {cl.name} is not orchestrated by EKS (no Orchestrator.Eks)")
        eks_name = eks_name_from_arn(cl.eks_cluster_arn)
        options = EksOptions.of(dict(reach.eks))
        return cls(cl.name, options, lambda: KubeClient(
            cluster_access(session, eks_name), token_refresh=lambda: cluster_access(session, eks_name)), facts)

    @classmethod
    def for_eks_name(cls, cluster: str, options: EksOptions, region: str | None, profile: str | None) -> EksBackend:
        """For an EKS cluster named directly (or a HyperPod cluster name; kube.kube resolves either)."""
        return cls(cluster, options, lambda: connect(cluster, region, profile))

    # ------------------------------------------------------------------ Backend

    def client(self) -> KubeClient:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def resolve(self) -> ClusterFacts:
        """The cluster, with the worker type the tests measure: the most common GPU/Trainium type among the
        usable nodes (kube.jobs.pick_instance_type), None when there is none (``run`` then says so)."""
        try:
            worker: str | None = jobs.pick_instance_type(self.client(), None, 0)
        except UsageError:  # no usable GPU or Trainium node: `run` says so with the request's numbers
            worker = None
        known = self._facts
        self._facts = ClusterFacts(known.name if known else self.cluster, "eks", worker or (
            known.worker_type if known else None))
        return self._facts

    def check(self, request: TestRequest) -> None:
        """Refuse what this backend cannot run, before anything is created."""
        if request.test not in MANIFESTS and request.test != DOCTOR:
            raise UsageError(f"{request.test} has no EKS manifests")
        if request.extra and request.test == DOCTOR:
            raise UsageError("--extra does not apply on an EKS cluster: the doctor's Jobs run node_doctor as "
                             "validation/eks_doctor.py builds it")
        if request.extra:
            raise UsageError(f"--extra does not apply on an EKS cluster: the {MANIFESTS[request.test]} job's "
                             "command comes from its manifest" + (" (the training program's arguments: "
                                                                 "--program-args)" if request.test == NANOGPT else ""))
        wrong = [o for o, tests in OPTION_TESTS.items()
                 if o in self.options.given() and request.test not in tests]
        if wrong:
            flags = ", ".join("--" + o.replace("_", "-") for o in wrong)
            raise UsageError(f"{flags} {'does' if len(wrong) == 1 else 'do'} not apply to {request.test}")

    def render_request(self, request: TestRequest, instance_type: str | None) -> RenderRequest:
        """The manifests' request: the test request's fields, the EKS options, the instance type."""
        o = self.options
        kw: dict[str, Any] = {"instance_type": instance_type, "nodes": request.node_count, "gpus": request.gpus,
                              "image": o.image, "namespace": o.namespace, "name": o.name, "program": o.program,
                              "program_args": o.program_args, "fsx_claim": o.fsx_claim,
                              "nccl_debug": request.nccl_debug, "mpirun": o.mpirun}
        return RenderRequest(MANIFESTS[request.test], **{k: v for k, v in kw.items() if v is not None})

    def run(self, request: TestRequest, instance_type: str | None, echo: Echo) -> RawOutcome:
        self._echo = echo
        self.check(request)
        if request.test == DOCTOR:
            return self._run_doctor(request, echo)
        if request.test == SWEEP:
            return self._run_sweep(request, instance_type, echo)
        nodes = request.node_count or 0
        client = self.client()
        itype = jobs.pick_instance_type(client, instance_type, nodes)
        trainium = catalog.lookup(itype).accelerator == catalog.TRAINIUM
        if request.test == NCCOM and not trainium:
            raise UsageError(f"nccom runs nccom-test on Trainium; {itype} is a GPU type: use `hpq test nccl`")
        objects = render_objects(self.render_request(request, itype))
        if self.options.fsx_claim:
            jobs.check_fsx_claim(client, self.options.namespace, self.options.fsx_claim)
        plan = jobs.plan_for(MANIFESTS[request.test], objects)
        echo(f"running {MANIFESTS[request.test]} on {nodes} x {itype} in {self.cluster} "
             f"(namespace {plan.namespace}, job {plan.name})")
        self._runner = jobs.Runner(client, plan, echo=echo, poll_s=self.poll_s, timeout_s=request.timeout_s)
        outcome = self._runner.run()
        code = 0 if outcome.state == "Succeeded" else TIMED_OUT if outcome.state == "TimedOut" else 1
        facts = jobs.node_facts(client, itype).to_dict() if request.test == VALIDATE else {}
        # The job as kubectl names it (mpijob/hpq-nccl-test): what the judges' messages say ran.
        return RawOutcome(code, outcome.log, command=f"{plan.job_kind.lower()}/{plan.name}", state=outcome.state,
                          detail=outcome.message, facts=facts, host_nodes=outcome.pod_nodes)

    def _run_doctor(self, request: TestRequest, echo: Echo) -> RawOutcome:
        """node_doctor on every node (or the first NODES) as one Job per node (validation/eks_doctor.py)."""
        o = self.options
        self._doctor = NodeJobs(self.client(), o.namespace, o.image, poll_s=self.poll_s, keep=o.keep)
        code, line = self._doctor.run(request, echo)
        return RawOutcome(code, line, command=f"jobs/{self._doctor.name}-*", state="exited")

    def _run_sweep(self, request: TestRequest, instance_type: str | None, echo: Echo) -> RawOutcome:
        """The pairwise sweep: one nccl-tests MPIJob per pair, pinned to its two nodes (validation/eks_sweep.py)."""
        client = self.client()
        itype = jobs.pick_instance_type(client, instance_type, request.node_count or 2)
        if self.options.fsx_claim:
            jobs.check_fsx_claim(client, self.options.namespace, self.options.fsx_claim)
        base = self.render_request(TestRequest(NCCL, 2, request.gpus, nccl_debug=request.nccl_debug), itype)
        self._sweep = PairJobs(client, replace(base, name=self.options.name or SWEEP_NAME), poll_s=self.poll_s,
                               keep=self.options.keep)
        return self._sweep.run(request, echo)

    # The doctor's node actions on EKS (hpq.validation.doctor_fix calls these through the backend).
    @staticmethod
    def drain_command(node: str, reason: str) -> str:
        """Cordon keeps new pods off the node; running pods stay until HyperPod reboots or replaces it
        (``kubectl drain`` would evict them: a person's call, printed in the plan's reason)."""
        return f"kubectl cordon {node}"

    @staticmethod
    def resume_command(node: str) -> str:
        return f"kubectl uncordon {node}"

    def drain(self, node: str, reason: str) -> str:
        """Cordon ``node``; the error text, empty when it was done."""
        return self._patch(node, True)

    def resume(self, node: str) -> str:
        return self._patch(node, False)

    def node_ready(self, node: str) -> str:
        """The Kubernetes node's Ready condition: ``Ready``, ``NotReady`` (False or Unknown, as kubectl shows
        both) or ``absent`` (not registered yet): what --fix waits for after a reboot or a replacement.
        Reference: https://kubernetes.io/docs/reference/node/node-status/#condition."""
        try:
            obj = self.client().request("GET", f"/api/v1/nodes/{node}")
        except KubeError as exc:
            return "absent" if exc.status == 404 else f"unknown ({exc})"
        except UsageError as exc:
            return f"unknown ({exc})"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                return "Ready" if c.get("status") == "True" else "NotReady"
        return "NotReady"

    def _patch(self, node: str, unschedulable: bool) -> str:
        try:
            self.client().cordon(node, unschedulable)
        except (KubeError, UsageError) as exc:
            return str(exc)
        return ""

    def judge(self, request: TestRequest, raw: RawOutcome, instance_type: str | None) -> TestResult:
        result = self._judge(request, raw, instance_type)
        if raw.host_nodes:
            # The hosts a job's programs print are its pods; which node each ran on is what a user acts on
            # (kubectl cordon NODE) and what the result's metrics are labelled with (scripts/result_metrics.py).
            result.data["host_nodes"] = dict(sorted(raw.host_nodes.items()))
        return result

    def _judge(self, request: TestRequest, raw: RawOutcome, instance_type: str | None) -> TestResult:
        cluster = self._facts.name if self._facts else self.cluster
        if request.test == DOCTOR:
            return doctor.judge(request, raw, instance_type, self.name, cluster)
        if request.test in (NCCL, NCCOM):
            # The job's end state is the program's exit status (0 only when it Succeeded): a job that did not
            # succeed is a FAIL whatever its table says, by the same rule as a node program that exited non-zero.
            result = judges.judge_bandwidth(request, raw, instance_type, self.name, cluster)
            result.data["job"] = {"state": raw.state, "message": raw.detail}
            if raw.exit_code:
                result.message += f"\n{raw.command or 'the job'} ended {raw.state}" + (
                    f": {raw.detail}" if raw.detail else "")
            return result
        if request.test == SWEEP:
            return judges.judge_sweep(request, raw, instance_type, self.name, cluster)
        if request.test == NANOGPT:
            return judges.judge_nanogpt(request, raw, instance_type, self.name, cluster)
        return judges.judge_validate(request, raw, instance_type, self.name, cluster)

    def cleanup(self) -> None:
        """Delete what the run created (unless ``keep``); safe to call twice and after a failed run."""
        nodejobs, self._doctor = self._doctor, None
        if nodejobs is not None:
            nodejobs.cleanup(self._echo)
        pairs, self._sweep = self._sweep, None
        if pairs is not None:
            pairs.cleanup(self._echo)
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if self.options.keep:
            self._echo(f"--keep: leaving {runner.plan.job_kind} {runner.plan.name} in namespace "
                       f"{runner.plan.namespace}")
            return
        self._echo("cleaning up")
        runner.cleanup()

