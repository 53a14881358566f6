"""run-nccl-test: all-reduce (or another collective) across the cluster, with a verdict.

Run on the Slurm controller. Builds the hostfile from the allocation (it makes one with
``salloc`` when not inside one), asks a worker for its transport environment (the same
function the lifecycle uses), then runs nccl-tests through mpirun the way the measured runs did (docs/design.md)
(ob1 PML, TCP btl for MPI's own control traffic, loopback/docker excluded, every transport
variable passed with -x, 8 B to 16 GB by factor 2). Without an nccl-tests binary it runs
hpq's built-in torch.distributed benchmark with srun, one task per GPU. The output is
parsed by the same code as ``hpq nccl-report``; the log and a JSON result land in
/fsx/hpq-results when FSx is mounted, else ~/hpq-results.

Exit 0 PASS: every check holds (complete run, possible values, no wrong elements, EFA named in
the log on EFA types, peak at least 70% of the healthy published figure for the type and node
count); 1 FAIL: a check failed or the run failed; 3 INCONCLUSIVE: evidence is missing (no
published figure for the type and node count, no transport line); 2: bad arguments; 130: Ctrl-C.
``--expect`` names another figure (or none, which waives the bandwidth check).

``--sweep`` measures two nodes at a time instead (hpq.scripts.sweep, hpq.scripts.nccl_sweep)
and names the node that is slower than the rest: exit 0 none (every node measured with at least two
partners), 1 slow node(s) or failed pairs, 3 not every node could be judged.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, TextIO, Tuple

from hpq.lifecycle import catalog
from hpq.scripts import (
    distenv,
    env_check,
    launch,
    nccl_report,
    nccl_sweep,
    outcome,
    result_metrics,
    sweep,
    verdicts,
)
from hpq.scripts.args import (
    MAX_NODES,
    MAX_PER_NODE,
    OneLineParser,
    add_nodes_argument,
    byte_size,
    check_nccl_debug,
    check_size_range,
    count,
    instance_type,
    positive,
)
from hpq.scripts.nccl_bench import DTYPES, OPS

MODULE = "hpq.scripts.run_nccl_test"
NCCL_TESTS_DIRS = (
    "/opt/nccl-tests/build",
    "/usr/local/nccl-tests/build",
    "/opt/aws/nccl-tests/build",
    "/home/ubuntu/nccl-tests/build",
    "/fsx/nccl-tests/build",
    "~/nccl-tests/build",
)
MPIRUN_CANDIDATES = ("/opt/amazon/openmpi/bin/mpirun",)
LIB_DIRS = ("/opt/amazon/efa/lib", "/opt/amazon/efa/lib64", "/opt/amazon/openmpi/lib", "/opt/amazon/openmpi/lib64",
            "/opt/aws-ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/lib")
NCCL_TESTS_OPS = OPS + ("broadcast", "reduce", "alltoall", "sendrecv", "gather", "scatter", "hypercube")

EPILOG = """examples:
  run-nccl-test                      2 nodes, every GPU, all_reduce 8 B..16 GB
  run-nccl-test 4 8                  4 nodes x 8 GPUs
  run-nccl-test 2 8 --op all_gather -b 1M -e 1G
  run-nccl-test 2 --builtin          force hpq's torch.distributed benchmark
  run-nccl-test 2 --expect 350       judge against your own baseline (GB/s) instead of the catalog
  run-nccl-test 2 --expect none      report the bandwidth, judge only completion and #wrong
  run-nccl-test 1 2 --launcher local one host, no Slurm (e.g. a single GPU box)
  run-nccl-test --sweep              every idle node, two at a time: name the slow node
  run-nccl-test 2 --nodelist ip-10-1-0-2,ip-10-1-0-1   exactly these two nodes (salloc/srun -w)
  run-nccl-test --sweep 8 8 --output json   8 nodes x 8 GPUs, the result as JSON on stdout
  hpq nccl-report ~/hpq-results/nccl-test-*.log -t ml.p5.48xlarge   re-judge a saved log
