"""run-nanogpt: a multi-node DDP training smoke test (and GPT-2-124M benchmark).

Run on the Slurm controller. Makes an allocation when not inside one, asks a worker for
its transport environment (same function as the lifecycle: nccl on EFA GPU nodes, gloo
on TCP-only or CPU nodes), then starts ``hpq.scripts.nanogpt`` with srun, one process per
GPU. Checkpoints go to the shared filesystem (/fsx/hpq-results/nanogpt/<model> when FSx is
mounted) every --ckpt-every iterations and a rerun resumes from the newest. Exit 0 when
the loss fell and all ranks hold the same weights; 1 otherwise (also on Trainium, where the
model trains on the host CPUs and the verdict is INCONCLUSIVE: the Neuron devices were not
used); 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

from hpq.scripts import args as checks
from hpq.scripts import launch, nanogpt

MODULE = "hpq.scripts.run_nanogpt"

EPILOG = """examples:
  run-nanogpt                          2 nodes, every GPU, tiny model, 200 iterations
  run-nanogpt 2 8 --iters 400          rerun later: resumes from the newest checkpoint
  run-nanogpt 2 8 --data /fsx/input.txt
  run-nanogpt 1 8 --model gpt2-124m --compile --iters 300 --ckpt-every 0    throughput benchmark
  run-nanogpt 1 2 --launcher local     one host without Slurm
