"""The observability step (Slurm nodes): exporters and a Prometheus agent that remote-writes to the stack's AMP.

On only when hpq-cluster.json names ``prometheus_remote_write_url`` (the S3 stack writes the Observability
stack's output there; cfn/observability.py). What it installs, after AWS's references:
- node_exporter on every node (AWS's Slurm extension runs it on every node: awslabs/awsome-distributed-ai
  1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/install_node_exporter.sh), from
  the GitHub release tarball AWS's ParallelCluster script downloads and checks against the release's
  sha256sums.txt (1.architectures/2.aws-parallelcluster/post-install-scripts/install-node-exporter.sh, v1.9.1),
  with the textfile collector reading the directory scripts/result_metrics.py writes (hpq's test results);
- a Prometheus agent (``prometheus --agent``) scraping the local exporters and remote-writing with SigV4, as
  AWS's ParallelCluster collector runs it (4.validation_and_observability/4.prometheus-grafana/
  1click-dashboards-deployment/prometheus-agent-collector.yaml: Prometheus 3.2.1 from the GitHub release,
  ``--agent``, ``remote_write`` with ``queue_config`` and ``sigv4: {region}``); AWS's Slurm extension uses an
  OpenTelemetry collector image instead (install_otel_collector.sh ``hyperpod/otel_collector:v1754424030352``, an
  ECR image with no public digest), so hpq takes the Prometheus release, whose checksum is published;
- GPU workers: the DCGM exporter's series, and EFA workers: AWS's EFA exporter's. AWS ships both exporters only
  as images in HyperPod's ECR registry (install_dcgm_exporter.sh ``hyperpod/dcgm_exporter:4.1.1-4.0.4-ubi9``,
  install_efa_exporter.sh ``hyperpod/efa_exporter:1.0.0``), whose digests no public source records (searched
  2026-11-26), so hpq runs no image: its own writers (scripts/gpu_metrics.py from ``nvidia-smi`` and the kernel
  log, scripts/efa_metrics.py from the EFA driver's ``hw_counters``) write the same names into node_exporter's
  textfile directory every 30 s, from the bundle (no download), as the controller's Slurm writer does;
- Trainium workers: hpq's Neuron writer (scripts/neuron_metrics.py) runs AWS's neuron-monitor (aws-neuronx-tools,
  on the Neuron DLAMI) and writes the names of its companion neuron-monitor-prometheus.py, which needs the
  prometheus_client package the node's python3 lacks.

Every artifact is pinned by version and SHA-256, downloaded from its upstream release URL (or a mirror of it,
HPQ_OBSERVABILITY_MIRROR, as AWS's script takes NODE_EXPORTER_DOWNLOAD_URL), hashed while it downloads and
compared before anything is unpacked. A mismatch, a failed download or a TODO pin stops that one component with
one log line; the step then ends Degraded and the node's boot goes on (metrics are not worth a failed node).
``HPQ_OBSERVABILITY_SHA256="name=hex,..."`` pins a checksum for this node's architecture where hpq has none (or
a mirror serves its own build): it replaces hpq's pin, it never skips the check.

Standard library only (runs with the node's python3, 3.7+).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Tuple

from . import catalog, context, fields, files, identity, names, roles

# scripts/result_metrics.py TEXTFILE_DIR (tests/observability/test_observability_lifecycle.py holds them equal).
TEXTFILE_DIR = "/var/lib/node_exporter/hpq"
INSTALL_DIR = "/opt/hpq/observability"
CONFIG_DIR = "/etc/hpq/observability"
AGENT_DATA_DIR = "/var/lib/hpq/prometheus-agent"
UNIT_DIR = "/etc/systemd/system"
GITHUB = "https://github.com"
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
DOWNLOAD_ATTEMPTS = 3
DOWNLOAD_TIMEOUT_S = 60.0
RETRY_DELAY_S = 2.0
SCRAPE_INTERVAL = "30s"  # AWS's EKS add-on's scrapeInterval 30 (cfn/observability.py), half AWS's Slurm 15 s


class Artifact(object):
    """A release tarball: where it comes from, what its SHA-256 must be per architecture, which file to take."""

    def __init__(self, name: str, version: str, url: str, sha256: Dict[str, Optional[str]], binary: str,
                 source: str):
        self.name, self.version, self.url, self.sha256, self.binary, self.source = (
            name, version, url, sha256, binary, source)

    def url_for(self, arch: str, mirror: str = "") -> str:
        url = self.url.format(version=self.version, arch=arch)
        if mirror:
            url = mirror.rstrip("/") + url[len(GITHUB):]
        return url

    def member(self, arch: str) -> str:
        return "%s-%s.linux-%s/%s" % (self.binary, self.version, arch, self.binary)


NODE_EXPORTER = Artifact(
    "node_exporter", "1.9.1",
    GITHUB + "/prometheus/node_exporter/releases/download/v{version}/node_exporter-{version}.linux-{arch}.tar.gz",
    # The release's sha256sums.txt, as recorded in independent stored repositories (searched 2026-11-26: the
    # amd64 value in ten, arm64 in three, none disagreeing); not read from the release page itself.
    {"amd64": "becb950ee80daa8ae7331d77966d94a611af79ad0d3307380907e0ec08f5b4e8",
     "arm64": "848f139986f63232ced83babe3cad1679efdbb26c694737edc1f4fbd27b96203"},
    "node_exporter", "prometheus/node_exporter v1.9.1 release sha256sums.txt")
PROMETHEUS = Artifact(
    "prometheus", "3.2.1",
    GITHUB + "/prometheus/prometheus/releases/download/v{version}/prometheus-{version}.linux-{arch}.tar.gz",
    # The release's sha256sums.txt as recorded by two independent public pin lists, agreeing: cashapp/hermit-packages
    # prometheus.hcl (its sha256-source is that sha256sums.txt; amd64 since commit 640da397, arm64 since d9e94bc4)
    # and OpenStack Kolla's kolla/common/sources.py ('prometheus-server' 3.2.1); not read from the release page.
    {"amd64": "a622e3007c9109a7f470e1433cbd29bf392596715cf7eea8b81b37fa9d26b7be",
     "arm64": "f2dec3178f1181c1b795b275750d056e71ead13f7fbfe08b76834c4ec20b748e"},
    "prometheus", "prometheus/prometheus v3.2.1 release sha256sums.txt")
ARTIFACTS = {a.name: a for a in (NODE_EXPORTER, PROMETHEUS)}

PORTS = {"node_exporter": 9100}  # AWS's install_node_exporter.sh's port; hpq's writers go through its textfile
AGENT_LISTEN = "127.0.0.1:9090"


class Refused(Exception):
    """This component is not installed (the message says why); the others and the boot go on."""


def machine_arch(machine: Optional[str] = None) -> str:
    m = (machine or platform.machine()).lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(m, m)


def parse_pins(text: str) -> Dict[str, str]:
    """``name=hex,...`` (HPQ_OBSERVABILITY_SHA256) -> {name: hex}; ValueError on anything else."""
    out = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, digest = item.partition("=")
        if name.strip() not in ARTIFACTS or not re.match(r"^[0-9a-f]{64}$", digest.strip()):
            raise ValueError("HPQ_OBSERVABILITY_SHA256: %r is not <artifact>=<64 hex> (artifacts: %s)"
                             % (item, ", ".join(sorted(ARTIFACTS))))
        out[name.strip()] = digest.strip()
    return out


def region_of(url: str) -> str:
    """The SigV4 region: the one in the AMP endpoint's host (fields.AMP_REMOTE_WRITE_URL)."""
    m = fields.AMP_REMOTE_WRITE_URL.fullmatch(fields.amp_remote_write_url(url, "prometheus_remote_write_url"))
    return m.group(1) if m else ""


