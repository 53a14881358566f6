"""The IMDSv2 stand-in: one server for the rehearsal's nodes and for the lifecycle's tests.

It is a stand-in: the real instance metadata service exists only on EC2. It answers what a
HyperPod node's IMDS answers and refuses what it refuses (EC2 User Guide, "Use the Instance
Metadata Service to access instance metadata", IMDSv2; HyperPod enforces IMDSv2):

- ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` between 1 and 21600
  (400 otherwise) and returns a token that expires after that many seconds;
- every GET needs a valid, unexpired ``X-aws-ec2-metadata-token`` (401 otherwise: IMDSv1 is off,
  as ``HttpTokens: required`` makes it); an instance launched with IMDSv1 allowed answers a GET
  without a token (``v1_enabled``), never one with a bad token;
- ``instance-type`` is the EC2 type without SageMaker's ``ml.`` prefix (``g5.16xlarge``);
- ``iam/security-credentials/<role>`` serves the instance role's temporary credentials, so
  boto3 on the node finds credentials the way it does on a HyperPod node.

One server can stand in for several nodes' IMDS: ``http://HOST:PORT/<node>/latest/...`` is node
``<node>``'s (the tests' nodes share one loopback); the rehearsal runs one per node, at
169.254.169.254:80 inside the node's network namespace. Faults for the client's tests: a token API
that refuses (an IMDSv1-only service), slow answers, failing answers; every request is logged.

Standard library only: it runs with whatever Python the host has, inside the node's network
namespace (``python -m hpq.standins.imds --instance-id ... --instance-type ...``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import secrets
import socketserver
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL = 21600
META = "/latest/meta-data/"
IDENTITY_DOCUMENT = "/latest/dynamic/instance-identity/document"
DEFAULT_ROLE = "hpq-rehearsal-execution-role"
# The role's temporary credentials every node's IMDS hands out (whoever checks a node's signature knows them).
ROLE_ACCESS_KEY_ID = "ASIAREHEARSAL000000"
ROLE_SECRET_ACCESS_KEY = "rehearsal-secret-not-a-real-key"
ROLE_SESSION_TOKEN = "rehearsal-session-token"


def strip_ml(instance_type: str) -> str:
    """IMDS reports the EC2 type; the SageMaker API's ``ml.`` prefix is not part of it."""
    return instance_type[3:] if instance_type.startswith("ml.") else instance_type


class Metadata:
    """What one node's IMDS knows, as flat meta-data paths (relative to /latest/meta-data/)."""

    def __init__(self, instance_id: str | None, instance_type: str, region: str, zone: str | None = None,
                 local_ipv4: str | None = None, hostname: str | None = None, role: str = DEFAULT_ROLE,
                 account: str = "123456789012"):
        self.role = role
        self.account = account
        values = {
            "instance-id": instance_id,
            "instance-type": strip_ml(instance_type),
            "placement/region": region,
            "placement/availability-zone": zone or region + "a",
            "local-ipv4": local_ipv4,
            "local-hostname": hostname,
            "hostname": hostname,
            "ami-id": "ami-0rehearsal0000000",
            "iam/security-credentials/": role,
        }
        self.values = {k: v for k, v in values.items() if v is not None}

    @classmethod
    def of(cls, answers: dict[str, str]) -> Metadata:
        """From the answers a test names (``instance-type``, ``instance-id``, ``region``; the rest defaulted, and
        what it leaves out is a 404, as a category IMDS does not have)."""
        return cls(answers.get("instance-id"), answers["instance-type"], answers.get("region", "us-west-2"),
                   answers.get("zone"), answers.get("local-ipv4"), answers.get("hostname"))

    def credentials(self) -> dict[str, str]:
        now = datetime.datetime.now(datetime.timezone.utc)
        expires = now + datetime.timedelta(hours=6)
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        return {"Code": "Success", "LastUpdated": now.strftime(fmt), "Type": "AWS-HMAC",
                "AccessKeyId": ROLE_ACCESS_KEY_ID, "SecretAccessKey": ROLE_SECRET_ACCESS_KEY,
                "Token": ROLE_SESSION_TOKEN, "Expiration": expires.strftime(fmt)}

    def identity_document(self) -> dict[str, str]:
        v = self.values
        return {"accountId": self.account, "instanceId": v.get("instance-id", ""), "instanceType": v["instance-type"],
                "region": v["placement/region"], "availabilityZone": v["placement/availability-zone"],
                "privateIp": v.get("local-ipv4", ""), "imageId": v["ami-id"]}

    def lookup(self, path: str) -> str | None:
        """The answer for a GET of ``path`` (already stripped of /latest/meta-data/), or None (404)."""
        if path == f"iam/security-credentials/{self.role}":
            return json.dumps(self.credentials(), indent=2)
        if path in self.values:
            return self.values[path]
        if path in ("", "/"):
            return "\n".join(sorted({k.split("/")[0] + ("/" if "/" in k else "") for k in self.values}))
        return None


