"""The lifecycle steps one by one, in temp node roots (no daemons): identity, files, Slurm config and
drop-in, service unit handling, NCCL environment files, install, MUNGE key logic, idempotency, failures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import files, identity, install, munge, names, node_env, services, slurm, ssh_keys
from hpq.tests.fixtures_imds import imds_factory  # noqa: F401
from hpq.tests.fixtures_slurm import (
    CONTROLLER_GROUP,
    INSTANCE_IDS,
    WORKER_GROUP,
    build_bundle,
    make_context,
    resource_config,
    write_node_files,
)

PARAMS = identity.ProvisioningParameters(cluster_name="c", controller_group=CONTROLLER_GROUP,
                                         worker_groups=[WORKER_GROUP], login_group="login-group")


# ---------------------------------------------------------------------------- identity


def test_identify_worker_and_controller_from_resource_config():
    node = identity.identify(resource_config(), INSTANCE_IDS["node-2"], PARAMS)
    assert (node.role, node.group, node.instance_name, node.instance_type) == (
        "worker", WORKER_GROUP, "node-2", "ml.g5.16xlarge")
    assert node.controller_ips == ["127.0.0.1"] and node.worker_count == 2
    assert identity.identify(resource_config(), INSTANCE_IDS["controller"], PARAMS).role == "controller"


def test_role_comes_from_the_group_name_never_the_instance_type():
    rc = resource_config()
    rc["InstanceGroups"][0]["InstanceType"] = "ml.p5.48xlarge"  # a GPU controller is still the controller
    rc["InstanceGroups"][1]["InstanceType"] = "ml.m5.xlarge"  # an m5 worker is still a worker
    assert identity.identify(rc, INSTANCE_IDS["controller"], PARAMS).role == "controller"
    assert identity.identify(rc, INSTANCE_IDS["node-1"], PARAMS).role == "worker"
    rc["InstanceGroups"].append({"Name": "login-group", "InstanceType": "ml.m5.large",
                                 "Instances": [{"InstanceId": "i-login", "CustomerIpAddress": "10.0.0.9"}]})
    assert identity.identify(rc, "i-login", PARAMS).role == "login"


def test_unknown_instance_and_unknown_group_are_clear_errors():
    with pytest.raises(identity.IdentityError, match="i-nope is not in resource_config.json.*i-0a0"):
        identity.identify(resource_config(), "i-nope", PARAMS)
    other = identity.ProvisioningParameters("c", "ctl", ["workers"])
    with pytest.raises(identity.IdentityError, match="group 'worker-group-1' is none of"):
        identity.identify(resource_config(), INSTANCE_IDS["node-1"], other)


def test_identify_step_uses_imdsv2_and_writes_node_info(tmp_path, imds_factory):  # noqa: F811
    srv = imds_factory({"": {"instance-id": INSTANCE_IDS["node-1"], "instance-type": "ml.g5.16xlarge"}})
    root = tmp_path / "node"
    params = write_node_files(root)
    ctx = make_context(root, HPQ_IMDS_URL=srv.url, HPQ_PROVISIONING_PARAMETERS=str(params))
    assert "is worker in group worker-group-1" in identity.run(ctx)
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert info["instance_id"] == INSTANCE_IDS["node-1"] and info["role"] == "worker"
    assert info["instance_type"] == "ml.g5.16xlarge" and info["cluster_name"] == "hpq-test"
    assert srv.log[0][0] == "PUT"


def test_provisioning_parameters_validated(tmp_path):
    p = tmp_path / "pp.json"
    p.write_text(json.dumps({"cluster_name": "c", "worker_groups": ["w"]}))
    with pytest.raises(identity.IdentityError, match="lack controller_group"):
        identity.ProvisioningParameters.load(str(p))


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
    mgr = services.DirectManager(ctx)
    with pytest.raises(services.ServiceError, match="ConditionPathExists"):
        mgr.command("slurmd.service")  # a configless node has no slurm.conf: the vendor unit alone won't start
    node = identity.NodeInfo("c", "i-1", "n", WORKER_GROUP, "worker", "10.0.0.2", "ml.g5.16xlarge",
                             controller_ips=["10.0.0.1", "10.0.0.3"])
    vendor = services.exec_start("slurmd.service", mgr.unit_sections("slurmd.service", with_dropins=False))
    assert mgr.write_dropin("slurmd.service", slurm.DROPIN, slurm.dropin_text(vendor, slurm.conf_server(node, 6817)))
    argv, env, kind = mgr.command("slurmd.service")
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
    argv, env, _ = services.DirectManager(make_context(root)).command("x.service")
    assert argv == ["/bin/echo", "from-file", "two words"]  # EnvironmentFile wins, ${B} stays one word


def test_direct_manager_starts_stops_and_reports(tmp_path):
    root = tmp_path / "n"
    write_unit(root, "sleeper.service", "[Service]\nExecStart=/bin/sleep 30\n")
    mgr = services.DirectManager(make_context(root))
    assert not mgr.is_active("sleeper.service")
    assert mgr.ensure_running("sleeper.service") == "started"
    pid = mgr.pid("sleeper.service")
    try:
        assert mgr.ensure_running("sleeper.service") == "already running" and mgr.pid("sleeper.service") == pid
        assert mgr.ensure_running("sleeper.service", restart=True) == "restarted"
        assert mgr.pid("sleeper.service") != pid
    finally:
        mgr.stop("sleeper.service")
    assert not mgr.is_active("sleeper.service")
    write_unit(root, "dies.service", "[Service]\nExecStart=/bin/sh -c 'echo boom; exit 3'\n")
    with pytest.raises(services.ServiceError, match="exited 3 right after start.*boom"):
        mgr.ensure_running("dies.service")


def test_controller_waits_boundedly_for_the_agents_slurm_conf(tmp_path):
    with pytest.raises(slurm.SlurmError, match="no slurm.conf naming a controller.*after 1s"):
        slurm.wait_for_conf(str(tmp_path / "slurm.conf"), 1.0)


# ---------------------------------------------------------------------------- NCCL environment files


def node_ctx_with(tmp_path: Path, instance_type: str, **env):
    root = tmp_path / "node"
    ctx = make_context(root, **env)
    ctx.node = identity.NodeInfo("c", "i-1", "n", WORKER_GROUP, "worker", "10.0.0.2", instance_type,
                                 controller_ips=["10.0.0.1"])
    ctx.params = PARAMS
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
    mgr = services.SystemdManager(make_context(root, HPQ_SERVICE_MANAGER="systemd"))
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


def test_munge_key_published_by_controller_adopted_by_workers(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    ctl, _ = node_ctx_with(tmp_path / "c", "ml.m5.xlarge", HPQ_SHARED_WAIT_S="1")
    wrk, _ = node_ctx_with(tmp_path / "w", "ml.g5.16xlarge", HPQ_SHARED_WAIT_S="1")
    ctl.node.role = "controller"
    from hpq.lifecycle import fsx

    orig = fsx.shared_dir
    try:
        fsx.shared_dir = lambda ctx: str(shared)
        with pytest.raises(munge.MungeError, match="waited 1s for the controller to publish"):
            munge.desired_key(wrk, "worker")
        key = munge.desired_key(ctl, "controller")
        assert len(key) == 1024 and (shared / munge.SHARED_KEY).read_bytes() == key
        assert munge.desired_key(wrk, "worker") == key
        assert munge.desired_key(ctl, "controller") == key  # adopts the published key on re-run
        fsx.shared_dir = lambda ctx: None
        with pytest.raises(munge.MungeError, match="no MUNGE key"):
            munge.desired_key(wrk, "worker")
    finally:
        fsx.shared_dir = orig


# ---------------------------------------------------------------------------- whole run


def snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "var/log" not in str(p.relative_to(root)):
            st = p.stat()
            out[str(p.relative_to(root))] = (p.read_bytes(), st.st_mode, st.st_mtime_ns)
    return out


def test_run_twice_changes_nothing(tmp_path, imds_factory):  # noqa: F811
    """identify, nccl-env, fsx (explicit DNS, recorded mount), install, ssh-keys; daemon steps: test_lifecycle_slurm."""
    srv = imds_factory({"": {"instance-id": INSTANCE_IDS["controller"], "instance-type": "x"}})
    root = tmp_path / "node"
    params = write_node_files(root, params={
        "version": "1.0.0", "cluster_name": "c", "controller_group": CONTROLLER_GROUP, "login_group": None,
        "worker_groups": [WORKER_GROUP], "fsx_dns_name": "fs-1.example", "fsx_mountname": "abc"})
    shared = tmp_path / "shared"
    shared.mkdir()
    mount = tmp_path / "mount"
    mount.write_text(f'#!/bin/sh\nfor a in "$@"; do src=$tgt; tgt=$a; done\nrmdir "$tgt"; ln -s {shared} "$tgt"\n'
                     f'mkdir -p {root}/proc; echo "$src $tgt lustre rw 0 0" >> {root}/proc/mounts\n')
    mount.chmod(0o755)
    env = dict(os.environ, HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_PROVISIONING_PARAMETERS=str(params),
               HPQ_MOUNT_CMD=str(mount), HPQ_DEFAULT_USER="root", HPQ_STEPS="identify,nccl-env,fsx,install,ssh-keys")
    first = subprocess.run([sys.executable, "-m", "hpq.lifecycle.main"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    before, shared_before = snapshot(root), snapshot(shared)
    for must in ("etc/hpq/node-info.json", "etc/fstab", "etc/environment", "etc/profile.d/hpq-nccl.sh",
                 "root/.ssh/authorized_keys", "root/.ssh/id_ed25519_hpq", "opt/hpq/hpq/lifecycle/main.py"):
        assert must in before
    second = subprocess.run([sys.executable, "-m", "hpq.lifecycle.main"], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout
    assert snapshot(root) == before and snapshot(shared) == shared_before
    for step in ("identify", "nccl-env", "fsx", "install", "ssh-keys"):
        assert f"step {step}: start" in second.stdout and f"step {step}: done" in second.stdout


def test_failure_names_the_step_and_exits_nonzero(tmp_path):
    """on_create.sh from a real bundle layout, IMDS unreachable: step identify fails with its cause."""
    on_create = build_bundle(tmp_path / "bundle")
    root = tmp_path / "node"
    params = write_node_files(root)
    env = dict(os.environ, HPQ_ROOT=str(root), HPQ_IMDS_URL="http://127.0.0.1:9", HPQ_PROVISIONING_PARAMETERS=str(params))
    res = subprocess.run(["bash", str(on_create)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "step identify failed: IMDS token request at http://127.0.0.1:9 failed after 4 attempts" in res.stdout
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
