"""A local instance-metadata server (stand-in for EC2 IMDS) that speaks the IMDSv2 protocol.

It is a stand-in: real IMDS exists only on EC2. It enforces what matters to the
client: ``PUT /latest/api/token`` with the TTL header returns a token, GETs must carry
``X-aws-ec2-metadata-token`` when v1 is disabled (401 otherwise, as IMDS does), and
modes make it refuse tokens (a v1-only IMDS), answer slowly, or fail. Several nodes
share one server: ``http://127.0.0.1:PORT/<node>`` is node ``<node>``'s IMDS.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class FakeImds:
    def __init__(self, nodes: dict[str, dict[str, str]], v1_enabled: bool = False, refuse_token: int | None = None,
                 delay_s: float = 0.0, slow_requests: int = 0, fail_status: int | None = None,
                 fail_requests: int = 0):
        self.nodes = nodes  # prefix ("" for the root) -> {"instance-id": ..., "instance-type": ...}
        self.v1_enabled = v1_enabled
        self.refuse_token = refuse_token
        self.delay_s = delay_s
        self.slow_requests = slow_requests
        self.fail_status = fail_status
        self.fail_requests = fail_requests
        self.tokens: set[str] = set()
        self.calls: Counter = Counter()
        self.log: list[tuple[str, str, bool]] = []  # (method, path, had token)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def node_url(self, node: str) -> str:
        return f"{self.url}/{node}"

    def start(self) -> FakeImds:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _reply(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _gate(self) -> bool:
                with imds._lock:
                    n = sum(imds.calls.values())
                    imds.calls[self.command] += 1
                    imds.log.append((self.command, self.path, "X-aws-ec2-metadata-token" in self.headers))
                if n < imds.slow_requests and imds.delay_s:
                    time.sleep(imds.delay_s)
                if n < imds.fail_requests and imds.fail_status:
                    self._reply(imds.fail_status, "failure injected")
                    return False
                return True

            def _split(self):
                parts = self.path.lstrip("/").split("/", 1)
                if parts[0] in imds.nodes and parts[0] != "latest":
                    return parts[0], "/" + (parts[1] if len(parts) > 1 else "")
                return "", self.path

            def do_PUT(self):  # noqa: N802
                if not self._gate():
                    return
                _, path = self._split()
                if path != "/latest/api/token":
                    return self._reply(404)
                if imds.refuse_token:
                    return self._reply(imds.refuse_token, "token API not available")
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    return self._reply(400, "missing or bad TTL header")
                token = secrets.token_hex(16)
                with imds._lock:
                    imds.tokens.add(token)
                self._reply(200, token)

            def do_GET(self):  # noqa: N802
                if not self._gate():
                    return
                node, path = self._split()
                token = self.headers.get("X-aws-ec2-metadata-token")
                if token is not None and token not in imds.tokens:
                    return self._reply(401, "bad token")
                if token is None and not imds.v1_enabled:
                    return self._reply(401, "IMDSv1 disabled")
                data = imds.nodes.get(node)
                prefix = "/latest/meta-data/"
                if data is None or not path.startswith(prefix):
                    return self._reply(404)
                key = path[len(prefix):]
                if key == "placement/region":
                    return self._reply(200, data.get("region", "us-west-2"))
                if key not in data:
                    return self._reply(404)
                self._reply(200, data[key])

        return Handler


@pytest.fixture
def imds_factory():
    """Start FakeImds servers with the given modes; all stopped at teardown."""
    started: list[FakeImds] = []

    def make(nodes=None, **kw) -> FakeImds:
        srv = FakeImds(nodes or {"": {"instance-id": "i-0123456789abcdef0", "instance-type": "ml.p5.48xlarge"}},
                       **kw).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()
