"""hpq's dashboards and alert rules (observability/) against the metric names the exporters really emit.

Every panel query, every dashboard variable query and every alert expression is parsed with a PromQL parser
(promql-parser, the Rust parser of GreptimeDB) and each metric name it selects must be one the exporters emit:
the lists under tests/observability/data/exporters/ (each file says the source it was read from: node_exporter v1.9.1's
own end-to-end output, AWS's EFA exporter source, the Slurm exporter AWS builds, AWS's DCGM field files),
the DCGM fields hpq selects (observability/dcgm-metrics.csv), ``up`` (written by the scraper for every target:
https://prometheus.io/docs/concepts/jobs_instances) and hpq's own result metrics (scripts/result_metrics.py).
A misspelled twin of a real panel must fail the same check. The alert rules also go through the real promtool
(Debian's prometheus package): ``check rules``, then ``test rules`` with a firing input and a quiet twin for
each alert, the input series carrying the labels the exporters attach.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml

from hpq import observability
from hpq.scripts import result_metrics
from tests.observability.test_result_metrics import doctor_result, nanogpt_result, nccl_result, sweep_result

DATA = Path(__file__).parent / "data" / "exporters"
# Grafana's built-in interval variables, replaced by a duration before parsing; user variables ($cluster,
# $node) only ever appear inside quoted label matchers.
GRAFANA_INTERVALS = ("$__rate_interval", "$__interval", "$__range")
SEED_GPU_FIELDS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
)
EFA_SICK_LINK = (
    "node_amazonefa_retrans_timeout_events",
    "node_amazonefa_unresponsive_remote_events",
    "node_amazonefa_impaired_remote_conn_events",
)


def names_from(path: Path) -> set[str]:
    return {
        line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
    }


def emitted() -> set[str]:
    """Every metric name a query may use, with where it comes from (see the module docstring)."""
    names = set()
    for f in ("node_exporter.txt", "efa_exporter.txt", "slurm_exporter.txt", "neuron_monitor.txt"):
        names |= names_from(DATA / f)
    return names | set(observability.dcgm_fields()) | {"up"} | set(result_metrics.METRICS)


def selected_metrics(expr: str) -> set[str]:
    """The metric names ``expr`` selects; ValueError when it does not parse or selects by regex only."""
    for var in GRAFANA_INTERVALS:
        expr = expr.replace(var, "5m")
    names: set[str] = set()

    def walk(node) -> None:
        kind = type(node).__name__
        if kind == "VectorSelector":
            if not node.name:
                raise ValueError(f"a selector without a metric name cannot be checked: {node}")
            names.add(node.name)
        elif kind == "MatrixSelector":
            walk(node.vector_selector)
        elif kind == "Call":
            for arg in node.args:
                walk(arg)
        elif kind == "BinaryExpr":
            walk(node.lhs)
            walk(node.rhs)
        elif kind == "AggregateExpr":
            walk(node.expr)
            if node.param is not None:
                walk(node.param)
        elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
            walk(node.expr)
        elif kind not in ("NumberLiteral", "StringLiteral"):
            raise ValueError(f"unknown PromQL node {kind}")

    walk(promql_parser.parse(expr))
    return names


def dashboard_queries(board: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable (label_values' selector)."""
    out = []
    for panel in board.get("panels", []):
        for target in panel.get("targets", []):
            out.append(("panel {!r} {}".format(panel.get("title"), target.get("refId")), target["expr"]))
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            assert q.startswith("label_values(") and q.endswith(")"), q
            inner = q[len("label_values(") : -1].rsplit(",", 1)
            if len(inner) == 2:  # label_values(selector, label); label_values(label) selects nothing
                out.append(("variable {}".format(var["name"]), inner[0]))
    return out


def check_board(board: dict, known: set[str]) -> list[str]:
    """Every problem with the board's queries, one line each (empty when all are sound)."""
    problems = []
    for where, expr in dashboard_queries(board):
        try:
            unknown = selected_metrics(expr) - known
        except ValueError as exc:
            problems.append(f"{where}: does not parse: {exc}")
            continue
        problems += [f"{where}: {n} is not emitted by any exporter" for n in sorted(unknown)]
    return problems


def load_boards() -> dict[str, dict]:
    return {Path(p).stem: json.loads(Path(p).read_text()) for p in observability.dashboard_files()}


def load_rules() -> list[dict]:
    rules = []
    for path in observability.alert_rule_files():
        for group in yaml.safe_load(Path(path).read_text())["groups"]:
            rules += group["rules"]
    return rules


