"""``hpq synth`` / ``hpq lint`` as a user runs them: real subprocesses, real cfn-lint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hpq.cfn import synth

HEAVY = ("troposphere", "boto3", "botocore", "cfnlint")


def hpq(*args, env_extra=None, cwd=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "hpq", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.fixture()
def state_env(tmp_path):
    return {"HPQ_STATE_DIR": str(tmp_path / "state")}


@pytest.mark.parametrize("args", [
    ["synth", "no-such-variant", "-o", "OUT"],
    ["synth", "slurm-gpu", "--size", "huge", "-o", "OUT"],
    ["synth", "slurm-gpu", "--param", "NoSuchParam=1", "-o", "OUT"],
    ["synth", "slurm-gpu", "--param", "WorkerInstanceType=ml.trn1.32xlarge", "-o", "OUT"],
    ["synth", "eks-trn", "--param", "WorkerInstanceType=ml.nope.48xlarge", "-o", "OUT"],
    ["synth", "slurm-gpu", "--param", "novalue", "-o", "OUT"],
    ["synth", "slurm-gpu", "--param", "WorkerCount=nan", "-o", "OUT"],
    ["synth", "-o", "OUT"],
    ["synth", "slurm-gpu", "--all", "-o", "OUT"],
])
def test_bad_input_exits_2_with_one_line(tmp_path, state_env, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    res = hpq(*args, env_extra=state_env)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpq: error:"), res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["--help"], ["synth", "--help"], ["lint", "--help"]])
def test_help_imports_nothing_heavy(argv):
    code = (
        "import sys\n"
        "from hpq.cli import main\n"
        f"try:\n    main.main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Examples:" in res.stdout
    if argv == ["--help"]:
        assert "synth" in res.stdout and "lint" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout


def test_help_is_fast():
    best = min(_timed(["--help"]) for _ in range(3))
    assert best < 0.5, f"hpq --help took {best:.2f}s"


def _timed(args):
    start = time.monotonic()
    assert hpq(*args).returncode == 0
    return time.monotonic() - start


def test_synth_help_has_examples():
    for cmd in ("synth", "lint"):
        res = hpq(cmd, "--help")
        assert res.returncode == 0 and "Examples:" in res.stdout


def test_synth_then_lint_clean_then_broken(tmp_path, state_env):
    out = tmp_path / "out"
    res = hpq("synth", "slurm-gpu", "-o", str(out), "--size", "medium", "--param", "WorkerCount=3",
              env_extra=state_env)
    assert res.returncode == 0, res.stderr
    written = res.stdout.split()
    names = sorted(os.path.basename(p) for p in written)
    assert names == sorted(p.name for p in (out / "slurm-gpu").iterdir() if p.name != synth.MANIFEST_FILE)
    # The manifest lists exactly what synth wrote: the only files a later synth may replace or remove.
    listed = (out / "slurm-gpu" / synth.MANIFEST_FILE).read_text().splitlines()[1:]
    assert sorted(line.split("  ")[1] for line in listed) == names
    root = json.loads((out / "slurm-gpu" / "root.json").read_text())
    assert root["Parameters"]["WorkerCount"]["Default"] == "3"
    # A bare `hpq lint` lints what the last synth wrote, in every region the variant deploys to, showing progress.
    res = hpq("lint", env_extra=state_env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "9 templates" in res.stderr and "cfn-lint 1/9 files" in res.stderr and "cfn-lint 9/9 files" in res.stderr
    # stderr is a pipe here, as in a CI log: whole lines, never counts run together with \r (issue 25 review item 4)
    assert "\r" not in res.stderr and [f"hpq: cfn-lint {i}/9 files" for i in range(1, 10)] == [
        line for line in res.stderr.splitlines() if "cfn-lint" in line and "/9 files" in line]
    security = out / "slurm-gpu" / "Security.json"
    doc = json.loads(security.read_text())
    doc["Parameters"]["Unused"] = {"Type": "String"}
    security.write_text(json.dumps(doc))
    res = hpq("lint", str(out), "--region", "us-east-1", env_extra=state_env)
    assert res.returncode == 1
    assert "Security.json" in res.stdout and "W2001" in res.stdout


def test_lint_without_templates_exits_2(tmp_path, state_env):
    res = hpq("lint", str(tmp_path), env_extra=state_env)
    assert res.returncode == 2 and "no *.json templates" in res.stderr


def test_unwritable_output_folder_exits_2(tmp_path, state_env):
    (tmp_path / "file").write_text("not a folder")
    res = hpq("synth", "slurm-gpu", "-o", str(tmp_path / "file" / "out"), env_extra=state_env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "a part of its path is a file" in res.stderr


def test_lint_unknown_region_exits_2(tmp_path, state_env):
    (tmp_path / "t.json").write_text(json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}))
    res = hpq("lint", str(tmp_path), "--region", "xx-nowhere-1", env_extra=state_env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "hpq: error: Invalid value for '--region': region 'xx-nowhere-1' is not a region this botocore knows "
        "(upgrade botocore if the region is new)"]


def test_synth_renders_a_newer_kubernetes_version_only_on_request_and_warns(tmp_path, state_env):
    """HyperPod documents up to 1.34 (cfn/eks.py): asking for 1.35 renders it, with a warning on stderr."""
    res = hpq("synth", "eks-gpu", "-o", str(tmp_path), "--param", "KubernetesVersion=1.35", env_extra=state_env)
    assert res.returncode == 0, res.stderr
    assert "hpq: warning: KubernetesVersion 1.35 is newer than every version SageMaker HyperPod documents" in res.stderr
    root = json.loads((tmp_path / "eks-gpu" / "root.json").read_text())
    assert root["Parameters"]["KubernetesVersion"]["Default"] == "1.35"
    res = hpq("synth", "eks-gpu", "-o", str(tmp_path), "--param", "KubernetesVersion=1.36", env_extra=state_env)
    assert res.returncode == 2 and "KubernetesVersion='1.36' is not allowed" in res.stderr
