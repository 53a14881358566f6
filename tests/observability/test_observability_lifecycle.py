"""The lifecycle's observability step (lifecycle/observability.py) on the real entry path.

The bundle runs as shipped (tests/node_samples.build_bundle, the root on_create.sh, ``--steps identify,observability``)
with hpq-cluster.json naming an AMP remote-write URL as the S3 stack writes it. The artifacts come from a local
HTTP server standing in for the GitHub release downloads (HPQ_OBSERVABILITY_MIRROR, as AWS's ParallelCluster script
takes NODE_EXPORTER_DOWNLOAD_URL: awslabs/awsome-distributed-ai 1.architectures/2.aws-parallelcluster/
post-install-scripts/install-node-exporter.sh), laid out as the releases are (``<name>-<v>.linux-<arch>/<name>``
inside ``<name>-<v>.linux-<arch>.tar.gz``). The fake binaries are small scripts that record their arguments and
stay up, started through the systemctl stand-in (standins/systemctl.py) from the unit files the step writes.

Cases: a good checksum installs and starts (and the agent's configuration passes Debian's promtool); the real
pins refuse the fake tarballs (sha256 mismatch: nothing unpacked, boot exit 0); a dead mirror leaves the boot going;
no URL in hpq-cluster.json means nothing is installed; an artifact without a pin refuses with one line. Each
worker gets hpq's writers for its hardware (GPU, EFA, Trainium) from the installed bundle.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from hpq.cfn import s3
from hpq.lifecycle import fields, names, observability
from hpq.scripts import result_metrics
from tests import node_samples
from tests.support import serve_http

WORKER = "worker-group-1-1"
WORKER_ID, WORKER_IP, _ = node_samples.SLURM_NODES[WORKER]
URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f/api/v1/remote_write"
ARCH = observability.machine_arch()
FAKE_BINARY = '#!/bin/sh\necho "$0 $*" > "$(dirname "$0")/argv"\nexec sleep 120\n'


def fake_tarball(art: observability.Artifact, body: str = FAKE_BINARY) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = body.encode()
        info = tarfile.TarInfo(art.member(ARCH))
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        readme = b"release notes\n"
        info = tarfile.TarInfo(f"{art.binary}-{art.version}.linux-{ARCH}/LICENSE")
        info.size = len(readme)
        tar.addfile(info, io.BytesIO(readme))
    return buf.getvalue()


class Mirror:
    """A release mirror: path (as under https://github.com) -> bytes; every request is recorded."""

    def __init__(self, blobs: dict[str, bytes]):
        self.blobs, self.requests = blobs, []
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                mirror.requests.append(self.path)
                data = mirror.blobs.get(self.path)
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args):
                pass

        self.server = serve_http(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def release_path(art: observability.Artifact) -> str:
    return art.url_for(ARCH)[len(observability.GITHUB) :]


@pytest.fixture
def mirror():
    blobs = {
        release_path(a): fake_tarball(a) for a in (observability.NODE_EXPORTER, observability.PROMETHEUS)
    }
    m = Mirror(blobs)
    yield m
    m.close()


def worker_node(tmp_path: Path, url: str | None = URL, worker_type: str = ""):
    """A worker's root and bundle; ``worker_type`` (e.g. ml.trn1.32xlarge) replaces the workers' group type."""
    root = tmp_path / "node"
    config = node_samples.slurm_resource_config()
    for group in config["InstanceGroups"]:
        if worker_type and group["Name"] == node_samples.WORKER_GROUP:
            group["InstanceType"] = worker_type
    node_samples.write_json(root / "opt/ml/config/resource_config.json", config)
    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    config = node_samples.hpq_cluster_config()
    if url is not None:
        config["prometheus_remote_write_url"] = url
    node_samples.write_json(entry.parent / names.HPQ_CLUSTER_CONFIG, config)
    return root, entry


def boot(entry: Path, root: Path, srv, steps: str = "identify,observability", **env) -> subprocess.CompletedProcess:
    base = dict(
        HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root),
        HPQ_BIN_DIR="/usr/local/bin",
    )
    return node_samples.run_on_create(entry, dict(base, **env), "--steps", steps, timeout=180)