def test_the_name_lists_hold_what_the_issue_needs():
    efa = names_from(DATA / "efa_exporter.txt")
    assert set(EFA_SICK_LINK) <= efa  # AWS's EFA exporter covers the sick-link counters: no reader of our own
    assert {"slurm_nodes_drain", "slurm_node_status", "slurm_queue_pending"} <= names_from(
        DATA / "slurm_exporter.txt"
    )
    assert {
        "node_cpu_seconds_total",
        "node_filesystem_avail_bytes",
        "node_memory_MemAvailable_bytes",
        "node_network_receive_bytes_total",
    } <= names_from(DATA / "node_exporter.txt")


def test_hpqs_dcgm_selection_is_awss_with_the_seed_fields_ecc_and_nvlink_errors():
    ours = observability.dcgm_fields()
    assert len(ours) == len(set(ours))
    assert set(ours) <= names_from(DATA / "dcgm_exporter.txt"), set(ours) - names_from(
        DATA / "dcgm_exporter.txt"
    )
    assert set(SEED_GPU_FIELDS) <= set(ours)
    assert {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"} <= set(ours)
    for line in Path(observability.DCGM_CSV).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert line.split(",")[1].strip() in ("gauge", "counter"), line


def test_the_five_dashboards_exist_and_are_importable_grafana_json():
    boards = load_boards()
    assert set(boards) == {"cluster", "gpu", "efa", "slurm", "hpq-results", "neuron"}
    uids = [b["uid"] for b in boards.values()]
    assert len(uids) == len(set(uids))
    for name, board in boards.items():
        assert board["title"] and board["schemaVersion"] >= 36
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        # The data source is a variable, so the JSON imports into any Grafana with a Prometheus source.
        assert board["templating"]["list"][0] == {
            **board["templating"]["list"][0],
            "type": "datasource",
            "query": "prometheus",
        }
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["targets"], (name, panel["title"])
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("name", ["cluster", "gpu", "efa", "slurm", "hpq-results", "neuron"])
def test_every_dashboard_query_uses_only_metrics_the_exporters_emit(name):
    board = load_boards()[name]
    assert dashboard_queries(board)
    assert check_board(board, emitted()) == []


def test_the_dashboards_show_the_seed_gpu_fields_and_the_sick_link_counters():
    used = set()
    for board in load_boards().values():
        for _, expr in dashboard_queries(board):
            used |= selected_metrics(expr)
    assert set(SEED_GPU_FIELDS) <= used and set(EFA_SICK_LINK) <= used
    assert {"hpq_result_verdict", "hpq_nccl_busbw_peak_gbps", "hpq_sweep_node_slow"} <= used


def written_by_the_node_programs(tmp_path: Path) -> set[str]:
    """The metric names result_metrics writes for results made by the real producers (run-nccl-test's
    ending, the sweep's report, the node doctor, run-nanogpt's verdict: tests/observability/test_result_metrics.py),
    the files the node programs publish (tests/scripts/test_result_publish.py runs the programs themselves)."""
    paths = [str(f(tmp_path)) for f in (nccl_result, sweep_result, doctor_result, nanogpt_result)]
    return {name for name, _ in result_metrics.collect(paths, "c1", "ip-10-1-0-9").series}


def results_page_names(board: dict) -> set[str]:
    used: set[str] = set()
    for _, expr in dashboard_queries(board):
        used |= selected_metrics(expr)
    return used - {"up"}  # the cluster variable's label_values(up, cluster)


def test_the_results_page_shows_exactly_what_the_node_programs_write(tmp_path):
    """Both ways: no panel selects a name no program writes (it would stay empty), and every family the
    programs write has a panel (a new one without a panel fails here)."""
    written = written_by_the_node_programs(tmp_path)
    assert written == set(result_metrics.METRICS)  # the producers' results exercise every declared family
    board = load_boards()["hpq-results"]
    assert results_page_names(board) == written
    # Broken twins: a misspelled name on the page, and a family the page no longer shows.
    twin = copy.deepcopy(board)
    wrong = next(p for p in twin["panels"] if p.get("title") == "Collectives with wrong elements")
    wrong["targets"][0]["expr"] = wrong["targets"][0]["expr"].replace(
        "hpq_nccl_wrong_elements", "hpq_nccl_wrong"
    )
    assert results_page_names(twin) - written == {"hpq_nccl_wrong"}
    assert written - results_page_names(twin) == {"hpq_nccl_wrong_elements"}


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (
            lambda e: e.replace("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTILIZATION"),
            "DCGM_FI_DEV_GPU_UTILIZATION",
        ),
        (lambda e: e.replace("DCGM_FI_DEV_GPU_UTIL", "dcgm_fi_dev_gpu_util"), "dcgm_fi_dev_gpu_util"),
        (lambda e: e + ")", "does not parse"),
        (lambda e: '{__name__=~"DCGM_.*"}', "without a metric name"),
    ],
)
def test_a_broken_twin_of_a_real_panel_fails_the_check(mutate, expect):
    board = copy.deepcopy(load_boards()["gpu"])
    panel = next(p for p in board["panels"] if p.get("title") == "GPU utilization")
    assert check_board(board, emitted()) == []
    panel["targets"][0]["expr"] = mutate(panel["targets"][0]["expr"])
    problems = check_board(board, emitted())
    assert len(problems) == 1 and expect in problems[0] and "GPU utilization" in problems[0]


