"""The settings that decide how hpq reaches AWS, checked offline: regions and endpoints from botocore's
own data, the AWS_* environment, profiles, config files and credentials.

Library code (``hpq.aws.session`` checks a client's region here); the command line's ``--region``
type and ``aws_options`` (hpq.cli) call the same functions. botocore is imported inside the
functions that read its data, so importing this module costs nothing at ``hpq --help``.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable

from hpq.errors import UsageError
from hpq.text import file_kind, show, unprintable, unusable


@functools.lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every region in botocore's endpoint data, all partitions (read from disk, no network)."""
    import botocore.loaders

    data = botocore.loaders.create_loader().load_data("endpoints")
    return frozenset(r for part in data.get("partitions", []) for r in part.get("regions", {}))


@functools.lru_cache(maxsize=32)
def service_regions(service: str) -> frozenset[str]:
    """Regions botocore knows an endpoint for ``service`` in, all partitions (empty: a global service)."""
    import botocore.session

    session = botocore.session.get_session()
    out: set[str] = set()
    for partition in session.get_available_partitions():
        out.update(session.get_available_regions(service, partition_name=partition))
    return frozenset(out)


def region_problem(region: str, services: Iterable[str]) -> str | None:
    """Why ``region`` cannot serve ``services`` according to botocore's endpoint data, or None."""
    if not re.fullmatch(r"[a-z]{2}(-[a-z0-9]+)+-[0-9]+", region):
        return "is not an AWS region name (like us-west-2)"
    if region not in known_regions():
        return "is not a region this botocore knows (upgrade botocore if the region is new)"
    for service in services:
        regions = service_regions(service)
        if regions and region not in regions:
            return f"has no {service} endpoint in botocore's endpoint data"
    return None


def endpoint_problem(url: str) -> str | None:
    """Why an endpoint URL cannot work, or None (botocore itself raises ValueError at client creation)."""
    from urllib.parse import urlsplit

    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

    if unprintable(url) or not url.strip():
        return "is empty or not printable UTF-8"
    if any(ch.isspace() for ch in url):
        return "contains white space"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:5000"
    if not (is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url)):
        return "is not a URL botocore accepts"
    return None


def check_endpoint_environment(environ: dict[str, str] | None = None) -> None:
    """AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> must be URLs botocore can use."""
    env = os.environ if environ is None else environ
    for key in sorted(env):
        if key == "AWS_ENDPOINT_URL" or key.startswith("AWS_ENDPOINT_URL_"):
            bad = endpoint_problem(env[key])
            if bad:
                raise UsageError(f"{key}={show(env[key])} {bad}")


# Settings botocore reads from the environment, with the values it accepts (botocore/configprovider.py,
# https://docs.aws.amazon.com/sdkref/latest/guide/settings-reference.html). A bad one would otherwise
# surface as a confusing error at the first client or request.
_ENV_CHOICES = {
    "AWS_RETRY_MODE": ("legacy", "standard", "adaptive"),
    "AWS_STS_REGIONAL_ENDPOINTS": ("legacy", "regional"),
    "AWS_USE_FIPS_ENDPOINT": ("true", "false"),
    "AWS_USE_DUALSTACK_ENDPOINT": ("true", "false"),
}


# Credentials from the environment (botocore.credentials.EnvProvider): a newline or space in one of them
# was a ValueError inside the HTTP layer at the first request.
_CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def credential_problem(value: str) -> str | None:
    """Why a credential value cannot be sent in an HTTP header, or None."""
    if not value:
        return "is set but empty: unset it or give the value"
    if not value.isascii() or any(ch.isspace() or not ch.isprintable() for ch in value):
        return "holds white space, control or non-ASCII characters: copy it again without them"
    return None


