"""FSx for Lustre: find the cluster's filesystem by its exact tag, wait for it, mount it at /fsx.

Discovery compares the tag value for equality (a substring match makes cluster
"train" mount "train-2"'s filesystem). boto3 when importable, else the ``aws`` CLI;
both read every page and retry API throttling with backoff.

The names come from configuration first: ``fsx_dns_name``/``fsx_mountname`` in hpq-cluster.json (written at
deploy time from the Storage stack's FileSystem: Fn::GetAtt DNSName and LustreMountName) or in
provisioning_parameters.json (AWS's reference lifecycle_script.py reads them from there). Then the step makes
no FSx API call at all. Tag discovery is the fallback; its calls run seconds after boot, while HyperPod's host
agent restarts systemd-resolved (AWS's reference on_create.sh sleeps 30 s for it: awsome-distributed-ai
1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/on_create.sh), so connection and
name-resolution failures (botocore EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
ConnectionClosedError, socket.gaierror; the aws CLI's "Could not connect to the endpoint URL" and kin) are
retried like throttling: bounded, capped exponential backoff with jitter, every attempt logged.
Every name, from any source, is checked (fields.dns_name, fields.mount_name) before a mount or fstab line is
built from it: a blank or line break fails the step with one line, never a spliced fstab entry.

Mounting follows what the node really shows: the mount counts as done when the mount table has a
``lustre`` mount at /fsx whose source ends in ``:/<MountName>`` (the MGS appears there as an IP NID,
see mounts.py), autofs trap lines skipped. Before mounting, ``modprobe lnet`` and ``modprobe lustre``
(AWS's reference mount_fsx.sh and EKS on_create_main.sh load both; loading a loaded module changes
nothing). HyperPod's host agent restarts systemd-resolved while lifecycle scripts run (the reference
sleeps 30 s for it), so a failed mount is retried a bounded number of times (the reference: five),
each retry logged and preceded by a bounded wait for the DNS name to resolve. The fstab entry is one
managed block, replaced on every run; the write test runs only once the mount is live. A second run
finds the mount and changes nothing. No filesystem found: a warning, not a failure (the step's result is
``Degraded``, so its end is logged as a warning).

On EKS nodes the step only loads the modules: pods mount FSx through the FSx CSI driver (eks_modules_only).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from typing import Callable, Dict, List, Optional

from . import fields, files, identity, mounts, names
from .context import Degraded
from .resource_config import EKS

MOUNT_OPTIONS = "relatime,flock"
# _netdev: wait for the network; x-systemd.automount: a slow Lustre does not hold up boot. Required unit:
# network-online.target, which every systemd distro has (Ubuntu, HyperPod's OS, has no network.service,
# and a Requires= on a unit that does not exist fails the mount at reboot).
FSTAB_OPTIONS = "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target"
THROTTLE_CODES = ("Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
                  "TooManyRequestsException", "SlowDown", "RequestThrottled")


class FsxError(Exception):
    pass


class Retryable(Exception):
    """A failure worth another try after a pause."""

    what = "failing"


class Throttled(Retryable):
    what = "throttled"


class Unreachable(Retryable):
    """The endpoint could not be reached: no connection, a timeout, or its name did not resolve."""

    what = "unreachable"


# What botocore prints for its connection errors (botocore.exceptions: EndpointConnectionError,
# ConnectionClosedError, ConnectTimeoutError, ReadTimeoutError, ProxyConnectionError), which the aws CLI
# shows on stderr, plus the resolver's own words (getaddrinfo: EAI_AGAIN, EAI_NONAME).
UNREACHABLE_MESSAGES = ("Could not connect to the endpoint URL", "Connection was closed before we received",
                        "Connect timeout on endpoint URL", "Read timeout on endpoint URL",
                        "Failed to connect to proxy URL", "Temporary failure in name resolution",
                        "Name or service not known", "nodename nor servname provided")


def with_backoff(call: Callable, attempts: int = 8, base: float = 0.5, cap: float = 20.0,
                 sleep: Callable[[float], None] = time.sleep, log=None):
    """Retry ``call`` while it raises Retryable (throttled, unreachable), with capped exponential backoff
    and jitter; every retry is logged. At most ``attempts`` calls and about ``sum(min(cap, base*2^i))`` s."""
    for attempt in range(attempts):
        try:
            return call()
        except Retryable as exc:
            if attempt + 1 >= attempts:
                raise FsxError("FSx API still %s after %d attempts: %s" % (exc.what, attempts, exc)) from None
            pause = min(cap, base * (2 ** attempt)) * (0.5 + random.random() / 2)
            if log is not None:
                log.warning("FSx API %s (attempt %d of %d): %s; retrying in %.1fs",
                            exc.what, attempt + 1, attempts, exc, pause)
            sleep(pause)
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------- API access


def _boto3_pages(region: Optional[str], file_system_ids: Optional[List[str]], backoff: Dict) -> List[Dict]:
    import boto3  # optional on the node: the CLI fallback below covers its absence
    from botocore.config import Config
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    # botocore's own retries off: with_backoff does it, visibly and testably.
    client = boto3.client("fsx", region_name=region, config=Config(retries={"total_max_attempts": 1}))
    out: List[Dict] = []
    token = None
    while True:
        kwargs: Dict = {}
        if file_system_ids:
            kwargs["FileSystemIds"] = file_system_ids
        if token:
            kwargs["NextToken"] = token

        def page(kw=kwargs):
            try:
                return client.describe_file_systems(**kw)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in THROTTLE_CODES:
                    raise Throttled(code) from None
                raise FsxError("describe_file_systems failed: %s" % exc) from None
            except (ConnectionError, HTTPClientError, OSError) as exc:
                # EndpointConnectionError (DNS or connect), ConnectTimeoutError, ReadTimeoutError,
                # ConnectionClosedError; socket.gaierror should one escape botocore's wrapping.
                raise Unreachable("%s: %s" % (type(exc).__name__, exc)) from None

        resp = with_backoff(page, **backoff)
        out += resp.get("FileSystems", [])
        token = resp.get("NextToken")
        if not token:
            return out


def _cli_pages(region: Optional[str], file_system_ids: Optional[List[str]], backoff: Dict) -> List[Dict]:
    aws = shutil.which("aws")
    if not aws:
        raise FsxError("neither boto3 nor the aws CLI is available to look up FSx")
    argv = [aws, "fsx", "describe-file-systems", "--output", "json"]
    if region:
        argv += ["--region", region]
    if os.environ.get("AWS_ENDPOINT_URL"):
        argv += ["--endpoint-url", os.environ["AWS_ENDPOINT_URL"]]
    if file_system_ids:
        argv += ["--file-system-ids"] + list(file_system_ids)

    def call():
        # The CLI follows NextToken itself and prints all pages as one document.
        try:
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                 timeout=120, env=dict(os.environ, AWS_MAX_ATTEMPTS="1", AWS_PAGER=""))
        except subprocess.TimeoutExpired:
            raise Unreachable("aws fsx describe-file-systems gave no answer in 120s") from None
        if res.returncode != 0:
            if any(code in res.stderr for code in THROTTLE_CODES) or "Rate exceeded" in res.stderr:
                raise Throttled(res.stderr.strip()[-200:])
            if any(msg in res.stderr for msg in UNREACHABLE_MESSAGES):
                raise Unreachable(res.stderr.strip()[-300:])
            raise FsxError("aws fsx describe-file-systems failed: %s" % res.stderr.strip()[-400:])
        try:
            doc = json.loads(res.stdout or "{}")
        except ValueError as exc:
            raise FsxError("aws fsx describe-file-systems printed no JSON: %s" % exc) from None
        return doc if isinstance(doc, dict) else {}

    return with_backoff(call, **backoff).get("FileSystems", [])


def describe_file_systems(region: Optional[str] = None, file_system_ids: Optional[List[str]] = None,
                          use_boto3: Optional[bool] = None, backoff: Optional[Dict] = None) -> List[Dict]:
    backoff = backoff or {}
    if use_boto3 is None:
        try:
            import boto3  # noqa: F401
            use_boto3 = True
        except ImportError:
            use_boto3 = False
    if use_boto3:
        return _boto3_pages(region, file_system_ids, backoff)
    return _cli_pages(region, file_system_ids, backoff)


def tag_value(fs: Dict, key: str) -> Optional[str]:
    for tag in fs.get("Tags") or []:
        if tag.get("Key") == key:
            return tag.get("Value")
    return None


def find_cluster_filesystem(cluster_name: str, region: Optional[str] = None, **kw) -> Optional[Dict]:
    """The cluster's Lustre filesystem by exact tag, or None; ambiguity is an error, not a guess."""
    matches = [fs for fs in describe_file_systems(region, **kw)
               if fs.get("FileSystemType") == "LUSTRE" and tag_value(fs, names.CLUSTER_TAG_KEY) == cluster_name
               and fs.get("Lifecycle") not in ("DELETING", "FAILED")]
    if len(matches) > 1:
        raise FsxError("%d Lustre filesystems carry %s=%s: %s" % (
            len(matches), names.CLUSTER_TAG_KEY, cluster_name, ", ".join(f["FileSystemId"] for f in matches)))
    return matches[0] if matches else None


