"""Trainium metrics under neuron-monitor-prometheus.py's names: ``python3 -m hpq.scripts.neuron_metrics --every 30``.

AWS's ``neuron-monitor`` (aws-neuronx-tools, /opt/aws/neuron/bin) prints one JSON report per line every ``period``;
AWS's companion ``neuron-monitor-prometheus.py`` turns that stream into Prometheus series, but it needs the
prometheus_client package, which the node's python3 lacks (AWS Neuron docs, Neuron Monitor User Guide,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-sys-tools/neuron-monitor-user-guide.html;
aws-neuron/aws-neuron-sdk tools/neuron-sys-tools/neuron-monitor-user-guide.rst). This writer runs neuron-monitor
itself and writes the companion script's series into node_exporter's textfile directory, with its names, labels,
help texts and units, one file per report. The rules, per metric group (the script's ``process_<group>``):
- every series carries the instance labels of ``get_instance_labels`` (instance_name, instance_id, instance_type,
  availability_zone, region, subnet_id); a runtime's series add ``runtime_tag`` (``get_runtime_labels``);
- neuroncore_counters: neuroncore_utilization_ratio{neuroncore} = neuroncore_utilization / 100;
- neuron_runtime_vcpu_usage: neuron_runtime_vcpu_usage_ratio{usage_type=user|system} = vcpu_usage / 100;
- memory_used: neuron_runtime_memory_used_bytes{memory_location=host|neuron_device}, and
  neuroncore_memory_usage_<type>{neuroncore} for constants, model_code, model_shared_scratchpad, runtime_memory,
  tensors. The script leaves ``memory_location`` set to None on those, which prometheus_client writes as the
  string "None": kept, so a query written against the script matches ours;
- execution_stats: counters execution_errors_total{error_type} and execution_status_total{status_type}, which the
  script increments by each report's per-period counts; gauge execution_latency_seconds{percentile} from
  total_latency when it is not null;
- neuron_hw_counters (system): counter hardware_ecc_events_total{event_type, neuron_device_index}, incremented
  by each report's four ECC fields;
- vcpu_usage (system): system_vcpu_count = number of vCPUs in usage_data; system_vcpu_usage_ratio{usage_type}:
  user = user + nice, system = system + io_wait + irq + soft_irq, capped at 100, / 100;
- memory_info (system): system_memory_{total,used}_bytes and system_swap_{total,used}_bytes;
- instance_info (Info 'instance') and neuron_hardware_info{neuron_device_count, neuroncore_per_device_count}
  (Info 'neuron_hardware', newer script versions) = 1.
A group whose ``error`` is not empty, or a runtime whose ``error`` is not empty, is left out (one stderr line), as
the script leaves it out; a group the script would crash on (a field missing or not a number) is left out too.
Counters accumulate in this process; a report with no Neuron runtime resets them, as the script's
``clear_gauges_from_metric_objects`` does. ``hpq_neuron_metrics_up`` is 1 when the last report rendered with no
group left out; while neuron-monitor is absent, exits or goes silent the file holds ``hpq_neuron_metrics_up 0``
alone (never zeros for the device series) and neuron-monitor is started again after a delay.
Standard library only (the node's python3, 3.7+).
"""

from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpq.lifecycle import files
from hpq.scripts import metric_writer
from hpq.scripts.metric_writer import Families

PROG = "neuron_metrics"
OUTPUT_NAME = "hpq_neuron.prom"
MONITOR = "neuron-monitor"
MONITOR_PATH = "/opt/aws/neuron/bin/neuron-monitor"  # where aws-neuronx-tools installs it (the user guide)
MAX_LINE_BYTES = 8 * 1024 * 1024  # a trn2.48xlarge report (64 NeuronCores, loaded models) is well under this
UP_HELP = "1 when neuron-monitor's last report rendered with every metric group, else 0."
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage", "execution_stats")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info", "neuron_hw_counters")
NC_MEMORY_TYPES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
VCPU_AGGREGATION = (("user", ("user", "nice")), ("system", ("system", "io_wait", "irq", "soft_irq")))

Row = Tuple[str, str, str, Dict[str, str], float]  # (name, help, kind, labels, value)
Totals = Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]


class Malformed(Exception):
    """A metric group the companion script would crash on: it is left out."""


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed("%r is not a number" % (value,))
    out = float(value)
    if math.isnan(out) or math.isinf(out):
        raise Malformed("%r is not a finite number" % (value,))
    return out


