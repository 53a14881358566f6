"""`hpq test` on a Slurm cluster: the command, the Slurm backend and the judges over a real OpenSSH sshd.

The controller is the sshd of tests/sshd.py (reached with --proxy-command, the stand-in for the
SSM hop); the node programs are small scripts that print what run-nccl-test / run-nanogpt print (the
nccl-tests table of tests/data/nccl/seed004_slurm_2x_g5.16xlarge_excerpt.txt, a measured log: docs/design.md,
"The measured runs"; run-nanogpt's `# result: PATH` line and its JSON
written on the "node" and read back over SSH). What is real: SSH, the remote exit status, coreutils
`timeout` on the controller, the judges.
"""

from __future__ import annotations

import json
import stat
import textwrap
import time

import pytest

from hpq.cli.main import main
from hpq.validation import slurm
from tests.aws.test_aws_remote import NCCL_OK, cli_args
from tests.sshd import Sshd

pytestmark = pytest.mark.slow


def _program(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _run(capfd, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capfd.readouterr()
    return int(exc.value.code), out, err


def test_hpq_test_nccl_is_remote_nccl_test(sshd: Sshd, tmp_path, capfd, monkeypatch):
    """The unified command and the old spelling reach the same verdict from the same node output."""
    for rate, code in (("3.02", 0), ("0.52", 1)):
        prog = _program(tmp_path, f"nccl-{rate}", NCCL_OK.replace("3.02", rate).replace("3.01", rate) +
                        'echo "args: $*" >&2\n')
        monkeypatch.setitem(slurm.PROGRAM, "nccl", [prog])
        new = _run(capfd, "test", "nccl", "c", "2", "1", *cli_args(sshd), "-t", "ml.g5.16xlarge", "--output", "json")
        old = _run(capfd, "remote-nccl-test", "c", "2", "1", *cli_args(sshd), "--runner", prog, "--instance-type",
                   "ml.g5.16xlarge", "--output", "json")
        assert new[0] == old[0] == code, (new, old)
        doc_new, doc_old = json.loads(new[1]), json.loads(old[1])
        assert doc_new["outcome"] == doc_old["outcome"] == ("PASS" if code == 0 else "FAIL")
        assert doc_new["verdict"]["message"] == doc_old["verdict"]["message"]
        assert doc_new["backend"] == "slurm" and doc_new["test"] == "nccl" and doc_new["nodes"] == 2
        assert "args: 2 1" in new[2]  # the node program's stderr reaches the user's stderr


def test_hpq_test_nanogpt_reads_the_nodes_result_back(sshd: Sshd, tmp_path, capfd, monkeypatch):
    """The training's own lines (streamed live) are the evidence, read by the one nanoGPT judge EKS uses too, with
    run-nanogpt's JSON read back from the node (its rank count, the ranks' environment check); a passing log from
    a run that exited non-zero is no PASS, and no training lines from a run that exited 0 is INCONCLUSIVE."""
    result = tmp_path / "run.json"
    lines = ["ranks on: 0=a, 1=b", "iter 10: loss 3.1",
             "loss 3.3000 -> 2.8000: falls; ranks agree (checksum 1.234560e+02, spread 0)", "RESULT: PASS"]

    def prog(doc: dict | None, rc: int, log: list[str]) -> str:
        write = f"cat > {result} <<'EOF'\n{json.dumps(doc)}\nEOF\n" if doc is not None else f"rm -f {result}\n"
        echo = "".join(f"echo '{ln}'\n" for ln in log)
        return _program(tmp_path, f"nanogpt-{rc}-{doc is not None}-{len(log)}",
                        write + echo + f"echo '# result: {result}'\nexit {rc}\n")

    passing = {"outcome": "PASS", "exit_status": 0, "nodes": 1, "processes_per_node": 2,
               "environment_check": {"ok": True, "problems": []}}
    fell_not = [ln.replace("2.8000: falls", "3.4000: DID NOT FALL") for ln in lines]
    cases = [(passing, 0, lines, 0, "PASS: loss 3.3000 -> 2.8000"), (passing, 1, lines, 1, None),
             (None, 0, lines[1:2], 3, "INCONCLUSIVE"), ({**passing, "exit_status": 1}, 1, fell_not, 1, "FAIL")]
    for doc, rc, log, code, head in cases:
        monkeypatch.setitem(slurm.PROGRAM, "nanogpt", [prog(doc, rc, log)])
        got, out, err = _run(capfd, "test", "nanogpt", "c", "2", *cli_args(sshd))
        assert got == code, (doc, rc, out, err)
        verdict = [ln for ln in out.splitlines() if ln.startswith(("PASS", "FAIL", "INCONCLUSIVE"))][0]
        assert "iter 10: loss 3.1" in out  # the node's log streamed live
        if head:
            assert verdict.startswith(head), verdict
        if code:
            assert not verdict.startswith("PASS")  # the verdict's first line never says PASS for a failed run


def test_hpq_test_saves_each_result_for_hpq_status(sshd: Sshd, tmp_path, capfd, monkeypatch):
    """Each judged result is saved as its test's latest for the cluster (hpq.validation.saved), the file being the
    result's JSON; a result that cannot be saved is one stderr line and the verdict and exit code are unchanged
    (broken twin: the results folder's place is taken by a file)."""
    from hpq.validation import saved

    monkeypatch.setenv(saved.RESULTS_DIR_ENV, str(tmp_path / "state"))
    target = tmp_path / "state" / "hpq" / "results" / "us-east-1" / "c" / "nccl.json"
    for rate, code, outcome in (("0.52", 1, "FAIL"), ("3.02", 0, "PASS")):
        prog = _program(tmp_path, f"nccl-{rate}", NCCL_OK.replace("3.02", rate).replace("3.01", rate))
        monkeypatch.setitem(slurm.PROGRAM, "nccl", [prog])
        got, out, err = _run(capfd, "test", "nccl", "c", "2", "1", *cli_args(sshd), "-t", "ml.g5.16xlarge",
                             "--region", "us-east-1", "--output", "json")
        assert got == code, err
        doc = json.loads(target.read_text())
        assert doc["outcome"] == outcome and doc["cluster"] == "c" and doc["region"] == "us-east-1"
        assert {k: v for k, v in doc.items() if k not in ("saved_at", "region")} == json.loads(out)
    assert [r["outcome"] for r in saved.latest("us-east-1", "c")] == ["PASS"]  # the latest replaced the FAIL
    (tmp_path / "blocked").write_text("a file where the state folder would be\n")
    monkeypatch.setenv(saved.RESULTS_DIR_ENV, str(tmp_path / "blocked"))
    got, out, err = _run(capfd, "test", "nccl", "c", "2", "1", *cli_args(sshd), "-t", "ml.g5.16xlarge",
                         "--region", "us-east-1")
    assert got == 0 and any(ln.startswith("PASS: ") for ln in out.splitlines()), (out, err)
    notes = [ln for ln in err.splitlines() if "not saved" in ln]
    assert len(notes) == 1 and notes[0].startswith("hpq: note: the result was not saved on this machine: "), err


def test_hpq_test_stops_a_test_past_its_timeout(sshd: Sshd, tmp_path, capfd, monkeypatch):
    """--timeout is enforced on the controller (coreutils timeout): a stuck node program is a FAIL, not a hang."""
    monkeypatch.setitem(slurm.PROGRAM, "nccl", [_program(tmp_path, "stuck", "sleep 60\n")])
    started = time.monotonic()
    code, out, err = _run(capfd, "test", "nccl", "c", "2", *cli_args(sshd), "--timeout", "2")
    assert code == 1 and time.monotonic() - started < 30
    assert out.startswith("FAIL: stopped vs within 2s"), out


def test_hpq_test_refuses_bad_requests_before_connecting(capfd):
    """Checked once, by the request: one line, exit 2, no SSH attempted (the proxy would fail loudly)."""
    base = ["--proxy-command", "false", "--host", "h"]
    for argv, words in ((["test", "sweep", "c", "1", *base], "NODES must be at least 2"),
                        (["test", "nccl", "c", "2", "--expect", "soon", *base], "--expect"),
                        (["test", "nccl", "c", "2", "9", "-t", "ml.g5.16xlarge", *base], "GPUS 9")):
        code, out, err = _run(capfd, *argv)
        assert code == 2 and out == "", (argv, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (argv, lines)
