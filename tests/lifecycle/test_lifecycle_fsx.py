"""FSx discovery, wait and mount against moto server over HTTP.

Real: moto_server (file systems, tags, NextToken pagination), boto3 and the aws CLI
talking HTTP to it. Stand-in: a small proxy between them (``FsxProxy``) that can answer
ThrottlingException first, force one file system per page (MaxResults=1, so pagination
is exercised), and add the ``Lifecycle`` and ``LustreConfiguration.MountName`` fields
moto 5.2 leaves out of DescribeFileSystems. The mount itself is tests/node_samples.py's
mount.lustre stand-in (no Lustre client here): it resolves the name and records the mount
with an IP NID, as the kernel lists it. Mount behaviour without AWS: test_lifecycle_mount.py.
"""

from __future__ import annotations

import http.client
import json
import logging
import shutil
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

from hpq.lifecycle import context, fsx, identity, names
from tests import node_samples
from tests.moto_server import set_aws_env
from tests.slurm_cluster import make_context

pytestmark = pytest.mark.slow
REGION = "ap-southeast-4"
FAST = {"base": 0.01, "cap": 0.05}


def mount_name_of(fs_id: str) -> str:
    """The stand-in's MountName: 8 characters, as FSx gives PERSISTENT file systems (botocore's FSx model,
    LustreFileSystemMountName ``^([A-Za-z0-9_-]{1,8})$``)."""
    return fs_id[3:11]


