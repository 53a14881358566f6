"""run-nccl-test / run-nccom-test / wrappers without torch or Slurm: the launch paths and their parsing.

Stand-ins (said per test): there is no nccl-tests, OpenMPI or Neuron SDK on CI machines, so
small shell scripts play ``all_reduce_perf`` (printing a real H200 output from
tests/data/nccl), ``mpirun`` and ``nccom-test`` and record the arguments and environment they
were given. What is real: the hpq launchers, the transport function on a fake /sys tree, the
parser and verdict, the files written. Real Slurm runs are in test_scripts_slurm.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpq.lifecycle import bundle
from hpq.scripts import nccl_bench, run_nccl_test, run_nccom_test
from hpq.scripts.args import INSTANCE_TYPE_RE, byte_size

DATA = Path(__file__).parents[1] / "data" / "nccl"


def run_module(module: str, args: list[str], env: dict, cwd: Path, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=str(cwd), capture_output=True,
                          text=True, timeout=timeout)


def base_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPQ_", "NCCL_", "FI_"))}
    env.update(HPQ_IMDS_ENDPOINT="off", HPQ_RESULTS_DIR=str(tmp_path / "results"), HPQ_NODE_INFO=str(tmp_path / "none"))
    return env


def recorder(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def fake_node(root: Path, efa: bool, iface: str = "ens32") -> Path:
    """A node root with /proc/net/route (default route on ``iface``) and, optionally, one EFA device."""
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
        f"{iface}\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    if efa:
        (root / "sys/class/infiniband/rdmap16s27").mkdir(parents=True)
    return root


def test_sizes_and_factors():
    assert byte_size("16G") == 16 << 30 and byte_size("8") == 8
    assert byte_size("128K") == 128 << 10
    s = nccl_bench.sizes(8, 16 << 30, 2, 0)
    assert s[0] == 8 and s[-1] == 16 << 30 and len(s) == 32
    assert nccl_bench.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert nccl_bench.bus_factor("all_gather", 4) == pytest.approx(0.75)
    with pytest.raises(argparse.ArgumentTypeError):
        byte_size("lots")


class _NoTransfer:
    """Stand-in torch.distributed whose collectives return without moving any data (a broken fabric)."""

    def all_reduce(self, tensor, op=None):
        pass

    def reduce_scatter_tensor(self, output, input):
        pass

    def all_gather_into_tensor(self, output, input):
        pass


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "int32"])
def test_builtin_checker_sees_a_collective_that_moved_nothing(dtype_name):
    """Real: the built-in benchmark's buffers, fill patterns, expected values and element check. Stand-in: the
    collectives (they do nothing), so every op, out-of-place and in-place, must report wrong elements."""
    import torch

    dtype = getattr(torch, dtype_name)
    info = nccl_bench.distenv.DistInfo(rank=1, world_size=4, local_rank=1, local_world_size=4, master_addr="x",
                                       master_port=1)
    args = argparse.Namespace(op="all_reduce", no_direct_nccl=True)
    bench = nccl_bench.Bench(torch, _NoTransfer(), args, info, torch.device("cpu"), dtype, "gloo")
    for op in nccl_bench.OPS:
        for in_place in (False, True):
            run, prep, result, expected = bench.make_op(op, 4096, in_place)
            prep()
            run()
            assert bench.count_wrong(result, expected) > 0, (op, in_place)


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_builtin_data_sums_exactly_at_32_ranks(dtype_name):
    """A sum accumulated rank by rank in the data type itself (what a ring all-reduce does; the stand-in for
    the collective) must match the expected values exactly, or a healthy 4x8-GPU run would report #wrong."""
    import torch

    dtype = getattr(torch, dtype_name)
    n = 32
    info = nccl_bench.distenv.DistInfo(rank=0, world_size=n, local_rank=0, local_world_size=8, master_addr="x",
                                       master_port=1)
    args = argparse.Namespace(op="all_reduce", no_direct_nccl=True)
    bench = nccl_bench.Bench(torch, _NoTransfer(), args, info, torch.device("cpu"), dtype, "gloo")
    acc = torch.zeros(4096, dtype=dtype)
    for rank in range(n):
        acc += bench._pattern(0, 4096, rank)
    assert bench.count_wrong(acc, bench._expected_sum) == 0


def test_nccom_default_workers():
    assert run_nccom_test.default_workers("ml.trn1.32xlarge") == 32
    assert run_nccom_test.default_workers("trn2.48xlarge") == 64
    assert run_nccom_test.default_workers(None) == 32


