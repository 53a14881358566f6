"""``hpq eks``: the cluster tests as Kubernetes jobs (render offline, or run them on an EKS cluster).

``hpq eks render`` prints the manifests (:mod:`hpq.manifests.render`). ``hpq eks nccl-test|nanogpt|validate``
are aliases of ``hpq test nccl|nanogpt|validate`` on the EKS backend (:mod:`hpq.validation.eks`) that also
take an EKS cluster's own name: one request, the same judges, the same output and exit codes.
"""

from __future__ import annotations

from typing import Any

import click

from hpq.cli import inputs
from hpq.cli.commands.test import PROGRAM_MAX_BYTES, echo_for, finish, run
from hpq.cli.common_options import aws_options, output_option
from hpq.manifests.render import RenderRequest, render
from hpq.validation.eks import EksBackend, EksOptions
from hpq.validation.request import NANOGPT, NCCL, VALIDATE, TestRequest
from hpq.vocab import DEFAULT_FSX_GIB, FSX_RULE

RENDER_TESTS = ("nccl-test", "nanogpt", "validate", "fsx")
_JOBS = ("nccl-test", "nanogpt", "validate")
# Which tests each `eks render` option shapes; given to another test it would be ignored without a word.
RENDER_OPTIONS = {
    "instance_type": _JOBS, "gpus": _JOBS, "image": _JOBS, "fsx_claim": _JOBS, "nccl_debug": _JOBS,
    "program": ("nanogpt",), "program_args": ("nanogpt",), "mpirun": ("nccl-test",),
    "fsx_id": ("fsx",), "fsx_dns": ("fsx",), "fsx_mount_name": ("fsx",), "fsx_capacity": ("fsx",),
    "nodes": _JOBS,
}
NAMESPACE_HELP = "Kubernetes namespace the test objects go in (it must exist)."


@click.group("eks", context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.pass_context
def eks(ctx: click.Context) -> None:
    """Run the validation tests as Kubernetes jobs on an EKS-orchestrated HyperPod cluster.

    \b
    Examples:
      hpq eks render nccl-test --instance-type ml.p5.48xlarge --nodes 2
      hpq eks render validate --instance-type ml.g5.16xlarge --nodes 2 > validate.yaml
      hpq eks nccl-test my-eks-cluster 2 8 --region us-west-2
      hpq eks nanogpt my-eks-cluster 2 --instance-type ml.g5.16xlarge

    Run `hpq eks COMMAND --help` for a command's options and examples.
    """
    if ctx.invoked_subcommand is None:  # bare `hpq eks`: help is the answer, not an error
        click.echo(ctx.get_help())


def _request(test: str, **kw: Any) -> RenderRequest:
    return RenderRequest(test=test, **{k: v for k, v in kw.items() if v is not None})


@eks.command("render")
@click.argument("test", type=click.Choice(RENDER_TESTS))
@click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
              help="GPU or Trainium type, e.g. ml.p5.48xlarge (not for fsx).")
@click.option("--nodes", "-n", type=inputs.TEST_NODES, default=2, show_default=True,
              help="Nodes (one worker pod per node).")
@click.option("--gpus", "-g", type=inputs.GPUS, default=None, help="GPUs (Neuron devices) per node; default: all.")
@click.option("--image", default=None, type=inputs.IMAGE,
              help="Container image (defaults are documented in docs/eks.md).")
@click.option("--namespace", default="default", show_default=True, type=inputs.NAMESPACE, help=NAMESPACE_HELP)
@click.option("--name", default=None, type=inputs.JOB_NAME, help="Object name (default hpq-<test>).")
@click.option("--program", type=inputs.InputFile(text=True, max_bytes=PROGRAM_MAX_BYTES, what="program"),
              default=None,
              help="nanogpt: training program to ship in the ConfigMap (default: the one in hpq's scripts/).")
@click.option("--program-args", default="", type=inputs.ShellWords(),
              help="nanogpt: arguments for the training program (split as a shell would).")
@click.option("--fsx-claim", default=None, type=inputs.CLAIM_NAME,
              help="Mount this PersistentVolumeClaim at /fsx in the test pods "
              "(needs the FSx for Lustre CSI driver on the cluster).")
@click.option("--nccl-debug", default=None, metavar="LEVEL", type=inputs.NCCL_DEBUG,
              help="NCCL_DEBUG for the pods: VERSION, WARN, INFO or TRACE, or 'off' "
                   "(default: INFO for nccl-test, so the log names the transport NCCL chose; off otherwise).")
@click.option("--mpirun", default=None, metavar="PATH", type=inputs.IMAGE_PATH,
              help="nccl-test: absolute path of mpirun in the image (default /opt/amazon/openmpi/bin/mpirun).")