def mapping(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed("%s is not an object" % what)
    return value


def index(value: Any) -> str:
    """``int(nc_idx)`` as the script labels a NeuronCore or device: "0", never "00" or "0.0"."""
    if isinstance(value, bool):
        raise Malformed("index %r" % (value,))
    try:
        return str(int(value))
    except (TypeError, ValueError):
        raise Malformed("index %r is not an integer" % (value,)) from None


def with_labels(base: Dict[str, str], **more: str) -> Dict[str, str]:
    out = dict(base)
    out.update(more)
    return out


def neuroncore_counters(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    rows = []
    for nc, nc_data in mapping(data.get("neuroncores_in_use"), "neuroncores_in_use").items():
        util = number(mapping(nc_data, "neuroncore").get("neuroncore_utilization"))
        rows.append(("neuroncore_utilization_ratio", "NeuronCore utilization ratio", "gauge",
                     with_labels(labels, neuroncore=index(nc)), util / 100.0))
    return rows


def neuron_runtime_vcpu_usage(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    usage = mapping(data.get("vcpu_usage"), "vcpu_usage")
    return [("neuron_runtime_vcpu_usage_ratio", "Runtime vCPU utilization ratio", "gauge",
             with_labels(labels, usage_type=field), number(usage.get(field)) / 100.0) for field in ("user", "system")]


def memory_used(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    used = mapping(data.get("neuron_runtime_used_bytes"), "neuron_runtime_used_bytes")
    rows = [("neuron_runtime_memory_used_bytes", "Runtime memory used bytes", "gauge",
             with_labels(labels, memory_location=where), number(used.get(where))) for where in ("host", "neuron_device")]
    per_core = mapping(mapping(used.get("usage_breakdown"), "usage_breakdown").get("neuroncore_memory_usage"),
                       "neuroncore_memory_usage")
    for kind in NC_MEMORY_TYPES:
        for nc, nc_data in per_core.items():
            rows.append(("neuroncore_memory_usage_" + kind, "NeuronCore memory utilization for " + kind, "gauge",
                         with_labels(labels, neuroncore=index(nc), memory_location="None"),
                         number(mapping(nc_data, "neuroncore").get(kind))))
    return rows


def execution_stats(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    rows = []
    for error_type, count in mapping(data.get("error_summary"), "error_summary").items():
        rows.append(("execution_errors_total", "Execution errors total", "counter",
                     with_labels(labels, error_type=str(error_type)), number(count)))
    for status, count in mapping(data.get("execution_summary"), "execution_summary").items():
        rows.append(("execution_status_total", "Execution status total", "counter",
                     with_labels(labels, status_type=str(status)), number(count)))
    total = mapping(data.get("latency_stats"), "latency_stats").get("total_latency")
    if total is not None:
        for percentile, seconds in mapping(total, "total_latency").items():
            rows.append(("execution_latency_seconds", "Execution latency in seconds", "gauge",
                         with_labels(labels, percentile=str(percentile)), number(seconds)))
    return rows


def neuron_hw_counters(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    devices = data.get("neuron_devices")
    if not isinstance(devices, list):
        raise Malformed("neuron_devices is not a list")
    rows = []
    for device in devices:
        device = mapping(device, "neuron device")
        dev = index(device.get("neuron_device_index"))
        for field in ECC_FIELDS:
            rows.append(("hardware_ecc_events_total", "Hardware ecc events total", "counter",
                         with_labels(labels, event_type=field, neuron_device_index=dev), number(device.get(field))))
    return rows


def vcpu_usage(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    rows: List[Row] = [("system_vcpu_count", "System vCPU count", "gauge", dict(labels),
                        float(len(mapping(data.get("usage_data"), "usage_data"))))]
    average = mapping(data.get("average_usage"), "average_usage")
    for usage_type, fields in VCPU_AGGREGATION:
        total = min(sum(number(average.get(f)) for f in fields), 100.0)
        rows.append(("system_vcpu_usage_ratio", "System CPU utilization ratio", "gauge",
                     with_labels(labels, usage_type=usage_type), total / 100.0))
    return rows


def memory_info(data: Dict[str, Any], labels: Dict[str, str]) -> List[Row]:
    rows = []
    for source, prefix in (("memory", "system_memory"), ("swap", "system_swap")):
        for stat in ("total_bytes", "used_bytes"):
            rows.append(("%s_%s" % (prefix, stat), "System %s %s bytes" % (source, stat), "gauge", dict(labels),
                         number(data.get("%s_%s" % (source, stat)))))
    return rows


HANDLERS = {"neuroncore_counters": neuroncore_counters, "neuron_runtime_vcpu_usage": neuron_runtime_vcpu_usage,
            "memory_used": memory_used, "execution_stats": execution_stats, "neuron_hw_counters": neuron_hw_counters,
            "vcpu_usage": vcpu_usage, "memory_info": memory_info}


def instance_labels(info: Any) -> Dict[str, str]:
    """``get_instance_labels``; a field neuron-monitor leaves out (older instances: region, name) reads ""."""
    info = info if isinstance(info, dict) else {}

    def field(key: str) -> str:
        value = info.get(key)
        return "" if value is None or isinstance(value, (dict, list)) else str(value)

    return {"instance_name": field("instance_name"), "instance_id": field("instance_id"),
            "instance_type": field("instance_type"), "availability_zone": field("instance_availability_zone"),
            "region": field("instance_region"), "subnet_id": field("subnet_id")}


def _groups(fam: Families, totals: Totals, report: Any, labels: Dict[str, str], where: str) -> bool:
    """Each known metric group of ``report`` into ``fam``; False when one was left out."""
    ok = True
    for group, data in (report.items() if isinstance(report, dict) else ()):
        handler = HANDLERS.get(group)
        if handler is None:
            continue
        error = data.get("error", "") if isinstance(data, dict) else "not an object"
        if error != "":
            print("%s: %s%s: %s" % (PROG, group, where, str(error)[:300]), file=sys.stderr)
            ok = False
            continue
        try:
            rows = handler(data, labels)
        except Malformed as exc:
            print("%s: %s%s left out: %s" % (PROG, group, where, str(exc)[:300]), file=sys.stderr)
            ok = False
            continue
        for name, help_text, kind, row_labels, value in rows:
            if kind == "counter":  # the script's Counter.inc(per-report value): a running total
                key = (name, tuple(sorted(row_labels.items())))
                value = totals[key] = totals.get(key, 0.0) + value
            fam.add(name, help_text, row_labels, value, kind=kind)
    return ok


def render(report: Any, totals: Optional[Totals] = None) -> Tuple[str, bool]:
    """(exposition text, whether every group rendered) for one neuron-monitor report; ``totals`` carries the
    counters from report to report (a fresh dict when None). Never raises."""
    totals = {} if totals is None else totals
    fam = Families()
    if not isinstance(report, dict):
        print("%s: the report is not a JSON object" % PROG, file=sys.stderr)
        fam.add("hpq_neuron_metrics_up", UP_HELP, {}, 0.0)
        return fam.render(), False
    ok = True
    base = instance_labels(report.get("instance_info"))
    runtimes = report.get("neuron_runtime_data")
    if not runtimes:
        totals.clear()  # the script's clear_gauges_from_metric_objects when no runtime runs
    elif not isinstance(runtimes, list):
        print("%s: neuron_runtime_data is not a list" % PROG, file=sys.stderr)
        ok = False
        runtimes = []
    for runtime in runtimes or ():
        if not isinstance(runtime, dict):
            ok = False
            continue
        tag = runtime.get("neuron_runtime_tag")
        tag = "" if tag is None or isinstance(tag, (dict, list)) else str(tag)
        if runtime.get("error", "") != "":
            print("%s: runtime %s: %s" % (PROG, tag, str(runtime.get("error"))[:300]), file=sys.stderr)
            ok = False
            continue
        ok = _groups(fam, totals, runtime.get("report"), with_labels(base, runtime_tag=tag),
                     " of runtime %s" % tag) and ok
    if report.get("system_data") is not None:
        ok = _groups(fam, totals, report.get("system_data"), base, "") and ok
    fam.add("instance_info", "EC2 instance information", base, 1.0)
    hardware = report.get("neuron_hardware_info")
    if isinstance(hardware, dict) and hardware.get("error", "") == "":
        try:
            counts = {"neuron_device_count": index(hardware.get("neuron_device_count")),
                      "neuroncore_per_device_count": index(hardware.get("neuroncore_per_device_count"))}
            fam.add("neuron_hardware_info", "Neuron Hardware Information", with_labels(base, **counts), 1.0)
        except Malformed as exc:
            print("%s: neuron_hardware_info left out: %s" % (PROG, exc), file=sys.stderr)
            ok = False
    elif hardware is not None:
        print("%s: neuron_hardware_info: %s" % (PROG, str(hardware.get("error") if isinstance(hardware, dict)
                                                          else "not an object")[:300]), file=sys.stderr)
        ok = False
    fam.add("hpq_neuron_metrics_up", UP_HELP, {}, 1.0 if ok else 0.0)
    return fam.render(), ok


def down_text() -> str:
    fam = Families()
    fam.add("hpq_neuron_metrics_up", UP_HELP, {}, 0.0)
    return fam.render()


def monitor_config(period_s: float) -> Dict[str, Any]:
    """The user guide's configuration: every metric group the companion script reads, for every runtime."""
    return {"period": "%ds" % int(period_s),
            "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
            "system_metrics": [{"type": g} for g in SYSTEM_GROUPS]}


def find_monitor() -> Optional[str]:
    found = shutil.which(MONITOR)
    if found:
        return found
    return MONITOR_PATH if os.access(MONITOR_PATH, os.X_OK) else None


class Lines(object):
    """Lines of a pipe, each at most ``cap`` bytes (a longer one is dropped whole, one stderr line), or None when
    nothing came within the timeout; EOFError at the end of the stream."""

    def __init__(self, fd: int, cap: int = MAX_LINE_BYTES) -> None:
        self.fd, self.cap = fd, cap
        self.buf = b""
        self.skipping = False
        self.sel = selectors.DefaultSelector()
        self.sel.register(fd, selectors.EVENT_READ)

    def too_long(self) -> None:
        print("%s: a neuron-monitor line is longer than %d bytes: skipped" % (PROG, self.cap), file=sys.stderr)

    def next(self, timeout_s: float) -> Optional[bytes]:
        deadline = time.monotonic() + timeout_s
        while True:
            cut = self.buf.find(b"\n")
            if cut >= 0:
                line, self.buf = self.buf[:cut], self.buf[cut + 1:]
                if self.skipping:  # the end of a line already reported
                    self.skipping = False
                    continue
                if len(line) > self.cap:
                    self.too_long()
                    continue
                return line
            if len(self.buf) > self.cap:
                if not self.skipping:
                    self.too_long()
                self.skipping, self.buf = True, b""
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk


def parse_line(line: bytes) -> Optional[Any]:
    """The JSON of one line, or None (and one stderr line) when it is not JSON."""
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        print("%s: a neuron-monitor line is not JSON (%s): skipped" % (PROG, str(exc)[:200]), file=sys.stderr)
        return None


class Writer(object):
    def __init__(self, textfile_dir: str, to_stdout: bool) -> None:
        self.textfile_dir, self.to_stdout = textfile_dir, to_stdout

    def write(self, text: str) -> None:
        if self.to_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            metric_writer.write_text(self.textfile_dir, OUTPUT_NAME, text)


def stop(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_monitor(period_s: float, config_path: str, writer: Writer, once: bool) -> Optional[bool]:
    """Start neuron-monitor and write each report it prints. None when it is absent, ends or goes silent for
    three periods (the caller then writes up 0); with ``once``, whether its first report rendered whole."""
    binary = find_monitor()
    if binary is None:
        print("%s: %s is not installed (aws-neuronx-tools): no Neuron series" % (PROG, MONITOR), file=sys.stderr)
        return None
    try:
        proc = subprocess.Popen([binary, "-c", config_path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    except OSError as exc:
        print("%s: %s: %s" % (PROG, binary, exc), file=sys.stderr)
        return None
    totals: Totals = {}
    assert proc.stdout is not None
    lines = Lines(proc.stdout.fileno())
    try:
        while True:
            try:
                line = lines.next(3 * period_s + 5)
            except EOFError:
                print("%s: %s exited %s" % (PROG, MONITOR, proc.wait()), file=sys.stderr)
                return None
            if line is None:
                print("%s: %s printed nothing for %ds" % (PROG, MONITOR, 3 * period_s + 5), file=sys.stderr)
                return None
            report = parse_line(line)
            if report is None:
                continue
            text, ok = render(report, totals)
            writer.write(text)
            if once:
                return ok
    finally:
        stop(proc)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 0 a report written whole, 1 neuron-monitor absent/failed or a group left out (once only), 2 bad input
    or an unwritable file (one line, never a traceback)."""
    args = metric_writer.arguments(
        PROG, "Write neuron-monitor's reports as neuron-monitor-prometheus.py's Prometheus metrics.", argv,
        every_help="neuron-monitor's period in seconds (0: write one report and exit)",
        stdout_help="print one report's rendering instead of writing the file")
    once = args.stdout or not args.every
    period = args.every or 5.0
    writer = Writer(args.textfile_dir, args.stdout)
    folder = tempfile.mkdtemp(prefix="hpq-neuron-monitor-")
    config_path = os.path.join(folder, "monitor.conf")
    try:
        with open(config_path, "w") as f:
            json.dump(monitor_config(period), f)
        while True:
            ok = run_monitor(period, config_path, writer, once)
            if ok is None:  # no report (any more): the device series go, never a healthy-looking 0
                writer.write(down_text())
            if once:
                return 0 if ok else 1
            time.sleep(period)
    except files.WriteRefused as exc:
        print("%s: %s" % (PROG, exc), file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # systemd's stop: the finally clauses stop the child
    sys.exit(main())
