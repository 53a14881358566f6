"""hpq's own results as Prometheus metrics: ``python3 -m hpq.scripts.result_metrics --cluster NAME FILE...``.

Reads the JSON results that run-nccl-test, run-nccom-test, the pairwise sweep (``run-nccl-test --sweep``),
run-nanogpt and the node doctor (``node_doctor --output json``) write, and writes them as one file in the
Prometheus text exposition format into node_exporter's textfile-collector directory, so each result becomes
a series labelled by cluster, node, instance type and test, and a regression shows as a trend.

The node programs call ``publish`` as they finish (run-nccl-test and its sweep, run-nccom-test, run-nanogpt,
node_doctor, which run-node-doctor starts on every node): when the textfile directory exists on the node
(the lifecycle's observability step makes it, only with ``EnableObservability=true``: lifecycle/observability.py)
their result goes there with no command to run by hand; when it does not, nothing is written. A failure to
write is one note on stderr and never changes the program's output or exit code.

One file per test kind and node, ``hpq_<kind>.<node>.prom``: a run replaces the series of its own kind on
the nodes it ran on, never another test's, nor the same test's on other nodes (a file per kind alone would
drop nodes A and B's latest nccl result when a later run covers C and D only).

Why a textfile: node_exporter's textfile collector reads every ``*.prom`` file of the directories given
with ``--collector.textfile.directory`` (repeatable since node_exporter 1.9.0, CHANGELOG #3135;
collector/textfile.go at v1.9.1, the version AWS's HyperPod reference runs); AWS's reference feeds its
NCCL Inspector metrics in the same way (awslabs/awsome-distributed-ai@95b939cd,
1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/install_node_exporter.sh:
``/var/lib/node_exporter/nccl_inspector``). hpq's
directory is its sibling ``/var/lib/node_exporter/hpq``. The file is replaced atomically (a temporary name
not ending in ``.prom``, then rename), so the collector never reads half a file.

Verdicts: a result's own verdict (PASS/FAIL/INCONCLUSIVE as a string, or the ``{"ok", "message"}`` object
run-nccl-test writes) is carried as ``hpq_result_verdict{verdict=...}`` 1 with the other two at 0; a result
that states no verdict is INCONCLUSIVE, never PASS.

Exit codes: 0 written, 2 bad input (one line on stderr; the existing file is left as it was).
Standard library only: it runs on cluster nodes with the system python3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from hpq.lifecycle import files
from hpq.scripts import nodeinfo

TEXTFILE_DIR = "/var/lib/node_exporter/hpq"
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")
MAX_RESULT_BYTES = 64 << 20

# The tests a result can come from (the ``test`` label).
NCCL, NCCOM, SWEEP, NANOGPT, DOCTOR = "nccl", "nccom", "nccl_sweep", "nanogpt", "doctor"

# Every metric this module writes: name -> (type, help, extra label names beyond the common four).
METRICS: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "hpq_result_verdict": (
        "gauge",
        "1 for the verdict of hpq's latest result, 0 for the other verdicts.",
        ("verdict",),
    ),
    "hpq_result_timestamp_seconds": ("gauge", "When hpq's latest result was written (Unix time).", ()),
    "hpq_nccl_busbw_peak_gbps": ("gauge", "Peak bus bandwidth of the latest collective test in GB/s.", ()),
    "hpq_nccl_busbw_avg_gbps": ("gauge", "Average bus bandwidth of the latest collective test in GB/s.", ()),
    "hpq_nccl_busbw_expected_gbps": (
        "gauge",
        "The bus bandwidth hpq's catalog expects for the run in GB/s.",
        (),
    ),
    "hpq_nccl_wrong_elements": ("gauge", "Wrong elements the latest collective test reported.", ()),
    "hpq_sweep_node_score_gbps": ("gauge", "The node's score in the latest pairwise sweep in GB/s.", ()),
    "hpq_sweep_node_slow": ("gauge", "1 when the latest pairwise sweep named the node slow, else 0.", ()),
    "hpq_sweep_median_gbps": ("gauge", "The cluster median of the latest pairwise sweep in GB/s.", ()),
    "hpq_nanogpt_tokens_per_second": ("gauge", "Training throughput of the latest nanoGPT run.", ()),
    "hpq_nanogpt_mfu": ("gauge", "Model FLOPs utilization of the latest nanoGPT run (0..1).", ()),
    "hpq_doctor_findings": (
        "gauge",
        "Findings of the latest node doctor report, by severity.",
        ("severity",),
    ),
    "hpq_doctor_unchecked": ("gauge", "Checks the latest node doctor report could not run.", ()),
}
COMMON_LABELS = ("cluster", "node", "instance_type", "test")

Labels = Tuple[Tuple[str, str], ...]


class ResultError(ValueError):
    """A file that is not an hpq result this module knows."""


def escape_label_value(value: str) -> str:
    """Label value escaping of the text exposition format: backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escaping of the text exposition format: backslash and line feed."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def kind_of(doc: Dict) -> str:
    """Which test wrote ``doc``, from its shape (scripts/node_doctor.py, sweep.py, run_nccl_test.py...)."""
    command = str(doc.get("command") or "")
    if "findings" in doc and "fingerprint" in doc:
        return DOCTOR
    if "pairs" in doc and "slow_nodes" in doc:
        return SWEEP
    if command.startswith("run-nanogpt"):
        return NANOGPT
    if command.startswith("run-nccom-test"):
        return NCCOM
    if command.startswith("run-nccl-test") or "peak_busbw_gbps" in doc:
        return NCCL
    raise ResultError("not an hpq result (no doctor findings, sweep pairs or test command)")


