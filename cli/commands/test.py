"""``hpq test nccl|nanogpt|nccom|sweep|validate CLUSTER``: one test family for every backend.

The command only parses options into a :class:`hpq.validation.request.TestRequest` and a
:class:`hpq.validation.pick.Reach`; which backend runs it (Slurm over SSH, EKS jobs, the rehearsal) is
decided from the cluster itself, and the verdict comes from the test's one judge (hpq.validation).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from hpq.cli import inputs
from hpq.cli.common_options import aws_options, output_option
from hpq.cli.printing import echo_json
from hpq.cli.ssh_options import reach, ssh_options
from hpq.rehearsal.backend import find
from hpq.scripts import outcome
from hpq.validation import pick, publish, saved
from hpq.validation.backend import Backend, run_test
from hpq.validation.request import NANOGPT, NCCL, NCCOM, SWEEP, VALIDATE, TestRequest
from hpq.validation.result import TestResult


def _test_options(func: Any) -> Any:
    for opt in reversed([
        click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
                     help="Judge against this type (default: the cluster's accelerated worker type)."),
        click.option("--extra", default="", type=inputs.ShellWords(),
                     help="More arguments for the node program, split as a shell would."),
        click.option("--timeout", "timeout_s", type=inputs.TIMEOUT, default=3600, show_default=True,
                     help="Stop the test after this many seconds (a stopped test is a FAIL)."),
        click.option("--nccl-debug", default=None, metavar="LEVEL", type=inputs.NCCL_DEBUG,
                     help="NCCL_DEBUG for the ranks: VERSION, WARN, INFO, TRACE or 'off'."),
        output_option,
        aws_options(services=inputs.SERVICES_NODES + inputs.SERVICES_EKS),
        ssh_options,
    ]):
        func = opt(func)
    return func


# The EKS-only options (validation/eks.EksOptions, by the same names): a Slurm cluster refuses them, one line,
# exit 2. An EKS cluster refuses the Slurm-only ones: the SSH hop to the controller and --extra (the node
# program's arguments; an EKS job's command comes from its manifest).
image_option = click.option("--image", default=None, type=inputs.IMAGE,
                            help="EKS: container image (default: pinned per test and type, see docs/eks.md).")
namespace_option = click.option("--namespace", default="default", show_default=True, type=inputs.NAMESPACE,
                                help="EKS: Kubernetes namespace the test objects go in (it must exist).")
keep_option = click.option("--keep", is_flag=True, help="EKS: do not delete the job afterwards (for kubectl debugging).")
fsx_claim_option = click.option("--fsx-claim", default=None, type=inputs.CLAIM_NAME,
                                help="EKS: mount this PersistentVolumeClaim at /fsx (checked first: the claim and "
                                     "the FSx CSI driver).")
mpirun_option = click.option("--mpirun", default=None, metavar="PATH", type=inputs.IMAGE_PATH,
                             help="EKS: absolute path of mpirun in --image (default /opt/amazon/openmpi/bin/mpirun, "
                                  "AWS's images).")
# A ConfigMap holds at most 1 MiB (manifests.render.CONFIGMAP_LIMIT); a bigger program cannot ship.
PROGRAM_MAX_BYTES = 1000 * 1024
program_option = click.option("--program", type=inputs.InputFile(text=True, max_bytes=PROGRAM_MAX_BYTES,
                                                                 what="program"), default=None,
                              help="EKS: training program to run (default: hpq's nanoGPT program from scripts/).")
program_args_option = click.option("--program-args", default="", type=inputs.ShellWords(),
                                   help="EKS: arguments for the training program (split as a shell would).")
EKS_ONLY = ("image", "namespace", "keep", "fsx_claim", "mpirun", "program", "program_args")
SLURM_ONLY = ("extra", "user", "key", "known_hosts", "port", "host", "proxy_command", "group", "node")


def _eks_options(*more: Any) -> Any:
    """--image, --namespace, --keep, --fsx-claim, and ``more`` of the EKS-only options."""
    def wrap(func: Any) -> Any:
        for opt in reversed([image_option, namespace_option, keep_option, fsx_claim_option, *more]):
            func = opt(func)
        return func
    return wrap


def refuse_other_orchestrator(ctx: click.Context, backend: Backend, cluster: str) -> None:
    """The options of the orchestrator ``cluster`` does not have, given anyway: one line, exit 2."""
    eks = backend.name == "eks"
    inputs.refuse_inapplicable(ctx, {p: eks for p in EKS_ONLY if p in ctx.params}, "to a Slurm cluster",
                               f"{cluster} runs Slurm; they shape the Kubernetes jobs of an EKS cluster")
    inputs.refuse_inapplicable(ctx, {p: not eks for p in SLURM_ONLY if p in ctx.params}, "to an EKS cluster",
                               f"{cluster} runs EKS: the tests run as Kubernetes jobs, not over SSH on a controller")


def _run(test: str, cluster: str, nodes: int | None, gpus: int | None, *, instance_type: str | None, extra: str,
         timeout_s: int, nccl_debug: str | None, output: str, region: str | None, profile: str | None,
         group: str | None, node: str | None, user: str, key: str | None, known_hosts: str, port: int,
         host: str | None, proxy_command: str | None, expect: str | None = None, **eks: Any) -> None:
    request = TestRequest(test, nodes, gpus, instance_type, expect, tuple(shlex.split(extra)), timeout_s, nccl_debug)
    where = reach(region, profile, group, node, user, key, known_hosts, port, host, proxy_command, **eks)
    # A kept rehearsal on this machine answers to its cluster's name first (local state, no AWS call).
    backend = find(cluster) or pick.backend_for(cluster, where)
    refuse_other_orchestrator(click.get_current_context(), backend, cluster)
    result = run(backend, request, echo_for(output))
    note = publish.publish(result, region, profile)  # EKS: no node publishes it; to the stack's workspace
    if note:
        click.echo(note, err=True)
    if result.exit_code != outcome.EXIT_BAD_INPUT:  # a judged result: the latest of its test, for hpq status
        note = saved.save_or_say(result, region, profile)
        if note:
            click.echo(note, err=True)
    finish(result, output)


def echo_for(output: str) -> Callable[[str], None]:
    """Progress lines: on stderr with --output json, so stdout stays one JSON document."""
    return (lambda line: click.echo(line, err=True)) if output == "json" else click.echo


def run(backend: Backend, request: TestRequest, echo: Callable[[str], None]) -> TestResult:
    try:
        return run_test(backend, request, echo)
    except KeyboardInterrupt:  # the backend cleaned up; a Slurm job may outlive the SSH session
        left = "; the test may still be running on the cluster" if backend.name == "slurm" else ""
        click.echo(f"hpq: interrupted{left}", err=True)
        sys.exit(outcome.EXIT_INTERRUPTED)


def finish(result: TestResult, output: str) -> NoReturn:
    """Print the verdict (JSON on stdout with --output json) and exit with its code. A node program that refused
    its arguments (2) gives no verdict: its one line is on stderr already, this says so."""
    if result.exit_code == outcome.EXIT_BAD_INPUT:
        reason = result.message.split("\n", 1)[0]
        click.echo("hpq: error: " + (reason.split(": ", 1)[1] if reason.startswith(outcome.FAIL + ": ") else reason),
                   err=True)
    elif output == "json":
        echo_json(result.to_dict())
    else:
        click.echo(result.message)
    sys.exit(result.exit_code)


def _cluster_nodes_gpus(func: Any) -> Any:
    """CLUSTER [NODES] [GPUS], in that order, as every bandwidth and training test takes them."""
    for arg in reversed([click.argument("cluster", type=inputs.HYPERPOD_CLUSTER),
                         click.argument("nodes", required=False, type=inputs.TEST_NODES),
                         click.argument("gpus", required=False, type=inputs.GPUS)]):
        func = arg(func)
    return func


@click.group("test", context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.pass_context
def test(ctx: click.Context) -> None:
    """Prove a cluster works: the same tests, options and verdicts on Slurm, EKS and the rehearsal.

    CLUSTER is the HyperPod cluster's name; whether it runs Slurm or EKS is read from
    the cluster itself (DescribeCluster), so the command is the same for both. On
    Slurm the node programs run on the controller over SSH through SSM; on EKS the
    tests run as Kubernetes jobs. Options marked EKS: apply on EKS only, the SSH
    options and --extra on Slurm only. On EKS the sweep runs one nccl-tests MPIJob
    per pair of GPU nodes, pinned to the two, within --timeout.

    \b
    Examples:
      hpq test nccl my-cluster 2
      hpq test nccl my-cluster 2 8 --expect 350 --output json
      hpq test nanogpt my-cluster 2
      hpq test sweep my-cluster
      hpq test validate my-eks-cluster 4 --namespace hpq-tests
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@test.command("nccl")
@_cluster_nodes_gpus
@click.option("--expect", default=None, metavar="catalog|none|GBPS",
              help="Judge the bandwidth against the catalog (default), not at all (none), or your figure in GB/s.")
