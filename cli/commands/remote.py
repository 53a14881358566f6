"""``hpq remote`` and ``hpq remote-nccl-test``: commands on the controller over SSH through SSM."""

from __future__ import annotations

import shlex
import sys

import click

from hpq.aws import ssh
from hpq.cli import inputs
from hpq.cli.commands.test import finish, run
from hpq.cli.common_options import aws_options, output_option
from hpq.cli.ssh_options import reach, ssh_options
from hpq.errors import UsageError
from hpq.validation import pick
from hpq.validation.request import MAX_TIMEOUT_S, NCCL, SWEEP, TestRequest


@click.command("remote", context_settings={"ignore_unknown_options": True})
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, callback=inputs.non_empty_command)
@aws_options(services=inputs.SERVICES_NODES)
@ssh_options
@click.option("--no-login", is_flag=True, help="Do not wrap the command in a login shell (bash -lc).")
def remote(cluster: str, command: tuple[str, ...], region: str | None, profile: str | None, group: str | None,
           node: str | None, user: str, key: str | None, known_hosts: str, port: int, host: str | None,
           proxy_command: str | None, no_login: bool) -> None:
    """Run COMMAND on CLUSTER's controller over SSH tunnelled through SSM; exit with its status.

    Output streams as it arrives. Needs the AWS CLI with the Session Manager plugin, and a key
    the node accepts (--key, or ssh-agent).

    \b
    Examples:
      hpq remote my-cluster -- sinfo
      hpq remote my-cluster -- 'srun -N 2 hostname'
      hpq remote my-cluster --group worker --node 0 -- nvidia-smi
    """
    target, _ = pick.controller_target(cluster, reach(region, profile, group, node, user, key, known_hosts, port,
                                                      host, proxy_command))
    try:
        code = ssh.run(target, ssh.remote_command(list(command), login=not no_login))
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; the remote command may still be running", err=True)
        sys.exit(130)
    sys.exit(code)


@click.command("remote-nccl-test")
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@click.argument("nodes", required=False, type=inputs.NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@aws_options(services=inputs.SERVICES_NODES)
@ssh_options
@click.option("--instance-type", "-t", default=None, type=inputs.ACCELERATED_TYPE,
              help="Judge against this type (default: the cluster's worker type).")
@click.option("--expect", default=None, metavar="catalog|none|GBPS",
              help="Judge the bandwidth against the catalog (default), not at all (none), or your own figure in "
                   "GB/s; passed to run-nccl-test too.")
@click.option("--extra", default="", type=inputs.ShellWords(),
              help="More run-nccl-test arguments, e.g. '--op all_gather -e 1G'.")
@click.option("--runner", default="run-nccl-test", show_default=True, type=inputs.ShellWords("runner", False),
              help="The remote command to run.")
@click.option("--sweep", is_flag=True,
              help="Pairwise sweep (run-nccl-test --sweep): two nodes at a time, name the slow node. NODES "
                   "defaults to every idle node.")
@output_option
def remote_nccl_test(cluster: str, nodes: int | None, gpus: int | None, region: str | None, profile: str | None,
                     group: str | None, node: str | None, user: str, key: str | None, known_hosts: str, port: int,
                     host: str | None, proxy_command: str | None, instance_type: str | None,
                     expect: str | None, extra: str, runner: str, sweep: bool, output: str) -> None:
    """Run run-nccl-test on CLUSTER's controller (NODES nodes x GPUS per node) and judge it here.

    The same as `hpq test nccl` (and `hpq test sweep` with --sweep), kept for its --runner option; the
    output streams live; the verdict uses the same parser and catalog as `hpq nccl-report`.
    With --sweep the progress streams live and the sweep's verdict (node table, evidence, the
    scontrol/sbatch commands) is printed here from the JSON the controller sends back.

    \b
    Exit 0 PASS (every check holds), 1 FAIL (a check failed, the run failed, a slow node),
    3 INCONCLUSIVE (evidence missing: no published figure for the type and node count, no
    transport line, a node the sweep could not judge), 2 bad input, 130 interrupted.

    \b
    Examples:
      hpq remote-nccl-test my-cluster 2
      hpq remote-nccl-test my-cluster 4 8 --extra '-e 1G'
      hpq remote-nccl-test my-cluster 2 --expect 350
      hpq remote-nccl-test my-cluster --sweep
      hpq remote-nccl-test my-cluster 8 --sweep --output json
    """
    if sweep and nodes is not None and nodes < 2:
        raise UsageError("--sweep measures pairs of nodes: NODES must be at least 2 (or left out: every idle node)")
    inputs.refuse_inapplicable(click.get_current_context(), {"expect": not sweep}, "with --sweep",
                               "--expect judges a single run; --sweep compares the nodes with each other")
    request = TestRequest(SWEEP if sweep else NCCL, nodes, gpus, instance_type, expect, tuple(shlex.split(extra)),
                          MAX_TIMEOUT_S)
    programs = {NCCL: shlex.split(runner), SWEEP: [*shlex.split(runner), "--sweep"]}
    backend = pick.backend_for(cluster, reach(region, profile, group, node, user, key, known_hosts, port, host,
                                              proxy_command), programs)
    echo = (lambda line: click.echo(line, err=True)) if output == "json" else click.echo
    finish(run(backend, request, echo), output)
