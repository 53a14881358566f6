"""scripts/neuron_metrics.py: neuron-monitor's reports as the series of AWS's neuron-monitor-prometheus.py.

Ground truth is AWS's, not our output:
- data/neuron_monitor_report.json: the Neuron Monitor User Guide's JSON samples (aws-neuron/aws-neuron-sdk@
  81ce03ae261e12925e53437a0f690478e6366155 tools/neuron-sys-tools/neuron-monitor-user-guide.rst; data/README.md);
- the expected series are derived here from that JSON by the companion script's rules, function by function
  (/opt/aws/neuron/bin/neuron-monitor-prometheus.py: process_neuroncore_counters, process_memory_used,
  process_execution_stats, process_neuron_hw_counters, process_vcpu_usage, process_memory_info,
  process_instance_info, process_neuron_hardware_info, process_data's clear_gauges_from_metric_objects);
- OTEL_SCRAPE: lines of a real scrape of that script on a trn1n.32xlarge, held by
  open-telemetry/opentelemetry-collector-contrib@8e29fa0c45efeaa8f099b367246b906afbe1d545
  receiver/awscontainerinsightreceiver/internal/neuron/neuron_monitor_scraper_test.go: our label names must be its.
Every rule has a broken twin: a group or runtime with an error, a group missing, a field not a number, a line that
is not JSON or too long, neuron-monitor absent, exiting, or silent.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpq.lifecycle import bundle
from hpq.scripts import neuron_metrics
from tests.support import CHECKOUT

DATA = Path(CHECKOUT) / "tests/observability/data"
REPORT = json.loads((DATA / "neuron_monitor_report.json").read_text())
NAMES = {
    line.strip()
    for line in (DATA / "exporters/neuron_monitor.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
INSTANCE = {"instance_name": "My_Instance", "instance_id": "i-0011223344556677a", "instance_type": "trn2n.48xlarge",
            "availability_zone": "us-west-2b", "region": "us-west-2", "subnet_id": "subnet-112233ee"}
RUNTIME = dict(INSTANCE, runtime_tag="my_app_1")
OTEL_SCRAPE = """\
execution_errors_created{availability_zone="us-east-1c",error_type="generic",instance_id="i-09db9b55e0095612f",instance_name="",instance_type="trn1n.32xlarge",region="us-east-1",runtime_tag="367",subnet_id="subnet-06a7754948e8a000f"} 1.7083389404380567e+09
neuron_runtime_memory_used_bytes{availability_zone="us-east-1c",instance_id="i-09db9b55e0095612f",instance_name="",instance_type="trn1n.32xlarge",memory_location="host",region="us-east-1",runtime_tag="367",subnet_id="subnet-06a7754948e8a000f"} 9.043968e+06
neuroncore_utilization_ratio{availability_zone="us-east-1c",instance_id="i-09db9b55e0095612f",instance_name="",instance_type="trn1n.32xlarge",neuroncore="0",region="us-east-1",runtime_tag="367",subnet_id="subnet-06a7754948e8a000f"} 0.1
system_memory_total_bytes{availability_zone="us-east-1c",instance_id="i-09db9b55e0095612f",instance_name="",instance_type="trn1n.32xlarge",region="us-east-1",subnet_id="subnet-06a7754948e8a000f"} 5.32523487232e+011
hardware_ecc_events_total{availability_zone="us-east-1c",event_type="sram_ecc_uncorrected",instance_id="i-09db9b55e0095612f",instance_name="",instance_type="trn1n.32xlarge",neuron_device_index="7",region="us-east-1",subnet_id="subnet-06a7754948e8a000f"} 864.0
"""


def samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value} through Prometheus's own Python parser."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def key(name: str, **labels: str):
    return (name, frozenset(labels.items()))


def expected_from_the_guide(report: dict) -> dict:
    """The companion script's series for ``report``, rule by rule (its function names in the comments)."""
    out = {}
    rt = report["neuron_runtime_data"][0]["report"]
    for nc, d in rt["neuroncore_counters"]["neuroncores_in_use"].items():  # process_neuroncore_counters
        out[key("neuroncore_utilization_ratio", neuroncore=str(int(nc)), **RUNTIME)] = d["neuroncore_utilization"] / 100
    for f in ("user", "system"):  # process_neuron_runtime_vcpu_usage
        out[key("neuron_runtime_vcpu_usage_ratio", usage_type=f, **RUNTIME)] = (
            rt["neuron_runtime_vcpu_usage"]["vcpu_usage"][f] / 100)
    used = rt["memory_used"]["neuron_runtime_used_bytes"]  # process_memory_used
    for where in ("host", "neuron_device"):
        out[key("neuron_runtime_memory_used_bytes", memory_location=where, **RUNTIME)] = used[where]
    for nc, d in used["usage_breakdown"]["neuroncore_memory_usage"].items():
        for kind in ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"):
            out[key("neuroncore_memory_usage_" + kind, neuroncore=nc, memory_location="None", **RUNTIME)] = d[kind]
    stats = rt["execution_stats"]  # process_execution_stats
    for t, n in stats["error_summary"].items():
        out[key("execution_errors_total", error_type=t, **RUNTIME)] = n
    for t, n in stats["execution_summary"].items():
        out[key("execution_status_total", status_type=t, **RUNTIME)] = n
    for p, s in stats["latency_stats"]["total_latency"].items():
        out[key("execution_latency_seconds", percentile=p, **RUNTIME)] = s
    sysd = report["system_data"]
    for dev in sysd["neuron_hw_counters"]["neuron_devices"]:  # process_neuron_hw_counters
        for f in ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"):
            out[key("hardware_ecc_events_total", event_type=f, neuron_device_index=str(dev["neuron_device_index"]),
                    **INSTANCE)] = dev[f]
    avg = sysd["vcpu_usage"]["average_usage"]  # process_vcpu_usage
    out[key("system_vcpu_count", **INSTANCE)] = len(sysd["vcpu_usage"]["usage_data"])
    out[key("system_vcpu_usage_ratio", usage_type="user", **INSTANCE)] = min(avg["user"] + avg["nice"], 100) / 100
    out[key("system_vcpu_usage_ratio", usage_type="system", **INSTANCE)] = min(
        avg["system"] + avg["io_wait"] + avg["irq"] + avg["soft_irq"], 100) / 100
    mem = sysd["memory_info"]  # process_memory_info
    for src, prefix in (("memory", "system_memory"), ("swap", "system_swap")):
        for stat in ("total_bytes", "used_bytes"):
            out[key(f"{prefix}_{stat}", **INSTANCE)] = mem[f"{src}_{stat}"]
    out[key("instance_info", **INSTANCE)] = 1  # process_instance_info (Info 'instance')
    hw = report["neuron_hardware_info"]  # process_neuron_hardware_info (Info 'neuron_hardware')
    out[key("neuron_hardware_info", neuron_device_count=str(hw["neuron_device_count"]),
            neuroncore_per_device_count=str(hw["neuroncore_per_device_count"]), **INSTANCE)] = 1
    out[key("hpq_neuron_metrics_up")] = 1
    return out


