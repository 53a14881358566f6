"""The doctor's judge: every node's report joined into one verdict, the drift between nodes, and the fixes.

The node program (``run-node-doctor`` on Slurm: hpq.scripts.run_node_doctor, which runs
hpq.scripts.node_doctor on every node at once) brings back one entry per node; this module only reads them:

- a node whose report came back keeps node_doctor's verdict and findings (severity, action, evidence);
- a node that did not answer (busy, drained, hung, srun refused) is INCONCLUSIVE with the reason, never PASS;
- drift: each software version (node_doctor's ``fingerprint``) that differs from the majority of the nodes of
  the same instance type is a finding on that node (node_checks.drift);
- ``validate`` is the device-count subset: every GPU and EFA device the type has is visible, per node.

The cluster's verdict: FAIL when a node has a critical finding, else INCONCLUSIVE when a node did not answer
or could not be checked, else PASS (warnings are shown and do not fail, as on the node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hpq.scripts import node_checks, xid_catalog
from hpq.scripts.outcome import (
    EXIT_BAD_INPUT,
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    FAIL,
    INCONCLUSIVE,
    PASS,
    exit_code,
    headline,
)
from hpq.validation.request import TestRequest
from hpq.validation.result import RawOutcome, TestResult

PROGRAM = "run-node-doctor"
# validate: the findings and unchecked items that are about devices being there (the rest is the doctor's).
DEVICE_KINDS = ("gpu_count", "efa_count")
DEVICE_UNCHECKED = ("gpus:", "neuron:")
# The strongest action wins on a node: replacing includes rebooting, rebooting includes draining.
ACTION_RANK = {a: i for i, a in enumerate(xid_catalog.ACTIONS)}


@dataclass
class NodeResult:
    """One node as the doctor judged it."""

    node: str
    verdict: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    fingerprint: dict[str, str] = field(default_factory=dict)
    instance_type: str | None = None
    error: str = ""  # why no report came back
    state: str = ""  # the scheduler's state of the node when asked
    seconds: float | None = None

    @property
    def action(self) -> str:
        """The strongest action any finding asks for (none when nothing does)."""
        actions = [str(f.get("action", xid_catalog.ACTION_NONE)) for f in self.findings]
        return max(actions, key=lambda a: ACTION_RANK.get(a, 0), default=xid_catalog.ACTION_NONE)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict, "action": self.action, "findings": self.findings,
                "unchecked": self.unchecked, "fingerprint": self.fingerprint, "instance_type": self.instance_type,
                "error": self.error, "state": self.state, "seconds": self.seconds}


def parse_fanout(log: str) -> dict[str, Any] | None:
    """run-node-doctor's JSON document (the last stdout line that is a JSON object with ``nodes``)."""
    for line in reversed(log.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
            return doc
    return None


def node_results(doc: dict[str, Any]) -> list[NodeResult]:
    """Each entry of the fan-out as a NodeResult; a missing or malformed report is the node's INCONCLUSIVE."""
    out: list[NodeResult] = []
    for entry in doc.get("nodes") or []:
        if not isinstance(entry, dict) or not entry.get("node"):
            continue
        report = entry.get("report")
        node = str(entry["node"])
        if not isinstance(report, dict) or report.get("verdict") not in (PASS, FAIL, INCONCLUSIVE):
            out.append(NodeResult(node, INCONCLUSIVE, error=str(entry.get("error") or "no report came back"),
                                  state=str(entry.get("state") or "")))
            continue
        findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
        out.append(NodeResult(node, str(report["verdict"]), findings,
                              [str(u) for u in report.get("unchecked") or []],
                              {str(k): str(v) for k, v in (report.get("fingerprint") or {}).items()},
                              report.get("instance_type"), "", str(entry.get("state") or ""),
                              report.get("seconds")))
    return out


def add_drift(nodes: list[NodeResult]) -> None:
    """Drift findings on the nodes whose software differs from the majority of their instance type's nodes."""
    by_type: dict[str | None, dict[str, dict[str, str]]] = {}
    for n in nodes:
        if n.fingerprint:
            by_type.setdefault(n.instance_type, {})[n.node] = n.fingerprint
    for group in by_type.values():  # two nodes that differ have no majority: neither is named
        for name, found in node_checks.drift(group).items():
            node = next(n for n in nodes if n.node == name)
            node.findings += [f.to_dict() for f in found]


def devices_only(nodes: list[NodeResult]) -> None:
    """Keep what ``validate`` judges: the device counts (and a device tool that could not be read)."""
    for n in nodes:
        n.findings = [f for f in n.findings if f.get("kind") in DEVICE_KINDS]
        n.unchecked = [u for u in n.unchecked if u.startswith(DEVICE_UNCHECKED)]
        if n.error:
            n.verdict = INCONCLUSIVE
        elif any(f.get("severity") == xid_catalog.SEVERITY_CRITICAL for f in n.findings):
            n.verdict = FAIL
        else:
            n.verdict = INCONCLUSIVE if n.unchecked else PASS


def cluster_verdict(nodes: list[NodeResult]) -> str:
    if not nodes:
        return INCONCLUSIVE
    if any(n.verdict == FAIL for n in nodes):
        return FAIL
    if any(n.verdict != PASS for n in nodes):
        return INCONCLUSIVE
    return PASS


def flat_findings(nodes: list[NodeResult]) -> list[dict[str, Any]]:
    """Every finding with its node, the worst first (what the rehearsal and a script read)."""
    sev = {s: i for i, s in enumerate(xid_catalog.SEVERITIES)}
    rows = [{"node": n.node, **f} for n in nodes for f in n.findings]
    return sorted(rows, key=lambda r: (-sev.get(str(r.get("severity")), 0), r["node"], str(r.get("kind"))))


def judge(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str, cluster: str,
          devices: bool = False) -> TestResult:
    """The doctor (``devices``: validate) judged from run-node-doctor's output."""
    doc = parse_fanout(raw.log)
    if doc is None:
        code = raw.exit_code if raw.exit_code in (EXIT_BAD_INPUT, EXIT_INTERRUPTED) else EXIT_INCONCLUSIVE
        outcome = INCONCLUSIVE if code == EXIT_INCONCLUSIVE else FAIL
        why = "did not finish in time" if raw.timed_out else f"exited {raw.exit_code}"
        tail = "; ".join(raw.stderr_tail(3))
        message = headline(outcome, "no node reports", "a report from every node",
                              f"{raw.command or PROGRAM} {why}{': ' + tail if tail else ''}")
        data = {"outcome": outcome, "remote_exit_code": raw.exit_code, "nodes": [], "findings": [],
                "stderr_tail": raw.stderr_tail()}
        return TestResult(req.test, backend, cluster, outcome, code, message, instance_type, None, data)
    nodes = node_results(doc)
    if devices:
        devices_only(nodes)
    else:
        add_drift(nodes)
    outcome = cluster_verdict(nodes)
    findings = flat_findings(nodes)
    silent = [n.node for n in nodes if n.error]
    sick = sorted({f["node"] for f in findings if f.get("severity") == xid_catalog.SEVERITY_CRITICAL})
    what = "every GPU and EFA device visible" if devices else "no critical finding on any node"
    if outcome == PASS:
        reason = f"{len(nodes)} node(s) checked, {len(findings)} finding(s) below critical"
    elif outcome == FAIL:
        reason = f"critical findings on {', '.join(sick)}"
    else:
        unchecked = [n.node for n in nodes if not n.error and n.verdict != PASS]
        parts = ([f"no answer from {', '.join(silent)}"] if silent else []) + \
                ([f"checks not read on {', '.join(unchecked)}"] if unchecked else []) or ["no nodes listed"]
        reason = "; ".join(parts)
    message = headline(outcome, f"{len(nodes)} node(s)", what, reason)
    data = {"outcome": outcome, "nodes": [n.to_dict() for n in nodes], "findings": findings,
            "seconds": doc.get("seconds"), "command": raw.command, "remote_exit_code": raw.exit_code}
    return TestResult(req.test, backend, cluster, outcome, exit_code(outcome), message, instance_type,
                      len(nodes), data)