# ------------------------------------------------------------------------------------------- download and verify


def download(url: str, dest: str, attempts: int = DOWNLOAD_ATTEMPTS) -> str:
    """Fetch ``url`` into ``dest``, hashing as it goes; the hex SHA-256. Refused after ``attempts`` failures."""
    last = ""
    for attempt in range(1, attempts + 1):
        digest = hashlib.sha256()
        size = 0
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp, open(dest, "wb") as out:
                while True:
                    chunk = resp.read(1 << 20)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > MAX_ARTIFACT_BYTES:
                        raise Refused("%s is larger than %d bytes: refused" % (url, MAX_ARTIFACT_BYTES))
                    digest.update(chunk)
                    out.write(chunk)
            return digest.hexdigest()
        except (urllib.error.URLError, OSError, socket.timeout, ValueError) as exc:
            last = str(getattr(exc, "reason", None) or exc)
            if attempt < attempts:
                time.sleep(RETRY_DELAY_S * attempt)
    raise Refused("download of %s failed %d times (last: %s)" % (url, attempts, last))


def fetch_verified(art: Artifact, arch: str, workdir: str, mirror: str = "", pins: Optional[Dict[str, str]] = None
                   ) -> bytes:
    """The artifact's binary, from a tarball whose SHA-256 equals the pin; Refused otherwise (nothing unpacked)."""
    expected = (pins or {}).get(art.name) or art.sha256.get(arch)
    if not expected:
        raise Refused("no pinned sha256 for %s %s linux-%s (TODO in lifecycle/observability.py, source: %s); set "
                      "HPQ_OBSERVABILITY_SHA256=%s=<hex> to pin one" % (art.name, art.version, arch, art.source,
                                                                        art.name))
    url = art.url_for(arch, mirror)
    archive = os.path.join(workdir, os.path.basename(url) or art.name)
    actual = download(url, archive)
    if actual != expected:
        raise Refused("sha256 mismatch for %s: got %s, pinned %s: refused, not unpacked" % (url, actual, expected))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.getmember(art.member(arch))
            if not member.isfile():
                raise Refused("%s in %s is not a regular file" % (member.name, url))
            fh = tar.extractfile(member)
            return fh.read() if fh else b""
    except (tarfile.TarError, KeyError, OSError) as exc:
        raise Refused("%s (verified) does not hold %s: %s" % (url, art.member(arch), exc)) from None