def test_the_guides_report_renders_the_companion_scripts_series():
    text, ok = neuron_metrics.render(copy.deepcopy(REPORT))
    got = samples(text)
    assert ok
    want = expected_from_the_guide(REPORT)
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k
    # the guide's values, spelled out once, so a rule and its expectation cannot drift together
    assert got[key("neuroncore_utilization_ratio", neuroncore="1", **RUNTIME)] == pytest.approx(0.4202)
    assert got[key("system_vcpu_usage_ratio", usage_type="system", **INSTANCE)] == pytest.approx(0.2287)
    assert got[key("execution_status_total", status_type="completed", **RUNTIME)] == 123
    types = {fam.name: fam.type for fam in text_string_to_metric_families(text)}
    assert types["execution_errors"] == types["hardware_ecc_events"] == types["execution_status"] == "counter"
    assert types["neuroncore_utilization_ratio"] == "gauge"


def test_label_names_are_those_of_a_real_scrape_of_the_script():
    ours = {}
    for (name, labels) in samples(neuron_metrics.render(copy.deepcopy(REPORT))[0]):
        ours.setdefault(name, set()).add(frozenset(k for k, _ in labels))
    for fam in text_string_to_metric_families(OTEL_SCRAPE):
        for s in fam.samples:
            if s.name.endswith("_created"):  # prometheus_client's counter creation time: not a series we need
                continue
            assert ours[s.name] == {frozenset(s.labels)}, s.name


