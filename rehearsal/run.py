"""The rehearsal itself: stages in order, live progress, a result, and teardown on every way out.

Stages: ``network`` (bridge, subnet) -> ``aws`` (embedded moto, the real deploy path, stand-ins
realized) -> ``nodes`` (namespaces, image, IMDS, HyperPod's files) -> ``lifecycle`` (OnCreate on
every node at once) -> ``slurm`` (every worker idle in ``sinfo``) -> ``nccl`` and ``nanogpt``
(over SSH) -> ``sweep`` (with ``Options.sweep``: the throttles applied with tc, then
``run-nccl-test --sweep`` over SSH). EKS variants replace the Slurm stages with ``manifests``. Teardown runs on success, failure, Ctrl-C and SIGTERM unless
``keep`` is set; a second signal during teardown is held back until it is done.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hpq.errors import EXIT_FAILED, EXIT_OK, HpqError, OperationFailed
from hpq.rehearsal import aws, faults, image, netns, procs, throttle, validate
from hpq.rehearsal import backend as backend_mod
from hpq.rehearsal import plan as plan_mod
from hpq.rehearsal import state as state_mod
from hpq.rehearsal.node import Node
from hpq.scripts import sweep as node_sweep
from hpq.standins import fsx, hyperpod
from hpq.validation.backend import run_test
from hpq.validation.request import TestRequest
from hpq.validation.result import TestResult
from hpq.validation.slurm import SshShell

LOG_BASE = os.environ.get("HPQ_REHEARSE_LOG_DIR", "/var/log/hpq-rehearse")
# Sized for a 2-core machine (docs/benchmarks.md): sizes up to 16 MB, and 20 training iterations.
DEFAULT_NCCL_ARGS = "-e 16M -n 5 -w 1"
DEFAULT_NANOGPT_ARGS = "--iters 20 --batch-size 4 --ckpt-every 10 --log-every 5"
# The sweep's nodes share this machine's CPUs, and gloo is CPU-bound: pairs run one at a time so no
# pair measures another's CPU use (on a cluster each pair has its own nodes). 1 MB (the sweep's gloo
# default) x 20 timed iterations keeps a 30mbit-throttled pair near 15 s (docs/benchmarks.md).
DEFAULT_SWEEP_ARGS = "--pairs-at-once 1 -n 20 -w 1 --pair-timeout 60"
TAIL_LINES = 15


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


class Failure(OperationFailed):
    """A check failed: where (stage, node, step), why, and the log that shows it."""

    def __init__(self, stage: str, cause: str, node: str | None = None, step: str | None = None,
                 log: str | None = None, last_lines: list[str] | None = None):
        super().__init__(cause)
        self.stage, self.cause, self.node, self.step = stage, cause, node, step
        self.log, self.last_lines = log, last_lines or []

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "node": self.node, "step": self.step, "cause": self.cause, "log": self.log,
                "last_lines": self.last_lines}


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
    def __init__(self, opts: Options, progress: Progress | None = None):
        self.opts = opts
        self.say = progress or Progress()
        self.run_id = plan_mod.new_run_id()
        self.plan: plan_mod.Plan | None = None
        self.state: state_mod.RunState | None = None
        self.nodes: dict[str, Node] = {}
        self.moto: aws.EmbeddedMoto | None = None
        self.deployed: aws.Deployed | None = None
        self.runs: dict[str, hyperpod.LifecycleRun] = {}
        self.stage_seconds: dict[str, float] = {}
        self.result: dict[str, Any] = {}
        self.slurm_ready: dict[str, float] = {}
        self.shell: SshShell | None = None  # a login shell on the controller (validation.slurm)
        self.backend: backend_mod.RehearsalBackend | None = None  # the tests' backend over that shell
        self._aws_env: Any = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ entry

    def execute(self) -> tuple[dict[str, Any], int]:
        t0 = time.time()
        failure: Failure | None = None
        usage: HpqError | None = None
        interrupted: Interrupted | None = None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
        # Daemons the nodes start detach from their parents: as the subreaper, this process inherits them
        # (not PID 1), so teardown reaps them itself and they leave the process table before it returns.
        procs.become_subreaper()

        def on_signal(signum: int, frame: Any) -> None:
            raise Interrupted(signum)

        for s in previous:
            signal.signal(s, on_signal)
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
        except Exception as exc:  # a bug: still a result, a teardown, and the traceback in the logs
            import traceback

            trace = traceback.format_exc()
            path = None
            if self.state is not None:
                path = os.path.join(self.state.logdir, "traceback.txt")
                from hpq import atomic

                try:
                    atomic.write_file(path, trace)
                except (OSError, HpqError):
                    path = None
            failure = Failure(self._current_stage, f"internal error: {type(exc).__name__}: {exc}", log=path,
                              last_lines=trace.strip().splitlines()[-TAIL_LINES:])
        finally:
            self.result.update(self._summary(time.time() - t0, failure, interrupted))
            self._finish(failure is not None or interrupted is not None)
            for s, h in previous.items():
                signal.signal(s, h)
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

    _current_stage = "setup"

    def _stage(self, name: str, func: Callable[[], None]) -> None:
        self._current_stage = name
        t = time.time()
        try:
            func()
        finally:
            self.stage_seconds[name] = round(time.time() - t, 1)

    def _stages(self) -> None:
        self._stage("network", self.setup_network)
        self._stage("aws", self.deploy)
        self._stage("nodes", self.start_nodes)
        self._stage("lifecycle", self.run_lifecycles)
        assert self.plan is not None
        if self.plan.orchestrator == "slurm":
            self._stage("slurm", self.wait_slurm)
            if self.opts.faults or self.opts.doctor:
                self._stage("doctor", self.run_doctor)
            if self.opts.validate and self.opts.faults:
                self.say("validate", "skipped: faults were injected (a sick cluster is not the one nccl proves)")
            elif self.opts.validate:
                self._stage("ssh", self.check_ssh)
                self._stage("nccl", self.run_nccl)
                self._stage("nanogpt", self.run_nanogpt)
            if self.opts.sweep:
                self._stage("sweep", self.run_sweep)
        else:
            self._stage("manifests", self.check_manifests)

    # ------------------------------------------------------------------ stages

    def setup_network(self) -> None:
        from hpq.lifecycle import catalog

        o = self.opts
        itype = catalog.normalize(o.instance_type or default_worker_type(o.variant, o.workers))
        me = procs.identify(os.getpid())
        while True:  # a run id no other rehearsal on this host has recorded (they run side by side)
            workdir = tempfile.mkdtemp(prefix=f"hpq-rehearse-{self.run_id}-")
            logdir = os.path.join(LOG_BASE, self.run_id)
            st = state_mod.RunState(self.run_id, o.variant, os.getpid(), time.time(), workdir, logdir, keep=o.keep,
                                    pid_start=me.start if me else None)
            if st.claim():
                break
            os.rmdir(workdir)
            self.run_id = plan_mod.new_run_id()
        self.state = st
        os.makedirs(logdir, exist_ok=True)
        with netns.host_lock():
            subnet = netns.pick_subnet(self.run_id)
            self.plan = plan_mod.new_plan(self.run_id, o.variant, o.workers, itype, o.login, subnet)
            self.state.bridge, self.state.subnet = self.plan.bridge, subnet
            self.state.cluster_name, self.state.worker_type = self.plan.cluster_name, self.plan.worker_type
            self.state.save()
            netns.create_bridge(self.plan.bridge, self.plan.gateway, self.plan.prefix_len)
        self.say("network", f"bridge {self.plan.bridge}, {subnet} (run {self.run_id}, work dir {workdir})")

    def deploy(self) -> None:
        assert self.plan is not None
        p = self.plan
        self.moto = aws.EmbeddedMoto(p.gateway).start()
        self._aws_env = aws.environment(self.moto.url)
        self._aws_env.__enter__()
        self.say("aws", f"embedded moto server on {self.moto.url} (the nodes reach it at {self.moto.node_url})")
        self.say("aws", f"hpq deploy {p.variant} with the EMULATED rendition (moto): FSx, SageMaker::Cluster, Lambda "
                        "and custom resources are stand-ins that the rehearsal then creates from the real templates")
        params = {"WorkerCount": str(p.workers), "WorkerInstanceType": p.worker_type}
        if p.orchestrator == "slurm":
            params["EnableLoginGroup"] = "true" if p.login else "false"
        bucket = f"hpq-rehearse-{p.run_id}-artifacts"
        try:
            d = aws.deploy(aws.session(), p.variant, p.cluster_name, bucket, params,
                           on_note=lambda m: self.say("aws", m))
        except aws.cfn_eval.EvalError as exc:
            raise Failure("aws", f"realizing the templates' stand-ins: {exc}") from None
        self.deployed = d
        out = d.outputs
        self.say("aws", f"stack {d.stack_name} CREATE_COMPLETE (release {d.release_version}); FSx "
                        f"{out.get('FsxFileSystemId')} {out.get('FsxDnsName')} mount name {out.get('FsxMountName')}; "
                        f"lifecycle {out.get('LifecycleS3Uri')}")
        if self.opts.without_fsx:
            aws.delete_filesystems(aws.session(), d)
        for note in d.notes:
            self.say("aws", note)

    def start_nodes(self) -> None:
        assert self.plan is not None and self.deployed is not None and self.state is not None and self.moto is not None
        p, d = self.plan, self.deployed
        s3 = aws.session().client("s3")
        groups = hyperpod.groups_from_request(d.cluster)
        if not groups:
            raise Failure("nodes", "the deployed AWS::SageMaker::Cluster has no instance groups")
        bucket, prefix = hyperpod.split_s3_uri(groups[0].source_s3_uri)
        roles = hyperpod.roles_of(groups, hyperpod.read_legacy_params(s3, bucket, prefix))
        if p.orchestrator == "eks":
            roles = {g.name: plan_mod.WORKER for g in groups}
        plan_mod.add_nodes(p, [(g.name, roles[g.name], g.instance_type, g.count) for g in groups])
        p.eks = {"name": d.eks.get("name", ""), "endpoint": d.eks.get("endpoint", ""), "ca": ""}
        self.say("hyperpod", f"cluster {d.cluster_arn}: " + ", ".join(
            f"{g.name} ({roles[g.name]}, {g.instance_type} x{g.count})" for g in groups))
        for n in p.nodes:
            self.state.nodes.append(state_mod.NodeState(n.name, n.netns, n.host_iface, None, n.ip, n.hostname, n.role))
        self.state.save()
        fsx_source = ""
        live_fsx = bool(d.outputs.get("FsxMountName")) and not d.fsx_deleted
        if live_fsx:
            export = Path(self.state.workdir) / "fsx"
            fsx_source = fsx.nid_source(p.fsx_ip, str(d.outputs["FsxMountName"]))
            self.state.fsx_export = str(export)
            self.state.save()
            fsx.mount_export(export, fsx_source)
        hosts = [(n.ip, n.hostname) for n in p.nodes]
        if live_fsx and d.outputs.get("FsxDnsName"):  # a deleted filesystem's name no longer resolves
            hosts.append((p.fsx_ip, str(d.outputs["FsxDnsName"])))
        munge_key = os.urandom(1024)
        keyfile = Path(self.state.workdir) / "ssh" / "id_ed25519"
        keyfile.parent.mkdir(mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hpq-rehearse-{p.run_id}",
                        "-f", str(keyfile)], check=True, stdout=subprocess.DEVNULL)
        self.state.ssh_key = str(keyfile)
        torch_python = _torch_python() if p.orchestrator == "slurm" else None
        rc = hyperpod.resource_config(p, d.cluster_arn)
        for spec in p.nodes:
            st = self.state.node(spec.name)
            assert st is not None
            netns.create_node_link(spec.netns, spec.host_iface, p.bridge, spec.ip, p.prefix_len, p.gateway,
                                   plan_mod.NODE_IFACE)
            node = Node(spec, Path(self.state.workdir) / "nodes" / spec.name)
            node.create(self.state.fsx_export or None, data_volume=self._has_data_volume(spec.group),
                        efa_devices=_efa_devices(spec))
            self.nodes[spec.name] = node
            holder = procs.identify(node.holder_pid) if node.holder_pid else None
            st.holder_pid = node.holder_pid
            st.holder_start = holder.start if holder else None
            self.state.save()
            image.boot(node, hosts, munge_key, (keyfile.with_suffix(".pub")).read_text(), torch_python,
                       fsx.MOUNT_LUSTRE, fsx.SEED_MOUNTS)
            if torch_python:
                _open_path_for_users(node, torch_python)
            if fsx_source:
                node.write(fsx.SOURCE_FILE, fsx_source + "\n")
            self._start_imds(node)
            hyperpod.write_node_files(node, rc)
            self.say(spec.name, f"{spec.hostname} {spec.ip} {spec.instance_id} ({spec.role}, "
                                f"{spec.instance_type}) booted: sshd, IMDSv2 at 169.254.169.254")
        if p.orchestrator == "slurm":
            cpus, mem = hyperpod.host_resources()
            conf = hyperpod.slurm_conf(p, cpus, mem, hyperpod.partitions_of(p, groups))
            ctl = self.nodes[p.controller.name] if p.controller else None
            if ctl is None:
                raise Failure("nodes", "the deployed cluster has no controller group")
            ctl.write(hyperpod.SLURM_CONF, conf)
            self.say("hyperpod", f"cluster agent: {hyperpod.SLURM_CONF} on {ctl.spec.hostname} "
                                 f"({len(p.nodes) - 1} NodeName lines)")
        self.shell = backend_mod.controller_shell(p.controller.ip if p.controller else "", str(keyfile),
                                                  str(Path(self.state.workdir) / "ssh" / "known_hosts"))
        self.backend = backend_mod.RehearsalBackend(self.shell, backend_mod.facts(p))
        self._groups = groups

    def _has_data_volume(self, group: str) -> bool:
        """HyperPod mounts a group's EBS volume (InstanceStorageConfigs) at /opt/sagemaker."""
        assert self.deployed is not None
        for g in self.deployed.cluster.get("InstanceGroups") or []:
            if g.get("InstanceGroupName") == group:
                return any("EbsVolumeConfig" in c for c in g.get("InstanceStorageConfigs") or [])
        return False

    def _start_imds(self, node: Node) -> None:
        s = node.spec
        argv = ["ip", "netns", "exec", s.netns, sys.executable, "-m", "hpq.standins.imds",
                "--instance-id", s.instance_id, "--instance-type", s.instance_type, "--region", plan_mod.REGION,
                "--zone", plan_mod.ZONE, "--local-ipv4", s.ip, "--hostname", s.hostname]
        log = open(node.log_dir / "imds.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env={"PATH": os.environ.get("PATH", ""),
                                                          "PYTHONPATH": os.pathsep.join(sys.path)})
        finally:
            log.close()
        deadline = time.time() + 15
        probe = ("import urllib.request as u; r=u.Request('http://169.254.169.254/latest/api/token', method='PUT',"
                 " headers={'X-aws-ec2-metadata-token-ttl-seconds': '60'}); u.urlopen(r, timeout=1).read()")
        while time.time() < deadline:
            if node.run(["python3", "-c", probe], check=False, timeout=10).returncode == 0:
                return
            time.sleep(0.1)
        raise Failure("nodes", "the IMDS stand-in did not answer", node=s.name, log=str(node.log_dir / "imds.log"),
                      last_lines=_tail(node.log_dir / "imds.log"))

    def run_lifecycles(self) -> None:
        assert self.plan is not None and self.state is not None and self.moto is not None
        s3 = aws.session().client("s3")
        common = self.opts.node_env.get("", {})
        group_of = {g.name: g for g in self._groups}
        threads = []
        order = list(self.plan.nodes)  # controller first (HyperPod provisions it first), all running at once
        for spec in order:
            g = group_of[spec.group]
            bucket, prefix = hyperpod.split_s3_uri(g.source_s3_uri)
            node = self.nodes[spec.name]
            workdir, count = hyperpod.stage_prefix(s3, node, bucket, prefix)
            log_path = os.path.join(self.state.logdir, f"{spec.name}.lifecycle.log")
            env = hyperpod.oncreate_env(self.moto.node_url, {**common, **self.opts.node_env.get(spec.name, {})})
            run = hyperpod.start_oncreate(node, workdir, g.on_create, env, log_path)
            self.runs[spec.name] = run
            self.say(spec.name, f"OnCreate {g.on_create} in {workdir} ({count} files from s3://{bucket}/{prefix})")
            t = threading.Thread(target=hyperpod.follow, args=(run, self._on_step), daemon=True)
            t.start()
            threads.append(t)
        poller = threading.Thread(target=self._poll_slurm_ready, daemon=True)
        if self.plan.orchestrator == "slurm":
            poller.start()
        deadline = time.time() + self.opts.lifecycle_timeout
        pending = dict(self.runs)
        while pending:
            for name, run in list(pending.items()):
                if run.finished is not None:
                    del pending[name]
                    if run.exit_code == 0:
                        self.say(name, f"OnCreate finished in {run.seconds:.1f}s")
                    else:
                        raise self._lifecycle_failure(run, f"OnCreate exited {run.exit_code}")
            if pending and time.time() > deadline:
                run = next(iter(pending.values()))
                raise self._lifecycle_failure(run, f"OnCreate still running after {self.opts.lifecycle_timeout:.0f}s")
            time.sleep(0.1)

    def _on_step(self, run: hyperpod.LifecycleRun, rec: hyperpod.StepRecord) -> None:
        if rec.status == "running":
            self.say(run.node.spec.name, f"step {rec.name} ...")
        elif rec.status == "failed":
            self.say(run.node.spec.name, f"step {rec.name} FAILED after {rec.seconds}s: {rec.detail}")
        elif rec.status == "warning":
            self.say(run.node.spec.name, f"step {rec.name} done with a warning ({rec.seconds}s): {rec.detail}")
        else:
            self.say(run.node.spec.name, f"step {rec.name} {rec.status} ({rec.seconds}s)")

    def _lifecycle_failure(self, run: hyperpod.LifecycleRun, why: str) -> Failure:
        step = run.failed_step()
        cause = why
        if step is not None and step.detail:
            cause = f"{why}: {step.detail}"
        elif run.lines:
            errors = [ln for ln in run.lines if "ERROR" in ln or "FAILED" in ln or "rror" in ln]
            if errors:
                cause = f"{why}: {errors[-1].strip()}"
        return Failure("lifecycle", cause, node=run.node.spec.name, step=step.name if step else None,
                       log=run.log_path, last_lines=[ln for ln in run.lines[-TAIL_LINES:]])

    def _poll_slurm_ready(self) -> None:
        """Record when each Slurm node first shows idle (for the node-start-to-ready figure)."""
        assert self.plan is not None
        ctl = self.nodes.get(self.plan.controller.name) if self.plan.controller else None
        want = {n.hostname: n.name for n in self.plan.nodes if n.role != plan_mod.CONTROLLER}
        while ctl is not None and want and len(self.slurm_ready) < len(want) and not self._stop.is_set():
            res = ctl.run(validate.NODE_STATES_COMMAND.split(), check=False, timeout=10)
            for host, state in validate.parse_node_states(res.stdout.decode(errors="replace")).items():
                if state == "idle" and host in want:
                    name = want[host]
                    run = self.runs.get(name)
                    if name not in self.slurm_ready and run is not None:
                        self.slurm_ready[name] = round(time.time() - run.started, 1)
            if all(r.finished is not None and r.exit_code for r in self.runs.values()):
                return
            self._stop.wait(0.5)

    def wait_slurm(self) -> None:
        assert self.plan is not None and self.shell is not None
        want = validate.worker_hostnames(self.plan)
        states, waited = validate.wait_idle(self.shell, want, self.opts.slurm_timeout)
        idle = [n for n in want if states.get(n) == "idle"]
        self.result["slurm_nodes"] = states
        self.result["slurm_nodes_idle"] = len(idle)
        if len(idle) != len(want):
            bad = {n: states.get(n, "missing") for n in want if states.get(n) != "idle"}
            ctl = self.nodes[self.plan.controller.name]
            log = ctl.host_path("/var/log/slurm/slurmctld.log")
            raise Failure("slurm", f"not idle after {waited:.0f}s: " + ", ".join(f"{k} {v}" for k, v in bad.items()),
                          node="controller", log=str(log), last_lines=_tail(log))
        self.say("slurm", f"scontrol over SSH on the controller: {len(idle)}/{len(want)} nodes idle "
                          f"({', '.join(idle)})")

    def check_ssh(self) -> None:
        """Node to node as the default user, the way mpirun reaches the other nodes: from the controller to each
        worker with the cluster key of the ssh-keys step (without /fsx: once its Slurm job has finished)."""
        assert self.plan is not None and self.shell is not None
        jobs = validate.wait_key_jobs(self.shell, self.opts.slurm_timeout)
        data: dict[str, Any] = {"key_jobs": jobs, "hops": []}
        self.result["ssh"] = data
        for job in jobs:
            self.say("ssh", f"the ssh-keys step's Slurm job {job['id']}: {job['state']} on {job['nodes']}")
            if job["state"] != "COMPLETED":
                raise Failure("ssh", f"the ssh-keys step's Slurm job {job['id']} is {job['state']}", node="controller")
        for spec in self.plan.worker_nodes:
            hop = validate.ssh_hop(self.shell, spec.hostname)
            data["hops"].append(hop)
            if not hop["ok"]:
                raise Failure("ssh", f"ssh {spec.hostname} hostname as {self.shell.target.user} on the controller exited "
                                     f"{hop['exit_code']}, answered {hop['hostname']!r} with key {hop['key']}",
                              node=spec.name, last_lines=hop.get("stderr_tail"))
            self.say("ssh", f"{self.shell.target.user}@controller -> {spec.hostname}: answered, key {hop['key']}")

    def _test(self, stage: str, request: TestRequest, on_line: Callable[[str], None] | None = None) -> TestResult:
        """One test through the validation interface (the judge every backend uses), said as a user would run it."""
        assert self.shell is not None and self.backend is not None
        target = self.shell.target
        self.say(stage, f"ssh {target.user}@{target.host} {validate.command(request)}")
        # The node program's own lines stay in its log (kept on failure); the rehearsal's progress says the verdict
        # and, through ``on_line``, what the stage picks from the program's stderr.
        self.backend.on_stderr_line = on_line or (lambda line: None)
        return run_test(self.backend, request, lambda line: None)

    def run_doctor(self) -> None:
        """The doctor on every worker (faults injected first); it must name each fault and nothing else."""
        assert self.plan is not None and self.shell is not None and self.deployed is not None
        doc = faults.doctor_stage(self.plan, self.nodes, self.shell, self.opts.faults, self.deployed.cluster_arn,
                                  self.say, int(self.opts.validate_timeout))
        self.result["doctor"] = doc
        faulty = {node for node, _ in self.opts.faults}
        extra = [f"{f['node']}: {f['kind']}" for f in doc["findings"] if f["node"] not in faulty]
        if doc["missed"] or extra or (not faulty and doc["outcome"] != "PASS"):
            raise Failure("doctor", "; ".join([f"not named: {', '.join(doc['missed'])}"] * bool(doc["missed"])
                                              + [f"not injected: {', '.join(extra)}"] * bool(extra))
                          or doc["message"].splitlines()[0])
        self.say("doctor", doc["message"].splitlines()[0])

    def run_nccl(self) -> None:
        assert self.plan is not None and self.backend is not None and self.shell is not None
        workers = len(self.plan.worker_nodes)
        request = validate.nccl_request(workers, self.plan.worker_type, self.opts.nccl_args, self.opts.validate_timeout)
        result = self._test("nccl", request)
        data = validate.stage_data(result)
        data["bandwidth_note"] = validate.BRIDGE_NOTE
        self.result["nccl"] = data
        self.say("nccl", result.message)
        raw = self.backend.last_raw
        env = validate.job_environment(self.shell, raw.log if raw else "", self.plan.worker_type, workers)
        self.result["environment"] = env
        self.say("nccl", env["message"])
        if result.exit_code:
            raise Failure("nccl", result.message, node="controller", last_lines=data.get("stderr_tail"))
        if not env["ok"]:
            raise Failure("nccl", env["message"], node="controller")

    def run_nanogpt(self) -> None:
        assert self.plan is not None
        request = validate.nanogpt_request(len(self.plan.worker_nodes), self.plan.worker_type, self.opts.nanogpt_args,
                                           self.opts.validate_timeout)
        result = self._test("nanogpt", request)
        data = validate.stage_data(result)
        self.result["nanogpt"] = data
        self.say("nanogpt", result.message)
        if result.exit_code:
            raise Failure("nanogpt", result.message, node="controller", log=data.get("log"),
                          last_lines=data.get("stderr_tail"))

    def run_sweep(self) -> None:
        """Throttle the chosen workers' links, run the pairwise sweep as a user does, judge what it named."""
        assert self.plan is not None and self.backend is not None
        p = self.plan
        workers = p.worker_nodes
        injected: list[dict[str, Any]] = []
        for index, rate in sorted(self.opts.throttle.items()):
            spec = workers[index]
            netns.shape(spec.netns, plan_mod.NODE_IFACE, rate)
            shown = netns.egress_rate(spec.netns, plan_mod.NODE_IFACE)
            injected.append({"index": index, "node": spec.name, "slurm_node": spec.hostname, "rate": rate,
                             "tc_rate_bytes_per_s": shown})
            self.say(spec.name, f"--throttle {index}={rate}: egress of {plan_mod.NODE_IFACE} limited with tc tbf "
                                f"inside its namespace ({shown} bytes/s as tc reports it)")
        request = validate.sweep_request(len(validate.worker_hostnames(p)), p.worker_type, self.opts.sweep_args,
                                         max(60.0, self.opts.validate_timeout - 60), self.opts.validate_timeout)

        def progress(line: str) -> None:
            if line.startswith("# round") or line.startswith("#   "):
                self.say("sweep", line.lstrip("# "))

        result = self._test("sweep", request, progress)
        raw = self.backend.last_raw
        doc = node_sweep.extract_json(raw.log) if raw else None
        code = raw.exit_code if raw else result.exit_code
        expected = {t["slurm_node"]: t["rate"] for t in injected}
        names = {n.hostname: n.name for n in p.nodes}
        check = throttle.judge(doc, code, expected, names)
        data: dict[str, Any] = validate.stage_data(result) if doc is not None else {
            **result.to_dict(), "slow_nodes": None, "scores": None, "pairs": None}
        data.update({"command": validate.command(request), "remote_exit_code": code, "throttled": injected,
                     "expected_slow_nodes": sorted(expected), "check": {"ok": check.ok, "message": check.message},
                     "bandwidth_note": validate.BRIDGE_NOTE})
        data.pop("stderr_tail", None)
        if not check.ok and raw and raw.stderr.strip():
            data["stderr_tail"] = raw.stderr_tail()
        self.result["sweep"] = data
        if doc is not None:
            self.say("sweep", f"run-nccl-test --sweep: {doc.get('message', '')}")
        self.say("sweep", f"rehearsal check: {check.message}")
        if not check.ok:
            raise Failure("sweep", check.message, node=check.node, log=self._kept_result_path(data.get("result")),
                          last_lines=data.get("stderr_tail"))

    def _kept_result_path(self, node_path: Any) -> str | None:
        """Where a failed rehearsal keeps a file of the controller's /fsx/hpq-results (see _collect_logs)."""
        if self.state is None or not isinstance(node_path, str) or not node_path.startswith("/fsx/hpq-results/"):
            return node_path if isinstance(node_path, str) else None
        return os.path.join(self.state.logdir, "fsx-hpq-results", node_path[len("/fsx/hpq-results/"):])

    def check_manifests(self) -> None:
        from hpq.rehearsal import eks as eks_mod

        assert self.plan is not None and self.deployed is not None
        self.say("manifests", "no Kubernetes API server runs in a rehearsal: the test manifests are rendered for "
                              "this cluster and validated against the Kubernetes schemas, not applied")
        report = eks_mod.check(self.plan, self.deployed)
        self.result["manifests"] = report
        for item in report["manifests"]:
            self.say("manifests", f"{item['test']}: {item['objects']} object(s) {item['status']}")
        if not report["ok"]:
            raise Failure("manifests", "; ".join(i["error"] for i in report["manifests"] if i.get("error")))

    # ------------------------------------------------------------------ result and teardown

    def node_results(self) -> list[dict[str, Any]]:
        out = []
        for spec in (self.plan.nodes if self.plan else []):
            run = self.runs.get(spec.name)
            out.append({
                "name": spec.name, "role": spec.role, "group": spec.group, "hostname": spec.hostname,
                "slurm_node": spec.hostname if spec.role != plan_mod.CONTROLLER else None,
                "ip": spec.ip, "instance_id": spec.instance_id, "instance_type": spec.instance_type,
                "lifecycle_seconds": run.seconds if run else None,
                "lifecycle_exit_code": run.exit_code if run else None,
                "steps": [s.to_dict() for s in run.steps] if run else [],
                "slurm_ready_seconds": self.slurm_ready.get(spec.name),
            })
        return out

    def _summary(self, seconds: float, failure: Failure | None, interrupted: Interrupted | None) -> dict[str, Any]:
        p, d = self.plan, self.deployed
        res: dict[str, Any] = {
            "variant": self.opts.variant, "run_id": self.run_id,
            "result": "pass" if failure is None and interrupted is None else "fail",
            "seconds": round(seconds, 1), "stages": dict(self.stage_seconds),
            "worker_instance_type": p.worker_type if p else None,
            "network": {"bridge": p.bridge, "subnet": p.subnet} if p else None,
            "aws": {"emulation": "moto", "endpoint": self.moto.url if self.moto else None,
                    "stack": d.stack_name if d else None, "outputs": d.outputs if d else {},
                    "notes": d.notes if d else []},
            "cluster": {"name": p.cluster_name if p else None, "arn": d.cluster_arn if d else None},
            "nodes": self.node_results(),
            "slurm_nodes_idle": self.result.get("slurm_nodes_idle", 0),
            "without_fsx": bool(self.opts.without_fsx), "ssh": self.result.get("ssh"),
            "nccl": self.result.get("nccl"), "environment": self.result.get("environment"),
            "nanogpt": self.result.get("nanogpt"),
            "sweep": self.result.get("sweep"), "doctor": self.result.get("doctor"),
            "kept": bool(self.opts.keep), "logs": self.state.logdir if self.state else None,
        }
        if failure is not None:
            res["failure"] = failure.to_dict()
        if interrupted is not None:
            res["failure"] = {"stage": self._current_stage, "node": None, "step": None,
                              "cause": f"interrupted by {interrupted}", "log": None, "last_lines": []}
        return res

    def _finish(self, failed: bool) -> None:
        """Collect logs, then tear down (unless kept) with further signals held back."""
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        self._stop.set()
        try:
            self._collect_logs(failed)
            if self._aws_env is not None and not self.opts.keep:
                self._aws_env.__exit__(None, None, None)
            if self.state is None:
                return
            if self.opts.keep:
                self.state.finished = True
                self.state.save()
                self.say("keep", f"rehearsal {self.run_id} kept: hpq rehearse shell [NODE] to enter a node, "
                                 f"hpq rehearse down to remove it (the emulated AWS stops with this command)")
            else:
                if self.moto is not None:
                    self.moto.stop()
                t = time.time()
                problems = state_mod.teardown(self.state, own_children=True)
                self.result["teardown"] = {"ok": not problems, "left": problems, "seconds": round(time.time() - t, 1)}
                if not failed and self.state.logdir:
                    import shutil

                    shutil.rmtree(self.state.logdir, ignore_errors=True)
                    self.result["logs"] = None
                for d in (LOG_BASE, str(state_mod.STATE_DIR)):  # the parents, once nothing is left in them
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
                if problems:
                    self.say("teardown", "left behind: " + "; ".join(problems))
                else:  # said only once /proc, the mount table and the links show none of it (state.teardown)
                    self.say("teardown", "every process, mount, namespace, link and temp directory removed")
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _collect_logs(self, failed: bool = True) -> None:
        if self.state is None:
            return
        logdir = Path(self.state.logdir)
        results = Path(self.state.fsx_export) / "hpq-results" if self.state.fsx_export else None
        if failed and results is not None and results.is_dir():  # the validation commands' logs and results
            subprocess.run(["cp", "-r", str(results), str(logdir / "fsx-hpq-results")], capture_output=True)
        for name, node in self.nodes.items():
            dest = logdir / name
            dest.mkdir(parents=True, exist_ok=True)
            for rel in ("/var/log/hpq", "/var/log/slurm", "/var/log/munge"):
                src = node.host_path(rel)
                if src.is_dir():
                    subprocess.run(["cp", "-r", str(src), str(dest / rel.strip("/").replace("/", "_"))],
                                   capture_output=True)
            if node.log_dir.is_dir():
                subprocess.run(["cp", "-r", str(node.log_dir), str(dest / "rehearsal")], capture_output=True)


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


