"""`hpq deploy -t TYPE -n N`: hpq's one spelling of instance type and node count (docs/cli.md) on deploy too,
standing for the root parameters WorkerInstanceType and WorkerCount. Bad input is one line and exit 2 before
any AWS call (no credentials are given here); the moto deploy in tests/aws/test_aws_deploy.py updates a stack
with ``-n 3`` and finds WorkerCount 3 in the plan and in CloudFormation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpq.cli.commands.deploy import worker_params
from hpq.errors import UsageError


def test_the_options_become_the_parameters_they_name():
    assert worker_params(("VpcCidr=10.2.0.0/16",), "ml.p5.48xlarge", 4) == (
        "VpcCidr=10.2.0.0/16", "WorkerInstanceType=ml.p5.48xlarge", "WorkerCount=4")
    assert worker_params(("WorkerCount=4",), None, None) == ("WorkerCount=4",)
    with pytest.raises(UsageError, match="-t/--instance-type and --param WorkerInstanceType="):
        worker_params(("WorkerInstanceType=ml.g5.16xlarge",), "ml.p5.48xlarge", None)


@pytest.mark.parametrize(("args", "why"), [
    (["slurm-gpu", "-n", "3", "--param", "WorkerCount=4"], "-n/--nodes and --param WorkerCount= set the same"),
    (["slurm-gpu", "-t", "ml.m5.xlarge"], "has no GPU or Trainium accelerator"),
    (["slurm-trn", "-t", "ml.p5.48xlarge"], "is not a Trainium type for slurm-trn"),
    (["slurm-gpu", "-n", "0"], "-n"),
    (["slurm-gpu", "-t", "ml.nope.9xlarge"], "-t"),
])
def test_bad_worker_options_are_one_line_and_exit_2(tmp_path, args, why):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    res = subprocess.run([sys.executable, "-m", "hpq", "deploy", args[0], "my-hpq-bucket", *args[1:],
                          "--region", "us-west-2"], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL, cwd=tmp_path, env={**env, "HOME": str(tmp_path)})
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and why in res.stderr and "Traceback" not in res.stderr, res.stderr
