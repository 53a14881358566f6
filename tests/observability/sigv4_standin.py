"""A stand-in for an AMP workspace's endpoints in front of a real Prometheus: it checks SigV4 as AWS does.

Every request must carry a SigV4 ``Authorization`` header for the service ``aps`` in the workspace's region,
computed with the one key pair the stand-in knows, over the request as it arrived (method, path, query, the
signed headers, the body's SHA-256), dated within 5 minutes; anything else is answered 403 with AWS's
``{"message": ...}`` body, before the backend sees it. The check is written from AWS's description of the
algorithm (IAM user guide, "Create a signed AWS API request": https://docs.aws.amazon.com/IAM/latest/UserGuide/
create-signed-request.html; "Elements of an AWS API request signature", reference_sigv.html), not with botocore,
so a signer bug is not mirrored by the checker.

Paths as AMP's (AMP-onboard-query-APIs.html, AMP-onboard-ingest-metrics-remote-write.html):
``/workspaces/<id>/api/v1/query`` -> the backend's ``/api/v1/query``; ``/workspaces/<id>/api/v1/remote_write``
-> the backend's remote-write receiver ``/api/v1/write`` (Prometheus ``--web.enable-remote-write-receiver``).
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

from tests.support import serve_http

AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)
MAX_SKEW_S = 300


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="-_.~")


def verify(
    method: str,
    raw_path: str,
    headers: dict[str, str],
    body: bytes,
    keys: dict[str, str],
    region: str,
    now: float | None = None,
) -> str:
    """'' when the request is signed correctly, else AWS's reason."""
    h = {k.lower(): v for k, v in headers.items()}
    m = AUTH.match(h.get("authorization", ""))
    if not m:
        return "Missing Authentication Token"
    akid, day, reg, service, signed, signature = m.groups()
    if akid not in keys:
        return "The security token included in the request is invalid."
    if reg != region or service != "aps":
        return f"Credential should be scoped to a valid region/service ('{region}'/'aps'), not '{reg}'/'{service}'."
    amz_date = h.get("x-amz-date", "")
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return "X-Amz-Date is missing or malformed"
    if amz_date[:8] != day or abs((now or time.time()) - when) > MAX_SKEW_S:
        return "Signature expired or not yet valid"
    names = signed.split(";")
    if "host" not in names or any(n not in h for n in names):
        return "SignedHeaders must include host and only headers present"
    path, _, query = raw_path.partition("?")
    pairs = sorted((_quote(k), _quote(v)) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True))
    canonical = "\n".join(
        [
            method,
            path or "/",
            "&".join(f"{k}={v}" for k, v in pairs),
            "".join(f"{n}:{' '.join(h[n].split())}\n" for n in names),
            signed,
            h.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{reg}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + keys[akid]).encode(), day), reg), service), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return (
            "The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method."
        )
    return ""


class Workspace:
    """``url``: the workspace's base (``.../workspaces/<id>``); ``refused``: (method, path, reason) of every 403."""

    def __init__(
        self,
        backend: str,
        keys: dict[str, str],
        region: str = "us-west-2",
        workspace_id: str = "ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f",
    ):
        self.refused: list[tuple[str, str, str]] = []
        self.accepted: list[tuple[str, str]] = []
        prefix = f"/workspaces/{workspace_id}/api/v1/"
        ws = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reason = verify(method, self.path, dict(self.headers.items()), body, keys, region)
                path, _, query = self.path.partition("?")
                if reason:
                    ws.refused.append((method, path, reason))
                    return self._answer(403, b'{"message":"%s"}' % reason.encode())
                target = {prefix + "query": "/api/v1/query", prefix + "remote_write": "/api/v1/write"}.get(
                    path
                )
                if target is None:
                    return self._answer(404, b'{"message":"Not Found"}')
                ws.accepted.append((method, path))
                fwd = urllib.request.Request(
                    backend + target + ("?" + query if query else ""),
                    data=body if method == "POST" else None,
                    method=method,
                    headers={
                        k: v
                        for k, v in self.headers.items()
                        if k.lower()
                        in ("content-type", "content-encoding", "x-prometheus-remote-write-version")
                    },
                )
                try:
                    with urllib.request.urlopen(fwd, timeout=30) as resp:
                        self._answer(resp.status, resp.read())
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read())

            def _answer(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def log_message(self, *args):
                pass

        self.server = serve_http(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/workspaces/{workspace_id}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SigningRelay:
    """Signs each remote-write POST with botocore's SigV4 (service ``aps``) and passes it on: the part of the
    Prometheus release binary's ``sigv4`` remote-write option that Debian's build lacks."""

    def __init__(self, target: str, key: tuple[str, str], region: str):
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        creds = Credentials(*key)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = target + self.path.split("/api/v1", 1)[1].join(["/api/v1", ""])
                keep = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "content-encoding", "x-prometheus-remote-write-version")
                }
                req = AWSRequest(method="POST", url=url, data=body, headers=keep)
                SigV4Auth(creds, "aps", region).add_auth(req)
                fwd = urllib.request.Request(url, data=body, method="POST", headers=dict(req.headers.items()))
                try:
                    with urllib.request.urlopen(fwd, timeout=30) as resp:
                        code, data = resp.status, resp.read()
                except urllib.error.HTTPError as exc:
                    code, data = exc.code, exc.read()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = serve_http(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
