"""IMDSv2 client against the IMDS stand-in (hpq.standins.imds, through the imds_factory fixture of tests/conftest.py)."""

from __future__ import annotations

import time

import pytest

from hpq.lifecycle.imds import ImdsClient, ImdsError

IID = "i-0123456789abcdef0"


def test_token_then_get_with_token(imds_factory):
    srv = imds_factory(v1_enabled=False)
    client = ImdsClient(srv.url)
    assert client.instance_id() == IID
    assert client.instance_type() == "p5.48xlarge"  # as EC2 says it: no ml. prefix
    # One PUT for the token, then every GET carries it.
    assert srv.log[0][:2] == ("PUT", "/latest/api/token")
    assert [c for c in srv.log if c[0] == "PUT"] == [srv.log[0]]
    assert all(had_token for method, _, had_token in srv.log if method == "GET")
    assert not client.v1


def test_v1_disabled_plain_get_is_refused_but_client_works(imds_factory):
    import urllib.error
    import urllib.request

    srv = imds_factory(v1_enabled=False)
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(srv.url + "/latest/meta-data/instance-id", timeout=2)
    assert exc.value.code == 401  # the server really enforces tokens
    assert ImdsClient(srv.url).instance_id() == IID


@pytest.mark.parametrize("status", [403, 404, 405])
def test_v1_fallback_only_when_token_call_is_refused(imds_factory, status):
    srv = imds_factory(v1_enabled=True, refuse_token=status)
    client = ImdsClient(srv.url, sleep=lambda s: None)
    assert client.instance_id() == IID
    assert client.v1
    assert srv.calls["PUT"] == 1  # refused once, not retried


def test_slow_token_call_is_retried_not_downgraded(imds_factory):
    # The first request hangs past the client timeout; the retry succeeds, still with a token.
    srv = imds_factory(v1_enabled=True, delay_s=1.5, slow_requests=1)
    client = ImdsClient(srv.url, timeout=0.5, backoff=0.05)
    assert client.instance_id() == IID
    assert not client.v1
    assert srv.calls["PUT"] == 2
    assert all(had_token for method, _, had_token in srv.log if method == "GET")


def test_always_slow_imds_fails_in_bounded_time_without_v1(imds_factory):
    srv = imds_factory(v1_enabled=True, delay_s=1.0, slow_requests=100)
    client = ImdsClient(srv.url, timeout=0.3, attempts=3, backoff=0.05)
    t0 = time.time()
    with pytest.raises(ImdsError, match="token request.*3 attempts"):
        client.instance_id()
    assert time.time() - t0 < 5
    assert srv.calls["GET"] == 0  # a timeout is no reason to try IMDSv1


def test_failing_imds_retried_with_backoff_then_succeeds(imds_factory):
    srv = imds_factory(fail_status=500, fail_requests=2)
    sleeps: list[float] = []
    client = ImdsClient(srv.url, sleep=sleeps.append, backoff=0.1)
    assert client.instance_id() == IID
    assert sleeps == [0.1, 0.2]  # exponential backoff between the three token attempts


def test_failing_imds_gives_up_with_clear_error(imds_factory):
    srv = imds_factory(fail_status=503, fail_requests=1000)
    client = ImdsClient(srv.url, attempts=3, sleep=lambda s: None)
    with pytest.raises(ImdsError, match="HTTP 503"):
        client.instance_id()
    assert srv.calls["PUT"] == 3


def test_unreachable_imds_is_an_error_not_a_v1_fallback():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    client = ImdsClient(f"http://127.0.0.1:{port}", attempts=2, sleep=lambda s: None)
    with pytest.raises(ImdsError, match="failed after 2 attempts"):
        client.instance_id()
    assert not client.v1


def test_expired_token_is_renewed_once(imds_factory):
    srv = imds_factory()
    client = ImdsClient(srv.url)
    assert client.instance_id() == IID
    srv.tokens.clear()  # the server forgets the token, like an expired TTL
    assert client.instance_type() == "p5.48xlarge"
    assert srv.calls["PUT"] == 2