def check_aws_environment(environ: dict[str, str] | None = None) -> None:
    """Endpoints, retry settings and the files botocore will read, checked before any client exists."""
    env = os.environ if environ is None else environ
    check_endpoint_environment(env)
    if env.get("AWS_MAX_ATTEMPTS", "").strip():
        value = env["AWS_MAX_ATTEMPTS"]
        if not re.fullmatch(r"\s*[0-9]{1,4}\s*", value) or int(value) < 1:
            raise UsageError(f"AWS_MAX_ATTEMPTS={show(value)} must be a whole number of attempts, at least 1")
    for key, allowed in _ENV_CHOICES.items():
        value = env.get(key)
        # Exactly as botocore compares them: 'Standard' is refused at the first client, so here too.
        if value is not None and (value.lower() if allowed == ("true", "false") else value) not in allowed:
            raise UsageError(f"{key}={show(value)} must be one of: {', '.join(allowed)}")
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if key in env and not env[key].strip():  # '' would fall through to another region source
            raise UsageError(f"{key} is set but empty: unset it or name a region (like us-west-2)")
    for key in _CREDENTIAL_VARIABLES:
        if key in env:
            bad = credential_problem(env[key])
            if bad:
                raise UsageError(f"{key} {bad}")
    for key in ("AWS_CA_BUNDLE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        value = env.get(key)
        if not value:
            continue
        path = os.path.expanduser(value)
        must_exist = key == "AWS_CA_BUNDLE"  # a missing config file is just an empty one
        if not os.path.lexists(path):
            if must_exist:
                raise UsageError(f"{key}={show(value)} does not exist")
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise UsageError(f"{key}={show(value)}: {exc.strerror}") from None
        if not stat.S_ISREG(mode) and not (key != "AWS_CA_BUNDLE" and path == os.devnull):  # /dev/null: none
            raise UsageError(f"{key}={show(value)} is {file_kind(mode)}, not a regular file")


def resolve_region(region: str | None, profile: str | None) -> str | None:
    """The region a command will use: --region, AWS_REGION, AWS_DEFAULT_REGION, then the profile's config.

    AWS_REGION is what the AWS SDKs and CLI v2 read first; boto3 alone reads only AWS_DEFAULT_REGION.
    """
    if region:
        return region
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(key):
            return os.environ[key]
    import botocore.exceptions
    import botocore.session

    try:
        return botocore.session.Session(profile=profile or None).get_config_variable("region") or None
    except botocore.exceptions.ProfileNotFound:
        name = profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
        raise UsageError(f"AWS profile {show(name)} not found; list them with `aws configure list-profiles`") from None


def check_profile(profile: str | None) -> None:
    """The AWS config files must parse; --profile (or AWS_PROFILE) must name a profile in them."""
    import botocore.exceptions
    import botocore.session

    if profile is None:
        for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            if key in os.environ and not os.environ[key].strip():
                raise UsageError(f"{key} is set but empty: unset it or name a profile")  # botocore would look for ''
    name = profile if profile is not None else (os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"))
    if name is not None:
        bad = unusable(name)
        if bad:
            raise UsageError(f"AWS profile {show(name)} {bad}")
    try:
        profiles = botocore.session.Session(profile=None).available_profiles
    except botocore.exceptions.ConfigParseError as exc:
        raise UsageError(f"{exc}: fix or move it (see `aws configure`)") from None
    # A profile that is named must exist, "default" included: botocore's Session.get_scoped_config treats a
    # missing default profile as empty only when no profile is named at all.
    if name is not None and name not in profiles:
        raise UsageError(f"AWS profile {show(name)} not found; list them with `aws configure list-profiles`")


def check_aws_inputs(region: str | None, profile: str | None, services: Iterable[str]) -> str | None:
    """Everything about reaching AWS that can be checked offline; returns the region to use, if any."""
    check_aws_environment()
    check_profile(profile)
    chosen = resolve_region(region, profile)
    if chosen:
        source = "--region" if region else next((k for k in ("AWS_REGION", "AWS_DEFAULT_REGION")
                                                 if os.environ.get(k) == chosen), "the profile's region")
        bad = region_problem(chosen, services)
        if bad:
            raise UsageError(f"{source} {show(chosen)} {bad}")
    check_botocore_configuration(profile, chosen, services)
    return chosen


def check_botocore_configuration(profile: str | None, region: str | None, services: Iterable[str]) -> None:
    """Resolve the configuration as botocore will, before any call, so a bad setting is exit 2 now.

    Creating a client (the command's first service) reads every client setting from the environment
    and the config files and validates it offline (retry_mode, max_attempts, defaults_mode, request_checksum_calculation,
    response_checksum_validation, sts_regional_endpoints, endpoint URLs, ...: botocore/configprovider.py,
    botocore/args.py); resolving the credential chain finds source_profile loops, credential_process
    programs that do not run and web identity token files that are missing. Without a region the
    client check is left to the command (some paths need no AWS: hpq remote --proxy-command).
    """
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile or None)
        services = tuple(services)
        if region and services:  # one client checks every client-wide setting; more would cost ~0.2 s each
            # Placeholder keys: the client is only built, never used, and must not run the credential chain
            # (a credential_process would run twice; the chain is checked below, once).
            session.create_client(services[0], region_name=region, aws_access_key_id="AKIDHPQSETTINGSCHECK",
                                  aws_secret_access_key="unused")
        _check_web_identity(session)
        process = _scoped(session).get("credential_process")
        if process:  # check the program, do not run it: it may prompt (a hardware key), and the command runs it
            _check_credential_process(process)
            return
        creds = session.get_credentials()
    except botocore.exceptions.ProfileNotFound as exc:
        raise UsageError(f"{exc}; list them with `aws configure list-profiles`") from None
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise UsageError(f"AWS configuration: {' '.join(str(exc).split())}") from None
    except OSError as exc:  # credential_process: the program does not exist or cannot run
        what = f" {show(exc.filename)}" if exc.filename else ""
        raise UsageError(f"AWS credentials: cannot run{what}: {exc.strerror or exc}") from None
    if type(creds).__name__ == "Credentials":  # static (not refreshable): what will be sent as is
        for label, value in (("access key id", creds.access_key), ("secret access key", creds.secret_key),
                             ("session token", creds.token)):
            bad = credential_problem(value) if value is not None else None
            if bad:
                raise UsageError(f"the AWS {label} {bad}")


def _scoped(session: object) -> dict:
    import botocore.exceptions

    try:
        return session.get_scoped_config()  # type: ignore[attr-defined,no-any-return]
    except botocore.exceptions.ProfileNotFound:
        return {}


def _check_credential_process(command: str) -> None:
    """The profile's credential_process must name a program that exists and may be run (botocore splits
    the setting with shlex and runs it at the first call, where a missing one was an uncaught OSError).
    The setting: https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-sourcing-external.html"""
    import shlex
    import shutil

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"AWS credentials: credential_process {show(command)} cannot be split ({exc})") from None
    if not words:
        raise UsageError("AWS credentials: credential_process is empty")
    program = words[0]
    found = shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK)
                                                                 and os.path.isfile(program) else None)
    if not found:
        why = "No such file or directory" if not os.path.lexists(os.path.expanduser(program)) else "not executable"
        raise UsageError(f"AWS credentials: cannot run {show(program)}: {why}")


def _check_web_identity(session: object) -> None:
    """A web identity token file (AWS_WEB_IDENTITY_TOKEN_FILE or the profile's) must be a readable file:
    botocore reads it only at the first call, where a missing one was an uncaught FileNotFoundError.
    The settings: https://docs.aws.amazon.com/sdkref/latest/guide/feature-assume-role-credentials.html"""
    path = os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE")
    source = "AWS_WEB_IDENTITY_TOKEN_FILE"
    if not path:
        path = _scoped(session).get("web_identity_token_file")
        source = "web_identity_token_file"
    if not path:
        return
    try:
        mode = os.stat(os.path.expanduser(path)).st_mode
    except OSError as exc:
        raise UsageError(f"{source}={show(path)}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{source}={show(path)} is {file_kind(mode)}, not a regular file")