class FsxProxy:
    """Stand-in in front of moto: throttling, forced paging, and the fields moto omits."""

    def __init__(self, upstream: str, throttle_first: int = 0, page_size: int | None = None,
                 lifecycles: list[str] | None = None, port: int = 0):
        self.upstream = upstream.replace("http://", "")
        self.throttle_first = throttle_first
        self.page_size = page_size
        self.lifecycles = list(lifecycles or [])
        self.calls = 0
        self.throttled = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/x-amz-json-1.1") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target = self.headers.get("X-Amz-Target", "")
                describe = target.endswith(".DescribeFileSystems")
                with proxy.lock:
                    proxy.calls += describe
                    throttle = describe and proxy.throttled < proxy.throttle_first
                    proxy.throttled += throttle
                if throttle:
                    return self._send(400, json.dumps({"__type": "ThrottlingException",
                                                       "message": "Rate exceeded"}).encode())
                if describe and proxy.page_size:
                    req = json.loads(body or b"{}")
                    req.setdefault("MaxResults", proxy.page_size)
                    body = json.dumps(req).encode()
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                conn.request("POST", self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if describe and resp.status == 200:
                    doc = json.loads(data)
                    with proxy.lock:
                        state = proxy.lifecycles.pop(0) if len(proxy.lifecycles) > 1 else (
                            proxy.lifecycles[0] if proxy.lifecycles else "AVAILABLE")
                    for fs in doc.get("FileSystems", []):
                        fs.setdefault("Lifecycle", state)
                        lc = fs.setdefault("LustreConfiguration", {})
                        lc.setdefault("MountName", mount_name_of(fs["FileSystemId"]))
                    data = json.dumps(doc).encode()
                self._send(resp.status, data, resp.getheader("Content-Type", "application/json"))

        return Handler


@pytest.fixture
def aws(moto_server, monkeypatch, tmp_path):
    set_aws_env(monkeypatch, moto_server, tmp_path, region=REGION)
    proxies: list[FsxProxy] = []

    def proxy(**kw) -> FsxProxy:
        p = FsxProxy(moto_server, **kw)
        proxies.append(p)
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
        return p

    yield proxy
    for p in proxies:
        p.close()


def create_fs(tags: dict[str, str]) -> str:
    client = boto3.client("fsx", region_name=REGION)
    resp = client.create_file_system(
        FileSystemType="LUSTRE", StorageCapacity=1200, StorageType="SSD", SubnetIds=["subnet-0123456789abcdef0"],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 125},
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return resp["FileSystem"]["FileSystemId"]


@pytest.mark.parametrize("use_boto3", [True, False], ids=["boto3", "aws-cli"])
def test_exact_tag_match_similar_names_do_not_collide(aws, use_boto3):
    if not use_boto3 and not shutil.which("aws"):
        pytest.fail("aws CLI missing: it is the fallback path on nodes without boto3")
    base = "train-" + uuid.uuid4().hex[:6]
    a = create_fs({names.CLUSTER_TAG_KEY: base})
    b = create_fs({names.CLUSTER_TAG_KEY: base + "-2"})
    create_fs({"Name": base})  # right value, wrong key
    create_fs({names.CLUSTER_TAG_KEY: base.upper()})
    proxy = aws(page_size=1)  # one file system per page: the answer spans several pages
    found = fsx.find_cluster_filesystem(base, REGION, use_boto3=use_boto3)
    assert found and found["FileSystemId"] == a
    assert fsx.find_cluster_filesystem(base + "-2", REGION, use_boto3=use_boto3)["FileSystemId"] == b
    assert fsx.find_cluster_filesystem("train", REGION, use_boto3=use_boto3) is None
    assert fsx.find_cluster_filesystem(base[:-1], REGION, use_boto3=use_boto3) is None
    assert proxy.calls >= 3 * 4  # every lookup read several pages


@pytest.mark.parametrize("use_boto3", [True, False], ids=["boto3", "aws-cli"])
def test_throttling_is_retried_with_backoff(aws, use_boto3):
    name = "thr-" + uuid.uuid4().hex[:6]
    fs_id = create_fs({names.CLUSTER_TAG_KEY: name})
    proxy = aws(throttle_first=3)
    sleeps: list[float] = []
    found = fsx.find_cluster_filesystem(name, REGION, use_boto3=use_boto3,
                                        backoff=dict(FAST, sleep=sleeps.append))
    assert found["FileSystemId"] == fs_id
    assert proxy.throttled == 3 and len(sleeps) == 3
    assert sleeps[0] < sleeps[2]  # backs off


def test_throttling_that_never_stops_fails_clearly(aws):
    proxy = aws(throttle_first=1000)
    with pytest.raises(fsx.FsxError, match="throttled after 4 attempts"):
        fsx.find_cluster_filesystem("x", REGION, use_boto3=True, backoff=dict(FAST, attempts=4))
    assert proxy.throttled == 4


def test_dns_down_at_the_first_call_is_retried_and_logged(aws, monkeypatch, caplog):
    """The first FSx call of a boot meets a resolver that is not up yet (HyperPod restarts systemd-resolved while
    lifecycle scripts run; AWS's reference on_create.sh sleeps 30 s for it): getaddrinfo fails with EAI_AGAIN,
    which botocore turns into EndpointConnectionError. Retried with backoff, each retry logged, then found."""
    import socket

    name = "dns-" + uuid.uuid4().hex[:6]
    fs_id = create_fs({names.CLUSTER_TAG_KEY: name})
    proxy = aws()
    endpoint = proxy.url.replace("127.0.0.1", "localhost")  # the node's name for the endpoint: resolved per call
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    real, failures = socket.getaddrinfo, []

    def resolver_down_at_first(host, *args, **kwargs):
        if host == "localhost" and len(failures) < 2:
            failures.append(host)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver_down_at_first)
    sleeps: list[float] = []
    log = logging.getLogger("hpq-test.fsx")
    with caplog.at_level(logging.WARNING, logger="hpq-test.fsx"):
        found = fsx.find_cluster_filesystem(name, REGION, use_boto3=True,
                                            backoff=dict(FAST, sleep=sleeps.append, log=log))
    assert found["FileSystemId"] == fs_id and len(failures) == 2 and len(sleeps) == 2
    retries = [r.getMessage() for r in caplog.records if "FSx API unreachable" in r.getMessage()]
    assert len(retries) == 2 and retries[0].startswith("FSx API unreachable (attempt 1 of 8): EndpointConnectionError")


