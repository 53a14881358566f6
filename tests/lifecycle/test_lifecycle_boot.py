"""At boot: FSx names from configuration (no API call racing DNS), failures that wait for CloudWatch, names checked
before they reach fstab, and settings with one meaning.

The bundle runs as shipped (tests/node_samples.py build_bundle, the root on_create.sh). Name resolution on the
"node" is the host's resolver reading a private /etc/hosts: the run happens in its own mount namespace with a
hosts file bound over /etc/hosts (as the rehearsal's nodes have it, rehearsal/image.py), so the lifecycle's
getaddrinfo and the mount.lustre stand-in agree on what resolves. The FSx endpoint is a closed port: a call to it
would fail, so a passing run proves none was made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpq.lifecycle import fsx, identity, names
from tests import node_samples
from tests.slurm_cluster import make_context

WORKER = "worker-group-1-1"
WORKER_ID, WORKER_IP, _ = node_samples.SLURM_NODES[WORKER]
DEAD_ENDPOINT = "http://127.0.0.1:9"  # discard port: nothing answers


def slurm_worker(tmp_path: Path, cluster_config: dict | None = None, params: dict | None = None):
    """A Slurm worker's root, the bundle with hpq-cluster.json (or provisioning_parameters.json) next to it."""
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.slurm_resource_config())
    (root / "proc").mkdir(parents=True)
    (root / "proc/mounts").write_text(node_samples.BASE_MOUNTS)
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    if cluster_config is not None:
        node_samples.write_json(entry.parent / names.HPQ_CLUSTER_CONFIG, cluster_config)
    if params is not None:
        node_samples.write_json(entry.parent / names.PROVISIONING_PARAMETERS, params)
    mount_calls = node_samples.write_fake_mount(tmp_path / "fake-mount")
    node_samples.write_recorder(tmp_path / "modprobe")
    return root, entry, mount_calls


def hpq_cluster_json(**fsx_names) -> dict:
    return dict(node_samples.hpq_cluster_config(), **fsx_names)


def run_with_hosts(entry: Path, env: dict, hosts: dict[str, str], *args: str, timeout: float = 120):
    """on_create.sh as HyperPod runs it, with ``hosts`` added to /etc/hosts in a private mount namespace."""
    hosts_file = entry.parent.parent / "etc-hosts"
    base = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else "127.0.0.1 localhost\n"
    hosts_file.write_text(base + "".join(f"{ip} {name}\n" for name, ip in hosts.items()))
    ns = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    argv = ns + ["sh", "-c", 'mount --bind "$1" /etc/hosts && shift && exec bash "$@"', "sh", str(hosts_file),
                 entry.name, *args]
    return subprocess.run(argv, cwd=str(entry.parent), env=dict(node_samples.clean_env(), HPQ_FAIL_LOG_WAIT_S="0", **env),
                          capture_output=True, text=True, timeout=timeout)


def node_env(root: Path, tmp_path: Path, srv) -> dict:
    return dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_MOUNT_CMD=str(tmp_path / "fake-mount"),
                HPQ_MODPROBE_CMD=str(tmp_path / "modprobe"), AWS_ENDPOINT_URL=DEAD_ENDPOINT,
                HPQ_FSX_API_ATTEMPTS="1", HPQ_DNS_WAIT_S="2", HPQ_FSX_MOUNT_RETRY_S="0",
                AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_CONFIG_FILE=os.devnull,
                AWS_SHARED_CREDENTIALS_FILE=os.devnull)


