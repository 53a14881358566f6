"""run-nccom-test: Neuron collective benchmark (Trainium) across the cluster, with a verdict.

Runs ``nccom-test`` from the Neuron tools folder (not on the default PATH) on the first
worker of the allocation, over all its nodes (``--hosts``), with ``NEURON_RT_ROOT_COMM_ID``
naming that first worker (the Neuron docs require it for several nodes) and OpenMPI allowed
to run as root (nccom-test refuses otherwise, and HyperPod sessions are root). The transport
environment comes from the same function as the lifecycle. The output is parsed by the
same code as ``hpq nccl-report``; log and JSON land next to run-nccl-test's.

Exit 0 PASS (complete, possible values, at least 70% of the healthy figure for the type and node
count), 1 FAIL (short of it, impossible values, a run that failed or was cut off), 3 INCONCLUSIVE
(no figure for the type and node count: one node, trn1n, trn2), 2 bad arguments, 130 Ctrl-C.
nccom-test prints no transport, so it is not judged (Neuron uses EFA between instances).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Dict, List, Optional

from hpq.lifecycle import catalog, transport
from hpq.scripts import env_check, launch, nccl_report, verdicts
from hpq.scripts.args import (
    MAX_PER_NODE,
    OneLineParser,
    add_nodes_argument,
    check_size_range,
    count,
    instance_type,
)

MODULE = "hpq.scripts.run_nccom_test"
NCCOM_OPS = {"all_reduce": "allr", "all_gather": "allg", "reduce_scatter": "redsct", "alltoall": "alltoall",
             "sendrecv": "sendrecv"}

EPILOG = """examples:
  run-nccom-test                 2 nodes, every NeuronCore, all-reduce 8 B..1 GB (bf16)
  run-nccom-test 4 32 --op all_gather
  run-nccom-test 2 -- --check    extra arguments after -- go to nccom-test unchanged
"""


def default_workers(instance_type: Optional[str]) -> int:
    """NeuronCores per node (catalog.InstanceType.neuron_cores); 32, a trn1's, when the type is not known."""
    if instance_type:
        try:
            entry = catalog.lookup(instance_type)
            if entry.neuron_cores:
                return entry.neuron_cores
        except catalog.UnknownInstanceType:
            pass
    return 32


def root_comm_id(first_host: str) -> str:
    """``NEURON_RT_ROOT_COMM_ID`` for a multi-node run: the host nccom-test runs on, and a free port.

    The Neuron docs (nccom-test user guide, ``-N``) require it for more than one node: the address of
    the instance nccom-test is started on plus a port; AWS's example (awsome-distributed-ai
    micro-benchmarks/nccom-tests/slurm/nccom-tests.sbatch) uses the first node and a port from 62000 up.
    A value the user exported is kept.
    """
    given = os.environ.get("NEURON_RT_ROOT_COMM_ID")
    if given:
        return given
    return "%s:%d" % (first_host, random.randint(62000, 64999))


def parse_args(argv: Optional[List[str]]):
    ap = OneLineParser(prog="run-nccom-test", description=__doc__.split("\n\n")[1], epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_nodes_argument(ap)
    ap.add_argument("workers", nargs="?", type=count(1, MAX_PER_NODE, "WORKERS"), default=None,
                    help="ranks per node (default: NeuronCores)")
    ap.add_argument("--op", choices=sorted(NCCOM_OPS), default="all_reduce")
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="1G")
    ap.add_argument("-f", "--stepfactor", type=count(2, 1024, "-f"), default=2)
    ap.add_argument("-n", "--iters", type=count(1, 10 ** 6, "-n"), default=20)
    ap.add_argument("-w", "--warmup", type=count(0, 10 ** 6, "-w"), default=5)
    ap.add_argument("-d", "--datatype", default="bf16")
    ap.add_argument("--instance-type", default=None, type=instance_type)
    ap.add_argument("--binary", default=None, help="nccom-test path (default %s/nccom-test)" % transport.NEURON_BIN)
    ap.add_argument("--launcher", choices=("auto", "slurm", "local"), default="auto")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--no-exclusive", dest="exclusive", action="store_false")
    ap.add_argument("--dry-run", action="store_true")
    argv = list(argv or [])
    extra: List[str] = []
    if "--" in argv:  # everything after -- goes to nccom-test unchanged
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = ap.parse_args(argv)
    check_size_range(ap, args.minbytes, args.maxbytes)
    args.extra = extra
    return args