def test_an_endpoint_not_up_at_the_first_cli_call_is_retried(aws, monkeypatch):
    """The aws CLI path (nodes without boto3): the first call finds nothing listening ("Could not connect to the
    endpoint URL", botocore's EndpointConnectionError as the CLI prints it); the endpoint comes up during the
    backoff and the next call finds the filesystem."""
    name = "cli-" + uuid.uuid4().hex[:6]
    fs_id = create_fs({names.CLUSTER_TAG_KEY: name})
    import socket

    with socket.socket() as probe:  # a free port: nothing listens there until bring_up
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    started: list[FsxProxy] = []

    def bring_up(seconds: float) -> None:
        if not started:
            started.append(aws(port=port))
            monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")

    found = fsx.find_cluster_filesystem(name, REGION, use_boto3=False, backoff=dict(FAST, sleep=bring_up))
    assert found["FileSystemId"] == fs_id and started and started[0].calls == 1


@pytest.mark.parametrize("use_boto3", [True, False], ids=["boto3", "aws-cli"])
def test_an_endpoint_that_never_resolves_fails_after_bounded_attempts(aws, monkeypatch, use_boto3):
    """DNS down for good: a bounded number of attempts, then one clear error (no hang, no traceback)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://fsx.hpq-dns-down.invalid")
    sleeps: list[float] = []
    with pytest.raises(fsx.FsxError, match="FSx API still unreachable after 3 attempts: .*(Could not connect|"
                                           "EndpointConnectionError)"):
        fsx.find_cluster_filesystem("x", REGION, use_boto3=use_boto3,
                                    backoff=dict(FAST, attempts=3, sleep=sleeps.append))
    assert len(sleeps) == 2


def node_ctx(tmp_path: Path, cluster: str = "c", hosts: dict[str, str] | None = None, dns: str | None = None,
             mountname: str | None = None, **env: str):
    """A worker whose node info names ``cluster`` (and explicit FSx names, as provisioning parameters do)."""
    root = tmp_path / "node"
    calls = node_samples.write_fake_mount(tmp_path / "fake-mount", hosts=hosts, table=root / "proc/mounts")
    node_samples.write_recorder(tmp_path / "modprobe")
    ctx = make_context(root, HPQ_MOUNT_CMD=str(tmp_path / "fake-mount"), HPQ_MODPROBE_CMD=str(tmp_path / "modprobe"),
                       HPQ_DNS_WAIT_S="0", HPQ_FSX_MOUNT_RETRY_S="0", **env)
    ctx.node = identity.NodeInfo(cluster_name=cluster, instance_id="i-1", instance_name="n", group="g",
                                 role=identity.WORKER, ip="10.0.0.2", instance_type="ml.g5.48xlarge",
                                 controller_ips=["10.0.0.1"], fsx_dns_name=dns, fsx_mountname=mountname)
    return ctx, root, calls


def test_step_waits_for_available_then_mounts_and_writes_fstab(aws, tmp_path):
    name = "wait-" + uuid.uuid4().hex[:6]
    fs_id = create_fs({names.CLUSTER_TAG_KEY: name})
    proxy = aws(lifecycles=["CREATING", "CREATING", "AVAILABLE"])
    dns = f"{fs_id}.fsx.{REGION}.amazonaws.com"
    ctx, root, mount_calls = node_ctx(tmp_path, name, hosts={dns: "10.1.40.25"}, HPQ_FSX_POLL_S="0.01")
    (root / "etc").mkdir(parents=True)
    (root / "etc/fstab").write_text("UUID=abc / ext4 defaults 0 1\nold@tcp:/x /fsx lustre defaults 0 0\n")
    result = fsx.run(ctx)
    assert proxy.calls == 3  # found CREATING, polled until AVAILABLE
    source = f"{dns}@tcp:/{mount_name_of(fs_id)}"
    assert source in result and f"the kernel shows 10.1.40.25@tcp:/{mount_name_of(fs_id)}" in result
    calls = mount_calls.read_text().splitlines()
    assert calls == [f"-t lustre -o relatime,flock {source} {root}/fsx"]
    fstab = (root / "etc/fstab").read_text()
    assert fstab.startswith("UUID=abc / ext4 defaults 0 1\n")  # other lines kept
    fsx_lines = [ln for ln in fstab.splitlines() if ln.split()[1:2] == ["/fsx"] and not ln.startswith("#")]
    assert fsx_lines == [f"{source} /fsx lustre {fsx.FSTAB_OPTIONS} 0 0"]  # old unmanaged line replaced
    # Second run: already mounted, fstab untouched, no second mount.
    before = (root / "etc/fstab").stat().st_mtime_ns
    assert "already mounted" in fsx.run(ctx)
    assert (root / "etc/fstab").stat().st_mtime_ns == before
    assert len(mount_calls.read_text().splitlines()) == 1


def test_explicit_dns_and_mount_name_win_over_discovery(aws, tmp_path):
    proxy = aws()
    ctx, root, _ = node_ctx(tmp_path, "any", dns=node_samples.FSX_DNS, mountname="abc")
    assert "from provisioning parameters" in fsx.run(ctx)
    assert proxy.calls == 0
    assert f"{node_samples.FSX_DNS}@tcp:/abc /fsx lustre" in (root / "etc/fstab").read_text()


def test_shared_results_directory_is_writable_by_every_user(aws, tmp_path):
    """A new Lustre root is root:root 0755: the step makes /fsx/hpq-results sticky and world-writable
    (1777, as /tmp) so a user's run-nanogpt results land on /fsx, and a second run keeps it so."""
    aws()
    ctx, root, _ = node_ctx(tmp_path, "any", dns=node_samples.FSX_DNS, mountname="abc")
    (root / "fsx").mkdir(parents=True)
    (root / "fsx").chmod(0o755)
    fsx.run(ctx)
    results = root / names.FSX_RESULTS_DIR.lstrip("/")
    assert results.stat().st_mode & 0o7777 == 0o1777
    results.chmod(0o700)  # someone tightened it: the next boot restores it
    fsx.run(ctx)
    assert results.stat().st_mode & 0o7777 == 0o1777