"""


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = OneLineParser(prog="run-nccl-test", description=__doc__.split("\n\n")[1],
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_nodes_argument(ap)
    ap.add_argument("gpus_per_node", nargs="?", type=count(1, MAX_PER_NODE, "GPUS_PER_NODE"),
                    default=None,
                    help="processes per node (default: the instance type's GPUs, else detected, else 1)")
    ap.add_argument("--op", choices=NCCL_TESTS_OPS, default="all_reduce")
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="16G")
    ap.add_argument("-f", "--stepfactor", type=count(2, 1024, "-f"), default=2)
    ap.add_argument("-n", "--iters", type=count(1, 10 ** 6, "-n"), default=20)
    ap.add_argument("-w", "--warmup", type=count(0, 10 ** 6, "-w"), default=5)
    ap.add_argument("-d", "--datatype", choices=sorted(DTYPES), default="float")
    ap.add_argument("--instance-type", default=None, type=instance_type,
                    help="worker instance type (default: the worker's node info / IMDS)")
    ap.add_argument("--expect", default=None, metavar="catalog|none|GBPS",
                    help="what the peak bus bandwidth is judged against: catalog (default: the catalog's figure "
                         "for the instance type and node count), none (reported, not judged: the run must still "
                         "finish cleanly with no wrong elements), or your own figure in GB/s (e.g. a baseline "
                         "from a healthy cluster; pass at 70%%, 80%% on one node)")
    ap.add_argument("--builtin", action="store_true", help="use the built-in benchmark even if nccl-tests exists")
    ap.add_argument("--binary", default=None, help="nccl-tests binary to run (default: search $NCCL_TESTS_HOME, "
                                                   "/opt/nccl-tests/build, ...)")
    ap.add_argument("--launcher", choices=("auto", "slurm", "local"), default="auto")
    ap.add_argument("--python", default=None, help="python with torch for the built-in benchmark")
    ap.add_argument("--log-dir", default=None, help="default: /fsx/hpq-results when mounted, else ~/hpq-results")
    ap.add_argument("--no-exclusive", dest="exclusive", action="store_false",
                    help="do not ask salloc for whole nodes")
    ap.add_argument("--nccl-debug", default=None,
                    help="NCCL_DEBUG level (default INFO, subsystems INIT,NET: shows the transport chosen)")
    ap.add_argument("--nodelist", default=None, type=node_list, metavar="HOST,HOST",
                    help="run on exactly these Slurm nodes, in this order (salloc/srun -w, --nodelist in "
                         "salloc(1) and srun(1)); NODES, if given, must be their count. hpq doctor --fix uses it "
                         "to test a fixed node paired with a healthy one")
    ap.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    sw = ap.add_argument_group("pairwise sweep (find the slow node)")
    sw.add_argument("--sweep", action="store_true",
                    help="all-reduce two nodes at a time (all GPUs of both), concurrent pairs in round-robin "
                         "rounds; score each node by the median of its pairs and name the slow ones "
                         "(default NODES: every idle node)")
    sw.add_argument("--sweep-size", default=None, metavar="SIZE",
                    help="message size per pair (default: 256M over EFA, 64M over TCP, 1M with gloo on CPUs)")
    sw.add_argument("--pair-timeout", type=positive, default=180.0, metavar="SECONDS",
                    help="a pair without a result after this long is stopped and counted as failed (default 180)")
    sw.add_argument("--budget", type=positive, default=1800.0, metavar="SECONDS",
                    help="overall limit: a round after the first starts only while a pair timeout (or 30 s) "
                         "of it is left; its pairs stop when it is spent (default 1800)")
    sw.add_argument("--pairs-at-once", type=count(1, MAX_NODES, "--pairs-at-once"), default=None,
                    metavar="N",
                    help="run at most N pairs of a round at the same time (default: every pair of the round); "
                         "1 measures each pair alone, e.g. when the nodes share CPUs or a fabric link")
    sw.add_argument("--output", choices=("table", "json"), default="table",
                    help="json: the sweep's result as one JSON object on stdout, progress on stderr")
    args = ap.parse_args(argv)
    check_size_range(ap, args.minbytes, args.maxbytes)
    check_nccl_debug(ap, args.nccl_debug)
    if args.nccl_debug is None:  # INFO even when the shell exports another level: the verdict needs the
        args.nccl_debug = "INFO"  # "Using network" line (nccl_report's transport check); --nccl-debug overrides
    if args.builtin and args.op not in OPS:
        ap.error("the built-in benchmark supports --op %s" % ", ".join(OPS))
    if args.expect is not None:
        try:
            args.expect = nccl_report.parse_expect(args.expect)
        except nccl_report.ReportError as exc:
            ap.error(str(exc))
    if args.nodelist is not None:
        if args.sweep:
            ap.error("--nodelist pins one run; --sweep chooses its own pairs")
        if args.launcher == "local":
            ap.error("--nodelist names Slurm nodes; it cannot use --launcher local")
        if args.nodes is not None and args.nodes != len(args.nodelist):
            ap.error("NODES %d but --nodelist names %d node(s)" % (args.nodes, len(args.nodelist)))
        args.nodes = len(args.nodelist)
    if args.sweep:
        if args.expect is not None:
            ap.error("--expect judges a single run; --sweep compares the nodes with each other")
        if args.op != "all_reduce":
            ap.error("--sweep measures all_reduce only")
        if args.launcher == "local":
            ap.error("--sweep runs pairs of nodes through Slurm; it cannot use --launcher local")
        if args.nodes is not None and args.nodes < 2:
            ap.error("--sweep needs at least 2 nodes")
        if args.sweep_size is not None:
            try:
                byte_size(args.sweep_size)
            except argparse.ArgumentTypeError as exc:
                ap.error(str(exc))
    else:
        given = [o for o, v in (("--sweep-size", args.sweep_size), ("--output json", args.output == "json"),
                                ("--pairs-at-once", args.pairs_at_once is not None)) if v]
        if given:
            ap.error("%s only goes with --sweep" % " and ".join(given))
    return args


def debug_subsys(level: str, exported: Optional[str]) -> str:
    """NCCL_DEBUG_SUBSYS for the run: at INFO, INIT and NET always (they print "Using network X", which the
    verdict judges the transport by), added to what the user exported; NCCL's own default (INIT) without it."""
    if level.upper() not in ("INFO", "TRACE"):
        return exported or ""
    parts = [p for p in (exported or "").split(",") if p.strip()]
    if any(p.strip().upper() == "ALL" for p in parts) and not any(p.strip().startswith("^") for p in parts):
        return ",".join(parts)
    parts = [p for p in parts if p.strip().lstrip("^").upper() not in ("INIT", "NET")]
    return ",".join(["INIT", "NET"] + parts)