def wait_available(fs: Dict, region: Optional[str], timeout: float, poll: float = 10.0, log=None, **kw) -> Dict:
    deadline = time.time() + timeout
    while fs.get("Lifecycle") != "AVAILABLE":
        state = fs.get("Lifecycle")
        if state in ("FAILED", "DELETING", "MISCONFIGURED"):
            raise FsxError("FSx %s is %s" % (fs.get("FileSystemId"), state))
        if time.time() >= deadline:
            raise FsxError("FSx %s still %s after %.0fs" % (fs.get("FileSystemId"), state, timeout))
        if log:
            log.info("FSx %s is %s; waiting for AVAILABLE", fs.get("FileSystemId"), state)
        time.sleep(poll)
        found = describe_file_systems(region, [fs["FileSystemId"]], **kw)
        if not found:
            raise FsxError("FSx %s disappeared while waiting" % fs.get("FileSystemId"))
        fs = found[0]
    return fs


# ---------------------------------------------------------------------------- mounting


def mount_targets(ctx) -> List[str]:
    """How /fsx may appear in the mount table: at its place under HPQ_ROOT, and as the node path itself."""
    target = ctx.path(names.FSX_MOUNT_POINT)
    return [target] if target == names.FSX_MOUNT_POINT else [target, names.FSX_MOUNT_POINT]


