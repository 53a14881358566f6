"""The NCCL and nanoGPT stages say their progress while the node program runs (issue 25 item 6).

What is real: OpenSSH (tests/sshd.py) as the controller's shell, the rehearsal's backend and the
validation interface, the judges, the timing. The node programs are scripts that print, at a real program's pace,
what the real ones print: the rows of tests/data/nccl/h100x1_run-nccl-test_builtin.txt (run-nccl-test's built-in
benchmark) and scripts/nanogpt.py's ``iter N: loss ...`` lines and ``# result: PATH`` line.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from hpq.aws.ssh import SshTarget
from hpq.rehearsal import backend as backend_mod
from hpq.rehearsal import plan
from hpq.rehearsal.stages import progress, workloads
from hpq.rehearsal.stages.base import Failure
from hpq.validation.slurm import SshShell
from tests.sshd import Sshd
from tests.support import CHECKOUT

pytestmark = pytest.mark.slow


def _program(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _input(sshd: Sshd, test: str, program: str) -> workloads.WorkloadInput:
    p = plan.new_plan("a1b2c3", "slurm-gpu", 2, "ml.g5.xlarge", False, "10.201.7.0/24")
    plan.add_nodes(p, [("controller", plan.CONTROLLER, "ml.m5.xlarge", 1),
                           ("worker", plan.WORKER, "ml.g5.xlarge", 2)])
    shell = SshShell(SshTarget(sshd.host, None, sshd.user, sshd.port, sshd.key, sshd.known_hosts, 20.0))
    backend = backend_mod.RehearsalBackend(shell, backend_mod.facts(p))
    backend.programs[test] = [program]
    return workloads.WorkloadInput(p, backend, "", 120)


class _Said:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str, str]] = []

    def __call__(self, who: str, message: str) -> None:
        self.lines.append((time.monotonic() - self.t0, who, message))

    def gaps(self) -> list[float]:
        times = [0.0] + [t for t, _, _ in self.lines]
        return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_nccl_stage_says_each_row_as_it_arrives_and_fails_on_the_missing_environment(sshd: Sshd, tmp_path):
    """16 rows printed 0.4 s apart: about one progress line a second, the biggest size last; the stage then fails
    at its own step (no hpq-env block from the ranks), attributed to the controller, its report kept."""
    sample = Path(CHECKOUT) / "tests/data/nccl/h100x1_run-nccl-test_builtin.txt"
    script = (f"head -n 32 {sample} | while IFS= read -r l; do printf '%s\\n' \"$l\"\n"
              "  case \"$l\" in ' '*) sleep 0.4;; esac\ndone\n"
              f"tail -n +33 {sample}\n")
    said = _Said()
    with pytest.raises(Failure) as exc:
        workloads.run_nccl(_input(sshd, "nccl", _program(tmp_path / "nccl", script)), said)
    rows = [m for _, who, m in said.lines if who == "nccl" and "busbw" in m]
    assert len(rows) >= 4, said.lines
    assert max(said.gaps()) < progress.QUIET_S + 1.5, said.lines
    f = exc.value
    assert (f.stage, f.node) == ("nccl", "controller") and "environment" in f.found and "nccl" in f.found


def test_nanogpt_stage_says_iterations_and_is_never_quiet_longer_than_its_limit(sshd: Sshd, tmp_path):
    """Iterations 1 s apart each become a line; a 12 s pause (a checkpoint, a slow node) gives a still-running line
    instead of silence. Broken twin: the same run with progress lines dropped has a gap over the limit."""
    result = tmp_path / "run.json"
    result.write_text(json.dumps({"outcome": "PASS", "message": "PASS: loss 4.2 -> 3.0 vs a falling loss: fell"}))
    script = "".join(f"echo 'iter {i}: loss {4.2 - i * 0.1:.4f} | 10.0 ms/iter | 1k tok/s'\nsleep 1\n"
                     for i in range(0, 12, 2))
    # then what rank 0 of scripts/nanogpt.py ends with (its log() lines), which the one nanoGPT judge reads
    script += ("sleep 12\necho 'summary: 1k tok/s total'\necho 'ranks on: 0=node-1'\n"
               "echo 'loss 4.2000 -> 3.2000: falls; ranks agree (checksum 1.234568e+03, spread 0)'\n"
               "echo 'RESULT: PASS'\n" + f"echo '# result: {result}'\n")
    said = _Said()
    data = workloads.run_nanogpt(_input(sshd, "nanogpt", _program(tmp_path / "nanogpt", script)), said)
    assert data["outcome"] == "PASS"
    iters = [m for _, who, m in said.lines if who == "nanogpt" and m.startswith("iter ")]
    assert len(iters) >= 5, said.lines
    assert any(m.startswith("still running") for _, _, m in said.lines)
    assert max(said.gaps()) < progress.QUIET_S + 1.5, said.lines
    quiet = [t for t, _, m in said.lines if not m.startswith(("iter ", "still running", "summary"))]
    assert max(b - a for a, b in zip(quiet, quiet[1:], strict=False)) > progress.QUIET_S + 1.5  # the twin
