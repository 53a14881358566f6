"""Launching the validation programs: Slurm allocation, worker environment, logs, local runs.

Shared by ``run-nccl-test``, ``run-nanogpt`` and ``run-nccom-test``. Standard library only.

- Outside an allocation the commands re-run themselves under ``salloc`` (so the hostfile
  and the worker probe see the real nodes); inside one they use ``SLURM_JOB_NODELIST``.
- The transport environment is asked of a *worker* (``srun -N1 -n1 python3 -m
  hpq.scripts.nodeinfo``): the controller is a CPU instance and would pick the wrong one.
- Without Slurm (a single GPU box, the benchmark machine) ``--launcher local`` starts one
  process per GPU on this host with an ``env://`` rendezvous.
- The ranks get exactly the worker's transport environment (``child_env``): srun passes the
  launching process's environment on (``--export=ALL``, Slurm's default), and so do the mpirun daemons
  it starts, so every transport variable inherited from the submitting node (a CPU controller's
  ``NCCL_NET_PLUGIN=none``) that the worker does not set is removed before the launch, not merged.
  ``HPQ_KEEP_ENV=NAME,...`` keeps the named ones on purpose (e.g. ``NCCL_NVLS_ENABLE``).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
from typing import Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from hpq.lifecycle import catalog, names, transport
from hpq.scripts import distenv, env_check, nodeinfo, verdicts

TORCH_PYTHONS = (
    "/opt/conda/envs/pytorch/bin/python3",
    "/opt/pytorch/bin/python3",
    "/usr/local/bin/python3",
    "/usr/bin/python3",
)


BOOT = """import sys
root = sys.argv.pop(1)
if root:
    sys.path.insert(0, root)
from %s import main
sys.exit(main())"""


class LaunchError(Exception):
    """A launcher step failed; the message says which and why (exit 1)."""


def command_main(prog: str, argv: Optional[List[str]], parse: Callable, run: Callable) -> int:
    """Shared ``main`` of the node commands: parse, run, and turn expected errors into one line.

    A LaunchError (the launch failed) or an OSError (e.g. an unwritable log directory) exits 1;
    bad arguments exit 2 from argparse.
    """
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    try:
        return run(args, raw)
    except (LaunchError, OSError) as exc:
        print("%s: error: %s" % (prog, exc), file=sys.stderr)
        return 1


def bundle_root() -> Optional[str]:
    """``<root>`` when running from the node bundle ``<root>/hpq/scripts``; None when installed normally."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if os.path.basename(here) == "scripts" and os.path.isfile(os.path.join(root, "hpq", "__init__.py")) \
            and os.path.realpath(os.path.join(root, "hpq", "scripts")) == os.path.realpath(here):
        return root
    return None


KEEP_ENV = "HPQ_KEEP_ENV"
EXPORT_ALL = "--export=ALL"  # srun(1): the tasks get srun's own environment (child_env), whatever SLURM_EXPORT_ENV says


def kept_transport_env() -> Dict[str, str]:
    """Inherited transport variables the user named in ``HPQ_KEEP_ENV`` (comma-separated), as set here."""
    names_ = [n.strip() for n in os.environ.get(KEEP_ENV, "").split(",") if n.strip()]
    return {n: os.environ[n] for n in names_ if n in os.environ and transport.owns(n)}


def child_env(extra: Optional[Dict[str, str]] = None, path_prepend: Sequence[str] = (),
              inherit_transport: bool = False) -> Dict[str, str]:
    """This process's environment plus ``extra``, with the bundle on PYTHONPATH when needed.

    Transport variables (``transport.owns``) come from ``extra`` only, plus those ``HPQ_KEEP_ENV``
    names: any other one this process inherited is removed, so a job started from a CPU node never
    carries that node's settings. ``inherit_transport`` keeps them (the salloc re-run of the command
    itself, which reads the user's NCCL_DEBUG and strips when it launches the ranks).
    """
    env = dict(os.environ)
    if not inherit_transport:
        keep = set(extra or {}) | set(kept_transport_env())
        for key in [k for k in env if transport.owns(k) and k not in keep]:
            del env[key]
    root = bundle_root()
    if root:
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            env["PYTHONPATH"] = os.pathsep.join([root] + parts)
    for p in reversed(list(path_prepend)):
        if p not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = p + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    env.setdefault("PYTHONSAFEPATH", "1")  # python >= 3.11: the cwd never shadows the bundle
    # NVLink multicast stays as the user set it; nothing here changes NCCL_ALGO/PROTO.
    return env


def child_cwd() -> Optional[str]:
    """Children start in the bundle root (``python -m`` puts the cwd first on sys.path); else here."""
    return bundle_root()


