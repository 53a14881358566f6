"""Every node program writes its result into node_exporter's textfile directory as it finishes
(scripts/result_metrics.publish), when that directory exists on the node, and never changes its own
output or exit code because of it.

The programs run for real as the user starts them (``python -m hpq.scripts.run_nccl_test`` ...), with the
stand-ins their own tests use (tests/scripts/test_scripts_units.py, test_scripts_sweep.py,
test_node_doctor.py): a stand-in all_reduce_perf printing a real 2x H200 nccl-tests log from tests/data/nccl,
a stand-in nccom-test printing seed 004's trn1 rows, the stand-in cluster of tests/fake_fabric.py for the
sweep, nvidia-smi replaying a real H200 capture for the doctor. The node root (``HPQ_ROOT``, the lifecycle's
convention) holds the textfile directory the lifecycle's observability step makes
(lifecycle/observability.TEXTFILE_DIR) and the node-info file its identify step writes (cluster and Slurm
node name). What is written is read back with prometheus_client's parser, the Prometheus project's own.
Atomic replacement is node_exporter's rule for textfile writers
(https://github.com/prometheus/node_exporter#textfile-collector): no ``*.prom`` is ever half written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpq.lifecycle import bundle, observability
from hpq.scripts import result_metrics
from tests import fake_fabric
from tests.observability.test_result_metrics import _series, read_dir
from tests.scripts.test_node_doctor import _real, _tools
from tests.scripts.test_scripts_sweep import fake_binary, run_sweep
from tests.scripts.test_scripts_units import DATA, base_env, recorder, run_module

CLUSTER = "ml-cluster-7"
NODE = "ip-10-1-0-9"
NOTE = "note: result metrics not written"


def node_root(tmp_path: Path, env: dict, observe: bool = True) -> Path:
    """The node root in ``env`` (HPQ_ROOT), with the lifecycle's node-info file and, when ``observe``, the
    textfile directory; the directory's path."""
    root = Path(env.get("HPQ_ROOT") or tmp_path / "root")
    env["HPQ_ROOT"] = str(root)
    info = tmp_path / "node-info.json"
    info.write_text(json.dumps({"cluster_name": CLUSTER, "slurm_node_name": NODE, "role": "controller"}))
    env["HPQ_NODE_INFO"] = str(info)
    textfile = root / observability.TEXTFILE_DIR.lstrip("/")
    if observe:
        textfile.mkdir(parents=True, exist_ok=True)
    return textfile


def block(textfile: Path, kind: str, node: str) -> None:
    """Broken twin of a writable directory: the file's place is taken by a directory, so the rename fails
    even for root (these tests run as root here, where a read-only mode bit stops nothing); as a normal
    user the directory is made read-only as well."""
    (textfile / result_metrics.file_name(kind, node)).mkdir()
    if os.geteuid() != 0:
        textfile.chmod(0o555)


def nccl_home(tmp_path: Path, log: str, rc: int = 0) -> Path:
    home = tmp_path / "nccl-tests"
    (home / "build").mkdir(parents=True, exist_ok=True)
    recorder(home / "build/all_reduce_perf", f'cat {DATA / log}\nexit {rc}\n')
    return home


def result_of(tmp_path: Path, pattern: str) -> dict:
    latest = max((tmp_path / "results").glob(pattern), key=lambda p: p.stat().st_mtime_ns)
    return json.loads(latest.read_text())