def test_every_name_is_the_scripts_and_every_name_the_dashboard_and_alerts_use_is_written():
    got = {name for name, _ in samples(neuron_metrics.render(copy.deepcopy(REPORT))[0])}
    assert {n for n in got if not n.startswith("hpq_")} <= NAMES
    used = set()
    for path in (Path(CHECKOUT) / "observability/dashboards/neuron.json",
                 *sorted((Path(CHECKOUT) / "observability/alerts").glob("*.yaml"))):
        text = path.read_text()
        used |= {n for n in NAMES if f"{n}{{" in text or f"{n}[" in text or f"({n})" in text}
    assert {"neuroncore_utilization_ratio", "neuron_runtime_memory_used_bytes", "execution_errors_total",
            "hardware_ecc_events_total"} <= used
    assert used <= got


def test_counters_add_each_reports_counts_and_reset_when_no_runtime_runs():
    """The script's Counter.inc(per-period count); no runtime: clear_gauges_from_metric_objects."""
    totals: dict = {}
    twin = copy.deepcopy(REPORT)
    twin["neuron_runtime_data"][0]["report"]["execution_stats"]["error_summary"]["hardware"] = 2
    twin["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["sram_ecc_uncorrected"] = 3
    neuron_metrics.render(twin, totals)
    got = samples(neuron_metrics.render(copy.deepcopy(twin), totals)[0])
    assert got[key("execution_errors_total", error_type="hardware", **RUNTIME)] == 4
    assert got[key("execution_status_total", status_type="completed", **RUNTIME)] == 246
    assert got[key("hardware_ecc_events_total", event_type="sram_ecc_uncorrected", neuron_device_index="0",
                   **INSTANCE)] == 6
    idle = copy.deepcopy(twin)
    idle["neuron_runtime_data"] = []
    got = samples(neuron_metrics.render(idle, totals)[0])
    assert not any(n.startswith(("execution_", "neuroncore_", "neuron_runtime_")) for n, _ in got)
    assert got[key("hardware_ecc_events_total", event_type="sram_ecc_uncorrected", neuron_device_index="0",
                   **INSTANCE)] == 3
    assert got[key("hpq_neuron_metrics_up")] == 1


def test_a_group_with_an_error_is_left_out_and_up_says_so(capsys):
    twin = copy.deepcopy(REPORT)
    twin["system_data"]["neuron_hw_counters"]["error"] = "Failed to read ECC counters"
    text, ok = neuron_metrics.render(twin)
    got = {n for n, _ in samples(text)}
    assert not ok and samples(text)[key("hpq_neuron_metrics_up")] == 0
    assert "hardware_ecc_events_total" not in got and "neuroncore_utilization_ratio" in got
    assert capsys.readouterr().err.strip().splitlines() == [
        "neuron_metrics: neuron_hw_counters: Failed to read ECC counters"]
    healthy = {n for n, _ in samples(neuron_metrics.render(copy.deepcopy(REPORT))[0])}
    assert "hardware_ecc_events_total" in healthy


def test_a_runtime_with_an_error_leaves_only_its_series_out():
    twin = copy.deepcopy(REPORT)
    twin["neuron_runtime_data"][0]["error"] = "runtime went away"
    got = {n for n, _ in samples(neuron_metrics.render(twin)[0])}
    assert not any(n.startswith(("execution_", "neuroncore_", "neuron_runtime_")) for n in got)
    assert {"system_memory_used_bytes", "hardware_ecc_events_total", "instance_info"} <= got


def test_groups_the_config_did_not_ask_for_are_simply_absent():
    twin = copy.deepcopy(REPORT)
    twin["system_data"] = None
    del twin["neuron_runtime_data"][0]["report"]["execution_stats"]
    text, ok = neuron_metrics.render(twin)
    got = {n for n, _ in samples(text)}
    assert ok and not any(n.startswith(("system_", "hardware_", "execution_")) for n in got)
    assert "neuroncore_utilization_ratio" in got


def test_a_field_that_is_not_a_number_leaves_its_group_out_never_a_zero(capsys):
    twin = copy.deepcopy(REPORT)
    twin["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["1"][
        "neuroncore_utilization"] = "N/A"
    twin["system_data"]["memory_info"].pop("swap_used_bytes")
    text, ok = neuron_metrics.render(twin)
    got = {n for n, _ in samples(text)}
    assert not ok and "neuroncore_utilization_ratio" not in got and "system_memory_used_bytes" not in got
    assert "neuron_runtime_memory_used_bytes" in got
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("neuron_metrics: ") for line in err)


def test_latency_null_while_no_model_runs_writes_no_latency():
    twin = copy.deepcopy(REPORT)
    twin["neuron_runtime_data"][0]["report"]["execution_stats"]["latency_stats"]["total_latency"] = None
    text, ok = neuron_metrics.render(twin)
    got = {n for n, _ in samples(text)}
    assert ok and "execution_latency_seconds" not in got and "execution_status_total" in got


