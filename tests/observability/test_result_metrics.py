"""hpq's results as Prometheus metrics (scripts/result_metrics.py), read back with prometheus_client's parser.

The results are made by the code that makes them on a cluster: run-nccl-test's ending (launch.judge_log over a
real nccl-tests log from tests/data/nccl), the sweep's report (sweep.build_report), the node doctor
(node_doctor.examine on this host) and run-nanogpt's verdict (run_nanogpt.judge); run-nanogpt's result
dict itself is assembled inline in its main(), so its shape here is copied key for key from
scripts/run_nanogpt.py (a stand-in, named as such). The exposition text must parse with the Prometheus
project's own Python parser and give back every label value exactly, whatever characters it holds.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpq.lifecycle import bundle, catalog
from hpq.scripts import launch, node_checks, node_doctor, result_metrics, run_nanogpt, sweep

NCCL_LOG = Path(__file__).parents[1] / "data" / "nccl" / "h200x2_nccl-tests_all_reduce_perf.txt"
CPU_NODE = catalog.InstanceType("ml.test.cpu", catalog.CPU, "", 0, 0, False, 10)


def _parse(text: str) -> dict:
    """(name, sorted labels) -> value, through prometheus_client's text parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def _series(parsed: dict, name: str, **labels) -> list:
    return [
        v
        for (n, lab), v in parsed.items()
        if n == name and all(dict(lab).get(k) == x for k, x in labels.items())
    ]


def read_dir(outdir: Path) -> dict:
    """Every file of a textfile directory, parsed; each must be ``hpq_<test>.<node>.prom`` holding only that
    test's and node's series, and no series may be in two files (node_exporter would refuse the duplicate)."""
    out: dict = {}
    for path in sorted(outdir.iterdir()):
        assert path.name.endswith(".prom") and not path.name.startswith("."), path  # no temporary left behind
        parsed = _parse(path.read_text())
        assert parsed, path
        for key, value in parsed.items():
            labels = dict(key[1])
            assert path.name == result_metrics.file_name(labels["test"], labels["node"]), (path.name, labels)
            assert key not in out, f"series {key} in two files"
            out[key] = value
    return out


def nccl_result(tmp_path: Path, hosts=("ip-10-1-0-1", "ip-10-1-0-2"), source: Path = NCCL_LOG) -> Path:
    """What run-nccl-test writes: its result dict (scripts/run_nccl_test.py) judged by launch.judge_log."""
    log = tmp_path / "nccl-run.log"
    shutil.copy(source, log)
    result = {
        "command": "run-nccl-test 2 8",
        "mode": "nccl-tests",
        "launcher": "slurm",
        "nodes": len(hosts),
        "hosts": list(hosts),
        "processes_per_node": 8,
        "instance_type": "ml.p5.48xlarge",
        "transport": "rdma",
        "environment": {},
        "exit_status": 0,
        "log": str(log),
    }
    launch.judge_log("nccl-tests", str(log), 0, result, "ml.p5.48xlarge", len(hosts))
    return tmp_path / "nccl-run.json"


def sweep_result(tmp_path: Path) -> Path:
    """Every pair of 6 nodes; n6's pairs run at 30 GB/s, the others at 100: the sweep names n6 slow."""
    nodes = ["n1", "n2", "n3", "n4", "n5", "n6"]
    pairs = [
        sweep.PairResult(i, (a, b), sweep.OK, busbw_gbps=30.0 if "n6" in (a, b) else 100.0)
        for i, (a, b) in enumerate(itertools.combinations(nodes, 2))
    ]
    doc = sweep.build_report(
        nodes,
        pairs,
        len(pairs),
        1 << 30,
        {"command": "run-nccl-test --sweep 4 8", "instance_type": "ml.p5.48xlarge"},
    )
    path = tmp_path / "nccl-sweep.json"
    path.write_text(json.dumps(doc))
    return path


def doctor_result(tmp_path: Path) -> Path:
    report = node_doctor.examine(CPU_NODE, fsx=None, efa_window=0, disks=())
    # A critical finding as the doctor's own judge would report it (examine's disks=() leaves disks unread).
    finding = node_checks.Finding(
        "disk_full", node_checks.SEVERITY_CRITICAL, "/ 99% full", node_checks.ACTION_REBOOT
    )
    report["findings"].append(finding.to_dict())
    report["verdict"] = node_checks.worst([finding])
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps(report))
    return path