def test_run_nccl_test_writes_its_result_with_the_nodes_labels(tmp_path):
    env = base_env(tmp_path)
    textfile = node_root(tmp_path, env)
    env["NCCL_TESTS_HOME"] = str(nccl_home(tmp_path, "h200x2_nccl_baseline_allreduce.txt"))
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--expect", "300"], env, tmp_path)
    assert res.returncode == 0 and NOTE not in res.stderr, res.stdout[-2000:] + res.stderr
    doc = result_of(tmp_path, "nccl-test-*.json")
    parsed = read_dir(textfile)
    node = (doc["hosts"] or [NODE])[0]
    labels = {"cluster": CLUSTER, "node": node, "test": "nccl", "instance_type": doc["instance_type"] or "unknown"}
    assert _series(parsed, "hpq_result_verdict", verdict="PASS", **labels) == [1.0]
    assert _series(parsed, "hpq_result_verdict", verdict="FAIL", **labels) == [0.0]
    assert _series(parsed, "hpq_nccl_busbw_peak_gbps", **labels) == [doc["peak_busbw_gbps"]] != [0.0]
    assert _series(parsed, "hpq_nccl_busbw_avg_gbps", **labels) == [doc["avg_busbw_gbps"]]
    assert _series(parsed, "hpq_nccl_wrong_elements", **labels) == [0.0]
    # The same log judged as one p5 (far below its NVLink figure): FAIL replaces PASS in the same file.
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--instance-type",
                                                   "p5.48xlarge"], env, tmp_path)
    assert res.returncode == 1, res.stdout[-2000:]
    parsed = read_dir(textfile)
    assert _series(parsed, "hpq_result_verdict", verdict="FAIL", test="nccl", instance_type="ml.p5.48xlarge") == [1.0]
    assert _series(parsed, "hpq_nccl_busbw_expected_gbps", test="nccl") == [
        result_of(tmp_path, "nccl-test-*.json")["verdict"]["expected_busbw_gbps"]]


def test_no_textfile_directory_no_metrics_and_the_same_run(tmp_path):
    """Observability off (the lifecycle made no directory): nothing is created, the run is as before."""
    env = base_env(tmp_path)
    textfile = node_root(tmp_path, env, observe=False)
    env["NCCL_TESTS_HOME"] = str(nccl_home(tmp_path, "h200x2_nccl_baseline_allreduce.txt"))
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--expect", "300"], env, tmp_path)
    assert res.returncode == 0 and NOTE not in res.stderr and "PASS" in res.stdout
    assert not textfile.exists() and not textfile.parent.exists()


def test_an_unwritable_directory_is_one_note_and_the_same_exit_code(tmp_path):
    env = base_env(tmp_path)
    textfile = node_root(tmp_path, env)
    env["NCCL_TESTS_HOME"] = str(nccl_home(tmp_path, "h200x2_nccl_baseline_allreduce.txt"))
    args = ["1", "2", "--launcher", "local", "--expect", "300"]
    healthy = run_module("hpq.scripts.run_nccl_test", args, env, tmp_path)
    node = (result_of(tmp_path, "nccl-test-*.json")["hosts"] or [NODE])[0]
    for path in textfile.iterdir():
        path.unlink()
    block(textfile, "nccl", node)
    broken = run_module("hpq.scripts.run_nccl_test", args, env, tmp_path)
    assert healthy.returncode == broken.returncode == 0, broken.stdout[-2000:] + broken.stderr
    notes = [line for line in broken.stderr.splitlines() if NOTE in line]
    assert len(notes) == 1 and notes[0].startswith("run-nccl-test: ") and "Traceback" not in broken.stderr
    assert NOTE not in broken.stdout and "PASS" in broken.stdout
    assert [p.name for p in textfile.iterdir() if p.is_file()] == []  # no temporary left behind


def test_run_nccom_test_writes_an_inconclusive_result(tmp_path):
    env = base_env(tmp_path)
    textfile = node_root(tmp_path, env)
    fake = recorder(tmp_path / "nccom-test", f'cat {DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"}\n')
    res = run_module("hpq.scripts.run_nccom_test", ["1", "--launcher", "local", "--binary", str(fake),
                                                    "--instance-type", "trn1.32xlarge"], env, tmp_path)
    assert res.returncode == 3 and NOTE not in res.stderr, res.stdout + res.stderr  # no figure for one trn1 node
    doc = result_of(tmp_path, "nccom-test-*.json")
    parsed = read_dir(textfile)
    labels = {"cluster": CLUSTER, "test": "nccom", "instance_type": "ml.trn1.32xlarge"}
    assert _series(parsed, "hpq_result_verdict", verdict="INCONCLUSIVE", **labels) == [1.0]
    assert _series(parsed, "hpq_result_verdict", verdict="PASS", **labels) == [0.0]
    assert _series(parsed, "hpq_nccl_busbw_peak_gbps", **labels) == [doc["peak_busbw_gbps"]]