def test_a_line_that_is_not_json_is_one_stderr_line_and_a_too_long_line_is_dropped_whole(capsys):
    assert neuron_metrics.parse_line(b'{"neuron_runtime_data": [') is None
    assert neuron_metrics.parse_line(b"\xff\xfe") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("not JSON" in line for line in err)
    r, w = os.pipe()
    os.write(w, b"x" * 100 + b"\n" + b'{"a": 1}\n')
    os.close(w)
    lines = neuron_metrics.Lines(r, cap=50)
    assert lines.next(5) == b'{"a": 1}'
    with pytest.raises(EOFError):
        lines.next(5)
    assert capsys.readouterr().err.count("longer than 50 bytes") == 1
    os.close(r)
    # a long line arriving in pieces (no newline yet) is dropped whole too, with one line, and the next one read
    r, w = os.pipe()
    lines = neuron_metrics.Lines(r, cap=50)
    os.write(w, b"y" * 40)
    assert lines.next(0.2) is None
    os.write(w, b"y" * 40)
    assert lines.next(0.2) is None
    os.write(w, b"y" * 40 + b'\n{"b": 2}\n')
    assert lines.next(5) == b'{"b": 2}'
    assert capsys.readouterr().err.count("longer than 50 bytes") == 1
    os.close(w)
    os.close(r)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["error", "neuroncores_in_use", "0", "vcpu_usage", "user", "neuron_devices", "report",
                         "latency_stats", "total_latency", "usage_data", "average_usage", "x"]), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info", "*"]),
       st.sampled_from(list(neuron_metrics.HANDLERS)), JSONISH)
def test_any_json_in_any_place_renders_parseable_text_and_never_raises(where, group, junk):
    report = copy.deepcopy(REPORT)
    if where == "*":
        report = junk
    elif where == "neuron_runtime_data":
        report[where][0]["report"][group] = junk
    elif where == "system_data":
        report[where][group] = junk
    else:
        report[where] = junk
    text, ok = neuron_metrics.render(report)
    parsed = samples(text)
    assert parsed[key("hpq_neuron_metrics_up")] == (1 if ok else 0)


def node_bundle(tmp_path: Path) -> Path:
    for key_, src in bundle.node_bundle_files().items():
        dest = tmp_path / "node" / key_
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src).read_bytes())
    return tmp_path / "node"


