"""``hpq doctor CLUSTER``: every node's findings, the drift between nodes, HyperPod's view, and the fixes.

The command parses options only: the checks run through the validation interface (the ``doctor`` test,
hpq.validation.doctor), the HyperPod view, the plan and its application are hpq.validation.doctor_fix.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from hpq import user_files
from hpq.aws.session import aws_errors, client, make_session
from hpq.cli import inputs
from hpq.cli.common_options import aws_options, output_option
from hpq.cli.printing import echo_json, table
from hpq.cli.ssh_options import reach, ssh_options
from hpq.errors import UsageError
from hpq.scripts import outcome
from hpq.validation import doctor_fix, pick, publish, saved
from hpq.validation.backend import run_test
from hpq.validation.request import DOCTOR, TestRequest

DEFAULT_TIMEOUT_S = 900
DEFAULT_WAIT_S = 1800


def _rows(nodes: list[dict[str, Any]], view: dict[str, doctor_fix.NodeView] | None) -> list[list[Any]]:
    rows = []
    for n in nodes:
        hp = view.get(n["node"]) if view is not None else None
        hp_text = f"{hp.status} {hp.instance_id}" if hp else ("not listed" if view is not None else "not read")
        lines = [(f.get("severity"), f.get("kind"), f.get("action"), f.get("evidence")) for f in n["findings"]]
        if n.get("error"):
            lines.append(("-", "no answer", "-", n["error"]))
        lines += [("-", "unchecked", "-", u) for u in n.get("unchecked", [])]
        first = [n["node"], n["verdict"], hp_text, n["action"]]
        for i, (sev, kind, action, evidence) in enumerate(lines or [("", "", "", "")]):
            rows.append((first if i == 0 else ["", "", "", ""]) + [sev, kind, action, evidence])
    return rows


@click.command("doctor", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("cluster", type=inputs.HYPERPOD_CLUSTER)
@click.argument("nodes", required=False, type=inputs.TEST_NODES)
@click.option("--timeout", "timeout_s", type=inputs.TIMEOUT, default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Stop the checks after this many seconds (each node is bounded to 120 s on its own).")
@click.option("--dcgm", is_flag=True,
              help="Also run dcgmi diag -r 1 on each GPU node (seconds; nodes without DCGM say so: INCONCLUSIVE).")
@click.option("--sweep-result", "sweep_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="JSON of `hpq test sweep --output json`: its slow nodes join the findings (action reboot).")
@click.option("--fix", is_flag=True, help="Apply the plan: drain, then reboot or replace through HyperPod.")
@click.option("--yes", "-y", is_flag=True, help="With --fix: do not ask before acting.")
@click.option("--wait", "wait_s", type=inputs.TIMEOUT, default=DEFAULT_WAIT_S, show_default=True,
              help="With --fix: seconds to wait for rebooted or replaced nodes to be Running again.")
@output_option
@aws_options(services=inputs.SERVICES_NODES)
@ssh_options
def doctor(cluster: str, nodes: int | None, timeout_s: int, dcgm: bool, sweep_file: str | None, fix: bool, yes: bool, wait_s: int, output: str,
           region: str | None, profile: str | None, group: str | None, node: str | None, user: str,
           key: str | None, known_hosts: str, port: int, host: str | None, proxy_command: str | None) -> None:
    """Look inside every node: GPUs, Xid events, ECC, NVLink, PCIe, EFA, disks, /fsx, daemons, drift.

    Each finding has a severity, an action (none, drain, reboot, replace) and the line
    that shows it; HyperPod's own status of each node (ListClusterNodes) is shown beside.
    CLUSTER is the HyperPod cluster's name or ARN. On Slurm the checks run from the
    controller (srun per node); on EKS as one Kubernetes Job per node (privileged,
    host PID: the checks read the host), and the plan cordons instead of draining.
    NODES: check the first NODES nodes (default: every node).

    \b
    Exit 0 PASS (no critical finding, every node checked), 1 FAIL (a critical finding),
    3 INCONCLUSIVE (a node did not answer or could not be checked), 2 bad input, 130 interrupted.
    With --fix: 0 only when every node acted on passes the re-check.

    \b
    Examples:
      hpq doctor my-cluster
      hpq doctor my-cluster --output json
      hpq doctor my-cluster --dcgm           # with DCGM's level-1 diagnostic where installed
      hpq doctor my-cluster --fix            # show the plan, ask, act, wait, re-check
    """
    if fix and not yes and (sys.stdin is None or not sys.stdin.isatty()):
        raise UsageError("--fix acts on the cluster: without a terminal to confirm on, pass --yes")
    request = TestRequest(DOCTOR, nodes, timeout_s=timeout_s, extra=("--dcgm",) if dcgm else ())
    sweep = _read_sweep(sweep_file) if sweep_file else None  # refused before anything is reached
    where = reach(region, profile, group, node, user, key, known_hosts, port, host, proxy_command)
    echo = (lambda line: click.echo(line, err=True)) if output == "json" else click.echo
    backend = pick.backend_for(cluster, where)
    orchestrator = backend.resolve().orchestrator
    sm = None
    if not (proxy_command and host):
        sm = client(make_session(region, profile), "sagemaker")
    try:
        result = run_test(backend, request, echo)
    except KeyboardInterrupt:
        click.echo("hpq: interrupted; node checks may still be running on the cluster", err=True)
        sys.exit(outcome.EXIT_INTERRUPTED)
    note = publish.publish(result, region, profile)  # EKS: no node publishes it; to the stack's workspace
    if note:
        click.echo(note, err=True)
    view = None
    view_error = ""
    if sm is not None:
        try:
            with aws_errors(f"sagemaker:ListClusterNodes {cluster}"):
                view = doctor_fix.hyperpod_view(sm, cluster, orchestrator)
        except Exception as exc:  # the findings stand without HyperPod's view; say why it is missing
            view_error = str(exc).splitlines()[0]
    events, events_error = None, ""
    if sm is not None:
        try:
            with aws_errors(f"sagemaker:ListClusterEvents {cluster}"):
                events = doctor_fix.cluster_events(sm, cluster)
        except Exception as exc:  # e.g. a cluster not in Continuous provisioning mode: said, not fatal
            events_error = str(exc).splitlines()[0]
    nodes_data = result.data.get("nodes", [])
    exit_code = result.exit_code
    if sweep is not None:
        nodes_data = doctor_fix.merge_sweep(nodes_data, sweep)
        if sweep["slow_nodes"]:
            exit_code = outcome.EXIT_FAIL
    steps = doctor_fix.plan(nodes_data, view or {}, cluster, doctor_fix.actions_for(backend))
    judged = result.to_dict()
    if sweep is not None:
        judged.update(nodes=nodes_data, exit_code=exit_code, ok=exit_code == 0,
                      outcome=outcome.FAIL if exit_code == outcome.EXIT_FAIL else judged["outcome"],
                      sweep_slow_nodes=sweep["slow_nodes"])
    if result.exit_code != outcome.EXIT_BAD_INPUT:  # the checks' verdict (before any --fix), for hpq status
        note = saved.save_or_say(judged, region, profile)
        if note:
            click.echo(note, err=True)
    if output == "json":
        doc = dict(judged)
        doc["hyperpod"] = {k: v.__dict__ for k, v in (view or {}).items()}
        doc["hyperpod_error"] = view_error or None
        doc["events"] = events
        doc["events_error"] = events_error or None
        doc["plan"] = [s.to_dict() for s in steps]
        if not fix:
            echo_json(doc)
            sys.exit(result.exit_code)
    else:
        click.echo(result.message)
        if nodes_data:
            table(None, ["node", "verdict", "HyperPod", "action", "severity", "finding", "does", "evidence"],
                  _rows(nodes_data, view))
        if view_error:
            click.echo(f"HyperPod's view: not read ({view_error})")
        if events:
            click.echo(f"HyperPod's recent events (last {doctor_fix.EVENTS_WINDOW_S // 3600} h, newest first):")
            for e in events:
                click.echo(f"  {e['time']}  {e['level']:5} {e['instance_id'] or e['resource']:20} {e['description']}")
        elif events is not None:
            click.echo(f"HyperPod's recent events: none in the last {doctor_fix.EVENTS_WINDOW_S // 3600} h")
        elif events_error:
            click.echo(f"HyperPod's recent events: not read ({events_error})")
        for s in steps:
            click.echo(f"  {s.action:8} {s.node}: {s.command or s.error}")
    if not fix:
        sys.exit(exit_code)
    sys.exit(_fix(cluster, steps, backend, sm, request, wait_s, yes, echo, output, doc if output == "json" else None))


SWEEP_MAX_BYTES = 64 * 1024 * 1024  # a sweep's JSON of thousands of nodes is a few MB


def _read_sweep(path: str) -> dict[str, Any]:
    """The sweep's JSON document; one clear line on a file that is missing or not a sweep's."""
    # the shared reader: a FIFO or /dev/zero, a huge, non-UTF-8 or too deeply nested file is one line, never a hang
    doc = user_files.read_json(path, SWEEP_MAX_BYTES, "--sweep-result")
    doctor_fix.sweep_findings(doc)  # refuses what is not a sweep
    return doc


def _fix(cluster: str, steps: list[doctor_fix.Step], backend: Any, sm: Any, request: TestRequest, wait_s: int,
         yes: bool, echo: Any, output: str, doc: dict[str, Any] | None) -> int:
    if not steps:
        echo("nothing to fix")
        if doc is not None:
            echo_json(doc)
        return outcome.EXIT_PASS if doc is None or doc.get("ok") else int(doc.get("exit_code", outcome.EXIT_INCONCLUSIVE))
    if sm is None and any(s.action != "drain" for s in steps):
        raise UsageError("--fix with reboot or replace needs the AWS API (leave out --proxy-command/--host)")
    if not yes and not click.confirm(f"apply these {len(steps)} step(s) to {cluster}?", err=True):
        echo("nothing done")
        return outcome.EXIT_INCONCLUSIVE
    report = doctor_fix.fix(cluster, steps, backend, sm, request, wait_s, echo)
    if doc is not None:
        doc["fix"] = report
        echo_json(doc)
    else:
        echo(report["message"])
    return int(report["exit_code"])