def test_the_sweep_writes_one_file_per_node_and_stdout_stays_json(tmp_path):
    speeds = {"node-1": 390.0, "node-2": 400.0, "node-3": 80.0, "node-4": 395.0}
    env = fake_fabric.cluster_env(tmp_path, speeds)
    textfile = node_root(tmp_path, env)
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p5.48xlarge", "--output", "json"], env,
                    tmp_path)
    assert res.returncode == 1 and NOTE not in res.stderr, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)  # still the JSON object alone
    assert sorted(p.name for p in textfile.iterdir()) == sorted(
        result_metrics.file_name("nccl_sweep", n) for n in speeds)
    parsed = read_dir(textfile)
    for node in speeds:
        labels = {"cluster": CLUSTER, "node": node, "test": "nccl_sweep", "instance_type": "ml.p5.48xlarge"}
        slow = node == "node-3"
        assert _series(parsed, "hpq_sweep_node_slow", **labels) == [1.0 if slow else 0.0]
        assert _series(parsed, "hpq_sweep_node_score_gbps", **labels) == [doc["scores"][node]]
        assert _series(parsed, "hpq_sweep_median_gbps", **labels) == [doc["median_gbps"]]
        assert _series(parsed, "hpq_result_verdict", verdict="FAIL" if slow else "PASS", **labels) == [1.0]


def test_a_sweep_whose_files_cannot_be_written_keeps_its_json_and_exit_code(tmp_path):
    speeds = {"node-1": 390.0, "node-2": 400.0, "node-3": 395.0}
    env = fake_fabric.cluster_env(tmp_path, speeds)
    textfile = node_root(tmp_path, env)
    block(textfile, "nccl_sweep", "node-2")
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p5.48xlarge", "--output", "json"], env,
                    tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(res.stdout)["slow_nodes"] == []
    assert sum(NOTE in line for line in res.stderr.splitlines()) == 1
    # the other nodes' files are still written
    assert {p.name for p in textfile.iterdir() if p.is_file()} == {
        result_metrics.file_name("nccl_sweep", n) for n in ("node-1", "node-3")}


def test_run_nanogpt_writes_its_verdict(tmp_path):
    """/bin/true as the training python: no loss reported, INCONCLUSIVE (exit 3); no throughput is invented."""
    env = base_env(tmp_path)
    textfile = node_root(tmp_path, env)
    res = run_module("hpq.scripts.run_nanogpt", ["1", "1", "--launcher", "local", "--python", "/bin/true",
                                                 "--ckpt-every", "0"], env, tmp_path)
    assert res.returncode == 3 and NOTE not in res.stderr, res.stdout + res.stderr
    parsed = read_dir(textfile)
    labels = {"cluster": CLUSTER, "test": "nanogpt"}
    assert _series(parsed, "hpq_result_verdict", verdict="INCONCLUSIVE", **labels) == [1.0]
    assert _series(parsed, "hpq_result_verdict", verdict="PASS", **labels) == [0.0]
    assert _series(parsed, "hpq_nanogpt_tokens_per_second") == []
    assert len(_series(parsed, "hpq_result_timestamp_seconds", **labels)) == 1


