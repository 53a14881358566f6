"""scripts/slurm_metrics.py: Slurm's node and queue state as the Slurm exporter's series.

The names must be the ones SckyzO/slurm_exporter v1.1.0 emits (tests/observability/data/exporters/slurm_exporter.txt,
read from its internal/collector/*.go), so the dashboards and alerts written for AWS's exporter work unchanged.
The real test (slow) runs the writer's own commands against the real two-node Slurm of tests/slurm_cluster.py
(Debian's Slurm 22.05) with a held job in the queue, and reads the output back with prometheus_client's parser.
The fast tests check the parsing rules the exporter's source states (nodes.go's prefix switch, queue.go's
states) on output in the formats the commands are given (sinfo(1) ``%D|%T|%b``, ``-O`` fields; squeue(1)
``%P,%T,%C,%r,%u``), each with a broken twin. The scheduler series (scheduler.go's sdiag parsing) are read from
a real ``sdiag`` of Slurm 22.05 (data/sdiag_22.05.txt; data/README.md says how it was captured) and its broken
twins: cut short, a line missing, a value not a number, sdiag failing or answering nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpq.lifecycle import bundle
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
        tuple(slurm_metrics.COMMANDS["scheduler"]): SDIAG,
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
        "slurm_scheduler_queue_size",
        "slurm_scheduler_last_cycle",
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

    # A job that runs to its end first: the main scheduler has then had a cycle that started a job.
    ran = slurm_cluster.run(["sbatch", "--wait", "-N1", "-p", "dev", "--wrap", "true"], timeout=90)
    assert ran.returncode == 0, ran.stderr
    slurm_cluster.wait_idle()
    job = slurm_cluster.run(["sbatch", "--hold", "-N1", "-p", "dev", "--parsable", "--wrap", "true"])
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        time.sleep(1)
        raw = {k: run(v) for k, v in slurm_metrics.COMMANDS.items()}
        (tmp_path / "raw.txt").write_text(repr(raw))
        (tmp_path / "sdiag.txt").write_text(
            raw["scheduler"] or ""
        )  # kept: how data/sdiag_22.05.txt was taken
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
    # sdiag at that moment: every scheduler series the exporter reads from its unindented head and main section
    # is written, at what sdiag printed (the writer's own sdiag ran a moment after raw's; counts only grow).
    sched = {k[0]: v for k, v in got.items() if k[0].startswith("slurm_scheduler_")}
    assert {
        "slurm_scheduler_threads",
        "slurm_scheduler_queue_size",
        "slurm_scheduler_dbd_queue_size",
        "slurm_scheduler_last_cycle",
        "slurm_scheduler_backfilled_jobs_since_start_total",
    } <= set(sched), (raw["scheduler"], text)
    assert sched["slurm_scheduler_threads"] >= 1 and sched["slurm_scheduler_queue_size"] >= 0
    assert sched["slurm_scheduler_last_cycle"] > 0, raw["scheduler"]  # a job went through the main scheduler
    threads = re.search(r"^Server thread count:\s*(\d+)\s*$", raw["scheduler"], re.M)
    assert threads and int(threads.group(1)) >= 1 and sched["slurm_scheduler_threads"] >= 1, raw["scheduler"]
    # The same order of magnitude as the cycle sdiag printed (the scheduler may have run again in between).
    main_cycle = float(
        re.search(r"Main schedule statistics.*?Last cycle:\s*(\d+)", raw["scheduler"], re.S).group(1)
    )
    assert main_cycle / 100 <= sched["slurm_scheduler_last_cycle"] <= main_cycle * 100, (main_cycle, sched)
    assert got.get(("slurm_rpc_stats", frozenset({("operation", "REQUEST_SUBMIT_BATCH_JOB")}))) >= 1, text


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


SDIAG = (Path(CHECKOUT) / "tests/observability/data/sdiag_22.05.txt").read_text()


def scheduler_series(text: str) -> dict:
    fam = slurm_metrics.Families()
    slurm_metrics.add_scheduler(fam, text)
    return parse(fam.render())


def test_real_sdiag_gives_the_exporters_scheduler_series():
    """Real sdiag of Slurm 22.05 (data/README.md), read as SckyzO/slurm_exporter v1.1.0 reads it
    (internal/collector/scheduler.go: ParseSchedulerMetrics, ParseRpcStats)."""
    got = scheduler_series(SDIAG)
    one = {k[0]: v for k, v in got.items() if not k[1]}
    assert (
        one
        == {
            "slurm_scheduler_threads": 3,  # Server thread count:  3
            "slurm_scheduler_queue_size": 0,  # Agent queue size:     0
            "slurm_scheduler_dbd_queue_size": 0,  # DBD Agent queue size: 0
            "slurm_scheduler_last_cycle": 1471,  # Main schedule statistics: Last cycle:   1471
            "slurm_scheduler_mean_cycle": 1471,
            "slurm_scheduler_backfill_last_cycle": 0,  # Backfilling stats: Last cycle: 0
            "slurm_scheduler_backfilled_jobs_since_start_total": 0,
            "slurm_scheduler_backfilled_jobs_since_cycle_total": 0,
            "slurm_scheduler_backfilled_heterogeneous_total": 0,
        }
    )  # no "Cycles per minute", backfill "Mean cycle" or "Depth Mean": sdiag did not print them, none invented
    assert got[("slurm_rpc_stats", frozenset({("operation", "REQUEST_SUBMIT_BATCH_JOB")}))] == 2
    assert got[("slurm_rpc_stats_avg_time", frozenset({("operation", "REQUEST_SUBMIT_BATCH_JOB")}))] == 4621
    assert got[("slurm_rpc_stats_total_time", frozenset({("operation", "REQUEST_NODE_INFO")}))] == 2827
    assert got[("slurm_user_rpc_stats", frozenset({("user", "root")}))] == 26
    assert len([k for k in got if k[0] == "slurm_rpc_stats"]) == 10
    assert {k[0] for k in got} <= EXPORTER_NAMES


def test_backfill_mean_and_depth_are_read_from_the_backfill_section_once_printed():
    """sdiag prints backfill's Mean cycle and Depth Mean once a backfill cycle ran: the same real output with them."""
    text = SDIAG.replace(
        "\tLast depth cycle: 0\n",
        "\tMean cycle: 2500\n\tLast depth cycle: 0\n\tDepth Mean: 3\n\tDepth Mean (try depth): 3\n",
    )
    assert text != SDIAG
    got = {k[0]: v for k, v in scheduler_series(text).items() if not k[1]}
    assert (
        got["slurm_scheduler_backfill_mean_cycle"] == 2500 and got["slurm_scheduler_backfill_depth_mean"] == 3
    )
    assert got["slurm_scheduler_mean_cycle"] == 1471  # the main one is not overwritten by the backfill one
    # "Cycles per minute" (main section) is printed once slurmctld has run a minute: read where it is printed.
    per_minute = SDIAG.replace("\tLast queue length: 1\n", "\tCycles per minute: 2\n\tLast queue length: 1\n")
    assert per_minute != SDIAG
    assert scheduler_series(per_minute)[("slurm_scheduler_cycle_per_minute", frozenset())] == 2


