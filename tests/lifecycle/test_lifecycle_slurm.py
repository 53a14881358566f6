"""Real munged + slurmctld + two slurmd, configured only by the lifecycle (configless), run twice.

Stand-ins (see tests/slurm_cluster.py): the HyperPod agent's files, IMDS, systemd
(direct process start of the same unit files) and the FSx mount (a linked directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.slurm_cluster import HYPERPOD_MUNGE_KEY, NODES

pytestmark = pytest.mark.slow

DAEMON_OWNED = ("var/log", "var/spool", "var/lib/munge", "run/munge", "run/slurm")


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file the lifecycle could have written: content, mode and mtime (a rewrite changes mtime)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not os.path.join(rel_dir, d).lstrip("./").startswith(DAEMON_OWNED)]
        for fn in filenames:
            p = Path(dirpath) / fn
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
                continue
            st = p.stat()
            out[str(p.relative_to(root))] = (p.read_bytes(), st.st_mode, st.st_mtime_ns, st.st_uid)
    return out


def test_srun_runs_on_both_nodes(slurm_cluster):
    res = slurm_cluster.run(["srun", "-N2", "hostname"])
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.split()) == 2
    res = slurm_cluster.run(["srun", "-N2", "-l", "printenv", "SLURMD_NODENAME"])
    assert res.returncode == 0, res.stderr
    assert sorted(line.split(": ")[1] for line in res.stdout.splitlines()) == NODES


def test_sinfo_shows_both_nodes_idle(slurm_cluster):
    states = slurm_cluster.wait_idle(30)
    assert {n: states[n] for n in NODES} == {n: "idle" for n in NODES}


def test_workers_are_configless(slurm_cluster):
    ctl_conf = (slurm_cluster.roots["controller"] / "opt/slurm/etc/slurm.conf").read_text()
    # The agent's value is kept, enable_configless merged in.
    assert "SlurmctldParameters=idle_on_node_suspend,enable_configless" in ctl_conf.splitlines()
    for node in NODES:
        root = slurm_cluster.roots[node]
        assert not (root / "etc/slurm/slurm.conf").exists()
        assert not (root / "opt/slurm/etc/slurm.conf").exists()
        fetched = root / "var/spool/slurmd/conf-cache/slurm.conf"
        assert "enable_configless" in fetched.read_text(), "slurmd must run on the config it fetched"
        # The AMI's unit is untouched; the drop-in carries --conf-server; the running slurmd got it.
        assert "--conf-server" not in (root / "etc/systemd/system/slurmd.service").read_text()
        dropin = (root / "etc/systemd/system/slurmd.service.d/hpq-conf-server.conf").read_text()
        assert "--conf-server 127.0.0.1:" in dropin
        pid = int((root / "run/hpq/services/slurmd.service.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--conf-server" in cmdline and node.encode() in cmdline


def test_each_node_masks_the_daemon_it_must_not_run(slurm_cluster):
    """slurmd masked on the controller, slurmctld on the workers (AWS's start_slurm.sh sets them aside; details and
    why in tests/lifecycle/test_lifecycle_slurm_daemon_roles.py), while each node's own daemon runs."""
    ctl = slurm_cluster.roots["controller"]
    assert os.readlink(ctl / "etc/systemd/system/slurmd.service") == "/dev/null"
    assert not (ctl / "run/hpq/services/slurmd.service.pid").exists()
    assert (ctl / "run/hpq/services/slurmctld.service.pid").exists()
    for node in NODES:
        root = slurm_cluster.roots[node]
        assert os.readlink(root / "etc/systemd/system/slurmctld.service") == "/dev/null"
        assert (root / "etc/systemd/system/slurmd.service").is_file()


def test_one_munge_key_everywhere_and_it_is_hyperpods(slurm_cluster):
    """The controller and node-1 booted with the same key (kept); node-2 with another (replaced). The jobs
    that ran on both workers prove munged on every node accepts the others' credentials."""
    keys = {name: (root / "etc/munge/munge.key").read_bytes() for name, root in slurm_cluster.roots.items()}
    assert set(keys.values()) == {HYPERPOD_MUNGE_KEY}
    assert (slurm_cluster.shared_dir / ".hpq/munge/munge.key").read_bytes() == HYPERPOD_MUNGE_KEY
    assert oct((slurm_cluster.roots["node-1"] / "etc/munge/munge.key").stat().st_mode & 0o777) == "0o400"
    logs = {name: (slurm_cluster.base / f"lifecycle-{name}.out").read_text() for name in slurm_cluster.roots}
    assert "MUNGE key: kept this node's key sha256:" in logs["controller"]
    assert "recorded it as the cluster key" in logs["controller"]
    assert "MUNGE key: kept this node's key sha256:" in logs["node-1"] and "the same as the cluster key" in logs["node-1"]
    assert "MUNGE key: replaced this node's key sha256:" in logs["node-2"]


