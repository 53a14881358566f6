"""A stand-in for an Amazon Managed Service for Prometheus workspace: a real Prometheus behind a SigV4 check.

What it is made of, and what each part stands for:

- :class:`PrometheusServer`: Debian's ``prometheus`` with its remote-write receiver
  (``--web.enable-remote-write-receiver``), the storage and query engine AMP's API fronts.
- :class:`Workspace`: AMP's endpoint. Every request must carry a SigV4 ``Authorization`` header for the service
  ``aps`` in the workspace's region, computed with a key pair it knows, over the request as it arrived (method,
  path, query, the signed headers, the body's SHA-256), dated within 5 minutes; anything else is answered 403
  with AWS's ``{"message": ...}`` body before Prometheus sees it. The check is written from AWS's description
  of the algorithm (IAM user guide, "Create a signed AWS API request":
  https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html; "Elements of an AWS API request
  signature", reference_sigv.html), not with botocore, so a signer bug is not mirrored by the checker. Paths as
  AMP's (AMP-onboard-query-APIs.html, AMP-onboard-ingest-metrics-remote-write.html):
  ``/workspaces/<id>/api/v1/query`` -> Prometheus's ``/api/v1/query``; ``/workspaces/<id>/api/v1/remote_write``
  -> its receiver ``/api/v1/write``; another workspace id is 404.
- :class:`SigningRelay`: the part of the Prometheus agent that signs its remote writes (``remote_write.sigv4``).
  The release binary hpq pins signs; Debian's build (2.42.0+ds) parses the ``sigv4`` block and sends its writes
  with no ``Authorization`` header, so where Debian's agent runs (the rehearsal's nodes, the tests), its writes
  pass through this relay, which signs them with botocore as the release binary would. Over TLS when given a
  certificate: a node's agent writes to ``https://aps-workspaces.<region>.amazonaws.com/...`` unchanged.
- :func:`tls_material`: a CA and a server certificate for AMP's host name, so the agent's TLS check passes only
  for a node that was given that CA.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.server
import json
import os
import re
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from hpq.standins.http_server import serve

AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)
MAX_SKEW_S = 300
FORWARDED_HEADERS = ("content-type", "content-encoding", "x-prometheus-remote-write-version")


def amp_host(region: str) -> str:
    """AMP's data-plane host name in ``region`` (the workspace's PrometheusEndpoint)."""
    return f"aps-workspaces.{region}.amazonaws.com"


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="-_.~")


def verify(method: str, raw_path: str, headers: dict[str, str], body: bytes, keys: dict[str, str], region: str,
           now: float | None = None) -> str:
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
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    except ValueError:
        return "X-Amz-Date is missing or malformed"
    if amz_date[:8] != day or abs((now or time.time()) - when) > MAX_SKEW_S:
        return "Signature expired or not yet valid"
    names = signed.split(";")
    if "host" not in names or any(n not in h for n in names):
        return "SignedHeaders must include host and only headers present"
    path, _, query = raw_path.partition("?")
    pairs = sorted((_quote(k), _quote(v)) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True))
    canonical = "\n".join([
        method,
        path or "/",
        "&".join(f"{k}={v}" for k, v in pairs),
        "".join(f"{n}:{' '.join(h[n].split())}\n" for n in names),
        signed,
        h.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest(),
    ])
    scope = f"{day}/{reg}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + keys[akid]).encode(), day), reg), service), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return ("The request signature we calculated does not match the signature you provided. Check your AWS "
                "Secret Access Key and signing method.")
    return ""


def _answer(handler: http.server.BaseHTTPRequestHandler, code: int, data: bytes) -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _forward(url: str, method: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body if method == "POST" else None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, ValueError) as exc:
        return 502, json.dumps({"message": f"backend unreachable: {exc}"}).encode()


class Workspace:
    """AMP's endpoint for one workspace. ``url``: its base (``http://host:port/workspaces/<id>``); ``refused``:
    (method, path, reason) of every 403; ``accepted``: (method, path) of every request passed on."""

    def __init__(self, backend: str, keys: dict[str, str], region: str = "us-west-2",
                 workspace_id: str = "ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f", host: str = "127.0.0.1"):
        self.refused: list[tuple[str, str, str]] = []
        self.accepted: list[tuple[str, str]] = []
        self.workspace_id = workspace_id
        prefix = f"/workspaces/{workspace_id}/api/v1/"
        routes = {prefix + "query": "/api/v1/query", prefix + "remote_write": "/api/v1/write"}
        ws = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reason = verify(method, self.path, dict(self.headers.items()), body, keys, region)
                path, _, query = self.path.partition("?")
                if reason:
                    ws.refused.append((method, path, reason))
                    return _answer(self, 403, json.dumps({"message": reason}).encode())
                target = routes.get(path)
                if target is None:
                    return _answer(self, 404, b'{"message":"Not Found"}')
                ws.accepted.append((method, path))
                keep = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED_HEADERS}
                _answer(self, *_forward(backend + target + ("?" + query if query else ""), method, body, keep))

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = serve(Handler, host)
        self.origin = f"http://{host}:{self.server.server_address[1]}"
        self.url = f"{self.origin}/workspaces/{workspace_id}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SigningRelay:
    """Signs each remote-write POST with botocore's SigV4 (service ``aps``) and passes it, path unchanged, to
    ``origin`` (the workspace endpoint's scheme://host:port): the release agent's ``sigv4`` option, which Debian's
    build lacks. ``posts`` counts what it relayed."""

    def __init__(self, origin: str, key: tuple[str, ...], region: str, host: str = "127.0.0.1", port: int = 0,
                 ssl_ctx: ssl.SSLContext | None = None):
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        creds = Credentials(*key)
        relay = self
        self.posts = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = origin + self.path
                keep = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED_HEADERS}
                req = AWSRequest(method="POST", url=url, data=body, headers=keep)
                SigV4Auth(creds, "aps", region).add_auth(req)
                relay.posts += 1
                _answer(self, *_forward(url, "POST", body, dict(req.headers.items())))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = serve(Handler, host, port, ssl_ctx)
        scheme = "https" if ssl_ctx is not None else "http"
        self.url = f"{scheme}://{host}:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def tls_material(hostname: str) -> tuple[str, str, str]:
    """(CA certificate, server certificate, server key), PEM: a one-day CA that signed a certificate for
    ``hostname``. Only a client given the CA trusts the server."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hpq rehearsal CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), key_pem.decode()


def server_context(cert_pem: str, key_pem: str, workdir: str) -> ssl.SSLContext:
    cert_file, key_file = os.path.join(workdir, "server.crt"), os.path.join(workdir, "server.key")
    with open(cert_file, "w") as f:
        f.write(cert_pem)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key_pem)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class PrometheusServer:
    """Debian's Prometheus with its remote-write receiver on a free loopback port, storage in ``workdir``."""

    def __init__(self, workdir: str, binary: str = "prometheus"):
        self.workdir = workdir
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        config = os.path.join(self.workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write('{"global": {"scrape_interval": "15s"}}\n')  # JSON is YAML: it scrapes nothing, it receives
        log = open(os.path.join(self.workdir, "prometheus.log"), "wb")
        try:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir}/tsdb",
                 f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver"],
                stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode} (log: {self.workdir}/prometheus.log)")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout:.0f}s (log: {self.workdir}/prometheus.log)")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class AmpStandin:
    """One workspace: Prometheus, the SigV4-checking endpoint on loopback (``query_base`` for ``hpq observe``),
    and, for nodes on ``node_host``, the agent's signing relay over TLS on port 443 of that address as AMP's host
    name (the nodes map the name to it and trust ``ca_pem``)."""

    region: str
    account: str
    node_host: str
    keys: dict[str, str]
    workdir: str = ""
    workspace_id: str = field(default_factory=lambda: "ws-" + str(uuid.uuid4()))
    ca_pem: str = ""
    prometheus: PrometheusServer | None = None
    workspace: Workspace | None = None
    relay: SigningRelay | None = None
    relay_key: tuple[str, ...] = ()  # what the relay signs with (default: the first of ``keys``)

    @property
    def arn(self) -> str:
        return f"arn:aws:aps:{self.region}:{self.account}:workspace/{self.workspace_id}"

    @property
    def endpoint(self) -> str:
        """The workspace's PrometheusEndpoint, as AWS gives it (ends in ``/``)."""
        return f"https://{amp_host(self.region)}/workspaces/{self.workspace_id}/"

    @property
    def query_base(self) -> str:
        """The loopback endpoint's base, ``.../workspaces/<id>`` (append ``/api/v1/query``)."""
        assert self.workspace is not None
        return self.workspace.url

    def start(self, relay_port: int = 443) -> AmpStandin:
        self.workdir = self.workdir or tempfile.mkdtemp(prefix="hpq-amp-")
        self.prometheus = PrometheusServer(self.workdir).start()
        self.workspace = Workspace(self.prometheus.url, self.keys, self.region, self.workspace_id)
        self.ca_pem, cert, key = tls_material(amp_host(self.region))
        ctx = server_context(cert, key, self.workdir)
        self.relay = SigningRelay(self.workspace.origin, self.relay_key or next(iter(self.keys.items())), self.region,
                                  self.node_host, relay_port, ctx)
        return self

    def stop(self) -> None:
        for part in (self.relay, self.workspace):
            if part is not None:
                part.close()
        if self.prometheus is not None:
            self.prometheus.stop()