def doctor(tmp_path: Path, env: dict) -> subprocess.CompletedProcess:
    env["PATH"] = f"{_tools(tmp_path, _real('nvidia-smi-q-x'), '', '')}:/usr/bin:/bin"
    env.update(HPQ_IMDS_ENDPOINT="off", SLURMD_NODENAME="gpu-node-4")
    return subprocess.run([sys.executable, "-m", "hpq.scripts.node_doctor", "--instance-type", "ml.p5.48xlarge",
                           "--fsx", "", "--efa-window", "0", "--output", "json"], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_node_doctor_writes_its_report_for_its_own_node(tmp_path):
    env = dict(os.environ)
    textfile = node_root(tmp_path, env)
    done = doctor(tmp_path, env)
    report = json.loads(done.stdout)  # stdout is the report alone, as before
    assert done.returncode == 1 and report["verdict"] == "FAIL" and NOTE not in done.stderr  # 2 of 8 GPUs
    parsed = read_dir(textfile)
    labels = {"cluster": CLUSTER, "node": "gpu-node-4", "test": "doctor", "instance_type": "ml.p5.48xlarge"}
    assert _series(parsed, "hpq_result_verdict", verdict="FAIL", **labels) == [1.0]
    by_severity: dict = {}
    for f in report["findings"]:
        by_severity[f["severity"]] = by_severity.get(f["severity"], 0) + 1
    for severity, count in by_severity.items():
        assert _series(parsed, "hpq_doctor_findings", severity=severity, **labels) == [float(count)]
    assert _series(parsed, "hpq_doctor_unchecked", **labels) == [float(len(report["unchecked"]))]


def test_a_doctor_that_cannot_write_reports_the_same(tmp_path):
    env = dict(os.environ)
    block(node_root(tmp_path, env), "doctor", "gpu-node-4")
    done = doctor(tmp_path, env)
    assert done.returncode == 1 and json.loads(done.stdout)["verdict"] == "FAIL"
    assert [line for line in done.stderr.splitlines() if NOTE in line][0].startswith("node_doctor: ")


@pytest.mark.parametrize("doc", [
    {"command": "run-nccl-test 1 8", "hosts": ["n1"], "peak_busbw_gbps": 3.5, "verdict": "PASS"},
    {"hello": 1},  # not a result this module knows: a note, never an exception in the program
])
def test_publish_never_raises(tmp_path, monkeypatch, capsys, doc):
    monkeypatch.setenv("HPQ_NODE_INFO", str(tmp_path / "none"))
    (tmp_path / result_metrics.file_name("nccl", "n1")).mkdir()
    assert result_metrics.publish(doc, "prog", str(tmp_path)) == []
    assert capsys.readouterr().err.startswith("prog: " + NOTE)


def as_user(uid: int, root: Path, textfile: Path, doc: dict) -> subprocess.CompletedProcess:
    """publish() from the node bundle alone (-S: no site-packages), as user ``uid`` (setpriv, util-linux)."""
    code = ("import json, sys\nfrom hpq.scripts import result_metrics\n"
            "print(json.dumps(result_metrics.publish(json.loads(sys.argv[1]), 'run-nccl-test', sys.argv[2])))")
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-S",
                           "-c", code, json.dumps(doc), str(textfile)], cwd=str(root), capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HPQ_NODE_INFO": "/nonexistent"})


def test_cluster_users_write_into_the_lifecycles_sticky_directory():
    """The lifecycle makes the directory 1777 (lifecycle/observability.install_node_exporter): a user's program
    writes its file; another user cannot replace that file (the sticky bit, as in /tmp) and gets the note."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as two other users")
    base = Path(tempfile.mkdtemp(prefix="hpq-publish-", dir="/tmp"))
    try:
        base.chmod(0o755)
        for key, src in bundle.node_bundle_files().items():
            dest = base / "bundle" / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(Path(src).read_bytes())
        for d in [base / "bundle", *(p for p in (base / "bundle").rglob("*") if p.is_dir())]:
            d.chmod(0o755)
        textfile = base / "textfile"
        textfile.mkdir()
        textfile.chmod(0o1777)
        doc = {"command": "run-nccl-test 1 8", "hosts": ["n1"], "peak_busbw_gbps": 3.5, "verdict": "PASS"}
        first = as_user(65534, base / "bundle", textfile, doc)
        target = textfile / result_metrics.file_name("nccl", "n1")
        assert first.returncode == 0 and json.loads(first.stdout) == [str(target)], first.stderr
        assert target.stat().st_uid == 65534
        assert _series(read_dir(textfile), "hpq_nccl_busbw_peak_gbps", node="n1", cluster="unknown") == [3.5]
        second = as_user(65533, base / "bundle", textfile, dict(doc, peak_busbw_gbps=9.0))
        assert second.returncode == 0 and json.loads(second.stdout) == [], second.stderr
        assert second.stderr.startswith("run-nccl-test: " + NOTE) and "not permitted" in second.stderr
        assert _series(read_dir(textfile), "hpq_nccl_busbw_peak_gbps", node="n1") == [3.5]
    finally:
        shutil.rmtree(base, ignore_errors=True)