def fake_monitor(tmp_path: Path, tail: str) -> Path:
    """A neuron-monitor on PATH that refuses a missing/non-JSON ``-c`` config (as the real one refuses a bad path),
    keeps it, prints a line that is not JSON and the guide's report as one line, then runs ``tail``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "report.line").write_text(json.dumps(REPORT) + "\n")
    (bindir / "neuron-monitor").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = "-c" ] && python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$2" || exit 3\n'
        f'cp "$2" {tmp_path}/seen.conf\necho $$ > {tmp_path}/monitor.pid\n'
        "echo '{not json'\n"
        f"cat {tmp_path}/report.line\n{tail}\n")
    (bindir / "neuron-monitor").chmod(0o755)
    return bindir


def test_the_bundle_runs_it_with_a_neuron_monitor_on_path_and_writes_the_file(tmp_path):
    """``python3 -S -m hpq.scripts.neuron_metrics`` from the node bundle, on 3.7 too where it exists."""
    from tests.lifecycle.test_lifecycle_python37 import PY37_CANDIDATES, py37_offences

    for module in ("neuron_metrics", "metric_writer"):
        path = Path(CHECKOUT) / "scripts" / f"{module}.py"
        assert py37_offences(path.read_text(), path.name) == []
    node = node_bundle(tmp_path)
    bindir = fake_monitor(tmp_path, "exit 0")
    out = tmp_path / "textfile"
    out.mkdir()
    pythons = ["python3"] + [p for p in (shutil.which(c) for c in PY37_CANDIDATES) if p][:1]
    for python in pythons:
        done = subprocess.run([python, "-S", "-m", "hpq.scripts.neuron_metrics", "--textfile-dir", str(out)],
                              capture_output=True, text=True, timeout=60, cwd=node,
                              env={"PATH": f"{bindir}:/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines() == [
            "neuron_metrics: a neuron-monitor line is not JSON (Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)): skipped"]
        got = samples((out / neuron_metrics.OUTPUT_NAME).read_text())
        assert got == samples(neuron_metrics.render(copy.deepcopy(REPORT))[0])
        assert [p.name for p in out.iterdir()] == [neuron_metrics.OUTPUT_NAME]
        conf = json.loads((tmp_path / "seen.conf").read_text())
        assert conf["period"] == "5s" and {m["type"] for m in conf["system_metrics"]} == set(
            neuron_metrics.SYSTEM_GROUPS)
    stdout = subprocess.run(["python3", "-S", "-m", "hpq.scripts.neuron_metrics", "--stdout"], capture_output=True,
                            text=True, timeout=60, cwd=node, env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert stdout.returncode == 0 and samples(stdout.stdout)[key("hpq_neuron_metrics_up")] == 1


def test_without_neuron_monitor_the_file_says_up_0_and_nothing_else(tmp_path):
    node = node_bundle(tmp_path)
    out = tmp_path / "textfile"
    out.mkdir()
    (out / neuron_metrics.OUTPUT_NAME).write_text(neuron_metrics.render(copy.deepcopy(REPORT))[0])  # stale
    done = subprocess.run(["python3", "-S", "-m", "hpq.scripts.neuron_metrics", "--textfile-dir", str(out)],
                          capture_output=True, text=True, timeout=60, cwd=node, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "neuron_metrics: neuron-monitor is not installed (aws-neuronx-tools): no Neuron series"]
    assert samples((out / neuron_metrics.OUTPUT_NAME).read_text()) == {key("hpq_neuron_metrics_up"): 0}


def wait_for(predicate, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def start_loop(tmp_path, monitor_body: str, every: int) -> tuple[subprocess.Popen, Path]:
    """The writer as its unit runs it, from the node bundle, with a fake neuron-monitor running ``monitor_body``."""
    node = node_bundle(tmp_path)
    bindir = fake_monitor(tmp_path, monitor_body)
    out = tmp_path / "textfile"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-S", "-m", "hpq.scripts.neuron_metrics", "--every", str(every),
                             "--textfile-dir", str(out)], cwd=node, env={"PATH": f"{bindir}:/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def test_the_loop_writes_up_0_when_neuron_monitor_exits(tmp_path):
    proc, out = start_loop(tmp_path, "exit 1", every=5)
    try:
        path = out / neuron_metrics.OUTPUT_NAME

        def down() -> bool:
            return path.exists() and samples(path.read_text()) == {key("hpq_neuron_metrics_up"): 0}

        assert wait_for(down)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "neuron_metrics: neuron-monitor exited 1" in err and "Traceback" not in err


def test_sigterm_stops_the_loop_and_its_neuron_monitor(tmp_path):
    """systemd stops the unit with SIGTERM: the child neuron-monitor must not be left running."""
    proc, out = start_loop(tmp_path, "exec sleep 300", every=30)
    path = out / neuron_metrics.OUTPUT_NAME
    try:
        assert wait_for(lambda: path.exists() and "neuroncore_utilization_ratio" in path.read_text())
        child = int((tmp_path / "monitor.pid").read_text())
        assert os.path.exists(f"/proc/{child}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert wait_for(lambda: not os.path.exists(f"/proc/{child}") or
                    Path(f"/proc/{child}/stat").read_text().split()[2] == "Z", 10)


def test_an_unwritable_file_or_a_bad_interval_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no neuron-monitor: the up-0 file is what cannot be written
    (tmp_path / neuron_metrics.OUTPUT_NAME).mkdir()
    assert neuron_metrics.main(["--textfile-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("neuron_metrics: cannot write ")
    for every in ("1", "-5", "nan", "x"):
        res = subprocess.run([sys.executable, "-m", "hpq.scripts.neuron_metrics", "--every", every], capture_output=True,
                             text=True, cwd=CHECKOUT)
        assert res.returncode == 2 and "Traceback" not in res.stderr, every


def test_system_vcpu_ratio_folds_nice_into_user_and_waits_and_irqs_into_system_capped_at_1():
    """process_vcpu_usage's aggregation, on values the guide's sample leaves at 0."""
    twin = copy.deepcopy(REPORT)
    twin["system_data"]["vcpu_usage"]["average_usage"].update(
        {"user": 90.0, "nice": 20.0, "system": 10.0, "io_wait": 3.0, "irq": 1.5, "soft_irq": 0.5})
    got = samples(neuron_metrics.render(twin)[0])
    assert got[key("system_vcpu_usage_ratio", usage_type="user", **INSTANCE)] == 1.0
    assert got[key("system_vcpu_usage_ratio", usage_type="system", **INSTANCE)] == pytest.approx(0.15)
