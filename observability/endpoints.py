"""Where a deployed cluster's metrics are, from its root stack's outputs (``hpq observe``; no AWS calls here).

The root stack re-exports the Observability stack's outputs (cfn/root.py OBSERVABILITY_OUTPUTS) when
EnableObservability is true: workspace ID and ARN, remote-write and query URLs, the rule groups namespace and the
Managed Grafana URL (or why there is none). The dashboards are imported into any Grafana through Grafana's HTTP
API, ``POST /api/dashboards/db`` with ``{"dashboard": ..., "overwrite": true}`` and a service account token
(Grafana HTTP API reference, "Dashboard API": https://grafana.com/docs/grafana/latest/developers/http_api/dashboard/;
Amazon Managed Grafana takes the same API with a workspace service account token: AMG user guide,
"Using Grafana HTTP APIs", Using-Grafana-APIs.html).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any

from hpq.lifecycle.observability import SCRAPE_INTERVAL
from hpq.observability import dashboard_files

OUTPUT_KEYS = {  # JSON key -> root stack output (cfn/observability.py OUT_*)
    "workspace_id": "PrometheusWorkspaceId",
    "workspace_arn": "PrometheusWorkspaceArn",
    "remote_write_url": "PrometheusRemoteWriteUrl",
    "query_url": "PrometheusQueryUrl",
    "alert_rules_namespace": "AlertRulesNamespace",
    "grafana_url": "GrafanaUrl",
}
REQUIRED = ("workspace_id", "remote_write_url", "query_url")
ENDPOINT_REGION = re.compile(r"^https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com")


class ObservabilityOff(ValueError):
    """The stack has no observability outputs (EnableObservability=false, or an older template)."""


def import_command(path: str) -> str:
    """A shell line that imports one dashboard file into the Grafana at $GRAFANA_URL with $GRAFANA_TOKEN."""
    body = "jq '{dashboard: (. + {id: null}), overwrite: true}' " + shlex.quote(path)
    return (body + ' | curl -fsS -X POST -H "Authorization: Bearer $GRAFANA_TOKEN" '
            '-H "Content-Type: application/json" --data-binary @- "$GRAFANA_URL/api/dashboards/db"')


def dashboards() -> list[dict[str, str]]:
    out = []
    for path in dashboard_files():
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        out.append({"title": str(doc.get("title", "")), "uid": str(doc.get("uid", "")),
                    "file": os.path.abspath(path), "import_command": import_command(os.path.abspath(path))})
    return out


def describe(stack: str, region: str | None, outputs: dict[str, str]) -> dict[str, Any]:
    """The workspace, its endpoints, Grafana and the dashboard import commands; ObservabilityOff without them."""
    found = {key: outputs.get(name, "") for key, name in OUTPUT_KEYS.items()}
    missing = [OUTPUT_KEYS[k] for k in REQUIRED if not found[k]]
    if missing:
        raise ObservabilityOff(
            f"stack {stack!r} has no {', '.join(missing)} output: observability is off (deploy with "
            "EnableObservability=true to create the Managed Prometheus workspace)")
    m = ENDPOINT_REGION.match(found["query_url"])
    region = m.group(1) if m else (region or "")
    # A Grafana Prometheus data source for the workspace, signed with SigV4 (AMP user guide, "Set up open-source
    # Grafana or Grafana Enterprise for use with Amazon Managed Service for Prometheus", AMP-onboard-query-
    # standalone-grafana.html: the workspace URL without /api/v1/query, SigV4 auth, the workspace's region), with
    # the data source's "Scrape interval" (jsonData.timeInterval) set to the nodes' agent's, so Grafana's
    # $__rate_interval is 4 x 30 s and a rate() panel always holds two samples (Grafana's Prometheus data source
    # docs, "Template variables": $__rate_interval = max($__interval + scrape interval, 4 x scrape interval)).
    datasource = {"name": f"{stack}-amp", "type": "prometheus", "access": "proxy",
                  "url": found["query_url"].rsplit("/api/v1/query", 1)[0],
                  "jsonData": {"sigV4Auth": True, "sigV4AuthType": "default", "sigV4Region": region,
                               "timeInterval": SCRAPE_INTERVAL}}
    return {"stack": stack, "region": region, **found, "grafana_datasource": datasource,
            "dashboards": dashboards()}
