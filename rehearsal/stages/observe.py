"""Stages ``amp`` and ``observe`` (``hpq rehearse --observability``): the metrics path, node to dashboard.

``amp`` (before the deploy) starts what stands in for AWS on that path and hands the deploy and the nodes what they
need; everything on the nodes is hpq's own, unchanged:

- the AMP workspace (hpq.standins.amp): Debian's Prometheus with its remote-write receiver behind an endpoint that
  checks SigV4 on every request, realized as the Observability stack's ``AWS::APS::Workspace`` (its ARN, id and
  PrometheusEndpoint in the form AWS returns), so the root stack's outputs and hpq-cluster.json's
  ``prometheus_remote_write_url`` are the real templates' own;
- on the bridge, AMP's host name (the nodes' /etc/hosts maps it to the gateway, as the VPC's DNS resolves it)
  served over TLS by a certificate the nodes' CA bundle trusts; behind it the signing relay that signs the writes
  of Debian's Prometheus agent, which lacks the release binary's SigV4 (hpq.standins.amp.SigningRelay);
- a mirror of the two release tarballs the lifecycle downloads (HPQ_OBSERVABILITY_MIRROR, as a site without
  GitHub access sets it), built from Debian's node_exporter and Prometheus binaries under the release tarballs'
  layout and pinned by their SHA-256 (HPQ_OBSERVABILITY_SHA256, the documented override; the check still runs).
  The versions are Debian's (node_exporter 1.5.0, Prometheus 2.42), not the pinned 1.9.1 and 3.2.1.

The lifecycle's observability step then installs node_exporter and the agent on every node and the Slurm writer
on the controller (lifecycle/observability.py). ``observe`` starts right after Slurm is up: a poller asks the
workspace, as ``hpq observe --check`` does (hpq.observability.series_check, signed queries), for every node's
expected series until each node has at least 95% of them, and records when; at the end of the rehearsal (the
validation results published by then) it runs every dashboard panel whose metrics exist in the workspace
(hpq.observability.dashboards) and sends one unsigned query, which must be refused.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import shutil
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from hpq.aws import amp
from hpq.lifecycle.observability import ARTIFACTS, GITHUB, machine_arch
from hpq.observability import dashboards, series_check
from hpq.rehearsal import aws
from hpq.rehearsal.plan import ACCOUNT, REGION, Plan
from hpq.rehearsal.stages.base import Failure, Say
from hpq.rehearsal.teardown import TeardownStack
from hpq.standins import imds
from hpq.standins.amp import AmpStandin, amp_host
from hpq.standins.http_server import serve

# Debian's packages (dev/test.sh installs them) standing in for the two release tarballs.
DEBIAN_BINARIES = {"node_exporter": "/usr/bin/prometheus-node-exporter", "prometheus": "/usr/bin/prometheus"}
# The nodes' role credentials, as their IMDS hands them out (key id, secret, session token).
NODE_KEY = (imds.ROLE_ACCESS_KEY_ID, imds.ROLE_SECRET_ACCESS_KEY, imds.ROLE_SESSION_TOKEN)
QUERY_KEY = ("testing", "testing")  # this process's credentials in the emulated account (rehearsal/aws.py)
# Panels the rehearsal cannot draw, and why (reported in the JSON; everything else owed data must draw it).
EXCUSED_PANELS = {
    "/fsx free": "node_exporter reads the mount table of PID 1 (/proc/1/mounts); the rehearsal's nodes share the "
                 "host's PID namespace, so PID 1 is the host's init, whose table has no node's /fsx",
}
SHARE_REQUIRED = 0.95
WITHIN_S = 60.0
POLL_S = 2.0


@dataclass
class Observability:
    amp: AmpStandin
    mirror_url: str
    node_env: dict[str, str]
    ca_pem: str
    host_entry: tuple[str, str]  # (gateway, AMP's host name) for the nodes' /etc/hosts
    poller: SeriesPoller | None = None


# Where Debian's Prometheus 2.42 differs from the pinned 3.2.1 release on what hpq's unit needs, the mirrored
# "prometheus" is a shim in front of Debian's binary that bridges exactly that, nothing else:
# - 3.0 spells agent mode ``--agent`` (hpq's unit); 2.42 ``--enable-feature=agent`` (Prometheus CHANGELOG 3.0.0);
# - 2.42's AWS SDK asks the node's IMDS for the role's credentials without an IMDSv2 token (HyperPod's IMDS
#   requires one: 401), so the shim reads them with a token, as the release's SDK does, into the environment.
#   (Its ``sigv4`` block then still sends no signature: hpq.standins.amp.SigningRelay signs on its way out.)
AGENT_FLAG_SHIM = """#!/bin/sh
# hpq rehearse: Debian's Prometheus 2.42 standing in for the 3.x release (see rehearsal/stages/observe.py)
eval "$(python3 - <<'PY'
import json, urllib.request as u
base = "http://169.254.169.254/latest/"
try:
    tok = u.urlopen(u.Request(base + "api/token", method="PUT",
                              headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"}), timeout=5).read().decode()
    h = {"X-aws-ec2-metadata-token": tok}
    get = lambda p: u.urlopen(u.Request(base + "meta-data/" + p, headers=h), timeout=5).read().decode()
    role = get("iam/security-credentials/").split()[0]
    c = json.loads(get("iam/security-credentials/" + role))
    print("export AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' AWS_SESSION_TOKEN='%s'"
          % (c["AccessKeyId"], c["SecretAccessKey"], c["Token"]))
except Exception:
    pass
PY
)"
for a in "$@"; do
    shift
    if [ "$a" = "--agent" ]; then set -- "$@" --enable-feature=agent; else set -- "$@" "$a"; fi
done
exec __BINARY__ "$@"
"""


def _tarball(member: str, data: bytes) -> bytes:
    """A gzipped tar holding ``data`` as the executable ``member`` (the release tarballs' layout), bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_mirror(root: str, arch: str = "amd64") -> dict[str, str]:
    """The release tarballs under ``root`` at their GitHub paths; {artifact: sha256}."""
    pins = {}
    for name, binary in DEBIAN_BINARIES.items():
        art = ARTIFACTS[name]
        path = art.url_for(arch)[len(GITHUB):]
        if name == "prometheus":
            content = AGENT_FLAG_SHIM.replace("__BINARY__", binary).encode()
        else:
            with open(binary, "rb") as fh:
                content = fh.read()
        data = _tarball(art.member(arch), content)
        dest = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(data)
        pins[name] = hashlib.sha256(data).hexdigest()
    return pins


def start(plan: Plan, workdir: str, stack: TeardownStack, say: Say) -> Observability:
    missing = [b for b in (*DEBIAN_BINARIES.values(),) if not os.access(b, os.X_OK)]
    if missing:
        raise Failure("amp", "--observability needs Debian's prometheus and prometheus-node-exporter packages "
                             f"(missing {', '.join(missing)}): apt-get install prometheus prometheus-node-exporter")
    base = os.path.join(workdir, "observability")
    os.makedirs(base, exist_ok=True)
    mirror_root = os.path.join(base, "mirror")
    pins = build_mirror(mirror_root, machine_arch())
    handler = functools.partial(_QuietFiles, directory=mirror_root)
    mirror = serve(handler, plan.gateway)

    def stop_mirror() -> None:
        mirror.shutdown()
        mirror.server_close()

    stack.push("artifact mirror", stop_mirror)
    mirror_url = f"http://{plan.gateway}:{mirror.server_address[1]}"
    store = os.path.join(base, "amp")
    os.makedirs(store, exist_ok=True)
    workspace = AmpStandin(REGION, ACCOUNT, plan.gateway, dict([NODE_KEY[:2], QUERY_KEY]), workdir=store,
                           relay_key=NODE_KEY)
    try:
        workspace.start()
    except (RuntimeError, OSError) as exc:
        workspace.stop()
        raise Failure("amp", f"the AMP stand-in did not start: {exc}") from None
    stack.push("AMP stand-in", workspace.stop)
    host = amp_host(REGION)
    say("amp", f"workspace {workspace.workspace_id}: Prometheus {workspace.prometheus.url if workspace.prometheus else ''}"
               f" behind a SigV4 check; nodes write to https://{host} ({plan.gateway}:443, the agent's signing "
               f"relay); release tarballs mirrored at {mirror_url} (Debian's binaries, pinned by SHA-256)")
    env = {"HPQ_OBSERVABILITY_MIRROR": mirror_url,
           "HPQ_OBSERVABILITY_SHA256": ",".join(f"{k}={v}" for k, v in sorted(pins.items()))}
    return Observability(workspace, mirror_url, env, workspace.ca_pem, (plan.gateway, host))


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def realize_workspace(obs: Observability) -> Any:
    """The ``AWS::APS::Workspace`` realizer: the stand-in's attributes in AWS's forms (Ref is the ARN, the
    registry schema's primary identifier; WorkspaceId ``ws-...``; PrometheusEndpoint ending in ``/``)."""

    def realize(props: dict[str, Any]) -> dict[str, Any]:
        a = obs.amp
        return {"Ref": a.arn, "Arn": a.arn, "WorkspaceId": a.workspace_id, "PrometheusEndpoint": a.endpoint}

    return realize


def trust_on_node(node: Any, obs: Observability) -> None:
    """The node trusts the stand-in's CA as it trusts AWS's (the system bundle Go's TLS reads first)."""
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    try:
        with open(bundle) as fh:
            system = fh.read()
    except OSError:
        system = ""
    node.write(bundle, system + ("" if system.endswith("\n") or not system else "\n") + obs.ca_pem, 0o644)


# ------------------------------------------------------------------------------------------------ the checks


def query_function(obs: Observability) -> Any:
    session = aws.session(REGION)  # this process's credentials in the emulated account: QUERY_KEY
    url = obs.amp.query_base + "/api/v1/query"

    def query(promql: str) -> list[dict[str, Any]]:
        try:
            return amp.instant_query(session, url, REGION, promql)
        except amp.QueryError as exc:
            raise series_check.QueryFailed(str(exc)) from None

    return query


def expected_nodes(plan: Plan) -> list[series_check.Node]:
    out = []
    for n in plan.nodes:
        out.append(series_check.node_for(n.hostname, n.instance_id, n.instance_type, n.group))
    return out


def shares(res: dict[str, Any]) -> dict[str, float]:
    """instance -> share of its expected series present (0 when it expects none: nothing proves it)."""
    return {n["instance"]: (len(n["present"]) / len(n["expected"]) if n["expected"] else 0.0)
            for n in res.get("nodes", [])}


def enough(res: dict[str, Any]) -> bool:
    s = shares(res)
    return bool(s) and min(s.values()) >= SHARE_REQUIRED and all(
        v.get("present") for v in res.get("cluster_series", {}).values())


@dataclass
class SeriesPoller:
    """Asks the workspace every ``POLL_S`` until every node has 95% of its series, from ``t0`` (Slurm idle)."""

    plan: Plan
    obs: Observability
    t0: float
    limit_s: float = 300.0
    last: dict[str, Any] = field(default_factory=dict)
    reached_after_s: float | None = None
    error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SeriesPoller:
        self._thread = threading.Thread(target=self._run, name="hpq-observe-poller", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        query = query_function(self.obs)
        nodes = expected_nodes(self.plan)
        while not self._stop.is_set() and time.time() - self.t0 < self.limit_s:
            try:
                self.last = series_check.check(self.plan.cluster_name, nodes, query)
            except Exception as exc:  # noqa: BLE001 - recorded, judged INCONCLUSIVE by the stage
                self.error = f"{type(exc).__name__}: {exc}"
            if self.last and enough(self.last):
                self.reached_after_s = round(time.time() - self.t0, 1)
                return
            self._stop.wait(POLL_S)

    def stop(self, wait_until: float | None = None) -> None:
        """Stop asking (first, with ``wait_until``, let it reach the 95% until that time)."""
        if self._thread is not None and wait_until is not None:
            self._thread.join(timeout=max(0.0, wait_until - time.time()))
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


def start_polling(plan: Plan, obs: Observability, stack: TeardownStack, say: Say) -> None:
    obs.poller = SeriesPoller(plan, obs, time.time()).start()
    stack.push("series poller", obs.poller.stop)
    say("observe", f"Slurm is up: asking the workspace for every node's series (each node must reach "
                   f"{SHARE_REQUIRED:.0%} within {WITHIN_S:.0f}s)")


def unsigned_refused(obs: Observability) -> bool:
    """An unsigned query must be refused (403) by the workspace's SigV4 check: the check is not decoration."""
    url = obs.amp.query_base + "/api/v1/query?query=up"
    try:
        with urllib.request.urlopen(url, timeout=10):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 403
    except OSError:
        return False


def two_scrapes(query: Any, plan: Plan, say: Say, since: float, limit_s: float = 80.0) -> None:
    """Wait (bounded) until every node's agent has scraped twice within the rate window (a rate() panel draws
    from two samples, so on any cluster it is empty for its first scrape interval, 30 s) and once after ``since``
    (the validation results were written to the nodes' textfile directory before then, so that scrape carried
    them to the workspace); judged after that."""
    sel = f'up{{cluster="{series_check.escape(plan.cluster_name)}", job="node_exporter"}}'
    twice, after = f"min(count_over_time({sel}[{dashboards.RATE_INTERVAL}]))", f"min(timestamp({sel}))"
    deadline = time.time() + limit_s
    while time.time() < deadline:
        try:
            got, last = query(twice), query(after)
            if got and float(got[0]["value"][1]) >= 2 and last and float(last[0]["value"][1]) > since:
                return
        except (series_check.QueryFailed, LookupError, TypeError, ValueError):
            pass
        time.sleep(POLL_S)
    say("observe", f"some node's agent has not scraped twice, or not since the results were written, in "
                   f"{limit_s:.0f}s: panels may be empty")


def judge(plan: Plan, obs: Observability, say: Say, wait_s: float = WITHIN_S) -> dict[str, Any]:
    """The ``observe`` object; raises Failure unless PASS (positive evidence for each part)."""
    since = time.time()  # every result the rehearsal published is on the nodes by now
    poller = obs.poller
    if poller is not None:  # validation may have been skipped: wait out the 60 s from Slurm idle, no longer
        poller.stop(wait_until=poller.t0 + wait_s)
    query = query_function(obs)
    if poller is None or poller.reached_after_s is not None:  # a silent cluster has nothing to wait for
        two_scrapes(query, plan, say, since)
    out: dict[str, Any] = {"workspace": {"id": obs.amp.workspace_id, "arn": obs.amp.arn,
                                         "remote_write_url": obs.amp.endpoint + "api/v1/remote_write"}}
    try:
        res = series_check.check(plan.cluster_name, expected_nodes(plan), query)
        present = {r["metric"].get("__name__", "") for r in query('group by (__name__) ({__name__=~".+"})')}
        dash = dashboards.check(query, present, plan.cluster_name, EXCUSED_PANELS)
    except series_check.QueryFailed as exc:
        out.update(verdict="INCONCLUSIVE", reason=f"the workspace could not be asked: {exc}")
        raise Failure("observe", out["reason"], found={"observe": out}) from None
    by_host = {n.hostname: n.name for n in plan.nodes}
    node_shares = shares(res)
    out["nodes"] = [{"node": by_host.get(n["instance"], n["instance"]), **n,
                     "share": round(node_shares.get(n["instance"], 0.0), 3)} for n in res["nodes"]]
    out["cluster_series"] = res["cluster_series"]
    out["series"] = {"expected": res.get("expected", 0), "present": res.get("present", 0),
                     "in_workspace": len(present)}
    out["within_s"] = WITHIN_S
    out["reached_after_s"] = poller.reached_after_s if poller else None
    out["dashboards"] = dash
    refused = unsigned_refused(obs)
    relayed = obs.amp.relay.posts if obs.amp.relay else 0
    out["sigv4"] = {"unsigned_query_refused": refused, "signed_writes_relayed": relayed,
                    "refused": len(obs.amp.workspace.refused) if obs.amp.workspace else 0}
    problems = []
    low = sorted((n for n in out["nodes"] if n["share"] < SHARE_REQUIRED), key=lambda n: n["node"])
    if low:
        problems.append("below 95% of the expected series: " + ", ".join(
            f"{n['node']} {n['share']:.0%} (missing {', '.join(sorted(n['missing']))})" for n in low))
    absent = [m for m, v in res["cluster_series"].items() if not v.get("present")]
    if absent:
        problems.append("cluster series missing: " + ", ".join(absent))
    if not low and (out["reached_after_s"] is None or out["reached_after_s"] > WITHIN_S):
        problems.append(f"95% of every node's series only after more than {WITHIN_S:.0f}s of Slurm being idle")
    if dash["without_data"]:
        problems.append("dashboard panels without data: " + "; ".join(dash["without_data"]))
    if not dash["with_data"]:
        problems.append("no dashboard panel drew data")
    if not refused:
        problems.append("an unsigned query was not refused: the SigV4 check did not hold")
    if not relayed:
        problems.append("no remote write reached the workspace through the agent's signing relay")
    out["verdict"] = "FAIL" if problems else "PASS"
    out["reason"] = "; ".join(problems) if problems else (
        f"every node has {min(node_shares.values()):.0%}+ of its series after {out['reached_after_s']}s; "
        f"{dash['with_data']} dashboard panels drew data ({len(dash['empty_healthy'])} problem-only panels empty, "
        f"as on a healthy cluster); unsigned queries refused")
    say("observe", f"{out['verdict']}: {out['reason']}")
    if problems:
        raise Failure("observe", out["reason"], found={"observe": out})
    return out


def copy_store_log(obs: Observability, logdir: str) -> None:
    """The stand-in Prometheus's log beside the rehearsal's logs (a failed run keeps it)."""
    src = os.path.join(obs.amp.workdir, "prometheus.log")
    if os.path.isfile(src):
        shutil.copy(src, os.path.join(logdir, "amp-prometheus.log"))
