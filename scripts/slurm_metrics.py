"""Slurm's state as Prometheus metrics: ``python3 -m hpq.scripts.slurm_metrics [--every 30]`` on the controller.

AWS's Slurm observability runs the Slurm exporter v1.1.0 on the controller (awslabs/awsome-distributed-ai
1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/install_slurm_exporter.sh),
built at boot from ``git clone -b v1.1.0 https://github.com/SckyzO/slurm_exporter`` with Go downloaded from the
internet; no release binary with a published checksum exists for it. hpq writes the same series itself, from the
same Slurm commands the exporter runs, into node_exporter's textfile directory (the one scripts/result_metrics.py
writes), so the dashboards and alerts that use the exporter's names work unchanged.

Names, labels and the commands are the exporter's, at SckyzO/slurm_exporter v1.1.0 (internal/collector/):
- nodes.go: per partition (``sinfo -h -o %R``), ``sinfo -h -o %D|%T|%b -p PART`` -> ``slurm_nodes_<state>
  {partition, active_feature_set}``, the state chosen by the first matching prefix (alloc, comp, down, drain, fail,
  err, idle, maint, mix, res, planned; else other); ``slurm_nodes_total`` = lines of ``scontrol show nodes -o``;
- node.go: ``sinfo -h -N -O NodeList,AllocMem,Memory,CPUsState,StateLong,Partition`` -> ``slurm_node_status``
  (1) and ``slurm_node_cpu_{alloc,idle,other,total}``, ``slurm_node_mem_{alloc,total}`` {node, status, partition}
  (partition without the default partition's trailing ``*``, which the exporter keeps);
- cpus.go: ``sinfo -h -o %C`` -> ``slurm_cpus_{alloc,idle,other,total}``;
- queue.go: ``squeue -h -o %P,%T,%C,%r,%u`` -> ``slurm_queue_<state>`` and ``slurm_cores_<state>`` {user,
  partition} (PENDING also {reason}) for PENDING, RUNNING, SUSPENDED, CANCELLED, COMPLETING, COMPLETED,
  CONFIGURING, FAILED, TIMEOUT, PREEMPTED, NODE_FAIL;
- scheduler.go: ``sdiag`` -> ``slurm_scheduler_{threads,queue_size,dbd_queue_size}`` (``Server thread count``,
  ``Agent queue size``, ``DBD Agent queue size``), from "Main schedule statistics" ``slurm_scheduler_{last_cycle,
  mean_cycle,cycle_per_minute}`` (microseconds), from "Backfilling stats" ``slurm_scheduler_backfill_{last_cycle,
  mean_cycle,depth_mean}`` and ``slurm_scheduler_backfilled_{jobs_since_start,jobs_since_cycle,heterogeneous}_total``,
  and from the RPC sections ``slurm_rpc_stats{,_avg_time,_total_time}{operation}`` and
  ``slurm_user_rpc_stats{,_avg_time,_total_time}{user}`` (``count:``, ``ave_time:``, ``total_time:``).
  Two differences, both only on output the exporter would misread: the exporter tells the main cycle from the
  backfill cycle by order (the first ``Last cycle`` is the main one), hpq by the section it is in, so a missing
  main line does not pass the backfill value off as the main one; and a field sdiag does not print (it prints
  ``Mean cycle`` and ``Depth Mean`` only once a cycle has run) or does not give as a number is left out, where the
  exporter writes 0.
Not written (the exporter's GPU, account, fairshare, reservation and user collectors).

A command that fails leaves its families out (and says so on stderr) rather than writing zeros: a missing series
is missing, never a healthy-looking 0. ``slurm_metrics_up`` is 1 when every command answered.
Standard library only (the node's python3). Exit codes: 0 written, 1 a command failed (file still written with
what answered), 2 bad input.
"""

from __future__ import annotations

import re
import sys
from typing import List, Optional, Sequence, Tuple

from hpq.scripts import metric_writer
from hpq.scripts.metric_writer import Families, Runner

OUTPUT_NAME = "hpq_slurm.prom"
COMMAND_TIMEOUT_S = 20.0

# nodes.go's prefixes, in its switch order (the first that matches wins).
NODE_STATE_PREFIXES = (("alloc", "alloc"), ("comp", "comp"), ("down", "down"), ("drain", "drain"),
                       ("fail", "fail"), ("err", "err"), ("idle", "idle"), ("maint", "maint"), ("mix", "mix"),
                       ("res", "resv"), ("planned", "planned"))
NODE_STATES = tuple(s for _, s in NODE_STATE_PREFIXES) + ("other",)
QUEUE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "CANCELLED", "COMPLETING", "COMPLETED", "CONFIGURING",
                "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