def verdict_of(doc: Dict) -> str:
    """PASS/FAIL/INCONCLUSIVE as the result states it; INCONCLUSIVE when it states none.

    The verdicts' JSON carries ``outcome`` at the top and inside ``verdict`` (scripts/verdicts.py); older
    results only a ``verdict`` object with ``ok`` and a message whose first word is the outcome.
    """
    v = doc.get("verdict")
    for stated in (doc.get("outcome"), v.get("outcome") if isinstance(v, dict) else None):
        if isinstance(stated, str) and stated.upper() in VERDICTS:
            return stated.upper()
    if isinstance(v, dict):
        inner = v.get("verdict")
        if isinstance(inner, str) and inner.upper() in VERDICTS:
            return inner.upper()
        message = str(v.get("message") or "")
        for name in VERDICTS:
            if message.startswith(name):
                return name
        if v.get("ok") is True:
            return "PASS"
        if v.get("ok") is False:
            return "FAIL"
        return "INCONCLUSIVE"
    if isinstance(v, str) and v.upper() in VERDICTS:
        return v.upper()
    return "INCONCLUSIVE"


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _hosts(doc: Dict, local: str) -> List[str]:
    """The nodes a result ran on: the hosts it names, each as its node where the result maps it (EKS:
    ``host_nodes``, pod -> Kubernetes node); a result naming no host but mapping pods: their nodes."""
    nodes = doc.get("host_nodes") if isinstance(doc.get("host_nodes"), dict) else {}
    hosts = [str(h) for h in (doc.get("hosts") or doc.get("rank_hosts") or []) if h]
    named = [str(nodes.get(h) or h) for h in hosts] or [str(n) for n in nodes.values() if n]
    return sorted(set(named)) or [local]


class Samples:
    """Series by (name, labels); a later result for the same series replaces an earlier one."""

    def __init__(self) -> None:
        self.series: Dict[Tuple[str, Labels], float] = {}

    def add(self, name: str, labels: Dict[str, str], value: Optional[float]) -> None:
        if value is None:
            return  # missing is missing: no series rather than a made-up value
        extra = METRICS[name][2]
        if set(labels) != set(COMMON_LABELS) | set(extra):
            raise AssertionError("labels of %s: %s" % (name, sorted(labels)))
        self.series[(name, tuple(sorted(labels.items())))] = value

    def add_verdict(self, base: Dict[str, str], verdict: str) -> None:
        for name in VERDICTS:
            self.add("hpq_result_verdict", dict(base, verdict=name), 1.0 if name == verdict else 0.0)

    def files(self) -> Dict[Tuple[str, str], "Samples"]:
        """The series split by (test, node): one textfile each (see the module docstring)."""
        out: Dict[Tuple[str, str], Samples] = {}
        for (name, labels), value in self.series.items():
            lab = dict(labels)
            out.setdefault((lab["test"], lab["node"]), Samples()).series[(name, labels)] = value
        return out

    def render(self) -> str:
        """The text exposition format: HELP and TYPE once per family, then its samples."""
        out = []
        for name in sorted(METRICS):
            rows = sorted((labels, v) for (n, labels), v in self.series.items() if n == name)
            if not rows:
                continue
            mtype, text, _ = METRICS[name]
            out.append("# HELP %s %s" % (name, escape_help(text)))
            out.append("# TYPE %s %s" % (name, mtype))
            for labels, value in rows:
                body = ",".join('%s="%s"' % (k, escape_label_value(v)) for k, v in labels)
                out.append("%s{%s} %s" % (name, body, format_value(value)))
        return "\n".join(out) + "\n" if out else ""


