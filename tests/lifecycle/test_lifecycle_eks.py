"""EKS nodes: identity from HyperPod's EKS resource_config.json, containerd and kubelet data moved onto
/opt/sagemaker, no Slurm parts; a node whose python3 is older than 3.7 stops with one line.

Samples and unit files: tests/node_samples.py (EKS resource_config.json without InstanceId; AL2023's
containerd.service and kubelet.service). systemd is the lifecycle's ``direct`` manager, which reads the
same unit files and drop-ins; IMDS the token-enforcing stand-in. The bundle runs as shipped.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import eks_storage, identity, names
from hpq.standins import systemctl
from tests import node_samples
from tests.slurm_cluster import make_context

IID = list(node_samples.EKS_NODES)[0]
EBS_LINE = "/dev/nvme1n1 /opt/sagemaker xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0\n"


def eks_node(tmp_path: Path, units: tuple[str, str] = (node_samples.AL2023_CONTAINERD_UNIT, node_samples.AL2023_KUBELET_UNIT),
             disk: bool = True) -> Path:
    """A node root as an AL2023 EKS node has it before kubelet joins: units, AMI containerd data, kubeconfig."""
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.eks_resource_config())
    unit_dir = root / "usr/lib/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "containerd.service").write_text(units[0])
    (unit_dir / "kubelet.service").write_text(units[1])
    snap = root / "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256"
    snap.mkdir(parents=True)
    (snap / "0f5ac6b1").write_bytes(b"pause image layer")  # what the AMI pre-pulled
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (root / "proc").mkdir()
    (root / "proc/mounts").write_text(node_samples.BASE_MOUNTS + (EBS_LINE if disk else ""))
    (root / "opt/sagemaker").mkdir(parents=True)
    return root


def snapshot(root: Path) -> dict:
    out = {}
    for dirpath, _dirs, filenames in os.walk(root):
        for fn_ in filenames:
            p = Path(dirpath) / fn_
            if "var/log" in str(p):
                continue
            out[str(p.relative_to(root))] = ("link", os.readlink(p)) if p.is_symlink() else (
                p.read_bytes(), p.stat().st_mtime_ns)
    return out


def test_eks_node_through_on_create(tmp_path, imds_factory):
    """identify (InstanceName hyperpod-<id>), eks-storage; install, munge, slurm, host-certs, ssh-keys skipped."""
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = eks_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(IID, "g5.48xlarge")})
    env = dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root))
    steps = "identify,nccl-env,eks-storage,install,munge,slurm,host-certs,ssh-keys"
    res = node_samples.run_on_create(entry, env, "--steps", steps)
    assert res.returncode == 0, res.stdout + res.stderr
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert (info["role"], info["orchestrator"], info["instance_name"]) == ("worker", "eks", "hyperpod-" + IID)
    for step in ("install", "munge", "slurm", "host-certs", "ssh-keys"):
        assert f"step {step}: skipped (EKS cluster" in res.stdout
    written = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert not any("munge" in p or "slurm" in p for p in written), written
    # containerd: the AMI's ExecStart plus --root on the volume; the AMI's data came along.
    data_root = root / "opt/sagemaker/containerd/data-root"
    ctx = make_context(root)
    argv, _ = systemctl.Systemd(str(root)).command("containerd.service",
                                                           ctx.services.unit_sections("containerd.service"))
    assert argv == ["/usr/bin/containerd", "--root", str(data_root)]
    assert (data_root / "io.containerd.content.v1.content/blobs/sha256/0f5ac6b1").read_bytes() == b"pause image layer"
    dropin = (root / "etc/systemd/system/containerd.service.d/hpq-data-root.conf").read_text()
    assert f"RequiresMountsFor={root}/opt/sagemaker" in dropin
    assert (root / "usr/lib/systemd/system/containerd.service").read_text() == node_samples.AL2023_CONTAINERD_UNIT
    # kubelet: the well-known path is a link onto the volume, its contents moved, start ordered after it.
    kubelet = root / "var/lib/kubelet"
    assert kubelet.is_symlink() and os.readlink(kubelet) == str(root / "opt/sagemaker/kubelet")
    assert (kubelet / "kubeconfig").read_text().startswith("apiVersion: v1")
    sections = ctx.services.unit_sections("kubelet.service")
    assert sections["Unit"]["RequiresMountsFor"] == [f"{root}/opt/sagemaker"]
    assert sections["Service"]["ExecStart"] == ["/usr/bin/kubelet $NODEADM_KUBELET_ARGS"]  # unchanged
    before = snapshot(root)
    again = node_samples.run_on_create(entry, env, "--steps", steps)
    assert again.returncode == 0 and "already on /opt/sagemaker" in again.stdout
    assert snapshot(root) == before


def test_running_daemons_are_stopped_around_the_move_and_started_again(tmp_path):
    keeper = f"[Service]\nExecStart={sys.executable} -c 'import time; time.sleep(300)'\n"
    root = eks_node(tmp_path, units=(keeper, keeper))
    ctx = make_context(root)
    mgr = ctx.services
    mgr.ensure_running("containerd.service")
    mgr.ensure_running("kubelet.service")
    standin = systemctl.Systemd(str(root))
    old = {u: standin.main_pid(u) for u in ("containerd.service", "kubelet.service")}
    try:
        result = eks_storage.run(ctx)
        assert "restarted containerd.service, kubelet.service" in result
        new = {u: standin.main_pid(u) for u in old}
        assert all(new[u] and new[u] != old[u] for u in old)
        cmdline = Path(f"/proc/{new['containerd.service']}/cmdline").read_bytes().split(b"\0")
        assert b"--root" in cmdline  # the restarted daemon runs with the drop-in
        assert "already on" in eks_storage.run(ctx) and standin.main_pid("containerd.service") == new["containerd.service"]
    finally:
        for unit in old:
            mgr.stop(unit)


def test_no_volume_after_the_bounded_wait_changes_nothing(tmp_path):
    root = eks_node(tmp_path, disk=False)
    ctx = make_context(root, HPQ_EKS_DISK_WAIT_S="0.3")
    before = snapshot(root)
    assert eks_storage.run(ctx) == "skipped (/opt/sagemaker not mounted)"
    assert snapshot(root) == before


AL2023_OS_RELEASE = ('NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nVERSION_ID="2023"\n'
                     'PRETTY_NAME="Amazon Linux 2023.6.20250107"\n')


def fresh_root(root: Path, image: str, blob: bytes, kubeconfig: str | None) -> None:
    """Replace everything but /opt/sagemaker with a new AMI's root volume, as UpdateClusterSoftware does.

    AL2 (awslabs/amazon-eks-ami templates/al2/provisioners/install-worker.sh): containerd from the RPM, kubelet.service
    and the containerd compat drop-in in /etc/systemd/system, /var/lib/kubelet/kubeconfig baked in. AL2023: the units of
    tests/node_samples.py; the AMI's /var/lib/kubelet holds whatever the image ships (``kubeconfig`` None: empty).
    """
    for top in ("etc", "usr", "var", "run"):
        path = root / top
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            import shutil

            shutil.rmtree(path)
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text(AL2_OS_RELEASE if image == "al2" else AL2023_OS_RELEASE)
    units = root / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    if image == "al2":
        (units / "containerd.service").write_text(node_samples.AL2_CONTAINERD_UNIT)
        etc_units = root / "etc/systemd/system"
        (etc_units / "containerd.service.d").mkdir(parents=True)
        (etc_units / "containerd.service.d/10-compat-symlink.conf").write_text(node_samples.AL2_CONTAINERD_COMPAT_DROPIN)
        (etc_units / "kubelet.service").write_text(node_samples.AL2_KUBELET_UNIT)
    else:
        (units / "containerd.service").write_text(node_samples.AL2023_CONTAINERD_UNIT)
        (units / "kubelet.service").write_text(node_samples.AL2023_KUBELET_UNIT)
    blobs = root / "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256"
    blobs.mkdir(parents=True)
    (blobs / "new-pause").write_bytes(blob)
    (root / "var/lib/kubelet").mkdir(parents=True)
    if kubeconfig is not None:
        (root / "var/lib/kubelet/kubeconfig").write_text(kubeconfig)


@pytest.mark.parametrize("image", ["al2", "al2023"])
def test_rerun_after_software_update_uses_the_new_images_data(tmp_path, image):
    """UpdateClusterSoftware: new root volume, kept /opt/sagemaker holding the old AMI's containerd data and kubelet
    directory (pods, the old kubeconfig). As AWS's EKS lifecycle does (awsome-distributed-ai PR 884;
    1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh removes
    <disk>/containerd/data-root and <disk>/kubelet first), the re-run succeeds with the new image's containerd data
    and the new root's kubelet files; on AL2, whose image ships /var/lib/kubelet/kubeconfig, that used to fail with
    "both hold kubeconfig"."""
    root = eks_node(tmp_path)
    ctx = make_context(root)
    assert "this AMI's data copied" in eks_storage.run(ctx)
    disk = root / "opt/sagemaker"
    old_blob = disk / "containerd/data-root/io.containerd.content.v1.content/blobs/sha256/0f5ac6b1"
    assert old_blob.exists()
    (disk / "kubelet/pods/old-pod").mkdir(parents=True)  # the old node's kubelet state
    fresh_root(root, image, b"new pause layer", "apiVersion: v1\nkind: Config\n# new image\n" if image == "al2" else None)
    ctx = make_context(root)
    result = eks_storage.run(ctx)
    assert "this AMI's data copied" in result and "an earlier root's kubelet directory replaced" in result, result
    data_root = disk / "containerd/data-root"
    blobs = data_root / "io.containerd.content.v1.content/blobs/sha256"
    assert sorted(p.name for p in blobs.iterdir()) == ["new-pause"]  # the old image's data is gone
    assert (blobs / "new-pause").read_bytes() == b"new pause layer"
    kubelet = root / "var/lib/kubelet"
    assert kubelet.is_symlink() and os.readlink(kubelet) == str(disk / "kubelet")
    assert not (disk / "kubelet/pods").exists()
    if image == "al2":
        assert (kubelet / "kubeconfig").read_text().endswith("# new image\n")
    else:
        assert sorted(os.listdir(kubelet)) == []
    argv, _ = systemctl.Systemd(str(root)).command("containerd.service",
                                                           ctx.services.unit_sections("containerd.service"))
    assert argv == ["/usr/bin/containerd", "--root", str(data_root)]
    if image == "al2":  # the AMI's own drop-in next to ours still applies
        sections = ctx.services.unit_sections("containerd.service")
        assert "/bin/ln -sf /run/containerd/containerd.sock /run/dockershim.sock" in sections["Service"]["ExecStartPre"]
    assert not list(disk.glob("*.hpq-partial")) and not list((root / "var/lib").glob("*.hpq-moved"))
    # A plain re-run on this root keeps everything (the new node's data is not cleared again).
    (blobs / "pulled-since").write_bytes(b"image pulled by the new node")
    before = snapshot(root)
    assert "already on" in eks_storage.run(make_context(root))
    assert snapshot(root) == before


def test_rerun_after_update_through_on_create_on_al2(tmp_path, imds_factory):
    """The same scenario end to end: the bundle's on_create.sh on an AL2 root that replaced an earlier one."""
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = eks_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(IID, "g5.48xlarge")})
    env = dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root))
    assert node_samples.run_on_create(entry, env, "--steps", "identify,eks-storage").returncode == 0
    fresh_root(root, "al2", b"al2 pause", "apiVersion: v1\nkind: Config\n# al2\n")
    res = node_samples.run_on_create(entry, env, "--steps", "identify,eks-storage")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "an earlier root volume's containerd data (AMI update)" in res.stdout
    assert "an earlier root volume's kubelet directory (AMI update)" in res.stdout
    assert (root / "var/lib/kubelet/kubeconfig").read_text().endswith("# al2\n")


