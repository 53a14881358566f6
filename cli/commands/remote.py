"""``hpq remote`` and ``hpq remote-nccl-test``: commands on the controller over SSH through SSM."""

from __future__ import annotations

import sys
from typing import Any

import click

from hpq.cli import inputs
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import UsageError
from hpq.validation import judges


def ssh_options(func: Any) -> Any:
    func = click.option("--proxy-command", default=None, metavar="CMD", type=inputs.ShellWords("proxy command", False),
                        help="Use this ProxyCommand instead of SSM (e.g. 'ssh -W %h:%p bastion'); %h/%p expand "
                             "to --host/--port.")(func)
    func = click.option("--host", default=None, type=inputs.HOST, help="Host name for --proxy-command (default: the SSM target).")(func)
    func = click.option("--port", default=22, show_default=True, type=inputs.PORT, help="sshd port on the node.")(func)
    func = click.option("--known-hosts", default="~/.ssh/hpq_known_hosts", show_default=True,
                        type=inputs.WritableFile("known hosts"),
                        help="Host keys, pinned on first use.")(func)
    func = click.option("--key", "key", default=None, metavar="PATH", type=inputs.InputFile(what="key"),
                        help="Private key (default: ssh-agent, then ~/.ssh/id_*).")(func)
    func = click.option("--user", default="ubuntu", show_default=True, type=inputs.USER, help="Remote user.")(func)
    func = click.option("--node", default=None, metavar="INSTANCE_ID|INDEX", type=inputs.NODE, help="Node in the group (default: first).")(func)
    func = click.option("--group", default=None, type=inputs.INSTANCE_GROUP, help="Instance group (default: the Slurm controller group).")(func)
    return func


def build_target(cluster: str | None, region: str | None, profile: str | None, group: str | None, node: str | None,
                 user: str, key: str | None, known_hosts: str, proxy_command: str | None, host: str | None,
                 port: int) -> tuple[Any, Any]:
    """(SshTarget, Cluster-or-None): the SSM target unless a ProxyCommand and host are given."""
    from hpq.aws import hyperpod as aws_hyperpod
    from hpq.aws import ssh as aws_ssh
    from hpq.aws.session import client, make_session

    if host and not proxy_command:
        raise UsageError(inputs.not_applicable(["--host"], "without --proxy-command", "hpq reaches the node through SSM"))
    cl = None
    if proxy_command and host:
        name = host
        proxy = proxy_command.replace("%h", host).replace("%p", str(port))
    else:
        session = make_session(region, profile)
        sm = client(session, "sagemaker")
        cl = aws_hyperpod.describe_cluster(sm, cluster or "")
        picked = aws_hyperpod.resolve_node(sm, cl, group, node)
        name = picked.target
        proxy = (proxy_command.replace("%h", name).replace("%p", str(port)) if proxy_command
                 else aws_hyperpod.ssh_proxy_command(name, region or session.region_name, profile, port))
    return aws_ssh.SshTarget(name, proxy, user, port, key, known_hosts, via_ssm=not proxy_command), cl


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
    from hpq.aws import ssh as aws_ssh

    target, _ = build_target(cluster, region, profile, group, node, user, key, known_hosts, proxy_command, host, port)
    try:
        code = aws_ssh.run(target, aws_ssh.remote_command(list(command), login=not no_login))
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; the remote command may still be running", err=True)
        sys.exit(130)
    sys.exit(code)


def worker_instance_type(cl: Any) -> str | None:
    """The accelerated group's type (what the test measures)."""
    from hpq.lifecycle import catalog

    for g in (cl.groups if cl else []):
        entry = catalog.CATALOG.get(g.get("InstanceType", ""))
        if entry and entry.is_accelerated:
            return entry.name
    return None


@click.command("remote-nccl-test")
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@click.argument("nodes", required=False, type=inputs.NODES)
@click.argument("gpus", required=False, type=inputs.GPUS)
@aws_options(services=inputs.SERVICES_NODES)
@ssh_options
@click.option("--instance-type", default=None, type=inputs.ACCELERATED_TYPE,
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

    The output streams live; the verdict uses the same parser and catalog as `hpq nccl-report`.
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
    import io
    import shlex

    from hpq.aws import ssh as aws_ssh
    from hpq.cli import printing as aws_report
    from hpq.errors import UsageError
    from hpq.scripts import nccl_report

    if instance_type and gpus is not None:
        from hpq.lifecycle import catalog

        have = catalog.lookup(instance_type).accelerator_count
        if gpus > have:
            raise UsageError(f"GPUS {gpus}: {instance_type} has {have} per node")
    if sweep and nodes is not None and nodes < 2:
        raise UsageError("--sweep measures pairs of nodes: NODES must be at least 2 (or left out: every idle node)")
    wanted = nccl_report.parse_expect(expect) if expect is not None else None
    inputs.refuse_inapplicable(click.get_current_context(), {"expect": not sweep}, "with --sweep",
                               "--expect judges a single run; --sweep compares the nodes with each other")
    target, cl = build_target(cluster, region, profile, group, node, user, key, known_hosts, proxy_command, host, port)
    if sweep:
        _remote_sweep(target, runner, nodes, gpus, shlex.split(extra), output)
    args = [runner] + [str(x) for x in (nodes, gpus) if x is not None] + shlex.split(extra)
    if wanted is not None:
        args += ["--expect", nccl_report.expect_label(wanted)]
    captured = io.BytesIO()
    stream = sys.stderr.buffer if output == "json" else sys.stdout.buffer
    try:
        code = aws_ssh.run(target, aws_ssh.remote_command([shlex.join(args)]), stdout=stream,
                           on_stdout=captured.write)
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; the test may still be running on the cluster", err=True)
        sys.exit(130)
    itype = instance_type or worker_instance_type(cl)
    data, exit_code, message = judges.bandwidth(captured.getvalue().decode("utf-8", "replace"), itype, code, nodes,
                                                wanted)
    if output == "json":
        aws_report.echo_json(data)
    else:
        click.echo(message)
    sys.exit(exit_code)


def _remote_sweep(target: Any, runner: str, nodes: int | None, gpus: int | None, extra: list[str],
                  output: str) -> None:
    """run-nccl-test --sweep --output json on the controller: progress on stderr live, verdict rendered here."""
    import io
    import shlex

    from hpq.aws import ssh as aws_ssh
    from hpq.cli import printing as aws_report
    from hpq.scripts import sweep as node_sweep

    args = [runner, "--sweep"] + [str(x) for x in (nodes, gpus) if x is not None] + extra + ["--output", "json"]
    captured = io.BytesIO()
    try:
        code = aws_ssh.run(target, aws_ssh.remote_command([shlex.join(args)]), stdout=captured)
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; the sweep may still be running on the cluster", err=True)
        sys.exit(130)
    doc = node_sweep.extract_json(captured.getvalue().decode("utf-8", "replace"))
    if doc is None:
        if code in (2, 130):  # the controller's run-nccl-test refused its arguments or was interrupted: no verdict
            click.echo(f"hpq: error: no sweep result came back: {runner} exited {code} (its message is above)",
                       err=True)
            sys.exit(code)
        click.echo(f"FAIL: no sweep result vs a sweep report: {runner} exited {code} (its messages are above)")
        sys.exit(1)
    doc["remote_exit_code"] = code
    if output == "json":
        aws_report.echo_json(doc)
    else:
        click.echo(node_sweep.format_report(doc))
    sys.exit(int(doc.get("exit_code", 1)))
