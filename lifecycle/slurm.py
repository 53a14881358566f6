"""Slurm in configless mode: the controller serves slurm.conf, every other node fetches it.

Controller: wait (bounded) for the slurm.conf the HyperPod agent writes, make sure
``SlurmctldParameters`` includes ``enable_configless`` (keeping any other values),
start slurmctld and wait until it answers. Workers and login nodes: DNS SRV records
for the controller are often missing in a VPC, so slurmd gets ``--conf-server <ip:port>``
through a systemd drop-in next to the vendor unit (the unit itself is never edited),
then it starts and must have fetched its config before the step counts as done.
First, on every node, the daemon it must not run is stopped, disabled and masked (slurmd on the
controller, slurmctld elsewhere), as AWS's start_slurm.sh sets their unit files aside.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import Tuple

from . import files, identity, prolog, roles, services

SLURMCTLD = "slurmctld.service"
SLURMD = "slurmd.service"
# AWS's start_slurm.sh renames /etc/systemd/system/slurmd.service to slurmd_DO_NOT_START_ON_CONTROLLER.service on the
# controller, and slurmctld.service to slurmctld_DO_NOT_START_ON_CONTROLLER.service on compute and login nodes
# (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/start_slurm.sh): the
# same names here, so a node looks as AWS's own tooling expects.
ASIDE_SUFFIX = "_DO_NOT_START_ON_CONTROLLER"
DROPIN = "hpq-conf-server"
CONFIGLESS = "enable_configless"
# Where slurmd leaves the config it fetched: the /run/slurm/conf link (22.05+), else the default spool dirs.
FETCHED_CONF = ("/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf",
                "/var/spool/slurm/d/conf-cache/slurm.conf")


class SlurmError(Exception):
    pass


def conf_path(ctx) -> str:
    return ctx.path(os.path.join(ctx.s.slurm_conf_dir, "slurm.conf"))


def wait_for_conf(path: str, seconds: float, log=None) -> str:
    """The agent writes slurm.conf some time after boot; wait for one that names a controller."""
    deadline = time.time() + seconds
    announced = False
    while True:
        text = files.read_text(path)
        if text and re.search(r"^\s*(SlurmctldHost|ControlMachine)\s*=", text, re.M | re.I):
            return text
        if time.time() >= deadline:
            raise SlurmError("no slurm.conf naming a controller at %s after %.0fs (the HyperPod agent writes it)"
                             % (path, seconds))
        if log and not announced:
            log.info("waiting up to %.0fs for %s", seconds, path)
            announced = True
        time.sleep(1.0)


def ensure_configless(text: str) -> Tuple[str, bool]:
    """``text`` with enable_configless in the (last) SlurmctldParameters line; other values kept."""
    lines = text.splitlines()
    idx = [i for i, line in enumerate(lines) if re.match(r"^\s*SlurmctldParameters\s*=", line, re.I)]
    if not idx:
        return text.rstrip("\n") + "\nSlurmctldParameters=%s\n" % CONFIGLESS, True
    i = idx[-1]
    key, value = lines[i].split("=", 1)
    value, _, comment = value.partition("#")
    values = [v.strip() for v in value.strip().split(",") if v.strip()]
    if CONFIGLESS in values:
        return text, False
    values.append(CONFIGLESS)
    lines[i] = "%s=%s%s" % (key.strip(), ",".join(values), (" #" + comment) if comment else "")
    return "\n".join(lines) + "\n", True


def _bin(ctx, name: str) -> str:
    for sub in ("bin", "sbin"):
        p = os.path.join(ctx.s.slurm_prefix, sub, name)
        if os.path.exists(p):
            return p
    return shutil.which(name) or name


def wait_controller(ctx, conf: str, seconds: float) -> None:
    deadline = time.time() + seconds
    last = ""
    while True:
        try:
            res = subprocess.run([_bin(ctx, "scontrol"), "ping"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 universal_newlines=True, timeout=30, env=dict(os.environ, SLURM_CONF=conf))
            last = res.stdout.strip()
            if res.returncode == 0 and "UP" in res.stdout:
                return
        except (OSError, subprocess.SubprocessError) as exc:
            last = str(exc)
        if time.time() >= deadline:
            raise SlurmError("slurmctld does not answer scontrol ping after %.0fs: %s" % (seconds, last))
        time.sleep(0.5)


def conf_server(node: identity.NodeInfo, port: int) -> str:
    if not node.controller_ips:
        raise SlurmError("no controller IP in resource_config.json to point slurmd at")
    return ",".join("%s:%d" % (ip, port) for ip in node.controller_ips)


def dropin_text(vendor_exec: str, server: str) -> str:
    return "\n".join([
        "# Written by the hpq lifecycle (step slurm): configless slurmd fetches slurm.conf from the",
        "# controller. Replaced on every run; the vendor unit stays untouched.",
        "[Unit]",
        "# A configless node has no local slurm.conf: clear vendor conditions that require one.",
        "ConditionPathExists=",
        "",
        "[Service]",
        "ExecStart=",
        "ExecStart=%s" % services.exec_start_with(vendor_exec, "--conf-server", server),
        "",
    ])


def setup_controller(ctx) -> str:
    path = conf_path(ctx)
    text = wait_for_conf(path, ctx.s.slurm_conf_wait_s, ctx.log)
    new, configless = ensure_configless(text)
    rf = roles.find(ctx.s).roles
    new, prolog_done = prolog.ensure(new, bool(rf and rf.node_prolog))
    changed = configless or prolog_done in ("added", "removed")
    if changed:
        files.write_file(path, new, os.stat(path).st_mode & 0o7777)
    state = ctx.services.ensure_running(SLURMCTLD, restart=changed)
    wait_controller(ctx, path, ctx.s.service_wait_s)
    return "%s %s; node prolog %s; slurmctld %s and answering" % (
        path, "now has " + CONFIGLESS if configless else "already configless", prolog_done, state)


def setup_node(ctx, node: identity.NodeInfo) -> str:
    server = conf_server(node, ctx.s.slurmctld_port)
    mgr = ctx.services
    # The unit as the AMI (and any other drop-in) has it, without ours: HyperPod's slurmd.service is
    # /etc/systemd/system/slurmd.service with ``$SLURMD_OPTIONS`` in ExecStart, which AWS's reference
    # start_slurm.sh fills with ``--conf-server <controller ip>`` through envsubst; the drop-in adds the
    # same flag and keeps $SLURMD_OPTIONS, so the unit file stays the AMI's.
    vendor = services.exec_start(SLURMD, mgr.unit_sections(SLURMD, without=DROPIN))
    changed = mgr.write_dropin(SLURMD, DROPIN, dropin_text(vendor, server))
    state = mgr.ensure_running(SLURMD, restart=changed)
    # slurmd exits when the controller is not up yet (it may itself still wait for the agent's
    # slurm.conf): keep it trying, as long as the controller may take, until it has its config.
    wait = ctx.s.slurm_conf_wait_s + ctx.s.service_wait_s
    deadline = time.time() + wait
    fetched = [ctx.path(p) for p in FETCHED_CONF]
    while not any(os.path.exists(p) for p in fetched):
        if time.time() >= deadline:
            raise SlurmError("slurmd has not fetched its config from %s after %.0fs (none of %s)"
                             % (server, wait, ", ".join(fetched)))
        time.sleep(1.0)
        if not mgr.is_active(SLURMD):
            ctx.log.info("slurmd not running (controller not ready?): starting it again")
            try:
                mgr.ensure_running(SLURMD)
            except services.ServiceError as exc:
                ctx.log.info("slurmd start failed, will retry: %s", exc)
    return "slurmd --conf-server %s (drop-in %s), %s, config fetched" % (
        server, "written" if changed else "unchanged", state)


def keep_other_daemon_off(ctx, node: identity.NodeInfo) -> str:
    """Stop, disable and mask the daemon this node must not run: slurmd on the controller (the AMI's slurmd unit
    deletes /opt/slurm/etc/slurm.conf in ExecStartPre, so one start at boot would delete the conf the controller
    serves), slurmctld everywhere else. Idempotent."""
    unit = SLURMD if node.role == identity.CONTROLLER else SLURMCTLD
    return ctx.services.mask(unit, unit.replace(".service", ASIDE_SUFFIX + ".service"))


def run(ctx) -> str:
    node = identity.load_node(ctx)
    off = keep_other_daemon_off(ctx, node)
    if node.role == identity.CONTROLLER:
        return "%s; %s" % (setup_controller(ctx), off)
    return "%s; %s" % (setup_node(ctx, node), off)