def test_nccl_tests_binary_run_locally(tmp_path):
    """Stand-in all_reduce_perf (prints a real H200 log) found through $NCCL_TESTS_HOME; real parse/verdict/JSON."""
    home = tmp_path / "nccl-tests"
    (home / "build").mkdir(parents=True)
    args_file = tmp_path / "args"
    recorder(home / "build/all_reduce_perf",
             f'echo "$@" > {args_file}\ncat {DATA / "h200x2_nccl_baseline_allreduce.txt"}\n')
    env = base_env(tmp_path) | {"NCCL_TESTS_HOME": str(home)}
    # one node, judged against your own figure (--expect): the real 2x H200 log (peak ~349 GB/s) clears 300
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--expect", "300"],
                     env, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert args_file.read_text().split() == ["-b", "8", "-e", "16G", "-f", "2", "-n", "20", "-w", "5", "-c", "1",
                                             "-g", "2", "-d", "float"]
    assert "PASS" in res.stdout and "nccl-tests" in res.stdout
    results = list((tmp_path / "results").glob("nccl-test-*.json"))
    assert len(results) == 1
    doc = json.loads(results[0].read_text())
    assert doc["mode"] == "nccl-tests" and doc["row_count"] == 32 and doc["verdict"]["ok"]
    assert Path(doc["log"]).exists() and Path(doc["log"]).parent == results[0].parent
    # seed 004's 3 GB/s inside one p5 node (480 GB/s published): exit 1, the reason is NVLink, not EFA
    recorder(home / "build/all_reduce_perf", f'cat {DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"}\n')
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--instance-type",
                                                   "p5.48xlarge"], env, tmp_path)
    assert res.returncode == 1 and "NVLink" in res.stdout and "EFA was not used" not in res.stdout
    # inside one p4d node: no published figure, so INCONCLUSIVE (exit 3), not a pass
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--instance-type",
                                                   "p4d.24xlarge"], env, tmp_path)
    assert res.returncode == 3 and "no published figure for ml.p4d.24xlarge at 1 node" in res.stdout
    # good rows but the program crashed at the end: a failure; a type the catalog lacks: judged without one
    recorder(home / "build/all_reduce_perf", f'cat {DATA / "h200x2_nccl_baseline_allreduce.txt"}\nexit 3\n')
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--instance-type",
                                                   "p5.48xlarge"], env, tmp_path)
    assert res.returncode == 1 and "FAIL: nccl-tests exited with status 3" in res.stdout, res.stdout[-2000:]
    recorder(home / "build/all_reduce_perf", f'cat {DATA / "h200x2_nccl_baseline_allreduce.txt"}\n')
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--instance-type",
                                                   "ml.p9.96xlarge"], env, tmp_path)
    assert res.returncode == 3 and "unknown instance type 'ml.p9.96xlarge'" in res.stdout, res.stdout[-2000:] + res.stderr
    # an unwritable log directory: one line, exit 1, no traceback
    res = run_module("hpq.scripts.run_nccl_test", ["1", "2", "--launcher", "local", "--log-dir", "/proc/hpq"],
                     env, tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr and "run-nccl-test: error:" in res.stderr


def test_run_nccl_test_expect_decides_what_the_bandwidth_is_judged_against(tmp_path):
    """--expect on the real command: the catalog by default, none (reported only; the run must still end
    cleanly), or the user's own GB/s; the choice lands in the result JSON."""
    home = tmp_path / "nccl-tests"
    (home / "build").mkdir(parents=True)
    recorder(home / "build/all_reduce_perf", f'cat {DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"}\n')
    env = base_env(tmp_path) | {"NCCL_TESTS_HOME": str(home)}
    base = ["1", "2", "--launcher", "local", "--instance-type", "p5.48xlarge"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        return run_module("hpq.scripts.run_nccl_test", base + list(extra), env, tmp_path)

    assert run().returncode == 1  # 3 GB/s inside one p5: far below its NVLink figure
    res = run("--expect", "none")
    assert res.returncode == 0 and "reported, not judged (--expect none)" in res.stdout, res.stdout[-2000:]
    latest = max((tmp_path / "results").glob("nccl-test-*.json"), key=lambda p: p.stat().st_mtime_ns)
    verdict = json.loads(latest.read_text())["verdict"]
    assert verdict["expect"] == "none" and verdict["bandwidth_judged"] is False and verdict["ok"]
    assert run("--expect", "3.5").returncode == 0 and run("--expect", "10").returncode == 1
    recorder(home / "build/all_reduce_perf", f'cat {DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"}\nexit 3\n')
    res = run("--expect", "none")  # nothing about the bandwidth is judged, but a failed run is still a failure
    assert res.returncode == 1 and "FAIL: nccl-tests exited with status 3" in res.stdout
    for bad, error in ((["--expect", "soon"], "use 'catalog', 'none' or"), (["--expect", "0"], "positive"),
                       (["--sweep", "--expect", "none"], "--expect judges a single run")):
        res = run_module("hpq.scripts.run_nccl_test", bad, env, tmp_path)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and error in res.stderr, res.stderr


# mpirun stand-in: records its argv and environment, then plays Open MPI under Slurm: on each node its daemon
# (a Slurm task, so SLURMD_NODENAME is that node's) starts local rank 0 with mpirun's environment plus -x; only
# the program's own output is replaced by a real log. EXTRA (if set) is what a worker adds itself (a TaskProlog).
MPIRUN_STANDIN = """printf '%s\\0' "$@" > {rec}.argv
env | sort > {rec}
while [ $# -gt 0 ] && [ "$1" != sh ]; do shift; done
for n in node-1 node-2; do
  env $EXTRA SLURMD_NODENAME=$n OMPI_COMM_WORLD_LOCAL_RANK=0 "$1" "$2" "$3" "$4" true
done
cat {log}
"""


def mpirun_cluster(tmp_path: Path, extra: str = "", log_text: str | None = None) -> tuple[dict, Path]:
    """Stand-ins: srun (runs the step locally), scontrol (expands the node list) and mpirun (above); the
    transport comes from the real function on a fake node with one EFA device. The program's output is
    ``log_text``, by default an all_reduce_perf log of the two nodes over EFA at AWS's 2-node p4de figure
    (78.33 GB/s) in nccl-tests' format (tests/nccl_logs.py)."""
    from tests.nccl_logs import allreduce_log, efa_info

    bindir = tmp_path / "bin"
    bindir.mkdir()
    rec = tmp_path / "mpirun.rec"
    recorder(bindir / "srun", 'while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done\nexec "$@"\n')
    recorder(bindir / "salloc", "exit 99\n")
    recorder(bindir / "scontrol", 'case "$2" in hostnames) echo node-1; echo node-2;; *) exit 1;; esac\n')
    (tmp_path / "run.txt").write_text(log_text if log_text is not None else allreduce_log(
        ["node-1", "node-2"], 2, 78.33, nccl_info=efa_info("node-1")))
    recorder(bindir / "mpirun", MPIRUN_STANDIN.format(rec=rec, log=tmp_path / "run.txt"))
    recorder(tmp_path / "all_reduce_perf", "exit 98\n")
    env = base_env(tmp_path) | {
        "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node-[1-2]",
        "HPQ_ROOT": str(fake_node(tmp_path / "node", efa=True)), "EXTRA": extra,
        # what a CPU controller exported before issue 19, a user's own setting, and one kept on purpose
        "NCCL_NET_PLUGIN": "none", "GLOO_SOCKET_IFNAME": "ens5", "FI_EFA_FORK_SAFE": "0",
        "NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1", "HPQ_KEEP_ENV": "NCCL_NVLS_ENABLE"}
    return env, rec


@pytest.mark.parametrize("itype,rdma,busbw", [("ml.g5.48xlarge", "0", 12.0), ("ml.p4d.24xlarge", "1", 78.33)])
def test_mpirun_command_from_allocation(tmp_path, itype, rdma, busbw):
    """mpirun's arguments and environment: the worker's transport variables and what HPQ_KEEP_ENV names, none
    of the submitting node's others (NCCL_NET_PLUGIN=none from a controller is removed, not merged); the ranks'
    hpq-env blocks are in the log and match, so the verdict stands (the log: the two nodes over EFA at the
    type's 2-node figure)."""
    from tests.nccl_logs import allreduce_log, efa_info

    env, rec = mpirun_cluster(tmp_path, log_text=allreduce_log(["node-1", "node-2"], 2, busbw,
                                                               nccl_info=efa_info("node-1")))
    res = run_module("hpq.scripts.run_nccl_test", ["2", "2", "--binary", str(tmp_path / "all_reduce_perf"),
                                                   "--instance-type", itype], env, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    text = rec.read_text()
    argv = Path(f"{rec}.argv").read_text().split("\0")[:-1]
    assert argv[argv.index("sh"):argv.index("sh") + 2] == ["sh", "-c"] and argv[argv.index("sh") + 3] == "hpq-env"
    joined = " ".join(argv)
    for part in ("-np 4", "--bind-to none", "--mca pml ob1", "--mca btl tcp,self",
                 "--mca btl_tcp_if_exclude lo,docker0", "-x FI_PROVIDER", "-x FI_EFA_USE_DEVICE_RDMA",
                 "-x NCCL_SOCKET_IFNAME", "-x LD_LIBRARY_PATH", "-x NCCL_NVLS_ENABLE",
                 f"hpq-env {tmp_path / 'all_reduce_perf'} -b 8 -e 16G -f 2", "-g 1", "-c 1"):
        assert part in joined, part
    for absent in ("-x NCCL_NET_PLUGIN", "-x GLOO_SOCKET_IFNAME", "-x NCCL_P2P_DISABLE"):
        assert absent not in joined, absent
    hostfile = Path(argv[argv.index("--hostfile") + 1]).read_text()
    assert hostfile == "node-1 slots=2\nnode-2 slots=2\n"
    mpirun_env = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert mpirun_env["FI_EFA_USE_DEVICE_RDMA"] == rdma and mpirun_env["FI_PROVIDER"] == "efa"
    assert mpirun_env["FI_EFA_FORK_SAFE"] == "1" and mpirun_env["NCCL_NVLS_ENABLE"] == "0"
    assert not {"NCCL_NET_PLUGIN", "GLOO_SOCKET_IFNAME", "NCCL_P2P_DISABLE"} & set(mpirun_env)
    assert mpirun_env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    doc = json.loads(next((tmp_path / "results").glob("nccl-test-*.json")).read_text())
    assert doc["hosts"] == ["node-1", "node-2"] and doc["transport"] in ("efa-rdma", "efa-sendrecv")
    check = doc["environment_check"]
    assert check["ok"] is True and check["problems"] == [] and sorted(check["effective"]) == ["node-1", "node-2"]
    assert check["effective"]["node-1"]["FI_EFA_USE_DEVICE_RDMA"] == rdma
    assert "hpq-env: node-2 FI_PROVIDER=efa" in Path(doc["log"]).read_text()


def test_nodelist_pins_the_run_to_the_named_nodes(tmp_path):
    """--nodelist (what hpq doctor --fix pairs a fixed node with a healthy one by): inside an allocation the
    hostfile names exactly those nodes in that order; a node outside the allocation is refused before mpirun
    starts (the broken twin); outside an allocation salloc gets ``-N 2 -w HOST,HOST`` (salloc(1) --nodelist)."""
    env, rec = mpirun_cluster(tmp_path)
    base = ["2", "2", "--binary", str(tmp_path / "all_reduce_perf"), "--instance-type", "ml.p4d.24xlarge"]
    res = run_module("hpq.scripts.run_nccl_test", ["--nodelist", "node-2,node-1", *base], env, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    argv = Path(f"{rec}.argv").read_text().split("\0")[:-1]
    assert Path(argv[argv.index("--hostfile") + 1]).read_text() == "node-2 slots=2\nnode-1 slots=2\n"
    Path(f"{rec}.argv").unlink()
    res = run_module("hpq.scripts.run_nccl_test", ["--nodelist", "node-1,node-3", *base], env, tmp_path)
    assert res.returncode == 1 and "--nodelist: node-3 not in this allocation (node-1,node-2)" in res.stderr
    assert not Path(f"{rec}.argv").exists()  # nothing ran
    outside = {k: v for k, v in env.items() if k not in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST")}
    recorder(tmp_path / "bin" / "salloc", f"printf '%s\\0' \"$@\" > {tmp_path / 'salloc.argv'}; exit 99\n")
    res = run_module("hpq.scripts.run_nccl_test", ["--nodelist", "node-2,node-1", *base], outside, tmp_path)
    assert res.returncode == 99  # salloc's own status, as the command passes it on
    salloc = (tmp_path / "salloc.argv").read_text().split("\0")
    assert salloc[:5] == ["-N", "2", "-J", "hpq-nccl-test", "--ntasks-per-node"] and "-w" in salloc
    assert salloc[salloc.index("-w") + 1] == "node-2,node-1"


def test_rank_environment_unlike_the_workers_fails(tmp_path):
    """Broken twin of the test above: the ranks also carry NCCL_NET_PLUGIN=none that the launch did not give
    them (here the worker adds it, as a TaskProlog would). Same healthy log rows, yet FAIL naming the
    variable and its source; the same for a worker whose block is cut short."""
    env, _ = mpirun_cluster(tmp_path, extra="NCCL_NET_PLUGIN=none")
    res = run_module("hpq.scripts.run_nccl_test", ["2", "2", "--binary", str(tmp_path / "all_reduce_perf"),
                                                   "--instance-type", "ml.p4d.24xlarge"], env, tmp_path)
    assert res.returncode == 1, res.stdout
    assert "the job's transport environment is not the worker type's: NCCL_NET_PLUGIN=none is set in the " \
           "job but `hpq nccl-env ml.p4d.24xlarge` does not set it" in res.stdout
    assert "\nFAIL: 1 environment difference(s) vs the worker type's transport environment: " in res.stdout
    assert "inherited from the environment the job was launched from" in res.stdout  # the submitter had it too
    doc = json.loads(next((tmp_path / "results").glob("nccl-test-*.json")).read_text())
    assert doc["verdict"]["ok"] is False and doc["verdict"]["exit_code"] == 1
    assert doc["environment_check"]["ok"] is False and "node-1, node-2" in doc["environment_check"]["problems"][0]


def test_tcp_node_gets_socket_transport(tmp_path):
    env = base_env(tmp_path) | {"HPQ_ROOT": str(fake_node(tmp_path / "node", efa=False, iface="enp5s0"))}
    res = run_module("hpq.scripts.run_nccl_test", ["1", "1", "--launcher", "local", "--dry-run", "--instance-type",
                                                   "g5.16xlarge"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "NCCL_NET_PLUGIN=none" in res.stdout and "NCCL_SOCKET_IFNAME=enp5s0" in res.stdout
    assert "FI_EFA_USE_DEVICE_RDMA" not in res.stdout


def test_nccom_test_standin(tmp_path):
    """Stand-in nccom-test: refuses to run unless OMPI_ALLOW_RUN_AS_ROOT is set, records its arguments and prints
    seed 004's rows; real: the launcher, environment, parser, verdict and JSON."""
    rec = tmp_path / "nccom.rec"
    fake = recorder(tmp_path / "nccom-test",
                    f'[ "$OMPI_ALLOW_RUN_AS_ROOT" = 1 ] || {{ echo "refusing to run as root" >&2; exit 3; }}\n'
                    f'echo "$@" > {rec}\necho "PATH=$PATH" >> {rec}\n'
                    f'cat {DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"}\n')
    env = base_env(tmp_path)
    res = run_module("hpq.scripts.run_nccom_test", ["1", "--launcher", "local", "--binary", str(fake),
                                                    "--instance-type", "trn1.32xlarge"], env, tmp_path)
    # one trn1 node: no published figure for all NeuronCores of one node, so INCONCLUSIVE (exit 3)
    assert res.returncode == 3 and "INCONCLUSIVE: " in res.stdout, res.stdout + res.stderr
    args, path = rec.read_text().splitlines()
    assert args.split()[:4] == ["-r", "32", "-N", "1"] and args.split()[-1] == "allr"
    assert "/opt/aws/neuron/bin" in path
    assert "37.01" in res.stdout
    doc = json.loads(next((tmp_path / "results").glob("nccom-test-*.json")).read_text())
    assert doc["producer"] == "nccom-test" and doc["environment"]["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    # a crashed nccom-test is a failure, not a pass
    broken = recorder(tmp_path / "broken", "echo oops; exit 4\n")
    res = run_module("hpq.scripts.run_nccom_test", ["1", "--launcher", "local", "--binary", str(broken)], env,
                     tmp_path)
    assert res.returncode == 1 and "no result rows" in res.stdout


def test_nccom_test_judges_the_jobs_environment(tmp_path):
    """run-nccom-test's verdict checks the hpq-env block nccom-test's node printed against the worker type's
    environment. Healthy: a submitter's FI_PROVIDER=tcp is removed before the job (PASS on seed 004's rows
    would need a figure: one trn1 node has none, so INCONCLUSIVE). Broken twin (tests/faults: the launcher
    merging inherited variables as before issue 19): the leaked FI_PROVIDER reaches the job and the verdict
    is FAIL naming it, whatever the bandwidth."""
    from tests.faults import FAULTS_DIR

    fake = recorder(tmp_path / "nccom-test", f'cat {DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"}\n')
    args = ["1", "--launcher", "local", "--binary", str(fake), "--instance-type", "trn1.32xlarge"]
    env = base_env(tmp_path) | {"FI_PROVIDER": "tcp"}
    res = run_module("hpq.scripts.run_nccom_test", args, env, tmp_path)
    assert res.returncode == 3 and "FI_PROVIDER" not in res.stdout, res.stdout + res.stderr
    leaky = env | {"HPQ_TEST_FAULT_INHERIT_ENV": "1",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(FAULTS_DIR), env.get("PYTHONPATH")]))}
    res = run_module("hpq.scripts.run_nccom_test", args, leaky, tmp_path)
    assert res.returncode == 1 and res.stdout.startswith("# run-nccom-test"), res.stdout + res.stderr
    assert "FAIL" in res.stdout and "FI_PROVIDER" in res.stdout


def test_nccom_test_two_nodes_sets_root_comm_id(tmp_path):
    """Stand-ins: srun (runs the step here), scontrol, and nccom-test, which refuses a multi-node run without
    NEURON_RT_ROOT_COMM_ID as the Neuron docs require (nccom-test user guide, -N: host address of the instance
    nccom-test runs on, and a free port). Real: the launcher, the address it picks (the first node, as AWS's
    micro-benchmarks/nccom-tests/slurm/nccom-tests.sbatch does), the verdict judged as 2 nodes."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rec = tmp_path / "nccom.rec"
    recorder(bindir / "srun", 'while [ $# -gt 0 ]; do case "$1" in -N|-n|-w|--chdir) shift 2;; -*) shift;; '
                              '*) break;; esac; done\nexec "$@"\n')
    recorder(bindir / "salloc", "exit 99\n")
    recorder(bindir / "scontrol", 'case "$2" in hostnames) echo trn-a; echo trn-b;; *) exit 1;; esac\n')
    fake = recorder(tmp_path / "nccom-test",
                    'case " $* " in *" -N 1 "*) ;; *) [ -n "$NEURON_RT_ROOT_COMM_ID" ] || '
                    '{ echo "NEURON_RT_ROOT_COMM_ID is required for multi-node" >&2; exit 5; };; esac\n'
                    f'echo "$NEURON_RT_ROOT_COMM_ID" > {rec}\necho "$@" >> {rec}\n'
                    f'cat {DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"}\n')
    env = base_env(tmp_path) | {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
                                "SLURM_JOB_NODELIST": "trn-[a-b]", "HPQ_ROOT": str(fake_node(tmp_path / "n", True))}
    env.pop("NEURON_RT_ROOT_COMM_ID", None)
    res = run_module("hpq.scripts.run_nccom_test", ["2", "--binary", str(fake), "--instance-type", "trn1.32xlarge"],
                     env, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    root, args = rec.read_text().splitlines()
    host, port = root.split(":")
    assert host == "trn-a" and 62000 <= int(port) <= 64999
    assert " ".join(args.split()[:4]) == "-r 64 -N 2" and "--hosts trn-a trn-b" in args
    doc = json.loads(next((tmp_path / "results").glob("nccom-test-*.json")).read_text())
    assert doc["verdict"]["nodes"] == 2 and doc["verdict"]["expected_busbw_gbps"] == 37.0  # seed 004, 2 nodes
    assert doc["environment"]["NEURON_RT_ROOT_COMM_ID"] == root


def test_wrappers_from_the_node_bundle(tmp_path):
    """The bundle as it ships (<root>/hpq/scripts/bin/...), run by the system python with no hpq installed,
    from a directory that holds a decoy 'hpq' package."""
    root = tmp_path / "opt-hpq"
    for key, src in bundle.node_bundle_files().items():
        dest = root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src).read_bytes())
        dest.chmod(0o755 if "/bin/" in key else 0o644)
    decoy = tmp_path / "cwd"
    (decoy / "hpq").mkdir(parents=True)
    (decoy / "hpq/__init__.py").write_text("raise ImportError('decoy hpq imported')\n")
    system_python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    env = base_env(tmp_path) | {"HPQ_LAUNCHER_PYTHON": system_python, "PYTHONPATH": ""}
    for cmd in ("run-nccl-test", "run-nanogpt", "run-nccom-test"):
        res = subprocess.run([str(root / "hpq/scripts/bin" / cmd), "--help"], env=env, cwd=str(decoy),
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "examples:" in res.stdout, cmd + res.stderr
    res = subprocess.run([str(root / "hpq/scripts/bin/run-nccl-test"), "1", "1", "--launcher", "local",
                          "--dry-run", "--python", system_python, "--instance-type", "p5.48xlarge"],
                         env=env, cwd=str(decoy), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "would run (built-in)" in res.stdout and "hpq.scripts.nccl_bench" in res.stdout


BAD_NODE_ARGS = {
    # Each was accepted and launched (salloc, srun) or crashed with a traceback before scripts/args.py.
    "hpq.scripts.run_nccl_test": [
        ["0"], ["1", "1", "-e", "lots"], ["1", "1", "--op", "alltoall", "--builtin"], ["-e", "inf"],
        ["-b", "1e400"], ["-n", "0"], ["-w", "-1"], ["-f", "0"], ["-b", "16G", "-e", "8"], ["-e", "1.5"],
        ["--sweep", "--pair-timeout", "nan"], ["--sweep", "--budget", "inf"], ["--instance-type", "ml.bogus"],
        ["--nccl-debug", "LOUD"], ["--nccl-debug", ""], ["99999", "99999"], ["٢"],
        ["--nodelist", ""], ["--nodelist", "node-1,node-1"], ["--nodelist", "node-1 node-2"],
        ["--nodelist", "node-[1-2]"], ["3", "--nodelist", "node-1,node-2"], ["--sweep", "--nodelist", "a,b"],
        ["--nodelist", "a,b", "--launcher", "local"],
    ],
    "hpq.scripts.run_nccom_test": [["0"], ["2", "-e", "inf"], ["2", "0"], ["2", "-n", "0"]],
    "hpq.scripts.run_nanogpt": [["0"], ["--log-every", "0"], ["--ckpt-every", "-1"], ["--iters", "0"],
                                ["--peak-tflops", "nan"], ["--instance-type", "bogus"], ["1", "99999"]],
}


@pytest.mark.parametrize("module", sorted(BAD_NODE_ARGS))
def test_bad_arguments_exit_2_with_one_line_before_anything_runs(tmp_path, module):
    """A bad argument ends before salloc/srun/mpirun: exit 2, one line naming the command, no usage block."""
    env = base_env(tmp_path)
    prog = module.rsplit(".", 1)[1].replace("_", "-")
    for args in BAD_NODE_ARGS[module]:
        res = run_module(module, args, env, tmp_path)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), (args, res.stderr)
        assert res.stdout == "" and "Traceback" not in res.stderr
    assert run_nccl_test.find_nccl_tests("all_reduce", str(tmp_path / "missing")) is None


def test_sizes_are_whole_byte_counts():
    assert byte_size("1.5G") == 3 << 29 and byte_size("16gb") == 16 << 30 and byte_size(".5K") == 512
    for bad in ("inf", "nan", "1e3", "1.5", "-8", "0", "", "8X", "2048T"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)


def test_every_catalog_type_is_a_well_formed_instance_type():
    from hpq.lifecycle import catalog

    for name in catalog.names():
        assert INSTANCE_TYPE_RE.fullmatch(name), name
        assert INSTANCE_TYPE_RE.fullmatch(name.replace("ml.", "", 1)), name


def test_unused_neuron_devices_from_dev_and_transport(tmp_path, monkeypatch):
    """Stand-in: a torch object that only answers cuda.is_available(); /dev is a temporary folder."""
    from hpq.scripts import distenv

    class Cuda:
        def __init__(self, ok: bool) -> None:
            self.ok = ok

        def is_available(self) -> bool:
            return self.ok

    class Torch:
        def __init__(self, ok: bool) -> None:
            self.cuda = Cuda(ok)

    monkeypatch.delenv("HPQ_TORCH_BACKEND", raising=False)
    assert distenv.unused_neuron_devices(Torch(False), str(tmp_path)) == 0
    for i in range(16):
        (tmp_path / f"neuron{i}").touch()
    (tmp_path / "neuron_misc").touch()
    assert distenv.unused_neuron_devices(Torch(False), str(tmp_path)) == 16
    assert distenv.unused_neuron_devices(Torch(True), str(tmp_path)) == 0
    monkeypatch.setenv("HPQ_TORCH_BACKEND", "xla")
    assert distenv.unused_neuron_devices(Torch(False), str(tmp_path / "none")) == -1


@pytest.mark.root
@pytest.mark.parametrize("shared_ready", [True, False], ids=["lifecycle-made-it", "root-only-fsx"])
def test_results_go_to_fsx_for_a_normal_user(request, shared_ready):
    """As a non-root user on a mounted /fsx whose root is root:root 0755 (a new Lustre filesystem), results
    go to /fsx/hpq-results when the lifecycle made it 1777, and to ~/hpq-results only when it did not.
    Real mount (tmpfs in a private mount namespace) and a real uid switch (setpriv to nobody)."""
    if os.geteuid() != 0:
        pytest.fail("needs root (unshare -m, mount, setpriv): CI runs the suite as root")
    # pytest's tmp_path sits under a root-only 0700 directory: the unprivileged user needs its own.
    base = Path(tempfile.mkdtemp(prefix="hpq-results-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    fsx, home = base / "fsx", base / "home"
    fsx.mkdir()
    home.mkdir()
    home.chmod(0o777)
    make = f"mkdir -m 1777 {fsx}/hpq-results && chmod 1777 {fsx}/hpq-results && " if shared_ready else ""
    probe = "from hpq.scripts.launch import results_dir; print(results_dir())"
    script = (f"mount -t tmpfs -o mode=0755 none {fsx} && {make}"
              f"exec setpriv --reuid 65534 --regid 65534 --clear-groups {shlex.quote(sys.executable)} -S -c {shlex.quote(probe)}")  # -S: no editable finder
    env = dict(os.environ, HPQ_FSX=str(fsx), HOME=str(home), PYTHONPATH=str(bundle_root_for_tests(base)))
    env.pop("HPQ_RESULTS_DIR", None)
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=env,
                         capture_output=True, text=True, timeout=60, cwd=base)  # not a checkout's hpq/
    assert res.returncode == 0, res.stderr
    expected = fsx / "hpq-results" if shared_ready else home / "hpq-results"
    assert res.stdout.strip() == str(expected)


def bundle_root_for_tests(tmp_path: Path) -> Path:
    """The node bundle as it ships, readable by an unprivileged user."""
    root = tmp_path / "opt-hpq"
    for key, src in bundle.node_bundle_files().items():
        dest = root / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src).read_bytes())
    for d in [root, *root.rglob("*")]:
        d.chmod(0o755 if d.is_dir() else 0o644)
    return root


# ---------------------------------------------------------------------------- run-nanogpt's verdict

NANOGPT_PASS_LOG = """ranks on: 0=ip-10-1-0-7, 1=ip-10-1-0-8
iter 0: loss 4.1700 | 12.3 ms
iter 100: loss 3.0500 | 11.9 ms
loss 4.1700 -> 3.0500: falls; ranks agree (checksum 1.234560e+02, spread 0)
RESULT: PASS
"""


def nanogpt_metrics(**over) -> dict:
    """The keys hpq's nanoGPT writes (scripts/nanogpt.py ``result``), values of a healthy 2-rank run."""
    m = {"first_loss": 4.17, "final_loss": 3.05, "loss_fell": True, "ranks_agree": True, "world_size": 2,
         "checksum": 123.456, "checksum_spread": 0.0, "tokens_per_s": 50000.0, "neuron_devices_unused": False}
    m.update(over)
    return m


@pytest.mark.parametrize("log, metrics, rc, outcome, words", [
    (NANOGPT_PASS_LOG, nanogpt_metrics(), 0, "PASS", "all 2 rank(s) agree"),
    (NANOGPT_PASS_LOG, None, 0, "PASS", "loss fell"),  # rank 0's file on another node: the log says it all
    ("", None, 0, "INCONCLUSIVE", "printed no training result"),  # run-nanogpt --python /bin/true
    (NANOGPT_PASS_LOG, nanogpt_metrics(final_loss=float("nan")), 0, "FAIL", "not finite"),
    (NANOGPT_PASS_LOG, nanogpt_metrics(checksum=float("inf")), 0, "FAIL", "checksum"),
    (NANOGPT_PASS_LOG, nanogpt_metrics(world_size=1), 0, "FAIL", "1 rank(s) trained, 2 were started"),
    (NANOGPT_PASS_LOG.replace("falls", "DID NOT FALL"), nanogpt_metrics(final_loss=4.5, loss_fell=False), 0,
     "FAIL", "did not fall"),
    (NANOGPT_PASS_LOG.replace("ranks agree", "ranks DISAGREE"), nanogpt_metrics(ranks_agree=False), 0, "FAIL",
     "different weights"),
    (NANOGPT_PASS_LOG, nanogpt_metrics(), 1, "FAIL", "exited with status 1"),
    (NANOGPT_PASS_LOG.replace("RESULT: PASS", "RESULT: " + "INCONCLUSIVE: the model trained on the host CPUs"),
     nanogpt_metrics(neuron_devices_unused=True), 0, "INCONCLUSIVE", "Neuron devices were not used"),
    ("ranks on: 0=a, 1=b\nloss nan -> nan: DID NOT FALL; ranks agree (checksum nan, spread nan)\n", None, 0, "FAIL",
     "not finite"),
])
def test_nanogpt_verdict_needs_finite_metrics_from_every_rank(tmp_path, log, metrics, rc, outcome, words):
    """Issue 19: `run-nanogpt --python /bin/true` reported PASS with no metrics. PASS now needs a finite loss
    that fell, every started rank, agreeing weights and exit 0; each broken twin names what is missing."""
    from hpq.scripts import run_nanogpt

    path = tmp_path / "run.log"
    path.write_text(log)
    verdict, message = run_nanogpt.assess(rc, str(path), metrics, 2)
    assert run_nanogpt.judge(rc, str(path), metrics, 2) == verdict
    assert verdict == outcome and message.startswith(outcome + ": ") and words in message, message


def test_run_nanogpt_with_bin_true_is_not_a_pass(tmp_path):
    res = run_module("hpq.scripts.run_nanogpt", ["1", "1", "--launcher", "local", "--python", "/bin/true",
                                                 "--ckpt-every", "0"], base_env(tmp_path), tmp_path)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "# INCONCLUSIVE: no loss reported" in res.stdout and "PASS" not in res.stdout
    doc = json.loads(next((tmp_path / "results").glob("nanogpt-*.json")).read_text())
    assert doc["verdict"] == doc["outcome"] == "INCONCLUSIVE" and doc["ok"] is False


@pytest.mark.parametrize("itype, busbw, info, code, words", [
    ("ml.g5.48xlarge", 8.99, "socket", 1, "TCP sockets, not EFA"),  # issue 19: passed on bandwidth alone
    ("ml.g5.48xlarge", 12.0, "efa", 0, "PASS: "),
    ("ml.p4d.24xlarge", float("inf"), "efa", 1, "impossible values"),
    ("ml.p4d.24xlarge", 1e300, "efa", 1, "physical limit of 650 GB/s"),
    ("ml.p4d.24xlarge", 78.33, None, 3, "does not say which network"),
])
def test_run_nccl_tests_own_verdict_on_two_nodes(tmp_path, itype, busbw, info, code, words):
    """run-nccl-test judges its own log with the same checks as hpq nccl-report: the transport NCCL names, the
    values' physical limit; the stand-ins of mpirun_cluster print the chosen log."""
    from tests.nccl_logs import allreduce_log, efa_info, socket_info

    lines = {"efa": efa_info("node-1"), "socket": socket_info("node-1"), None: []}[info]
    text = allreduce_log(["node-1", "node-2"], 2, min(busbw, 78.33), nccl_info=lines)
    if busbw > 1e6:  # the 1 GiB row's out-of-place busbw made impossible
        row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("1073741824 "))
        text = text.replace(row, row.replace(f" {row.split()[7]} ", f" {busbw} ", 1))
    env, _rec = mpirun_cluster(tmp_path, log_text=text)
    res = run_module("hpq.scripts.run_nccl_test", ["2", "2", "--binary", str(tmp_path / "all_reduce_perf"),
                                                   "--instance-type", itype], env, tmp_path)
    assert res.returncode == code and words in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    doc = json.loads(next((tmp_path / "results").glob("nccl-test-*.json")).read_text(),
                     parse_constant=lambda t: pytest.fail("non-standard JSON token " + t))
    assert doc["outcome"] == {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[code]


def test_debug_subsys_always_names_the_network():
    from hpq.scripts.run_nccl_test import debug_subsys

    assert debug_subsys("INFO", None) == "INIT,NET"
    assert debug_subsys("INFO", "COLL") == "INIT,NET,COLL" and debug_subsys("INFO", "ALL") == "ALL"
    assert debug_subsys("INFO", "^NET") == "INIT,NET" and debug_subsys("WARN", "X") == "X"
