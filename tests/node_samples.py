"""What a HyperPod node really holds, as samples and stand-ins for the lifecycle tests.

Every sample follows a real format and names its source; values (ids, addresses) are made up.
- resource_config.json: awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/
  hyperpod-mental-model.md ("Key config files": Slurm ClusterConfig/SlurmConfig, EKS KubernetesConfig,
  ``hyperpod-i-<id>`` names, InstanceLabel null on non-accelerator nodes, network-node-layer-N labels),
  LifecycleScripts/base-config/lifecycle_script.py (class ResourceConfig: InstanceGroups[].Name,
  Instances[].CustomerIpAddress) and Extensions/detect-node/detect_node.sh (ClusterConfig.ClusterName,
  ClusterArn, Instances[].InstanceId/InstanceName, group InstanceType).
- provisioning_parameters.json, documented schema: aws/sagemaker-hyperpod-cluster-setup
  eks/cloudformation/resources/hyperpod-cluster-creator/lambda_function/lambda_function.py
  (__get_provisioning_parameters_file) and lifecycle_script.py (class ProvisioningParameters).
- hpq-cluster.json: the node contract (hpq's own file, written by the S3 stack).
- IMDS answers: EC2 User Guide, "Instance metadata categories"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-categories.html): instance-type is
  the EC2 name (``p5.48xlarge``), without SageMaker's ``ml.`` prefix.
- /proc/mounts: proc(5) line format; the Lustre source is an IP NID because mount.lustre resolves the DNS
  name first (lustre-release lustre/utils/mount_lustre.c, convert_hostnames; failover form
  ``a@tcp,b@tcp:c@tcp:/fs`` as in ClusterLabs/resource-agents pull 1464); the autofs line is what systemd's
  automount for an ``x-systemd.automount`` fstab entry leaves at the mount point (systemd.automount(5)).
- slurmd.service on HyperPod's AMI: /etc/systemd/system/slurmd.service with ``$SLURMD_OPTIONS`` in
  ExecStart, which AWS's start_slurm.sh fills through envsubst with ``--conf-server <controller ip>``;
  ``/opt/slurm/sbin/slurmd -D`` and the ExecStartPre that removes a local slurm.conf per
  hyperpod-mental-model.md ("slurmd uses Slurm's configless mode"); the remaining lines from SchedMD
  slurm etc/slurmd.service.in. No verbatim copy of the AMI's unit is public: this one is rebuilt from those.
- containerd.service and kubelet.service on AL2023: containerd/containerd containerd.service (ExecStart the
  RPM's /usr/bin/containerd), awslabs/amazon-eks-ami templates/al2023/runtime/rootfs/etc/systemd/system/
  kubelet.service.
- Amazon Linux 2 EKS nodes: awslabs/amazon-eks-ami templates/al2/runtime/containerd.service and
  templates/al2/runtime/kubelet.service (commit befed8c7: ExecStart continued over lines), placed as
  templates/al2/provisioners/install-worker.sh places them (containerd from the RPM under /usr/lib, kubelet.service
  and the ``10-compat-symlink.conf`` containerd drop-in under /etc/systemd/system, ``kubelet-kubeconfig`` baked
  in as /var/lib/kubelet/kubeconfig).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hpq.standins import systemctl

CLUSTER = "ml-cluster"
REGION = "us-west-2"
CLUSTER_ARN = f"arn:aws:sagemaker:{REGION}:123456789012:cluster/2hd31rmi9mde"
CONTROLLER_GROUP = "controller-machine"
LOGIN_GROUP = "login-group"
WORKER_GROUP = "worker-group-1"
FSX_DNS = f"fs-0123456789abcdef0.fsx.{REGION}.amazonaws.com"
FSX_MOUNTNAME = "abcdefgh"
FSX_IP = "10.1.40.25"  # the MGS address the FSx DNS name resolves to

SLURM_NODES = {  # InstanceName -> (InstanceId, CustomerIpAddress, AgentIpAddress)
    "controller-machine-1": ("i-0c1a2b3c4d5e6f701", "10.1.61.107", "172.16.10.11"),
    "login-group-1": ("i-0d1a2b3c4d5e6f702", "10.1.33.12", "172.16.10.12"),
    "worker-group-1-1": ("i-0e1a2b3c4d5e6f703", "10.1.92.200", "172.16.10.13"),
    "worker-group-1-2": ("i-0e1a2b3c4d5e6f704", "10.1.86.31", "172.16.10.14"),
}
EKS_NODES = {  # instance id -> (CustomerIpAddress, AgentIpAddress)
    "i-0a1b2c3d4e5f60718": ("10.1.120.15", "172.16.20.21"),
    "i-0a1b2c3d4e5f60719": ("10.1.121.16", "172.16.20.22"),
}
TOPOLOGY = {"network-node-layer-1": "nn-4f2a8c1d9e0b3a7c5", "network-node-layer-2": "nn-8e1d0c3b7a6f5e4d2",
            "network-node-layer-3": "nn-1c9b8a7f6e5d4c3b0"}


def slurm_resource_config(nodes: dict | None = None, controller_ip: str | None = None) -> dict:
    """A Slurm cluster's resource_config.json: controller, login and two p5 workers (sources: module doc)."""
    nodes = nodes or SLURM_NODES
    groups: dict[str, dict] = {}
    types = {CONTROLLER_GROUP: "ml.m5.12xlarge", LOGIN_GROUP: "ml.m5.4xlarge", WORKER_GROUP: "ml.p5.48xlarge"}
    for name, (iid, ip, agent) in nodes.items():
        group = name.rsplit("-", 1)[0]
        groups.setdefault(group, {"Name": group, "InstanceType": types.get(group, "ml.g5.16xlarge"),
                                  "Instances": []})
        groups[group]["Instances"].append({
            "InstanceName": name, "InstanceId": iid, "AgentIpAddress": agent, "CustomerIpAddress": ip,
            "InstanceLabel": dict(TOPOLOGY) if group == WORKER_GROUP else None})
    ctl_ip = controller_ip or next(ip for n, (_, ip, _) in nodes.items() if n.startswith(CONTROLLER_GROUP))
    return {"ClusterConfig": {"ClusterArn": CLUSTER_ARN, "ClusterName": CLUSTER, "ClusterType": "Slurm",
                              "SlurmConfig": {"PrimaryControllerIp": ctl_ip, "SecondaryControllerIps": []}},
            "InstanceGroups": list(groups.values())}