class Tokens:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}

    def issue(self, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._expiry[token] = time.monotonic() + ttl
        return token

    def valid(self, token: str | None) -> bool:
        if not token:
            return False
        with self._lock:
            expiry = self._expiry.get(token)
        return expiry is not None and expiry > time.monotonic()

    def clear(self) -> None:
        """Forget every token, as if each had expired."""
        with self._lock:
            self._expiry.clear()


class Faults:
    """What the service does wrong, for the client's tests: all off by default (a healthy IMDSv2 instance)."""

    def __init__(self, v1_enabled: bool = False, refuse_token: int | None = None, delay_s: float = 0.0,
                 slow_requests: int = 0, fail_status: int | None = None, fail_requests: int = 0):
        self.v1_enabled = v1_enabled  # HttpTokens: optional (IMDSv1 allowed)
        self.refuse_token = refuse_token  # the token PUT answers this status (an IMDSv1-only service)
        self.delay_s, self.slow_requests = delay_s, slow_requests  # the first N requests wait this long
        self.fail_status, self.fail_requests = fail_status, fail_requests  # the first N requests fail


class Server(ThreadingHTTPServer):
    """IMDS for ``nodes`` (URL prefix -> Metadata; "" is the root), with ``faults``; ``calls`` and ``log``
    record every request: (method, path, whether it carried a token)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], nodes: dict[str, Metadata], faults: Faults | None = None,
                 quiet: bool = False):
        self.nodes = nodes
        self.faults = faults or Faults()
        self.quiet = quiet
        self.tokens = Tokens()
        self.calls: Counter = Counter()
        self.log: list[tuple[str, str, bool]] = []
        self.lock = threading.Lock()
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the FQDN of the address: a reverse DNS query that waits for
        # resolver timeouts in a namespace with no DNS server. IMDS has no use for it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (its own timeout) is not the server's error: IMDS says nothing of it."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://{self.server_name}:{self.server_port}"

    def node_url(self, node: str) -> str:
        return f"{self.url}/{node}"


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "EC2ws"
    sys_version = ""

    def log_message(self, fmt: str, *args) -> None:  # one line per request on stderr (the node's log)
        if not self.server.quiet:
            sys.stderr.write(f"imds {self.address_string()} {fmt % args}\n")

    def _reply(self, status: int, body: str = "", ctype: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _admit(self) -> bool:
        """Record the request; apply the configured delay or failure to the first requests."""
        srv, f = self.server, self.server.faults
        with srv.lock:
            n = sum(srv.calls.values())
            srv.calls[self.command] += 1
            srv.log.append((self.command, self.path, TOKEN_HEADER in self.headers))
        if n < f.slow_requests and f.delay_s:
            time.sleep(f.delay_s)
        if n < f.fail_requests and f.fail_status:
            self._reply(f.fail_status, "failure injected")
            return False
        return True

    def _split(self) -> tuple[Metadata | None, str]:
        """(the node's metadata, the path below its prefix)."""
        parts = self.path.lstrip("/").split("/", 1)
        if parts[0] != "latest" and parts[0] in self.server.nodes:
            return self.server.nodes[parts[0]], "/" + (parts[1] if len(parts) > 1 else "")
        return self.server.nodes.get(""), self.path

    def do_PUT(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if not self._admit():
            return
        _, path = self._split()
        if path != TOKEN_PATH:
            return self._reply(404, "Not Found")
        if self.server.faults.refuse_token:
            return self._reply(self.server.faults.refuse_token, "token API not available")
        ttl = self.headers.get(TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TTL:
            return self._reply(400, "Bad Request")
        self._reply(200, self.server.tokens.issue(int(ttl)))

    def do_GET(self) -> None:  # noqa: N802
        if not self._admit():
            return
        meta, path = self._split()
        token = self.headers.get(TOKEN_HEADER)
        if token is not None and not self.server.tokens.valid(token):
            return self._reply(401, "Unauthorized")
        if token is None and not self.server.faults.v1_enabled:
            return self._reply(401, "Unauthorized")
        if meta is None:
            return self._reply(404, "Not Found")
        if path == IDENTITY_DOCUMENT:
            return self._reply(200, json.dumps(meta.identity_document(), indent=2), "application/json")
        if not path.startswith(META):
            return self._reply(404, "Not Found")
        answer = meta.lookup(path[len(META):])
        if answer is None:
            return self._reply(404, "Not Found")
        self._reply(200, answer)


def serve(meta: Metadata, host: str, port: int) -> Server:
    """One node's IMDS (not yet serving: call ``serve_forever``)."""
    return Server((host, port), {"": meta})


def start(nodes: dict[str, Metadata], faults: Faults | None = None, host: str = "127.0.0.1") -> Server:
    """A server for ``nodes`` on a free port of ``host``, serving from a daemon thread (``stop`` it)."""
    srv = Server((host, 0), nodes, faults, quiet=True)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv


def stop(srv: Server) -> None:
    srv.shutdown()
    srv.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hpq-imds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="169.254.169.254:80")
    ap.add_argument("--instance-id", required=True)
    ap.add_argument("--instance-type", required=True)
    ap.add_argument("--region", required=True)
    ap.add_argument("--zone", required=True)
    ap.add_argument("--local-ipv4", required=True)
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--role", default=DEFAULT_ROLE)
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    meta = Metadata(args.instance_id, args.instance_type, args.region, args.zone, args.local_ipv4,
                    args.hostname, args.role)
    server = serve(meta, host, int(port))
    sys.stderr.write(f"imds listening on {args.listen} for {args.instance_id}\n")
    sys.stderr.flush()
    try:
        server.serve_forever(0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