def stop_services(root: Path) -> None:
    for pid_file in (root / "run/hpq/services").glob("*.pid"):
        try:
            os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_good_checksum_installs_and_starts_the_exporter_and_agent(tmp_path, imds_factory, mirror):
    root, entry = worker_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID, "p5.48xlarge")})
    pins = ",".join(
        f"{a.name}={sha(mirror.blobs[release_path(a)])}"
        for a in (observability.NODE_EXPORTER, observability.PROMETHEUS)
    )
    try:
        # the install step lays out the bundle the writers run from, as on a node
        res = boot(entry, root, srv, "identify,install,observability", HPQ_OBSERVABILITY_MIRROR=mirror.url,
                   HPQ_OBSERVABILITY_SHA256=pins)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        assert (
            "observability: node_exporter started" in out and "observability: prometheus-agent started" in out
        )
        # p5 is a GPU type with EFA: hpq's GPU and EFA writers run from the bundle, into the textfile directory
        for writer, module in (("gpu-metrics", "gpu_metrics"), ("efa-metrics", "efa_metrics")):
            assert f"observability: {writer} started" in out, out
            unit = (root / f"etc/systemd/system/hpq-{writer}.service").read_text()
            assert f"-m hpq.scripts.{module} --every 30 --textfile-dir" in unit
        assert "step observability: done" in out and "with a warning" not in out
        ne = root / "opt/hpq/observability/node_exporter-1.9.1"
        argv = (ne / "argv").read_text()
        assert f"--collector.textfile.directory={root / result_metrics.TEXTFILE_DIR.lstrip('/')}" in argv
        assert (root / result_metrics.TEXTFILE_DIR.lstrip("/")).is_dir()
        # every user's node programs write their results there; sticky, so none replaces another's file
        assert (root / result_metrics.TEXTFILE_DIR.lstrip("/")).stat().st_mode & 0o7777 == 0o1777
        agent_argv = (root / "opt/hpq/observability/prometheus-3.2.1/argv").read_text()
        assert "--agent" in agent_argv
        config = json.loads((root / "etc/hpq/observability/prometheus-agent.yml").read_text())
        assert config["remote_write"][0]["url"] == URL
        assert config["remote_write"][0]["sigv4"] == {"region": "us-west-2"}
        assert config["global"]["external_labels"] == {"cluster": node_samples.CLUSTER}
        jobs = {j["job_name"]: j for j in config["scrape_configs"]}
        assert set(jobs) == {"node_exporter"}  # only what runs is scraped
        assert jobs["node_exporter"]["relabel_configs"][0]["replacement"] == "ip-" + WORKER_IP.replace(
            ".", "-"
        )
        assert sorted(r.split("/")[-1] for r in mirror.requests) == sorted(
            os.path.basename(release_path(a)) for a in (observability.NODE_EXPORTER, observability.PROMETHEUS)
        )
        # a second boot finds the verified copies: nothing downloaded again, nothing restarted
        mirror.requests.clear()
        again = boot(entry, root, srv, HPQ_OBSERVABILITY_MIRROR=mirror.url, HPQ_OBSERVABILITY_SHA256=pins)
        assert again.returncode == 0 and mirror.requests == [], again.stdout
        assert "node_exporter already running" in again.stdout
    finally:
        stop_services(root)


@pytest.mark.parametrize("itype, writers, not_here", [
    ("trn1.32xlarge", ("neuron-metrics", "efa-metrics"), ("gpu-metrics",)),
    ("g5.xlarge", ("gpu-metrics",), ("efa-metrics", "neuron-metrics")),
    ("m5.xlarge", (), ("gpu-metrics", "efa-metrics", "neuron-metrics")),
])
def test_each_worker_gets_the_writers_of_its_hardware(tmp_path, imds_factory, mirror, itype, writers, not_here):
    """The catalog decides: a Trainium worker with EFA runs the Neuron and EFA writers, a g5.xlarge (one A10G, no
    EFA) only the GPU writer, a CPU worker none; each unit runs its module from the bundle."""
    root, entry = worker_node(tmp_path, worker_type="ml." + itype)
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID, itype)})
    pins = ",".join(f"{a.name}={sha(mirror.blobs[release_path(a)])}"
                    for a in (observability.NODE_EXPORTER, observability.PROMETHEUS))
    try:
        res = boot(entry, root, srv, "identify,install,observability", HPQ_OBSERVABILITY_MIRROR=mirror.url,
                   HPQ_OBSERVABILITY_SHA256=pins)
    finally:
        stop_services(root)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "with a warning" not in out, out
    for writer in writers:
        assert f"observability: {writer} started" in out, out
        module = writer.replace("-", "_")
        assert f"-m hpq.scripts.{module} --every 30" in (root / f"etc/systemd/system/hpq-{writer}.service").read_text()
    for writer in not_here:
        assert writer not in out and not (root / f"etc/systemd/system/hpq-{writer}.service").exists()