def test_no_filesystem_is_a_warning_and_the_step_continues(aws, tmp_path, caplog):
    aws()
    ctx, root, calls = node_ctx(tmp_path, "nothing-" + uuid.uuid4().hex[:6])
    with caplog.at_level(logging.WARNING):
        result = fsx.run(ctx)
    assert "no FSx filesystem found" in result
    assert isinstance(result, context.Degraded)  # run_steps logs the step's end as a warning
    assert "no FSx for Lustre filesystem tagged" in caplog.text
    assert not (root / "etc/fstab").exists() and not calls.exists()


def test_documented_provisioning_parameters_without_fsx_names_mean_no_fsx(aws, tmp_path, caplog):
    """A cluster described by provisioning_parameters.json has FSx only when the file names it, as in
    AWS's reference (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/
    base-config/lifecycle_script.py mounts only with fsx_dns_name and fsx_mountname): no tag lookup, so a
    node that cannot reach the FSx API (or may not) still comes up."""
    proxy = aws()
    ctx, root, calls = node_ctx(tmp_path, "users-cluster")
    ctx.node.role_source = f"/opt/ml/config/{names.PROVISIONING_PARAMETERS} ({names.PROVISIONING_PARAMETERS})"
    with caplog.at_level(logging.WARNING):
        result = fsx.run(ctx)
    assert isinstance(result, context.Degraded) and "names no FSx filesystem" in result
    assert proxy.calls == 0 and not calls.exists() and not (root / "etc/fstab").exists()
