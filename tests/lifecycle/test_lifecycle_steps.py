"""The lifecycle steps one by one, in temp node roots (no daemons): files, Slurm config and drop-in, service
unit handling, NCCL environment files, install, MUNGE key cases, idempotency, failures. Identity from
HyperPod's files: tests/lifecycle/test_lifecycle_identity.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpq.lifecycle import files, identity, install, munge, node_env, services, slurm, ssh_keys
from hpq.standins import systemctl
from tests import node_samples
from tests.slurm_cluster import (
    INSTANCE_IDS,
    WORKER_GROUP,
    build_bundle,
    make_context,
    write_node_files,
)

# ---------------------------------------------------------------------------- managed files


def test_managed_block_replaced_never_appended_twice():
    text = "PATH=/usr/bin\n"
    once = files.replace_block(text, "nccl", ["A=1"])
    twice = files.replace_block(once, "nccl", ["A=1"])
    assert once == twice and once.startswith("PATH=/usr/bin\n")
    changed = files.replace_block(twice, "nccl", ["A=2", "B=3"])
    assert changed.count("BEGIN hpq managed: nccl") == 1 and "A=1" not in changed and "B=3" in changed
    assert files.replace_block(changed, "nccl", []) == "PATH=/usr/bin\n"


def test_write_file_leaves_unchanged_files_alone(tmp_path):
    p = str(tmp_path / "f")
    assert files.write_file(p, "x", 0o600)
    mtime = os.stat(p).st_mtime_ns
    assert not files.write_file(p, "x", 0o600)
    assert os.stat(p).st_mtime_ns == mtime
    assert files.write_file(p, "x", 0o644) and os.stat(p).st_mode & 0o777 == 0o644


# ---------------------------------------------------------------------------- slurm config + drop-in


@pytest.mark.parametrize("before,after", [
    ("ClusterName=x\n", "ClusterName=x\nSlurmctldParameters=enable_configless\n"),
    ("SlurmctldParameters=idle_on_node_suspend\n", "SlurmctldParameters=idle_on_node_suspend,enable_configless\n"),
    ("slurmctldparameters = a,b # agent\n", "slurmctldparameters=a,b,enable_configless # agent\n"),
    ("SlurmctldParameters=enable_configless,x\n", "SlurmctldParameters=enable_configless,x\n"),
])
def test_enable_configless_is_merged(before, after):
    text, changed = slurm.ensure_configless(before)
    assert text == after and changed == (before != after)
    assert slurm.ensure_configless(text) == (text, False)


def write_unit(root: Path, name: str, text: str) -> None:
    d = root / "lib/systemd/system"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)


DEBIAN_SLURMD = ("[Unit]\nConditionPathExists=/etc/slurm/slurm.conf\n[Service]\nType=simple\n"
                 "EnvironmentFile=-/etc/default/slurmd\nExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS\n")


def test_conf_server_dropin_configures_slurmd_without_touching_the_vendor_unit(tmp_path):
    root = tmp_path / "n"
    write_unit(root, "slurmd.service", DEBIAN_SLURMD)
    (root / "etc/default").mkdir(parents=True)
    (root / "etc/default/slurmd").write_text('SLURMD_OPTIONS="-v"\n')
    ctx = make_context(root)
    mgr = ctx.services
    standin = systemctl.Systemd(str(root))
    # A configless node has no slurm.conf: the vendor unit alone is skipped (systemd.unit(5): a failed condition
    # is no error, the unit stays inactive).
    assert not standin.conditions_met(mgr.unit_sections("slurmd.service"))
    node = identity.NodeInfo("c", "i-1", "n", WORKER_GROUP, "worker", "10.0.0.2", "ml.g5.16xlarge",
                             controller_ips=["10.0.0.1", "10.0.0.3"])
    vendor = services.exec_start("slurmd.service", mgr.unit_sections("slurmd.service", with_dropins=False))
    assert mgr.write_dropin("slurmd.service", slurm.DROPIN, slurm.dropin_text(vendor, slurm.conf_server(node, 6817)))
    assert standin.conditions_met(mgr.unit_sections("slurmd.service"))  # the drop-in's ConditionPathExists= reset
    argv, env = standin.command("slurmd.service", mgr.unit_sections("slurmd.service"))
    assert argv == ["/usr/sbin/slurmd", "-D", "-s", "-v", "--conf-server", "10.0.0.1:6817,10.0.0.3:6817"]
    assert (root / "lib/systemd/system/slurmd.service").read_text() == DEBIAN_SLURMD
    # Same content again: no change (so no restart).
    assert not mgr.write_dropin("slurmd.service", slurm.DROPIN,
                                slurm.dropin_text(vendor, slurm.conf_server(node, 6817)))


def test_unit_parser_environment_precedence_and_resets(tmp_path):
    root = tmp_path / "n"
    write_unit(root, "x.service", "[Service]\nEnvironment=A=1 \"B=two words\"\nEnvironmentFile=-/etc/x\n"
                                  "ExecStart=/bin/echo $A ${B} $MISSING\n")
    (root / "etc").mkdir()
    (root / "etc/x").write_text("A=from-file\n")
    argv, env = systemctl.Systemd(str(root)).command("x.service", make_context(root).services.unit_sections(
        "x.service"))
    assert argv == ["/bin/echo", "from-file", "two words"]  # EnvironmentFile wins, ${B} stays one word


def test_the_manager_starts_stops_and_reports_through_systemctl(tmp_path):
    """SystemdManager through the systemctl stand-in: start, already running, restart (a new main PID), stop; a
    simple service that dies at once started fine (systemd.service(5): start returns once it is forked) and then
    reads as not active, so the caller's wait sees it."""
    root = tmp_path / "n"
    write_unit(root, "sleeper.service", "[Service]\nExecStart=/bin/sleep 30\n")
    mgr = make_context(root).services
    standin = systemctl.Systemd(str(root))
    assert not mgr.is_active("sleeper.service")
    assert mgr.ensure_running("sleeper.service") == "started"
    pid = standin.main_pid("sleeper.service")
    try:
        assert pid and mgr.ensure_running("sleeper.service") == "already running"
        assert standin.main_pid("sleeper.service") == pid
        assert mgr.ensure_running("sleeper.service", restart=True) == "restarted"
        assert standin.main_pid("sleeper.service") not in (None, pid)
    finally:
        mgr.stop("sleeper.service")
    assert not mgr.is_active("sleeper.service") and not systemctl.pid_alive(pid)
    write_unit(root, "dies.service", "[Service]\nExecStart=/bin/sh -c 'echo boom; exit 3'\n")
    assert mgr.ensure_running("dies.service") == "started"
    deadline = time.time() + 10  # a loaded host may take a while to run even /bin/sh
    while mgr.is_active("dies.service") and time.time() < deadline:
        time.sleep(0.1)
    assert not mgr.is_active("dies.service") and standin.active_state("dies.service") == "failed"
    assert "boom" in (root / "var/log/hpq/dies.service.log").read_text()
    with pytest.raises(services.ServiceError, match="Unit nothere.service not found"):
        mgr.ensure_running("nothere.service")