def nanogpt_result(tmp_path: Path, rc: int = 0) -> Path:
    """Stand-in: the keys run_nanogpt.main() writes, with the verdict its judge() gives."""
    log = tmp_path / "nanogpt.log"
    log.write_text("loss 4.1700 -> 3.2000: falls; ranks agree (checksum 1.2e+02, spread 0)\nRESULT: PASS\n")
    # what hpq's nanoGPT writes (scripts/nanogpt.py): run-nanogpt passes only on finite metrics of every rank
    metrics = {
        "tokens_per_s": 12345.5,
        "mfu": 0.41,
        "first_loss": 4.17,
        "final_loss": 3.2,
        "loss_fell": True,
        "ranks_agree": True,
        "world_size": 16,
        "checksum": 120.0,
        "checksum_spread": 0.0,
    }
    result = {
        "command": "run-nanogpt 2 8",
        "launcher": "slurm",
        "nodes": 2,
        "hosts": ["ip-10-1-0-1", "ip-10-1-0-2"],
        "processes_per_node": 8,
        "instance_type": "ml.p5.48xlarge",
        "transport": "rdma",
        "environment": {},
        "exit_status": rc,
        "log": str(log),
        "ckpt_dir": None,
        "metrics": metrics,
    }
    verdict = run_nanogpt.judge(rc, str(log), metrics)
    result["ok"], result["verdict"] = verdict == "PASS", verdict
    path = tmp_path / "nanogpt.json"
    path.write_text(json.dumps(result))
    return path


def test_every_kind_of_result_is_written_as_parseable_metrics(tmp_path):
    paths = [nccl_result(tmp_path), sweep_result(tmp_path), doctor_result(tmp_path), nanogpt_result(tmp_path)]
    outdir = tmp_path / "textfile"
    rc = result_metrics.main(
        [*map(str, paths), "--cluster", "c1", "--node", "ip-10-1-0-9", "--textfile-dir", str(outdir)]
    )
    assert rc == 0
    parsed = read_dir(outdir)
    nccl = json.loads(paths[0].read_text())
    for host in ("ip-10-1-0-1", "ip-10-1-0-2"):
        assert _series(
            parsed,
            "hpq_nccl_busbw_peak_gbps",
            node=host,
            test="nccl",
            cluster="c1",
            instance_type="ml.p5.48xlarge",
        ) == [nccl["peak_busbw_gbps"]]
        assert _series(parsed, "hpq_nccl_busbw_expected_gbps", node=host) == [
            nccl["verdict"]["expected_busbw_gbps"]
        ]
    # 2x H200 over NVLink is far below a p5's expectation: the run's own verdict is FAIL, so is the metric.
    assert nccl["verdict"]["ok"] is False
    assert _series(parsed, "hpq_result_verdict", test="nccl", node="ip-10-1-0-1", verdict="FAIL") == [1.0]
    assert _series(parsed, "hpq_result_verdict", test="nccl", node="ip-10-1-0-1", verdict="PASS") == [0.0]
    # The sweep's per-node verdicts (ok / SLOW) become per-node series.
    doc = json.loads(paths[1].read_text())
    for row in doc["nodes"]:
        slow = 1.0 if row["verdict"] == "SLOW" else 0.0
        assert _series(parsed, "hpq_sweep_node_slow", node=row["name"], test="nccl_sweep") == [slow]
        assert _series(parsed, "hpq_sweep_node_score_gbps", node=row["name"]) == [row["score_gbps"]]
    assert doc["slow_nodes"], "the fixture must make the sweep name a slow node"
    assert _series(
        parsed, "hpq_result_verdict", node=doc["slow_nodes"][0], test="nccl_sweep", verdict="FAIL"
    ) == [1.0]
    # The doctor is about this node only.
    assert _series(
        parsed, "hpq_doctor_findings", node="ip-10-1-0-9", severity=node_checks.SEVERITY_CRITICAL
    ) == [1.0]
    assert _series(parsed, "hpq_result_verdict", test="doctor", node="ip-10-1-0-9", verdict="FAIL") == [1.0]
    assert _series(parsed, "hpq_nanogpt_tokens_per_second", node="ip-10-1-0-2") == [12345.5]
    assert _series(parsed, "hpq_result_verdict", test="nanogpt", node="ip-10-1-0-2", verdict="PASS") == [1.0]
    # Only the declared families, each with the declared labels.
    for (name, labels), _ in parsed.items():
        assert name in result_metrics.METRICS
        assert {k for k, _ in labels} == set(result_metrics.COMMON_LABELS) | set(
            result_metrics.METRICS[name][2]
        )