def eks_resource_config() -> dict:
    """An EKS cluster's resource_config.json: instances named hyperpod-i-<id>, no InstanceId (module doc)."""
    return {"ClusterConfig": {
        "ClusterArn": CLUSTER_ARN.replace("2hd31rmi9mde", "k8s9x1c2v3b4"), "ClusterName": "eks-ml-cluster",
        "ClusterType": "Kubernetes",
        "KubernetesConfig": {"EksClusterName": "hpq-eks", "EksClusterEndpoint":
                             "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com",
                             "EksClusterCertificateAuthority": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
                             "EksServiceIpv4Cidr": "10.100.0.0/16"}},
        "InstanceGroups": [{"Name": "gpu-workers", "InstanceType": "ml.g5.48xlarge", "Instances": [
            {"InstanceName": "hyperpod-" + iid, "AgentIpAddress": agent, "CustomerIpAddress": ip,
             "InstanceLabel": None} for iid, (ip, agent) in EKS_NODES.items()]}]}


def provisioning_parameters(fsx: bool = True) -> dict:
    """The documented provisioning_parameters.json (partition_name is the instance type there)."""
    doc = {"version": "1.0.0", "workload_manager": "slurm", "controller_group": CONTROLLER_GROUP,
           "login_group": LOGIN_GROUP,
           "worker_groups": [{"instance_group_name": WORKER_GROUP, "partition_name": "ml.p5.48xlarge"}]}
    if fsx:
        doc.update(fsx_dns_name=FSX_DNS, fsx_mountname=FSX_MOUNTNAME)
    return doc


def hpq_cluster_config(orchestrator: str = "slurm", cluster: str = CLUSTER) -> dict:
    """hpq-cluster.json as the contract defines it."""
    if orchestrator == "eks":
        return {"schema_version": 1, "orchestrator": "eks", "cluster_name": cluster, "controller_group": None,
                "login_group": None, "worker_groups": ["gpu-workers"], "partition": None}
    return {"schema_version": 1, "orchestrator": "slurm", "cluster_name": cluster,
            "controller_group": CONTROLLER_GROUP, "login_group": LOGIN_GROUP, "worker_groups": [WORKER_GROUP],
            "partition": "workers"}