def file_name(kind: str, node: str) -> str:
    """``hpq_<kind>.<node>.prom``; characters outside ``[A-Za-z0-9_.-]`` of the node name become ``_``."""
    return "hpq_%s.%s.prom" % (kind, re.sub(r"[^A-Za-z0-9_.-]", "_", node).lstrip(".") or "_")


def add_result(samples: Samples, doc: Dict, cluster: str, local: str, mtime: float, kind: Optional[str] = None
               ) -> str:
    """Add one result's series; its test kind (``kind`` when the caller knows it, else read from the shape)."""
    kind = kind or kind_of(doc)
    verdict = doc.get("verdict") if isinstance(doc.get("verdict"), dict) else {}
    itype = str(doc.get("instance_type") or verdict.get("instance_type") or "unknown")

    def base(node: str) -> Dict[str, str]:
        return {"cluster": cluster, "node": node, "instance_type": itype, "test": kind}

    if kind == SWEEP:
        per_node = {"ok": "PASS", "SLOW": "FAIL", "unmeasured": "INCONCLUSIVE"}
        for row in doc.get("nodes") or []:
            if not isinstance(row, dict) or not row.get("name"):
                continue
            b = base(str(row["name"]))
            samples.add_verdict(b, per_node.get(str(row.get("verdict")), "INCONCLUSIVE"))
            samples.add("hpq_result_timestamp_seconds", b, mtime)
            samples.add("hpq_sweep_node_score_gbps", b, _number(row.get("score_gbps")))
            if row.get("verdict") in ("ok", "SLOW"):
                samples.add("hpq_sweep_node_slow", b, 1.0 if row.get("verdict") == "SLOW" else 0.0)
            samples.add("hpq_sweep_median_gbps", b, _number(doc.get("median_gbps")))
        return kind
    nodes = [local] if kind == DOCTOR else _hosts(doc, local)
    for node in nodes:
        b = base(node)
        samples.add_verdict(b, verdict_of(doc))
        samples.add("hpq_result_timestamp_seconds", b, mtime)
        if kind in (NCCL, NCCOM):
            samples.add("hpq_nccl_busbw_peak_gbps", b, _number(doc.get("peak_busbw_gbps")))
            samples.add("hpq_nccl_busbw_avg_gbps", b, _number(doc.get("avg_busbw_gbps")))
            samples.add("hpq_nccl_busbw_expected_gbps", b, _number(verdict.get("expected_busbw_gbps")))
            samples.add("hpq_nccl_wrong_elements", b, _number(doc.get("wrong_total")))
        elif kind == NANOGPT:
            metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {}
            samples.add("hpq_nanogpt_tokens_per_second", b, _number(metrics.get("tokens_per_s")))
            samples.add("hpq_nanogpt_mfu", b, _number(metrics.get("mfu")))
        elif kind == DOCTOR:
            counts: Dict[str, int] = {}
            for f in doc.get("findings") or []:
                if isinstance(f, dict):
                    sev = str(f.get("severity") or "unknown")
                    counts[sev] = counts.get(sev, 0) + 1
            for sev, n in sorted(counts.items()):
                samples.add("hpq_doctor_findings", dict(b, severity=sev), float(n))
            samples.add("hpq_doctor_unchecked", b, float(len(doc.get("unchecked") or [])))
    return kind