def find_nccl_tests(op: str, explicit: Optional[str] = None) -> Optional[str]:
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    exe = "%s_perf" % op
    dirs: List[str] = []
    home = os.environ.get("NCCL_TESTS_HOME")
    if home:
        dirs += [os.path.join(home, "build"), home]
    dirs += [os.path.expanduser(d) for d in NCCL_TESTS_DIRS]
    for d in dirs:
        p = os.path.join(d, exe)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which(exe)


def find_mpirun() -> Optional[str]:
    for p in MPIRUN_CANDIDATES:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("mpirun")


def library_path() -> str:
    parts = [d for d in LIB_DIRS if os.path.isdir(d)]
    parts += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p not in parts]
    return os.pathsep.join(parts)


def write_hostfile(path: str, hosts, slots: int) -> str:
    """An Open MPI hostfile: one ``<host> slots=<n>`` line per host."""
    with open(path, "w") as fh:
        fh.write("".join("%s slots=%d\n" % (h, slots) for h in hosts))
    return path


def bench_args(args: argparse.Namespace) -> List[str]:
    return ["-b", args.minbytes, "-e", args.maxbytes, "-f", str(args.stepfactor), "-n", str(args.iters),
            "-w", str(args.warmup), "-c", "1"]


def mpirun_command(mpirun: str, binary: str, hostfile: str, total: int, env: Dict[str, str],
                   args: argparse.Namespace, report_env: bool = False) -> List[str]:
    """mpirun of nccl-tests; ``report_env`` starts each rank through ``env_check.wrap``."""
    cmd = [mpirun]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-np", str(total), "--hostfile", hostfile, "--bind-to", "none",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_exclude", "lo,docker0"]
    # -x: the worker's transport environment and what HPQ_KEEP_ENV names, nothing else inherited (mpirun
    # runs with launch.child_env, from which every other transport variable is removed)
    for k in sorted(set(env) | set(launch.kept_transport_env())):
        cmd += ["-x", k]
    program = [binary] + bench_args(args) + ["-g", "1", "-d", args.datatype]
    return cmd + (env_check.wrap(program) if report_env else program)


HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def node_list(text: str) -> List[str]:
    """``--nodelist``: Slurm node names, comma-separated, each once (no hostlist ranges: a pair is named
    node by node)."""
    names = text.split(",")
    bad = [n for n in names if not HOST.fullmatch(n)]
    if bad:
        raise argparse.ArgumentTypeError("not a node name: %r (HOST,HOST, no spaces or ranges)" % bad[0])
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError("a node named twice in %s" % text)
    if len(names) > MAX_NODES:
        raise argparse.ArgumentTypeError("at most %d nodes" % MAX_NODES)
    return names


def main(argv: Optional[List[str]] = None) -> int:
    return launch.command_main("run-nccl-test", argv, parse_args, _run)


def _run(args: argparse.Namespace, raw: List[str]) -> int:
    out = sys.stdout
    if args.sweep and args.output == "json":
        # stdout carries the JSON result only; everything else (progress, salloc) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            return _run_any(args, raw, out)
    return _run_any(args, raw, out)


def efa_type(instance_type: Optional[str]) -> bool:
    """Whether the catalog gives the workers' type EFA (then TCP sockets in a log are a failure)."""
    try:
        return bool(instance_type) and catalog.lookup(instance_type).has_efa  # type: ignore[arg-type]
    except catalog.UnknownInstanceType:
        return False


def idle_node_count() -> int:
    """Nodes a sweep takes by default: every idle node (``sinfo -t idle``), at least two."""
    try:
        res = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise launch.LaunchError("sinfo failed: %s" % exc) from None
    if res.returncode != 0:
        raise launch.LaunchError("sinfo failed (exit %d): %s" % (res.returncode, res.stderr.strip()))
    idle = len(set(res.stdout.split()))
    if idle < 2:
        raise launch.LaunchError("a sweep needs at least 2 idle nodes; sinfo shows %d (pass NODES to wait for "
                                 "busy ones)" % idle)
    return idle


