"""``hpq rehearse``: the whole cluster on this machine, offline; ``shell`` and ``down`` for a kept one."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import click

from hpq.cli import inputs
from hpq.cli.common_options import deprecated_spelling
from hpq.errors import OperationFailed, UsageError
from hpq.rehearsal import faults, prereqs, report, state, throttle, validate
from hpq.scripts import run_nanogpt, run_nccl_test
from hpq.vocab import SLURM, orchestrator_of

RUN_EXAMPLES = """
\b
Examples:
  sudo hpq rehearse                                  slurm-gpu, controller + 2 workers, all checks
  sudo hpq rehearse slurm-gpu --nodes 3 --login    a login node too
  sudo hpq rehearse --output json > rehearsal.json   one JSON object on stdout
  sudo hpq rehearse --keep && sudo hpq rehearse shell worker-1
  sudo hpq rehearse --nodes 4 --sweep --throttle 2=30mbit   the sweep must name worker-3
  sudo hpq rehearse --without-fsx                    a cluster whose FSx is gone: the no-FSx path
  sudo hpq rehearse --observability                  metrics from every node to an AMP stand-in, dashboards
  sudo hpq rehearse down                             remove a kept rehearsal
  sudo hpq rehearse eks-gpu                          EKS nodes' lifecycle + manifests (no API server)
"""


class DefaultToRun(click.Group):
    """``hpq rehearse [VARIANT] [OPTIONS]`` runs one; ``shell`` and ``down`` are subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


GROUP_HELP = """Rehearse a deploy on this machine, offline: AWS emulated, every node real.

`hpq rehearse [VARIANT] [OPTIONS]` deploys VARIANT to an embedded moto server with hpq's own
deploy code, boots each HyperPod node in its own network/mount/UTS namespaces with IMDSv2,
runs the deployed lifecycle (OnCreate) on every node, waits for Slurm, and runs run-nccl-test
and run-nanogpt over SSH on the controller, and with --sweep the pairwise sweep, optionally
with a worker's link throttled on purpose (`hpq rehearse run --help` lists the options).
Needs Linux, root, and the Debian packages slurmctld slurmd slurm-client munge
openssh-server. See docs/rehearse.md.
""" + RUN_EXAMPLES