COMMANDS = {
    "partitions": ["sinfo", "-h", "-o", "%R"],
    "total": ["scontrol", "show", "nodes", "-o"],
    "node": ["sinfo", "-h", "-N", "-O", "NodeList,AllocMem,Memory,CPUsState,StateLong,Partition"],
    "cpus": ["sinfo", "-h", "-o", "%C"],
    "queue": ["squeue", "-h", "-o", "%P,%T,%C,%r,%u"],
    "scheduler": ["sdiag"],
}


def nodes_command(partition: str) -> List[str]:
    return ["sinfo", "-h", "-o", "%D|%T|%b", "-p", partition]


def node_state_family(state: str) -> str:
    for prefix, family in NODE_STATE_PREFIXES:
        if state.startswith(prefix):
            return family
    return "other"


def add_nodes(fam: Families, partition: str, text: str) -> None:
    """``%D|%T|%b`` lines of one partition (duplicates dropped, as the exporter does)."""
    for line in sorted(set(text.splitlines())):
        parts = line.split("|")
        if len(parts) < 3:
            continue
        try:
            count = float(parts[0].strip())
        except ValueError:
            continue
        features = ",".join(sorted(parts[2].split(",")))
        feature_set = "null" if features == "(null)" else features
        family = node_state_family(parts[1])
        fam.add("slurm_nodes_" + family, "Nodes in state %s" % family,
                {"partition": partition, "active_feature_set": feature_set}, count, accumulate=True)


def add_total(fam: Families, text: str) -> None:
    fam.add("slurm_nodes_total", "Total number of nodes", {}, float(sum(1 for x in text.splitlines() if x.strip())))


def add_node(fam: Families, text: str) -> None:
    """``sinfo -N -O NodeList,AllocMem,Memory,CPUsState,StateLong,Partition``: one row per node and partition."""
    for line in sorted(set(text.splitlines())):
        f = line.split()
        if len(f) < 6:
            continue
        cpus = f[3].split("/")
        if len(cpus) != 4:
            continue
        # sinfo marks the default partition with a trailing '*' in -O Partition (seen on Slurm 22.05; sinfo(1)),
        # which %R (the nodes_* families' partition) does not: dropped, so the families join on partition.
        labels = {"node": f[0], "status": f[4], "partition": f[5].rstrip("*")}
        try:
            values = [float(f[1]), float(f[2])] + [float(c) for c in cpus]
        except ValueError:
            continue
        fam.add("slurm_node_status", "Node Status with partition", labels, 1.0)
        for i, name in enumerate(("mem_alloc", "mem_total", "cpu_alloc", "cpu_idle", "cpu_other", "cpu_total")):
            fam.add("slurm_node_" + name, "Node %s" % name.replace("_", " "), labels, values[i])


def add_cpus(fam: Families, text: str) -> None:
    parts = text.strip().split("/")
    if len(parts) != 4:
        return
    try:
        values = [float(p) for p in parts]
    except ValueError:
        return
    for i, name in enumerate(("alloc", "idle", "other", "total")):
        fam.add("slurm_cpus_" + name, "CPUs %s" % name, {}, values[i])


def add_queue(fam: Families, text: str) -> None:
    """``%P,%T,%C,%r,%u``: jobs and cores by state, user and partition (PENDING also by reason)."""
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 5 or f[1] not in QUEUE_STATES:
            continue
        labels = {"partition": f[0].strip(), "user": f[4].strip()}
        if f[1] == "PENDING":
            labels["reason"] = f[3]
        try:
            cores = float(int(f[2]))
        except ValueError:
            cores = 0.0
        state = f[1].lower()
        fam.add("slurm_queue_" + state, "Jobs in state %s" % f[1], labels, 1.0, accumulate=True)
        fam.add("slurm_cores_" + state, "Cores of jobs in state %s" % f[1], labels, cores, accumulate=True)


# scheduler.go's key patterns, matched on the text before a line's first ':'; by section (the unindented line
# that heads the indented ones; "" before any), the exporter's field name and hpq's family name.
SDIAG_TOP = ((re.compile(r"^Server thread"), "slurm_scheduler_threads", "number of scheduler threads"),
             (re.compile(r"^Agent queue"), "slurm_scheduler_queue_size", "length of the scheduler queue"),
             (re.compile(r"^DBD Agent"), "slurm_scheduler_dbd_queue_size", "length of the DBD agent queue"))