def _run_any(args: argparse.Namespace, raw: List[str], out: TextIO) -> int:
    if args.sweep and args.nodes is None and not launch.in_allocation():
        args.nodes = idle_node_count()
    launcher, hosts, done = launch.place(args, raw, MODULE, "hpq-nccl-test", args.gpus_per_node)
    if done is not None:
        return done
    nodes = len(hosts) or 1
    wenv = launch.worker_environment(launcher, args.instance_type, sys.executable)
    itype = wenv.get("instance_type")
    gpus = args.gpus_per_node or launch.default_gpus(wenv, itype)
    total = nodes * gpus
    env_vars: Dict[str, str] = dict(wenv.get("variables") or {})
    env_vars["NCCL_DEBUG"] = args.nccl_debug
    subsys = debug_subsys(args.nccl_debug, os.environ.get("NCCL_DEBUG_SUBSYS"))
    if subsys:
        env_vars["NCCL_DEBUG_SUBSYS"] = subsys
    ld = library_path()
    if ld:
        env_vars["LD_LIBRARY_PATH"] = ld
    env = launch.child_env(env_vars, wenv.get("path_prepend") or ())

    outdir = launch.results_dir(args.log_dir, create=not args.dry_run)
    base = os.path.join(outdir, "nccl-test-%s" % launch.run_stamp())
    binary = None if args.builtin else find_nccl_tests(args.op, args.binary)
    mpirun = find_mpirun() if binary and launcher == "slurm" else None
    if args.binary and not binary:
        raise launch.LaunchError("--binary %s is not an executable file" % args.binary)
    if args.sweep:
        return run_sweep(args, raw, hosts, gpus, wenv, env_vars, env, binary, mpirun, outdir, out)

    print("# run-nccl-test: %d node(s) x %d process(es), instance type %s, transport %s" % (
        nodes, gpus, itype or "unknown", wenv.get("transport") or "unknown"))
    for note in wenv.get("notes") or []:
        print("# note: %s" % note)
    if binary and (mpirun or launcher == "local"):
        mode = "nccl-tests"
        if launcher == "slurm":
            hostfile = write_hostfile(base + ".hosts", hosts, gpus)
            cmd = mpirun_command(mpirun or "mpirun", binary, hostfile, total, env_vars, args, report_env=True)
        else:
            cmd = env_check.wrap([binary] + bench_args(args) + ["-g", str(gpus), "-d", args.datatype])
        runner = None
    else:
        mode = "built-in"
        if binary and not mpirun:
            print("# note: %s found but no mpirun: using the built-in benchmark" % binary)
        elif not args.builtin:
            print("# note: no nccl-tests %s_perf found ($NCCL_TESTS_HOME, %s): using the built-in "
                  "torch.distributed benchmark" % (args.op, ", ".join(NCCL_TESTS_DIRS[:2])))
        python = launch.find_torch_python(args.python)
        bargs = bench_args(args) + ["--op", args.op, "-d", args.datatype]
        if launcher == "slurm":
            pin = ["-w", ",".join(hosts)] if args.nodelist else []
            cmd = launch.srun_command(nodes, gpus, python, "hpq.scripts.nccl_bench", bargs, extra=pin,
                                      report_env=True)
            runner = None
        else:
            cmd = [python, "-m", "hpq.scripts.nccl_bench"] + bargs
            runner = (python, bargs)
    if args.dry_run:
        print("would run (%s): %s" % (mode, " ".join(cmd)))
        for k in sorted(env_vars):
            print("  %s=%s" % (k, env_vars[k]))
        return 0
    log_path = base + ".log"
    with open(log_path, "w") as log:
        log.write("# hpq run-nccl-test %s: mode %s, nodes %s, processes per node %d, instance type %s\n" % (
            " ".join(raw), mode, ",".join(hosts) or "localhost", gpus, itype or "unknown"))
        for k in sorted(env_vars):
            log.write("# env %s=%s\n" % (k, env_vars[k]))
        if runner:
            rc = launch.run_local(runner[0], "hpq.scripts.nccl_bench", runner[1], gpus, env, log, report_env=True)
        else:
            rc = launch.tee(cmd, env, log)
    # The ranks print their blocks before the benchmark starts: the log's first MAX_LOG_BYTES (the report
    # parser's own bound) hold them, and a run that flooded its log costs no more memory than that.
    with open(log_path, errors="replace") as fh:
        env_result = env_check.check(fh.read(nccl_report.MAX_LOG_BYTES), dict(env_vars, **launch.kept_transport_env()), os.environ,
                                     "`hpq nccl-env %s`" % itype if itype else "the worker's environment",
                                     nodes, required=True)
    result = {"command": "run-nccl-test " + " ".join(raw), "mode": mode, "launcher": launcher, "nodes": nodes,
              "hosts": hosts, "processes_per_node": gpus, "instance_type": itype,
              "transport": wenv.get("transport"), "environment": env_vars, "exit_status": rc, "log": log_path}
    return verdicts.judge_log("nccl-tests" if mode == "nccl-tests" else "the built-in benchmark", log_path, rc,
                              result, itype, nodes, args.expect, env=env_result)