def test_a_move_killed_midway_finishes_on_the_next_run(tmp_path):
    """Killed after the root's kubelet directory was set aside but before the link: nothing of it is lost."""
    root = eks_node(tmp_path)
    disk = root / "opt/sagemaker"
    (disk / "kubelet").mkdir(parents=True)
    (disk / "kubelet/kubeconfig").write_text("apiVersion: v1\nkind: Config\n")  # the copy had completed
    (root / "var/lib/kubelet").rename(root / "var/lib/kubelet.hpq-moved")
    result = eks_storage.move_kubelet_root(str(root / "var/lib/kubelet"), str(disk / "kubelet"))
    assert "interrupted move finished" in result
    assert (root / "var/lib/kubelet/kubeconfig").read_text().startswith("apiVersion")
    assert not (root / "var/lib/kubelet.hpq-moved").exists()


def test_eks_storage_is_not_run_on_slurm_nodes(tmp_path):
    from hpq.lifecycle import main

    ctx = make_context(tmp_path / "node")
    ctx.node = identity.NodeInfo("c", "i-1", "n", "g", "worker", "10.0.0.2", "ml.g5.48xlarge", ["10.0.0.1"])
    main.run_steps(ctx, ["eks-storage"])  # would fail without units; skipped instead
    assert not (tmp_path / "node/etc").exists()