def test_real_pins_refuse_the_fake_tarballs_and_boot_goes_on(tmp_path, imds_factory, mirror):
    """The broken twin of the test above: the same tarballs against hpq's own pins (the release's checksums)."""
    root, entry = worker_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID, "m5.xlarge")})
    try:
        res = boot(entry, root, srv, HPQ_OBSERVABILITY_MIRROR=mirror.url)
    finally:
        stop_services(root)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    got = sha(mirror.blobs[release_path(observability.NODE_EXPORTER)])
    assert (
        f"node_exporter refused: sha256 mismatch for {mirror.url}{release_path(observability.NODE_EXPORTER)}: got {got}, "
        f"pinned {observability.NODE_EXPORTER.sha256[ARCH]}: refused, not unpacked"
    ) in out
    assert not (root / "opt/hpq/observability/node_exporter-1.9.1/node_exporter").exists()
    assert not list(
        (root / "opt/hpq/observability/node_exporter-1.9.1").glob("hpq-obs-*")
    )  # download removed
    assert "prometheus-agent not installed: no exporter runs to scrape" in out
    assert "lifecycle done" in out


def test_download_failure_leaves_boot_going(tmp_path, imds_factory):
    root, entry = worker_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID, "m5.xlarge")})
    res = boot(
        entry,
        root,
        srv,
        HPQ_OBSERVABILITY_MIRROR="http://127.0.0.1:9",
        HPQ_OBSERVABILITY_SHA256="node_exporter=" + "0" * 64,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert re.search(r"node_exporter refused: download of http://127\.0\.0\.1:9/\S+ failed 3 times", out)
    assert "lifecycle done" in out


def test_no_remote_write_url_installs_nothing(tmp_path, imds_factory, mirror):
    root, entry = worker_node(tmp_path, url=None)
    srv = imds_factory({"": node_samples.imds_answers(WORKER_ID, "m5.xlarge")})
    res = boot(entry, root, srv, HPQ_OBSERVABILITY_MIRROR=mirror.url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "observability off" in res.stdout
    assert mirror.requests == [] and not (root / "opt/hpq").exists()


def test_todo_pin_refuses_before_any_download(tmp_path):
    unpinned = observability.Artifact(
        "prometheus",
        "9.9.9",
        observability.PROMETHEUS.url,
        {"amd64": None},  # a pin not read from any reference
        "prometheus",
        "none",
    )
    with pytest.raises(
        observability.Refused, match=r"no pinned sha256 for prometheus 9\.9\.9 .*HPQ_OBSERVABILITY_SHA256"
    ):
        observability.fetch_verified(unpinned, "amd64", str(tmp_path), mirror="http://127.0.0.1:9")


def test_every_release_artifact_is_pinned_for_both_architectures():
    """The agent is no longer a TODO: a node of either architecture has a real pin to check against."""
    for art in observability.ARTIFACTS.values():
        for arch in ("amd64", "arm64"):
            assert re.fullmatch(r"[0-9a-f]{64}", art.sha256.get(arch) or ""), (art.name, arch)
    assert observability.PROMETHEUS.sha256 != observability.NODE_EXPORTER.sha256


def test_prometheus_pin_refuses_a_tarball_that_is_not_the_release(tmp_path, mirror):
    """The agent's real pin against the mirror's fake tarball: refused before unpacking, named by URL and pin."""
    url = mirror.url + release_path(observability.PROMETHEUS)
    with pytest.raises(
        observability.Refused,
        match=f"sha256 mismatch for {re.escape(url)}: got "
        f"{sha(mirror.blobs[release_path(observability.PROMETHEUS)])}, pinned {observability.PROMETHEUS.sha256[ARCH]}",
    ):
        observability.fetch_verified(observability.PROMETHEUS, ARCH, str(tmp_path), mirror=mirror.url)
    assert mirror.requests == [release_path(observability.PROMETHEUS)]


@pytest.mark.parametrize(
    "text",
    [
        "node_exporter=abc",
        "nodeexporter=" + "0" * 64,
        "node_exporter" + "0" * 64,
        "node_exporter=" + "G" * 64,
    ],
)
def test_bad_pin_setting_is_refused(text):
    with pytest.raises(ValueError, match="HPQ_OBSERVABILITY_SHA256"):
        observability.parse_pins(text)


def test_agent_config_passes_promtool(tmp_path):
    """Prometheus's own checker (Debian's promtool) takes the agent configuration as written (JSON is YAML)."""
    path = tmp_path / "agent.yml"
    path.write_text(
        observability.agent_config("c1", "ip-10-1-2-3", URL, {"node_exporter": 9100, "dcgm-exporter": 9400})
    )
    res = subprocess.run(
        ["promtool", "check", "config", "--agent", str(path)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    broken = json.loads(path.read_text())
    broken["remote_write"][0]["sigv4"]["regionn"] = "x"  # the broken twin: an unknown field
    path.write_text(json.dumps(broken))
    res = subprocess.run(
        ["promtool", "check", "config", "--agent", str(path)], capture_output=True, text=True
    )
    assert res.returncode != 0


def test_one_textfile_directory_and_one_url_shape():
    assert observability.TEXTFILE_DIR == result_metrics.TEXTFILE_DIR
    samples = [
        URL,
        URL.replace("us-west-2.amazonaws.com", "cn-north-1.amazonaws.com.cn"),
        "",
        URL.replace("https", "http"),
        URL + "/",
        URL.replace("ws-", "xx-"),
        URL + "\n",
    ]
    for s in samples:
        node_ok = bool(fields.AMP_REMOTE_WRITE_URL.fullmatch(s))
        template_ok = bool(re.fullmatch(s3.REMOTE_WRITE_URL_PATTERN, s)) and s != ""
        assert node_ok == template_ok, s


def test_controller_runs_the_slurm_writer_from_the_installed_bundle(tmp_path, imds_factory, mirror):
    """The controller (and only it) gets hpq-slurm-metrics.service: the writer from /opt/hpq, run by the node's
    python3, writing into node_exporter's textfile directory. No Slurm answers here, so what it writes says
    ``slurm_metrics_up 0`` (no made-up node counts); tests/observability/test_slurm_metrics.py runs it on real
    Slurm."""
    ctl_id = node_samples.SLURM_NODES["controller-machine-1"][0]
    root, entry = worker_node(tmp_path)
    srv = imds_factory({"": node_samples.imds_answers(ctl_id, "m5.12xlarge")})
    pins = f"node_exporter={sha(mirror.blobs[release_path(observability.NODE_EXPORTER)])}"
    base = dict(
        HPQ_ROOT=str(root),
        HPQ_IMDS_URL=srv.url,
        HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root),
        HPQ_OBSERVABILITY_MIRROR=mirror.url,
        HPQ_OBSERVABILITY_SHA256=pins,
        HPQ_BIN_DIR="/usr/local/bin",
    )
    try:
        res = node_samples.run_on_create(
            entry, base, "--steps", "identify,install,observability", timeout=180
        )
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        assert "observability: slurm-metrics started" in out, out
        unit = (root / "etc/systemd/system/hpq-slurm-metrics.service").read_text()
        assert "-m hpq.scripts.slurm_metrics --every 30 --textfile-dir" in unit
        assert f"PYTHONPATH={root / 'opt/hpq'}" in unit and "PATH=/opt/slurm/bin:" in unit
        prom = root / result_metrics.TEXTFILE_DIR.lstrip("/") / "hpq_slurm.prom"
        for _ in range(100):
            if prom.exists():
                break
            time.sleep(0.1)
        assert "slurm_metrics_up 0.0" in prom.read_text()
    finally:
        stop_services(root)
    # The broken twin: a worker gets no Slurm writer.
    wroot, wentry = worker_node(tmp_path / "w")
    wsrv = imds_factory({"": node_samples.imds_answers(WORKER_ID, "m5.xlarge")})
    try:
        res = node_samples.run_on_create(
            wentry,
            dict(base, HPQ_ROOT=str(wroot), HPQ_IMDS_URL=wsrv.url),
            "--steps",
            "identify,install,observability",
            timeout=180,
        )
        assert res.returncode == 0 and "slurm-metrics" not in res.stdout + res.stderr
        assert not (wroot / "etc/systemd/system/hpq-slurm-metrics.service").exists()
    finally:
        stop_services(wroot)
