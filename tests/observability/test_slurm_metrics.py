"""scripts/slurm_metrics.py: Slurm's node and queue state as the Slurm exporter's series.

The names must be the ones SckyzO/slurm_exporter v1.1.0 emits (tests/observability/data/exporters/slurm_exporter.txt,
read from its internal/collector/*.go), so the dashboards and alerts written for AWS's exporter work unchanged.
The real test (slow) runs the writer's own commands against the real two-node Slurm of tests/slurm_cluster.py
(Debian's Slurm 22.05) with a held job in the queue, and reads the output back with prometheus_client's parser.
The fast tests check the parsing rules the exporter's source states (nodes.go's prefix switch, queue.go's
states) on output in the formats the commands are given (sinfo(1) ``%D|%T|%b``, ``-O`` fields; squeue(1)
``%P,%T,%C,%r,%u``), each with a broken twin.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpq.scripts import slurm_metrics
from tests.support import CHECKOUT

EXPORTER_NAMES = {
    line.strip()
    for line in (Path(CHECKOUT) / "tests/observability/data/exporters/slurm_exporter.txt")
    .read_text()
    .splitlines()
    if line.strip() and not line.startswith("#")
}


def parse(text: str) -> dict:
    """{(name, frozenset(labels)): value} through Prometheus's own Python parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def runner(answers: dict):
    """A stand-in for the Slurm commands: answers only the exact argv it knows, None (failed) for any other."""
    calls = []

    def run(argv):
        calls.append(list(argv))
        return answers.get(tuple(argv))

    run.calls = calls
    return run


def test_node_states_follow_the_exporters_prefix_rule():
    fam = slurm_metrics.Families()
    slurm_metrics.add_nodes(
        fam,
        "dev",
        "2|idle|(null)\n1|down*|gpu,efa\n1|drained|efa,gpu\n3|allocated+|(null)\n"
        "1|reserved|(null)\n2|future|(null)\n2|idle|(null)\n",
    )
    got = parse(fam.render())
    assert got[("slurm_nodes_idle", frozenset({("partition", "dev"), ("active_feature_set", "null")}))] == 2
    assert (
        got[("slurm_nodes_down", frozenset({("partition", "dev"), ("active_feature_set", "efa,gpu")}))] == 1
    )
    assert (
        got[("slurm_nodes_drain", frozenset({("partition", "dev"), ("active_feature_set", "efa,gpu")}))] == 1
    )
    assert got[("slurm_nodes_alloc", frozenset({("partition", "dev"), ("active_feature_set", "null")}))] == 3
    assert got[("slurm_nodes_resv", frozenset({("partition", "dev"), ("active_feature_set", "null")}))] == 1
    assert got[("slurm_nodes_other", frozenset({("partition", "dev"), ("active_feature_set", "null")}))] == 2
    # The broken twin: "idle" spelled as sinfo never prints it is not counted as idle.
    twin = slurm_metrics.Families()
    slurm_metrics.add_nodes(twin, "dev", "2|Idle|(null)\n")
    assert not any(k[0] == "slurm_nodes_idle" for k in parse(twin.render()))


def test_queue_counts_jobs_and_cores_by_state_user_partition_and_pending_reason():
    fam = slurm_metrics.Families()
    slurm_metrics.add_queue(
        fam,
        "dev,RUNNING,4,None,alice\ndev,RUNNING,2,None,alice\ndev,PENDING,8,Resources,bob\n"
        "dev,PENDING,1,JobHeldUser,bob\ngpu,COMPLETING,2,None,carol\ndev,BOOT_FAIL,1,None,x\n",
    )
    got = parse(fam.render())
    assert got[("slurm_queue_running", frozenset({("partition", "dev"), ("user", "alice")}))] == 2
    assert got[("slurm_cores_running", frozenset({("partition", "dev"), ("user", "alice")}))] == 6
    assert (
        got[
            (
                "slurm_queue_pending",
                frozenset({("partition", "dev"), ("user", "bob"), ("reason", "Resources")}),
            )
        ]
        == 1
    )
    assert (
        got[
            (
                "slurm_cores_pending",
                frozenset({("partition", "dev"), ("user", "bob"), ("reason", "Resources")}),
            )
        ]
        == 8
    )
    assert got[("slurm_queue_completing", frozenset({("partition", "gpu"), ("user", "carol")}))] == 1
    assert not any("boot_fail" in k[0] for k in got)  # a state the exporter does not count is not invented


def test_every_name_written_is_one_the_exporter_emits():
    answers = {
        tuple(slurm_metrics.COMMANDS["partitions"]): "dev\n",
        tuple(slurm_metrics.nodes_command("dev")): "2|idle|(null)\n",
        tuple(slurm_metrics.COMMANDS["total"]): "NodeName=node-1\nNodeName=node-2\n",
        tuple(
            slurm_metrics.COMMANDS["node"]
        ): "node-1 0 1000 0/2/0/2 idle dev\nnode-2 0 1000 0/2/0/2 idle dev\n",
        tuple(slurm_metrics.COMMANDS["cpus"]): "0/4/0/4\n",
        tuple(slurm_metrics.COMMANDS["queue"]): "dev,PENDING,1,JobHeldUser,root\n",
    }
    text, ok = slurm_metrics.collect(runner(answers))
    assert ok
    names = {k[0] for k in parse(text)}
    assert names - {"slurm_metrics_up"} <= EXPORTER_NAMES, names - EXPORTER_NAMES
    assert {
        "slurm_nodes_idle",
        "slurm_nodes_total",
        "slurm_node_status",
        "slurm_cpus_total",
        "slurm_queue_pending",
    } <= names