def test_a_missing_main_cycle_line_is_left_out_not_taken_from_backfill():
    """Broken twin: the main section without its Last cycle; the exporter's order rule would take backfill's 0."""
    text = SDIAG.replace("\tLast cycle:   1471\n", "")
    assert text != SDIAG
    got = {k[0]: v for k, v in scheduler_series(text).items() if not k[1]}
    assert "slurm_scheduler_last_cycle" not in got and got["slurm_scheduler_backfill_last_cycle"] == 0
    assert got["slurm_scheduler_threads"] == 3


def test_truncated_sdiag_writes_only_what_it_printed():
    """Broken twin: output cut inside the main section (a killed sdiag): no backfill or RPC series, no zeros."""
    cut = SDIAG[: SDIAG.index("\tMean cycle:")] + "\tMean cyc"
    got = {k[0]: v for k, v in scheduler_series(cut).items()}
    assert got == {
        "slurm_scheduler_threads": 3,
        "slurm_scheduler_queue_size": 0,
        "slurm_scheduler_dbd_queue_size": 0,
        "slurm_scheduler_last_cycle": 1471,
    }


def test_a_value_that_is_not_a_number_is_left_out():
    text = SDIAG.replace("Agent queue size:     0", "Agent queue size:     N/A")
    got = {k[0] for k in scheduler_series(text)}
    assert "slurm_scheduler_queue_size" not in got and "slurm_scheduler_threads" in got


def command_answers(sdiag):
    answers = {
        tuple(slurm_metrics.COMMANDS["partitions"]): "dev\n",
        tuple(slurm_metrics.nodes_command("dev")): "2|idle|(null)\n",
        tuple(slurm_metrics.COMMANDS["total"]): "NodeName=node-1\nNodeName=node-2\n",
        tuple(slurm_metrics.COMMANDS["node"]): "node-1 0 1000 0/2/0/2 idle dev\n",
        tuple(slurm_metrics.COMMANDS["cpus"]): "0/4/0/4\n",
        tuple(slurm_metrics.COMMANDS["queue"]): "dev,PENDING,1,JobHeldUser,root\n",
    }
    if sdiag is not None:
        answers[tuple(slurm_metrics.COMMANDS["scheduler"])] = sdiag
    return answers


