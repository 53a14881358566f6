"""A judged test's result as metrics in the stack's AMP workspace, where no node publishes it (EKS).

On Slurm every node program writes its result into node_exporter's textfile directory and the node's agent
sends it (scripts/result_metrics.py). On EKS the tests are Kubernetes jobs and nothing of hpq's runs on the nodes
afterwards, so ``hpq test`` sends the same series itself, once, with a remote write signed by the user's own
credentials (hpq/aws/remote_write.py), to the ``PrometheusRemoteWriteUrl`` output of the hpq stack that created
the cluster. The series are result_metrics' (names, labels, values), plus ``job="hpq-results"`` and ``instance``
= the node, the labels the agent adds on Slurm (on EKS the Kubernetes nodes: the ranks' pods mapped to the nodes
they ran on by the result's ``host_nodes``, the sweep's and the doctor's pinned ones). Nothing here changes the
test's verdict or exit code: a failed write is one line on stderr.
"""

from __future__ import annotations

import time
from typing import Any

from hpq.aws import inventory, remote_write
from hpq.aws.session import client, make_session
from hpq.errors import OperationFailed, UsageError
from hpq.lifecycle.observability import region_of
from hpq.observability.endpoints import OUTPUT_KEYS
from hpq.scripts import result_metrics
from hpq.validation.request import DOCTOR, NANOGPT, NCCL, NCCOM, SWEEP
from hpq.validation.result import TestResult

# validation's test names -> result_metrics' kinds (an EKS job's command is its name, not the node program's)
KINDS = {NCCL: result_metrics.NCCL, NCCOM: result_metrics.NCCOM, SWEEP: result_metrics.SWEEP,
         NANOGPT: result_metrics.NANOGPT, DOCTOR: result_metrics.DOCTOR}
UNNAMED_NODE = "unknown"  # a result that names no host (result_metrics' fallback for the local node)


def series_of(result: TestResult, now: float) -> list[remote_write.Series]:
    """The result's series as remote write wants them: ``__name__`` among the labels, one timestamp."""
    samples = result_metrics.Samples()
    if result.test == DOCTOR:  # one report per node (validation/doctor.py NodeResult), each its node's series
        for node in result.data.get("nodes") or []:
            if isinstance(node, dict) and node.get("node"):
                result_metrics.add_result(samples, node, result.cluster, str(node["node"]), now, result_metrics.DOCTOR)
    else:
        # the evidence over the summary: to_dict() keeps its own ``nodes`` (a count) where the sweep's is its table
        doc = dict(result.to_dict(), **result.data)
        result_metrics.add_result(samples, doc, result.cluster, UNNAMED_NODE, now, KINDS[result.test])
    out = []
    for (name, labels), value in sorted(samples.series.items()):
        lab = dict(labels)
        out.append((dict(lab, __name__=name, job="hpq-results", instance=lab["node"]), value, int(now * 1000)))
    return out


def remote_write_url(session: Any, cluster: str) -> tuple[str, str] | None:
    """(stack, PrometheusRemoteWriteUrl) of the hpq stack that created ``cluster``; None when it has none."""
    named = inventory.by_cluster(inventory.hpq_stacks(client(session, "cloudformation"))).get(cluster, [])
    # Two stacks may name one cluster (only one of them created it): the newest that has a workspace.
    for st in sorted(named, key=lambda s: str(s.created or ""), reverse=True):
        url = st.outputs.get(OUTPUT_KEYS["remote_write_url"], "")
        if url:
            return st.stack, url
    return None


def publish(result: TestResult, region: str | None, profile: str | None, session: Any = None) -> str | None:
    """Send ``result``'s series to its stack's workspace; the line to show (None: observability is off, a node
    published it already (every backend but EKS), or the result is not one hpq keeps as metrics)."""
    if result.backend != "eks" or result.test not in KINDS:
        return None
    try:
        session = session or make_session(region, profile)
        where = remote_write_url(session, result.cluster)
        if where is None:
            return None
        stack, url = where
        sent = remote_write.write(session, url, _region(url, session), series_of(result, time.time()))
    except (UsageError, OperationFailed, remote_write.WriteError, result_metrics.ResultError) as exc:
        return f"hpq: note: the result's metrics were not sent to the workspace: {exc}"
    except Exception as exc:  # noqa: BLE001 - the test ran and was judged: its verdict is printed whatever this is
        return f"hpq: note: the result's metrics were not sent to the workspace: {type(exc).__name__}: {exc}"
    return f"hpq: result metrics: {sent} series sent to {stack}'s workspace"


def _region(url: str, session: Any) -> str:
    """The SigV4 region: AMP's, from its endpoint's host; the session's for an endpoint of another shape."""
    try:
        return region_of(url) or session.region_name
    except ValueError:
        return session.region_name