@click.group("rehearse", cls=DefaultToRun, help=GROUP_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def rehearse() -> None:
    pass


def node_names(variant: str, workers: int, login: bool) -> list[str]:
    """The names a rehearsal gives its nodes (rehearsal/plan.add_nodes)."""
    names_ = ["controller"] if orchestrator_of(variant) == SLURM else []
    if login:
        names_.append("login-1")
    return names_ + [f"worker-{i}" for i in range(1, workers + 1)]


def _env_pairs(values: tuple[str, ...], known_nodes: list[str]) -> dict[str, dict[str, str]]:
    """``[NODE:]NAME=VALUE`` -> {node or "": {NAME: VALUE}}; "" applies to every node."""
    out: dict[str, dict[str, str]] = {}
    for v in values:
        key, sep, value = v.partition("=")
        node, colon, name = key.rpartition(":")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or (colon and not node):
            raise UsageError(f"--node-env {v!r}: expected [NODE:]NAME=VALUE (NAME: ASCII letters, digits and '_')")
        if any(not ch.isprintable() for ch in value):
            raise UsageError(f"--node-env {v!r}: the value has a control character (a newline would split the "
                             "node's environment file)")
        if node and node not in known_nodes:
            raise UsageError(f"--node-env {v!r}: no node {node!r}; nodes: {', '.join(known_nodes)}")
        out.setdefault(node, {})[name] = value
    return out


def _list_faults(ctx: click.Context, param: Any, value: bool) -> None:
    """``--list-faults``: the kinds ``--fault`` injects (rehearsal/faults.py), then exit."""
    if value and not ctx.resilient_parsing:
        click.echo(faults.describe())
        ctx.exit(0)


@rehearse.command("run", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("variant", required=False, default="slurm-gpu", metavar="[VARIANT]", type=inputs.VARIANT)
@deprecated_spelling("--workers", canonical="workers", new_flag="-n/--nodes", type=inputs.Count(1, 16, "worker nodes"))
@click.option("--nodes", "-n", "workers", default=2, show_default=True, type=inputs.Count(1, 16, "worker nodes"), help="Worker nodes.")
@click.option("--instance-type", "-t", default=None, metavar="TYPE", type=inputs.ACCELERATED_TYPE,
              help="Worker instance type (default: the variant's type with the lowest bandwidth expectation, "
                   "ml.g5.xlarge for GPU variants; see docs/rehearse.md).")
@click.option("--login", is_flag=True, help="Add a login node (Slurm variants).")
@click.option("--keep", is_flag=True, help="Leave the nodes running; enter them with `hpq rehearse shell`.")
@click.option("--node-env", "node_env", multiple=True, metavar="[NODE:]NAME=VALUE",
              help="Extra environment for OnCreate on every node (or on NODE only), e.g. an HPQ_* lifecycle "
                   "setting (repeatable).")
@click.option("--nccl-args", default=None, metavar="ARGS", type=inputs.ShellWords(),
              help="run-nccl-test arguments after NODES (default: '-e 16M -n 5 -w 1', sized for 2 cores).")
@click.option("--nanogpt-args", default=None, metavar="ARGS", type=inputs.ShellWords(),
              help="run-nanogpt arguments after NODES --model tiny (default: '--iters 20 --batch-size 4 "
                   "--ckpt-every 10 --log-every 5').")
@click.option("--without-fsx", is_flag=True,
              help="Delete the deployed FSx filesystem before the nodes boot, as if it had been deleted outside "
                   "CloudFormation: every node runs the lifecycle's no-FSx path (Slurm variants).")
@click.option("--no-validate", is_flag=True,
              help="Skip the SSH check, run-nccl-test and run-nanogpt (stop once Slurm is up, or go on to --sweep).")
@click.option("--sweep", is_flag=True,
              help="Then run the pairwise sweep over SSH on the controller (run-nccl-test --sweep --output json, "
                   "pairs one at a time: the nodes share this machine's CPUs); the JSON gets a `sweep` object. "
                   "It must name exactly the --throttle'd workers (none without --throttle).")
@click.option("--throttle", "throttles", multiple=True, metavar="INDEX=RATE", type=inputs.Text("--throttle"),
              help="With --sweep: before it runs, limit worker INDEX's link to RATE with tc (tbf) inside its "
                   "namespace. INDEX counts the workers from 0 in the order of the `nodes` list (0 is worker-1; "
                   "the controller and a login node are not counted); RATE as tc writes it, e.g. 30mbit "
                   "(repeatable, at most (workers-1)/2 of them, at least 3 workers).")
@click.option("--sweep-args", default=None, metavar="ARGS", type=inputs.ShellWords(),
              help="run-nccl-test --sweep arguments after NODES (default: '--pairs-at-once 1 -n 20 -w 1 "
                   "--pair-timeout 60').")
@click.option("--lifecycle-timeout", default=900.0, show_default=True, type=inputs.Seconds(1, 86400), metavar="S",
              help="Seconds every node's OnCreate may take.")
@click.option("--fault", "fault_specs", multiple=True, metavar="WORKER:KIND", type=inputs.Text("--fault"),
              help="Make a worker look sick to the doctor, e.g. worker-2:xid79 (repeatable; --list-faults).")
@click.option("--list-faults", is_flag=True, is_eager=True, expose_value=False, callback=_list_faults,
              help="Print the fault kinds and exit.")
@click.option("--doctor", is_flag=True, help="Run the doctor's node checks after Slurm (always with --fault).")
@click.option("--prolog", is_flag=True,
              help="Deploy with EnableNodeProlog=true; after Slurm is up inject the --fault's, then run one job step "
                   "on each worker under the real slurmd: a worker with a critical fault must refuse it and be "
                   "drained with hpq's reason, the others must run it (replaces the doctor stage; docs/rehearse.md).")
@click.option("--observability", is_flag=True,
              help="Deploy with EnableObservability=true against an AMP stand-in (a real Prometheus behind a SigV4 "
                   "check): every node's exporters and agent, then hpq observe's series check and every dashboard "
                   "panel; the JSON gets an `observe` object (Slurm variants; docs/rehearse.md).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table: a summary; json: one JSON object on stdout.")
def run_cmd(variant: str, workers: int, instance_type: str | None, login: bool, keep: bool, node_env: tuple[str, ...],
            nccl_args: str | None, nanogpt_args: str | None, without_fsx: bool, no_validate: bool, sweep: bool, throttles: tuple[str, ...],
            sweep_args: str | None, lifecycle_timeout: float, fault_specs: tuple[str, ...], doctor: bool,
            prolog: bool, observability: bool, output: str) -> None:
    """Rehearse VARIANT (default slurm-gpu): deploy, every node's lifecycle, Slurm, validation.

    Progress goes to stderr; the summary (or with --output json one JSON object) to stdout.
    Exit 0: every check passed (with --sweep: the sweep named exactly the throttled workers,
    none without --throttle); 1: a check failed (the node, step, cause and log are named);
    2: bad usage or a missing prerequisite. Everything it creates is removed at the end,
    also on failure and Ctrl-C, unless --keep.

    \b
    Examples:
      sudo hpq rehearse run slurm-gpu --nodes 3 --login
      sudo hpq rehearse run eks-gpu --output json
      sudo hpq rehearse run slurm-gpu --nodes 4 --sweep --throttle 2=30mbit
    """
    ctx = click.get_current_context()
    inputs.refuse_inapplicable(ctx, {"login": orchestrator_of(variant) == SLURM}, f"to {variant}",
                               "EKS clusters have no login group")
    inputs.refuse_inapplicable(ctx, {"without_fsx": orchestrator_of(variant) == SLURM}, f"to {variant}",
                               "it rehearses a Slurm cluster without FSx; EKS pods reach FSx through the CSI "
                               "driver, which no rehearsal runs")
    inputs.refuse_inapplicable(ctx, {"throttles": sweep}, "without --sweep",
                               "--throttle slows a worker's link for the pairwise sweep")
    inputs.refuse_inapplicable(ctx, {"sweep_args": sweep}, "without --sweep")
    throttle = _sweep_options(variant, workers, sweep, throttles, sweep_args, nccl_args)
    if instance_type:  # inputs.VARIANT and inputs.ACCELERATED_TYPE have checked both names already
        from hpq.cfn.variants import VARIANTS

        if instance_type not in VARIANTS[variant].worker_types():
            raise UsageError(f"--instance-type {instance_type} is not a {VARIANTS[variant].accelerator_label} type "
                             f"for {variant}")
    injected = faults.parse(fault_specs)
    inputs.refuse_inapplicable(ctx, {"fault_specs": variant.startswith("slurm"), "doctor": variant.startswith("slurm")},
                               f"to {variant}", "the doctor runs through Slurm in the rehearsal")
    inputs.refuse_inapplicable(ctx, {"prolog": orchestrator_of(variant) == SLURM}, f"to {variant}",
                               "the node prolog is Slurm's")
    inputs.refuse_inapplicable(ctx, {"observability": orchestrator_of(variant) == SLURM}, f"to {variant}",
                               "on EKS the HyperPod observability add-on needs a Kubernetes API server, which no "
                               "rehearsal runs")
    if observability:
        from hpq.rehearsal.stages.observe import DEBIAN_BINARIES

        absent = [b for b in DEBIAN_BINARIES.values() if not os.access(b, os.X_OK)]
        if absent:
            raise UsageError("--observability needs Debian's Prometheus and node_exporter (missing "
                             f"{', '.join(absent)}): apt-get install -y prometheus prometheus-node-exporter")
    if injected:
        from hpq.rehearsal.run import default_worker_type

        faults.check_applicable(injected, workers, instance_type or default_worker_type(variant, workers))
    env = _env_pairs(node_env, node_names(variant, workers, login))
    _check_node_arguments(workers, instance_type, nccl_args, nanogpt_args, sweep_args if sweep else None)
    prereqs.check(variant, validate=not no_validate or sweep)
    from hpq.rehearsal.run import (
        DEFAULT_NANOGPT_ARGS,
        DEFAULT_NCCL_ARGS,
        DEFAULT_SWEEP_ARGS,
        Options,
        Rehearsal,
    )

    opts = Options(variant=variant, workers=workers, instance_type=instance_type, login=login, keep=keep,
                   node_env=env, nccl_args=DEFAULT_NCCL_ARGS if nccl_args is None else nccl_args,
                   nanogpt_args=DEFAULT_NANOGPT_ARGS if nanogpt_args is None else nanogpt_args,
                   validate=not no_validate, without_fsx=without_fsx, lifecycle_timeout=lifecycle_timeout, sweep=sweep,
                   sweep_args=DEFAULT_SWEEP_ARGS if sweep_args is None else sweep_args, throttle=throttle,
                   faults=injected, doctor=doctor, observability=observability,
                   prolog=prolog)
    result, code = Rehearsal(opts).execute()
    report.emit(result, output)
    sys.exit(code)


def _check_node_arguments(workers: int, instance_type: str | None, nccl_args: str | None,
                          nanogpt_args: str | None, sweep_args: str | None) -> None:
    """Parse what the rehearsal will pass to run-nccl-test and run-nanogpt with their own parsers, now.

    Why: a word the node command refuses was found only after the cluster was built (minutes); the
    command lines are built exactly as the rehearsal builds them (hpq.rehearsal.validate) and parsed
    by hpq.scripts' parse_args, the code the nodes run.
    """
    import contextlib
    import io
    import shlex

    from hpq.rehearsal.run import DEFAULT_NANOGPT_ARGS, DEFAULT_NCCL_ARGS
    itype = instance_type or "ml.g5.xlarge"  # only decides whether GPUS_PER_NODE 1 is added
    checks = [("--nccl-args", validate.nccl_command(workers, itype, DEFAULT_NCCL_ARGS if nccl_args is None
                                                    else nccl_args), run_nccl_test.parse_args),
              ("--nanogpt-args", validate.nanogpt_command(workers, itype, DEFAULT_NANOGPT_ARGS if nanogpt_args is None
                                                          else nanogpt_args), run_nanogpt.parse_args)]
    if sweep_args is not None:
        checks.append(("--sweep-args", validate.sweep_command(max(workers, 2), itype, sweep_args, 60),
                       run_nccl_test.parse_args))
    for option, line, parse in checks:
        words = shlex.split(line)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
                parse(words[1:])
        except SystemExit:
            detail = " ".join(said.getvalue().split()) or "it only prints help"
            detail = detail.removeprefix(f"{words[0]}: error: ").removesuffix(" (see --help)")
            raise UsageError(f"{option}: {words[0]} refuses it: {detail}") from None


def _sweep_options(variant: str, workers: int, sweep: bool, throttles: tuple[str, ...], sweep_args: str | None,
                   nccl_args: str | None) -> dict[int, str]:
    """Check --sweep, --throttle, --sweep-args (and --expect in --nccl-args) before anything is created."""
    import shlex

    try:
        words = shlex.split(nccl_args or "") + shlex.split(sweep_args or "")
    except ValueError as exc:
        raise UsageError(f"--nccl-args/--sweep-args: {exc}") from None
    if any(w == "--expect" or w.startswith("--expect=") for w in words):
        raise UsageError("--expect: a rehearsal reports the bridge's bandwidth without judging it (it always "
                         "passes --expect none to run-nccl-test)")
    if not sweep:  # --throttle and --sweep-args without --sweep: refused by the caller
        return {}
    if orchestrator_of(variant) != SLURM:
        raise UsageError(f"--sweep runs run-nccl-test --sweep through Slurm; {variant} has no Slurm")
    if workers < 2:
        raise UsageError("--sweep needs at least 2 workers (pairs of nodes)")
    return throttle.parse(throttles, workers)


@rehearse.command("shell", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("node", required=False)
@click.option("--run", "run_id", default=None, type=inputs.Text("run id"),
              help="Which kept rehearsal (default: the only one).")
def shell_cmd(node: str | None, run_id: str | None) -> None:
    """Open a root shell on NODE of a kept rehearsal (default: the controller).

    NODE is a name from the summary (controller, worker-1, login-1), a hostname or an IP.

    \b
    Examples:
      sudo hpq rehearse shell
      sudo hpq rehearse shell worker-2
    """
    from hpq.rehearsal import run

    st = _pick_state(run_id)
    try:
        argv = run.shell_command(st, node)
    except KeyError:
        raise UsageError(f"no node {node!r} in rehearsal {st.run_id}; nodes: "
                         f"{', '.join(n.name for n in st.nodes)}") from None
    os.execvp(argv[0], argv)


@rehearse.command("down", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--run", "run_id", default=None, type=inputs.Text("run id"),
              help="Which rehearsal (default: every one whose hpq has exited).")
def down_cmd(run_id: str | None) -> None:
    """Remove a kept (or abandoned) rehearsal: processes, mounts, namespaces, links, temp dirs.

    Returns once every process of its nodes has exited and left the process table and each
    namespace, link, mount and directory is checked gone ("removed"); exit 1 names what is
    still there after the deadline. A state file hpq cannot trust is named and left alone (exit 2).

    \b
    Examples:
      sudo hpq rehearse down
      sudo hpq rehearse down --run 3fa9c1
    """
    bad: list[str] = []
    states = state.all_states(bad)
    if run_id:
        states = [s for s in states if s.run_id == run_id]
        bad = [b for b in bad if f"/{run_id}.json" in b]
        if not states and not bad:
            raise UsageError(f"no rehearsal {run_id!r} recorded in {state.STATE_DIR}")
    if not states and not bad:
        click.echo("no rehearsal to remove")
        return
    problems: list[str] = []
    for st in states:
        if state.owner_alive(st):
            click.echo(f"rehearsal {st.run_id} is still running (pid {st.pid}): stop it with Ctrl-C", err=True)
            continue
        left = state.teardown(st, keep_logs=True)
        problems += left
        click.echo(f"rehearsal {st.run_id}: " + ("removed" if not left else "left behind: " + "; ".join(left)))
    if problems:
        raise OperationFailed("teardown incomplete")
    if bad:
        raise UsageError(bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))


def _pick_state(run_id: str | None) -> Any:
    bad: list[str] = []
    states = [s for s in state.all_states(bad) if s.keep or not state.owner_alive(s)]
    if run_id:
        states = [s for s in states if s.run_id == run_id]
        bad = [b for b in bad if f"/{run_id}.json" in b]
    if not states:
        raise UsageError(bad[0] if bad else "no kept rehearsal: run `hpq rehearse --keep` first")
    if len(states) > 1:
        raise UsageError("several kept rehearsals: pick one with --run " + " / ".join(s.run_id for s in states))
    return states[0]
