"""Stage ``nodes``: HyperPod's side of the cluster: one namespace node per instance, booted with sshd, IMDSv2
and HyperPod's files, and (Slurm) the cluster agent's slurm.conf on the controller."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpq.lifecycle import catalog
from hpq.rehearsal import aws, image, netns, procs
from hpq.rehearsal.backend import RehearsalBackend, controller_shell, facts
from hpq.rehearsal.node import Node
from hpq.rehearsal.plan import NODE_IFACE, REGION, WORKER, ZONE, NodeSpec, Plan, add_nodes
from hpq.rehearsal.stages import observe
from hpq.rehearsal.stages.base import Failure, Say, tail
from hpq.rehearsal.state import NodeState, RunState
from hpq.rehearsal.teardown import TeardownStack
from hpq.standins import fsx, hyperpod
from hpq.validation.slurm import SshShell


@dataclass
class NodesInput:
    plan: Plan  # gains its nodes here (plan.add_nodes)
    deployed: aws.Deployed
    state: RunState  # records each node as it is created (teardown, hpq rehearse down)
    observability: Any = None  # stages/observe.Observability: AMP's host name and CA on every node


@dataclass
class Nodes:
    nodes: dict[str, Node]
    groups: list[hyperpod.GroupRequest]
    shell: SshShell  # a login shell on the controller (validation.slurm)
    backend: RehearsalBackend  # the tests' backend over that shell


def start_nodes(inp: NodesInput, stack: TeardownStack, say: Say) -> Nodes:
    p, d, st = inp.plan, inp.deployed, inp.state
    s3 = aws.session().client("s3")
    groups = hyperpod.groups_from_request(d.cluster)
    if not groups:
        raise Failure("nodes", "the deployed AWS::SageMaker::Cluster has no instance groups")
    bucket, prefix = hyperpod.split_s3_uri(groups[0].source_s3_uri)
    roles = hyperpod.roles_of(groups, hyperpod.read_legacy_params(s3, bucket, prefix))
    if p.orchestrator == "eks":
        roles = {g.name: WORKER for g in groups}
    add_nodes(p, [(g.name, roles[g.name], g.instance_type, g.count) for g in groups])
    p.eks = {"name": d.eks.get("name", ""), "endpoint": d.eks.get("endpoint", ""), "ca": ""}
    say("hyperpod", f"cluster {d.cluster_arn}: " + ", ".join(
        f"{g.name} ({roles[g.name]}, {g.instance_type} x{g.count})" for g in groups))
    for n in p.nodes:
        st.nodes.append(NodeState(n.name, n.netns, n.host_iface, None, n.ip, n.hostname, n.role))
    st.save()
    fsx_source = ""
    live_fsx = bool(d.outputs.get("FsxMountName")) and not d.fsx_deleted
    if live_fsx:
        export = Path(st.workdir) / "fsx"
        fsx_source = fsx.nid_source(p.fsx_ip, str(d.outputs["FsxMountName"]))
        st.fsx_export = str(export)
        st.save()
        fsx.mount_export(export, fsx_source)
        stack.push("copy of /fsx/hpq-results", lambda: keep_results(export, Path(st.logdir)), kept_too=True,
                   only_if_failed=True)
    hosts = [(n.ip, n.hostname) for n in p.nodes]
    if live_fsx and d.outputs.get("FsxDnsName"):  # a deleted filesystem's name no longer resolves
        hosts.append((p.fsx_ip, str(d.outputs["FsxDnsName"])))
    if inp.observability is not None:
        hosts.append(inp.observability.host_entry)
    munge_key = os.urandom(1024)
    keyfile = Path(st.workdir) / "ssh" / "id_ed25519"
    keyfile.parent.mkdir(mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hpq-rehearse-{p.run_id}",
                    "-f", str(keyfile)], check=True, stdout=subprocess.DEVNULL)
    st.ssh_key = str(keyfile)
    torch_python = _torch_python() if p.orchestrator == "slurm" else None
    rc = hyperpod.resource_config(p, d.cluster_arn)
    nodes: dict[str, Node] = {}
    for spec in p.nodes:
        ns = st.node(spec.name)
        assert ns is not None
        netns.create_node_link(spec.netns, spec.host_iface, p.bridge, spec.ip, p.prefix_len, p.gateway,
                               NODE_IFACE)
        node = Node(spec, Path(st.workdir) / "nodes" / spec.name)
        node.create(st.fsx_export or None, data_volume=_has_data_volume(d, spec.group), efa_devices=_efa_devices(spec))
        nodes[spec.name] = node
        stack.push(f"logs of {spec.name}", lambda node=node: collect_node_logs(node, Path(st.logdir)), kept_too=True)
        holder = procs.identify(node.holder_pid) if node.holder_pid else None
        ns.holder_pid = node.holder_pid
        ns.holder_start = holder.start if holder else None
        st.save()
        image.boot(node, hosts, munge_key, (keyfile.with_suffix(".pub")).read_text(), torch_python,
                   fsx.MOUNT_LUSTRE, fsx.SEED_MOUNTS)
        if torch_python:
            _open_path_for_users(node, torch_python)
        if fsx_source:
            node.write(fsx.SOURCE_FILE, fsx_source + "\n")
        if inp.observability is not None:
                observe.trust_on_node(node, inp.observability)
        _start_imds(node)
        hyperpod.write_node_files(node, rc)
        say(spec.name, f"{spec.hostname} {spec.ip} {spec.instance_id} ({spec.role}, "
                       f"{spec.instance_type}) booted: sshd, IMDSv2 at 169.254.169.254")
    if p.orchestrator == "slurm":
        cpus, mem = hyperpod.host_resources()
        conf = hyperpod.slurm_conf(p, cpus, mem, hyperpod.partitions_of(p, groups))
        ctl = nodes[p.controller.name] if p.controller else None
        if ctl is None:
            raise Failure("nodes", "the deployed cluster has no controller group")
        ctl.write(hyperpod.SLURM_CONF, conf)
        say("hyperpod", f"cluster agent: {hyperpod.SLURM_CONF} on {ctl.spec.hostname} "
                        f"({len(p.nodes) - 1} NodeName lines)")
    shell = controller_shell(p.controller.ip if p.controller else "", str(keyfile),
                                         str(Path(st.workdir) / "ssh" / "known_hosts"))
    return Nodes(nodes, groups, shell, RehearsalBackend(shell, facts(p)))


def keep_results(export: Path, logdir: Path) -> None:
    """A failed run keeps the validation commands' logs and results (the controller's /fsx/hpq-results)."""
    results = export / "hpq-results"
    if results.is_dir():
        subprocess.run(["cp", "-r", str(results), str(logdir / "fsx-hpq-results")], capture_output=True)


def collect_node_logs(node: Node, logdir: Path) -> None:
    """A node's hpq, Slurm and munge logs and the rehearsal's own logs of it, before the node goes."""
    dest = logdir / node.spec.name
    dest.mkdir(parents=True, exist_ok=True)
    for rel in ("/var/log/hpq", "/var/log/slurm", "/var/log/munge"):
        src = node.host_path(rel)
        if src.is_dir():
            subprocess.run(["cp", "-r", str(src), str(dest / rel.strip("/").replace("/", "_"))], capture_output=True)
    if node.log_dir.is_dir():
        subprocess.run(["cp", "-r", str(node.log_dir), str(dest / "rehearsal")], capture_output=True)


def _has_data_volume(deployed: aws.Deployed, group: str) -> bool:
    """HyperPod mounts a group's EBS volume (InstanceStorageConfigs) at /opt/sagemaker."""
    g: dict[str, Any]
    for g in deployed.cluster.get("InstanceGroups") or []:
        if g.get("InstanceGroupName") == group:
            return any("EbsVolumeConfig" in c for c in g.get("InstanceStorageConfigs") or [])
    return False


