"""EKS nodes: container images and pod data on the instance's data volume, not the root volume.

HyperPod mounts each node's secondary EBS volume at /opt/sagemaker; the root volume is small and "not
intended to grow" (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/
hyperpod-mental-model.md, "Storage layout"), and multi-GB training images fill it. AWS's EKS lifecycle
reference (1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh) waits up
to 60 s for the volume, then moves containerd's data root and the kubelet root onto it. Same result here,
idempotently:

- containerd: a drop-in ``containerd.service.d/hpq-data-root.conf`` re-declares the unit's own ExecStart with
  ``--root <disk>/containerd/data-root`` (containerd's command line wins over its config file:
  containerd/containerd cmd/containerd/command/main.go applyFlags; ``--root`` in docs/ops.md), so the AMI's
  config.toml, runtimes included, stays as it is (the reference replaces the whole file with one that
  names the nvidia runtime, wrong on Trainium). ``RequiresMountsFor=<disk>`` orders it after the volume at
  every boot. What the AMI already stored in /var/lib/containerd (pre-pulled pause image) is copied over
  once (``cp -a``, as the reference does), into a temporary name renamed at the end.
- kubelet: /var/lib/kubelet becomes a link to ``<disk>/kubelet`` (the reference's way; every consumer of
  the well-known path, device plugins and CSI drivers through their hostPath mounts, keeps working), its
  contents moved once, and a drop-in ``kubelet.service.d/hpq-data-root.conf`` adds
  ``RequiresMountsFor=<disk>`` so kubelet never starts on an unmounted volume.
A running containerd or kubelet is stopped around the move and started again. Without the volume after
the bounded wait: a warning, nothing changed (as the reference).

Re-runs after ``UpdateClusterSoftware``: the root volume is the new AMI's and /opt/sagemaker is kept, so the
volume still holds the old AMI's ``containerd/data-root`` and ``kubelet``. AWS's EKS lifecycle (awsome-distributed-ai
PR 884; 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh) removes
``<disk>/containerd/data-root`` before ``cp -a /var/lib/containerd`` and ``<disk>/kubelet`` before moving
``/var/lib/kubelet/*`` there, so the new image's data is what runs. Same here, told apart from a plain
re-run on the same root by what lives on the root volume: no hpq containerd drop-in means the containerd data
on the volume is an earlier root's; a real /var/lib/kubelet directory (not hpq's link) means the kubelet
directory on the volume is. On AL2 the new root ships /var/lib/kubelet/kubeconfig (awslabs/amazon-eks-ami
templates/al2/provisioners/install-worker.sh installs kubelet-kubeconfig there), which is what the new kubelet
must use. Each removal is logged. The kubelet move copies into ``<disk>/kubelet.hpq-partial``, renames it into
place, renames /var/lib/kubelet aside and links it; a run killed at any point finishes on the next run
without losing the root's kubelet files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from . import files, mounts, services
from .context import Degraded

CONTAINERD = "containerd.service"
KUBELET = "kubelet.service"
DROPIN = "hpq-data-root"
CONTAINERD_ROOT = "/var/lib/containerd"
KUBELET_ROOT = "/var/lib/kubelet"


class EksStorageError(Exception):
    pass


def disk_mounted(ctx, disk: str) -> bool:
    table = mounts.read(ctx.s.proc_mounts)
    return mounts.at(table, [ctx.path(disk), disk]) is not None


def wait_for_disk(ctx, disk: str) -> bool:
    deadline = time.time() + ctx.s.eks_disk_wait_s
    announced = False
    while not disk_mounted(ctx, disk):
        if time.time() >= deadline:
            return False
        if not announced:
            ctx.log.info("waiting up to %.0fs for %s to be mounted", ctx.s.eks_disk_wait_s, disk)
            announced = True
        time.sleep(min(1.0, max(0.0, deadline - time.time())))
    return True


def containerd_dropin(vendor_exec: str, disk: str, data_root: str) -> str:
    return "\n".join([
        "# Written by the hpq lifecycle (step eks-storage): containerd's data on the instance volume %s." % disk,
        "# Replaced on every run; the unit file stays the AMI's.",
        "[Unit]",
        "RequiresMountsFor=%s" % disk,
        "",
        "[Service]",
        "ExecStart=",
        "ExecStart=%s" % services.exec_start_with(vendor_exec, "--root", data_root),
        "",
    ])


def kubelet_dropin(disk: str) -> str:
    return "\n".join([
        "# Written by the hpq lifecycle (step eks-storage): %s is a link into %s;" % (KUBELET_ROOT, disk),
        "# kubelet must not start before that volume is mounted. Replaced on every run.",
        "[Unit]",
        "RequiresMountsFor=%s" % disk,
        "",
    ])


def _remove(path: str) -> None:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def _cp_a(src: str, dest: str) -> None:
    """``cp -a src dest`` (keeps owners, modes, xattrs and device nodes); ``dest`` must not exist."""
    if os.path.isdir(src):
        res = subprocess.run(["cp", "-a", src, dest], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True)
        if res.returncode != 0:
            raise EksStorageError("cp -a %s %s failed: %s" % (src, dest, res.stdout.strip()[-300:]))
    else:
        os.makedirs(dest)


def _copy_once(src: str, dest: str, stale: bool = False, log=None) -> bool:
    """Copy ``src`` to ``dest`` unless ``dest`` exists; with ``stale`` an existing ``dest`` (an earlier root
    volume's data) is removed first, as AWS's EKS lifecycle does. Copied into ``dest.hpq-partial``, renamed."""
    if os.path.lexists(dest):
        if not stale:
            return False
        if log is not None:
            log.info("removing %s: an earlier root volume's containerd data (AMI update), as AWS's EKS lifecycle "
                     "does; the new image's %s is copied instead", dest, src)
        _remove(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    partial = dest + ".hpq-partial"
    _remove(partial)
    _cp_a(src, partial)
    os.rename(partial, dest)
    return True


def move_kubelet_root(link: str, target: str, log=None) -> str:
    """Make ``link`` (/var/lib/kubelet) a symlink to ``target`` holding what ``link`` held; idempotent.

    A real ``link`` directory is the current root volume's kubelet data (the AMI's, e.g. AL2's kubeconfig): an
    existing ``target`` then belongs to an earlier root volume and is replaced, as AWS's EKS lifecycle does.
    """
    aside = link + ".hpq-moved"
    if os.path.islink(link):
        if os.readlink(link) == target:
            _remove(aside)  # a run killed after linking
            return "already a link to %s" % target
        os.unlink(link)
    if not os.path.lexists(link) and os.path.isdir(aside) and os.path.isdir(target):
        # A run killed between setting the root's directory aside and linking: the copy on the volume is whole.
        os.symlink(target, link)
        _remove(aside)
        return "now a link to %s (an interrupted move finished)" % target
    replaced = ""
    if os.path.isdir(link):
        if os.path.lexists(target):
            if log is not None:
                log.info("removing %s: an earlier root volume's kubelet directory (AMI update), as AWS's EKS "
                         "lifecycle does; this root's %s moves there", target, link)
            _remove(target)
            replaced = ", an earlier root's kubelet directory replaced"
        entries = len(os.listdir(link))
        partial = target + ".hpq-partial"
        _remove(partial)
        _cp_a(link, partial)
        os.rename(partial, target)
        _remove(aside)
        os.rename(link, aside)  # same filesystem: atomic; the link appears next
    else:
        entries = 0
        os.makedirs(target, exist_ok=True)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(target, link)
    _remove(aside)
    return "now a link to %s (%d entr%s moved%s)" % (target, entries, "y" if entries == 1 else "ies", replaced)


def run(ctx) -> str:
    disk = ctx.s.eks_data_disk
    if not wait_for_disk(ctx, disk):
        ctx.log.warning("%s is not mounted after %.0fs: containerd and kubelet stay on the root volume",
                        disk, ctx.s.eks_disk_wait_s)
        return Degraded("skipped (%s not mounted)" % disk)
    mgr = ctx.services
    missing = [u for u in (CONTAINERD, KUBELET) if mgr.unit_path(u) is None]
    if missing:
        ctx.log.warning("no %s unit on this node: containerd and kubelet left as they are", " or ".join(missing))
        return Degraded("skipped (no %s)" % ", ".join(missing))
    # Paths the daemons read are the node's paths resolved under HPQ_ROOT (the same on a node).
    disk_path = ctx.path(disk)
    data_root = os.path.join(disk_path, "containerd", "data-root")
    kubelet_dir = os.path.join(disk_path, "kubelet")
    vendor = services.exec_start(CONTAINERD, mgr.unit_sections(CONTAINERD, without=DROPIN))
    c_text, k_text = containerd_dropin(vendor, disk_path, data_root), kubelet_dropin(disk_path)
    link_ok = os.path.islink(ctx.path(KUBELET_ROOT)) and os.readlink(ctx.path(KUBELET_ROOT)) == kubelet_dir
    pending = (files.read_text(mgr.dropin_path(CONTAINERD, DROPIN)) != c_text or not link_ok
               or not os.path.exists(data_root)
               or files.read_text(mgr.dropin_path(KUBELET, DROPIN)) != k_text)
    if not pending:
        return "containerd data root %s and kubelet root %s already on %s" % (data_root, kubelet_dir, disk)
    running = [u for u in (KUBELET, CONTAINERD) if mgr.is_active(u)]
    for unit in running:  # kubelet first: it talks to containerd
        ctx.log.info("stopping %s to move its data onto %s", unit, disk)
        mgr.stop(unit)
    # No hpq drop-in on this root volume: whatever containerd data the volume holds is an earlier root's.
    fresh_root = files.read_text(mgr.dropin_path(CONTAINERD, DROPIN)) is None
    copied = _copy_once(ctx.path(CONTAINERD_ROOT), data_root, stale=fresh_root, log=ctx.log)
    mgr.write_dropin(CONTAINERD, DROPIN, c_text)
    kubelet = move_kubelet_root(ctx.path(KUBELET_ROOT), kubelet_dir, ctx.log)
    mgr.write_dropin(KUBELET, DROPIN, k_text)
    for unit in reversed(running):
        mgr.ensure_running(unit)
    return "containerd --root %s (%s), %s %s; %s" % (
        data_root, "this AMI's data copied" if copied else "data root kept", KUBELET_ROOT, kubelet,
        "restarted " + ", ".join(reversed(running)) if running else "neither was running")
