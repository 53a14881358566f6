"""The one way a stand-in listens: a threaded HTTP(S) server on a host and port, served from a daemon thread.

Used by the rehearsal's stand-ins (hpq.standins.amp, the artifact mirror of rehearsal/stages/observe.py) and by
the tests' local servers (tests/support.serve_http).
"""

from __future__ import annotations

import http.server
import ssl
import threading


def serve(handler_cls: type, host: str = "127.0.0.1", port: int = 0,
          ssl_ctx: ssl.SSLContext | None = None) -> http.server.ThreadingHTTPServer:
    """An HTTP(S) server on ``host:port`` (0: a free port) serving ``handler_cls`` from a daemon thread."""
    server = http.server.ThreadingHTTPServer((host, port), handler_cls)
    server.daemon_threads = True
    if ssl_ctx is not None:
        server.socket = ssl_ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
