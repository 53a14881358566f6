"""run-nanogpt: a multi-node DDP training smoke test (and GPT-2-124M benchmark).

Run on the Slurm controller. Makes an allocation when not inside one, asks a worker for
its transport environment (same function as the lifecycle: nccl on EFA GPU nodes, gloo
on TCP-only or CPU nodes), then starts ``hpq.scripts.nanogpt`` with srun, one process per
GPU. Checkpoints go to the shared filesystem (/fsx/hpq-results/nanogpt/<model> when FSx is
mounted) every --ckpt-every iterations and a rerun resumes from the newest. Exit 0 PASS: the
training printed finite metrics, its loss fell, and every rank it was started with holds the
same weights; 1 FAIL: it failed, the loss did not fall, ranks disagree or are missing, or a
metric is not finite; 3 INCONCLUSIVE: it printed no training result (e.g. --python is not a
python that runs hpq's nanoGPT), or on Trainium it trained on the host CPUs (the Neuron
devices were not used); 2 for bad arguments; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

from hpq.scripts import env_check, launch, nanogpt, result_metrics
from hpq.scripts.args import MAX_PER_NODE, OneLineParser, add_nodes_argument, count, instance_type, positive
from hpq.scripts.outcome import FAIL, INCONCLUSIVE, PASS, exit_code, fmt_number, headline, json_safe

MODULE = "hpq.scripts.run_nanogpt"

EPILOG = """examples:
  run-nanogpt                          2 nodes, every GPU, tiny model, 200 iterations
  run-nanogpt 2 8 --iters 400          rerun later: resumes from the newest checkpoint
  run-nanogpt 2 8 --data /fsx/input.txt
  run-nanogpt 1 8 --model gpt2-124m --compile --iters 300 --ckpt-every 0    throughput benchmark
  run-nanogpt 1 2 --launcher local     one host without Slurm