def current_mount(ctx) -> Optional[mounts.Mount]:
    """The filesystem mounted at /fsx, or None. An autofs trap alone is touched once so systemd mounts."""
    targets = mount_targets(ctx)
    table = mounts.read(ctx.s.proc_mounts)
    found = mounts.at(table, targets)
    if found is None and mounts.at(table, targets, include_autofs=True) is not None:
        try:
            os.listdir(ctx.path(names.FSX_MOUNT_POINT))
        except OSError:
            pass
        found = mounts.at(mounts.read(ctx.s.proc_mounts), targets)
    return found


def shared_dir(ctx) -> Optional[str]:
    """The node's /fsx when it is a live mount (what other steps share keys through), else None."""
    return ctx.path(names.FSX_MOUNT_POINT) if current_mount(ctx) else None


def checked_names(dns, mount_name, origin: str):
    """(dns, mount_name) when both are what FSx hands out (fields.py); FsxError naming ``origin`` otherwise."""
    try:
        return fields.dns_name(dns, "fsx_dns_name"), fields.mount_name(mount_name, "fsx_mountname")
    except fields.FieldError as exc:
        raise FsxError("%s (from %s): not mounting, no fstab line written" % (exc, origin)) from None


def lustre_source(dns: str, mount_name: str) -> str:
    return "%s@tcp:/%s" % (dns, mount_name)


def fstab_line(dns: str, mount_name: str) -> str:
    """The fstab line for /fsx, from checked fields only: six blank-separated fields (fstab(5))."""
    dns, mount_name = checked_names(dns, mount_name, "the fstab entry")
    return "%s %s lustre %s 0 0" % (lustre_source(dns, mount_name), names.FSX_MOUNT_POINT, FSTAB_OPTIONS)