# ---------------------------------------------------------------------------------------------------- install


def unit_text(description: str, argv: List[str]) -> str:
    return ("[Unit]\nDescription=%s (hpq observability)\nAfter=network-online.target\nWants=network-online.target\n\n"
            "[Service]\nType=simple\nExecStart=%s\nRestart=always\nRestartSec=10\n\n"
            "[Install]\nWantedBy=multi-user.target\n" % (description, " ".join(argv)))


def agent_config(cluster: str, instance: str, url: str, targets: Dict[str, int]) -> str:
    """prometheus.yml for the agent, as JSON (a YAML subset Prometheus reads): scrape the local exporters every
    30 s with ``cluster`` and ``instance`` (the host name, as AWS's OTel template relabels it), remote-write to
    AMP with SigV4 in the workspace's region and AWS's collector's queue settings."""
    doc = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "external_labels": {"cluster": cluster}},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": ["localhost:%d" % port]}],
             "relabel_configs": [{"target_label": "instance", "replacement": instance}]}
            for job, port in sorted(targets.items())
        ],
        "remote_write": [{"url": url, "sigv4": {"region": region_of(url)},
                          "queue_config": {"max_samples_per_send": 1000, "max_shards": 200, "capacity": 2500}}],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _install_binary(ctx, art: Artifact, arch: str, mirror: str, pins: Dict[str, str]) -> Tuple[str, bool]:
    """(node path of the binary, whether it changed). Skips the download when the verified copy is in place."""
    folder = "%s/%s-%s" % (INSTALL_DIR, art.name, art.version)
    target = "%s/%s" % (folder, art.binary)
    stamp = ctx.path(folder + "/.sha256")
    expected = pins.get(art.name) or art.sha256.get(arch) or ""
    if expected and os.path.isfile(ctx.path(target)) and (files.read_text(stamp) or "").strip() == expected:
        return target, False
    os.makedirs(ctx.path(folder), exist_ok=True)
    work = tempfile.mkdtemp(prefix="hpq-obs-", dir=ctx.path(folder))
    try:
        data = fetch_verified(art, arch, work, mirror, pins)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    files.write_file(ctx.path(target), data, mode=0o755)
    files.write_file(stamp, expected + "\n")
    return target, True


