"""One MUNGE key for every node, and munged running with it.

With a shared filesystem the controller publishes the key there (adopting one that is
already there, so a replaced controller keeps the cluster's key) and the other nodes
wait for it. Without one, the controller makes a key if it has none and every node
keeps the key its image came with: nothing else can carry a secret before Slurm
itself (which needs MUNGE) is up.
"""

from __future__ import annotations

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


def desired_key(ctx, role: str) -> bytes:
    local = ctx.path(KEY)
    shared = fsx.shared_dir(ctx)
    if shared:
        shared_key = os.path.join(shared, SHARED_KEY)
        if role == identity.CONTROLLER:
            if not os.path.exists(shared_key):
                key = _read(local) or os.urandom(1024)
                os.makedirs(os.path.dirname(shared_key), mode=0o700, exist_ok=True)
                files.write_file(shared_key, key, 0o400)
            return _read(shared_key)
        if not os.path.exists(shared_key):
            ctx.log.info("waiting up to %.0fs for the controller to publish the MUNGE key at %s",
                         ctx.s.shared_wait_s, shared_key)
        return _wait_for(shared_key, ctx.s.shared_wait_s, "the controller to publish the MUNGE key")
    key = _read(local)
    if key:
        return key
    if role == identity.CONTROLLER:
        return os.urandom(1024)
    raise MungeError("no MUNGE key at %s and no shared filesystem to get the controller's from" % local)


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
    key = desired_key(ctx, node.role)
    uid, gid = _owner(ctx.s.munge_user)
    key_dir = ctx.path(os.path.dirname(KEY))
    if not os.path.isdir(key_dir):  # the package makes it munge-owned; munged (as that user) must enter it
        os.makedirs(key_dir, mode=0o700)
        os.chown(key_dir, uid, gid)
    changed = files.write_file(ctx.path(KEY), key, 0o400, uid, gid)
    state = ctx.services.ensure_running(UNIT, restart=changed)
    verify(ctx.s.service_wait_s)
    return "key %s, munged %s" % ("installed" if changed else "unchanged", state)
