"""One MUNGE key for every node: the one HyperPod gave them when they agree, a distributed one when not.

HyperPod's AMI brings a MUNGE key on every node before the lifecycle runs, and AWS's reference lifecycle
scripts never touch MUNGE (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/
base-config: no munge step; Slurm nodes authenticate with the key they booted with). So the key a node
has is kept whenever it is the cluster's key; one is created or distributed only when a node has none or
its key differs, and the step logs which case it was (by fingerprint, never the key).

The nodes compare through /fsx: the controller records the cluster key at ``/fsx/.hpq/munge/munge.key``
(root only): its own key (kept), a new one when it has none (created), or the one already recorded
(a re-run, or a re-imaged controller, adopts it so the running cluster keeps its key). Every other node
waits for it and compares: same key (kept), different (replaced), none (installed). Without a shared
filesystem there is nothing to compare through: every node keeps its own key and the controller creates
one only if it has none.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import time

from . import files, fsx, identity

KEY = "/etc/munge/munge.key"
UNIT = "munge.service"
SHARED_KEY = ".hpq/munge/munge.key"


class MungeError(Exception):
    pass


def _owner(user: str):
    try:
        pw = pwd.getpwnam(user)
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return -1, -1


def _wait_for(path: str, seconds: float, what: str) -> bytes:
    deadline = time.time() + seconds
    while True:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            if data:
                return data
        except OSError:
            pass
        if time.time() >= deadline:
            raise MungeError("waited %.0fs for %s at %s" % (seconds, what, path))
        time.sleep(1.0)


def fingerprint(key: bytes) -> str:
    return "sha256:" + hashlib.sha256(key).hexdigest()[:16] if key else "none"


def desired_key(ctx, role: str):
    """(the key this node must have, the case in words) for ``role``."""
    local = _read(ctx.path(KEY))
    shared = fsx.shared_dir(ctx)
    if not shared:
        if local:
            return local, "kept this node's key %s (no shared filesystem to compare keys through)" % (
                fingerprint(local))
        if role == identity.CONTROLLER:
            key = os.urandom(1024)
            return key, "created key %s: this node had none and there is no shared filesystem" % fingerprint(key)
        raise MungeError("no MUNGE key at %s and no shared filesystem to get the controller's from" % ctx.path(KEY))
    shared_key = os.path.join(shared, SHARED_KEY)
    if role == identity.CONTROLLER:
        recorded = _read(shared_key)
        if recorded and recorded == local:
            return recorded, "kept this node's key %s: it is the cluster key already on %s" % (
                fingerprint(local), shared)
        if recorded:
            return recorded, "adopted the cluster key %s already on %s (this node had %s)" % (
                fingerprint(recorded), shared, fingerprint(local))
        key = local or os.urandom(1024)
        os.makedirs(os.path.dirname(shared_key), mode=0o700, exist_ok=True)
        os.chmod(os.path.dirname(shared_key), 0o700)
        files.write_file(shared_key, key, 0o400)
        case = ("kept this node's key %s (HyperPod's) and recorded it as the cluster key" if local else
                "created cluster key %s: this node had none") % fingerprint(key)
        return key, case
    if not os.path.exists(shared_key):
        ctx.log.info("waiting up to %.0fs for the controller to record the cluster MUNGE key at %s",
                     ctx.s.shared_wait_s, shared_key)
    cluster = _wait_for(shared_key, ctx.s.shared_wait_s, "the controller to record the cluster MUNGE key")
    if cluster == local:
        return cluster, "kept this node's key %s: the same as the cluster key" % fingerprint(local)
    if local:
        return cluster, "replaced this node's key %s: it differs from the cluster key %s" % (
            fingerprint(local), fingerprint(cluster))
    return cluster, "installed the cluster key %s: this node had none" % fingerprint(cluster)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def verify(timeout: float = 30.0) -> None:
    """munged answers: a credential made locally decodes locally."""
    deadline = time.time() + timeout
    last = ""
    while True:
        try:
            enc = subprocess.run(["munge", "-n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
            dec = subprocess.run(["unmunge"], input=enc.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 timeout=10)
            if enc.returncode == 0 and dec.returncode == 0:
                return
            last = (enc.stderr + dec.stderr).decode(errors="replace").strip()
        except (OSError, subprocess.SubprocessError) as exc:
            last = str(exc)
        if time.time() >= deadline:
            raise MungeError("munged does not answer after %.0fs: %s" % (timeout, last))
        time.sleep(0.5)


def run(ctx) -> str:
    node = identity.load_node(ctx)
    key, case = desired_key(ctx, node.role)
    ctx.log.info("MUNGE key: %s", case)
    uid, gid = _owner(ctx.s.munge_user)
    key_dir = ctx.path(os.path.dirname(KEY))
    if not os.path.isdir(key_dir):  # the package makes it munge-owned; munged (as that user) must enter it
        os.makedirs(key_dir, mode=0o700)
        os.chown(key_dir, uid, gid)
    changed = files.write_file(ctx.path(KEY), key, 0o400, uid, gid)
    state = ctx.services.ensure_running(UNIT, restart=changed)
    verify(ctx.s.service_wait_s)
    return "%s; munged %s" % (case, state)