def _start(ctx, unit: str, description: str, argv: List[str], changed: bool) -> str:
    unit_changed = files.write_file(ctx.path("%s/%s" % (UNIT_DIR, unit)), unit_text(description, argv))
    if unit_changed:  # systemctl(1) daemon-reload: a running unit keeps its old definition until then
        ctx.services.reload()
    return ctx.services.ensure_running(unit, restart=changed or unit_changed)


def install_node_exporter(ctx, arch: str, mirror: str, pins: Dict[str, str]) -> str:
    binary, changed = _install_binary(ctx, NODE_EXPORTER, arch, mirror, pins)
    os.makedirs(ctx.path(TEXTFILE_DIR), exist_ok=True)
    # The node programs (run-nccl-test, node_doctor...) run as the cluster's users and write their results
    # here (scripts/result_metrics.publish): writable by every user, sticky as /tmp and names.FSX_RESULTS_DIR,
    # so no user can replace another's file (root's Slurm writer's included).
    os.chmod(ctx.path(TEXTFILE_DIR), 0o1777)
    # Paths as they are under the node root (the same on a node, where the root is /).
    argv = [ctx.path(binary), "--web.listen-address=:%d" % PORTS["node_exporter"],
            "--collector.textfile.directory=%s" % ctx.path(TEXTFILE_DIR)]
    return _start(ctx, "hpq-node-exporter.service", "Prometheus node_exporter", argv, changed)


def install_agent(ctx, arch: str, mirror: str, pins: Dict[str, str], node, url: str, targets: Dict[str, int]) -> str:
    config_changed = files.write_file(
        ctx.path(CONFIG_DIR + "/prometheus-agent.yml"),
        agent_config(node.cluster_name, node.slurm_node_name or socket.gethostname(), url, targets))
    binary, changed = _install_binary(ctx, PROMETHEUS, arch, mirror, pins)
    os.makedirs(ctx.path(AGENT_DATA_DIR), exist_ok=True)
    argv = [ctx.path(binary), "--agent", "--config.file=%s" % ctx.path(CONFIG_DIR + "/prometheus-agent.yml"),
            "--storage.agent.path=%s" % ctx.path(AGENT_DATA_DIR), "--web.listen-address=%s" % AGENT_LISTEN]
    return _start(ctx, "hpq-prometheus-agent.service", "Prometheus agent (remote write to AMP)", argv,
                  changed or config_changed)


# HyperPod's Slurm lives under /opt/slurm (the AMI's slurmd unit: tests/fixtures_node.AMI_SLURMD_UNIT).
SLURM_PATH = "/opt/slurm/bin:/usr/local/bin:/usr/bin:/bin"


# hpq's metric writers (scripts/): module -> (unit, description, PATH for the tools it runs)
WRITERS = {
    "slurm_metrics": ("hpq-slurm-metrics.service", "Slurm node and queue metrics", SLURM_PATH),
    "gpu_metrics": ("hpq-gpu-metrics.service", "GPU metrics (DCGM fields from nvidia-smi)",
                    "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"),
    "efa_metrics": ("hpq-efa-metrics.service", "EFA device counters", "/usr/bin:/bin"),
    # neuron-monitor from aws-neuronx-tools, where the Neuron DLAMI installs it
    "neuron_metrics": ("hpq-neuron-metrics.service", "Trainium metrics (neuron-monitor)",
                       "/opt/aws/neuron/bin:/usr/local/bin:/usr/bin:/bin"),
}


