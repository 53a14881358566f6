"""``hpq test nccl|nanogpt|nccom|sweep|validate CLUSTER``: one test family for every backend.

The command only parses options into a :class:`hpq.validation.request.TestRequest` and a
:class:`hpq.validation.pick.Reach`; which backend runs it (Slurm over SSH, EKS jobs, the rehearsal) is
decided from the cluster itself, and the verdict comes from the test's one judge (hpq.validation).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

import click

from hpq.cli import inputs
from hpq.cli.commands.remote import ssh_options
from hpq.cli.common_options import aws_options, output_option
from hpq.cli.printing import echo_json
from hpq.scripts import outcome as oc
from hpq.validation import pick
from hpq.validation.backend import run_test
from hpq.validation.request import NANOGPT, NCCL, NCCOM, SWEEP, VALIDATE, TestRequest

EXIT_HELP = """\b
Exit 0 PASS (every check holds on positive evidence), 1 FAIL, 3 INCONCLUSIVE
(evidence missing: the message says what to run), 2 bad input, 130 interrupted."""


def _test_options(func: Any) -> Any:
    for opt in reversed([
        click.argument("cluster", type=inputs.HYPERPOD_CLUSTER),
        click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
                     help="Judge against this type (default: the cluster's accelerated worker type)."),
        click.option("--extra", default="", type=inputs.ShellWords(),
                     help="More arguments for the node program, split as a shell would."),
        click.option("--timeout", "timeout_s", type=inputs.TIMEOUT, default=3600, show_default=True,
                     help="Stop the test after this many seconds (a stopped test is a FAIL)."),
        click.option("--nccl-debug", default=None, metavar="LEVEL", type=inputs.NCCL_DEBUG,
                     help="NCCL_DEBUG for the ranks: VERSION, WARN, INFO, TRACE or 'off'."),
        output_option,
        aws_options(services=inputs.SERVICES_NODES),
        ssh_options,
    ]):
        func = opt(func)
    return func


def _run(test: str, cluster: str, nodes: int | None, gpus: int | None, *, instance_type: str | None, extra: str,
         timeout_s: int, nccl_debug: str | None, output: str, region: str | None, profile: str | None,
         group: str | None, node: str | None, user: str, key: str | None, known_hosts: str, port: int,
         host: str | None, proxy_command: str | None, expect: str | None = None) -> None:
    request = TestRequest(test, nodes, gpus, instance_type, expect, tuple(shlex.split(extra)), timeout_s, nccl_debug)
    reach = pick.Reach(region, profile, user, key, known_hosts, port, proxy_command, host, group, node)
    echo = (lambda line: click.echo(line, err=True)) if output == "json" else click.echo
    backend = pick.slurm_over_ssm(cluster, reach)
    try:
        result = run_test(backend, request, echo)
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; the test may still be running on the cluster", err=True)
        sys.exit(oc.EXIT_INTERRUPTED)
    if output == "json":
        echo_json(result.to_dict())
    else:
        click.echo(result.message)
    sys.exit(result.exit_code)


@click.group("test", context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.pass_context
def test(ctx: click.Context) -> None:
    """Prove a cluster works: the same tests, options and verdicts on Slurm, EKS and the rehearsal.

    CLUSTER is the HyperPod cluster's name; whether it runs Slurm or EKS is read from
    the cluster itself (DescribeCluster), so the command is the same for both.

    \b
    Examples:
      hpq test nccl my-cluster 2
      hpq test nccl my-cluster 2 8 --expect 350 --output json
      hpq test nanogpt my-cluster 2
      hpq test sweep my-cluster
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@test.command("nccl")
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@click.option("--expect", default=None, metavar="catalog|none|GBPS",
              help="Judge the bandwidth against the catalog (default), not at all (none), or your figure in GB/s.")
@_test_options
def nccl(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """NCCL all-reduce on NODES nodes (default 2) x GPUS each (default all), judged against the catalog.

    PASS needs the log to name EFA as NCCL's network on an EFA type and the bus
    bandwidth to reach the published figure for the type and node count.

    \b
    Examples:
      hpq test nccl my-cluster 2
      hpq test nccl my-cluster 4 8 --extra '-e 1G'
      hpq test nccl my-cluster 2 --expect 350
    """
    _run(NCCL, cluster, nodes, gpus, **kw)


@test.command("nccom")
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@click.option("--expect", default=None, metavar="catalog|none|GBPS",
              help="Judge the bandwidth against the catalog (default), not at all (none), or your figure in GB/s.")
@_test_options
def nccom(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Neuron collective bandwidth (nccom-test) on Trainium: NODES nodes x GPUS Neuron devices each.

    \b
    Examples:
      hpq test nccom my-trn-cluster 2
    """
    _run(NCCOM, cluster, nodes, gpus, **kw)


@test.command("nanogpt")
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@_test_options
def nanogpt(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Multi-node nanoGPT training on NODES nodes; PASS when the loss falls and every rank agrees.

    \b
    Examples:
      hpq test nanogpt my-cluster 2
      hpq test nanogpt my-cluster 2 1 --extra '--iters 100'
    """
    _run(NANOGPT, cluster, nodes, gpus, **kw)


@test.command("sweep")
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@_test_options
def sweep(cluster: str, nodes: int | None, gpus: int | None, **kw: Any) -> None:
    """Pairwise NCCL sweep: two nodes at a time, name the slow node (NODES default: every idle node).

    \b
    Examples:
      hpq test sweep my-cluster
      hpq test sweep my-cluster 8 --output json
    """
    _run(SWEEP, cluster, nodes, gpus, **kw)


@test.command("validate")
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@_test_options
def validate(cluster: str, nodes: int | None, **kw: Any) -> None:
    """Per node: every GPU (or Neuron device) and EFA device the type has is visible.

    \b
    Examples:
      hpq test validate my-cluster 4
    """
    _run(VALIDATE, cluster, nodes, None, **kw)

