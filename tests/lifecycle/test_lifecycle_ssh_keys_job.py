"""Without a shared filesystem the controller hands the cluster key over Slurm: to exactly the workers.

The sbatch here is a stand-in that behaves like Slurm 22.05's for the two cases that matter: a job whose
``--nodelist`` names a node outside every partition is refused at submission ("Requested node configuration
is not available", exit 1, as slurmctld answers), any other job is accepted with its id on stdout
(``--parsable``). The real-daemon path of the same job is tests/lifecycle/test_lifecycle_slurm.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hpq.lifecycle import context, identity, ssh_keys
from tests.slurm_cluster import make_context

SBATCH = """#!/bin/sh
# args recorded one per line; stdin (the script) kept
printf '%s\\n' "$@" >> {rec}
echo ---- >> {rec}
cat > /dev/null
for a in "$@"; do
  case "$a" in --nodelist=*) for n in $(echo "${{a#--nodelist=}}" | tr , ' '); do
      case " {partitioned} " in *" $n "*) ;; *)
        echo "sbatch: error: Batch job submission failed: Requested node configuration is not available"; exit 1;;
      esac; done;;
  esac
done
n=$(cat {counter} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {counter}; echo $n
"""


def controller(tmp_path: Path, login: list[str]) -> tuple[context.Context, Path]:
    prefix = tmp_path / "slurm"
    (prefix / "bin").mkdir(parents=True)
    rec = tmp_path / "sbatch.calls"
    sbatch = prefix / "bin/sbatch"
    sbatch.write_text(SBATCH.format(rec=rec, counter=tmp_path / "jobid", partitioned="ip-10-1-0-21 ip-10-1-0-22"))
    sbatch.chmod(0o755)
    ctx = make_context(tmp_path / "root", HPQ_SLURM_PREFIX=str(prefix))
    ctx.node = identity.NodeInfo("c", "i-c", "controller-1", "controller", identity.CONTROLLER, "10.1.0.10",
                                 "ml.m5.xlarge", ["10.1.0.10"], ["controller-1"], worker_count=2,
                                 worker_nodes=["ip-10-1-0-21", "ip-10-1-0-22"], login_nodes=login)
    return ctx, rec


def calls(rec: Path) -> list[list[str]]:
    return [c.strip().splitlines() for c in rec.read_text().split("----") if c.strip()]


def test_key_job_names_exactly_the_workers(tmp_path):
    ctx, rec = controller(tmp_path, login=[])
    private, public = ssh_keys.generate("ubuntu@c")
    out = ssh_keys.distribute_over_slurm(ctx, "ubuntu", private, public)
    assert "queued Slurm job 1" in str(out) and not isinstance(out, context.Degraded)
    (only,) = calls(rec)
    assert "--nodelist=ip-10-1-0-21,ip-10-1-0-22" in only and "--nodes=2" in only


def test_login_node_outside_every_partition_is_a_warning_not_a_failure(tmp_path, caplog):
    ctx, rec = controller(tmp_path, login=["ip-10-1-0-30"])
    private, public = ssh_keys.generate("ubuntu@c")
    with caplog.at_level(logging.WARNING):
        out = ssh_keys.distribute_over_slurm(ctx, "ubuntu", private, public)
    assert isinstance(out, context.Degraded) and "ip-10-1-0-30 not reached" in str(out)
    assert "Requested node configuration is not available" in caplog.text
    workers, login = calls(rec)
    assert "--nodelist=ip-10-1-0-21,ip-10-1-0-22" in workers and "--nodelist=ip-10-1-0-30" in login
    # the workers' job keeps its name (what a user or the rehearsal waits for); the login one is its own
    assert f"--job-name={ssh_keys.JOB_NAME}" in workers and f"--job-name={ssh_keys.LOGIN_JOB_NAME}" in login
