"""aws_session: retried throttling and one-line errors, over real HTTP.

A tiny local HTTP server plays CloudFormation's DescribeStacks (query protocol XML): it throttles
or denies on request, so botocore's real retry logic and error parsing run. It is a stand-in for
AWS's throttling/denial behaviour, which moto does not emulate.
"""

from __future__ import annotations

import http.server
from collections.abc import Iterator

import botocore.exceptions
import pytest

from hpq.aws import session, stacks
from hpq.cli.main import main
from hpq.errors import OperationFailed, UsageError
from tests.moto_server import set_aws_env
from tests.support import serve_http

NS = "http://cloudformation.amazonaws.com/doc/2010-05-15/"
OK = (f'<DescribeStacksResponse xmlns="{NS}"><DescribeStacksResult><Stacks><member><StackName>s</StackName>'
      "<StackId>arn:aws:cloudformation:us-east-1:1:stack/s/1</StackId><StackStatus>CREATE_COMPLETE</StackStatus>"
      "<CreationTime>2026-01-01T00:00:00Z</CreationTime></member></Stacks></DescribeStacksResult>"
      "<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></DescribeStacksResponse>")


def error(code: str, message: str) -> str:
    return (f'<ErrorResponse xmlns="{NS}"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}'
            "</Message></Error><RequestId>r</RequestId></ErrorResponse>")


class FakeCfn:
    """Answers the first ``fail`` requests with (status, body) ``failure``, then OK."""

    def __init__(self) -> None:
        self.fail = 0
        self.failure = (400, error("Throttling", "Rate exceeded"))
        self.requests = 0


@pytest.fixture
def fake_cfn(monkeypatch, tmp_path) -> Iterator[FakeCfn]:
    state = FakeCfn()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.requests += 1
            status, body = (state.failure if state.requests <= state.fail else (200, OK))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = serve_http(Handler)
    set_aws_env(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}", tmp_path)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_throttling_is_retried(fake_cfn):
    fake_cfn.fail = 1
    cfn = session.client(session.make_session("us-east-1"), "cloudformation")
    assert stacks.describe(cfn, "s").status == "CREATE_COMPLETE"
    assert fake_cfn.requests == 2


def test_throttling_after_retries_is_one_line(fake_cfn, monkeypatch, capsys):
    fake_cfn.fail = 10**6
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with pytest.raises(SystemExit) as exc:
        main(["status", "s"])
    assert exc.value.code == 1 and fake_cfn.requests == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "throttling" in err[0]


def test_access_denied_names_the_action(fake_cfn, capsys):
    fake_cfn.fail = 10**6
    fake_cfn.failure = (403, error("AccessDenied", "User: arn:aws:iam::1:user/u is not authorized to perform: "
                                                   "cloudformation:DescribeStacks"))
    with pytest.raises(SystemExit) as exc:
        main(["status", "s"])
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "access denied" in err[0] and "cloudformation:DescribeStacks" in err[0]


def test_unknown_stack_is_exit_2(fake_cfn, capsys):
    fake_cfn.fail = 10**6
    fake_cfn.failure = (400, error("ValidationError", "Stack with id nope does not exist"))
    with pytest.raises(SystemExit) as exc:
        main(["stack-errors", "nope"])
    assert exc.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_endpoint_url_is_honoured(fake_cfn):
    """AWS_ENDPOINT_URL alone routes the client (botocore >= 1.31 reads it natively)."""
    cfn = session.client(session.make_session("us-east-1"), "cloudformation")
    assert cfn.meta.endpoint_url.startswith("http://127.0.0.1:")


def test_translations():
    assert isinstance(session.translate(botocore.exceptions.NoCredentialsError(), "x"), UsageError)
    expired = botocore.exceptions.ClientError({"Error": {"Code": "ExpiredToken", "Message": "expired"}}, "Op")
    assert session.translate(expired, "x").exit_code == 2
    denied = botocore.exceptions.ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Op")
    assert isinstance(session.translate(denied, "s3:PutObject"), OperationFailed)
    assert "s3:PutObject" in str(session.translate(denied, "s3:PutObject"))
    assert session.translate(ValueError("x"), "x") is None
    with pytest.raises(UsageError):
        session.make_session(profile="surely-not-a-profile-hpq")