def test_every_alert_expression_uses_only_emitted_metrics_and_the_five_alerts_exist():
    rules = load_rules()
    assert {r["alert"] for r in rules} >= {
        "HpqGpuXidError",
        "HpqGpuUncorrectableEcc",
        "HpqEfaErrorSpike",
        "HpqNodeSilent",
        "HpqSlurmNodeDrained",
        "HpqSlurmNodeDown",
        "HpqNeuronUncorrectableEcc",
    }
    for rule in rules:
        assert selected_metrics(rule["expr"]) <= emitted(), rule["alert"]
    twin = dict(rules[0], expr=rules[0]["expr"].replace("XID", "XDI"))
    assert not selected_metrics(twin["expr"]) <= emitted()


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install Debian's prometheus package (dev/test.sh does)"
    return path


def test_promtool_accepts_the_rule_files():
    for path in observability.alert_rule_files():
        done = subprocess.run(
            [promtool(), "check", "rules", path], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


# Labels as the exporters attach them (dcgm-exporter: gpu, UUID, device, modelName, Hostname; the EFA
# collector: device, port; the Slurm exporter's node collector: node, status, partition), plus the
# scrape's job and instance and the cluster label hpq's collector adds.
GPU = {
    "cluster": "c1",
    "instance": "ip-10-1-0-5",
    "job": "dcgm_exporter",
    "gpu": "3",
    "UUID": "GPU-7f1c",
    "device": "nvidia3",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "ip-10-1-0-5",
}
EFA = {"cluster": "c1", "instance": "ip-10-1-0-5", "job": "efa_exporter", "device": "rdmap113s0", "port": "1"}
SLURM = {"cluster": "c1", "instance": "ip-10-1-0-1", "job": "slurm_exporter", "partition": "gpu"}
NEURON_UE = {
    "cluster": "c1",
    "instance": "ip-10-1-0-9",
    "job": "neuron_monitor",
    "neuron_device_index": "7",
    "event_type": "sram_ecc_uncorrected",
    "instance_type": "trn1n.32xlarge",
}


def series(name: str, labels: dict, values: str) -> dict:
    body = ",".join('{}="{}"'.format(*kv) for kv in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


def alert(name: str, labels: dict, severity: str) -> dict:
    return {"exp_labels": dict(labels, severity=severity)}


CASES = {
    # name: (firing input, its alert labels, quiet twin input, eval time)
    "HpqGpuXidError": (
        [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 79 79")],
        GPU,
        [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 0 0")],
        "3m",
    ),
    "HpqGpuUncorrectableEcc": (
        [
            series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0 0 2 2"),
            series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0x3"),
        ],
        GPU,
        [
            series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0x3"),
            series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0x3"),
        ],
        "3m",
    ),
    "HpqEfaErrorSpike": (
        # A spike in one counter, on a driver that lacks impaired_remote_conn_events altogether.
        [
            series("node_amazonefa_retrans_timeout_events", EFA, "7x5 9 12 12"),
            series("node_amazonefa_unresponsive_remote_events", EFA, "0x8"),
        ],
        {k: EFA[k] for k in ("cluster", "instance", "device")},
        # High but flat counters: errors since boot, none now.
        [series(n, EFA, "7x8") for n in EFA_SICK_LINK],
        "7m",
    ),
    "HpqNeuronUncorrectableEcc": (
        # sram_ecc_uncorrected rises on device 7 (the raw scrape in AWS's Container Insights receiver test);
        # the quiet twin: corrected events rise, and an uncorrected count stays flat (errors before, none now).
        [series("hardware_ecc_events_total", NEURON_UE, "864x5 865 866 866")],
        {k: NEURON_UE[k] for k in ("cluster", "instance", "neuron_device_index", "event_type")},
        [
            series(
                "hardware_ecc_events_total",
                dict(NEURON_UE, event_type="mem_ecc_corrected"),
                "3 9 20 40 80 90 99 99",
            ),
            series("hardware_ecc_events_total", NEURON_UE, "864x8"),
        ],
        "7m",
    ),
    "HpqSlurmNodeDrained": (
        [series("slurm_node_status", dict(SLURM, node="ip-10-1-0-7", status="drained"), "1x30")],
        {"cluster": "c1", "node": "ip-10-1-0-7", "status": "drained"},
        [
            series("slurm_node_status", dict(SLURM, node="ip-10-1-0-7", status="idle"), "1x30"),
            series("slurm_node_status", dict(SLURM, node="ip-10-1-0-8", status="down"), "1x30"),
        ],
        "20m",
    ),
    "HpqSlurmNodeDown": (
        [series("slurm_node_status", dict(SLURM, node="ip-10-1-0-8", status="down*"), "1x30")],
        {"cluster": "c1", "node": "ip-10-1-0-8", "status": "down*"},
        [series("slurm_node_status", dict(SLURM, node="ip-10-1-0-8", status="drained"), "1x30")],
        "20m",
    ),
    "HpqNodeSilent": (
        # ip-10-1-0-6 sends until minute 20, then nothing (its collector died with it); ip-10-1-0-5 goes on.
        [
            series("up", {"cluster": "c1", "instance": "ip-10-1-0-5", "job": "node_exporter"}, "1x40"),
            series("up", {"cluster": "c1", "instance": "ip-10-1-0-6", "job": "node_exporter"}, "1x20"),
        ],
        {"cluster": "c1", "instance": "ip-10-1-0-6"},
        [
            series("up", {"cluster": "c1", "instance": "ip-10-1-0-5", "job": "node_exporter"}, "1x40"),
            series("up", {"cluster": "c1", "instance": "ip-10-1-0-6", "job": "node_exporter"}, "1x40"),
        ],
        "32m",
    ),
}


def rules_without_annotations(tmp_path: Path) -> list[str]:
    """Copies of the rule files without annotations: promtool compares them too, and they are prose."""
    out = []
    for i, path in enumerate(observability.alert_rule_files()):
        doc = yaml.safe_load(Path(path).read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
        copy_path = tmp_path / f"rules-{i}.yaml"
        copy_path.write_text(yaml.safe_dump(doc))
        out.append(str(copy_path))
    return out


def run_promtool_test(tmp_path: Path, name: str, inputs: list, expected: list, eval_time: str) -> None:
    spec = {
        "rule_files": rules_without_annotations(tmp_path),
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "alert_rule_test": [{"eval_time": eval_time, "alertname": name, "exp_alerts": expected}],
            }
        ],
    }
    path = tmp_path / (f"{name}.test.yaml")
    path.write_text(json.dumps(spec))  # JSON is YAML
    done = subprocess.run(
        [promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_alert_fires_on_its_fault_and_stays_quiet_on_the_twin(tmp_path, name):
    firing, labels, quiet, eval_time = CASES[name]
    severity = next(r["labels"]["severity"] for r in load_rules() if r["alert"] == name)
    run_promtool_test(tmp_path, name, firing, [alert(name, labels, severity)], eval_time)
    run_promtool_test(tmp_path, name, quiet, [], eval_time)


def test_promtool_tells_a_wrong_expectation_so_the_alert_tests_can_fail(tmp_path):
    firing, labels, quiet, eval_time = CASES["HpqGpuXidError"]
    with pytest.raises(AssertionError, match="FAILED|exp:"):
        run_promtool_test(
            tmp_path, "HpqGpuXidError", quiet, [alert("HpqGpuXidError", labels, "critical")], eval_time
        )


def test_the_gpu_fields_hpq_selects_are_real_on_an_h200():
    """bench/nvml_dcgm_fields.py read each selected field through NVML on a lent H200 (driver 580.159.04,
    2026-11-26; DCGM itself is not installed there): tests/observability/data/exporters/nvml_h200.json, unmodified.
    Every field hpq selects must be in that capture (a new field needs a new capture), and every field a
    dashboard or alert uses must have been read, except those NVML cannot give (Xid is an event,
    DCGM_FI_PROF_* needs DCGM's profiler) and the NVLink counters, which this one-GPU machine does not
    support."""
    capture = json.loads((DATA / "nvml_h200.json").read_text())
    fields = capture["gpus"][0]["fields"]
    assert capture["gpus"][0]["name"] == "NVIDIA H200"
    assert set(observability.dcgm_fields()) <= set(fields), set(observability.dcgm_fields()) - set(fields)
    used = set()
    for board in load_boards().values():
        for _, expr in dashboard_queries(board):
            used |= selected_metrics(expr)
    for rule in load_rules():
        used |= selected_metrics(rule["expr"])
    nvlink = {f for f in fields if "_NVLINK_" in f}
    for name in sorted(used & set(fields)):
        status = fields[name]["status"]
        if name in nvlink:
            assert status == "error" and "Not Supported" in fields[name]["error"], name
        elif name == "DCGM_FI_DEV_XID_ERRORS" or name.startswith("DCGM_FI_PROF_"):
            assert status == "not_via_nvml", name
        else:
            assert status == "ok" and isinstance(fields[name]["value"], int), name
    assert set(SEED_GPU_FIELDS) - {"DCGM_FI_DEV_XID_ERRORS"} <= {
        f for f, v in fields.items() if v["status"] == "ok"
    }
