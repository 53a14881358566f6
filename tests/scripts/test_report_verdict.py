"""Verdicts against healthy published measurements, per type and node count, and their broken twins.

The figures (lifecycle/catalog.py, each with its source):
- AWS, awslabs/awsome-distributed-ai micro-benchmarks/nccl-tests/README.md (kept verbatim as
  tests/data/nccl/aws_2x_p4de_all_reduce_perf.txt, aws_2x_p5_all_reduce_perf.txt and
  aws_2x_p5_eks_all_reduce_perf.txt): 2x p4de.24xlarge 78.33 GB/s at 2 GiB; 2x p5.48xlarge 487.09 at
  16 GiB (Slurm) and 437.79 at 2 GiB (EKS MPIJob, EFA installer 1.28.0, NCCL 2.18.5).
- crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv: p5.48xlarge on SageMaker
  HyperPod EKS, busbw at 2 GiB: 347.57 (4 nodes), 278.15 (8), 270.91 (16), 269.47 (32).
- NVIDIA/nccl#1442: one p5.48xlarge, all-reduce ~480 GB/s with NVLink SHARP.
- seed 004 excerpts (measured on HyperPod, not published): 2x g5.16xlarge 3.02 GB/s over TCP,
  2x g5.48xlarge about 12 GB/s over EFA, 2x trn1.32xlarge nccom-test 37.0 GB/s.
The p4d figures of NVIDIA/nccl#527 (a thread titled "Slow bus bandwidth") are gone: a slow cluster's
numbers are not a healthy expectation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import catalog
from hpq.scripts import nccl_report, outcome
from tests.nccl_logs import GIB, allreduce_log, efa_info, socket_info, without_rank_lines

DATA = Path(__file__).parents[1] / "data" / "nccl"
P4D, P4DE, P5 = "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge"
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 20.0 \n#\n"


def hosts(n: int) -> list[str]:
    return [f"hpq-nccl-test-worker-{i}" for i in range(n)]


def efa_log(nodes: int, busbw: float, **kw) -> str:
    return allreduce_log(hosts(nodes), 8, busbw, nccl_info=efa_info(hosts(nodes)[0]), **kw)


def published(name: str, label: str = "0: ", info: list[str] | None = None, footer: bool = True) -> str:
    """A published table (verbatim file) as a complete log: what a run of it prints around the table.

    The README printed only the table ("with a lot more information"); the run's NCCL_DEBUG=INFO
    transport lines and nccl-tests' closing lines are what every such run prints around it. Nothing in
    the table is changed.
    """
    table = (DATA / name).read_text()
    head = "".join(label + ln + "\n" for ln in (info or []))
    return head + table + ("".join(label + ln + "\n" for ln in FOOTER.splitlines()) if footer else "")


# ---------------------------------------------------------------------------- AWS's published runs pass


@pytest.mark.parametrize("itype", [P4DE, P4D])
def test_aws_published_2x_p4de_run_passes_and_its_half_fails(itype):
    text = published("aws_2x_p4de_all_reduce_perf.txt", info=efa_info("p4de-st-1"))
    v = nccl_report.evaluate(nccl_report.parse_text(text), itype, nodes=2)
    assert v.outcome == outcome.PASS and v.exit_code == 0, v.message
    assert v.expected_busbw_gbps == 78.33 and "awsome-distributed-ai" in v.message
    assert v.message.splitlines()[0].startswith("PASS: 78.33 GB/s peak busbw at 2 GB on 2 nodes vs 78.33 GB/s")
    assert v.expected_kind == (catalog.PUBLISHED if itype == P4DE else catalog.ASSUMED)
    # Broken twins: 41 GB/s (52% of AWS's figure, issue 19) and half of it fail with the EFA reason.
    for busbw in (41.0, 78.33 / 2):
        low = nccl_report.evaluate(nccl_report.parse_text(efa_log(2, busbw, gpu="NVIDIA A100-SXM4-80GB")), itype)
        assert low.outcome == outcome.FAIL and low.exit_code == 1, low.message
        assert low.message.startswith(f"FAIL: {busbw:.2f} GB/s") and "pass at 70%" in low.message


def test_the_published_table_alone_is_judged_on_what_it_is():
    """Verbatim, the README's table has no summary line (cut off) and no transport line: never a PASS."""
    raw = nccl_report.parse_file(str(DATA / "aws_2x_p4de_all_reduce_perf.txt"))
    assert raw.truncated and raw.peak_busbw_gbps == 78.33
    assert nccl_report.evaluate(raw, P4DE, nodes=2).outcome == outcome.FAIL
    no_net = nccl_report.evaluate(nccl_report.parse_text(published("aws_2x_p4de_all_reduce_perf.txt")), P4DE, nodes=2)
    assert no_net.outcome == outcome.INCONCLUSIVE and no_net.exit_code == 3
    assert no_net.checks["bandwidth"].outcome == outcome.PASS and no_net.checks["transport"].outcome == outcome.INCONCLUSIVE
    assert "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET" in no_net.message