def results_dir(override: Optional[str] = None, create: bool = True) -> str:
    """Where logs and JSON results go: /fsx when it is mounted (shared, survives nodes), else home.

    ``create=False`` for --dry-run, which names the folder but writes nothing (not even the folder).
    """
    path = override or os.environ.get("HPQ_RESULTS_DIR")
    if not path:
        fsx = os.environ.get("HPQ_FSX", names.FSX_MOUNT_POINT)
        shared = os.path.join(fsx, os.path.basename(names.FSX_RESULTS_DIR))
        # The lifecycle makes the shared directory writable for every user; /fsx itself may not be.
        if os.path.ismount(fsx) and (os.access(shared, os.W_OK) or (not os.path.exists(shared)
                                                                      and os.access(fsx, os.W_OK))):
            path = shared
        else:
            path = os.path.join(os.path.expanduser("~"), "hpq-results")
    if create:
        os.makedirs(path, exist_ok=True)
    return path


def run_stamp() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    ts = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return "%s-job%s" % (ts, job) if job else ts


def in_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_JOB_NODELIST"))


def slurm_available() -> bool:
    return bool(shutil.which("srun") and shutil.which("salloc"))


def choose_launcher(requested: str, nodes: int) -> str:
    if requested == "local" and nodes > 1:
        raise LaunchError("--launcher local runs on this host only; %d nodes need Slurm" % nodes)
    if requested != "auto":
        return requested
    if in_allocation() or slurm_available():
        return "slurm"
    if nodes > 1:
        raise LaunchError("%d nodes asked for but Slurm (srun/salloc) is not available on this host" % nodes)
    return "local"


def reexec_under_salloc(module: str, argv: Sequence[str], nodes: int, tasks_per_node: Optional[int],
                        job_name: str, exclusive: bool, extra: Sequence[str] = ()) -> int:
    """Run ``python -m module argv`` again inside a new allocation; returns its exit code."""
    cmd = ["salloc", "-N", str(nodes), "-J", job_name]
    if tasks_per_node:
        cmd += ["--ntasks-per-node", str(tasks_per_node)]
    if exclusive:
        cmd.append("--exclusive")
    cmd += list(extra)
    root = bundle_root()
    if root:  # like the bin wrappers: the bundle ahead of the cwd, and the cwd kept for relative paths
        cmd += [sys.executable, "-c", BOOT % module, root] + list(argv)
    else:
        cmd += [sys.executable, "-m", module] + list(argv)
    env = child_env({"HPQ_IN_SALLOC": "1"}, inherit_transport=True)
    print("+ " + " ".join(cmd), flush=True)
    try:
        return subprocess.call(cmd, env=env)
    except OSError as exc:
        raise LaunchError("salloc failed to start: %s" % exc) from None


def place(args, raw: Sequence[str], module: str, job_name: str,
          tasks_per_node: Optional[int]) -> Tuple[str, List[str], Optional[int]]:
    """Where a command runs: (launcher, hosts, None), or (.., .., exit code) once it re-ran under salloc.

    Shared by the three commands (their ``nodes``, ``launcher``, ``dry_run`` and ``exclusive``
    arguments): outside an allocation they run again inside a new one; inside, the first
    NODES hosts of the allocation; with the local launcher, this host only (``hosts`` empty).
    """
    launcher = choose_launcher(args.launcher, args.nodes or 1)
    if launcher != "slurm":
        return launcher, [], None
    pinned = list(getattr(args, "nodelist", None) or [])  # run-nccl-test --nodelist: exactly these nodes
    if not in_allocation():
        pin = ["-w", ",".join(pinned)] if pinned else []  # salloc(1): -w, --nodelist
        if args.dry_run:
            print("would run: salloc -N %d %s... %s %s" % (args.nodes or 2, " ".join(pin + [""]), module,
                                                           " ".join(raw)))
            return launcher, [], 0
        return launcher, [], reexec_under_salloc(module, raw, args.nodes or 2, tasks_per_node, job_name,
                                                 args.exclusive, extra=pin)
    hosts = allocation_hosts()
    if pinned:
        missing = [h for h in pinned if h not in hosts]
        if missing:
            raise LaunchError("--nodelist: %s not in this allocation (%s)" % (",".join(missing), ",".join(hosts)))
        return launcher, pinned, None
    nodes = args.nodes or len(hosts)
    if nodes > len(hosts):
        raise LaunchError("%d nodes asked for but the allocation has %d (%s)" % (nodes, len(hosts), ",".join(hosts)))
    return launcher, hosts[:nodes], None


def default_gpus(wenv: Dict, instance_type: Optional[str]) -> int:
    """Processes per node: the instance type's GPUs, else the worker's count, else 1."""
    if instance_type:
        try:
            entry = catalog.lookup(instance_type)
            if entry.accelerator == catalog.GPU:
                return entry.accelerator_count
        except catalog.UnknownInstanceType:
            pass
    return int(wenv.get("gpus") or 0) or 1


def allocation_hosts() -> List[str]:
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise LaunchError("not inside a Slurm allocation (SLURM_JOB_NODELIST is unset)")
    try:
        return distenv.expand_hostlist(nodelist)
    except RuntimeError as exc:
        raise LaunchError(str(exc)) from None