def _start_imds(node: Node) -> None:
    s = node.spec
    argv = ["ip", "netns", "exec", s.netns, sys.executable, "-m", "hpq.standins.imds",
            "--instance-id", s.instance_id, "--instance-type", s.instance_type, "--region", REGION,
            "--zone", ZONE, "--local-ipv4", s.ip, "--hostname", s.hostname]
    log = open(node.log_dir / "imds.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env={"PATH": os.environ.get("PATH", ""),
                                                      "PYTHONPATH": os.pathsep.join(sys.path)})
    finally:
        log.close()
    deadline = time.time() + 15
    probe = ("import urllib.request as u; r=u.Request('http://169.254.169.254/latest/api/token', method='PUT',"
             " headers={'X-aws-ec2-metadata-token-ttl-seconds': '60'}); u.urlopen(r, timeout=1).read()")
    while time.time() < deadline:
        if node.run(["python3", "-c", probe], check=False, timeout=10).returncode == 0:
            return
        time.sleep(0.1)
    raise Failure("nodes", "the IMDS stand-in did not answer", node=s.name, log=str(node.log_dir / "imds.log"),
                  last_lines=tail(node.log_dir / "imds.log"))


def _efa_devices(spec: NodeSpec) -> int:
    """EFA devices a node's image shows (node.EFA_DEVICES): a worker's type's EFA interfaces, else none."""
    if spec.role != WORKER:
        return 0
    try:
        return catalog.lookup(spec.instance_type).efa_interfaces
    except catalog.UnknownInstanceType:
        return 0


def _torch_python() -> str | None:
    """The Python the nodes' PyTorch environment runs: this interpreter when it has torch."""
    return sys.executable if importlib.util.find_spec("torch") is not None else None


def _open_path_for_users(node: Node, python: str) -> None:
    """Make the directories above the PyTorch interpreter traversable on the node (its image only)."""
    dirs = set()
    for p in (os.path.realpath(python), sys.prefix, os.path.realpath(sys.prefix)):
        d = os.path.dirname(p) if os.path.isfile(p) else p
        while d and d != "/":
            if not os.stat(d).st_mode & 0o001:
                dirs.add(d)
            d = os.path.dirname(d)
    if dirs:
        node.run(["chmod", "o+x"] + sorted(dirs))