def test_controller_waits_boundedly_for_the_agents_slurm_conf(tmp_path):
    with pytest.raises(slurm.SlurmError, match="no slurm.conf naming a controller.*after 1s"):
        slurm.wait_for_conf(str(tmp_path / "slurm.conf"), 1.0)


# ---------------------------------------------------------------------------- NCCL environment files


def node_ctx_with(tmp_path: Path, instance_type: str, **env):
    root = tmp_path / "node"
    ctx = make_context(root, **env)
    ctx.node = identity.NodeInfo("c", "i-1", "n", WORKER_GROUP, "worker", "10.0.0.2", instance_type,
                                 controller_ips=["10.0.0.1"])
    return ctx, root


def test_nccl_env_files_written_once_and_replaced(tmp_path):
    ctx, root = node_ctx_with(tmp_path, "ml.g5.48xlarge")
    (root / "etc").mkdir(parents=True)
    (root / "sys/class/infiniband/rdmap0s6").mkdir(parents=True)  # the EFA device the probe looks for
    (root / "etc/environment").write_text('PATH="/usr/local/sbin:/usr/bin"\n')
    node_env.run(ctx)
    assert "files unchanged" in node_env.run(ctx)
    environment = (root / "etc/environment").read_text()
    assert environment.startswith('PATH="/usr/local/sbin:/usr/bin"\n')
    assert environment.count("FI_EFA_USE_DEVICE_RDMA=0") == 1 and environment.count("BEGIN hpq managed") == 1
    profile = (root / "etc/profile.d/hpq-nccl.sh").read_text()
    assert "export FI_PROVIDER=efa" in profile
    # The node turns out to be a p5 (e.g. replaced): the block is replaced, not appended.
    ctx.node.instance_type = "ml.p5.48xlarge"
    node_env.run(ctx)
    environment = (root / "etc/environment").read_text()
    assert environment.count("FI_EFA_USE_DEVICE_RDMA") == 1 and "FI_EFA_USE_DEVICE_RDMA=1" in environment
    doc = json.loads((root / "etc/hpq/nccl-env.json").read_text())
    assert doc["transport"] == "efa-rdma"


