"""Shell completion (docs/cli.md): variants and sizes from hpq's lists, cluster names of kept
rehearsals and of hpq stacks; a TAB with AWS out of reach answers quickly and prints no error.
Through click's real completion protocol (_HPQ_COMPLETE=bash_complete), as the shell calls it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpq.cli.inputs import completion
from hpq.rehearsal import state
from hpq.vocab import SIZES, VARIANTS
from tests.support import free_port


def complete(words: str, env_extra: dict[str, str]) -> tuple[list[str], str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(_HPQ_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(len(words.split()) if
               words.endswith(" ") else len(words.split()) - 1), **env_extra)
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "hpq"], env=env, capture_output=True, text=True, timeout=60)
    return [ln.split(",", 1)[1] for ln in res.stdout.splitlines() if "," in ln], res.stderr, time.monotonic() - start


@pytest.fixture
def offline(tmp_path: Path) -> dict[str, str]:
    """AWS at a closed local port, fake credentials, no state dir: nothing to find anywhere."""
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2",
            "HOME": str(tmp_path), "HPQ_REHEARSE_STATE_DIR": str(tmp_path / "none")}


def test_variants_and_sizes_complete(offline: dict[str, str]):
    assert complete("hpq deploy ", offline)[0] == sorted(VARIANTS)
    assert complete("hpq deploy slurm-", offline)[0] == sorted(v for v in VARIANTS if v.startswith("slurm-"))
    assert complete("hpq synth slurm-gpu --size ", offline)[0] == sorted(SIZES)


def test_cluster_names_with_aws_out_of_reach_are_empty_quickly_and_silent(offline: dict[str, str]):
    names, err, took = complete("hpq test nccl ", offline)
    assert names == [] and err == "" and took < 20


def test_kept_rehearsals_are_offered_as_clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)
    for run_id in ("abc123", "def456"):
        state.RunState(run_id=run_id, variant="slurm-gpu", pid=1, started=0.0,  # paths as a rehearsal names them
                       workdir=str(tmp_path / f"hpq-rehearse-{run_id}-x"), logdir=str(tmp_path / run_id),
                       cluster_name=f"hpq-rehearse-{run_id}").save()
    monkeypatch.setattr(completion, "completion_names", lambda kind, region, profile: [])  # no AWS here
    got = [i.value for i in completion.aws_names("cluster", None, "hpq-rehearse-a")]
    assert got == ["hpq-rehearse-abc123"]
    assert [i.value for i in completion.aws_names("stack", None, "")] == []  # a rehearsal is no stack