def worker_environment(launcher: str, instance_type: Optional[str], python: Optional[str] = None) -> Dict:
    """The transport environment as a worker computes it (same function as the lifecycle)."""
    if launcher == "slurm" and in_allocation():
        chdir = ["--chdir", bundle_root() or ""] if bundle_root() else []
        cmd = ["srun", "-N1", "-n1", "--ntasks-per-node=1", EXPORT_ALL] + chdir + [python or "python3", "-m",
                                                                       "hpq.scripts.nodeinfo"]
        if instance_type:
            cmd += ["--instance-type", instance_type]
        try:
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                 env=child_env(), timeout=300, cwd=child_cwd())
        except (OSError, subprocess.SubprocessError) as exc:
            raise LaunchError("probing a worker with srun failed: %s" % exc) from None
        if res.returncode != 0:
            raise LaunchError("probing a worker with srun failed (exit %d): %s" % (
                res.returncode, (res.stderr.strip().splitlines() or ["no output"])[-1]))
        for line in reversed(res.stdout.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise LaunchError("worker probe printed no JSON: %r" % res.stdout[-300:])
    info = nodeinfo.environment_for(nodeinfo.resolve_instance_type(instance_type))
    info["gpus"] = nodeinfo.count_gpus()
    return info


def find_torch_python(explicit: Optional[str] = None) -> str:
    """A python that imports torch: --python, $HPQ_PYTHON, this interpreter, then DLAMI locations."""
    cands = [explicit, os.environ.get("HPQ_PYTHON"), sys.executable] + list(TORCH_PYTHONS)
    for c in cands:
        if not c or not os.path.exists(c):
            continue
        if c == sys.executable:
            try:
                import importlib.util

                if importlib.util.find_spec("torch") is not None:
                    return c
            except (ImportError, ValueError):
                pass
            continue
        try:
            ok = subprocess.run([c, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=120).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return c
    if explicit or os.environ.get("HPQ_PYTHON"):
        return explicit or os.environ["HPQ_PYTHON"]
    raise LaunchError("no Python with PyTorch found (tried %s); pass --python or set HPQ_PYTHON"
                      % ", ".join(c for c in cands if c))


def tee(cmd: List[str], env: Dict[str, str], log: TextIO, echo: bool = True) -> int:
    """Run ``cmd``, copying its merged output to stdout and the log, line by line."""
    print("+ " + " ".join(cmd), flush=True)
    log.write("+ " + " ".join(cmd) + "\n")
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, bufsize=1, errors="replace", cwd=child_cwd())
    except OSError as exc:
        raise LaunchError("cannot start %s: %s" % (cmd[0], exc)) from None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise


def run_local(python: str, module: str, args: List[str], nprocs: int, env: Dict[str, str], log: TextIO,
              report_env: bool = False) -> int:
    """One process per rank on this host, env:// rendezvous on a free loopback port.

    ``report_env``: each rank starts through ``env_check.wrap`` (rank 0 prints its transport variables).
    """
    wrapper = env_check.wrap([]) if report_env else []
    port = distenv.free_port()
    procs = []
    print("+ local launch: %d x %s -m %s %s" % (nprocs, python, module, " ".join(args)), flush=True)
    log.write("+ local launch: %d x %s -m %s %s\n" % (nprocs, python, module, " ".join(args)))
    for rank in range(nprocs):
        e = dict(env)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": str(nprocs), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
            e.pop(k, None)
        out = subprocess.PIPE if rank == 0 else None
        procs.append(subprocess.Popen(wrapper + [python, "-m", module] + args, env=e, stdout=out, cwd=child_cwd(),
                                      stderr=subprocess.STDOUT if rank == 0 else None,
                                      universal_newlines=True, bufsize=1, errors="replace"))
    rc = 0
    try:
        assert procs[0].stdout is not None
        for line in procs[0].stdout:
            log.write(line)
            log.flush()
            sys.stdout.write(line)
            sys.stdout.flush()
        codes = [p.wait() for p in procs]
        rc = next((c for c in codes if c != 0), 0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    return rc


def srun_command(nodes: int, tasks_per_node: int, python: str, module: str, args: List[str],
                 extra: Sequence[str] = (), report_env: bool = False) -> List[str]:
    """srun of ``python -m module args``; ``report_env`` starts each task through ``env_check.wrap``.

    srun runs with the environment it is given (``child_env``: inherited transport variables already
    removed) and passes all of it to the tasks (``--export=ALL``, Slurm's default, srun(1)), said
    explicitly: inside an ``sbatch --export=NONE`` job srun would otherwise inherit that setting
    (SLURM_EXPORT_ENV) and the ranks would get none of the worker's variables.
    """
    chdir = ["--chdir", bundle_root()] if bundle_root() else []
    program = [python, "-m", module] + list(args)
    return (["srun", "-N", str(nodes), "--ntasks-per-node", str(tasks_per_node), "--kill-on-bad-exit=1",
             EXPORT_ALL] + chdir + list(extra) + (env_check.wrap(program) if report_env else program))


# The ending of run-nccl-test and run-nccom-test lives in hpq.scripts.verdicts (PASS/FAIL/INCONCLUSIVE);
# kept importable here for callers of launch.judge_log.
judge_log = verdicts.judge_log


def write_json(path: str, data: Dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
