"""One way to reach AWS from every command: session, retried clients, one-line errors.

Every laptop command that talks to AWS goes through here so that ``--region``,
``--profile``, the ``AWS_*`` environment variables and ``AWS_ENDPOINT_URL``
(moto in tests) behave the same everywhere, throttling is retried, and botocore
exceptions become :class:`hpq.errors.HpqError` lines instead of tracebacks.
boto3/botocore are imported inside functions so ``hpq --help`` stays instant.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from hpq.aws.settings import region_problem
from hpq.errors import OperationFailed, UsageError

# Error codes AWS uses for "not allowed" across services.
_ACCESS_DENIED = {
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError",
    "UnauthorizedException", "Forbidden", "403",
}
# Credentials that exist but are wrong or expired: a configuration problem (exit 2).
_BAD_CREDENTIALS = {
    "InvalidClientTokenId", "UnrecognizedClientException", "ExpiredToken", "ExpiredTokenException",
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthFailure", "RequestExpired",
}
_THROTTLED = {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "SlowDown",
    "RequestThrottled", "RequestThrottledException", "Rate exceeded",
}
_NOT_FOUND = {"NoSuchBucket", "ResourceNotFound", "ResourceNotFoundException", "NoSuchEntity", "NotFound", "404"}

CREDENTIALS_HINT = (
    "configure credentials: `aws configure`, `aws sso login --profile P` then --profile P, "
    "or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
)


class CredentialsError(UsageError):
    """No usable AWS credentials: the user must configure them (exit 2)."""


class AccessDenied(OperationFailed):
    """The identity is not allowed to do the action (exit 1)."""


class Throttled(OperationFailed):
    """AWS kept throttling after every retry (exit 1)."""


class NotFound(UsageError):
    """The named stack, bucket or cluster does not exist (exit 2: bad input)."""


class AwsFailure(OperationFailed):
    """Any other AWS error, as one line (exit 1)."""


def make_session(region: str | None = None, profile: str | None = None) -> Any:
    """A boto3 Session; ``None`` falls back to AWS_REGION/AWS_DEFAULT_REGION/AWS_PROFILE and config files."""
    import boto3
    import botocore.exceptions

    try:
        # AWS_REGION first, as the AWS CLI v2 and SDKs read it (boto3 alone reads only AWS_DEFAULT_REGION).
        return boto3.Session(region_name=region or os.environ.get("AWS_REGION") or None, profile_name=profile or None)
    except botocore.exceptions.ProfileNotFound:
        raise CredentialsError(f"AWS profile {profile!r} not found; list them with `aws configure list-profiles`") from None


def _retry_config() -> Any:
    """Standard retry mode (retries throttling with backoff) unless the user chose one via env/config."""
    from botocore.config import Config

    retries: dict[str, Any] = {}
    if not os.environ.get("AWS_RETRY_MODE"):
        retries["mode"] = "standard"
    if not os.environ.get("AWS_MAX_ATTEMPTS"):
        retries["max_attempts"] = 8
    return Config(retries=retries, user_agent_extra="hpq") if retries else Config(user_agent_extra="hpq")


def client(session: Any, service: str, region: str | None = None) -> Any:
    """A client with throttling retried; AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_<SERVICE> are honoured by botocore."""
    import botocore.exceptions

    chosen = region or session.region_name
    bad = region_problem(chosen, (service,)) if chosen else None
    if bad:
        raise UsageError(f"region {chosen!r} {bad}")
    try:
        return session.client(service, region_name=region, config=_retry_config())
    except botocore.exceptions.NoRegionError:
        raise UsageError("no AWS region: pass --region or set AWS_REGION or AWS_DEFAULT_REGION") from None
    except ValueError as exc:  # botocore: "Invalid endpoint: ..." (config file endpoint_url), a bad setting
        raise UsageError(f"cannot create the AWS {service} client: {exc}") from None


def region_of(session: Any) -> str:
    """The session's region, or a one-line usage error if none is configured anywhere."""
    if not session.region_name:
        raise UsageError("no AWS region: pass --region or set AWS_REGION or AWS_DEFAULT_REGION")
    return str(session.region_name)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ClientError ('' for anything else)."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


