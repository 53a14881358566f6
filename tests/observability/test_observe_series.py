"""``hpq observe --check``'s series check (hpq.observability.series_check, hpq.aws.amp) against real daemons.

The slow test runs the whole path a node's metrics take, with the real programs where they run here: Debian's
node_exporter reading hpq's textfile directory (hpq's results and the Slurm writer's file), Debian's Prometheus
in agent mode with **hpq's own agent configuration** (lifecycle/observability.agent_config: ``cluster`` external
label, ``instance`` relabelled, ``sigv4`` remote write; only the URL pointed at the stand-in), a stand-in for the
AMP workspace that checks SigV4 on every request (hpq/standins/amp.py) in front of a real
Prometheus server with its remote-write receiver, and the check querying it with SigV4 through hpq.aws.amp.
Debian's Prometheus does not sign (its 2.42.0+ds agent, given credentials and the ``sigv4`` block, sends remote
writes with no Authorization header, seen here; the release binary hpq pins signs), so node A's writes pass through a signing relay in this test
(botocore's SigV4 over the agent's own request) standing in for that part of the agent.
Broken twins in the same run: node B's agent writes unsigned (refused by the workspace's SigV4 check: the check
names it silent), a query signed with a wrong secret (INCONCLUSIVE, never PASS). The fast tests feed the check
answers in the Prometheus API's documented vector format.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import boto3
import pytest

from hpq.aws import amp
from hpq.lifecycle import observability
from hpq.observability import series_check
from hpq.scripts import result_metrics, slurm_metrics
from hpq.standins import amp as amp_standin
from tests.observability.test_result_metrics import nccl_result
from tests.support import free_ports, stop_process, wait_until_ready

KEYS = {"AKIAHPQTESTNODE00001": "node-secret-0000000000000000000000000000"}
REGION = "us-west-2"
URL = f"https://aps-workspaces.{REGION}.amazonaws.com/workspaces/ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f/api/v1/remote_write"


def vector(rows: list[dict]) -> list[dict]:
    return [{"metric": labels, "value": [1700000000.0, str(v)]} for labels, v in rows]


def fake_workspace(instances_by_metric: dict[str, list[str]], up: dict[tuple[str, str], float],
                   counts: dict[tuple[str, str], float] | None = None,
                   writer_up: dict[tuple[str, str], float] | None = None,
                   ages: dict[tuple[str, str], float] | None = None):
    """Answers as Prometheus would for the check's queries (documented vector shape), from tables: which
    instances have each metric (``counts`` (metric, instance): how many series, else 1), the writers' up series
    ((metric, instance): value, default 1 wherever a writer's series are) and the textfiles' ages ((instance,
    file): seconds, default 30)."""
    counts, writer_up, ages = counts or {}, writer_up or {}, ages or {}

    def query(promql: str) -> list[dict]:
        if promql.startswith("up{"):
            return vector([({"instance": i, "job": j, "cluster": "c1"}, v) for (i, j), v in up.items()])
        if promql.startswith("time() - node_textfile_mtime_seconds"):
            files = {(i, w[2]) for w in series_check.WRITERS.values() for m in w[3] for i in
                     instances_by_metric.get(m, [])}
            rows = {**{f: 30.0 for f in files}, **ages}
            return vector([({"instance": i, "file": f"/var/lib/node_exporter/hpq/{f}"}, a) for (i, f), a in rows.items()])
        if promql.startswith("hpq_") and promql.split("{")[0].endswith("_metrics_up"):
            metric = promql.split("{")[0]
            kind = next(k for k, w in series_check.WRITERS.items() if w[1] == metric)
            where = {i for m in series_check.WRITERS[kind][3] for i in instances_by_metric.get(m, [])}
            rows = {**{(metric, i): 1.0 for i in where}, **{k: v for k, v in writer_up.items() if k[0] == metric}}
            return vector([({"instance": i, "job": "node_exporter"}, v) for (_, i), v in rows.items()])
        metric = promql.split("(")[2].split("{")[0]
        return vector([({"instance": i, "job": "node_exporter"}, counts.get((metric, i), 1))
                       for i in instances_by_metric.get(metric, [])])

    return query


def test_names_what_is_missing_and_why():
    everything = {m: ["ip-a"] for m in series_check.NODE_SERIES} | {
        m: ["ip-ctl"] for m in series_check.CLUSTER_SERIES
    }
    up = {("ip-a", "node_exporter"): 1}
    nodes = [series_check.Node("ip-a", gpu=True, efa=True)]
    # a GPU and EFA worker owes hpq's GPU and EFA writers' series too: without them, each is named with its writer
    res = series_check.check("c1", nodes, fake_workspace(everything, up))
    missing = res["nodes"][0]["missing"]
    assert res["verdict"] == "FAIL" and set(missing) == set(series_check.GPU_SERIES) | set(series_check.EFA_SERIES)
    assert "hpq-gpu-metrics.service wrote no DCGM_FI_DEV_XID_ERRORS" in missing["DCGM_FI_DEV_XID_ERRORS"]
    assert "hpq-efa-metrics.service" in missing["node_amazonefa_info"]
    everything |= {m: ["ip-a"] for m in [*series_check.GPU_SERIES, *series_check.EFA_SERIES]}
    res = series_check.check("c1", nodes, fake_workspace(everything, up))
    assert res["verdict"] == "PASS" and res["nodes"][0]["missing"] == {}
    assert len(res["nodes"][0]["expected"]) == 15
    # the sick-link counters are shown, never required: a driver without them (AWS's own sample) still passes
    assert res["nodes"][0]["optional"] == {m: False for m in series_check.EFA_SICK_LINK}
    assert "not shown by this node's EFA driver" in res["nodes"][0]["not_collected"][0]
    with_counters = everything | {m: ["ip-a"] for m in series_check.EFA_SICK_LINK}
    res = series_check.check("c1", nodes, fake_workspace(with_counters, up))
    assert res["verdict"] == "PASS" and all(res["nodes"][0]["optional"].values())
    assert res["nodes"][0]["not_collected"] == []
    trn = series_check.node_for("ip-t", "i-1", "ml.trn1.32xlarge", "g")  # neuron-monitor: said, never counted
    assert trn.neuron and trn.efa and not trn.gpu
    trn_up = {("ip-t", "node_exporter"): 1}
    devices = {("node_amazonefa_info", "ip-t"): trn.efa_count}  # one info series per EFA device of the type
    res = series_check.check("c1", [trn], fake_workspace({m: ["ip-t"] for m in everything}, trn_up, devices))
    assert res["verdict"] == "FAIL" and set(res["nodes"][0]["missing"]) == set(series_check.NEURON_SERIES)
    assert "hpq-neuron-metrics.service" in res["nodes"][0]["missing"]["neuron_hardware_info"]
    everything |= {m: ["ip-t"] for m in series_check.NEURON_SERIES}
    res = series_check.check("c1", [trn], fake_workspace({m: ["ip-t"] for m in everything}, trn_up, devices))
    assert res["verdict"] == "PASS" and "only while a Neuron application runs" in res["nodes"][0]["not_collected"][-1]
    # broken twin: 1 of its 8 EFA devices reports: the info series exists, the node is still not whole
    res = series_check.check("c1", [trn], fake_workspace({m: ["ip-t"] for m in everything}, trn_up))
    assert res["verdict"] == "FAIL" and list(res["nodes"][0]["missing"]) == ["node_amazonefa_info"]
    assert res["nodes"][0]["missing"]["node_amazonefa_info"].startswith("1 of the 8 EFA devices of ml.trn1.32xlarge")
    # Broken twins: a silent node; an exporter that is down; one metric missing while the exporter answers.
    res = series_check.check("c1", nodes + [series_check.Node("ip-b")], fake_workspace(everything, up))
    assert res["verdict"] == "FAIL"
    assert all("nothing from this node" in c for c in res["nodes"][1]["missing"].values())
    res = series_check.check("c1", nodes, fake_workspace({}, {("ip-a", "node_exporter"): 0}))
    assert all("is down" in c for c in res["nodes"][0]["missing"].values())
    partial = dict(everything, node_filesystem_avail_bytes=[])
    res = series_check.check("c1", nodes, fake_workspace(partial, up))
    assert list(res["nodes"][0]["missing"]) == ["node_filesystem_avail_bytes"]
    assert "answers but does not emit" in res["nodes"][0]["missing"]["node_filesystem_avail_bytes"]


def test_a_writer_that_failed_or_stopped_is_not_evidence():
    """A p5's GPU series are all there, but: fewer GPUs than the type has; the writer's up series says 0 (its
    tool failed: the file holds what it could write); its file is 10 minutes old (node_exporter serves a dead
    writer's last file forever). Each makes its series missing with the reason; fresh and up, they pass."""
    p5 = series_check.node_for("ip-p", "i-2", "ml.p5.48xlarge", "g")
    assert (p5.gpu_count, p5.efa_count) == (8, 32)
    have = {m: ["ip-p"] for m in [*series_check.NODE_SERIES, *series_check.GPU_SERIES, *series_check.EFA_SERIES]}
    have |= {m: ["ip-ctl"] for m in series_check.CLUSTER_SERIES}
    up = {("ip-p", "node_exporter"): 1}
    whole = {("DCGM_FI_DEV_GPU_UTIL", "ip-p"): 8, ("node_amazonefa_info", "ip-p"): 32}
    res = series_check.check("c1", [p5], fake_workspace(have, up, whole))
    assert res["verdict"] == "PASS", res["nodes"][0]["missing"]
    res = series_check.check("c1", [p5], fake_workspace(have, up, {**whole, ("DCGM_FI_DEV_GPU_UTIL", "ip-p"): 7}))
    assert res["verdict"] == "FAIL" and res["nodes"][0]["missing"]["DCGM_FI_DEV_GPU_UTIL"].startswith(
        "7 of the 8 GPUs of ml.p5.48xlarge")
    res = series_check.check("c1", [p5], fake_workspace(have, up, whole, writer_up={("hpq_gpu_metrics_up", "ip-p"): 0}))
    missing = res["nodes"][0]["missing"]
    assert res["verdict"] == "FAIL" and set(missing) == set(series_check.GPU_SERIES)
    assert "reports hpq_gpu_metrics_up 0" in missing["DCGM_FI_DEV_POWER_USAGE"]
    res = series_check.check("c1", [p5], fake_workspace(have, up, whole, ages={("ip-p", "hpq_efa.prom"): 600.0}))
    missing = res["nodes"][0]["missing"]
    assert res["verdict"] == "FAIL" and set(missing) == set(series_check.EFA_SERIES)
    assert "hpq_efa.prom was last written 600s ago" in missing["node_amazonefa_rx_bytes"]


def test_no_answer_or_no_nodes_is_inconclusive_never_pass():
    def refused(_):
        raise series_check.QueryFailed("HTTP 403")

    assert series_check.check("c1", [series_check.Node("ip-a")], refused)["verdict"] == "INCONCLUSIVE"
    assert series_check.check("c1", [], fake_workspace({}, {}))["verdict"] == "INCONCLUSIVE"


def test_cluster_name_is_escaped_in_promql():
    assert series_check.promql("up", 'a"b\\c') == 'count by (instance, job) (up{cluster="a\\"b\\\\c"})'
    assert series_check.instance_label("ip-10-1-0-5.us-west-2.compute.internal") == "ip-10-1-0-5"


def test_signed_query_verifies_and_a_plus_encoded_twin_does_not():
    """hpq.aws.amp's percent-encoding is what SigV4 canonicalises; the '+' form botocore would sign as written
    does not verify (the stand-in re-encodes as AWS does)."""
    import urllib.parse

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    session = boto3.Session(
        aws_access_key_id=next(iter(KEYS)), aws_secret_access_key=next(iter(KEYS.values()))
    )
    base = "http://127.0.0.1:1/workspaces/ws-x/api/v1/query"
    q = 'count by (instance, job) (up{cluster="c 1"})'
    url = base + "?" + urllib.parse.urlencode({"query": q}, quote_via=urllib.parse.quote, safe="-_.~")
    headers = amp.signed_headers(session, url, REGION)
    raw = url.split("127.0.0.1:1", 1)[1]
    assert amp_standin.verify("GET", raw, dict(headers, Host="127.0.0.1:1"), b"", KEYS, REGION) == ""
    plus = base + "?" + urllib.parse.urlencode({"query": q})
    req = AWSRequest(method="GET", url=plus)
    SigV4Auth(Credentials(*next(iter(KEYS.items()))), "aps", REGION).add_auth(req)
    reason = amp_standin.verify(
        "GET",
        plus.split("127.0.0.1:1", 1)[1],
        dict(req.headers.items(), Host="127.0.0.1:1"),
        b"",
        KEYS,
        REGION,
    )
    assert "does not match" in reason
    wrong = amp_standin.verify("GET", raw, dict(headers, Host="127.0.0.1:1"), b"", KEYS, "eu-west-1")
    assert "scoped" in wrong


@pytest.mark.slow
def test_series_reach_the_workspace_and_the_check_names_the_silent_node(tmp_path):
    for tool in ("prometheus-node-exporter", "prometheus"):
        assert shutil.which(tool), f"{tool} not found: dev/test.sh installs Debian's package"
    textfile = tmp_path / "textfile"
    assert (
        result_metrics.main(
            [str(nccl_result(tmp_path)), "--cluster", "c1", "--node", "ip-a", "--textfile-dir", str(textfile)]
        )
        == 0
    )
    slurm_answers = {
        tuple(slurm_metrics.COMMANDS["partitions"]): "dev\n",
        tuple(slurm_metrics.nodes_command("dev")): "1|idle|(null)\n",
        tuple(slurm_metrics.COMMANDS["total"]): "NodeName=ip-a\n",
        tuple(slurm_metrics.COMMANDS["node"]): "ip-a 0 1000 0/2/0/2 idle dev*\n",
        tuple(slurm_metrics.COMMANDS["cpus"]): "0/2/0/2\n",
        tuple(slurm_metrics.COMMANDS["queue"]): "",
    }
    slurm_metrics.write_once(str(textfile), lambda argv: slurm_answers.get(tuple(argv)))
    ne_port, server_port, agent_a, agent_b = free_ports(4)
    procs: list[subprocess.Popen] = []
    ws = None
    relays: list = []

    def start(argv, name):
        procs.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / f"{name}.log").open("w"),
                env={
                    "PATH": "/usr/bin:/bin",
                    "HOME": str(tmp_path),
                    "AWS_ACCESS_KEY_ID": next(iter(KEYS)),
                    "AWS_SECRET_ACCESS_KEY": secrets[name],
                },
            )
        )
        return procs[-1]

    # The agents need credentials to load a sigv4 block at all (Debian's build refuses the config without them).
    secrets = {
        "node_exporter": "",
        "server": "",
        "agent-a": KEYS[next(iter(KEYS))],
        "agent-b": KEYS[next(iter(KEYS))],
    }
    try:
        start(
            [
                "prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{ne_port}",
                f"--collector.textfile.directory={textfile}",
            ],
            "node_exporter",
        )
        (tmp_path / "server.yml").write_text("{}")
        server = start(
            [
                "prometheus",
                f"--config.file={tmp_path / 'server.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{server_port}",
                "--web.enable-remote-write-receiver",
            ],
            "server",
        )
        wait_until_ready(
            lambda: _ok(f"http://127.0.0.1:{server_port}/-/ready"), server, "prometheus", timeout=60
        )
        ws = amp_standin.Workspace(f"http://127.0.0.1:{server_port}", KEYS, REGION)
        relay = amp_standin.SigningRelay(ws.origin, next(iter(KEYS.items())), REGION)
        relays.append(relay)
        started = time.time()
        for name, port, instance in (("agent-a", agent_a, "ip-a"), ("agent-b", agent_b, "ip-b")):
            config = json.loads(observability.agent_config("c1", instance, URL, {"node_exporter": 9100}))
            config["scrape_configs"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{ne_port}"]
            config["global"]["scrape_interval"] = "1s"
            target = (
                relay.url + "/workspaces/" + ws.workspace_id if name == "agent-a" else ws.url
            )  # A signed, B not
            config["remote_write"][0]["url"] = target + "/api/v1/remote_write"
            (tmp_path / f"{name}.yml").write_text(json.dumps(config))
            start(
                [
                    "prometheus",
                    "--enable-feature=agent",
                    f"--config.file={tmp_path / f'{name}.yml'}",
                    f"--storage.agent.path={tmp_path / name}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                name,
            )
        session = boto3.Session(
            aws_access_key_id=next(iter(KEYS)), aws_secret_access_key=KEYS[next(iter(KEYS))]
        )
        query_url = ws.url + "/api/v1/query"

        def query(q):
            try:
                return amp.instant_query(session, query_url, REGION, q)
            except amp.QueryError as exc:
                raise series_check.QueryFailed(str(exc)) from None

        def unsigned_write_refused() -> bool:
            return any(
                p.endswith("/remote_write") and "Missing Authentication Token" in r for _, p, r in ws.refused
            )

        nodes = [series_check.Node("ip-a"), series_check.Node("ip-b")]
        res: dict = {}
        deadline = started + 60
        # Wait for both: ip-a's series and ip-b's first (refused) write, which a loaded host can delay past A's.
        while time.time() < deadline:
            res = series_check.check("c1", nodes, query)
            a_complete = not res["nodes"][0]["missing"] and all(
                v["present"] for v in res["cluster_series"].values()
            )
            if a_complete and unsigned_write_refused():
                break
            time.sleep(1)
        elapsed = time.time() - started
        (tmp_path / "check.json").write_text(json.dumps(res, indent=1))
        a, b = res["nodes"]
        assert a["missing"] == {}, (
            ws.accepted[:3],
            ws.refused[:3],
            (tmp_path / "server.log").read_text()[-1500:],
        )
        assert all(v["present"] for v in res["cluster_series"].values()), res
        assert elapsed < 60
        # The unsigned agent's writes were refused by the SigV4 check, so ip-b is named silent.
        assert res["verdict"] == "FAIL"
        assert b["present"] == [] and all("nothing from this node" in c for c in b["missing"].values())
        assert unsigned_write_refused(), ws.refused[:3]
        # Only the healthy node: PASS. A query with a wrong secret: refused, INCONCLUSIVE.
        assert series_check.check("c1", nodes[:1], query)["verdict"] == "PASS"
        bad = boto3.Session(aws_access_key_id=next(iter(KEYS)), aws_secret_access_key="nope")

        def bad_query(q):
            try:
                return amp.instant_query(bad, query_url, REGION, q)
            except amp.QueryError as exc:
                raise series_check.QueryFailed(str(exc)) from None

        refused = series_check.check("c1", nodes[:1], bad_query)
        assert refused["verdict"] == "INCONCLUSIVE" and "HTTP 403" in refused["reason"], refused
        print(f"series check PASS for ip-a {elapsed:.1f} s after the agents started")
    finally:
        for r in relays:
            r.close()
        if ws:
            ws.close()
        for proc in reversed(procs):
            stop_process(proc)


def _ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