def imds_answers(instance_id: str, instance_type: str = "p5.48xlarge") -> dict:
    """What IMDS answers for the categories the lifecycle reads (no ml. prefix on instance-type)."""
    return {"instance-id": instance_id, "instance-type": instance_type, "region": REGION}


def lustre_mount_line(target: str = "/fsx", nid: str = FSX_IP, mountname: str = FSX_MOUNTNAME) -> str:
    return f"{nid}@tcp:/{mountname} {target} lustre rw,relatime,flock,lazystatfs 0 0"


def autofs_line(target: str = "/fsx") -> str:
    return (f"systemd-1 {target} autofs rw,relatime,fd=61,pgrp=1,timeout=0,minproto=5,maxproto=5,direct,"
            "pipe_ino=18702 0 0")


BASE_MOUNTS = ("/dev/root / ext4 rw,relatime,discard,errors=remount-ro 0 0\n"
               "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
               "tmpfs /run tmpfs rw,nosuid,nodev,size=77086596k,nr_inodes=819200,mode=755,inode64 0 0\n")

AMI_SLURMD_UNIT = """[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target
Wants=network-online.target

[Service]
Type=simple
ExecStartPre=-/usr/bin/rm -f /opt/slurm/etc/slurm.conf
ExecStart=/opt/slurm/sbin/slurmd -D $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
KillMode=process
LimitNOFILE=131072
LimitMEMLOCK=infinity
LimitSTACK=infinity
Delegate=yes

[Install]
WantedBy=multi-user.target
"""

AL2023_CONTAINERD_UNIT = """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd

Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""

AL2023_KUBELET_UNIT = """[Unit]
Description=Kubernetes Kubelet
Documentation=https://github.com/kubernetes/kubernetes
After=containerd.service
Wants=containerd.service

[Service]
Slice=runtime.slice
EnvironmentFile=/etc/eks/kubelet/environment
ExecStartPre=/sbin/iptables -P FORWARD ACCEPT -w 5
ExecStart=/usr/bin/kubelet $NODEADM_KUBELET_ARGS

Restart=on-failure
RestartForceExitStatus=SIGPIPE
RestartSec=5
KillMode=process
CPUAccounting=true
MemoryAccounting=true

[Install]
WantedBy=multi-user.target
"""

AL2_CONTAINERD_UNIT = """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target dbus.service

[Service]
#uncomment to enable the experimental sbservice (sandboxed) version of containerd/cri integration
#Environment="ENABLE_CRI_SANDBOXES=sandboxed"
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd

Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""

AL2_KUBELET_UNIT = """[Unit]
Description=Kubernetes Kubelet
Documentation=https://github.com/kubernetes/kubernetes
After=docker.service iptables-restore.service
Requires=docker.service

[Service]
ExecStartPre=/sbin/iptables -P FORWARD ACCEPT -w 5
ExecStart=/usr/bin/kubelet \\
    --config /etc/kubernetes/kubelet/kubelet-config.json \\
    --kubeconfig /var/lib/kubelet/kubeconfig \\
    --container-runtime docker \\
    --network-plugin cni \\
    --image-credential-provider-config /etc/eks/image-credential-provider/config.json \\
    --image-credential-provider-bin-dir /etc/eks/image-credential-provider \\
    $KUBELET_ARGS \\
    $KUBELET_EXTRA_ARGS

Restart=always
RestartSec=5
KillMode=process

[Install]
WantedBy=multi-user.target
"""

AL2_CONTAINERD_COMPAT_DROPIN = """[Service]
ExecStartPre=/bin/ln -sf /run/containerd/containerd.sock /run/dockershim.sock
"""