def test_collect_writes_the_scheduler_series_when_sdiag_answers():
    text, ok = slurm_metrics.collect(runner(command_answers(SDIAG)))
    got = parse(text)
    assert ok and got[("slurm_metrics_up", frozenset())] == 1
    assert got[("slurm_scheduler_last_cycle", frozenset())] == 1471
    assert {k[0] for k in got} - {"slurm_metrics_up"} <= EXPORTER_NAMES


@pytest.mark.parametrize("sdiag", [None, "", "sdiag: error: Unable to contact slurm controller\n"])
def test_a_failed_or_empty_sdiag_leaves_the_scheduler_out_and_up_is_0(sdiag, capsys):
    """Broken twins: sdiag exits non-zero (the runner answers None) or prints nothing it knows."""
    text, ok = slurm_metrics.collect(runner(command_answers(sdiag)))
    got = parse(text)
    assert not ok and got[("slurm_metrics_up", frozenset())] == 0
    assert not any(k[0].startswith(("slurm_scheduler_", "slurm_rpc_", "slurm_user_rpc_")) for k in got)
    assert got[("slurm_cpus_total", frozenset())] == 4  # the other families are still written
    if sdiag is not None:
        assert "sdiag" in capsys.readouterr().err


def test_sdiag_exiting_non_zero_is_a_failed_command(tmp_path, monkeypatch, capsys):
    """The real run_command on an sdiag that prints its stats but exits 1: nothing of it is used."""
    fake = tmp_path / "sdiag"
    fake.write_text(
        "#!/bin/sh\ncat '%s'\necho 'sdiag: error: cut short' >&2\nexit 1\n"
        % (Path(CHECKOUT) / "tests/observability/data/sdiag_22.05.txt")
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm_metrics.run_command(["sdiag"]) is None
    assert "sdiag exited 1: sdiag: error: cut short" in capsys.readouterr().err
    monkeypatch.setattr(slurm_metrics, "COMMAND_TIMEOUT_S", 0.5)
    fake.write_text("#!/bin/sh\nsleep 5\n")
    started = time.monotonic()
    assert slurm_metrics.run_command(["sdiag"]) is None and time.monotonic() - started < 4


def test_it_keeps_to_python37_and_reads_sdiag_there(tmp_path):
    """The controller may run AL2's Python 3.7 (tests/lifecycle/test_lifecycle_python37.py): the static 3.7 check,
    and where a real 3.7 exists, the module run from the bundle on it with an sdiag that prints the real capture
    (the other Slurm commands absent: their families left out, exit 1, the scheduler series still written)."""
    from tests.lifecycle.test_lifecycle_python37 import PY37_CANDIDATES, py37_offences

    assert py37_offences(Path(slurm_metrics.__file__).read_text(), "slurm_metrics.py") == []
    py37 = next((shutil.which(c) for c in PY37_CANDIDATES if shutil.which(c)), None)
    if py37 is None:
        return  # the static check above is the guard where no 3.7 interpreter exists
    for key, src_path in bundle.node_bundle_files().items():
        dest = tmp_path / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src_path).read_bytes())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sdiag").write_text(
        "#!/bin/sh\nexec /bin/cat '%s'\n" % (Path(CHECKOUT) / "tests/observability/data/sdiag_22.05.txt")
    )
    (bindir / "sdiag").chmod(0o755)
    done = subprocess.run(
        [py37, "-S", "-m", "hpq.scripts.slurm_metrics", "--stdout"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": str(bindir)},
    )
    assert done.returncode == 1, done.stderr
    got = parse(done.stdout)
    assert (
        got[("slurm_scheduler_last_cycle", frozenset())] == 1471
        and got[("slurm_metrics_up", frozenset())] == 0
    )
    assert not any(k[0].startswith("slurm_queue_") for k in got)


def scheduler_panel_names() -> set:
    from tests.observability.test_observability_assets import dashboard_queries, selected_metrics

    board = json.loads((Path(CHECKOUT) / "observability/dashboards/slurm.json").read_text())
    queries = [e for w, e in dashboard_queries(board) if w.startswith("panel 'Scheduler queue and cycle'")]
    assert len(queries) == 2, queries
    return set().union(*(selected_metrics(e) for e in queries))


def test_the_dashboards_scheduler_panel_selects_names_the_writer_writes():
    """observability/dashboards/slurm.json's "Scheduler queue and cycle" queries (parsed with the PromQL parser of
    tests/observability/test_observability_assets.py) select series the writer writes from the real sdiag; the
    twin without sdiag writes none of them (the panel would be empty, as it was before the writer ran sdiag)."""
    names = scheduler_panel_names()
    assert names == {"slurm_scheduler_queue_size", "slurm_scheduler_last_cycle"}
    written = {k[0] for k in parse(slurm_metrics.collect(runner(command_answers(SDIAG)))[0])}
    assert names <= written
    without = {k[0] for k in parse(slurm_metrics.collect(runner(command_answers(None)))[0])}
    assert not names & without