_MARKUP = re.compile(r"^\s*<(?:!doctype|html|\?xml|head|body|title|h1)\b", re.I)
_TITLE = re.compile(r"<(title|h1)[^>]*>(.*?)</\1>", re.I | re.S)


def error_message(exc: BaseException) -> str:
    """The error's message on one line. An HTML page in its place (a proxy's or an endpoint's own 5xx page, which
    botocore's parsers keep whole as the message) becomes its status and title: ``HTTP 500: Internal Server Error``."""
    response = getattr(exc, "response", None) or {}
    msg = " ".join(str(response.get("Error", {}).get("Message") or exc).split())
    if _MARKUP.match(msg):
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or error_code(exc) or "?"
        title = _TITLE.search(msg)
        reason = re.sub(r"<[^>]*>", "", title.group(2)).strip() if title else "an HTML page, not an AWS answer"
        return f"HTTP {status}: {reason[:120]}"
    return msg


def translate(exc: BaseException, action: str) -> Exception | None:
    """The HpqError for a botocore exception, or None if it is not one we know."""
    import botocore.exceptions

    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return CredentialsError(f"no AWS credentials for {action}: {CREDENTIALS_HINT}")
    if isinstance(exc, (botocore.exceptions.TokenRetrievalError, botocore.exceptions.SSOTokenLoadError,
                        botocore.exceptions.UnauthorizedSSOTokenError)):
        return CredentialsError(f"AWS SSO session expired for {action}: run `aws sso login` and retry")
    if isinstance(exc, botocore.exceptions.NoRegionError):
        return UsageError("no AWS region: pass --region or set AWS_REGION or AWS_DEFAULT_REGION")
    if isinstance(exc, botocore.exceptions.ProfileNotFound):
        return CredentialsError(f"{exc}; list profiles with `aws configure list-profiles`")
    if isinstance(exc, botocore.exceptions.ConfigParseError):
        return UsageError(f"{exc}: fix or move it (see `aws configure`)")
    if isinstance(exc, (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError,
                        botocore.exceptions.ReadTimeoutError)):
        return AwsFailure(f"{action}: cannot reach AWS ({exc}); check network, --region and AWS_ENDPOINT_URL")
    if isinstance(exc, botocore.exceptions.ParamValidationError):
        return UsageError(f"{action}: {' '.join(str(exc).split())}")
    if isinstance(exc, botocore.exceptions.ClientError):
        code, msg = error_code(exc), error_message(exc)
        if code in _BAD_CREDENTIALS:
            return CredentialsError(f"AWS rejected the credentials for {action} ({code}): {CREDENTIALS_HINT}")
        if code in _ACCESS_DENIED:
            return AccessDenied(f"access denied: not allowed to {action} ({msg})")
        if code in _THROTTLED or "rate exceeded" in msg.lower():
            return Throttled(f"{action}: AWS is throttling requests even after retries; wait a minute and retry")
        if code == "ValidationError" and "does not exist" in msg:
            return NotFound(f"{action}: {msg}")
        if code in _NOT_FOUND:
            return NotFound(f"{action}: {msg or code}")
        return AwsFailure(f"{action} failed ({code}): {msg}")
    if type(exc).__name__ == "ResponseParserError" or isinstance(exc, botocore.exceptions.BotoCoreError):
        if type(exc).__name__ == "ResponseParserError":
            return AwsFailure(f"{action} failed: the endpoint returned an unreadable response (HTTP 5xx?)")
        return AwsFailure(f"{action} failed: {' '.join(str(exc).split())}")
    return None


@contextlib.contextmanager
def aws_errors(action: str) -> Iterator[None]:
    """Turn botocore exceptions raised inside into one-line HpqErrors naming ``action`` (e.g. 's3:PutObject')."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - filtered by translate()
        mapped = translate(exc, action)
        if mapped is None:
            raise
        raise mapped from None