def test_fsx_names_from_hpq_cluster_json_mount_without_an_api_call(tmp_path, imds_factory):
    """hpq-cluster.json names the filesystem (the S3 stack writes the Storage stack's DNSName/LustreMountName):
    identify reads them, fsx mounts with them and writes fstab, and the FSx API (a closed port here) is never
    called. The same run with the names left out does call it and fails (the broken twin)."""
    root, entry, mount_calls = slurm_worker(tmp_path, hpq_cluster_json(fsx_dns_name=node_samples.FSX_DNS,
                                                                       fsx_mountname=node_samples.FSX_MOUNTNAME))
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID)})
    env = node_env(root, tmp_path, srv)
    res = run_with_hosts(entry, env, {node_samples.FSX_DNS: node_samples.FSX_IP}, "--steps", "identify,fsx")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"named by {entry.parent}/{names.HPQ_CLUSTER_CONFIG} ({names.HPQ_CLUSTER_CONFIG}): no FSx API call" \
        in res.stdout
    assert "FSx API" not in res.stdout.replace("no FSx API call", "")
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert (info["fsx_dns_name"], info["fsx_mountname"]) == (node_samples.FSX_DNS, node_samples.FSX_MOUNTNAME)
    assert mount_calls.read_text().splitlines() == [
        f"-t lustre -o relatime,flock {node_samples.FSX_DNS}@tcp:/{node_samples.FSX_MOUNTNAME} {root}/fsx"]
    assert f"{node_samples.FSX_DNS}@tcp:/{node_samples.FSX_MOUNTNAME} /fsx lustre" in (root / "etc/fstab").read_text()
    # the record the node programs check /fsx by (scripts/nodeinfo.fsx_to_check): where, and in which mount table
    record = json.loads((root / names.FSX_RECORD.lstrip("/")).read_text())
    assert record == {"mount_point": "/fsx", "mount_table": env.get("HPQ_PROC_MOUNTS") or "/proc/mounts"}

    root2, entry2, _ = slurm_worker(tmp_path / "twin", node_samples.hpq_cluster_config())
    res = run_with_hosts(entry2, dict(env, HPQ_ROOT=str(root2)), {node_samples.FSX_DNS: node_samples.FSX_IP}, "--steps", "identify,fsx")
    assert res.returncode == 1 and "FSx API still unreachable after 1 attempts" in res.stdout, res.stdout


def test_a_deleted_filesystem_named_in_hpq_cluster_json_is_looked_up_by_tag(tmp_path, imds_factory):
    """hpq-cluster.json names a filesystem whose DNS name does not resolve within HPQ_DNS_WAIT_S: the tag lookup
    decides. Here the API is unreachable too, so the step fails naming both (never a silent continue)."""
    root, entry, mount_calls = slurm_worker(tmp_path, hpq_cluster_json(fsx_dns_name=node_samples.FSX_DNS,
                                                                       fsx_mountname=node_samples.FSX_MOUNTNAME))
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID)})
    t0 = time.time()
    res = run_with_hosts(entry, node_env(root, tmp_path, srv), {}, "--steps", "identify,fsx")
    assert res.returncode == 1
    assert time.time() - t0 >= 2  # the DNS wait came first
    assert f"{node_samples.FSX_DNS} (from {entry.parent}/{names.HPQ_CLUSTER_CONFIG}" in res.stdout
    assert "asking the FSx API whether the filesystem still exists" in res.stdout
    assert "step fsx failed: FSx API still unreachable after 1 attempts" in res.stdout
    assert not mount_calls.exists() and not (root / "etc/fstab").exists()
    assert not (root / names.FSX_RECORD.lstrip("/")).exists()  # nothing mounted: /fsx is not expected


BAD_DNS = [node_samples.FSX_DNS + "\nattacker@tcp:/x /etc lustre defaults 0 0", node_samples.FSX_DNS + " /etc", "fs-1.fsx.\u2028x"]


@pytest.mark.parametrize("bad", BAD_DNS)
@pytest.mark.parametrize("source", [names.HPQ_CLUSTER_CONFIG, names.PROVISIONING_PARAMETERS])
def test_a_spliced_fsx_name_is_refused_before_fstab(tmp_path, imds_factory, bad, source):
    """fsx_dns_name with a newline, a blank or U+2028, from either file: identify fails with one line naming the
    file and the field; no fstab line, no mount."""
    if source == names.HPQ_CLUSTER_CONFIG:
        root, entry, mount_calls = slurm_worker(tmp_path, hpq_cluster_json(fsx_dns_name=bad,
                                                                           fsx_mountname=node_samples.FSX_MOUNTNAME))
    else:
        params = dict(node_samples.provisioning_parameters(), fsx_dns_name=bad)
        root, entry, mount_calls = slurm_worker(tmp_path, None, params)
    (root / "etc").mkdir(parents=True)
    (root / "etc/fstab").write_text("UUID=abc / ext4 defaults 0 1\n")
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID)})
    res = node_samples.run_on_create(entry, node_env(root, tmp_path, srv), "--steps", "identify,fsx")
    assert res.returncode == 1
    failed = [ln for ln in res.stdout.splitlines() if "step identify failed" in ln]
    assert len(failed) == 1 and f"{source}: fsx_dns_name {bad!r} is not a DNS name" in failed[0], res.stdout
    assert (root / "etc/fstab").read_text() == "UUID=abc / ext4 defaults 0 1\n"
    assert not mount_calls.exists() and "Traceback" not in res.stdout + res.stderr