@_test_options
@_eks_options(mpirun_option)
def nccl(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """NCCL all-reduce on NODES nodes (default 2) x GPUS each (default all), judged against the catalog.

    CLUSTER is the HyperPod cluster's name (Slurm or EKS: read from the cluster).

    PASS needs the log to name EFA as NCCL's network on an EFA type and the bus
    bandwidth to reach the published figure for the type and node count.

    \b
    Examples:
      hpq test nccl my-cluster 2
      hpq test nccl my-cluster 4 8 --extra '-e 1G'
      hpq test nccl my-cluster 2 --expect 350
      hpq test nccl my-eks-cluster 2 --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:pinned
    """
    _run(NCCL, cluster, nodes, gpus, **kw)


@test.command("nccom")
@_cluster_nodes_gpus
@click.option("--expect", default=None, metavar="catalog|none|GBPS",
              help="Judge the bandwidth against the catalog (default), not at all (none), or your figure in GB/s.")
@_test_options
@_eks_options()
def nccom(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Neuron collective bandwidth (nccom-test) on Trainium: NODES nodes x GPUS Neuron devices each.

    CLUSTER is the HyperPod cluster's name (Slurm or EKS: read from the cluster).

    \b
    Examples:
      hpq test nccom my-trn-cluster 2
    """
    _run(NCCOM, cluster, nodes, gpus, **kw)


@test.command("nanogpt")
@_cluster_nodes_gpus
@_test_options
@_eks_options(program_option, program_args_option)
def nanogpt(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Multi-node nanoGPT training on NODES nodes x GPUS processes; PASS when the loss falls and ranks agree.

    CLUSTER is the HyperPod cluster's name (Slurm or EKS: read from the cluster).

    \b
    Examples:
      hpq test nanogpt my-cluster 2
      hpq test nanogpt my-cluster 2 1 --extra '--iters 100'
      hpq test nanogpt my-eks-cluster 2 --program-args '--iters 100' --fsx-claim hpq-fsx
    """
    _run(NANOGPT, cluster, nodes, gpus, **kw)


@test.command("sweep")
@_cluster_nodes_gpus
@_test_options
def sweep(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Pairwise NCCL sweep: two nodes at a time, name the slow node (NODES default: every idle node).

    CLUSTER is the HyperPod cluster's name (Slurm or EKS: read from the cluster);
    GPUS is per node (default: all).

    \b
    Examples:
      hpq test sweep my-cluster
      hpq test sweep my-cluster 8 --output json
    """
    _run(SWEEP, cluster, nodes, gpus, **kw)


@test.command("validate")
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@_test_options
@_eks_options()
def validate(cluster: str, nodes: int | None, **kw: Any) -> None:
    """Per node of NODES (default 2): every GPU (or Neuron device) and EFA device the type has is visible.

    CLUSTER is the HyperPod cluster's name (Slurm or EKS: read from the cluster).

    \b
    Examples:
      hpq test validate my-cluster 4
    """
    _run(VALIDATE, cluster, nodes, None, **kw)

