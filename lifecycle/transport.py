"""EFA transport selection and the NCCL/libfabric environment: the ONE function.

Slurm nodes get its result written by the lifecycle scripts, ``run-nccl-test``
applies it at run time, and EKS manifests inject it as container env; the CLI's
``hpq nccl-env`` prints it. Standard library only (ships to nodes).

Why the decision looks the way it does:
- ``FI_EFA_USE_DEVICE_RDMA=1`` on an instance without device RDMA aborts the
  process in MPI_Init, so RDMA comes from the catalog (``fi_info`` reports
  ``FI_EP_RDM`` for every EFA device, which says nothing about RDMA). A device
  probe may only *downgrade* RDMA, never enable it.
- Without ``NCCL_NET_PLUGIN=none`` on a node with no EFA, NCCL still loads the
  OFI plugin and fails the handshake.
- ``NCCL_ALGO``/``NCCL_PROTO``/``NCCL_TREE_THRESHOLD`` are never set; buffer and
  chunk sizes only in the opt-in ``legacy`` profile.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import catalog

EFA_RDMA = "efa-rdma"
EFA_SENDRECV = "efa-sendrecv"
TCP = "tcp"

PROFILES = ("default", "legacy")
VIRTUAL_IFACE_EXCLUDE = "^docker,lo,veth"
NEURON_BIN = "/opt/aws/neuron/bin"
LEGACY_TUNING = {"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288"}

# The variables this module owns: every NCCL (NCCL_*), libfabric (FI_*), aws-ofi-nccl (OFI_NCCL_*, the
# plugin's own settings, e.g. OFI_NCCL_PROTOCOL in aws/aws-ofi-nccl's docs) and gloo (GLOO_*) setting, and
# hpq's own two. A launch gives its ranks exactly the worker type's values of these: one inherited from
# wherever the job was submitted (a CPU controller, a login node) is removed, never merged.
OWNED_PREFIXES = ("NCCL_", "FI_", "OFI_NCCL_", "GLOO_")
OWNED_KEYS = ("HPQ_TRANSPORT", "HPQ_TORCH_BACKEND")


def owns(key: str) -> bool:
    """Whether ``key`` is a transport setting (see OWNED_PREFIXES) that only this module may give a job."""
    return key.startswith(OWNED_PREFIXES) or key in OWNED_KEYS


def exports_to_shells(entry: catalog.InstanceType, role: Optional[str]) -> bool:
    """Whether a node may put its transport settings where login shells and Slurm pick them up.

    Only accelerated workers: jobs are submitted from the controller and login nodes, and
    ``sbatch``/``srun`` carry the submitter's environment into the job (``--export=ALL``, Slurm's
    default), so a CPU node's ``NCCL_NET_PLUGIN=none`` would reach every GPU rank. AWS's HyperPod
    lifecycle (awsome-distributed-ai ``1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config``)
    exports no transport variable on any node; its job scripts set them (``micro-benchmarks/nccl-tests/
    slurm/nccl-tests-container.sbatch``: ``export FI_PROVIDER=efa`` inside the job).
    """
    return entry.is_accelerated and role not in ("controller", "login")


@dataclass(frozen=True)
class NodeProbe:
    """What a look at the node found; ``None`` means "not probed / unknown"."""

    efa_devices: Optional[int] = None
    fi_info_efa: Optional[bool] = None
    device_rdma: Optional[bool] = None
    default_iface: Optional[str] = None


@dataclass(frozen=True)
class NodeEnvironment:
    instance_type: str
    transport: str
    torch_backend: str
    variables: Dict[str, str]
    path_prepend: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = field(default=())

    def as_shell(self) -> str:
        lines = ["export %s=%s" % (k, _sh_quote(v)) for k, v in sorted(self.variables.items())]
        for p in self.path_prepend:
            lines.append('case ":$PATH:" in *":%s:"*) ;; *) export PATH="%s:$PATH" ;; esac' % (p, p))
        return "\n".join(lines) + "\n"

    def k8s_env(self) -> List[Dict[str, str]]:
        """Container ``env:`` entries, in a stable order (EKS manifests, ``hpq nccl-env --output k8s``)."""
        return [{"name": k, "value": v} for k, v in sorted(self.variables.items())]


def is_plain(value: str) -> bool:
    """Needs no quoting in sh or in /etc/environment (pam_env)."""
    return bool(value) and all(c.isalnum() or c in "@%_+=:,./-^" for c in value)


def _sh_quote(value: str) -> str:
    if is_plain(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def select_transport(entry: catalog.InstanceType, probe: NodeProbe) -> Tuple[str, List[str]]:
    """Decide EFA RDMA / EFA SENDRECV / TCP, and say why when the probe overrode the catalog."""
    notes: List[str] = []
    efa_present = entry.has_efa
    if probe.efa_devices is not None:
        found = probe.efa_devices > 0
        if found != efa_present:
            notes.append(
                "catalog says %s has %d EFA interface(s) but the node probe found %d EFA device(s); "
                "trusting the device" % (entry.name, entry.efa_interfaces, probe.efa_devices)
            )
            if not found and entry.has_efa:
                notes.append(
                    "no EFA device on an EFA instance usually means the instance group lacks EFA or the "
                    "security group has no self-referencing rules: traffic will go over TCP (slow)"
                )
        efa_present = found
    if not efa_present:
        return TCP, notes
    if probe.fi_info_efa is False:
        notes.append("EFA device present but fi_info reports no efa provider (libfabric missing?): using TCP")
        return TCP, notes
    rdma = entry.efa_device_rdma
    if rdma and probe.device_rdma is False:
        notes.append("catalog says device RDMA but the device reports none: using SENDRECV to avoid an abort")
        rdma = False
    elif not rdma and probe.device_rdma:
        notes.append("device reports RDMA but %s is not known to support it: keeping SENDRECV" % entry.name)
    return (EFA_RDMA if rdma else EFA_SENDRECV), notes


def node_environment(
    instance_type: str, probe: Optional[NodeProbe] = None, profile: str = "default"
) -> NodeEnvironment:
    """The environment a node of ``instance_type`` gets, given what its probe found."""
    if profile not in PROFILES:
        raise ValueError("unknown NCCL profile %r (choose from %s)" % (profile, ", ".join(PROFILES)))
    entry = catalog.lookup(instance_type)
    probe = probe or NodeProbe()
    transport, notes = select_transport(entry, probe)

    env: Dict[str, str] = {"HPQ_TRANSPORT": transport}
    if transport == TCP:
        iface = probe.default_iface
        env["NCCL_NET_PLUGIN"] = "none"
        env["NCCL_SOCKET_IFNAME"] = iface or VIRTUAL_IFACE_EXCLUDE
        if iface:
            env["GLOO_SOCKET_IFNAME"] = iface
    else:
        env["FI_PROVIDER"] = "efa"
        env["FI_EFA_USE_DEVICE_RDMA"] = "1" if transport == EFA_RDMA else "0"
        env["FI_EFA_FORK_SAFE"] = "1"
        env["NCCL_SOCKET_IFNAME"] = VIRTUAL_IFACE_EXCLUDE
    if profile == "legacy":
        env.update(LEGACY_TUNING)

    # NCCL only on GPUs with EFA; the measured TCP path trains with gloo (docs/design.md),
    # and CPU-only controllers have nothing else.
    if entry.accelerator == catalog.TRAINIUM:
        backend = "xla"  # torch-neuronx collectives
    else:
        backend = "nccl" if entry.accelerator == catalog.GPU and transport != TCP else "gloo"
    env["HPQ_TORCH_BACKEND"] = backend

    path: Tuple[str, ...] = ()
    if entry.accelerator == catalog.TRAINIUM:
        path = (NEURON_BIN,)
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return NodeEnvironment(entry.name, transport, backend, env, path, tuple(notes))


# ---------------------------------------------------------------------------- node probe


def default_route_iface(proc_root: str = "/") -> Optional[str]:
    """The interface carrying the default route, from /proc/net/route (never a hard-coded ens6)."""
    try:
        with open(os.path.join(proc_root, "proc/net/route")) as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) > 2 and parts[1] == "00000000":
                    return parts[0]
    except OSError:
        return None
    return None


def count_efa_devices(sys_root: str = "/") -> int:
    """EFA devices the kernel exposes (``/sys/class/infiniband/*`` bound to the efa driver)."""
    count = 0
    for dev in glob.glob(os.path.join(sys_root, "sys/class/infiniband/*")):
        driver = os.path.join(dev, "device", "driver")
        name = os.path.basename(os.path.realpath(driver)) if os.path.exists(driver) else ""
        if name == "efa" or os.path.basename(dev).startswith(("efa", "rdmap")):
            count += 1
    return count


def fi_info_has_efa(fi_info: Optional[str] = None) -> Optional[bool]:
    """Whether libfabric's efa provider answers; ``None`` when fi_info is not installed."""
    exe = fi_info or shutil.which("fi_info") or ("/opt/amazon/efa/bin/fi_info"
                                                if os.path.exists("/opt/amazon/efa/bin/fi_info") else None)
    if not exe:
        return None
    try:
        res = subprocess.run([exe, "-p", "efa"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=20, universal_newlines=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.returncode == 0 and "provider: efa" in res.stdout


def probe_node(root: str = "/", fi_info: Optional[str] = None) -> NodeProbe:
    """Look at this node. ``root`` lets tests point at a fake /sys and /proc tree."""
    efa = count_efa_devices(root)
    return NodeProbe(
        efa_devices=efa,
        fi_info_efa=fi_info_has_efa(fi_info) if efa else None,
        device_rdma=None,
        default_iface=default_route_iface(root),
    )