def test_a_failed_command_leaves_its_families_out_and_says_so():
    """The broken twin of the above: squeue fails (slurmctld down): no queue series, not zeros; up is 0."""
    answers = {
        tuple(slurm_metrics.COMMANDS["partitions"]): "dev\n",
        tuple(slurm_metrics.nodes_command("dev")): "2|idle|(null)\n",
        tuple(slurm_metrics.COMMANDS["total"]): "NodeName=node-1\n",
        tuple(slurm_metrics.COMMANDS["node"]): "",
        tuple(slurm_metrics.COMMANDS["cpus"]): "0/4/0/4\n",
    }
    text, ok = slurm_metrics.collect(runner(answers))
    got = parse(text)
    assert not ok and got[("slurm_metrics_up", frozenset())] == 0
    assert not any(k[0].startswith(("slurm_queue_", "slurm_cores_")) for k in got)
    assert got[("slurm_cpus_total", frozenset())] == 4


def test_write_once_replaces_the_file_atomically(tmp_path):
    target = tmp_path / slurm_metrics.OUTPUT_NAME
    target.write_text("old\n")
    assert slurm_metrics.write_once(str(tmp_path), runner({})) is False
    assert parse(target.read_text())[("slurm_metrics_up", frozenset())] == 0
    assert [p.name for p in tmp_path.iterdir()] == [slurm_metrics.OUTPUT_NAME]  # no temporary left behind


def test_an_unwritable_file_is_one_line_and_exit_2_not_a_traceback(tmp_path, monkeypatch, capsys):
    """files.write_file refuses with WriteRefused (not OSError): main must still answer in one line."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # every command fails: families left out
    (tmp_path / slurm_metrics.OUTPUT_NAME).mkdir()  # its place taken: the rename fails, even for root
    assert slurm_metrics.main(["--textfile-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("slurm_metrics: cannot write ") and slurm_metrics.OUTPUT_NAME in err[-1]


@pytest.mark.parametrize("args", [["--every", "1"], ["--every", "-3"], ["--every", "x"]])
def test_bad_interval_is_one_line_and_exit_2(args):
    res = subprocess.run(
        ["python3", "-m", "hpq.scripts.slurm_metrics", *args], capture_output=True, text=True, cwd=CHECKOUT
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_against_real_slurm(slurm_cluster, tmp_path):
    """The writer's own commands against Debian's Slurm: two idle nodes, then a held job in the queue."""
    slurm_cluster.wait_idle()

    def run(argv):
        res = slurm_cluster.run(list(argv))
        return res.stdout if res.returncode == 0 else None

    job = slurm_cluster.run(["sbatch", "--hold", "-N1", "-p", "dev", "--parsable", "--wrap", "true"])
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        time.sleep(1)
        raw = {k: run(v) for k, v in slurm_metrics.COMMANDS.items()}
        (tmp_path / "raw.txt").write_text(repr(raw))
        text, ok = slurm_metrics.collect(run)
    finally:
        slurm_cluster.run(["scancel", job_id])
    assert ok, raw
    got = parse(text)
    nodes = slurm_cluster.nodes
    assert got[("slurm_nodes_total", frozenset())] == len(nodes)
    assert got[
        ("slurm_nodes_idle", frozenset({("partition", "dev"), ("active_feature_set", "null")}))
    ] == len(nodes)
    for node in nodes:
        key = ("slurm_node_status", frozenset({("node", node), ("status", "idle"), ("partition", "dev")}))
        assert got.get(key) == 1, (raw["node"], text)
    assert got[("slurm_cpus_total", frozenset())] == sum(
        got[k] for k in got if k[0] == "slurm_node_cpu_total"
    )
    pending = {dict(k[1])["reason"]: v for k, v in got.items() if k[0] == "slurm_queue_pending"}
    assert pending.get("JobHeldUser") == 1, (pending, raw["queue"])


def test_default_partition_star_is_dropped_so_node_and_nodes_families_join():
    """Real Slurm 22.05 prints the default partition as ``dev*`` in ``-O Partition`` (seen by the real test above)."""
    fam = slurm_metrics.Families()
    slurm_metrics.add_node(
        fam,
        "node-1              0                   500                 0/2/0/2             idle"
        "                dev*\nnode-2 0 500 0/2/0/2 idle other\nshort line\n",
    )
    got = parse(fam.render())
    assert (
        got[("slurm_node_status", frozenset({("node", "node-1"), ("status", "idle"), ("partition", "dev")}))]
        == 1
    )
    assert (
        got[
            (
                "slurm_node_cpu_total",
                frozenset({("node", "node-2"), ("status", "idle"), ("partition", "other")}),
            )
        ]
        == 2
    )
    assert len([k for k in got if k[0] == "slurm_node_status"]) == 2  # the short line is skipped, not guessed
