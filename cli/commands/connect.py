"""``hpq connect``: an SSM session on a HyperPod node with the right target name."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys

import click

from hpq.aws import hyperpod
from hpq.aws.session import client, make_session
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import OperationFailed


@click.command("connect")
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@aws_options(services=inputs.SERVICES_NODES)
@click.option("--group", default=None, type=inputs.INSTANCE_GROUP,
              help="Instance group (default: the controller group on Slurm clusters).")
@click.option("--node", default=None, metavar="INSTANCE_ID|INDEX", type=inputs.NODE,
              help="Instance id, or 0-based index within the group (default: the first node).")
@click.option("--print", "print_only", is_flag=True, help="Print the SSM target and the command; do not run it.")
@output_option
def connect(cluster: str, region: str | None, profile: str | None, group: str | None, node: str | None,
            print_only: bool, output: str) -> None:
    """Open an SSM session on a node of HyperPod CLUSTER (name or ARN).

    HyperPod nodes are SSM targets named sagemaker-cluster:<cluster-id>_<group>-<instance-id>;
    this resolves them (through every page of list-cluster-nodes) and runs
    `aws ssm start-session` (needs the AWS CLI and the Session Manager plugin).

    \b
    Examples:
      hpq connect my-cluster                       # the Slurm controller
      hpq connect my-cluster --group worker --node 3
      hpq connect my-cluster --node i-0ad12c4e86af71ce0 --print
    """
    session = make_session(region, profile)
    sm = client(session, "sagemaker")
    cl = hyperpod.describe_cluster(sm, cluster)
    picked = hyperpod.resolve_node(sm, cl, group, node)
    cmd = hyperpod.ssm_command(picked.target, region or session.region_name, profile)
    if print_only:
        if output == "json":
            printing.echo_json({"cluster": cl.name, "cluster_id": cl.cluster_id, "group": picked.group,
                                "instance_id": picked.instance_id, "target": picked.target, "command": cmd})
        else:
            click.echo(picked.target)
            click.echo(shlex.join(cmd))
        return
    for tool, how in (("aws", "install the AWS CLI v2"),
                      ("session-manager-plugin", "install the Session Manager plugin for the AWS CLI")):
        if not shutil.which(tool):
            raise OperationFailed(f"`{tool}` not found on PATH: {how} (or use --print)")
    click.echo(f"connecting to {picked.target}", err=True)
    sys.exit(run_session(cmd))


def run_session(cmd: list[str]) -> int:
    """Run the session, ignoring Ctrl-C here: in an SSM shell it is meant for the remote command,
    and the AWS CLI forwards it. (subprocess.call would kill the session on the KeyboardInterrupt.)"""
    proc = subprocess.Popen(cmd)  # spawned before SIG_IGN, which the child would otherwise inherit
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