AL2_OS_RELEASE = ('NAME="Amazon Linux"\nVERSION="2"\nID="amzn"\nID_LIKE="centos rhel fedora"\nVERSION_ID="2"\n'
                  'PRETTY_NAME="Amazon Linux 2"\n')  # /etc/os-release of Amazon Linux 2 (os-release(5) fields)


@pytest.mark.parametrize("python", ["3.6", "missing"])
def test_too_old_or_missing_python_stops_with_one_line_naming_the_amis(tmp_path, python):
    """Python 3.7 (Amazon Linux 2's python3) is enough (tests/lifecycle/test_lifecycle_python37.py); older or none stops with
    one line. The stand-in answers the version checks on_create.sh makes as a 3.6 does."""
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text(AL2_OS_RELEASE)
    py = tmp_path / "python3"
    if python == "3.6":
        py.write_text('#!/bin/sh\ncase "$2" in *version_info\\ \\<*) exit 1;; *print*) echo 3.6;; esac\n')
        py.chmod(0o755)
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(root), HPQ_PYTHON=str(py)))
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    have = "3.6" if python == "3.6" else "none"
    assert lines[0] == (f"hpq on_create: needs python3 3.7 or newer but {py} is {have} on Amazon Linux 2: use "
                        "HyperPod's own AMIs (Amazon Linux 2023 or Amazon Linux 2 for EKS nodes, Ubuntu for Slurm "
                        "nodes)")
    assert lines[0] in (root / "var/log/hpq/on_create.log").read_text()
