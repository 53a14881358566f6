"""PromQL instant queries against an Amazon Managed Service for Prometheus workspace, signed with SigV4.

AMP's query API is Prometheus's HTTP API at ``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/api/v1/
query`` (the root stack's PrometheusQueryUrl), each request signed with SigV4 for the service ``aps`` in the
workspace's region, by credentials that may ``aps:QueryMetrics`` (AMP user guide, "Query using the Prometheus
API": https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-query-APIs.html). The answer is
Prometheus's envelope (https://prometheus.io/docs/prometheus/latest/querying/api/): ``status`` ``success`` with
``data.result``, or ``error`` with ``errorType``/``error``. botocore is imported inside the functions (heavy SDK).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT_S = 30.0
MAX_BYTES = 32 << 20


class QueryError(Exception):
    """The workspace could not answer; the message names the likely cause (endpoint, credentials, IAM)."""


def signed_headers(session: Any, url: str, region: str, method: str = "GET", body: bytes = b"",
                   extra: dict[str, str] | None = None) -> dict[str, str]:
    """The SigV4 headers (Authorization, X-Amz-Date, X-Amz-Security-Token if any) for ``method url`` with
    ``body``, ``extra`` headers included and signed."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    creds = session.get_credentials()
    if creds is None:
        raise QueryError("no AWS credentials to sign the request with (aws configure, AWS_PROFILE, or a role)")
    request = AWSRequest(method=method, url=url, data=body, headers=dict(extra or {}))
    SigV4Auth(creds.get_frozen_credentials(), "aps", region).add_auth(request)
    return dict(request.headers.items())


def send(session: Any, url: str, region: str, name: str, why_by_code: dict[int, str], refused: str,
         method: str = "GET", body: bytes = b"", extra: dict[str, str] | None = None) -> bytes:
    """One SigV4-signed request to the workspace; its answer (at most MAX_BYTES + 1 bytes). QueryError, one line
    starting with ``name`` (the endpoint, without a query string), on an HTTP error (``why_by_code`` says what
    its status likely means, ``refused`` any other) or an endpoint that cannot be reached."""
    req = urllib.request.Request(url, data=body if method != "GET" else None, method=method,
                                 headers=signed_headers(session, url, region, method=method, body=body, extra=extra))
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace").strip().splitlines()
        more = ("; " + detail[0][:200]) if detail else ""
        raise QueryError(f"{name}: HTTP {exc.code}: {why_by_code.get(exc.code, refused)}{more}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise QueryError(f"{name}: cannot reach the workspace endpoint: {getattr(exc, 'reason', None) or exc}") from None


def instant_query(session: Any, query_url: str, region: str, promql: str) -> list[dict[str, Any]]:
    """``data.result`` of one instant query; QueryError (one line) otherwise."""
    # Percent-encoded as SigV4's canonical query string is (RFC 3986, space as %20, not '+'): botocore signs the
    # query as written, AWS re-encodes what it decoded, so a '+' would not verify.
    url = query_url + "?" + urllib.parse.urlencode({"query": promql}, quote_via=urllib.parse.quote, safe="-_.~")
    body = send(session, url, region, query_url, {
        403: "these credentials may not aps:QueryMetrics on the workspace (or the signature was refused)",
        404: "no such workspace or path (check PrometheusQueryUrl)"}, "the query was refused")
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise QueryError(f"{query_url}: the answer is not Prometheus API JSON") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise QueryError(f"{query_url}: query {promql!r} failed: {err or 'no status success'}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise QueryError(f"{query_url}: query {promql!r} answered {data.get('resultType')!r}, not a vector")
    return data["result"]