def main(argv: Optional[List[str]] = None) -> int:
    return launch.command_main("run-nccom-test", argv, parse_args, _run)


def _run(args, raw: List[str]) -> int:
    launcher, hosts, done = launch.place(args, raw, MODULE, "hpq-nccom-test", None)
    if done is not None:
        return done
    nodes = len(hosts) or 1
    wenv = launch.worker_environment(launcher, args.instance_type, sys.executable)
    itype = wenv.get("instance_type")
    workers = args.workers or default_workers(itype)
    env_vars: Dict[str, str] = dict(wenv.get("variables") or {})
    # nccom-test runs OpenMPI underneath, which refuses root without these (docs/design.md, "The measured runs").
    env_vars["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env_vars["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    if nodes > 1:
        env_vars["NEURON_RT_ROOT_COMM_ID"] = root_comm_id(hosts[0])
    path_prepend = list(wenv.get("path_prepend") or [])
    if transport.NEURON_BIN not in path_prepend:
        path_prepend.append(transport.NEURON_BIN)
    env = launch.child_env(env_vars, path_prepend)
    binary = args.binary or os.environ.get("HPQ_NCCOM_TEST") or os.path.join(transport.NEURON_BIN, "nccom-test")
    ncmd = [binary, "-r", str(workers * nodes), "-N", str(nodes), "-b", args.minbytes, "-e", args.maxbytes,
            "-f", str(args.stepfactor), "-n", str(args.iters), "-w", str(args.warmup), "-d", args.datatype]
    if nodes > 1:
        ncmd += ["--hosts"] + [launch_addr for launch_addr in hosts]
    ncmd += list(args.extra) + [NCCOM_OPS[args.op]]
    # started through env_check.wrap: the log shows the transport environment nccom-test really had
    cmd = (["srun", "-N1", "-n1", launch.EXPORT_ALL, "-w", hosts[0]] if launcher == "slurm" else []) \
        + env_check.wrap(ncmd)
    print("# run-nccom-test: %d node(s) x %d worker(s), instance type %s, transport %s" % (
        nodes, workers, itype or "unknown", wenv.get("transport") or "unknown"))
    if args.dry_run:
        print("would run: %s" % " ".join(cmd))
        for k in sorted(env_vars):
            print("  %s=%s" % (k, env_vars[k]))
        return 0
    outdir = launch.results_dir(args.log_dir)
    base = os.path.join(outdir, "nccom-test-%s" % launch.run_stamp())
    log_path = base + ".log"
    with open(log_path, "w") as log:
        rc = launch.tee(cmd, env, log)
    result: Dict[str, object] = {"command": "run-nccom-test " + " ".join(raw), "launcher": launcher, "nodes": nodes,
                                 "hosts": hosts, "workers_per_node": workers, "instance_type": itype,
                                 "environment": env_vars, "exit_status": rc, "log": log_path}
    # nccom-test starts its own ranks over MPI from the first node: that node's block is the job's environment.
    with open(log_path, errors="replace") as fh:
        env_result = env_check.check(fh.read(nccl_report.MAX_LOG_BYTES), dict(env_vars, **launch.kept_transport_env()),
                                     os.environ, "`hpq nccl-env %s`" % itype if itype else "the worker's environment",
                                     1, required=True)
    return verdicts.judge_log("nccom-test", log_path, rc, result, itype, nodes, env=env_result)


if __name__ == "__main__":
    sys.exit(main())