def test_ssh_key_shared_through_fsx(slurm_cluster):
    pubs = {name: (root / "root/.ssh/id_ed25519_hpq.pub").read_text() for name, root in slurm_cluster.roots.items()}
    assert len(set(pubs.values())) == 1
    for root in slurm_cluster.roots.values():
        auth = (root / "root/.ssh/authorized_keys").read_text()
        assert auth.count(pubs["controller"].strip()) == 1


def test_node_commands_installed(slurm_cluster):
    root = slurm_cluster.roots["controller"]
    assert (root / "opt/hpq/hpq/lifecycle/main.py").exists()
    wrappers = sorted(p.name for p in (root / "usr/local/bin").iterdir())
    bin_dir = slurm_cluster.roots["controller"] / "opt/hpq/hpq/scripts/bin"
    assert wrappers == sorted(p.name for p in bin_dir.iterdir())
    for name in wrappers:
        assert os.access(root / "usr/local/bin" / name, os.X_OK)


def test_second_run_changes_nothing_and_cluster_stays_healthy(slurm_cluster):
    before = {name: snapshot(root) for name, root in slurm_cluster.roots.items()}
    shared_before = snapshot(slurm_cluster.shared_dir)
    pids = slurm_cluster.daemon_pids()
    for name in slurm_cluster.roots:
        res = slurm_cluster.run_lifecycle(name)
        assert res.returncode == 0, res.stdout[-3000:]
        assert "already running" in res.stdout and "FAILED" not in res.stdout
    after = {name: snapshot(root) for name, root in slurm_cluster.roots.items()}
    for name in slurm_cluster.roots:
        changed = sorted(k for k in set(before[name]) | set(after[name]) if before[name].get(k) != after[name].get(k))
        assert changed == [], f"second run changed files on {name}: {changed}"
    assert snapshot(slurm_cluster.shared_dir) == shared_before
    assert slurm_cluster.daemon_pids() == pids, "no daemon may be restarted when nothing changed"
    slurm_cluster.wait_idle(30)
    res = slurm_cluster.run(["srun", "-N2", "hostname"])
    assert res.returncode == 0, res.stderr


def test_ssh_key_handed_out_over_slurm_when_there_is_no_fsx(slurm_cluster, monkeypatch, tmp_path):
    """The no-shared-filesystem path: the controller's batch job installs the pair on every worker.

    Uses the user ``nobody`` so the cluster's own (FSx-shared) root key stays as it is.
    """
    import time

    from hpq.lifecycle import identity, ssh_keys
    from tests.slurm_cluster import make_context

    # HPQ_SLURM_NODE_ROOT: where each node's tree is, as its jobs see it (%n: the Slurm node name).
    ctx = make_context(tmp_path / "controller", HPQ_SLURM_NODE_ROOT=f"{slurm_cluster.base}/%n")
    ctx.node = identity.NodeInfo("hpq-test", "i-c", "controller", "controller-machine", "controller", "127.0.0.1",
                                 "ml.m5.xlarge", ["127.0.0.1"], ["controller"], worker_count=len(NODES),
                                 cluster_hostnames=["ip-127-0-0-2", "ip-127-0-0-3"], worker_nodes=list(NODES))
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    private, public = ssh_keys.generate("nobody@hpq-test")
    assert "queued Slurm job" in ssh_keys.distribute_over_slurm(ctx, "nobody", private, public)
    homes = [slurm_cluster.roots[n] / "nonexistent/.ssh" for n in NODES]
    deadline = time.time() + 30
    while time.time() < deadline and not all((h / "config").exists() for h in homes):
        time.sleep(0.3)
    time.sleep(0.5)
    for home in homes:
        assert (home / "id_ed25519_hpq").read_bytes() == private
        assert (home / "id_ed25519_hpq.pub").read_bytes() == public
        assert (home / "authorized_keys").read_text().count(public.decode().strip()) == 1
        assert oct((home / "id_ed25519_hpq").stat().st_mode & 0o777) == "0o600"
        config = (home / "config").read_text()
        # Without a shared filesystem there is no host CA: first-seen keys are accepted for cluster names only.
        assert "IdentityFile ~/.ssh/id_ed25519_hpq" in config
        assert "Host ip-127-0-0-2 ip-127-0-0-3\n    StrictHostKeyChecking accept-new" in config
        assert "Host *\n    StrictHostKeyChecking" not in config
    assert "already handed" in ssh_keys.distribute_over_slurm(ctx, "nobody", private, public)