def load(path: str) -> Dict:
    """One result file as a dict; ResultError with the reason otherwise."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_RESULT_BYTES + 1)
    except OSError as exc:
        raise ResultError("%s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > MAX_RESULT_BYTES:
        raise ResultError("%s: larger than %d MiB" % (path, MAX_RESULT_BYTES >> 20))
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ResultError("%s: not JSON (%s)" % (path, exc)) from None
    if not isinstance(doc, dict):
        raise ResultError("%s: not a JSON object" % path)
    return doc


def build(paths: Sequence[str], cluster: str, local: str) -> str:
    """The exposition text for ``paths`` (all in one); a newer file's series replace an older file's."""
    return collect(paths, cluster, local).render()


def collect(paths: Sequence[str], cluster: str, local: str) -> Samples:
    """The series of ``paths``; a newer file's series replace an older file's."""
    samples = Samples()
    loaded = []
    for path in paths:
        doc = load(path)
        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            raise ResultError("%s: %s" % (path, exc.strerror or exc)) from None
        loaded.append((mtime, path, doc))
    for mtime, path, doc in sorted(loaded, key=lambda t: (t[0], t[1])):
        try:
            add_result(samples, doc, cluster, local, mtime)
        except ResultError as exc:
            raise ResultError("%s: %s" % (path, exc)) from None
    return samples


def write_files(samples: Samples, directory: str) -> List[str]:
    """One file per (test, node), each replaced atomically (files.write_file: a temporary name starting
    with ``.hpq-``, not ending in ``.prom``, renamed over the target: node_exporter's textfile collector reads
    only ``*.prom``, https://github.com/prometheus/node_exporter#textfile-collector). The paths written;
    files.WriteRefused after trying every file when any could not be written (the others are written)."""
    written: List[str] = []
    refused: List[str] = []
    for (kind, node), part in sorted(samples.files().items()):
        path = os.path.join(directory, file_name(kind, node))
        try:
            files.write_file(path, part.render(), mode=0o644)
        except files.WriteRefused as exc:
            refused.append(str(exc))
            continue
        written.append(path)
    if refused:
        more = " (and %d more file(s) not written)" % (len(refused) - 1) if len(refused) > 1 else ""
        raise files.WriteRefused(refused[0] + more)
    return written


def node_textfile_dir() -> str:
    """TEXTFILE_DIR under the node root (``HPQ_ROOT``, the lifecycle's and nodeinfo's root convention)."""
    return nodeinfo.on_node(TEXTFILE_DIR)


def node_identity() -> Tuple[str, str]:
    """(cluster, node) as this node knows them: the lifecycle's node-info file (scripts/nodeinfo.py),
    else Slurm's name for the node, else the host name; the cluster ``unknown`` when nothing says."""
    info = nodeinfo.read_node_info()
    cluster = str(info.get("cluster_name") or "unknown")
    node = str(info.get("slurm_node_name") or os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    return cluster, node


def publish(doc: Dict, prog: str, directory: Optional[str] = None) -> List[str]:
    """Write a node program's finished result ``doc`` into the textfile directory, if that exists.

    Never raises and never prints to stdout: the metrics are a by-product, so any failure (a read-only
    directory, a result this module cannot read) is one note on stderr and the program goes on as before.
    The paths written ([] when none)."""
    directory = directory or node_textfile_dir()
    if not os.path.isdir(directory):
        return []  # observability is off on this node (or the lifecycle has not run): nothing to feed
    try:
        cluster, local = node_identity()
        if kind_of(doc) == DOCTOR and doc.get("node"):
            local = str(doc["node"])  # the node the doctor examined, as it names itself
        samples = Samples()
        add_result(samples, doc, cluster, local, time.time())
        return write_files(samples, directory)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the test's own result stands
        print("%s: note: result metrics not written to %s: %s" % (prog, directory, exc), file=sys.stderr)
        return []


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m hpq.scripts.result_metrics",
        description="Write hpq's JSON results as Prometheus metrics for node_exporter.",
    )
    ap.add_argument(
        "results", nargs="+", help="result JSON files (run-nccl-test, sweep, run-nanogpt, doctor)"
    )
    ap.add_argument("--cluster", required=True, help="the cluster name (the 'cluster' label)")
    ap.add_argument("--node", default=None, help="this node's name (default: the host name)")
    ap.add_argument(
        "--textfile-dir",
        default=TEXTFILE_DIR,
        help="node_exporter's textfile-collector directory (default %(default)s)",
    )
    ap.add_argument("--stdout", action="store_true", help="print the metrics instead of writing the file")
    args = ap.parse_args(argv)
    if not args.cluster.strip():
        ap.error("--cluster must not be empty")
    local = args.node or socket.gethostname()
    try:
        samples = collect(args.results, args.cluster, local)
    except ResultError as exc:
        print("result_metrics: %s" % exc, file=sys.stderr)
        return 2
    if args.stdout:
        sys.stdout.write(samples.render())
        return 0
    try:
        written = write_files(samples, args.textfile_dir)
    except files.WriteRefused as exc:
        print("result_metrics: %s" % exc, file=sys.stderr)
        return 2
    print("result_metrics: %d series in %d file(s) in %s" % (len(samples.series), len(written), args.textfile_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