def _efa_devices(spec: plan_mod.NodeSpec) -> int:
    """EFA devices a node's image shows (node.EFA_DEVICES): a worker's type's EFA interfaces, else none."""
    from hpq.lifecycle import catalog

    if spec.role != plan_mod.WORKER:
        return 0
    try:
        return catalog.lookup(spec.instance_type).efa_interfaces
    except catalog.UnknownInstanceType:
        return 0


def _torch_python() -> str | None:
    """The Python the nodes' PyTorch environment runs: this interpreter when it has torch."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("torch") is not None else None


def _open_path_for_users(node: Node, python: str) -> None:
    """Make the directories above the PyTorch interpreter traversable on the node (its image only)."""
    dirs = set()
    for p in (os.path.realpath(python), sys.prefix, os.path.realpath(sys.prefix)):
        d = os.path.dirname(p) if os.path.isfile(p) else p
        while d and d != "/":
            if not os.stat(d).st_mode & 0o001:
                dirs.add(d)
            d = os.path.dirname(d)
    if dirs:
        node.run(["chmod", "o+x"] + sorted(dirs))


def _tail(path: Path | str, n: int = TAIL_LINES) -> list[str]:
    try:
        with open(path, errors="replace") as fh:
            return [ln.rstrip("\n") for ln in fh.readlines()[-n:]]
    except OSError:
        return []


def shell_command(st: state_mod.RunState, node_name: str | None) -> list[str]:
    """argv that enters a kept node (its namespaces and root) with a login shell."""
    ns = st.node(node_name) if node_name else next((n for n in st.nodes if n.role == plan_mod.CONTROLLER), None) \
        or (st.nodes[0] if st.nodes else None)
    if ns is None:
        raise KeyError(node_name or "")
    if state_mod.holder(ns) is None:  # never enter the namespaces of whatever process reuses the pid now
        from hpq.rehearsal.node import NodeError

        raise NodeError(f"node {ns.name} of rehearsal {st.run_id} is not running (its holder process is gone): "
                        f"remove the rest with `hpq rehearse down --run {st.run_id}`")
    return ["nsenter", "--target", str(ns.holder_pid), "--mount", "--uts", "--net", "--root", "--wd",
            "env", "-i", "TERM=" + os.environ.get("TERM", "xterm"), "HOME=/root", "PATH=" + _node_path(),
            "/bin/bash", "--login"]


def _node_path() -> str:
    from hpq.rehearsal.node import NODE_PATH

    return NODE_PATH