@pytest.mark.parametrize(
    "verdict, expected",
    [
        ("PASS", "PASS"),
        ("INCONCLUSIVE", "INCONCLUSIVE"),
        ("fail", "FAIL"),
        ({"ok": True, "exit_code": 0, "message": "PASS: 380 GB/s"}, "PASS"),
        ({"ok": False, "exit_code": 1, "message": "FAIL: 12 GB/s"}, "FAIL"),
        ({"ok": True, "verdict": "INCONCLUSIVE", "message": "INCONCLUSIVE: no expectation"}, "INCONCLUSIVE"),
        ({"ok": True, "message": "INCONCLUSIVE: no expectation"}, "INCONCLUSIVE"),
        # scripts/verdicts.py's shape: the outcome inside the verdict object decides, whatever ok and the text say.
        (
            {"ok": False, "outcome": "INCONCLUSIVE", "message": "no published figure for ml.trn2.48xlarge"},
            "INCONCLUSIVE",
        ),
        # Broken twins: no verdict, or one that says nothing, is never PASS.
        (None, "INCONCLUSIVE"),
        ({}, "INCONCLUSIVE"),
        ("maybe", "INCONCLUSIVE"),
        ({"message": "done"}, "INCONCLUSIVE"),
    ],
)
def test_the_verdict_is_the_results_own_and_missing_is_never_pass(verdict, expected):
    doc = {"command": "run-nccl-test 2 8"}
    if verdict is not None:
        doc["verdict"] = verdict
    assert result_metrics.verdict_of(doc) == expected


def test_the_top_level_outcome_decides():
    doc = {"outcome": "INCONCLUSIVE", "verdict": {"ok": False, "message": "transport: no network line"}}
    assert result_metrics.verdict_of(doc) == "INCONCLUSIVE"
    doc["outcome"] = "maybe"  # a value that is no outcome falls back to the verdict object: ok False is FAIL
    assert result_metrics.verdict_of(doc) == "FAIL"


def test_a_newer_result_replaces_the_older_series(tmp_path):
    (tmp_path / "a").mkdir()
    old = nccl_result(tmp_path / "a")
    new_dir = tmp_path / "b"
    new_dir.mkdir()
    doc = json.loads(old.read_text())
    doc["peak_busbw_gbps"] = 399.5
    newer = new_dir / "nccl-run.json"
    newer.write_text(json.dumps(doc))
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(newer, (2_000_000, 2_000_000))
    for order in ([old, newer], [newer, old]):
        parsed = _parse(result_metrics.build([str(p) for p in order], "c1", "local"))
        assert _series(parsed, "hpq_nccl_busbw_peak_gbps", node="ip-10-1-0-1") == [399.5]
        assert _series(parsed, "hpq_result_timestamp_seconds", node="ip-10-1-0-1") == [2_000_000.0]


