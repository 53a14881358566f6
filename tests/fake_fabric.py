"""Stand-ins for srun, mpirun + nccl-tests, scontrol and sinfo on a cluster with a fabric we choose.

No nccl-tests, OpenMPI or GPUs exist on CI machines, and the real Slurm fixture has two nodes on
one host. These stand-ins play a cluster of N nodes whose per-node link speed (GB/s bus
bandwidth) a test sets, so a sweep's pairs measure what such a cluster would: a pair runs at
the speed of its slower node. ``install(bindir, config)`` writes one executable per tool; each
runs this module with its own name. Every call is recorded (argv, the variables a rank would
see, start and end times) in ``<record>/calls.jsonl``.

What they refuse, as the real ones do:
- mpirun (OpenMPI 4/5): running as root without ``--allow-run-as-root``; ``-np`` above the
  hostfile's slots ("There are not enough slots available in the system ..."); a hostfile host
  outside the Slurm allocation.
- srun: a step on nodes outside the allocation, or a ``-w`` list whose length is not ``-N``
  ("Requested node configuration is not available").
What they print: nccl-tests 2.19.6's own lines (NVIDIA/nccl-tests src/util.cu
writeDeviceReport/writeResultHeader/writeResultFooter, src/common.cu writeBenchmarkLine*,
the ``Test NCCL failure`` line of src/common.h NCCLCHECK; checked against the real 2.19.6 log
tests/data/nccl/h100x1_nccl-tests_all_reduce_perf.txt) for mpirun, and the columns of hpq's
built-in benchmark (tests/data/nccl/h200x2_run-nccl-test_builtin.txt) for srun.

Config (JSON, path in $HPQ_FAKE_FABRIC): ``nodes`` {name: {"addr", "busbw"}}, ``hang``,
``fail``, ``wrong`` (node names whose pairs hang, fail or return a wrong element), ``seconds``
(how long a pair runs), ``record`` (directory).
"""

# ruff: noqa: UP031 - the output lines keep nccl-tests' own printf formats, so they are %-formatted here
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

TOOLS = ("srun", "mpirun", "scontrol", "sinfo", "salloc")


def install(bindir: Path, config: dict, config_path: Path) -> Path:
    """One executable per tool in ``bindir`` (put it first on PATH); the config written to ``config_path``."""
    bindir.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(config))
    root = Path(__file__).resolve().parent.parent
    for tool in TOOLS:
        exe = bindir / tool
        exe.write_text(f"#!/bin/sh\nexec {sys.executable} {root / 'tests' / 'fake_fabric.py'} {tool} \"$@\"\n")
        exe.chmod(0o755)
    return bindir


def config() -> dict:
    return json.loads(Path(os.environ["HPQ_FAKE_FABRIC"]).read_text())


def record(cfg: dict, entry: dict) -> None:
    path = Path(cfg["record"]) / "calls.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def expand(nodelist: str) -> list[str]:
    """Slurm host list: ``node-[1-3,5]``, ``a,b``."""
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", nodelist):
        m = re.match(r"^(.*)\[(.*)\]$", part)
        if not m:
            out.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append("%s%0*d" % (m.group(1), len(lo), i))
    return out


def allocation() -> list[str]:
    return expand(os.environ.get("SLURM_JOB_NODELIST", ""))


def fail(msg: str, code: int = 1) -> int:
    sys.stderr.write(msg + "\n")
    return code


def scontrol(argv: list[str], cfg: dict) -> int:
    if argv[:2] == ["show", "hostnames"]:
        print("\n".join(expand(argv[2])))
        return 0
    if argv[:3] == ["-o", "show", "node"]:
        node = cfg["nodes"].get(argv[3])
        if node is None:
            return fail("Node %s not found" % argv[3])
        print("NodeName=%s Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 NodeAddr=%s NodeHostName=%s "
              "State=IDLE Partitions=dev" % (argv[3], node["addr"], argv[3]))
        return 0
    return fail("scontrol stand-in: unsupported %s" % argv)


def pair_speed(cfg: dict, hosts: list[str]) -> float:
    return min(float(cfg["nodes"][h]["busbw"]) for h in hosts)