SDIAG_SECTIONS = {
    "Main schedule statistics": (
        (re.compile(r"^\s+Last cycle$"), "slurm_scheduler_last_cycle", "scheduler last cycle time (microseconds)"),
        (re.compile(r"^\s+Mean cycle$"), "slurm_scheduler_mean_cycle", "scheduler mean cycle time (microseconds)"),
        (re.compile(r"^\s+Cycles per"), "slurm_scheduler_cycle_per_minute", "scheduler cycles per minute")),
    "Backfilling stats": (
        (re.compile(r"^\s+Last cycle$"), "slurm_scheduler_backfill_last_cycle",
         "backfill last cycle time (microseconds)"),
        (re.compile(r"^\s+Mean cycle$"), "slurm_scheduler_backfill_mean_cycle",
         "backfill mean cycle time (microseconds)"),
        (re.compile(r"^\s+Depth Mean$"), "slurm_scheduler_backfill_depth_mean", "backfill mean depth"),
        (re.compile(r"^\s+Total backfilled jobs \(since last slurm start\)"),
         "slurm_scheduler_backfilled_jobs_since_start_total", "jobs started by backfill since Slurm started"),
        (re.compile(r"^\s+Total backfilled jobs \(since last stats cycle start\)"),
         "slurm_scheduler_backfilled_jobs_since_cycle_total", "jobs started by backfill since stats were reset"),
        (re.compile(r"^\s+Total backfilled heterogeneous job components"),
         "slurm_scheduler_backfilled_heterogeneous_total", "heterogeneous job components started by backfill")),
}
SDIAG_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
# scheduler.go's ParseRpcStats line pattern, in the sections it names.
RPC_LINE = re.compile(r"^\s*([A-Za-z0-9_]*).*count:([0-9]*)\s*ave_time:([0-9]*)\s\s*total_time:([0-9]*)\s*$")
RPC_SECTIONS = (("Remote Procedure Call statistics by message type", "slurm_rpc_stats", "operation"),
                ("Remote Procedure Call statistics by user", "slurm_user_rpc_stats", "user"))


def add_scheduler(fam: Families, text: str) -> int:
    """``sdiag``'s scheduler and RPC statistics; returns how many series it read (0: nothing recognised)."""
    found = 0
    section = ""
    rpc: Optional[Tuple[str, str]] = None
    for line in text.splitlines():
        if line.strip() and not line[0].isspace():
            section = line.strip()
            rpc = next(((n, lab) for head, n, lab in RPC_SECTIONS if head in line), rpc)
        if rpc is not None:
            m = RPC_LINE.match(line)
            if m:
                name, label = rpc
                for suffix, value, what in (("", m.group(2), "count"), ("_avg_time", m.group(3), "average time"),
                                            ("_total_time", m.group(4), "total time")):
                    if value:
                        fam.add(name + suffix, "sdiag RPC %s by %s" % (what, label), {label: m.group(1)},
                                float(value))
                        found += 1
            continue
        if ":" not in line:
            continue
        key, value = line.split(":")[:2]
        value = value.strip()
        if not SDIAG_NUMBER.match(value):
            continue
        patterns = SDIAG_TOP if not key[:1].isspace() else next(
            (p for head, p in SDIAG_SECTIONS.items() if section.startswith(head)), ())
        for pattern, name, help_text in patterns:
            if pattern.match(key):
                fam.add(name, "Information provided by the Slurm sdiag command, " + help_text, {}, float(value))
                found += 1
                break
    return found


def run_command(argv: List[str]) -> Optional[str]:
    """The command's stdout, or None (and one line on stderr) when it cannot run or fails."""
    return metric_writer.run_command(argv, "slurm_metrics", COMMAND_TIMEOUT_S)


def collect(run: Runner = run_command) -> Tuple[str, bool]:
    """(exposition text, whether every command answered)."""
    fam = Families()
    ok = True
    parts = run(COMMANDS["partitions"])
    if parts is None:
        ok = False
    else:
        for part in sorted({p.strip() for p in parts.splitlines() if p.strip()}):
            text = run(nodes_command(part))
            if text is None:
                ok = False
            else:
                add_nodes(fam, part, text)
    for key, adder in (("total", add_total), ("node", add_node), ("cpus", add_cpus), ("queue", add_queue)):
        text = run(COMMANDS[key])
        if text is None:
            ok = False
        else:
            adder(fam, text)
    text = run(COMMANDS["scheduler"])
    if text is None:
        ok = False
    elif not add_scheduler(fam, text):
        print("slurm_metrics: sdiag answered nothing it reads as scheduler statistics", file=sys.stderr)
        ok = False
    fam.add("slurm_metrics_up", "1 when every Slurm command hpq's writer runs answered, else 0.", {},
            1.0 if ok else 0.0)
    return fam.render(), ok


def write_once(textfile_dir: str, run: Runner = run_command) -> bool:
    text, ok = collect(run)
    metric_writer.write_text(textfile_dir, OUTPUT_NAME, text)
    return ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    return metric_writer.main_loop("slurm_metrics", "Write Slurm's node and queue state as Prometheus metrics.",
                                   OUTPUT_NAME, collect, argv)


if __name__ == "__main__":
    sys.exit(main())
