"""The dashboards' queries against a real Prometheus that scraped a real node_exporter reading hpq's results.

What runs: Debian's prometheus-node-exporter (1.5.0; AWS runs 1.9.1, same collector names for what is
queried) with its textfile collector on the directory scripts/result_metrics.py writes into, and Debian's
Prometheus (2.42) scraping it every second with the labels hpq's collector is to attach (``cluster``, and
``instance`` set to the host name as AWS's OTel template does). Then every query of the cluster-overview and
hpq-results dashboards whose metrics can exist here (node_exporter's, ``up`` and hpq's own) must return data,
with Grafana's variables filled in as a user would. GPU, EFA and Slurm panels need their exporters, which do
not run here: they are checked by name only (tests/observability/test_observability_assets.py). A stand-in for nothing:
both daemons are the real programs; what is not real is the node (this host) and the scrape path (Prometheus
instead of the OpenTelemetry collector, no SigV4).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hpq import observability
from hpq.scripts import result_metrics
from tests.observability.test_observability_assets import dashboard_queries, selected_metrics
from tests.observability.test_result_metrics import (
    NCCL_LOG,
    doctor_result,
    nanogpt_result,
    nccl_result,
    sweep_result,
)
from tests.support import free_ports, stop_process, wait_until_ready

pytestmark = [pytest.mark.slow, pytest.mark.daemons]  # Prometheus and the exporters

NODE = "node-a"
# Panels whose data cannot exist on this host, and why (anything else without data fails the test).
ABSENT_HERE = {
    "/fsx free": "no Lustre file system is mounted at /fsx here",
    "Nodes that stopped reporting (10 min)": "no node stopped reporting: no series is the healthy answer",
}


def query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def fill(expr: str) -> str:
    """Grafana's variables as a user's choice fills them: this cluster, this node, a 1-minute rate window."""
    return (
        expr.replace("$cluster", "c1")
        .replace("$node", ".*")
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
    )


@pytest.fixture
def scraped(tmp_path):
    for tool in ("prometheus-node-exporter", "prometheus"):
        assert shutil.which(tool), f"{tool} not found: dev/test.sh installs Debian's package"
    textfile = tmp_path / "textfile"
    # The real 2-node log with one element wrong in the last row's in-place check (the broken twin the
    # "Collectives with wrong elements" panel exists for: a healthy run has no row there).
    lines = NCCL_LOG.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if re.match(r"\s+\d+\s+\d+\s+float\s", line))
    lines[last] = re.sub(r"\b0(\s*)$", r"1\1", lines[last])
    assert lines[last] != NCCL_LOG.read_text().splitlines(keepends=True)[last]
    twin = tmp_path / "wrong.log"
    twin.write_text("".join(lines))
    results = [
        nccl_result(tmp_path, source=twin),
        sweep_result(tmp_path),
        doctor_result(tmp_path),
        nanogpt_result(tmp_path),
    ]
    assert (
        result_metrics.main(
            [*map(str, results), "--cluster", "c1", "--node", NODE, "--textfile-dir", str(textfile)]
        )
        == 0
    )
    ne_port, prom_port = free_ports(2)
    procs = []
    try:
        ne = subprocess.Popen(
            [
                "prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{ne_port}",
                f"--collector.textfile.directory={textfile}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "node_exporter.log").open("w"),
        )
        procs.append(ne)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "node_exporter",
                    "static_configs": [{"targets": [f"127.0.0.1:{ne_port}"], "labels": {"cluster": "c1"}}],
                    "relabel_configs": [{"target_label": "instance", "replacement": NODE}],
                }
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        prom = subprocess.Popen(
            [
                "prometheus",
                "--config.file=%s" % (tmp_path / "prometheus.yml"),
                "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("w"),
        )
        procs.append(prom)

        def ready() -> bool:
            # Enough samples for rate() over a minute: a few scrapes of every series.
            got = query(prom_port, 'count_over_time(up{job="node_exporter"}[1m])')
            return bool(got) and float(got[0]["value"][1]) >= 4

        wait_until_ready(ready, prom, "prometheus", timeout=60)
        yield prom_port
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def test_the_overview_and_results_dashboards_return_data_from_real_exporters(scraped):
    names = {r["metric"]["__name__"] for r in query(scraped, '{__name__=~".+"}')}
    boards = {Path(p).stem: json.loads(Path(p).read_text()) for p in observability.dashboard_files()}
    checked: dict[str, bool] = {}  # panel -> some target returned data (what Grafana needs to draw it)
    for board in ("cluster", "hpq-results"):
        for where, expr in dashboard_queries(boards[board]):
            title = next((t for t in ABSENT_HERE if repr(t) in where), None)
            if not selected_metrics(expr) <= names:
                continue  # GPU, EFA or Slurm metrics: no such exporter here
            if title:
                assert not query(scraped, fill(expr)), f"{title} has data: drop it from ABSENT_HERE"
                continue
            panel = "{} {}".format(board, where.rsplit(" ", 1)[0])
            checked[panel] = checked.get(panel, False) or bool(query(scraped, fill(expr)))
    missing = [p for p, ok in checked.items() if not ok]
    assert not missing, "queries without data:\n" + "\n".join(missing)
    # Every hpq-results panel and the host panels of the overview were among them.
    assert len([p for p in checked if " panel " in p]) >= 14, sorted(checked)
    assert any("Latest verdict" in p for p in checked) and any("CPU busy" in p for p in checked)


def test_the_result_labels_survive_the_scrape(scraped):
    """The scrape's ``cluster`` target label and the result file's agree; ``node`` keeps the participant."""
    rows = query(scraped, 'hpq_result_verdict{test="nccl", verdict="FAIL"}')
    assert {r["metric"]["node"] for r in rows} == {"ip-10-1-0-1", "ip-10-1-0-2"}
    for r in rows:
        assert r["metric"]["cluster"] == "c1" and r["metric"]["instance"] == NODE
        assert r["metric"].get("exported_cluster", "c1") == "c1"
        assert float(r["value"][1]) == 1.0
    # A query for a cluster that is not this one finds nothing: the label filters, it is not decoration.
    assert not query(scraped, 'hpq_result_verdict{cluster="other"}')
    assert time.time() - float(query(scraped, "max(hpq_result_timestamp_seconds)")[0]["value"][1]) < 3600