def misbehave(cfg: dict, hosts: list[str], what: str) -> bool:
    return any(h in cfg.get(what, []) for h in hosts)


def value(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


def parse_bytes(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def float_str(v: float, width: int) -> str:
    """nccl-tests' getFloatStr: %.2f, else %.1f, else %.0f, whatever fits the width."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = fmt % (width, v)
        if len(s) <= width:
            return s
    return "%*.1e" % (width, v)


def nccl_tests_output(hosts: list[str], gpus: int, binargs: list[str], busbw: float, wrong: int, cfg: dict) -> str:
    size = parse_bytes(value(binargs, "-b", "8") or "8")
    maxb = parse_bytes(value(binargs, "-e", "8") or "8")
    n = len(hosts) * gpus
    factor = 2.0 * (n - 1) / n
    algbw = busbw / factor
    t_us = size / (algbw * 1e9) * 1e6
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809",
             "# Collective test starting: all_reduce_perf",
             "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: %s iters: %s agg iters: 1 "
             "validation: 1 graph: 0 unalign: 0" % (size, maxb, value(binargs, "-w", "5"), value(binargs, "-n", "20")),
             "#", "# Using devices"]
    for r in range(n):
        lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" % (
            r, 0, 4000 + r, hosts[r // gpus], r % gpus, 0, 0x53 + r % gpus, 0, "NVIDIA H100 80GB HBM3"))
    lines += net_info_lines(hosts[0])
    lines.append("#")
    lines.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (
        "", "", "", "", ""))
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong", 0, ""))
    lines.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, ""))
    body = "  %7s  %6s  %6s  %6g" % (float_str(t_us, 7), float_str(algbw, 6), float_str(busbw, 6), wrong)
    lines.append("%12d  %12d  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "%6i" % -1) + body
                 + "  %7s  %6s  %6s  %6g" % (float_str(t_us, 7), float_str(algbw, 6), float_str(busbw, 6), 0))
    lines += ["# %-20s : %d %s" % ("Out of bounds values", wrong, "FAILED" if wrong else "OK"),
              "# %-20s : %g %s" % ("Avg bus bandwidth", busbw, ""), "#",
              "# Collective test concluded: all_reduce_perf"]
    return "\n".join(lines) + "\n"


def net_info_lines(host: str) -> list[str]:
    """The NCCL_DEBUG=INFO lines (subsystems INIT,NET) naming the network, as NCCL would pick it from the rank's
    environment: aws-ofi-nccl ("NET/OFI Selected provider is efa", "Using network AWS Libfabric") when the
    plugin may load and FI_PROVIDER is efa, else NCCL's socket transport ("Using network Socket"). Nothing
    without NCCL_DEBUG=INFO or with a NCCL_DEBUG_SUBSYS that leaves NET out (NCCL prints none then either)."""
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    subsys = [p.strip().upper() for p in os.environ.get("NCCL_DEBUG_SUBSYS", "INIT").split(",")]
    if "NET" not in subsys and "ALL" not in subsys:
        return []
    p = "%s:4000:4052 [0] NCCL INFO " % host
    if os.environ.get("NCCL_NET_PLUGIN", "").lower() != "none" and os.environ.get("FI_PROVIDER") == "efa":
        return [p + "NET/OFI Selected provider is efa, fabric is efa-direct (found 1 nics)",
                p + "Using network AWS Libfabric"]
    return [p + "NET/Socket : Using [0]ens32:10.1.0.10<0>", p + "Using network Socket"]


def builtin_output(hosts: list[str], tpn: int, binargs: list[str], busbw: float, wrong: int) -> str:
    size = parse_bytes(value(binargs, "-b", "8") or "8")
    n = len(hosts) * tpn
    algbw = busbw / (2.0 * (n - 1) / n)
    t_us = size / (algbw * 1e9) * 1e6
    lines = ["# hpq built-in benchmark: all_reduce, torch.distributed backend gloo, torch 2.13.0+cpu",
             "# nRanks %d minBytes %d maxBytes %d step: 2(factor) warmup iters: %s iters: %s validation: 1" % (
                 n, size, size, value(binargs, "-w", "5"), value(binargs, "-n", "20")),
             "#", "# Using devices"]
    lines += ["#  Rank %3d Pid %6d on %10s device %2s [cpu]" % (r, 5000 + r, hosts[r // tpn], "-") for r in range(n)]
    lines += ["#", "# %57s %34s" % ("out-of-place", "in-place"),
              "# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s" % (
                  "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                  "busbw", "#wrong")]
    cols = "%8.1f %7.2f %7.2f %6d" % (t_us, algbw, busbw, wrong)
    lines.append("  %10d %12d %8s %6s %6d %s %s" % (size, size // 4, "float", "sum", -1, cols,
                                                    "%8.1f %7.2f %7.2f %6d" % (t_us, algbw, busbw, 0)))
    lines += ["# Out of bounds values : %d %s" % (wrong, "FAILED" if wrong else "OK"),
              "# Avg bus bandwidth    : %g " % busbw, "#"]
    return "\n".join(lines) + "\n"


def run_pair(cfg: dict, tool: str, hosts: list[str], text: str, entry: dict) -> int:
    """Print like the real program, taking as long as the config says; hang or fail when told."""
    entry["start"] = time.time()
    entry["pid"] = os.getpid()
    record(cfg, dict(entry, event="start"))
    lines = text.splitlines(True)
    first_row = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    sys.stdout.write("".join(lines[:first_row]))  # the preamble comes out before the collective runs
    sys.stdout.flush()
    if misbehave(cfg, hosts, "hang"):
        time.sleep(3600)
    time.sleep(float(cfg.get("seconds", 0.2)))
    if misbehave(cfg, hosts, "fail"):
        bad = next(h for h in hosts if h in cfg["fail"])
        sys.stdout.write("%s: Test NCCL failure common.cu:1279 'remote process exited or there was a network "
                         "error / '\n" % bad)
        record(cfg, dict(entry, event="end", end=time.time(), rc=1))
        return 1
    sys.stdout.write("".join(lines[first_row:]))
    sys.stdout.flush()
    record(cfg, dict(entry, event="end", end=time.time(), rc=0))
    return 0


def srun(argv: list[str], cfg: dict) -> int:
    opts: dict[str, str] = {}
    i = 0
    with_value = {"-N", "-n", "-w", "--nodelist", "--ntasks-per-node", "--chdir", "-t", "--time", "-J"}
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in with_value:
            opts[a] = argv[i + 1]
            i += 1
        else:
            opts[a] = ""
        i += 1
    cmd = argv[i:]
    if "hpq.scripts.nccl_bench" not in cmd:  # the worker probe: run it here
        os.execvp(cmd[0], cmd)
    alloc = allocation()
    hosts = expand(opts.get("-w") or opts.get("--nodelist") or "")
    nodes = int(opts.get("-N", "0") or 0)
    if not hosts or len(hosts) != nodes or any(h not in alloc for h in hosts):
        return fail("srun: error: Unable to create step for job %s: Requested node configuration is not "
                    "available" % os.environ.get("SLURM_JOB_ID"))
    # Slurm places the step's ranks in its own node order (here: the allocation's), whatever order -w
    # names them in; a rank told to meet rank 0 anywhere else never finds it (torch's TCPStore times out).
    hosts = [h for h in alloc if h in hosts]
    rank0_addr = cfg["nodes"][hosts[0]]["addr"]
    if os.environ.get("MASTER_ADDR") not in (None, rank0_addr, hosts[0]):
        sys.stdout.write("torch.distributed.DistStoreError: Timed out after 300 seconds waiting for clients. "
                         "1/2 clients joined.\n")
        return 1
    tpn = int(opts.get("--ntasks-per-node", "1"))
    binargs = cmd[cmd.index("hpq.scripts.nccl_bench") + 1:]
    wrong = 1 if misbehave(cfg, hosts, "wrong") else 0
    entry = {"tool": "srun", "argv": argv, "hosts": hosts, "MASTER_ADDR": os.environ.get("MASTER_ADDR"),
             "MASTER_PORT": os.environ.get("MASTER_PORT"), "time_limit": opts.get("--time") or opts.get("-t")}
    return run_pair(cfg, "srun", hosts, builtin_output(hosts, tpn, binargs, pair_speed(cfg, hosts), wrong), entry)


def mpirun(argv: list[str], cfg: dict) -> int:
    if os.geteuid() == 0 and "--allow-run-as-root" not in argv and not (
            os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") == "1" and os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"):
        return fail("mpirun has detected an attempt to run as root.\nRunning as root is *strongly* discouraged ...")
    i, np_, hostfile, exported = 0, None, None, []
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a in ("-np", "-n"):
            np_ = int(argv[i + 1])
            i += 2
        elif a == "--hostfile":
            hostfile = argv[i + 1]
            i += 2
        elif a == "--mca":
            i += 3
        elif a == "-x":
            exported.append(argv[i + 1])
            i += 2
        elif a in ("--bind-to", "-N", "--map-by"):
            i += 2
        else:
            i += 1
    binary, binargs = argv[i], argv[i + 1:]
    slots: dict[str, int] = {}
    for line in Path(hostfile).read_text().splitlines() if hostfile else []:
        if line.strip():
            name, _, rest = line.partition(" slots=")
            slots[name.strip()] = int(rest or 1)
    if np_ is None or np_ > sum(slots.values()):
        return fail("There are not enough slots available in the system to satisfy the %s slots that were "
                    "requested by the application:\n  %s" % (np_, binary))
    if any(h not in allocation() for h in slots):
        return fail("A hostfile was provided that contains at least one node not present in the allocation")
    hosts = list(slots)
    gpus = np_ // len(hosts)
    wrong = 1 if misbehave(cfg, hosts, "wrong") else 0
    entry = {"tool": "mpirun", "argv": argv, "hosts": hosts, "np": np_, "exported": exported,
             "env": {k: os.environ.get(k) for k in exported}}
    return run_pair(cfg, "mpirun", hosts, nccl_tests_output(hosts, gpus, binargs, pair_speed(cfg, hosts), wrong,
                                                              cfg), entry)


def sinfo(argv: list[str], cfg: dict) -> int:
    print("\n".join(cfg["nodes"]))
    return 0


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    cfg = config()
    if tool == "salloc":
        return fail("salloc: error: the stand-in cluster has no allocation to give", 99)
    return {"srun": srun, "mpirun": mpirun, "scontrol": scontrol, "sinfo": sinfo}[tool](argv, cfg)


if __name__ == "__main__":
    sys.exit(main())


def cluster_env(tmp_path: Path, speeds: dict[str, float], efa: bool = True, **cfg: object) -> dict:
    """Environment for running hpq's launcher inside an allocation of the stand-in cluster ``speeds``.

    The nodes are named as Slurm lists them and get 10.1.0.x addresses; the worker probe sees a
    node root with a default route and (``efa``) one EFA device, so the real transport function runs.
    """
    root = tmp_path / "node"
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
        "ens32\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    if efa:
        (root / "sys/class/infiniband/rdmap16s27").mkdir(parents=True, exist_ok=True)
    conf = {"nodes": {n: {"addr": f"10.1.0.{i + 10}", "busbw": bw} for i, (n, bw) in enumerate(speeds.items())},
            "record": str(tmp_path / "record"), "seconds": 0.3}
    conf.update(cfg)
    bindir = install(tmp_path / "fakebin", conf, tmp_path / "fabric.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPQ_", "NCCL_", "FI_", "MASTER_"))}
    env.update(PATH=f"{bindir}:{os.environ['PATH']}", HPQ_FAKE_FABRIC=str(tmp_path / "fabric.json"),
               SLURM_JOB_ID="42", SLURM_JOB_NODELIST=",".join(speeds), HPQ_ROOT=str(root),
               HPQ_IMDS_ENDPOINT="off", HPQ_NODE_INFO=str(tmp_path / "no-node-info"),
               HPQ_RESULTS_DIR=str(tmp_path / "results"))
    return env


def calls(tmp_path: Path) -> list[dict]:
    path = tmp_path / "record" / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
