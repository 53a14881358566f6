"""The rehearsal itself: stages in order, live progress, a result, and teardown on every way out.

Stages: ``network`` (bridge, subnet) -> ``aws`` (embedded moto, the real deploy path, stand-ins
realized) -> ``nodes`` (namespaces, image, IMDS, HyperPod's files) -> ``lifecycle`` (OnCreate on
every node at once) -> ``slurm`` (every worker idle in ``sinfo``) -> ``nccl`` and ``nanogpt``
(over SSH) -> ``sweep`` (with ``Options.sweep``: the throttles applied with tc, then
``run-nccl-test --sweep`` over SSH). EKS variants replace the Slurm stages with ``manifests``. Each stage is a
function of hpq.rehearsal.stages with a typed input and output; each pushes the undo of what it creates on one
teardown stack (hpq.rehearsal.teardown), unwound on success, failure, Ctrl-C and SIGTERM (only the log
collection when ``keep`` is set); a second signal during teardown is held back until it is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from hpq import atomic
from hpq.errors import EXIT_FAILED, EXIT_OK, HpqError, OperationFailed
from hpq.rehearsal import aws, backend, faults, plan, procs, state
from hpq.rehearsal.node import Node
from hpq.rehearsal.stages import (
    deploy,
    finish,
    lifecycles,
    manifests,
    network,
    nodes,
    observe,
    slurm,
    workloads,
)
from hpq.rehearsal.stages.base import TAIL_LINES, Failure
from hpq.rehearsal.teardown import Interrupted, TeardownStack, signals_raise
from hpq.standins import hyperpod
from hpq.validation.slurm import SshShell

LOG_BASE = os.environ.get("HPQ_REHEARSE_LOG_DIR", "/var/log/hpq-rehearse")
# Sized for a 2-core machine (docs/benchmarks.md): sizes up to 16 MB, and 20 training iterations.
DEFAULT_NCCL_ARGS = "-e 16M -n 5 -w 1"
DEFAULT_NANOGPT_ARGS = "--iters 20 --batch-size 4 --ckpt-every 10 --log-every 5"
# The sweep's nodes share this machine's CPUs, and gloo is CPU-bound: pairs run one at a time so no
# pair measures another's CPU use (on a cluster each pair has its own nodes). 1 MB (the sweep's gloo
# default) x 20 timed iterations keeps a 30mbit-throttled pair near 15 s (docs/benchmarks.md).
DEFAULT_SWEEP_ARGS = "--pairs-at-once 1 -n 20 -w 1 --pair-timeout 60"


@dataclass
class Options:
    variant: str = "slurm-gpu"
    workers: int = 2
    instance_type: str | None = None
    login: bool = False
    keep: bool = False
    # Extra environment for OnCreate: {"": every node, "<node name>": that node only}.
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)
    nccl_args: str = DEFAULT_NCCL_ARGS
    nanogpt_args: str = DEFAULT_NANOGPT_ARGS
    validate: bool = True
    # Delete the deployed FSx filesystem before the nodes boot: every node runs the lifecycle's no-FSx path.
    without_fsx: bool = False
    lifecycle_timeout: float = 900.0
    slurm_timeout: float = 120.0
    validate_timeout: float = 900.0  # each validation command, bounded on the controller
    sweep: bool = False  # run-nccl-test --sweep after validation (Slurm variants)
    sweep_args: str = DEFAULT_SWEEP_ARGS
    # worker index (0-based over the workers in plan order: 0 is worker-1) -> tc rate, applied before the sweep
    throttle: dict[int, str] = field(default_factory=dict)
    # --fault NODE:KIND (rehearsal/faults.py); with faults or ``doctor``, the doctor's checks run after Slurm
    faults: list[tuple[str, str]] = field(default_factory=list)
    doctor: bool = False
    # EnableObservability=true with the AMP stand-in; the JSON gets an ``observe`` object (stages/observe.py)
    observability: bool = False
    # EnableNodeProlog=true; the faults, then one job step per worker under the real slurmd (stages/slurm.py)
    prolog: bool = False


class Progress:
    """One line per event on stderr: ``[  12.3s] who: what``."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.t0 = time.time()
        self._lock = threading.Lock()

    def __call__(self, who: str, message: str) -> None:
        with self._lock:
            try:
                self.stream.write(f"[{time.time() - self.t0:6.1f}s] {who}: {message}\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed pipe (| head) must not stop the rehearsal or its teardown
                pass


class Rehearsal:
    """Runs the stages in order (:meth:`_stages` is the list), each a function of hpq.rehearsal.stages with its
    inputs named here; what each returns is kept on the instance for the next and for the summary. Everything
    a stage creates is undone by the one teardown stack, on every way out."""

    def __init__(self, opts: Options, progress: Progress | None = None):
        self.opts = opts
        self.say = progress or Progress()
        self.run_id = plan.new_run_id()
        self.stack = TeardownStack()
        self.plan: plan.Plan | None = None
        self.state: state.RunState | None = None
        self.moto: aws.EmbeddedMoto | None = None
        self.deployed: aws.Deployed | None = None
        self.nodes: dict[str, Node] = {}
        self.groups: list[hyperpod.GroupRequest] = []
        self.shell: SshShell | None = None  # a login shell on the controller (validation.slurm)
        self.backend: backend.RehearsalBackend | None = None  # the tests' backend over that shell
        self.lifecycles = lifecycles.Lifecycles({})
        self.stage_seconds: dict[str, float] = {}
        self.result: dict[str, Any] = {}  # what the stages found, then the summary
        self.observability: observe.Observability | None = None  # with --observability: the AMP stand-in
        self._current_stage = "setup"

    # ------------------------------------------------------------------ the stage list

    def _stages(self) -> None:
        self._stage("network", self.setup_network)
        if self.opts.observability:
            self._stage("amp", self.start_amp)
        self._stage("aws", self.deploy)
        self._stage("nodes", self.start_nodes)
        self._stage("lifecycle", self.run_lifecycles)
        assert self.plan is not None
        if self.plan.orchestrator == "slurm":
            self._stage("slurm", self.wait_slurm)
            if self.observability is not None:
                observe.start_polling(self.plan, self.observability, self.stack, self.say)
            if self.opts.prolog:  # the prolog judges the faults (the doctor's own job steps would meet it first)
                self._stage("prolog", self.check_prolog)
            elif self.opts.faults or self.opts.doctor:
                self._stage("doctor", self.run_doctor)
            if self.opts.validate and self.opts.faults:
                self.say("validate", "skipped: faults were injected (a sick cluster is not the one nccl proves)")
            elif self.opts.validate:
                self._stage("ssh", self.check_ssh)
                self._stage("nccl", self.run_nccl)
                self._stage("nanogpt", self.run_nanogpt)
            if self.opts.sweep:
                self._stage("sweep", self.run_sweep)
            if self.observability is not None:
                self._stage("observe", self.check_observability)
        else:
            self._stage("manifests", self.check_manifests)

    # ------------------------------------------------------------------ each stage: its inputs, where its output goes

    def setup_network(self) -> None:
        o = self.opts
        net = network.setup_network(network.NetworkInput(
            self.run_id, o.variant, o.workers, o.instance_type or default_worker_type(o.variant, o.workers), o.login,
            o.keep, LOG_BASE), self.stack, self.say)
        self.run_id, self.state, self.plan = net.run_id, net.state, net.plan

    def start_amp(self) -> None:
        assert self.plan is not None and self.state is not None
        self.observability = observe.start(self.plan, self.state.workdir, self.stack, self.say)
        logdir = self.state.logdir
        self.stack.push("AMP stand-in's log", lambda: observe.copy_store_log(self.observability, logdir),
                        kept_too=True, only_if_failed=True)

    def deploy(self) -> None:
        assert self.plan is not None
        self.moto = deploy.start_moto(self.plan, self.stack, self.say)
        self.deployed = deploy.deploy(deploy.DeployInput(self.plan, self.opts.without_fsx, self.observability,
                                                         self.opts.prolog), self.say)

    def start_nodes(self) -> None:
        assert self.plan is not None and self.deployed is not None and self.state is not None
        out = nodes.start_nodes(nodes.NodesInput(self.plan, self.deployed, self.state, self.observability),
                                self.stack, self.say)
        self.nodes, self.groups, self.shell, self.backend = out.nodes, out.groups, out.shell, out.backend

    def run_lifecycles(self) -> None:
        assert self.plan is not None and self.state is not None and self.moto is not None
        node_env = dict(self.opts.node_env)
        if self.observability is not None:  # the mirror and its pins for every node (a user's own settings win)
            node_env[""] = {**self.observability.node_env, **node_env.get("", {})}
            # the device tools a GPU node boots with, which hpq's GPU writer reads (stand-ins: rehearsal/faults.py)
            faults.prepare_workers(self.plan, self.nodes)
        self.lifecycles = lifecycles.start_lifecycles(lifecycles.LifecycleInput(
            self.plan, self.nodes, self.groups, self.state.logdir, self.moto.node_url, node_env),
            self.stack, self.say, self.lifecycles)
        lifecycles.wait_lifecycles(self.lifecycles, self.opts.lifecycle_timeout, self.say)

    def wait_slurm(self) -> None:
        assert self.plan is not None and self.shell is not None and self.plan.controller is not None
        out = slurm.wait_slurm(slurm.SlurmInput(self.plan, self.shell, self.nodes[self.plan.controller.name],
                                                self.opts.slurm_timeout), self.say)
        self.result.update({"slurm_nodes": out.states, "slurm_nodes_idle": len(out.idle)})

    def run_doctor(self) -> None:
        assert self.plan is not None and self.shell is not None and self.deployed is not None
        self.result["doctor"] = slurm.run_doctor(slurm.DoctorInput(
            self.plan, self.nodes, self.shell, self.opts.faults, self.deployed.cluster_arn,
            self.opts.validate_timeout), self.say)

    def check_prolog(self) -> None:
        assert self.plan is not None and self.shell is not None
        self.result["prolog"] = slurm.check_prolog(slurm.PrologInput(self.plan, self.nodes, self.shell,
                                                                     self.opts.faults), self.say)

    def check_ssh(self) -> None:
        assert self.plan is not None and self.shell is not None
        self.result["ssh"] = slurm.check_ssh(slurm.SshInput(self.plan, self.shell, self.opts.slurm_timeout), self.say)

    def _workload(self, args: str) -> workloads.WorkloadInput:
        assert self.plan is not None and self.backend is not None and self.state is not None
        return workloads.WorkloadInput(self.plan, self.backend, args, self.opts.validate_timeout, self.state.logdir,
                                       dict(self.opts.throttle))

    def run_nccl(self) -> None:
        out = workloads.run_nccl(self._workload(self.opts.nccl_args), self.say)
        self.result.update({"nccl": out.data, "environment": out.environment})

    def run_nanogpt(self) -> None:
        self.result["nanogpt"] = workloads.run_nanogpt(self._workload(self.opts.nanogpt_args), self.say)

    def run_sweep(self) -> None:
        self.result["sweep"] = workloads.run_sweep(self._workload(self.opts.sweep_args), self.say)

    def check_observability(self) -> None:
        assert self.plan is not None and self.observability is not None
        self.result["observe"] = observe.judge(self.plan, self.observability, self.say)

    def check_manifests(self) -> None:
        assert self.plan is not None and self.deployed is not None
        self.result["manifests"] = manifests.check_manifests(self.plan, self.deployed, self.say)

    # ------------------------------------------------------------------ entry, result and teardown

    def execute(self) -> tuple[dict[str, Any], int]:
        t0 = time.time()
        failure: Failure | None = None
        usage: HpqError | None = None
        interrupted: Interrupted | None = None
        # Daemons the nodes start detach from their parents: as the subreaper, this process inherits them
        # (not PID 1), so teardown reaps them itself and they leave the process table before it returns.
        procs.become_subreaper()
        with signals_raise():
            try:
                self._stages()
            except Failure as exc:
                failure = exc
            except Interrupted as exc:
                interrupted = exc
            except KeyboardInterrupt:
                interrupted = Interrupted(signal.SIGINT)
            except OperationFailed as exc:
                failure = Failure(self._current_stage, str(exc))
            except HpqError as exc:  # bad input found late (exit 2), still after a full teardown
                failure = Failure(self._current_stage, str(exc))
                usage = exc
            except Exception:  # a bug: still a result, a teardown, and the traceback in the logs
                failure = self._internal_error()
            finally:
                if failure is not None:
                    self.result.update(failure.found)
                self.result.update(self._summary(time.time() - t0, failure, interrupted))
                self._teardown(failure is not None or interrupted is not None)
        if interrupted is not None:
            return self.result, 128 + interrupted.signum
        if usage is not None:
            return self.result, usage.exit_code
        if failure is None and self.result.get("teardown", {}).get("ok") is False:
            self.result["result"] = "fail"
            self.result["failure"] = {"stage": "teardown", "node": None, "step": None, "log": None, "last_lines": [],
                                      "cause": "left behind: " + "; ".join(self.result["teardown"]["left"])}
            return self.result, EXIT_FAILED
        return self.result, EXIT_FAILED if failure else EXIT_OK

    def _stage(self, name: str, func: Callable[[], None]) -> None:
        self._current_stage = name
        t = time.time()
        try:
            func()
        finally:
            self.stage_seconds[name] = round(time.time() - t, 1)

    def _internal_error(self) -> Failure:
        trace = traceback.format_exc()
        path = None
        if self.state is not None:
            path = os.path.join(self.state.logdir, "traceback.txt")
            try:
                atomic.write_file(path, trace)
            except (OSError, HpqError):
                path = None
        exc = sys.exc_info()[1]
        return Failure(self._current_stage, f"internal error: {type(exc).__name__}: {exc}", log=path,
                       last_lines=trace.strip().splitlines()[-TAIL_LINES:])

    def _summary(self, seconds: float, failure: Failure | None, interrupted: Interrupted | None) -> dict[str, Any]:
        res = finish.summary(
            variant=self.opts.variant, run_id=self.run_id, passed=failure is None and interrupted is None,
            seconds=seconds, stage_seconds=self.stage_seconds, plan=self.plan, moto=self.moto, deployed=self.deployed,
            nodes=finish.node_results(self.plan, self.lifecycles.runs, self.lifecycles.slurm_ready),
            found=self.result, without_fsx=bool(self.opts.without_fsx), kept=bool(self.opts.keep),
            logs=self.state.logdir if self.state else None)
        if failure is not None:
            res["failure"] = failure.to_dict()
        if interrupted is not None:
            res["failure"] = {"stage": self._current_stage, "node": None, "step": None,
                              "cause": f"interrupted by {interrupted}", "log": None, "last_lines": []}
        return res

    def _teardown(self, failed: bool) -> None:
        """Unwind the stack (logs collected first, then everything removed unless kept), signals held back."""
        t = time.time()
        problems = self.stack.close(failed, keep=self.opts.keep)
        if self.state is None or self.opts.keep:
            return
        self.result["teardown"] = {"ok": not problems, "left": problems, "seconds": round(time.time() - t, 1)}
        if not failed:
            self.result["logs"] = None
        if problems:
            self.say("teardown", "left behind: " + "; ".join(problems))
        else:  # said only once /proc, the mount table and the links show none of it (state.teardown)
            self.say("teardown", "every process, mount, namespace, link and temp directory removed")


def default_worker_type(variant: str, workers: int = 2) -> str:
    """The variant's worker type with the lowest bus-bandwidth expectation for ``workers`` nodes.

    The rehearsal's NCCL run is judged with --expect none (a veth bridge says nothing about an
    instance's network), so the type only sets what the nodes are (IMDS type, transport, NCCL
    environment, GPU count); the least demanding one (ml.g5.xlarge for GPU variants) is the
    default, and --instance-type picks another (docs/rehearse.md).
    """
    from hpq.cfn.variants import VARIANTS
    from hpq.lifecycle import catalog

    def key(name: str) -> tuple[float, int, int, str]:
        e = catalog.lookup(name)
        figure = catalog.expected_busbw(name, max(2, workers)) if workers > 1 else catalog.lowest_busbw(name)
        return (figure.gbps if figure else 0.0, e.accelerator_count, e.vcpus, e.name)

    return min(VARIANTS[variant].worker_types(), key=key)


def shell_command(st: state.RunState, node_name: str | None) -> list[str]:
    """argv that enters a kept node (its namespaces and root) with a login shell."""
    ns = st.node(node_name) if node_name else next((n for n in st.nodes if n.role == plan.CONTROLLER), None) \
        or (st.nodes[0] if st.nodes else None)
    if ns is None:
        raise KeyError(node_name or "")
    if state.holder(ns) is None:  # never enter the namespaces of whatever process reuses the pid now
        from hpq.rehearsal.node import NodeError

        raise NodeError(f"node {ns.name} of rehearsal {st.run_id} is not running (its holder process is gone): "
                        f"remove the rest with `hpq rehearse down --run {st.run_id}`")
    return ["nsenter", "--target", str(ns.holder_pid), "--mount", "--uts", "--net", "--root", "--wd",
            "env", "-i", "TERM=" + os.environ.get("TERM", "xterm"), "HOME=/root", "PATH=" + _node_path(),
            "/bin/bash", "--login"]


def _node_path() -> str:
    from hpq.rehearsal.node import NODE_PATH

    return NODE_PATH