@pytest.mark.parametrize(("dns", "mount_name"), [("x y", node_samples.FSX_MOUNTNAME), (node_samples.FSX_DNS, "ab\ncd"),
                                                 (node_samples.FSX_DNS, "abcdefghi"), (node_samples.FSX_DNS + ".", node_samples.FSX_MOUNTNAME)])
def test_the_fsx_step_checks_names_whatever_wrote_the_node_info(tmp_path, dns, mount_name):
    """A node-info file edited by hand (or by an older identify): the fsx step checks again."""
    ctx = make_context(tmp_path / "node", HPQ_MOUNT_CMD="false", HPQ_MODPROBE_CMD="true")
    ctx.node = identity.NodeInfo("c", "i-1", "n", "g", identity.WORKER, "10.0.0.2", "ml.g5.48xlarge", ["10.0.0.1"],
                                 fsx_dns_name=dns, fsx_mountname=mount_name)
    with pytest.raises(fsx.FsxError, match="not mounting, no fstab line written"):
        fsx.run(ctx)
    assert not (tmp_path / "node/etc/fstab").exists()


def failing_run(tmp_path: Path, wait: str) -> tuple[subprocess.CompletedProcess, float, Path]:
    """on_create.sh whose identify step fails (no resource_config.json), with HPQ_FAIL_LOG_WAIT_S=``wait``."""
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = tmp_path / "node"
    root.mkdir()
    t0 = time.time()
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=DEAD_ENDPOINT, HPQ_FAIL_LOG_WAIT_S=wait),
                           "--steps", "identify")
    return res, time.time() - t0, root


def test_a_failed_run_waits_for_cloudwatch_before_exiting(tmp_path):
    """As AWS's EKS on_create.sh (awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/
    base-config/on_create.sh: on error, sync, sleep 60, exit 1): the exit comes HPQ_FAIL_LOG_WAIT_S seconds
    after the failure, with the step's exit status, and the wait is logged."""
    res, took, root = failing_run(tmp_path, "2.5")
    assert res.returncode == 1
    assert took >= 2.5
    line = "hpq on_create: failed (exit 1); waiting 2.5s before exiting so the log reaches CloudWatch"
    assert line in res.stderr and line in (root / "var/log/hpq/on_create.log").read_text()
    assert "step identify failed" in res.stdout


def test_a_successful_run_is_not_delayed(tmp_path, imds_factory):
    """Broken twin of the wait: the same script, a step that succeeds, a wait of 30 s that must not happen."""
    from tests.lifecycle.test_lifecycle_eks import IID, eks_node

    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = eks_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(IID, "g5.48xlarge")})
    t0 = time.time()
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_FAIL_LOG_WAIT_S="30"),
                           "--steps", "identify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert time.time() - t0 < 20 and "waiting" not in res.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "1e3", "3601", "60s", "08x", " 5"])
def test_a_bad_fail_wait_is_refused_with_one_line(tmp_path, value):
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    t0 = time.time()
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(tmp_path / "node"), HPQ_FAIL_LOG_WAIT_S=value), "--steps",
                           "identify")
    assert res.returncode == 2 and time.time() - t0 < 10
    assert res.stderr == ("hpq on_create: bad setting: HPQ_FAIL_LOG_WAIT_S must be a number of seconds from 0 to "
                          f"3600, got '{value}'\n")


@pytest.mark.parametrize("value", ["0", "09", "0.5"])
def test_good_fail_waits_are_taken(tmp_path, value):
    """Broken twin: the accepted forms (a leading zero is not octal: 09 is nine seconds) pass the check, and the
    failing run waits that long."""
    res, took, _ = failing_run(tmp_path, value)
    assert res.returncode == 1 and took >= float(value)
    assert (f"waiting {value}s" in res.stderr) == (value != "0")


