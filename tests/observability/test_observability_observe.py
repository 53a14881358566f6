"""``hpq observe STACK`` against moto's CloudFormation, and its dashboard import commands against a Grafana API
stand-in.

The stack carries the root stack's observability outputs by their real names (cfn/root.py OBSERVABILITY_OUTPUTS)
with values in the shapes AWS documents: a workspace ID ``ws-<uuid>``, ``PrometheusEndpoint``
``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/`` (CloudFormation reference,
aws-resource-aps-workspace.html) plus ``api/v1/remote_write`` / ``api/v1/query``. The import command is run by
bash as printed; the stand-in answers ``POST /api/dashboards/db`` as Grafana's Dashboard API documents
(https://grafana.com/docs/grafana/latest/developers/http_api/dashboard/: JSON body ``{"dashboard", "overwrite"}``,
bearer token) and refuses a request without the token (401) or without a dashboard (400).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess

import boto3
import pytest

from hpq.cfn import root
from hpq.observability import dashboard_files, endpoints
from tests.support import run_cli, serve_http

REGION = "us-east-1"
WS = "ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f"
ENDPOINT = f"https://aps-workspaces.{REGION}.amazonaws.com/workspaces/{WS}/"
VALUES = {
    "PrometheusWorkspaceId": WS,
    "PrometheusWorkspaceArn": f"arn:aws:aps:{REGION}:123456789012:workspace/{WS}",
    "PrometheusRemoteWriteUrl": ENDPOINT + "api/v1/remote_write",
    "PrometheusQueryUrl": ENDPOINT + "api/v1/query",
    "AlertRulesNamespace": f"arn:aws:aps:{REGION}:123456789012:rulegroupsnamespace/{WS}/hpq-alerts",
    "GrafanaUrl": "https://g-abc123.grafana-workspace.us-east-1.amazonaws.com",
}


def make_stack(name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {k: {"Value": v} for k, v in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=name, TemplateBody=json.dumps(template)
    )


def test_output_names_are_the_root_stacks():
    assert set(endpoints.OUTPUT_KEYS.values()) == {name for name, _ in root.OBSERVABILITY_OUTPUTS}


def test_observe_json_from_the_stack_outputs(aws_env, capsys):
    make_stack("obs-on", VALUES)
    code, out, err = run_cli(["observe", "obs-on", "--region", REGION, "--output", "json"], capsys)
    assert code == 0, err
    view = json.loads(out)
    assert view["workspace_id"] == WS and view["remote_write_url"] == VALUES["PrometheusRemoteWriteUrl"]
    assert view["query_url"] == VALUES["PrometheusQueryUrl"] and view["region"] == REGION
    assert view["grafana_datasource"]["url"] == ENDPOINT.rstrip("/")
    assert view["grafana_datasource"]["jsonData"] == {
        "sigV4Auth": True,
        "sigV4AuthType": "default",
        "sigV4Region": REGION,
        "timeInterval": "30s",  # the agent's scrape interval (lifecycle/observability.py)
    }
    assert sorted(d["file"] for d in view["dashboards"]) == sorted(
        os.path.abspath(p) for p in dashboard_files()
    )
    code, out, err = run_cli(["observe", "obs-on", "--region", REGION], capsys)
    assert code == 0 and WS in out and "hpq: GPUs (DCGM)" in out and "/api/dashboards/db" in out


def test_observe_without_observability_is_one_line_exit_2(aws_env, capsys):
    make_stack("obs-off", {"ClusterName": "obs-off"})
    code, out, err = run_cli(["observe", "obs-off", "--region", REGION], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "observability is off" in err and "Traceback" not in err
    code, out, err = run_cli(["observe", "no-such-stack", "--region", REGION], capsys)
    assert code == 2 and "does not exist" in err and "Traceback" not in err


class FakeGrafana:
    """Grafana's POST /api/dashboards/db: 401 without the bearer token, 400 without a dashboard, else 200."""

    def __init__(self, token: str):
        self.posts: list[dict] = []
        grafana = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Authorization") != f"Bearer {token}":
                    return self._answer(401, {"message": "Unauthorized"})
                doc = json.loads(body or b"{}")
                if self.path != "/api/dashboards/db" or not isinstance(doc.get("dashboard"), dict):
                    return self._answer(400, {"message": "bad request"})
                grafana.posts.append(doc)
                uid = doc["dashboard"].get("uid", "")
                return self._answer(
                    200,
                    {
                        "id": len(grafana.posts),
                        "uid": uid,
                        "status": "success",
                        "version": 1,
                        "url": f"/d/{uid}/x",
                    },
                )

            def _answer(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = serve_http(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def grafana():
    g = FakeGrafana("glsa_token")
    yield g
    g.server.shutdown()
    g.server.server_close()


def test_import_commands_post_each_dashboard(grafana):
    for d in endpoints.dashboards():
        env = dict(os.environ, GRAFANA_URL=grafana.url, GRAFANA_TOKEN="glsa_token")
        res = subprocess.run(
            ["bash", "-c", "set -o pipefail; " + d["import_command"]],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 0, res.stderr
    uids = sorted(p["dashboard"]["uid"] for p in grafana.posts)
    assert uids == sorted(d["uid"] for d in endpoints.dashboards())
    assert all(p["overwrite"] is True and p["dashboard"]["id"] is None for p in grafana.posts)
    # the broken twin: a wrong token fails the command (curl -f), nothing is imported
    before = len(grafana.posts)
    env = dict(os.environ, GRAFANA_URL=grafana.url, GRAFANA_TOKEN="wrong")
    res = subprocess.run(
        ["bash", "-c", "set -o pipefail; " + endpoints.dashboards()[0]["import_command"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode != 0 and len(grafana.posts) == before


class _SageMaker:
    """DescribeCluster as the API answers it plus the HyperPod node emulation (hpq.standins.hyperpod_api)."""

    def __init__(self, api):
        self.api = api

    def describe_cluster(self, ClusterName):  # noqa: N803
        return {
            "ClusterName": "obs-cluster",
            "ClusterArn": self.api.arn,
            "ClusterStatus": "InService",
            "InstanceGroups": [],
            "Orchestrator": {},
        }

    def get_paginator(self, name):
        api = self.api

        class _Pages:
            def paginate(self, **kw):
                yield getattr(api, name)(**kw)

        return _Pages()


def test_check_lists_every_node_and_is_inconclusive_when_the_workspace_cannot_be_asked(
    aws_env, capsys, monkeypatch
):
    """``--check`` wiring: the cluster's nodes read (ListClusterNodes, with the stack's ClusterName), the
    workspace asked at the stack's query URL; that URL is AWS's (unreachable here), so the verdict is
    INCONCLUSIVE with the endpoint named, exit 1, never PASS."""
    from hpq.standins.hyperpod_api import EmulatedHyperPodApi, EmulatedNode
    from tests.support import patch_aws_client

    make_stack("obs-check", dict(VALUES, ClusterName="obs-cluster"))
    api = EmulatedHyperPodApi(
        "obs-cluster",
        "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef",
        [
            EmulatedNode(
                "i-0123456789abcdef0",
                "worker-group-1",
                "ml.p5.48xlarge",
                "ip-10-1-0-5.us-east-1.compute.internal",
                "10.1.0.5",
            ),
            EmulatedNode(
                "i-0123456789abcdef1",
                "controller-machine",
                "ml.m5.12xlarge",
                "ip-10-1-0-6.us-east-1.compute.internal",
                "10.1.0.6",
            ),
        ],
    )
    import hpq.aws.session as session_mod

    original = session_mod.client
    patch_aws_client(
        monkeypatch,
        lambda s, service, *a, **k: (
            _SageMaker(api) if service == "sagemaker" else original(s, service, *a, **k)
        ),
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr("hpq.aws.amp.TIMEOUT_S", 2.0)
    code, out, err = run_cli(
        ["observe", "obs-check", "--region", REGION, "--check", "--output", "json"], capsys
    )
    assert code == 1 and out, (code, out, err)
    result = json.loads(out)["observe"]
    assert result["verdict"] == "INCONCLUSIVE" and "cannot reach the workspace endpoint" in result["reason"]
    assert "Traceback" not in err and "INCONCLUSIVE" in err
    assert [
        c for c in api.calls if c[0] == "ListClusterNodes" and c[1]["ClusterName"].endswith("abcdefabcdef")
    ]