def test_aws_published_2x_p5_runs_pass():
    slurm = nccl_report.evaluate(nccl_report.parse_text(published("aws_2x_p5_all_reduce_perf.txt", info=efa_info("p5-st-1"))), P5,
                         nodes=2)
    assert slurm.outcome == outcome.PASS and slurm.expected_busbw_gbps == 487.09, slurm.message
    # The EKS excerpt is complete as published (summary included); its MPIJob log adds the INFO lines.
    eks_text = published("aws_2x_p5_eks_all_reduce_perf.txt", label="[1,0]<stdout>:", info=efa_info("worker-0"),
                         footer=False)
    eks = nccl_report.evaluate(nccl_report.parse_text(eks_text), P5, nodes=2)
    assert eks.outcome == outcome.PASS and eks.fraction == pytest.approx(437.89 / 487.09, abs=1e-3), eks.message
    half = nccl_report.evaluate(nccl_report.parse_text(efa_log(2, 487.09 / 2, gpu="NVIDIA H100 80GB HBM3")), P5)
    assert half.outcome == outcome.FAIL


@pytest.mark.parametrize("nodes, busbw", [(4, 347.57), (8, 278.15), (16, 270.91), (32, 269.47)])
def test_published_p5_hyperpod_runs_pass_and_half_fails(nodes, busbw):
    log = efa_log(nodes, busbw, peak_bytes=2 * GIB, gpu="NVIDIA H100 80GB HBM3")
    v = nccl_report.evaluate(nccl_report.parse_text(log), P5)
    assert v.outcome == outcome.PASS and v.nodes == nodes and v.expected_nodes == nodes, v.message
    half = nccl_report.evaluate(nccl_report.parse_text(efa_log(nodes, busbw / 2, peak_bytes=2 * GIB)), P5)
    assert half.outcome == outcome.FAIL


def test_p5_single_node_nvls_figure_and_a_degraded_node():
    ok = nccl_report.evaluate(nccl_report.parse_text(allreduce_log(["ip-10-1-0-9"], 8, 480.0, gpu="NVIDIA H100 80GB HBM3")), P5)
    assert ok.outcome == outcome.PASS and ok.expected_busbw_gbps == 480.0
    assert ok.checks["transport"].outcome == outcome.NOT_JUDGED  # one node: NVLink, no network to name
    bad = nccl_report.evaluate(nccl_report.parse_text(allreduce_log(["ip-10-1-0-9"], 8, 240.0, gpu="NVIDIA H100 80GB HBM3")), P5)
    assert bad.outcome == outcome.FAIL and "NVLink" in bad.message


# ---------------------------------------------------------------------------- transport judged from the log


@pytest.mark.parametrize("itype, busbw", [("ml.g5.48xlarge", 8.99), ("ml.g5.8xlarge", 2.51), (P5, 420.0)])
def test_socket_on_an_efa_type_fails_whatever_the_bandwidth(itype, busbw):
    """Issue 19: 8.99 GB/s on 2x g5.48xlarge and 2.51 on g5.8xlarge over NET/Socket passed on bandwidth."""
    log = allreduce_log(hosts(2), 1, busbw, nccl_info=socket_info(hosts(2)[0]), gpu="NVIDIA A10G")
    v = nccl_report.evaluate(nccl_report.parse_text(log), itype)
    assert v.outcome == outcome.FAIL and v.exit_code == 1, v.message
    assert v.checks["transport"].outcome == outcome.FAIL
    assert "TCP sockets, not EFA" in v.message.splitlines()[0]
    assert f"hpq nccl-env {itype}" in v.message
    # The twin: the same bandwidth over EFA is judged on its bandwidth (or has no figure).
    efa = nccl_report.evaluate(nccl_report.parse_text(allreduce_log(hosts(2), 1, busbw, nccl_info=efa_info(hosts(2)[0]))), itype)
    assert efa.checks["transport"].outcome == outcome.PASS and efa.outcome != outcome.FAIL or itype == "ml.g5.8xlarge"


