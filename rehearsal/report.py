"""The rehearsal's summary: a table for people, one JSON object for machines, and the failure block."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from hpq.rehearsal import throttle
from hpq.scripts.outcome import fmt_number


def emit(result: dict[str, Any], output: str, out: TextIO | None = None, err: TextIO | None = None) -> None:
    out = out or sys.stdout
    err = err or sys.stderr
    if result.get("failure"):
        try:
            err.write(failure_text(result["failure"]))
        except OSError:
            pass
    if output == "json":
        out.write(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    else:
        out.write(table(result))
    out.flush()
    err.flush()


def failure_text(f: dict[str, Any]) -> str:
    where = f"stage {f.get('stage')}"
    if f.get("node"):
        where += f", node {f['node']}"
    if f.get("step"):
        where += f", step {f['step']}"
    lines = [f"hpq: error: rehearsal failed at {where}: {f.get('cause')}"]
    if f.get("log"):
        lines.append(f"log: {f['log']}")
    for ln in f.get("last_lines") or []:
        lines.append(f"  | {ln}")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))


def table(r: dict[str, Any]) -> str:
    rows = [["node", "role", "address", "instance", "lifecycle s", "ready s", "steps (s)"]]
    states = r.get("slurm_nodes") or {}
    for n in r.get("nodes") or []:
        steps = " ".join(f"{s['name']}={_fmt(s['seconds'])}{'' if s['status'] in ('done', 'skipped') else '!' + s['status']}"
                         for s in n.get("steps") or [])
        rows.append([n["name"], n["role"], f"{n['hostname']} {n['ip']}", n["instance_id"],
                     _fmt(n.get("lifecycle_seconds")), _fmt(n.get("slurm_ready_seconds")), steps or "-"])
        if n.get("slurm_node") and states:
            rows[-1][1] += f" ({states.get(n['slurm_node'], '?')})"
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = [f"hpq rehearse {r.get('variant')} (run {r.get('run_id')}, {r.get('worker_instance_type')}): "
             f"{str(r.get('result', '?')).upper()} in {r.get('seconds')}s"]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
    stages = r.get("stages") or {}
    if stages:
        lines.append("stages: " + ", ".join(f"{k} {v}s" for k, v in stages.items()))
    if r.get("variant", "").startswith("slurm"):
        lines.append(f"slurm: {r.get('slurm_nodes_idle', 0)} node(s) idle")
    nccl = r.get("nccl")
    if nccl:
        lines.append(f"nccl: {(nccl.get('verdict') or {}).get('message', '-')}")
    nano = r.get("nanogpt")
    if nano:
        m = nano.get("metrics") or {}
        extra = (f" (loss {fmt_number(m.get('first_loss'))} -> {fmt_number(m.get('final_loss'))})"
                 if m.get("final_loss") is not None else "")
        lines.append(f"nanogpt: {'PASS' if nano.get('ok') else 'FAIL'}{extra}")
    sweep = r.get("sweep")
    if sweep:
        scores = sweep.get("scores") or {}
        if scores:
            lines.append("sweep scores (GB/s): " + ", ".join(
                f"{n} {throttle.gbps(v)}{' SLOW' if n in (sweep.get('slow_nodes') or []) else ''}" for n, v in scores.items()))
        for t in sweep.get("throttled") or []:
            lines.append(f"sweep throttle: {t['node']} ({t['slurm_node']}) at {t['rate']}")
        lines.append(f"sweep: {(sweep.get('check') or {}).get('message', '-')}")
    prolog = r.get("prolog")
    if prolog:
        lines.append("prolog: " + ("as expected" if prolog.get("ok") else "NOT as expected") + ": " + ", ".join(
            f"{w['node']} {'ran the job' if w.get('job_ran') else 'refused the job'} ({w.get('state')})"
            for w in prolog.get("workers") or []))
    observed = r.get("observe")
    if observed:
        lines.append(f"observe: {observed.get('verdict', '-')}: {observed.get('reason', '-')}")
        for n in observed.get("nodes") or []:
            missing = ", ".join(sorted(n.get("missing") or {})) or "none missing"
            lines.append(f"  {n.get('node')}: {len(n.get('present') or [])}/{len(n.get('expected') or [])} series "
                         f"({missing})")
    if r.get("manifests"):
        lines.append(f"manifests: {'valid' if r['manifests'].get('ok') else 'INVALID'} "
                     f"({', '.join(i['test'] for i in r['manifests'].get('manifests', []))}); no API server ran")
    if r.get("logs"):
        lines.append(f"logs: {r['logs']}")
    return "\n".join(lines) + "\n"