def test_neuron_node_gets_path_and_ompi_root(tmp_path):
    ctx, root = node_ctx_with(tmp_path, "ml.trn1.32xlarge")
    node_env.run(ctx)
    profile = root / "etc/profile.d/hpq-nccl.sh"
    out = subprocess.run(["sh", "-c", f'PATH=/usr/bin:/bin; . {profile}; echo "$PATH $OMPI_ALLOW_RUN_AS_ROOT '
                                      f'$OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"'],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["/opt/aws/neuron/bin:/usr/bin:/bin", "1", "1"]
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in (root / "etc/environment").read_text()


def test_efa_probe_from_sys_overrides_catalog(tmp_path):
    ctx, root = node_ctx_with(tmp_path, "ml.p5.48xlarge")
    node_env.run(ctx)  # no /sys/class/infiniband under the root: no EFA device found -> TCP, and said so
    assert json.loads((root / "etc/hpq/nccl-env.json").read_text())["transport"] == "tcp"
    (root / "sys/class/infiniband/rdmap0s6").mkdir(parents=True)
    node_env.run(ctx)
    doc = json.loads((root / "etc/hpq/nccl-env.json").read_text())
    # fi_info is not installed here (probe: unknown), so the catalog's RDMA stands.
    assert doc["transport"] == "efa-rdma" and doc["variables"]["FI_EFA_USE_DEVICE_RDMA"] == "1"


# ---------------------------------------------------------------------------- install


def test_install_copies_bundle_and_wraps_commands(tmp_path):
    ctx, root = node_ctx_with(tmp_path, "ml.m5.xlarge")
    install.run(ctx)
    assert "0 written, 0 removed" in install.run(ctx)
    assert (root / "opt/hpq/hpq/lifecycle/on_create.sh").exists()
    assert (root / "opt/hpq/hpq/__init__.py").exists()
    cmds = sorted(p.name for p in (root / "usr/local/bin").iterdir())
    assert cmds == sorted(p.name for p in (root / "opt/hpq/hpq/scripts/bin").iterdir()) and cmds
    wrapper = (root / "usr/local/bin" / cmds[0]).read_text()
    assert f"exec /opt/hpq/hpq/scripts/bin/{cmds[0]}" in wrapper and "PYTHONPATH=/opt/hpq" in wrapper
    assert os.access(root / "usr/local/bin" / cmds[0], os.X_OK)
    stale = root / "opt/hpq/hpq/lifecycle/gone.py"
    stale.write_text("")
    cache = root / "opt/hpq/hpq/scripts/__pycache__/x.cpython-38.pyc"
    cache.parent.mkdir()
    cache.write_bytes(b"")
    assert "1 removed" in install.run(ctx) and not stale.exists() and cache.exists()


def test_systemd_manager_reloads_after_dropin_and_restarts_on_change(tmp_path, monkeypatch):
    """systemctl is a stand-in script (no systemd here) that records its arguments and says "inactive"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    state = tmp_path / "active"
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'case "$1" in is-active) test -e {state};; start|restart) touch {state};; esac\n')
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    root = tmp_path / "n"
    write_unit(root, "slurmd.service", DEBIAN_SLURMD)
    mgr = services.SystemdManager(make_context(root, HPQ_SYSTEMCTL_CMD=str(bin_dir / "systemctl")))
    assert mgr.write_dropin("slurmd.service", "hpq-x", "[Service]\nExecStart=\nExecStart=/bin/true\n")
    assert mgr.ensure_running("slurmd.service") == "started"
    assert not mgr.write_dropin("slurmd.service", "hpq-x", "[Service]\nExecStart=\nExecStart=/bin/true\n")
    assert mgr.ensure_running("slurmd.service") == "already running"
    assert mgr.ensure_running("slurmd.service", restart=True) == "restarted"
    assert calls.read_text().splitlines() == [
        "daemon-reload", "enable slurmd.service", "is-active --quiet slurmd.service", "start slurmd.service",
        "enable slurmd.service", "is-active --quiet slurmd.service",
        "enable slurmd.service", "is-active --quiet slurmd.service", "restart slurmd.service"]


# ---------------------------------------------------------------------------- MUNGE key logic


@pytest.fixture
def shared_fsx(tmp_path, monkeypatch):
    """A directory standing in for a mounted /fsx (fsx.shared_dir answers it)."""
    from hpq.lifecycle import fsx

    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setattr(fsx, "shared_dir", lambda ctx: str(shared))
    return shared


def _with_key(ctx, root: Path, key: bytes | None) -> None:
    if key is not None:
        (root / "etc/munge").mkdir(parents=True, exist_ok=True)
        (root / "etc/munge/munge.key").write_bytes(key)


def test_munge_keeps_the_key_hyperpod_gave_every_node(tmp_path, shared_fsx):
    """Every node booted with the same key: it is recorded once and nobody's key changes."""
    hyperpod_key = os.urandom(1024)
    ctl, croot = node_ctx_with(tmp_path / "c", "ml.m5.xlarge", HPQ_SHARED_WAIT_S="1")
    wrk, wroot = node_ctx_with(tmp_path / "w", "ml.g5.16xlarge", HPQ_SHARED_WAIT_S="1")
    _with_key(ctl, croot, hyperpod_key)
    _with_key(wrk, wroot, hyperpod_key)
    key, case = munge.desired_key(ctl, "controller")
    assert key == hyperpod_key and case.startswith("kept this node's key sha256:")
    assert "recorded it as the cluster key" in case and munge.fingerprint(hyperpod_key) in case
    assert (shared_fsx / munge.SHARED_KEY).read_bytes() == hyperpod_key
    key, case = munge.desired_key(wrk, "worker")
    fp = munge.fingerprint(hyperpod_key)
    assert key == hyperpod_key and case == f"kept this node's key {fp}: the same as the cluster key"
    assert hyperpod_key.hex()[:16] not in case  # a fingerprint, never the key


def test_munge_distributes_only_to_a_node_that_differs_or_has_none(tmp_path, shared_fsx):
    cluster_key, other = os.urandom(1024), os.urandom(1024)
    ctl, croot = node_ctx_with(tmp_path / "c", "ml.m5.xlarge", HPQ_SHARED_WAIT_S="1")
    odd, oroot = node_ctx_with(tmp_path / "w1", "ml.g5.16xlarge", HPQ_SHARED_WAIT_S="1")
    bare, _ = node_ctx_with(tmp_path / "w2", "ml.g5.16xlarge", HPQ_SHARED_WAIT_S="1")
    with pytest.raises(munge.MungeError, match="waited 1s for the controller to record the cluster MUNGE key"):
        munge.desired_key(bare, "worker")
    _with_key(ctl, croot, cluster_key)
    _with_key(odd, oroot, other)
    munge.desired_key(ctl, "controller")
    key, case = munge.desired_key(odd, "worker")
    assert key == cluster_key and case.startswith(f"replaced this node's key {munge.fingerprint(other)}: it differs")
    key, case = munge.desired_key(bare, "worker")
    assert key == cluster_key and case.startswith("installed the cluster key")
    # A re-imaged controller (new key of its own) adopts the recorded key: the running cluster keeps it.
    _with_key(ctl, croot, other)
    key, case = munge.desired_key(ctl, "controller")
    assert key == cluster_key and case.startswith("adopted the cluster key")


def test_munge_creates_a_key_only_when_none_exists(tmp_path, shared_fsx):
    ctl, _ = node_ctx_with(tmp_path / "c", "ml.m5.xlarge")
    key, case = munge.desired_key(ctl, "controller")
    assert len(key) == 1024 and case.startswith("created cluster key") and "this node had none" in case


def test_munge_without_shared_filesystem_keeps_each_nodes_key(tmp_path, monkeypatch):
    from hpq.lifecycle import fsx

    monkeypatch.setattr(fsx, "shared_dir", lambda ctx: None)
    wrk, wroot = node_ctx_with(tmp_path / "w", "ml.g5.16xlarge")
    with pytest.raises(munge.MungeError, match="no MUNGE key"):
        munge.desired_key(wrk, "worker")
    _with_key(wrk, wroot, b"k" * 1024)
    fp = munge.fingerprint(b"k" * 1024)
    assert munge.desired_key(wrk, "worker") == (
        b"k" * 1024, f"kept this node's key {fp} (no shared filesystem to compare keys through)")


# ---------------------------------------------------------------------------- whole run


def snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "var/log" not in str(p.relative_to(root)):
            st = p.stat()
            out[str(p.relative_to(root))] = (p.read_bytes(), st.st_mode, st.st_mtime_ns)
    return out


def test_run_twice_changes_nothing(tmp_path, imds_factory):
    """identify, nccl-env, fsx (documented provisioning parameters, mount.lustre stand-in), install, ssh-keys;
    daemon steps: test_lifecycle_slurm."""
    srv = imds_factory({"": node_samples.imds_answers(INSTANCE_IDS["controller"], "m5.xlarge")})
    root = tmp_path / "node"
    params = write_node_files(root, params=dict(
        node_samples.provisioning_parameters(), controller_group="controller-machine", login_group=None,
        worker_groups=[{"instance_group_name": WORKER_GROUP, "partition_name": "dev"}]))
    shared = tmp_path / "shared"
    shared.mkdir()
    mount = tmp_path / "mount"
    calls = node_samples.write_fake_mount(mount, shared=shared)
    modprobe = node_samples.write_recorder(tmp_path / "modprobe")
    env = dict(os.environ, HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_PROVISIONING_PARAMETERS=str(params),
               HPQ_MOUNT_CMD=str(mount), HPQ_MODPROBE_CMD=str(tmp_path / "modprobe"), HPQ_DEFAULT_USER="root",
               HPQ_STEPS="identify,nccl-env,fsx,install,ssh-keys")
    first = subprocess.run([sys.executable, "-m", "hpq.lifecycle.main"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    before, shared_before = snapshot(root), snapshot(shared)
    for must in ("etc/hpq/node-info.json", "etc/fstab", "etc/hpq/nccl-env.json",
                 "root/.ssh/authorized_keys", "root/.ssh/id_ed25519_hpq", "opt/hpq/hpq/lifecycle/main.py",
                 "opt/hpq/on_create.sh"):
        assert must in before
    # a controller (CPU): no transport variable where shells or jobs pick it up (tests/scripts/test_node_env_shells.py)
    assert "etc/environment" not in before and "etc/profile.d/hpq-nccl.sh" not in before
    assert modprobe.read_text().splitlines() == ["lnet", "lustre"]
    second = subprocess.run([sys.executable, "-m", "hpq.lifecycle.main"], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout
    assert snapshot(root) == before and snapshot(shared) == shared_before
    for step in ("identify", "nccl-env", "fsx", "install", "ssh-keys"):
        assert f"step {step}: start" in second.stdout and f"step {step}: done" in second.stdout
    assert len(calls.read_text().splitlines()) == 1 and "already mounted (10.1.40.25@tcp:/abcdefgh)" in second.stdout
    assert modprobe.read_text().splitlines() == ["lnet", "lustre"]  # nothing loaded again


def test_failure_names_the_step_and_exits_nonzero(tmp_path):
    """The shipped bundle's root on_create.sh; IMDS unreachable and no address of this node in
    resource_config.json: step identify fails with one line that says both."""
    entry = build_bundle(tmp_path / "bundle")
    root = tmp_path / "node"
    role_file = write_node_files(root)
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(root), HPQ_IMDS_URL="http://127.0.0.1:9",
                                                  HPQ_CLUSTER_CONFIG=str(role_file), HPQ_NODE_IP="10.9.9.9"))
    assert res.returncode == 1
    assert "no instance id (IMDS token request at http://127.0.0.1:9 failed after 4 attempts" in res.stdout
    assert ("step identify failed: this node (instance unknown: IMDS unreachable, addresses 10.9.9.9) is not in "
            f"{root}/opt/ml/config/resource_config.json") in res.stdout
    assert "Traceback" not in res.stdout + res.stderr
    log = (root / "var/log/hpq/on_create.log").read_text()
    assert "step identify: FAILED" in log


# ---------------------------------------------------------------------------- SSH key handling


def test_ssh_dir_and_key_are_owner_only(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh").chmod(0o775)  # e.g. made by hand: sshd would refuse it, and the key would be listed
    private, public = ssh_keys.generate("u@c")
    assert ssh_keys.install_pair(str(home), os.getuid(), os.getgid(), private, public)
    assert (home / ".ssh").stat().st_mode & 0o777 == 0o700
    assert (home / ".ssh" / ssh_keys.KEY_NAME).stat().st_mode & 0o777 == 0o600
    assert not ssh_keys.install_pair(str(home), os.getuid(), os.getgid(), private, public)


def test_slurm_job_keeps_the_private_key_out_of_command_lines():
    """``ps`` shows every command line to every user: the key may only sit in the job's environment."""
    import base64
    import shlex

    private, public = ssh_keys.generate("u@c")
    script = ssh_keys.slurm_job_script("u", private, public)
    b64 = base64.b64encode(private).decode()
    assert f"HPQ_SSH_PRIVATE_B64={b64}" in script.splitlines()
    srun = script[script.index("\nsrun ") + 1:]  # the one command, through its end (the inner script)
    assert b64 not in srun and private.decode().split("\n")[1] not in srun
    inner = shlex.split(srun)[-1]
    assert inner.splitlines()[:2] == ["set -e", "umask 077"] and "$HPQ_SSH_PRIVATE_B64" in inner