"""


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = checks.OneLineParser(prog="run-nanogpt", description=__doc__.split("\n\n")[1], epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    checks.add_nodes_argument(ap)
    ap.add_argument("gpus_per_node", nargs="?", type=checks.count(1, checks.MAX_PER_NODE, "GPUS_PER_NODE"),
                    default=None, help="processes per node (default: the instance type's GPUs, else detected, else 1)")
    ap.add_argument("--iters", type=checks.count(1, 10 ** 9, "--iters"), default=200)
    ap.add_argument("--data", default=None, help="text file for character-level training (default: generated)")
    ap.add_argument("--model", choices=sorted(nanogpt.PRESETS), default="tiny")
    ap.add_argument("--batch-size", type=checks.count(1, 1 << 20, "--batch-size"), default=None)
    ap.add_argument("--grad-accum", type=checks.count(1, 1 << 20, "--grad-accum"), default=None, help="micro-batches per optimizer step (default: preset)")
    ap.add_argument("--compile", action="store_true", help="torch.compile (GPU)")
    ap.add_argument("--ckpt-dir", default=None, help="default: <results>/nanogpt/<model> (shared /fsx when mounted)")
    ap.add_argument("--ckpt-every", type=checks.count(0, 10 ** 9, "--ckpt-every"), default=50,
                    help="steps between checkpoints (0: none)")
    ap.add_argument("--fresh", action="store_true", help="ignore existing checkpoints")
    ap.add_argument("--log-every", type=checks.count(1, 10 ** 9, "--log-every"), default=10)
    ap.add_argument("--peak-tflops", type=checks.positive, default=None, help="the GPU's peak TFLOP/s for MFU")
    ap.add_argument("--grad-comm", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: all-reduce gradients in bf16 (half the bytes)")
    ap.add_argument("--bucket-cap-mb", type=checks.positive, default=None, help="DDP bucket size (default 100)")
    ap.add_argument("--no-ddp-graph-split", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--static-graph", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--instance-type", default=None, type=checks.instance_type)
    ap.add_argument("--launcher", choices=("auto", "slurm", "local"), default="auto")
    ap.add_argument("--python", default=None, help="python with torch (default: found on the node)")
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--no-exclusive", dest="exclusive", action="store_false")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.data and not os.path.isfile(args.data):
        ap.error("--data %s: no such file" % args.data)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    return launch.command_main("run-nanogpt", argv, parse_args, _run)


def _run(args: argparse.Namespace, raw: List[str]) -> int:
    launcher, hosts, done = launch.place(args, raw, MODULE, "hpq-nanogpt", args.gpus_per_node)
    if done is not None:
        return done
    nodes = len(hosts) or 1
    wenv = launch.worker_environment(launcher, args.instance_type, sys.executable)
    gpus = args.gpus_per_node or launch.default_gpus(wenv, wenv.get("instance_type"))
    env_vars: Dict[str, str] = dict(wenv.get("variables") or {})
    env_vars.setdefault("PYTHONUNBUFFERED", "1")
    env = launch.child_env(env_vars, wenv.get("path_prepend") or ())
    outdir = launch.results_dir(args.log_dir)
    base = os.path.join(outdir, "nanogpt-%s" % launch.run_stamp())
    ckpt_dir = args.ckpt_dir or os.path.join(outdir, "nanogpt", args.model)
    targs = ["--model", args.model, "--iters", str(args.iters), "--ckpt-every", str(args.ckpt_every),
             "--log-every", str(args.log_every), "--json", base + ".metrics.json"]
    if args.ckpt_every:
        targs += ["--ckpt-dir", ckpt_dir]
    for flag, value in (("--data", args.data and os.path.abspath(args.data)), ("--batch-size", args.batch_size),
                        ("--grad-accum", args.grad_accum),
                        ("--peak-tflops", args.peak_tflops), ("--bucket-cap-mb", args.bucket_cap_mb)):
        if value:
            targs += [flag, str(value)]
    if args.compile:
        targs.append("--compile")
    if args.fresh:
        targs.append("--fresh")
    if args.grad_comm != "fp32":
        targs += ["--grad-comm", args.grad_comm]
    if args.no_ddp_graph_split:
        targs.append("--no-ddp-graph-split")
    if args.static_graph:
        targs.append("--static-graph")
    print("# run-nanogpt: %d node(s) x %d process(es), instance type %s, transport %s, backend %s" % (
        nodes, gpus, wenv.get("instance_type") or "unknown", wenv.get("transport") or "unknown",
        env_vars.get("HPQ_TORCH_BACKEND") or "auto (nccl on GPUs, else gloo)"))
    for note in wenv.get("notes") or []:
        print("# note: %s" % note)
    python = launch.find_torch_python(args.python)
    cmd = launch.srun_command(nodes, gpus, python, "hpq.scripts.nanogpt", targs, report_env=True)
    if args.dry_run:
        print("would run: %s" % " ".join(cmd if launcher == "slurm" else [python, "-m", "hpq.scripts.nanogpt"]
                                         + targs))
        for k in sorted(env_vars):
            print("  %s=%s" % (k, env_vars[k]))
        return 0
    log_path = base + ".log"
    with open(log_path, "w") as log:
        log.write("# hpq run-nanogpt %s: nodes %s, processes per node %d\n" % (
            " ".join(raw), ",".join(hosts) or "localhost", gpus))
        if launcher == "slurm":
            rc = launch.tee(cmd, env, log)
        else:
            rc = launch.run_local(python, "hpq.scripts.nanogpt", targs, gpus, env, log, report_env=True)
    result: Dict[str, object] = {"command": "run-nanogpt " + " ".join(raw), "launcher": launcher, "nodes": nodes,
                                 "hosts": hosts, "processes_per_node": gpus,
                                 "instance_type": wenv.get("instance_type"), "transport": wenv.get("transport"),
                                 "environment": env_vars, "exit_status": rc, "log": log_path,
                                 "ckpt_dir": ckpt_dir if args.ckpt_every else None}
    try:
        with open(base + ".metrics.json") as fh:
            result["metrics"] = json.load(fh)
        os.remove(base + ".metrics.json")  # merged into the result below: one JSON per run
    except (OSError, ValueError):
        result["metrics"] = None  # rank 0 ran on a node that does not share this directory
    verdict = judge(rc, log_path, result.get("metrics"))
    result["ok"] = verdict == "PASS"
    result["verdict"] = verdict
    launch.write_json(base + ".json", result)
    if verdict == "INCONCLUSIVE":
        print("# %s" % nanogpt.NEURON_UNUSED_RESULT)
    print("# %s (exit status %d)\n# log: %s\n# result: %s.json" % (verdict, rc, log_path, base))
    return 0 if verdict == "PASS" else 1


def judge(rc: int, log_path: str, metrics: Optional[Dict]) -> str:
    """PASS, FAIL, or INCONCLUSIVE when the run trained but left the Trainium devices idle (exit 1: a
    Trainium cluster has not been shown to train). Rank 0's metrics may live on another node: the log's
    RESULT line says it too."""
    if rc != 0:
        return "FAIL"
    unused = bool(metrics and metrics.get("neuron_devices_unused"))
    try:
        with open(log_path, errors="replace") as fh:
            unused = unused or any(line.startswith("RESULT: INCONCLUSIVE") for line in fh)
    except OSError:
        pass
    return "INCONCLUSIVE" if unused else "PASS"


if __name__ == "__main__":
    sys.exit(main())