@click.option("--fsx-id", default=None, type=inputs.FSX_ID, help="fsx: filesystem id (stack output FsxFileSystemId).")
@click.option("--fsx-dns", default=None, type=inputs.FSX_DNS, help="fsx: DNS name (stack output FsxDnsName).")
@click.option("--fsx-mount-name", default=None, type=inputs.FSX_MOUNT_NAME,
              help="fsx: mount name (stack output FsxMountName).")
@click.option("--fsx-capacity", type=inputs.FSX_CAPACITY, default=DEFAULT_FSX_GIB, show_default=True,
              help=f"fsx: capacity in GiB ({FSX_RULE}).")
def render_cmd(test: str, instance_type: str | None, nodes: int, gpus: int | None, image: str | None,
               namespace: str, name: str | None, program: str | None, program_args: str,
               fsx_claim: str | None, nccl_debug: str | None, mpirun: str | None, fsx_id: str | None,
               fsx_dns: str | None, fsx_mount_name: str | None, fsx_capacity: int) -> None:
    """Print the manifests of TEST (nccl-test, nanogpt, validate, fsx) as YAML; no cluster needed.

    Resources (nvidia.com/gpu or aws.amazon.com/neuron, vpc.amazonaws.com/efa,
    hugepages) come from the instance catalog and the NCCL/EFA environment from
    the same function Slurm nodes use (see `hpq nccl-env`).

    \b
    Examples:
      hpq eks render nccl-test --instance-type ml.p5.48xlarge --nodes 2
      hpq eks render nccl-test -t ml.g5.16xlarge -n 2 --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:2.23 --mpirun /usr/local/bin/mpirun
      hpq eks render nccl-test -t ml.trn1.32xlarge -n 2
      hpq eks render nanogpt -t ml.p5.48xlarge -n 2 --nccl-debug INFO
      hpq eks render nanogpt -t ml.g5.48xlarge -n 2 --fsx-claim hpq-fsx | kubectl apply -f -
      hpq eks render fsx --fsx-id fs-0123456789abcdef0 --fsx-dns fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com --fsx-mount-name abcdefgh

    In the fsx example the filesystem id, DNS name and mount name stand for your
    stack's outputs FsxFileSystemId, FsxDnsName and FsxMountName (`hpq status STACK`).
    """
    inputs.refuse_inapplicable(click.get_current_context(),
                               {p: test in tests for p, tests in RENDER_OPTIONS.items()}, f"to {test}")
    req = _request(test, instance_type=instance_type, nodes=nodes, gpus=gpus, image=image, namespace=namespace,
                   name=name, program=program, program_args=program_args, fsx_claim=fsx_claim,
                   nccl_debug=nccl_debug, mpirun=mpirun, fsx_id=fsx_id, fsx_dns=fsx_dns,
                   fsx_mount_name=fsx_mount_name, fsx_capacity_gib=fsx_capacity)
    click.echo(render(req), nl=False)


def run_options(func: Any) -> Any:
    """Options shared by the commands that run a test on a cluster."""
    for opt in reversed([
        click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
                     help="Node type to test (default: the most common GPU/Trainium type among Ready nodes)."),
        click.option("--image", default=None, type=inputs.IMAGE, help="Container image (default: see docs/eks.md)."),
        click.option("--namespace", default="default", show_default=True, type=inputs.NAMESPACE,
                     help=NAMESPACE_HELP),
        click.option("--name", default=None, type=inputs.JOB_NAME, help="Job name (default hpq-<test>)."),
        click.option("--timeout", "timeout_s", type=inputs.TIMEOUT, default=3600, show_default=True,
                     help="Give up after this many seconds (1 to 604800)."),
        click.option("--keep", is_flag=True, help="Do not delete the job afterwards (for kubectl debugging)."),
        click.option("--fsx-claim", default=None, type=inputs.CLAIM_NAME,
                     help="Mount this PersistentVolumeClaim at /fsx (checked first: the claim and the FSx CSI driver)."),
        click.option("--nccl-debug", default=None, metavar="LEVEL", type=inputs.NCCL_DEBUG,
                     help="NCCL_DEBUG: VERSION, WARN, INFO, TRACE or 'off' (default: INFO for nccl-test)."),
        output_option,
        aws_options(services=inputs.SERVICES_EKS),
    ]):
        func = opt(func)
    return func


def _alias(test: str, cluster: str, nodes: int, gpus: int | None, *, instance_type: str | None, timeout_s: int,
           nccl_debug: str | None, output: str, region: str | None, profile: str | None, **options: Any) -> None:
    """`hpq test TEST` on the EKS backend, for the cluster named (an EKS cluster, or a HyperPod cluster on EKS)."""
    request = TestRequest(test, nodes, gpus, instance_type, None, (), timeout_s, nccl_debug)
    backend = EksBackend.for_eks_name(cluster, EksOptions(**options), region, profile)
    finish(run(backend, request, echo_for(output)), output)