def update_fstab(ctx, dns: str, mount_name: str) -> bool:
    """One managed line for /fsx; any other (unmanaged) /fsx line would fight it, so it goes."""
    entry = fstab_line(dns, mount_name)
    path = files.write_target(ctx.path("/etc/fstab"))
    text = files.read_text(path) or ""
    kept = []
    inside = False
    for line in (text[:-1] if text.endswith("\n") else text).split("\n") if text else []:
        s = line.strip()
        if s.startswith("# BEGIN hpq managed"):
            inside = True
        if s.startswith("# END hpq managed"):
            inside = False
        parts = s.split()
        if not inside and parts and not s.startswith("#") and len(parts) > 1 and parts[1] == names.FSX_MOUNT_POINT:
            if ctx.log:
                ctx.log.warning("dropping unmanaged fstab line for %s: %s", names.FSX_MOUNT_POINT, s)
            continue
        kept.append(line)
    new = files.replace_block("\n".join(kept), "fsx", [entry])
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    return files.write_file(path, new, mode)


def load_modules(ctx) -> None:
    """``modprobe lnet`` then ``modprobe lustre``; a failure is logged, the mount attempt has the last word."""
    for module in ("lnet", "lustre"):
        argv = list(ctx.s.modprobe_cmd) + [module]
        try:
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                 timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            ctx.log.warning("%s: %s (the mount will show whether Lustre is usable)", " ".join(argv), exc)
            continue
        if res.returncode != 0:
            ctx.log.warning("%s exited %d: %s (the mount will show whether Lustre is usable)",
                            " ".join(argv), res.returncode, res.stdout.strip()[-300:])
        else:
            ctx.log.info("%s: loaded", " ".join(argv))


def resolves(name: str) -> bool:
    try:
        return bool(socket.getaddrinfo(name, None, socket.AF_INET))
    except (OSError, UnicodeError):
        return False


def wait_for_name(ctx, name: str, timeout: float, poll: float = 1.0) -> bool:
    """Wait up to ``timeout`` seconds for ``name`` to resolve (polling, no fixed sleep); True once it does."""
    if resolves(name):
        return True
    ctx.log.info("%s does not resolve (systemd-resolved restarting?): waiting up to %.0fs", name, timeout)
    t0 = time.time()
    while time.time() - t0 < timeout:
        time.sleep(min(poll, max(0.0, timeout - (time.time() - t0))))
        if resolves(name):
            ctx.log.info("%s resolves after %.1fs", name, time.time() - t0)
            return True
    ctx.log.warning("%s still does not resolve after %.0fs", name, timeout)
    return False


def _describe(m: Optional[mounts.Mount]) -> str:
    return "%s (%s)" % (m.source, m.fstype) if m else "nothing"


def mount(ctx, dns: str, mount_name: str) -> str:
    """Mount ``<dns>@tcp:/<mount_name>`` at /fsx unless it is there already; bounded, logged retries."""
    target = ctx.path(names.FSX_MOUNT_POINT)
    current = current_mount(ctx)
    if mounts.is_lustre_mount_of(current, mount_name):
        return "already mounted (%s)" % current.source
    if current is not None:
        raise FsxError("%s is already mounted from %s, not FSx %s@tcp:/%s" % (
            target, _describe(current), dns, mount_name))
    os.makedirs(target, exist_ok=True)
    load_modules(ctx)
    source = lustre_source(*checked_names(dns, mount_name, "the mount"))
    argv = list(ctx.s.mount_cmd) + ["-t", "lustre", "-o", MOUNT_OPTIONS, source, target]
    attempts = ctx.s.fsx_mount_attempts
    last = ""
    for attempt in range(1, attempts + 1):
        try:
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                 timeout=300)
            rc, out = res.returncode, res.stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            rc, out = -1, str(exc)
        if rc == 0:
            now = current_mount(ctx)
            if mounts.is_lustre_mount_of(now, mount_name):
                return "mounted, the kernel shows %s (attempt %d of %d)" % (now.source, attempt, attempts)
            last = "mount returned 0 but %s shows %s at %s, not a lustre mount of :/%s" % (
                ctx.s.proc_mounts, _describe(now), target, mount_name)
        else:
            last = "%s exited %d: %s" % (" ".join(argv), rc, out[-400:] or "no output")
        if attempt == attempts:
            break
        ctx.log.warning("FSx mount attempt %d of %d failed: %s; retrying", attempt, attempts, last)
        wait_for_name(ctx, dns, ctx.s.dns_wait_s)
        time.sleep(ctx.s.fsx_mount_retry_s)
    raise FsxError("FSx mount failed after %d attempt(s): %s" % (attempts, last))