BAD_SETTINGS = [
    (["--steps", ""], {}, "--steps is empty"),
    (["--steps", " , "], {}, "--steps is empty"),
    (["--steps", "identify,,fsx"], {}, "--steps 'identify,,fsx' has an empty step name"),
    (["--root", ""], {}, "--root is empty"),
    ([], {"HPQ_STEPS": ""}, "HPQ_STEPS is empty"),
    ([], {"HPQ_ROOT": ""}, "HPQ_ROOT is set but empty"),
    ([], {"HPQ_FSX_POLL_S": "nan"}, "HPQ_FSX_POLL_S must be a finite number above 0 and at most 86400, got 'nan'"),
    ([], {"HPQ_FSX_POLL_S": "0"}, "HPQ_FSX_POLL_S must be a finite number above 0"),
    ([], {"HPQ_DNS_WAIT_S": "inf"}, "HPQ_DNS_WAIT_S must be a finite number from 0 to 86400, got 'inf'"),
    ([], {"HPQ_SHARED_WAIT_S": "-5"}, "HPQ_SHARED_WAIT_S must be a finite number from 0 to 86400"),
    ([], {"HPQ_SLURMCTLD_PORT": "0"}, "HPQ_SLURMCTLD_PORT must be an integer from 1 to 65535, got '0'"),
    ([], {"HPQ_SLURMCTLD_PORT": "65536"}, "HPQ_SLURMCTLD_PORT must be an integer from 1 to 65535"),
    ([], {"HPQ_SLURMCTLD_PORT": "6817.5"}, "HPQ_SLURMCTLD_PORT must be an integer"),
    ([], {"HPQ_FSX_MOUNT_ATTEMPTS": "0"}, "HPQ_FSX_MOUNT_ATTEMPTS must be an integer from 1 to 100"),
    ([], {"HPQ_SYSTEMCTL_CMD": "systemctl 'unclosed"}, "HPQ_SYSTEMCTL_CMD"),
    ([], {"HPQ_NCCL_PROFILE": "fast"}, "HPQ_NCCL_PROFILE must be one of default, legacy"),
    ([], {"HPQ_NODE_IP": "10.0.0.1,10.0.0.x"}, "HPQ_NODE_IP address '10.0.0.x' is not an IPv4 address"),
    ([], {"HPQ_DEFAULT_USER": "ubuntu\nroot"}, "HPQ_DEFAULT_USER 'ubuntu\\nroot' is not one name"),
]


@pytest.mark.parametrize(("args", "env", "message"), BAD_SETTINGS)
def test_settings_with_a_surprising_meaning_are_refused(tmp_path, args, env, message):
    """Exit 2 and one line, before anything runs or is written; through the bundle's on_create.sh as well."""
    root = tmp_path / "node"
    base = {k: v for k, v in node_samples.clean_env().items()}
    base.setdefault("HPQ_ROOT", str(root))
    run_env = dict(base, **env)
    if "--root" in args:
        run_env.pop("HPQ_ROOT")
    res = subprocess.run([sys.executable, "-m", "hpq.lifecycle.main", *args], env=run_env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()] and message in res.stderr, res.stderr
    assert res.stdout == "" and not root.exists()
    if "--root" not in args and "HPQ_ROOT" not in env:
        entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
        via = node_samples.run_on_create(entry, dict(env, HPQ_ROOT=str(root)), *args)
        assert via.returncode == 2 and message in via.stdout + via.stderr


def test_good_settings_are_taken(tmp_path):
    """Broken twin of the refusals: the documented forms pass (``--list-steps`` runs nothing)."""
    from hpq.lifecycle import context

    s = context.Settings.from_env(dict(HPQ_ROOT=str(tmp_path), HPQ_STEPS=" identify , fsx ", HPQ_FSX_POLL_S="0.5",
                                       HPQ_DNS_WAIT_S="0", HPQ_SLURMCTLD_PORT="65535", HPQ_SYSTEMCTL_CMD="/usr/local/bin/systemctl --no-pager",
                                       HPQ_NODE_IP="10.0.0.1, 10.0.0.2", HPQ_FSX_API_ATTEMPTS="3"))
    assert s.steps == ["identify", "fsx"] and s.fsx_poll_s == 0.5 and s.slurmctld_port == 65535
    assert s.node_ips == ["10.0.0.1", "10.0.0.2"] and s.fsx_api_attempts == 3
    assert s.systemctl_cmd == ["/usr/local/bin/systemctl", "--no-pager"]
    assert context.Settings.from_env(dict(HPQ_ROOT=str(tmp_path))).steps is None  # unset: every step