# Stand-in for `mount -t lustre -o OPTS SOURCE TARGET`, i.e. mount.lustre: it resolves the MGS host name
# first (here through HOSTS, a stand-in for DNS) and fails the way mount.lustre does when it cannot; the
# kernel then lists the mount with the IP NID. It appends that line to the node's mount table (TABLE, else
# $HPQ_PROC_MOUNTS, else $HPQ_ROOT/proc/mounts: the lifecycle's settings, inherited; never the host's) and, with SHARED,
# links the target to a shared directory so the "filesystem" is real. FAIL_FIRST: fail that many calls
# first (an MGS not reachable yet). Every call is appended to CALLS.
FAKE_MOUNT = r"""#!/bin/sh
for a in "$@"; do src=$tgt; tgt=$a; done
echo "$*" >> "{calls}"
n=$(wc -l < "{calls}")
if [ "$n" -le {fail_first} ]; then
    echo "mount.lustre: mount $src at $tgt failed: Input/output error" >&2
    echo "Is the MGS running?" >&2
    exit 5
fi
host=${src%%@*}
rest=${src#*@tcp}
ip=$(awk -v h="$host" '$2 == h {print $1; exit}' "{hosts}")
if [ -z "$ip" ]; then
    echo "mount.lustre: Can't parse NID '$src'" >&2
    exit 22
fi
if [ -n "{shared}" ]; then rmdir "$tgt" 2>/dev/null || true; ln -sfn "{shared}" "$tgt"; fi
table="{table}"
[ -n "$table" ] || table=${HPQ_PROC_MOUNTS:-${HPQ_ROOT:?no node mount table to write}/proc/mounts}
case "$table" in /proc/*) echo "fake mount: refusing to write the host's $table" >&2; exit 99;; esac
mkdir -p "$(dirname "$table")"
echo "$ip@tcp$rest $tgt lustre rw,relatime,flock,lazystatfs 0 0" >> "$table"
"""


def write_fake_mount(path: Path, hosts: dict[str, str] | None = None, shared: Path | None = None,
                     fail_first: int = 0, table: Path | None = None) -> Path:
    """Write the mount stand-in at ``path``; returns the file its calls are recorded in."""
    hosts_file = path.parent / (path.name + ".hosts")
    hosts_file.write_text("".join(f"{ip} {name}\n" for name, ip in (hosts or {FSX_DNS: FSX_IP}).items()))
    calls = path.parent / (path.name + ".calls")
    path.write_text(FAKE_MOUNT.replace("{calls}", str(calls)).replace("{hosts}", str(hosts_file))
                    .replace("{shared}", str(shared or "")).replace("{fail_first}", str(fail_first))
                    .replace("{table}", str(table or "")))
    path.chmod(0o755)
    return calls


def write_recorder(path: Path, rc: int = 0) -> Path:
    """A command that records its arguments (e.g. HPQ_MODPROBE_CMD on a host without Lustre modules)."""
    calls = path.parent / (path.name + ".calls")
    path.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexit {rc}\n')
    path.chmod(0o755)
    return calls


def write_json(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path


def build_bundle(dest: Path) -> Path:
    """The node bundle exactly as it ships (bundle.node_bundle_files); returns its root on_create.sh."""
    import shutil

    from hpq.lifecycle import bundle, names

    for key, src in bundle.node_bundle_files().items():
        target = dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest / names.ON_CREATE_ENTRY


def clean_env() -> dict:
    """This process's environment without HPQ_* / SLURM_* settings (each test gives its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("HPQ_", "SLURM_", "SAGEMAKER_"))}


def run_on_create(entry: Path, env: dict, *args: str, cwd: Path | None = None,
                  timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the bundle's root on_create.sh the way HyperPod does: ``bash on_create.sh`` from the prefix
    directory (or, with ``cwd``, by its full path from somewhere else). A failure exits at once unless ``env``
    sets HPQ_FAIL_LOG_WAIT_S (the documented CloudWatch wait, 60 s on a node)."""
    argv = ["bash", entry.name if cwd is None else str(entry), *args]
    run_env = dict(clean_env(), **{"HPQ_FAIL_LOG_WAIT_S": "0", **env})
    return subprocess.run(argv, cwd=str(cwd or entry.parent), env=run_env,
                          capture_output=True, text=True, timeout=timeout)


def systemctl_standin_for(root: Path) -> str:
    """The systemctl stand-in's shim for the node at ``root`` (hpq.standins.systemctl: no systemd on this host),
    next to the root; what the lifecycle's HPQ_SYSTEMCTL_CMD names, or what goes first on the node's PATH."""
    return systemctl.install(str(root.parent / f"{root.name}-bin"), str(root))