@pytest.mark.parametrize(
    "content, why",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hello": 1}', "not an hpq result"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_the_old_file(tmp_path, capsys, content, why):
    outdir = tmp_path / "textfile"
    outdir.mkdir()
    previous = outdir / result_metrics.file_name("nccl", "ip-10-1-0-1")
    previous.write_text("# previous\n")
    bad = tmp_path / "bad.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    good = nccl_result(tmp_path)
    rc = result_metrics.main([str(good), str(bad), "--cluster", "c", "--textfile-dir", str(outdir)])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and err.count("\n") == 1 and "Traceback" not in err
    assert previous.read_text() == "# previous\n" and len(list(outdir.iterdir())) == 1


def test_a_missing_file_and_an_empty_cluster_are_refused(tmp_path, capsys):
    assert result_metrics.main([str(tmp_path / "nope.json"), "--cluster", "c"]) == 2
    assert "nope.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        result_metrics.main([str(tmp_path / "x.json"), "--cluster", " "])
    assert exc.value.code == 2


def test_it_runs_from_the_node_bundle_alone_with_the_node_python(tmp_path):
    """The node runs ``python3 -m hpq.scripts.result_metrics`` from the lifecycle bundle (lifecycle/bundle.py):
    only the bundle's files, no site-packages (-S), the standard library only."""
    root = tmp_path / "bundle"
    for key, src in bundle.node_bundle_files().items():
        dest = root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src).read_bytes())
    assert (root / "hpq" / "scripts" / "result_metrics.py").is_file()
    path = nccl_result(tmp_path)
    outdir = tmp_path / "textfile"
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "hpq.scripts.result_metrics",
            str(path),
            "--cluster",
            "c1",
            "--textfile-dir",
            str(outdir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert _series(read_dir(outdir), "hpq_result_verdict", verdict="FAIL", node="ip-10-1-0-2") == [1.0]


label_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(cluster=label_text, node=label_text, itype=label_text)
@example(cluster="a\\nb", node='say "hi"', itype="line\nfeed")  # a backslash then n: not a line feed
@example(cluster="trailing\\", node="\\\\", itype="ml.p5.48xlarge")
def test_any_label_value_round_trips_through_the_exposition_format(cluster, node, itype):
    doc = {
        "command": "run-nccl-test 1 8",
        "hosts": [node],
        "instance_type": itype,
        "peak_busbw_gbps": 1.5,
        "avg_busbw_gbps": 0.5,
        "wrong_total": 0,
        "verdict": {"ok": True, "message": "PASS: ok"},
    }
    samples = result_metrics.Samples()
    result_metrics.add_result(samples, doc, cluster, "local", 123.0)
    text = samples.render()
    parsed = _parse(text)
    assert _series(parsed, "hpq_nccl_busbw_peak_gbps", cluster=cluster, node=node, instance_type=itype) == [
        1.5
    ]
    assert len(parsed) == len(samples.series)
    # Round trip: what the parser read back is what was written, series for series.
    assert {(n, lab): v for (n, lab), v in samples.series.items()} == parsed


def test_values_that_are_not_numbers_are_left_out_not_invented():
    doc = {
        "command": "run-nccl-test 1 8",
        "hosts": ["n1"],
        "peak_busbw_gbps": None,
        "avg_busbw_gbps": "fast",
        "wrong_total": True,
        "verdict": "FAIL",
    }
    samples = result_metrics.Samples()
    result_metrics.add_result(samples, doc, "c", "local", 1.0)
    names = {n for n, _ in samples.series}
    assert names == {"hpq_result_verdict", "hpq_result_timestamp_seconds"}


def test_it_keeps_to_python37_the_node_python_of_al2(tmp_path):
    """Nodes on an AL2 HyperPod AMI have Python 3.7 (tests/lifecycle/test_lifecycle_python37.py says why): run the module
    there from the bundle when a real 3.7 exists here, and always apply the same static 3.7 check."""
    from tests.lifecycle.test_lifecycle_python37 import PY37_CANDIDATES, py37_offences

    src = Path(result_metrics.__file__).read_text()
    assert py37_offences(src, "result_metrics.py") == []
    py37 = next((shutil.which(c) for c in PY37_CANDIDATES if shutil.which(c)), None)
    if py37 is None:
        return  # the static check above is the guard where no 3.7 interpreter exists
    root = tmp_path
    for key, src_path in bundle.node_bundle_files().items():
        dest = root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src_path).read_bytes())
    doc = {"command": "run-nccl-test 1 8", "hosts": ["n1"], "peak_busbw_gbps": 3.5, "verdict": "PASS"}
    (root / "r.json").write_text(json.dumps(doc))
    done = subprocess.run(
        [py37, "-S", "-m", "hpq.scripts.result_metrics", "r.json", "--cluster", "c", "--stdout"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert _series(_parse(done.stdout), "hpq_nccl_busbw_peak_gbps", node="n1") == [3.5]


def test_an_unwritable_file_is_one_line_exit_2_and_the_other_files_written(tmp_path, capsys):
    """files.write_file refuses with WriteRefused, not OSError: one line (it was a traceback), every other
    file still written."""
    outdir = tmp_path / "textfile"
    (outdir / result_metrics.file_name("nccl", "ip-10-1-0-1")).mkdir(parents=True)
    rc = result_metrics.main([str(nccl_result(tmp_path)), "--cluster", "c", "--textfile-dir", str(outdir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and "ip-10-1-0-1" in err
    assert (outdir / result_metrics.file_name("nccl", "ip-10-1-0-2")).is_file()