def install_writer(ctx, module: str) -> str:
    """One of hpq's writers (scripts/<module>.py) every 30 s into node_exporter's textfile directory, in place of
    an exporter AWS runs from an image or builds at boot (no checksummed release exists for any of them)."""
    unit, description, path = WRITERS[module]
    root = ctx.path(names.NODE_INSTALL_DIR)
    if not os.path.isfile(os.path.join(root, "hpq", "scripts", module + ".py")):
        raise Refused("%s/hpq/scripts/%s.py is missing (the install step did not run)"
                      % (names.NODE_INSTALL_DIR, module))
    argv = ["/usr/bin/env", "PYTHONPATH=%s" % root, "PATH=%s" % path, sys.executable or "python3",
            "-m", "hpq.scripts." + module, "--every", SCRAPE_INTERVAL.rstrip("s"),
            "--textfile-dir", ctx.path(TEXTFILE_DIR)]
    return _start(ctx, unit, description, argv, False)


def remote_write_url(ctx) -> Optional[str]:
    """hpq-cluster.json's prometheus_remote_write_url, or None (observability off)."""
    rf = roles.find(ctx.s).roles
    return rf.prometheus_remote_write_url if rf else None


def run(ctx) -> str:
    if ctx.node is None:
        identity.load_node(ctx)
    node = ctx.node
    url = remote_write_url(ctx)
    if not url:
        return "observability off (hpq-cluster.json names no prometheus_remote_write_url)"
    try:
        region_of(url)
        pins = parse_pins(ctx.s.observability_sha256)
    except ValueError as exc:
        ctx.log.error("observability: %s: nothing installed", exc)
        return context.Degraded("observability not installed: %s" % exc)
    mirror = ctx.s.observability_mirror
    arch = machine_arch()
    itype = None
    if node.instance_type:
        try:
            itype = catalog.lookup(node.instance_type)
        except catalog.UnknownInstanceType:
            itype = None
    worker = node.role == identity.WORKER
    done: List[str] = []
    refused: List[str] = []
    targets: Dict[str, int] = {}

    def attempt(name: str, func, *args) -> None:
        try:
            state = func(*args)
        except Refused as exc:
            ctx.log.error("observability: %s refused: %s", name, exc)
            refused.append(name)
            return
        except Exception as exc:  # a component never fails the boot
            ctx.log.error("observability: %s failed: %s: %s", name, type(exc).__name__, exc)
            refused.append(name)
            return
        ctx.log.info("observability: %s %s", name, state)
        done.append(name)
        if name in PORTS:
            targets[name] = PORTS[name]

    attempt("node_exporter", install_node_exporter, ctx, arch, mirror, pins)
    if "node_exporter" in done:  # the writers' files reach the agent only through its textfile collector
        if node.role == identity.CONTROLLER:
            attempt("slurm-metrics", install_writer, ctx, "slurm_metrics")
        if worker and itype is not None and itype.accelerator == catalog.GPU:
            attempt("gpu-metrics", install_writer, ctx, "gpu_metrics")
        if worker and itype is not None and itype.accelerator == catalog.TRAINIUM:
            attempt("neuron-metrics", install_writer, ctx, "neuron_metrics")
        if worker and itype is not None and itype.has_efa:
            attempt("efa-metrics", install_writer, ctx, "efa_metrics")
    if targets:
        attempt("prometheus-agent", install_agent, ctx, arch, mirror, pins, node, url, targets)
    else:
        refused.append("prometheus-agent")
        ctx.log.error("observability: prometheus-agent not installed: no exporter runs to scrape")
    summary = "running: %s; not installed: %s" % (", ".join(done) or "none", ", ".join(refused) or "none")
    return context.Degraded(summary) if refused else summary
