"""The doctor's judge (hpq.validation.doctor) over what run-node-doctor brings back from several nodes.

Each node's report is node_doctor's own, made by its real checks from what nvidia-smi and dmesg printed
on a healthy 2x H200 host (tests/data/node_tools/h200-x2) or a twin of those captures with one fault; the
fan-out document is put together as run-node-doctor does (scripts/run_node_doctor.check_node's entries).
Every rule is shown on a healthy cluster and on its broken twin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.scripts import node_doctor, outcome, run_node_doctor
from hpq.validation import doctor
from hpq.validation.backend import ClusterFacts, run_test
from hpq.validation.request import DOCTOR, VALIDATE, TestRequest
from hpq.validation.result import RawOutcome
from hpq.validation.slurm import SlurmBackend, node_command

DATA = Path(__file__).parents[1] / "data" / "node_tools" / "h200-x2"
TWO_H200 = catalog.InstanceType("ml.test.2xh200", catalog.GPU, "H200", 2, 0, False, 100)
XID_79 = "[ 99.1] NVRM: Xid (PCI:0000:00:07): 79, pid=1, GPU has fallen off the bus.\n"


def _real(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


def _report(tmp_path: Path, monkeypatch, name: str, smi: str | None = None, kernel: str = "") -> dict:
    """node_doctor.examine on stand-in tools replaying ``smi`` (default: the real capture) and dmesg."""
    d = tmp_path / name
    bin_dir = d / "bin"
    bin_dir.mkdir(parents=True)
    (d / "smi.xml").write_text(smi if smi is not None else _real("nvidia-smi-q-x"))
    (d / "nvlink.txt").write_text(_real("nvidia-smi-nvlink-s"))
    (d / "kernel.log").write_text(_real("dmesg") + kernel)
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\ncase "$1 $2" in\n"-q -x") cat {d}/smi.xml ;;\n'
                                        f'"nvlink -s") cat {d}/nvlink.txt ;;\n*) exit 2 ;;\nesac\n')
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\ncat {d}/kernel.log\n")
    (bin_dir / "systemctl").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SLURMD_NODENAME", name)
    return node_doctor.examine(TWO_H200, fsx=None, efa_window=0, disks=())


def _fanout(*entries: dict) -> str:
    return "run-node-doctor: progress on stderr only\n" + json.dumps({"nodes": list(entries), "seconds": 1.0})


def _entry(report: dict | None, error: str = "") -> dict:
    node = report["node"] if report else "ip-10-1-9-9"
    return {"node": node, "state": "idle", "exit_code": 0 if report else None, "report": report, "error": error}


def _judge(log: str, test: str = DOCTOR, code: int = 0):
    return doctor.judge(TestRequest(test), RawOutcome(code, log, command="run-node-doctor --output json"),
                        "ml.test.2xh200", "slurm", "c1", devices=test == VALIDATE)


def test_a_healthy_cluster_passes_with_nothing_found(tmp_path, monkeypatch):
    reports = [_report(tmp_path, monkeypatch, f"ip-10-1-0-{i}") for i in range(3)]
    result = _judge(_fanout(*map(_entry, reports)))
    assert result.outcome == outcome.PASS and result.exit_code == 0, result.message
    assert result.data["findings"] == [] and [n["node"] for n in result.data["nodes"]] == [
        "ip-10-1-0-0", "ip-10-1-0-1", "ip-10-1-0-2"]


def test_an_xid_79_names_that_node_with_a_reboot(tmp_path, monkeypatch):
    reports = [_report(tmp_path, monkeypatch, "ip-10-1-0-1"),
               _report(tmp_path, monkeypatch, "ip-10-1-0-2", kernel=XID_79)]
    result = _judge(_fanout(*map(_entry, reports)))
    assert result.outcome == outcome.FAIL and result.exit_code == 1
    [finding] = result.data["findings"]
    assert (finding["node"], finding["kind"], finding["action"]) == ("ip-10-1-0-2", "xid", "reboot")
    assert "ip-10-1-0-2" in result.message.splitlines()[0]
    assert [n["action"] for n in result.data["nodes"]] == ["none", "reboot"]


def test_a_node_that_did_not_answer_is_inconclusive_never_pass(tmp_path, monkeypatch):
    healthy = _report(tmp_path, monkeypatch, "ip-10-1-0-1")
    result = _judge(_fanout(_entry(healthy), _entry(None, "no answer in 120 s")))
    assert result.outcome == outcome.INCONCLUSIVE and result.exit_code == outcome.EXIT_INCONCLUSIVE
    silent = result.data["nodes"][1]
    assert silent["verdict"] == outcome.INCONCLUSIVE and silent["error"] == "no answer in 120 s"
    assert "no answer from ip-10-1-9-9" in result.message
    # A report that is not node_doctor's (a truncated line, a foreign JSON) is no answer either.
    broken = _entry(dict(healthy, verdict="MAYBE"))
    assert _judge(_fanout(_entry(healthy), broken)).outcome == outcome.INCONCLUSIVE


def test_no_report_at_all_is_not_a_pass():
    for log, code in (("", 0), ("srun: error: Unable to allocate resources\n", 1), ("{not json", 0)):
        result = _judge(log, code=code)
        assert result.outcome != outcome.PASS and result.exit_code != 0
    assert _judge("", code=2).exit_code == 2  # the node refused the arguments: bad input keeps its code


def test_drift_names_the_node_whose_driver_differs_from_the_majority(tmp_path, monkeypatch):
    drifted = _real("nvidia-smi-q-x").replace("<driver_version>580.159.04<", "<driver_version>570.86.15<")
    reports = [_report(tmp_path, monkeypatch, "ip-10-1-0-1"), _report(tmp_path, monkeypatch, "ip-10-1-0-2"),
               _report(tmp_path, monkeypatch, "ip-10-1-0-3", smi=drifted)]
    result = _judge(_fanout(*map(_entry, reports)))
    [finding] = result.data["findings"]
    assert finding["node"] == "ip-10-1-0-3" and finding["kind"] == "drift"
    assert "nvidia_driver 570.86.15" in finding["evidence"] and "580.159.04" in finding["evidence"]
    # The twin: the same three nodes on one driver have nothing to say.
    same = [_report(tmp_path, monkeypatch, f"ip-10-1-1-{i}") for i in range(3)]
    assert _judge(_fanout(*map(_entry, same))).data["findings"] == []
    # Two nodes that differ have no majority: neither is named.
    assert _judge(_fanout(*map(_entry, reports[1:]))).data["findings"] == []


def _one_gpu(xml: str) -> str:
    """The capture with its second <gpu> element removed: a GPU that fell off the bus is not listed."""
    start = xml.index('<gpu id="00000000:00:07.0">')
    end = xml.index("</gpu>", start) + len("</gpu>")
    return xml[:start] + xml[end:]


def test_validate_judges_device_counts_only(tmp_path, monkeypatch):
    xid = _report(tmp_path, monkeypatch, "ip-10-1-0-1", kernel=XID_79)
    healthy = _report(tmp_path, monkeypatch, "ip-10-1-0-2")
    result = _judge(_fanout(_entry(xid), _entry(healthy)), VALIDATE)
    assert result.outcome == outcome.PASS, result.message  # an Xid is the doctor's, not validate's
    missing = _report(tmp_path, monkeypatch, "ip-10-1-0-3", smi=_one_gpu(_real("nvidia-smi-q-x")))
    result = _judge(_fanout(_entry(healthy), _entry(missing)), VALIDATE)
    assert result.outcome == outcome.FAIL
    [finding] = result.data["findings"]
    assert finding["node"] == "ip-10-1-0-3" and finding["kind"] == "gpu_count"


class _Shell:
    """The controller's shell as SshShell answers: what ran, and run-node-doctor's stdout."""

    def __init__(self, stdout: str, code: int = 0):
        self.stdout, self.code, self.commands = stdout, code, []

    def run(self, command, echo=None, timeout=None, on_stderr_line=None):
        self.commands.append(command)
        return self.code, self.stdout, ""


def test_the_slurm_backend_runs_run_node_doctor_and_judges_it(tmp_path, monkeypatch):
    assert node_command(TestRequest(DOCTOR)) == ["run-node-doctor", "--output", "json"]
    assert node_command(TestRequest(DOCTOR, nodes=4)) == ["run-node-doctor", "4", "--output", "json"]
    assert node_command(TestRequest(VALIDATE))[:1] == ["run-node-doctor"]
    reports = [_report(tmp_path, monkeypatch, "ip-10-1-0-1", kernel=XID_79)]
    shell = _Shell(_fanout(*map(_entry, reports)), code=1)
    backend = SlurmBackend(shell, ClusterFacts("c1", "slurm", "ml.p5.48xlarge"))
    result = run_test(backend, TestRequest(DOCTOR, timeout_s=600), lambda line: None)
    assert shell.commands == ["run-node-doctor --output json"]
    assert result.outcome == outcome.FAIL and result.data["findings"][0]["node"] == "ip-10-1-0-1"


def test_the_request_knows_the_doctor():
    assert TestRequest(DOCTOR).node_count is None  # every node
    with pytest.raises(UsageError):
        TestRequest("doctr")


def test_run_node_doctor_reads_sinfo_and_refuses_bad_arguments(capsys):
    # sinfo -h -N -o '%N %T' as Slurm 22.05 prints it: a node in two partitions twice, state suffixes.
    text = "node-10 idle\nnode-2 drained*\nnode-2 drained*\nnode-1 mixed~\n"
    assert run_node_doctor.parse_sinfo(text) == {"node-1": "mixed", "node-2": "drained", "node-10": "idle"}
    entry = run_node_doctor.check_node("node-2", "drained", [], 5)
    assert entry["report"] is None and "drained" in entry["error"]  # never waited for, never PASS
    assert run_node_doctor.overall([entry]) == 3 and run_node_doctor.overall([]) == 3
    for bad in (["0"], ["x"], ["--node-timeout", "1"], ["--efa-window", "nan"], ["--parallel", "0"]):
        with pytest.raises(SystemExit) as exc:
            run_node_doctor.parse_args(bad)
        assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


BIN = Path(__file__).resolve().parents[2] / "scripts" / "bin"


def test_run_node_doctor_wrapper_and_hpq_doctor_refuse_bad_input_in_one_line(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "HPQ_LAUNCHER_PYTHON": sys.executable}
    res = subprocess.run([str(BIN / "run-node-doctor")], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
                         timeout=60, preexec_fn=lambda: os.close(1))
    assert (res.returncode, res.stderr.strip()) == (2, "run-node-doctor: error: standard output is closed")
    res = subprocess.run([str(BIN / "run-node-doctor"), "--node-timeout", "0"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    # --fix without a terminal and without --yes: refused before anything is reached.
    res = subprocess.run([sys.executable, "-m", "hpq", "doctor", "my-cluster", "--fix", "--region", "us-west-2"],
                         cwd=tmp_path, env={**env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"},
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stderr.strip()) == (
        2, "hpq: error: --fix acts on the cluster: without a terminal to confirm on, pass --yes")


def test_dcgm_travels_from_the_request_to_each_node_with_its_bound():
    """hpq doctor --dcgm: the request's extra reaches run-node-doctor, which passes it to node_doctor and gives each
    node dcgmi's bound on top of its own; without it neither changes (the twin)."""
    assert "--dcgm" in node_command(TestRequest(DOCTOR, extra=("--dcgm",)))
    assert "--dcgm" not in node_command(TestRequest(DOCTOR))
    with_dcgm = run_node_doctor.parse_args(["--dcgm", "--efa-window", "0"])
    assert run_node_doctor.node_args(with_dcgm) == (["--efa-window", "0", "--dcgm"],
                                                    run_node_doctor.NODE_TIMEOUT_S + run_node_doctor.DCGM_EXTRA_S)
    assert run_node_doctor.DCGM_EXTRA_S >= node_doctor.DCGM_TIMEOUT_S
    assert run_node_doctor.node_args(run_node_doctor.parse_args([])) == ([], run_node_doctor.NODE_TIMEOUT_S)
    assert run_node_doctor.node_args(run_node_doctor.parse_args(["--dcgm", "--node-timeout", "300"]))[1] == 300
    for argv in (["--dcgm"], []):  # node_doctor itself accepts what it is given
        with pytest.raises(SystemExit) as exc:
            node_doctor.main(argv + ["--help"])
        assert exc.value.code == 0