def test_other_transport_words():
    mixed = allreduce_log(hosts(2), 8, 400.0, nccl_info=efa_info(hosts(2)[0]) + socket_info(hosts(2)[1]))
    assert nccl_report.transport_seen(nccl_report.parse_text(mixed)) == nccl_report.NET_MIXED
    assert nccl_report.evaluate(nccl_report.parse_text(mixed), P5).outcome == outcome.FAIL
    tcp_provider = allreduce_log(hosts(2), 8, 400.0, nccl_info=[
        "h:1:2 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16",
        "h:1:2 [0] NCCL INFO Using network AWS Libfabric"])
    assert nccl_report.transport_seen(nccl_report.parse_text(tcp_provider)) == nccl_report.NET_OTHER
    assert nccl_report.evaluate(nccl_report.parse_text(tcp_provider), P5).outcome == outcome.FAIL
    assert nccl_report.transport_seen(nccl_report.parse_text(efa_log(2, 1.0))) == nccl_report.NET_EFA


def test_no_network_line_on_an_efa_type_is_inconclusive_not_pass():
    v = nccl_report.evaluate(nccl_report.parse_text(allreduce_log(hosts(4), 8, 347.57, peak_bytes=2 * GIB)), P5)
    assert v.outcome == outcome.INCONCLUSIVE and v.exit_code == outcome.EXIT_INCONCLUSIVE
    assert v.message.startswith("INCONCLUSIVE: ") and "does not say which network" in v.message.splitlines()[0]


