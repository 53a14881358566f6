"""The lifecycle entry: run every step in order, each logged at start and end.

``on_create.sh`` runs ``python3 -m hpq.lifecycle.main``. A failing step stops the run
with one line naming the step and its cause, and a non-zero exit (HyperPod then marks
the node failed instead of handing out a half-configured one). Every step is
idempotent, so running the whole thing again changes nothing.

Usage: python3 -m hpq.lifecycle.main [--root DIR] [--steps a,b] [--list-steps]
(environment variables HPQ_*, listed in docs/lifecycle.md and lifecycle/context.py, override defaults).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Callable, List, Optional, Tuple

from . import (
    context,
    eks_storage,
    fsx,
    host_certs,
    identity,
    install,
    munge,
    node_env,
    observability,
    slurm,
    ssh_keys,
)
from .resource_config import EKS, SLURM

# (name, function, purpose). Order matters: identity first, MUNGE before Slurm, SSH keys last
# (without a shared filesystem they travel through Slurm).
STEPS: List[Tuple[str, Callable, str]] = [
    ("identify", identity.run, "this node in resource_config.json, its role from its instance group"),
    ("nccl-env", node_env.run, "EFA transport and NCCL environment"),
    ("fsx", fsx.run, "FSx for Lustre mounted at /fsx (EKS: Lustre modules for the CSI driver)"),
    ("eks-storage", eks_storage.run, "containerd and kubelet data on /opt/sagemaker (EKS)"),
    ("install", install.run, "node commands onto PATH"),
    ("munge", munge.run, "one MUNGE key, munged running"),
    ("slurm", slurm.run, "configless slurmctld / slurmd"),
    ("host-certs", host_certs.run, "SSH host certificates from the cluster host CA"),
    ("ssh-keys", ssh_keys.run, "cluster SSH key for the default user"),
    # Last, and never failing the boot: a component that cannot be verified is left out (Degraded).
    ("observability", observability.run, "exporters and a Prometheus agent writing to AMP (when on)"),
]
STEP_NAMES = [s[0] for s in STEPS]
# On EKS clusters Kubernetes schedules the work: no Slurm, no MUNGE, no node commands, no SSH keys.
SLURM_ONLY_STEPS = ("install", "munge", "slurm", "host-certs", "ssh-keys", "observability")
EKS_ONLY_STEPS = ("eks-storage",)


class StepFailed(Exception):
    pass


def setup_logging(log_file: str) -> logging.Logger:
    log = logging.getLogger("hpq.lifecycle")
    log.setLevel(logging.INFO)
    log.handlers[:] = []
    fmt = logging.Formatter("%(asctime)s hpq-lifecycle %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(fmt)
    log.addHandler(out)
    try:
        os.makedirs(os.path.dirname(log_file), exist_ok=True)
        fh = logging.FileHandler(log_file)
        fh.setFormatter(fmt)
        log.addHandler(fh)
    except OSError as exc:
        log.warning("cannot log to %s: %s (stdout only)", log_file, exc)
    log.propagate = False
    return log


def _orchestrator(ctx) -> Optional[str]:
    """The orchestrator identify found (read back from node info for steps run on their own), or None."""
    if ctx.node is None:
        try:
            identity.load_node(ctx)
        except identity.IdentityError:
            return None  # the step itself says that identify has to run first
    return ctx.node.orchestrator


def run_steps(ctx: context.Context, names: Optional[List[str]] = None) -> None:
    wanted = STEP_NAMES if names is None else names
    if not wanted:
        raise StepFailed("no step to run (an empty step list never means every step)")
    unknown = [n for n in wanted if n not in STEP_NAMES]
    if unknown:
        raise StepFailed("unknown step(s) %s; steps are %s" % (", ".join(unknown), ", ".join(STEP_NAMES)))
    for name, func, purpose in STEPS:
        if name not in wanted:
            continue
        orchestrator = _orchestrator(ctx) if name != "identify" else None
        if name in SLURM_ONLY_STEPS and orchestrator == EKS:
            ctx.log.info("step %s: skipped (EKS cluster: Kubernetes does this part)", name)
            continue
        if name in EKS_ONLY_STEPS and orchestrator == SLURM:
            ctx.log.info("step %s: skipped (Slurm cluster)", name)
            continue
        ctx.log.info("step %s: start (%s)", name, purpose)
        t0 = time.time()
        try:
            result = func(ctx)
        except Exception as exc:  # every failure becomes one line naming the step
            ctx.log.error("step %s: FAILED after %.1fs: %s: %s", name, time.time() - t0, type(exc).__name__, exc)
            raise StepFailed("step %s failed: %s" % (name, exc)) from exc
        if isinstance(result, context.Degraded):
            ctx.log.warning("step %s: done in %.1fs, with a warning: %s", name, time.time() - t0, result)
        else:
            ctx.log.info("step %s: done in %.1fs: %s", name, time.time() - t0, result)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="hpq-lifecycle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="prefix for every system path (HPQ_ROOT); default /")
    ap.add_argument("--steps", help="comma-separated subset of: " + ",".join(STEP_NAMES))
    ap.add_argument("--list-steps", action="store_true", help="print the steps and exit")
    args = ap.parse_args(argv)
    if args.list_steps:
        for name, _, purpose in STEPS:
            print("%-11s %s" % (name, purpose))
        return 0
    env = dict(os.environ)
    try:
        if args.root is not None and args.root.strip() == "":
            raise ValueError("--root is empty; leave it out for /")
        if args.steps is not None:
            context.parse_steps(args.steps, "--steps")
    except ValueError as exc:
        print("hpq-lifecycle: bad setting: %s" % exc, file=sys.stderr)
        return 2
    if args.root:
        env["HPQ_ROOT"] = args.root
    if args.steps is not None:
        env["HPQ_STEPS"] = args.steps  # '' is refused by Settings (one line, exit 2), never "every step"
    try:
        settings = context.Settings.from_env(env)
    except ValueError as exc:
        print("hpq-lifecycle: bad setting: %s" % exc, file=sys.stderr)
        return 2
    log = setup_logging(settings.path(settings.log_file))
    ctx = context.Context(settings, log)
    log.info("lifecycle start: root=%s systemctl=%s slurm prefix=%s",
             settings.root, " ".join(settings.systemctl_cmd), settings.slurm_prefix)
    try:
        run_steps(ctx, settings.steps)
    except StepFailed as exc:
        log.error("lifecycle FAILED: %s", exc)
        return 1
    log.info("lifecycle done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
