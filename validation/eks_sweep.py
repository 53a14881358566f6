"""The pairwise sweep on EKS: the Slurm sweep's pairs and rounds, each pair an nccl-tests MPIJob on its two nodes.

The schedule is the node program's (hpq.scripts.sweep.schedule: round-robin, every pair up to 16 nodes), each
pair's log is judged by the node program's own pair judge (hpq.scripts.nccl_sweep.judge_pair, the
``hpq nccl-report`` parser), and the report is the node program's (sweep.build_report), so the EKS backend
hands the sweep judge (validation/judges.judge_sweep) the same JSON run-nccl-test --sweep prints on Slurm and
the slow node is named by the same rule. The pairs of a round run one after another (each job is followed to
its end), bounded by the request's --timeout: a pair gets at most PAIR_TIMEOUT_S and what is left of it, and a
later pair starts only while nccl_sweep.MIN_ROUND_S is left.

Each pair's workers are pinned to its two nodes by a required node affinity on ``kubernetes.io/hostname``
(hpq.manifests.render, RenderRequest.hosts). A job that did not succeed is a failed pair (as a pair whose
mpirun exited non-zero on Slurm), one past its time a timed-out pair; a job that succeeded but left no log is
NO_LOG: no evidence, its nodes unmeasured, the sweep INCONCLUSIVE.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace

from hpq.errors import OperationFailed, UsageError
from hpq.kube import jobs
from hpq.kube.kube import KubeClient
from hpq.lifecycle import catalog
from hpq.manifests.render import HOSTNAME_LABEL, RenderRequest, render_objects, resolve
from hpq.scripts import nccl_sweep, outcome, sweep
from hpq.validation.request import TestRequest
from hpq.validation.result import RawOutcome

Echo = Callable[[str], None]
# A pair's job: scheduling, image pull (several GB the first time on a node), MPI start, one message size.
PAIR_TIMEOUT_S = 600.0
SWEEP_NAME = "hpq-sweep"


def sweep_nodes(client: KubeClient, instance_type: str, count: int | None) -> list[tuple[str, str]]:
    """(node name, its kubernetes.io/hostname label) of the usable nodes of the type, by name; the first
    ``count`` of them (None: all). Fewer than two, or fewer than ``count``: a usage error."""
    usable = set(jobs.node_facts(client, instance_type).usable)
    found = sorted((str(n["metadata"]["name"]), str(((n["metadata"].get("labels") or {}).get(HOSTNAME_LABEL))
                                                    or n["metadata"]["name"]))
                   for n in client.list_nodes() if n.get("metadata", {}).get("name") in usable)
    want = len(found) if count is None else count
    if len(found) < max(2, want):
        raise UsageError(f"the sweep needs {max(2, want)} Ready {instance_type} node(s); the cluster has {len(found)}")
    return found[:want]


def _now() -> float:
    return time.monotonic()


class PairJobs:
    """Runs the sweep's pairs as MPIJobs; remembers the one running so cleanup can remove it."""

    def __init__(self, client: KubeClient, base: RenderRequest, poll_s: float = 5.0, keep: bool = False,
                 clock: Callable[[], float] | None = None) -> None:
        self.client, self.base, self.poll_s, self.keep = client, base, poll_s, keep
        self.clock = clock or _now
        self.name = base.name or SWEEP_NAME
        self.running: jobs.Runner | None = None
        self.kept: list[str] = []

    def run(self, request: TestRequest, echo: Echo) -> RawOutcome:
        itype = self.base.instance_type or ""
        if catalog.lookup(itype).accelerator != catalog.GPU:
            raise UsageError(f"the sweep on EKS runs nccl-tests on GPU nodes; {itype} is not a GPU type")
        hosts = sweep_nodes(self.client, itype, request.node_count)
        names = [n for n, _ in hosts]
        label = dict(hosts)
        ctx = resolve(replace(self.base, nodes=2))
        size = sweep.default_size(ctx["transport"], False)
        rounds = sweep.schedule(names)
        echo(f"sweep: {len(names)} x {itype}, {sum(len(r) for r in rounds)} pair(s) in {len(rounds)} round(s), "
             f"all_reduce of {size} B per pair, transport {ctx['transport']}, within {request.timeout_s}s")
        results: list[sweep.PairResult] = []
        start = self.clock()
        with tempfile.TemporaryDirectory(prefix="hpq-sweep-") as logs:
            for rno, pairs in enumerate(rounds, 1):
                echo(f"# round {rno}/{len(rounds)}: " + ", ".join(f"{a} + {b}" for a, b in pairs))
                for i, pair in enumerate(pairs):
                    left = request.timeout_s - (self.clock() - start)
                    if left <= 0 or results and left < min(PAIR_TIMEOUT_S, nccl_sweep.MIN_ROUND_S):
                        results.append(sweep.PairResult(rno, pair, sweep.SKIPPED, note="time budget spent"))
                        continue
                    req = replace(self.base, nodes=2, hosts=(label[pair[0]], label[pair[1]]), message_bytes=size,
                                  name=f"{self.name}-{rno}-{i}")
                    res = self._pair(rno, pair, req, min(PAIR_TIMEOUT_S, left), os.path.join(logs, f"{rno}-{i}.log"),
                                     echo)
                    results.append(res)
                    summary = f"{sweep.fmt_gbps(res.busbw_gbps or 0.0)} GB/s" if res.status == sweep.OK else (
                        f"{res.status.upper()}: {res.note}")
                    echo(f"#   {pair[0]} + {pair[1]}: {summary}")
        extra = {"command": f"mpijob/{self.name}-*", "mode": "nccl-tests", "launcher": "eks",
                 "instance_type": itype, "transport": ctx["transport"], "processes_per_node": ctx["gpus"]}
        doc = sweep.build_report(names, results, len(rounds), size, extra,
                                 expect_efa=catalog.lookup(itype).has_efa, budget_flag="--timeout")
        # What to do with a slow node here: keep pods off it (validation/eks.EksBackend.drain_command).
        doc["actions"] = {n: [f"kubectl cordon {n}"] for n in doc["slow_nodes"]}  # type: ignore[union-attr]
        code = int(doc["exit_code"])  # type: ignore[call-overload]
        return RawOutcome(code, outcome.dumps(doc, indent=2, sort_keys=True), command=f"mpijob/{self.name}-*",
                          state="Succeeded" if code == 0 else "Failed")

    def _pair(self, rno: int, pair: sweep.Pair, req: RenderRequest, timeout_s: float, log_path: str,
              echo: Echo) -> sweep.PairResult:
        plan = jobs.plan_for("nccl-test", render_objects(req))
        self.running = jobs.Runner(self.client, plan, echo=echo, poll_s=self.poll_s, timeout_s=timeout_s)
        t0 = self.clock()
        try:
            got = self.running.run()
        except OperationFailed as exc:  # a pod stuck (unschedulable on its node, image not pulled): no run
            got = jobs.Outcome("Failed", str(exc), "")
        finally:
            self._done()
        seconds = round(self.clock() - t0, 2)
        if got.state == "TimedOut":
            status, code = sweep.TIMEOUT, outcome.EXIT_FAIL
        else:
            status, code = sweep.OK, 0 if got.state == "Succeeded" else outcome.EXIT_FAIL
        res = sweep.PairResult(rno, pair, status, seconds=seconds, exit_status=code, log=f"mpijob/{plan.name}")
        if code == 0 and not got.log.strip():
            res.status, res.note = sweep.NO_LOG, "the job succeeded; its launcher left no log"
            return res
        with open(log_path, "w", encoding="utf-8") as f:
            f.write(got.log)
        res = nccl_sweep.judge_pair(res, log_path)
        if status == sweep.TIMEOUT:
            res.note = f"no result within {timeout_s:.0f} s"
        elif code:
            res.note = f"job {got.state}" + (f": {got.message}" if got.message else "") + (
                "" if res.busbw_gbps is not None else ", no result rows")
        return res

    def _done(self) -> None:
        runner, self.running = self.running, None
        if runner is None:
            return
        if self.keep:
            self.kept.append(runner.plan.name)
            return
        runner.cleanup()

    def cleanup(self, echo: Echo) -> None:
        """Delete the pair job still running (Ctrl-C, an error); say which jobs --keep left."""
        if self.running is not None and not self.keep:
            echo("cleaning up")
        self._done()
        if self.kept:
            echo(f"--keep: leaving MPIJob(s) {', '.join(self.kept)} in namespace {self.base.namespace}")
            self.kept = []