def run_sweep(args: argparse.Namespace, raw: List[str], hosts: List[str], gpus: int, wenv: Dict,
              env_vars: Dict[str, str], env: Dict[str, str], binary: Optional[str], mpirun: Optional[str],
              outdir: str, out: TextIO) -> int:
    """Pairs of nodes through nccl-tests (mpirun, two-host hostfile) or the built-in benchmark (srun -w)."""
    if len(hosts) < 2:
        raise launch.LaunchError("--sweep needs at least 2 nodes; the allocation has %d (%s)" % (
            len(hosts), ",".join(hosts)))
    itype = wenv.get("instance_type")
    tname = wenv.get("transport")
    mode = "nccl-tests" if binary and mpirun else "built-in"
    python = launch.find_torch_python(args.python) if mode == "built-in" else None
    cpu_only = mode == "built-in" and not int(wenv.get("gpus") or 0)
    size = byte_size(args.sweep_size) if args.sweep_size else sweep.default_size(tname, cpu_only)
    rounds = sweep.schedule(hosts)
    stamp = launch.run_stamp()
    log_dir = os.path.join(outdir, "nccl-sweep-%s" % stamp)
    print("# run-nccl-test --sweep: %d node(s) x %d process(es), instance type %s, transport %s, %s, %d B per "
          "pair, %d pair(s) in %d round(s)" % (len(hosts), gpus, itype or "unknown", tname or "unknown", mode, size,
                                               sum(len(r) for r in rounds), len(rounds)))
    for note in wenv.get("notes") or []:
        print("# note: %s" % note)
    if binary and not mpirun:
        print("# note: %s found but no mpirun: using the built-in benchmark" % binary)
    job = os.environ.get("SLURM_JOB_ID") or "0"
    base_port = distenv.port_for_job(job)
    minutes = int(math.ceil(args.pair_timeout / 60.0)) + 1
    pargs = argparse.Namespace(**vars(args))  # nccl-tests at the one sweep size
    pargs.minbytes = pargs.maxbytes = str(size)

    def command(pair: sweep.Pair, index: int, log_path: str, write: bool = True) -> Tuple[List[str], Dict[str, str]]:
        if mode == "nccl-tests":
            hostfile = log_path[:-len(".log")] + ".hosts"
            if write:
                write_hostfile(hostfile, pair, gpus)
            return mpirun_command(mpirun or "mpirun", binary or "", hostfile, 2 * gpus, env_vars, pargs), env
        bargs = ["-b", str(size), "-e", str(size), "-f", "2", "-n", str(args.iters), "-w", str(args.warmup),
                 "-c", "1", "--op", "all_reduce", "-d", args.datatype]
        cmd = launch.srun_command(2, gpus, python or "python3", "hpq.scripts.nccl_bench", bargs,
                                  extra=["-w", ",".join(pair), "--time=%d" % minutes])
        # Its own rendezvous: a port no other pair of this sweep uses; the address is derived by every rank
        # from the step's node list (distenv), where Slurm put rank 0, whatever order -w names the nodes in.
        penv = dict(env, MASTER_PORT=str(20000 + (base_port - 20000 + 1 + index) % 20000))
        penv.pop("MASTER_ADDR", None)
        return cmd, penv

    if args.dry_run:
        index = 0
        for rno, pairs in enumerate(rounds, 1):
            for pair in pairs:
                cmd, _env = command(pair, index, os.path.join(log_dir, nccl_sweep.pair_log_name(rno, pair)), False)
                index += 1
                print("would run round %d (%s, hosts %s,%s): %s" % (rno, mode, pair[0], pair[1], " ".join(cmd)))
        return 0
    try:
        results = nccl_sweep.run_rounds(rounds, command, log_dir, args.pair_timeout, args.budget, sys.stdout,
                                        cwd=launch.child_cwd(), at_once=args.pairs_at_once)
    except KeyboardInterrupt:
        print("run-nccl-test: interrupted; the running pairs were stopped (logs in %s)" % log_dir, file=sys.stderr)
        return 130
    extra = {"command": "run-nccl-test " + " ".join(raw), "mode": mode, "launcher": "slurm",
             "processes_per_node": gpus, "instance_type": itype, "transport": tname, "environment": env_vars,
             "log_dir": log_dir}
    doc = sweep.build_report(hosts, results, len(rounds), size, extra,
                             min_gap=sweep.MIN_GAP_CPU if cpu_only else sweep.MIN_GAP,
                             expect_efa=not cpu_only and efa_type(itype))
    path = os.path.join(outdir, "nccl-sweep-%s.json" % stamp)
    doc["result"] = path
    launch.write_json(path, doc)
    result_metrics.publish(doc, "run-nccl-test")  # stderr note at most: stdout and the exit code stay the sweep's
    print()
    print(sweep.format_report(doc))
    print("# pair logs: %s\n# result: %s" % (log_dir, path))
    if args.output == "json":
        out.write(outcome.dumps(doc, indent=2, sort_keys=True) + "\n")
        out.flush()
    return int(doc["exit_code"])  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