"""


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = OneLineParser(prog="run-nanogpt", description=__doc__.split("\n\n")[1], epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_nodes_argument(ap)
    ap.add_argument("gpus_per_node", nargs="?", type=count(1, MAX_PER_NODE, "GPUS_PER_NODE"),
                    default=None, help="processes per node (default: the instance type's GPUs, else detected, else 1)")
    ap.add_argument("--iters", type=count(1, 10 ** 9, "--iters"), default=200)
    ap.add_argument("--data", default=None, help="text file for character-level training (default: generated)")
    ap.add_argument("--model", choices=sorted(nanogpt.PRESETS), default="tiny")
    ap.add_argument("--batch-size", type=count(1, 1 << 20, "--batch-size"), default=None)
    ap.add_argument("--grad-accum", type=count(1, 1 << 20, "--grad-accum"), default=None, help="micro-batches per optimizer step (default: preset)")
    ap.add_argument("--compile", action="store_true", help="torch.compile (GPU)")
    ap.add_argument("--ckpt-dir", default=None, help="default: <results>/nanogpt/<model> (shared /fsx when mounted)")
    ap.add_argument("--ckpt-every", type=count(0, 10 ** 9, "--ckpt-every"), default=50,
                    help="steps between checkpoints (0: none)")
    ap.add_argument("--fresh", action="store_true", help="ignore existing checkpoints")
    ap.add_argument("--log-every", type=count(1, 10 ** 9, "--log-every"), default=10)
    ap.add_argument("--peak-tflops", type=positive, default=None, help="the GPU's peak TFLOP/s for MFU")
    ap.add_argument("--grad-comm", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: all-reduce gradients in bf16 (half the bytes)")
    ap.add_argument("--bucket-cap-mb", type=positive, default=None, help="DDP bucket size (default 100)")
    ap.add_argument("--no-ddp-graph-split", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--static-graph", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--instance-type", default=None, type=instance_type)
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
    outdir = launch.results_dir(args.log_dir, create=not args.dry_run)
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
    verdict, message = assess(rc, log_path, result.get("metrics"), nodes * gpus)
    # The ranks' hpq-env blocks against the worker type's environment, as run-nccl-test judges them: a training
    # run whose transport was not the type's is no pass, however well the loss fell.
    with open(log_path, errors="replace") as fh:
        env_result = env_check.check(fh.read(MAX_LOG_SCAN), dict(env_vars, **launch.kept_transport_env()),
                                     os.environ, "`hpq nccl-env %s`" % wenv.get("instance_type")
                                     if wenv.get("instance_type") else "the worker's environment", nodes,
                                     required=True)
    result["environment_check"] = env_result.to_dict()
    if env_result.ok is False and verdict != FAIL:
        verdict = FAIL
        message = "FAIL: the job's transport environment is not the worker type's: %s\n(training itself: %s)" % (
            "; ".join(env_result.problems), message)
    result["ok"] = verdict == PASS
    result["verdict"] = verdict
    result["outcome"] = verdict
    result["message"] = message
    launch.write_json(base + ".json", json_safe(result))
    result_metrics.publish(json_safe(result), "run-nanogpt")  # stderr note at most, exit code unchanged
    print("# %s\n# exit status %d\n# log: %s\n# result: %s.json" % (message, rc, log_path, base))
    return exit_code(verdict)


# "loss 3.4629 -> 1.2345: falls; ranks agree (checksum ...)": hpq's nanoGPT's last line before RESULT.
_LOSS_LINE_RE = re.compile(r"^loss (\S{1,40}) -> (\S{1,40}): (falls|DID NOT FALL); ranks (agree|DISAGREE)")
_RANKS_ON_RE = re.compile(r"^ranks on: (.{0,100000})$")
MAX_LOG_SCAN = 64 << 20  # the log is read at most this far (bounded, like every reader)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read(log_path: str) -> str:
    try:
        with open(log_path, "rb") as fh:
            return fh.read(MAX_LOG_SCAN).decode("utf-8", "replace")
    except OSError:
        return ""


def from_text(text: str) -> Dict[str, object]:
    """What rank 0 printed: its RESULT line, the loss line, the number of ranks it saw. The same lines reach
    run-nanogpt's log on Slurm and the master pod's log on EKS: this is the one reader of both."""
    seen: Dict[str, object] = {}
    for raw in text[:MAX_LOG_SCAN].splitlines():
        line = raw.strip()
        if line.startswith("RESULT: "):
            seen["result"] = line[len("RESULT: "):]
        m = _LOSS_LINE_RE.match(line)
        if m:
            seen["first_loss"] = float(m.group(1)) if _num_ok(m.group(1)) else None
            seen["final_loss"] = float(m.group(2)) if _num_ok(m.group(2)) else None
            seen["loss_fell"] = m.group(3) == "falls"
            seen["ranks_agree"] = m.group(4) == "agree"
        m = _RANKS_ON_RE.match(line)
        if m:
            seen["world_size"] = len([p for p in m.group(1).split(",") if p.strip()])
    return seen


def _num_ok(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def judge(rc: int, log_path: str, metrics: Optional[Dict], ranks: Optional[int] = None) -> str:
    """PASS, FAIL or INCONCLUSIVE (``assess`` without its message)."""
    return assess(rc, log_path, metrics, ranks)[0]


def assess(rc: int, log_path: str, metrics: Optional[Dict], ranks: Optional[int]) -> Tuple[str, str]:
    """``assess_text`` of the log file at ``log_path``."""
    return assess_text(rc, _read(log_path), metrics, ranks)


def assess_text(rc: int, text: str, metrics: Optional[Dict], ranks: Optional[int]) -> Tuple[str, str]:
    """(PASS|FAIL|INCONCLUSIVE, message whose first words are the verdict) of the training's output ``text``.

    PASS needs positive evidence of training: finite first and final loss with the final one lower,
    every one of the ``ranks`` processes started (None: as many as trained) taking part (world size) with the
    same weights at the
    end (nanoGPT's checksum, all-reduced over the ranks, finite and agreeing), and a program that
    exited 0. Rank 0's metrics file may live on another node; its log lines say the same things. A
    program that printed none of it (e.g. ``--python /bin/true``) is INCONCLUSIVE, never PASS; a
    Trainium run that left its devices idle is INCONCLUSIVE too.
    """
    seen = from_text(text)
    facts: Dict[str, object] = dict(seen)
    if metrics:
        facts.update({k: metrics.get(k) for k in ("first_loss", "final_loss", "loss_fell", "ranks_agree",
                                                   "world_size", "checksum", "checksum_spread", "tokens_per_s",
                                                   "neuron_devices_unused") if k in metrics})
    first, final = facts.get("first_loss"), facts.get("final_loss")
    number = ("loss %s -> %s" % (fmt_number(first), fmt_number(final))) if first is not None or final is not None \
        else "no loss reported"  # 4 decimals, as nanoGPT's own log prints the loss (scripts/nanogpt.py)
    expectation = "a falling loss on %s rank(s)" % (fmt_number(ranks) if ranks is not None else "every")

    def out(outcome: str, reason: str) -> Tuple[str, str]:
        return outcome, headline(outcome, number, expectation, reason)

    if rc != 0:
        return out(FAIL, "the training exited with status %d (see the log)" % rc)
    if first is None and final is None and "result" not in seen:
        return out(INCONCLUSIVE, "the program exited 0 but printed no training result (no metrics, no loss, no "
                                    "RESULT line): check --python is a python with torch that runs hpq's nanoGPT")
    bad = [k for k in ("first_loss", "final_loss", "checksum", "checksum_spread", "tokens_per_s")
           if facts.get(k) is not None and not _finite(facts.get(k))]
    if first is None or final is None:
        bad += [k for k in ("first_loss", "final_loss") if facts.get(k) is None]
    if bad:
        return out(FAIL, "metrics that are not finite numbers: %s" % ", ".join(sorted(set(bad))))
    world = facts.get("world_size")
    if world is None:
        return out(INCONCLUSIVE, "the log does not say how many ranks trained (no 'ranks on' line, no metrics)")
    if ranks is not None and world != ranks:
        return out(FAIL, "%s rank(s) trained, %d were started" % (fmt_number(world), ranks))
    if not (facts.get("loss_fell") and float(final) < float(first)):  # type: ignore[arg-type]
        return out(FAIL, "the loss did not fall")
    if not facts.get("ranks_agree"):
        return out(FAIL, "the ranks hold different weights at the end (checksum spread %s)"
                   % fmt_number(facts.get("checksum_spread")))
    result = str(seen.get("result", ""))
    if facts.get("neuron_devices_unused") or result.startswith("INCONCLUSIVE"):
        return out(INCONCLUSIVE, nanogpt.NEURON_UNUSED_RESULT.split(": ", 1)[1])
    if result and result != "PASS":
        return out(FAIL, "the program's own RESULT line says %s" % result[:200])
    return out(PASS, "the loss fell and all %s rank(s) agree" % fmt_number(world))


if __name__ == "__main__":
    sys.exit(main())
