"""An IMDSv2 server for one rehearsal node, listening on 169.254.169.254:80 inside its namespace.

It is a stand-in: the real instance metadata service exists only on EC2. It answers what a
HyperPod node's IMDS answers and refuses what it refuses (EC2 User Guide, "Use the Instance
Metadata Service to access instance metadata", IMDSv2; HyperPod enforces IMDSv2):

- ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` between 1 and 21600
  (400 otherwise) and returns a token that expires after that many seconds;
- every GET needs a valid, unexpired ``X-aws-ec2-metadata-token`` (401 otherwise: IMDSv1 is off,
  as ``HttpTokens: required`` makes it);
- ``instance-type`` is the EC2 type without SageMaker's ``ml.`` prefix (``g5.16xlarge``);
- ``iam/security-credentials/<role>`` serves the instance role's temporary credentials, so
  boto3 on the node finds credentials the way it does on a HyperPod node.

Standard library only: it runs with whatever Python the host has, inside the node's network
namespace (``python -m hpq.rehearsal.imds --instance-id ... --instance-type ...``).
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL = 21600
META = "/latest/meta-data/"
IDENTITY_DOCUMENT = "/latest/dynamic/instance-identity/document"


def strip_ml(instance_type: str) -> str:
    """IMDS reports the EC2 type; the SageMaker API's ``ml.`` prefix is not part of it."""
    return instance_type[3:] if instance_type.startswith("ml.") else instance_type


class Metadata:
    """What this node's IMDS knows, as flat meta-data paths (relative to /latest/meta-data/)."""

    def __init__(self, instance_id: str, instance_type: str, region: str, zone: str, local_ipv4: str,
                 hostname: str, role: str, account: str = "123456789012"):
        self.role = role
        self.account = account
        self.values = {
            "instance-id": instance_id,
            "instance-type": strip_ml(instance_type),
            "placement/region": region,
            "placement/availability-zone": zone,
            "local-ipv4": local_ipv4,
            "local-hostname": hostname,
            "hostname": hostname,
            "ami-id": "ami-0rehearsal0000000",
            "iam/security-credentials/": role,
        }

    def credentials(self) -> dict[str, str]:
        now = datetime.datetime.now(datetime.timezone.utc)
        expires = now + datetime.timedelta(hours=6)
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        return {"Code": "Success", "LastUpdated": now.strftime(fmt), "Type": "AWS-HMAC",
                "AccessKeyId": "ASIAREHEARSAL000000", "SecretAccessKey": "rehearsal-secret-not-a-real-key",
                "Token": "rehearsal-session-token", "Expiration": expires.strftime(fmt)}

    def identity_document(self) -> dict[str, str]:
        v = self.values
        return {"accountId": self.account, "instanceId": v["instance-id"], "instanceType": v["instance-type"],
                "region": v["placement/region"], "availabilityZone": v["placement/availability-zone"],
                "privateIp": v["local-ipv4"], "imageId": v["ami-id"]}

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


def make_handler(meta: Metadata, tokens: Tokens):
    class Handler(BaseHTTPRequestHandler):
        server_version = "EC2ws"
        sys_version = ""

        def log_message(self, fmt: str, *args) -> None:  # one line per request on stderr (the node's log)
            sys.stderr.write(f"imds {self.address_string()} {fmt % args}\n")

        def _reply(self, status: int, body: str = "", ctype: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path != TOKEN_PATH:
                return self._reply(404, "Not Found")
            ttl = self.headers.get(TTL_HEADER, "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TTL:
                return self._reply(400, "Bad Request")
            self._reply(200, tokens.issue(int(ttl)))

        def do_GET(self) -> None:  # noqa: N802
            if not tokens.valid(self.headers.get(TOKEN_HEADER)):
                return self._reply(401, "Unauthorized")
            if self.path == IDENTITY_DOCUMENT:
                return self._reply(200, json.dumps(meta.identity_document(), indent=2), "application/json")
            if not self.path.startswith(META):
                return self._reply(404, "Not Found")
            answer = meta.lookup(self.path[len(META):])
            if answer is None:
                return self._reply(404, "Not Found")
            self._reply(200, answer)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up the FQDN of the address: a reverse DNS query that waits for
        # resolver timeouts in a namespace with no DNS server. IMDS has no use for it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


def serve(meta: Metadata, host: str, port: int) -> ThreadingHTTPServer:
    return _Server((host, port), make_handler(meta, Tokens()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hpq-rehearse-imds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="169.254.169.254:80")
    ap.add_argument("--instance-id", required=True)
    ap.add_argument("--instance-type", required=True)
    ap.add_argument("--region", required=True)
    ap.add_argument("--zone", required=True)
    ap.add_argument("--local-ipv4", required=True)
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--role", default="hpq-rehearsal-execution-role")
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