@eks.command("nccl-test")
@click.argument("cluster", type=inputs.EKS_CLUSTER)
@click.argument("nodes", type=inputs.TEST_NODES, default=2, required=False)
@click.argument("gpus", type=inputs.GPUS, default=None, required=False)
@click.option("--mpirun", default=None, metavar="PATH", type=inputs.IMAGE_PATH,
              help="Absolute path of mpirun in --image (default /opt/amazon/openmpi/bin/mpirun, AWS's images).")
@run_options
def nccl_test(cluster: str, nodes: int, gpus: int | None, **kw: Any) -> None:
    """NCCL all-reduce (nccl-tests MPIJob; nccom-test on Trainium) on NODES nodes, judged against the catalog.

    Alias of `hpq test nccl CLUSTER` on an EKS cluster (same judge, output and
    exit codes), which also takes the EKS cluster's own name and --name.

    CLUSTER is the EKS cluster name (or the HyperPod cluster name). NODES is how
    many nodes take part, one worker pod each (default 2); GPUS is how many GPUs
    (Neuron devices on Trainium) each pod uses (default: all the node has). The
    kubeconfig is built in-process from the EKS API and an STS token; the
    identity needs an EKS access entry. The expected bus bandwidth is the
    catalog's figure for the instance type and NODES (one node: NVLink or
    NeuronLink; several: the network). Exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE
    (no published figure for the type and NODES, or the log does not name
    the network NCCL used); the first line of the verdict says which and why.

    \b
    Examples:
      hpq eks nccl-test my-eks 2 8 --region us-west-2
      hpq eks nccl-test my-eks 2 --instance-type ml.g5.16xlarge --output json
      hpq eks nccl-test my-eks 4 --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:pinned
    """
    _alias(NCCL, cluster, nodes, gpus, **kw)


@eks.command("nanogpt")
@click.argument("cluster", type=inputs.EKS_CLUSTER)
@click.argument("nodes", type=inputs.TEST_NODES, default=2, required=False)
@click.argument("gpus", type=inputs.GPUS, default=None, required=False)
@click.option("--program", type=inputs.InputFile(text=True, max_bytes=PROGRAM_MAX_BYTES, what="program"), default=None,
              help="Training program to run (default: hpq's nanoGPT program from scripts/).")
@click.option("--program-args", default="", type=inputs.ShellWords(),
              help="Arguments for the training program (split as a shell would).")
@run_options
def nanogpt(cluster: str, nodes: int, gpus: int | None, **kw: Any) -> None:
    """Multi-node nanoGPT training (PyTorchJob + torchrun); PASS when the loss goes down.

    Alias of `hpq test nanogpt CLUSTER` on an EKS cluster (same judge, output
    and exit codes), which also takes the EKS cluster's own name and --name.

    CLUSTER is the EKS cluster name (or the HyperPod cluster name). NODES is how
    many nodes train, one pod each (default 2); GPUS is how many GPUs (Neuron
    devices on Trainium) each pod uses, one torchrun process per GPU (default:
    all the node has).

    \b
    Examples:
      hpq eks nanogpt my-eks 2 --region us-west-2
      hpq eks nanogpt my-eks 2 1 --instance-type ml.g5.16xlarge --program-args "--iters 200"
      hpq eks nanogpt my-eks 2 --fsx-claim hpq-fsx

    On Trainium the model trains on the host CPUs (no torch-neuronx path):
    the verdict is INCONCLUSIVE (exit 3), never a Trainium pass.
    """
    _alias(NANOGPT, cluster, nodes, gpus, **kw)


@eks.command("validate")
@click.argument("cluster", type=inputs.EKS_CLUSTER)
@click.argument("nodes", type=inputs.TEST_NODES, default=2, required=False)
@run_options
def validate(cluster: str, nodes: int, **kw: Any) -> None:
    """Per-node check: every GPU (nvidia-smi) or Neuron device (neuron-ls) and EFA device is visible.

    Alias of `hpq test validate CLUSTER` on an EKS cluster (same judge, output
    and exit codes), which also takes the EKS cluster's own name and --name.

    CLUSTER is the EKS cluster name (or the HyperPod cluster name); NODES is how
    many nodes to check, one pod each (default 2). Nodes count as usable when
    Ready and, on HyperPod, labelled sagemaker.amazonaws.com/node-health-status=
    Schedulable. Also FAIL: a node of the type exposing fewer EFA devices
    (vpc.amazonaws.com/efa allocatable) than the type has, or one HyperPod
    marked UnschedulablePendingReplacement/Reboot; INCONCLUSIVE (exit 3): a
    node still in deep health checks (Unschedulable).

    \b
    Examples:
      hpq eks validate my-eks 4 --region us-west-2
    """
    _alias(VALIDATE, cluster, nodes, None, **kw)


