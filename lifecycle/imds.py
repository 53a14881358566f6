"""IMDSv2 client: token PUT, GET with the token, retries with backoff, short timeouts.

HyperPod enforces IMDSv2; a plain GET gets nothing, which once made controllers
identify as workers. IMDSv1 is tried only when the token call is *refused* with an
HTTP answer (403/404/405: an IMDS that does not speak v2), never on a timeout or a
connection error (that is an unreachable IMDS, and v1 would not help).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from typing import Callable, Optional

TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
REFUSED = (403, 404, 405)


class ImdsError(Exception):
    pass


class ImdsClient:
    def __init__(self, base_url: str = "http://169.254.169.254", timeout: float = 2.0, attempts: int = 4,
                 backoff: float = 0.5, ttl: int = 21600, sleep: Callable[[float], None] = time.sleep):
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.ttl = ttl
        self.sleep = sleep
        self.token: Optional[str] = None
        self.v1 = False  # set once the token call was refused

    def _open(self, req: urllib.request.Request) -> str:
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return resp.read().decode("utf-8", "replace")

    def _retrying(self, what: str, call):
        """Run ``call`` with retries; HTTP errors in REFUSED (and 401) are returned to the caller."""
        last = None
        for attempt in range(self.attempts):
            try:
                return call()
            except urllib.error.HTTPError as exc:
                if exc.code in REFUSED or exc.code == 401:
                    raise
                last = "HTTP %d" % exc.code
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, bad replies
                reason = getattr(exc, "reason", exc)
                last = "%s" % (reason,)
            if attempt + 1 < self.attempts:
                self.sleep(self.backoff * (2 ** attempt))
        raise ImdsError("IMDS %s at %s failed after %d attempts: %s" % (what, self.base, self.attempts, last))

    def _fetch_token(self) -> Optional[str]:
        req = urllib.request.Request(self.base + TOKEN_PATH, method="PUT", data=b"",
                                     headers={TTL_HEADER: str(self.ttl)})
        try:
            return self._retrying("token request", lambda: self._open(req).strip())
        except urllib.error.HTTPError as exc:
            if exc.code in REFUSED:
                self.v1 = True  # this IMDS refuses v2: the only case where v1 is worth a try
                return None
            raise ImdsError("IMDS token request at %s answered HTTP %d" % (self.base, exc.code)) from None

    def get(self, path: str) -> str:
        """GET a metadata path such as ``/latest/meta-data/instance-id``."""
        if self.token is None and not self.v1:
            self.token = self._fetch_token()
        for refreshed in (False, True):
            headers = {TOKEN_HEADER: self.token} if self.token else {}
            req = urllib.request.Request(self.base + "/" + path.lstrip("/"), headers=headers)
            try:
                return self._retrying("GET " + path, lambda r=req: self._open(r))
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and self.token and not refreshed:
                    self.token = self._fetch_token()  # expired token: get a new one once
                    continue
                raise ImdsError("IMDS GET %s answered HTTP %d%s" % (
                    path, exc.code, " (IMDSv1 fallback; IMDSv2 token was refused)" if self.v1 else "")) from None
        raise ImdsError("IMDS GET %s: token rejected twice" % path)

    def instance_id(self) -> str:
        return self.get("/latest/meta-data/instance-id").strip()

    def instance_type(self) -> str:
        return self.get("/latest/meta-data/instance-type").strip()

    def region(self) -> str:
        return self.get("/latest/meta-data/placement/region").strip()