def write_test(target: str) -> None:
    probe = os.path.join(target, ".hpq-write-test-%s-%d" % (os.uname()[1], os.getpid()))
    try:
        if os.path.lexists(probe):
            os.unlink(probe)  # a leftover of a killed run (same host and pid): never written through
        # O_EXCL|O_NOFOLLOW: /fsx is shared; a name planted there is never followed.
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write("ok\n")
            fh.flush()
            os.fsync(fh.fileno())
        with open(probe) as fh:
            if fh.read() != "ok\n":
                raise FsxError("write test on %s read back different content" % target)
    except OSError as exc:
        raise FsxError("write test on %s failed: %s" % (target, exc)) from None
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def region(ctx, node) -> Optional[str]:
    """AWS_REGION / AWS_DEFAULT_REGION, else the region in the cluster ARN, else IMDS."""
    value = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or node.region
    return value or ctx.imds.region()


def _from_hpq_cluster_config(node) -> bool:
    return node.fsx_source.endswith("(%s)" % names.HPQ_CLUSTER_CONFIG)


def _no_filesystem(ctx, node, reg, why: str = "") -> Degraded:
    ctx.log.warning("no FSx for Lustre filesystem tagged %s=%s in %s%s: continuing without %s "
                    "(the cluster works; nothing is shared between nodes)",
                    names.CLUSTER_TAG_KEY, node.cluster_name, reg, why, names.FSX_MOUNT_POINT)
    return Degraded("no FSx filesystem found (tag %s=%s)%s: continuing without %s" % (
        names.CLUSTER_TAG_KEY, node.cluster_name, why, names.FSX_MOUNT_POINT))


def discover(ctx, node, backoff: Dict):
    """The cluster's filesystem by its tag, once AVAILABLE: (dns, mount name, origin), or Degraded when none."""
    if not node.cluster_name:
        ctx.log.warning("no cluster name to find the FSx filesystem by (tag %s): continuing without %s",
                        names.CLUSTER_TAG_KEY, names.FSX_MOUNT_POINT)
        return Degraded("no cluster name: FSx not looked up, continuing without %s" % names.FSX_MOUNT_POINT)
    reg = region(ctx, node)
    fs = find_cluster_filesystem(node.cluster_name, reg, backoff=backoff)
    if fs is None:
        return _no_filesystem(ctx, node, reg)
    fs = wait_available(fs, reg, ctx.s.fsx_wait_s, ctx.s.fsx_poll_s, ctx.log, backoff=backoff)
    origin = "%s (tag %s=%s)" % (fs.get("FileSystemId"), names.CLUSTER_TAG_KEY, node.cluster_name)
    return fs.get("DNSName"), (fs.get("LustreConfiguration") or {}).get("MountName"), origin


def configured(ctx, node, backoff: Dict):
    """The names a role file gives: (dns, mount name, origin), or Degraded.

    hpq-cluster.json's names are the stack's filesystem's. When its DNS name does not resolve within the DNS
    wait (HyperPod restarting systemd-resolved, or a filesystem deleted out of band), the tag lookup tells the
    two apart: no filesystem carries the cluster's tag any more -> continue without /fsx, as discovery does;
    one does -> mount it (its names, should they differ)."""
    origin = node.fsx_source or "provisioning parameters"
    dns, mount_name = checked_names(node.fsx_dns_name, node.fsx_mountname, origin)
    ctx.log.info("FSx %s named by %s: no FSx API call needed", lustre_source(dns, mount_name), origin)
    if not _from_hpq_cluster_config(node) or current_mount(ctx) is not None or not node.cluster_name:
        return dns, mount_name, origin
    if wait_for_name(ctx, dns, ctx.s.dns_wait_s):
        return dns, mount_name, origin
    ctx.log.warning("%s (from %s) does not resolve: asking the FSx API whether the filesystem still exists",
                    dns, origin)
    reg = region(ctx, node)
    fs = find_cluster_filesystem(node.cluster_name, reg, backoff=backoff)
    if fs is None:
        return _no_filesystem(ctx, node, reg, "; %s names %s, which does not resolve" % (names.HPQ_CLUSTER_CONFIG, dns))
    found = discover(ctx, node, backoff)
    if not isinstance(found, Degraded) and found[0] != dns:
        ctx.log.warning("%s names FSx %s but the filesystem tagged %s=%s is %s: mounting that one",
                        names.HPQ_CLUSTER_CONFIG, dns, names.CLUSTER_TAG_KEY, node.cluster_name, found[0])
    return found