def test_a_non_efa_type_is_not_held_to_efa():
    v = nccl_report.evaluate(nccl_report.parse_file(str(DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt")), "ml.g5.16xlarge", nodes=2)
    assert v.checks["transport"].outcome == outcome.NOT_JUDGED
    assert "seed" in v.message and "published for" not in v.message  # a seed excerpt is called what it is


# ---------------------------------------------------------------------------- no figure: INCONCLUSIVE, never PASS


@pytest.mark.parametrize("itype", ["ml.trn2.48xlarge", "ml.trn1n.32xlarge"])
def test_trainium_without_a_figure_is_inconclusive(itype):
    text = ("size(B) count(elems) type time:avg(us) algbw(GB/s) busbw(GB/s)\n"
            "134217728 67108864 bf16 30000 4.4 4.4\nAvg bus bandwidth: 4.4GB/s\n")
    v = nccl_report.evaluate(nccl_report.parse_text(text), itype, nodes=2)
    assert v.outcome == outcome.INCONCLUSIVE and v.exit_code == 3, v.message
    assert f"no published figure for {itype} at 2 nodes" in v.message.splitlines()[0]
    assert "not a measurement" in v.message  # the line-rate level is labelled as what it is


def test_node_counts_without_a_figure():
    """Between published counts the next count above applies (busbw falls with nodes); beyond the largest,
    or for a type with only a 2-node figure at 4 nodes, there is none: INCONCLUSIVE, never a pass."""
    three = nccl_report.evaluate(nccl_report.parse_text(efa_log(3, 340.0, peak_bytes=2 * GIB)), P5)
    assert three.outcome == outcome.PASS and three.expected_nodes == 4
    big = nccl_report.evaluate(nccl_report.parse_text(efa_log(64, 300.0)), P5)
    assert big.outcome == outcome.INCONCLUSIVE and "at 64 nodes" in big.message
    four = nccl_report.evaluate(nccl_report.parse_text(efa_log(4, 23.0)), P4D)  # issue 19: it passed against nccl#527
    assert four.outcome == outcome.INCONCLUSIVE and "no published figure for ml.p4d.24xlarge at 4 nodes" in four.message
    one = nccl_report.evaluate(nccl_report.parse_text(allreduce_log(["ip-10-1-0-7"], 8, 230.0)), P4D)
    assert one.outcome == outcome.INCONCLUSIVE


def test_unknown_node_count_and_unknown_type_are_inconclusive():
    bare = nccl_report.parse_text(without_rank_lines(efa_log(2, 78.33)))
    v = nccl_report.evaluate(bare, P4DE)
    assert v.outcome == outcome.INCONCLUSIVE and "--nodes" in v.message
    assert nccl_report.evaluate(bare, P4DE, nodes=2).outcome == outcome.PASS
    assert nccl_report.evaluate(bare, None).outcome == outcome.INCONCLUSIVE


def test_log_wins_over_a_wrong_node_argument():
    v = nccl_report.evaluate(nccl_report.parse_text(efa_log(2, 78.33)), P4DE, nodes=4)
    assert v.outcome == outcome.PASS and v.nodes == 2 and v.nodes_from == "log"
    assert "2 host(s)" in v.message and "4 node(s) were given" in v.message


def test_small_messages_are_named_as_the_cause():
    v = nccl_report.evaluate(nccl_report.parse_text(efa_log(2, 78.33, max_bytes=16 << 20)), P4DE)
    assert v.outcome == outcome.FAIL and "128 MB" in v.message and "-e 16G" in v.message


def test_judge_rows_is_the_same_judge_for_any_rows():
    rows = nccl_report.parse_text(without_rank_lines(efa_log(2, 78.33))).rows
    assert nccl_report.judge_rows(rows, P4DE, 2).outcome == outcome.INCONCLUSIVE  # rows carry no transport line
    assert nccl_report.judge_rows(rows, P4DE, 2, expect=78).checks["bandwidth"].outcome == outcome.PASS
    with pytest.raises(nccl_report.ReportError):
        nccl_report.judge_rows([], P4D, 2)


def test_nccom_two_node_trn1_against_the_seed_excerpt():
    text = ("size(B) count(elems) type time:avg(us) algbw(GB/s) busbw(GB/s)\n"
            "134217728 67108864 bf16 7025.52 19.10 37.01\n# Avg bus bandwidth: 37.01 GB/s\n")
    v = nccl_report.evaluate(nccl_report.parse_text(text), "ml.trn1.32xlarge", nodes=2)
    assert v.outcome == outcome.PASS and v.expected_busbw_gbps == 37.0 and v.expected_kind == catalog.SEED
    assert "seed 004 excerpt (measured on HyperPod, not published)" in v.message
    assert v.checks["transport"].outcome == outcome.NOT_JUDGED and "neuron" in v.checks["transport"].detail.lower()
    half = nccl_report.evaluate(nccl_report.parse_text(text.replace("37.01", "18.0")), "ml.trn1.32xlarge", nodes=2)
    assert half.outcome == outcome.FAIL
    one = nccl_report.evaluate(nccl_report.parse_text(text), "ml.trn1.32xlarge", nodes=1)
    assert one.outcome == outcome.INCONCLUSIVE


# ---------------------------------------------------------------------------- the catalog side


@pytest.mark.parametrize("name", catalog.gpu_types() + catalog.trainium_types())
def test_every_figure_has_its_source_and_kind(name):
    table = catalog.busbw_table(name)
    for fig in ([table.one_node] if table.one_node else []) + list(table.several_nodes):
        assert fig.gbps > 0 and fig.source and fig.kind in (catalog.PUBLISHED, catalog.ASSUMED, catalog.SEED)
        assert "nccl/issues/527" not in fig.source  # "Slow bus bandwidth" is not a healthy figure
        if fig.kind == catalog.SEED:
            assert fig.source.startswith("seed 004 excerpt") and "not published" in fig.source
        else:
            assert "http" in fig.source
        assert fig.gbps < catalog.busbw_ceiling(name)[0]  # every figure is physically possible
    if table.one_node is None:
        assert "one node:" in table.why_not
    if not table.several_nodes:
        assert "several nodes:" in table.why_not


def test_expected_busbw_picks_by_node_count():
    assert catalog.expected_busbw(P4D, 1) is None
    assert [getattr(catalog.expected_busbw(P4D, n), "gbps", None) for n in (2, 3, 4)] == [78.33, None, None]
    assert catalog.expected_busbw(P5, 3).nodes == 4 and catalog.expected_busbw(P5, 12).nodes == 16
    assert catalog.expected_busbw(P5, 33) is None and catalog.expected_busbw("ml.g6e.48xlarge", 2) is None
    assert catalog.derived_level("ml.g6e.48xlarge") == pytest.approx(400 / 8 * catalog.DERIVED_LINE_RATE_FRACTION)
    with pytest.raises(ValueError):
        catalog.expected_busbw(P4D, 0)


# ---------------------------------------------------------------------------- --expect


def test_expect_none_waives_the_bandwidth_only():
    tcp = nccl_report.parse_text(efa_log(2, 3.1))
    v = nccl_report.evaluate(tcp, P4DE, expect="none")
    assert v.outcome == outcome.PASS and v.bandwidth_judged is False and v.expected_busbw_gbps is None
    assert "reported, not judged (--expect none)" in v.message
    sock = nccl_report.parse_text(allreduce_log(hosts(2), 8, 3.1, nccl_info=socket_info("h")))
    assert nccl_report.evaluate(sock, P4DE, expect="none").outcome == outcome.FAIL  # the transport is still judged
    wrong = nccl_report.evaluate(nccl_report.parse_text(efa_log(2, 78.33, wrong=4)), P4DE, expect="none")
    assert wrong.outcome == outcome.FAIL and "4 wrong element(s)" in wrong.message
    text = efa_log(2, 78.33)
    dead = nccl_report.evaluate(nccl_report.parse_text(text[:text.index("# Out of bounds")]), P4DE, expect="none")
    assert dead.outcome == outcome.FAIL and "cut off or crashed" in dead.message
    d = nccl_report.report_to_dict(tcp, v)
    assert d["outcome"] == "PASS" and d["verdict"]["expect"] == "none" and d["verdict"]["bandwidth_judged"] is False


def test_expect_a_number_is_the_users_own_figure_with_the_usual_pass_fraction():
    two = nccl_report.parse_text(efa_log(2, 57.17))
    ok = nccl_report.evaluate(two, P4D, expect=80)  # 71% of 80, pass at 70% across nodes
    assert ok.outcome == outcome.PASS and ok.expected_busbw_gbps == 80 and ok.expect == "80" and ok.bandwidth_judged
    low = nccl_report.evaluate(two, P4D, expect="90")
    assert low.outcome == outcome.FAIL and "64% of 90 GB/s you expect (--expect)" in low.message
    assert nccl_report.evaluate(two, None, expect=90).outcome == outcome.FAIL
    one = nccl_report.parse_text(allreduce_log(["ip-10-1-0-7"], 8, 230.77))  # one node: 80% to pass
    assert nccl_report.evaluate(one, P4D, expect=280).ok and not nccl_report.evaluate(one, P4D, expect=300).ok


def test_gloo_is_tcp():
    """hpq's built-in benchmark names its backend: gloo is TCP, so on an EFA type it fails the transport; on a
    type without EFA it is judged on bandwidth like any other run."""
    from tests import fake_fabric

    log = fake_fabric.builtin_output(["ip-10-1-0-7", "ip-10-1-0-8"], 1, ["-b", "16M"], 0.9, 0)
    r = nccl_report.parse_text(log)
    assert r.backend == "gloo" and nccl_report.transport_seen(r) == nccl_report.NET_SOCKET
    assert nccl_report.evaluate(r, "ml.g5.48xlarge").checks["transport"].outcome == outcome.FAIL
    v = nccl_report.evaluate(r, "ml.g5.16xlarge")
    assert v.outcome == outcome.FAIL and v.checks["bandwidth"].outcome == outcome.FAIL and v.nodes == 2


@pytest.mark.parametrize("value, error", [("fast", "use 'catalog', 'none' or"), ("0", "positive"), ("-2", "positive"),
                                          ("nan", "positive"), ("inf", "positive")])
def test_expect_refuses_what_is_not_a_figure(value, error):
    with pytest.raises(nccl_report.ReportError, match=error):
        nccl_report.parse_expect(value)
    assert nccl_report.parse_expect("NONE") == "none" and nccl_report.parse_expect(None) == "catalog"
    assert nccl_report.parse_expect("350") == 350.0 and nccl_report.parse_expect("12.5GB/s") == 12.5


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", "nccl-report", *args], capture_output=True, text=True,
                          timeout=60, input=stdin)


def test_cli_exit_codes_and_json(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(efa_log(2, 78.33))
    ok = run_cli(str(log), "-t", P4DE, "--output", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["outcome"] == "PASS"
    log.write_text(efa_log(2, 41.0))
    assert run_cli(str(log), "-t", P4DE).returncode == 1
    assert run_cli(str(log), "-t", P4DE, "--expect", "none").returncode == 0
    log.write_text(without_rank_lines(efa_log(2, 78.33)))
    inc = run_cli(str(log), "-t", P4DE)
    assert inc.returncode == 3 and inc.stdout.splitlines()[0].startswith("INCONCLUSIVE: ")  # the verdict leads
    assert run_cli(str(log), "-t", P4DE, "--nodes", "2").returncode == 0
    bad = run_cli(str(log), "-t", P4DE, "--expect", "quick")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "hpq: error: --expect 'quick': use 'catalog', 'none' or a bus bandwidth in GB/s (e.g. 350)"]
    zero = run_cli(str(log), "--nodes", "0")
    assert zero.returncode == 2 and "Traceback" not in zero.stderr


# Found by review: logs that are not one finished run of the whole job. Each twin starts from a healthy 2-node
# p4d log (AWS's figure, EFA confirmed), which passes.
HEALTHY_P4D = allreduce_log(["node-0", "node-1"], 8, 80.0, nccl_info=efa_info("node-0"))


def _judge(text: str) -> str:
    return nccl_report.evaluate(nccl_report.parse_text(text), "ml.p4d.24xlarge").outcome


def test_the_healthy_p4d_log_these_twins_start_from_passes():
    assert _judge(HEALTHY_P4D) == outcome.PASS


def test_tables_from_several_srun_labels_are_separate_runs_never_a_pass():
    """A non-MPI nccl-tests under srun --label: each task measured only its own node over NVLink. The log names
    2 hosts, but no table measured the network; and a second label's run that died is a dead run."""
    one_node_each = "".join(f"{i}: {line}\n" for i in (0, 1)
                            for line in allreduce_log([f"node-{i}"], 8, 230.0,
                                                      nccl_info=efa_info(f"node-{i}")).splitlines())
    assert _judge(one_node_each) == outcome.INCONCLUSIVE
    died = HEALTHY_P4D.splitlines()
    cut = next(i for i, line in enumerate(died) if line.lstrip().startswith("16777216"))
    labelled = "".join(f"0: {line}\n" for line in died) + "".join(f"1: {line}\n" for line in died[:cut])
    assert _judge(labelled) == outcome.FAIL


def test_a_size_repeated_inside_one_table_is_an_appended_run():
    lines = HEALTHY_P4D.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("2147483648"))
    assert _judge("".join(lines[:at + 1] + [lines[at]] + lines[at + 1:])) == outcome.INCONCLUSIVE


def test_a_task_srun_reports_failed_is_a_fail_whatever_the_table_shows():
    tail = "srun: error: node-1: task 9: Exited with exit code 1\n"
    assert _judge(HEALTHY_P4D + tail) == outcome.FAIL
    assert _judge(HEALTHY_P4D + tail.replace("code 1", "code 0")) == outcome.PASS


def test_unverified_results_are_never_a_pass():
    """nccl-tests prints #wrong N/A where it did not check the data (-c 0): every row so, or a single one inside
    a checked run, is INCONCLUSIVE (found by review: both passed). The checked twin passes (above)."""
    lines = HEALTHY_P4D.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1048576 "))
    one = lines[at].rsplit(None, 1)[0] + "  N/A\n"
    assert _judge("".join(lines[:at] + [one] + lines[at + 1:])) == outcome.INCONCLUSIVE
    every = "".join(line.replace("       0  ", "     N/A  ").replace("       0\n", "     N/A\n")
                    if line.lstrip()[:1].isdigit() else line for line in lines)
    assert "N/A" in every and _judge(every) == outcome.INCONCLUSIVE