def record_mount(ctx, mounted: bool) -> None:
    """Leave (or take away) the record of this node's FSx mount for the node programs: the mount point and the
    mount table the lifecycle read it in (HPQ_PROC_MOUNTS as given, else the kernel's). A node whose lifecycle
    mounted no FSx (none found, EKS) has no record, so its checks do not expect /fsx."""
    path = ctx.path(names.FSX_RECORD)
    if not mounted:
        if os.path.exists(path):
            os.remove(path)
        return
    table = names.PROC_MOUNTS if ctx.s.proc_mounts == ctx.s.path(names.PROC_MOUNTS) else ctx.s.proc_mounts
    files.write_file(path, json.dumps({"mount_point": names.FSX_MOUNT_POINT, "mount_table": table},
                                      sort_keys=True) + "\n")


def run(ctx) -> str:
    node = identity.load_node(ctx)
    if node.orchestrator == EKS:
        record_mount(ctx, False)
        return eks_modules_only(ctx)
    backoff = {"attempts": ctx.s.fsx_api_attempts, "log": ctx.log}
    if node.fsx_dns_name or node.fsx_mountname:
        found = configured(ctx, node, backoff)
    elif identity.roles_from_provisioning_parameters(node):
        # A cluster described by the documented provisioning_parameters.json (not one hpq deployed) has
        # FSx only when the file names it: AWS's reference mounts nothing without fsx_dns_name and
        # fsx_mountname (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/
        # base-config/lifecycle_script.py), and no filesystem of such a cluster carries hpq's tag.
        ctx.log.warning("%s names no fsx_dns_name/fsx_mountname: continuing without %s",
                        names.PROVISIONING_PARAMETERS, names.FSX_MOUNT_POINT)
        record_mount(ctx, False)
        return Degraded("%s names no FSx filesystem: continuing without %s" % (
            names.PROVISIONING_PARAMETERS, names.FSX_MOUNT_POINT))
    else:
        found = discover(ctx, node, backoff)
    if isinstance(found, Degraded):
        record_mount(ctx, False)
        return found
    dns, mount_name, origin = found
    dns, mount_name = checked_names(dns, mount_name, origin)
    source = lustre_source(dns, mount_name)
    state = mount(ctx, dns, mount_name)
    fstab_changed = update_fstab(ctx, dns, mount_name)
    os.makedirs(ctx.path(names.FSX_MOUNT_POINT), exist_ok=True)  # a mount table may name the node path only
    write_test(ctx.path(names.FSX_MOUNT_POINT))
    shared_results_dir(ctx.path(names.FSX_RESULTS_DIR))
    record_mount(ctx, True)
    return "%s from %s: %s, fstab %s, write test ok, %s ready" % (
        source, origin, state, "updated" if fstab_changed else "unchanged", names.FSX_RESULTS_DIR)


def eks_modules_only(ctx) -> str:
    """EKS nodes: load lnet/lustre, mount nothing on the host.

    Pods mount FSx through the FSx for Lustre CSI driver (the EKS stack's aws-fsx-csi-driver add-on), which needs
    the client modules on the host; AWS's EKS lifecycle does exactly this (awsome-distributed-ai
    1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh, load_lustre_modules).
    A host mount there would be unused, and its failure would fail the node for nothing.
    """
    load_modules(ctx)
    ctx.log.info("EKS node: no host mount of FSx at %s; pods mount it through the FSx CSI driver "
                 "(aws-fsx-csi-driver), for which lnet/lustre are loaded", names.FSX_MOUNT_POINT)
    return "EKS: lnet/lustre loaded for the FSx CSI driver; no host mount"


def shared_results_dir(path: str) -> None:
    """The node commands' results directory on /fsx, writable by every user (mode 1777, as /tmp).

    A new Lustre filesystem's root is root:root 0755, so without it a user's run-nanogpt falls back to
    a node-local ~/hpq-results on whichever node held rank 0 and the controller never sees the result.
    """
    os.makedirs(path, exist_ok=True)
    if os.stat(path).st_mode & 0o7777 != 0o1777:
        os.chmod(path, 0o1777)
