"""Everything a lifecycle run may override, in one place, read from ``HPQ_*`` environment variables.

Two kinds of paths:
- *node paths* (``/etc/fstab``, ``/opt/ml/config/resource_config.json``) are what a real node has;
  they resolve under ``root`` (``HPQ_ROOT``, default ``/``) so a whole node can run in a directory;
- *paths you give* (``HPQ_RESOURCE_CONFIG``, ``HPQ_PROVISIONING_PARAMETERS``, ``HPQ_CLUSTER_CONFIG``,
  ``HPQ_PROC_MOUNTS``) are used exactly as given: they point at the input you want read.
Every external address (IMDS, AWS endpoint) and every host-specific command (mount, modprobe,
service manager) can be swapped. On a HyperPod node nothing needs setting. docs/lifecycle.md lists
them all.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import names

DEFAULT_SLURMCTLD_PORT = 6817


def _env(env: Dict[str, str], key: str, default: str) -> str:
    value = env.get(key, "")
    return value if value != "" else default


def _number(env: Dict[str, str], key: str, default, kind=float):
    """``kind(env[key])`` or the default; a bad value is a ValueError naming the variable."""
    try:
        value = kind(_env(env, key, str(default)))
    except ValueError:
        raise ValueError("%s must be %s, got %r" % (key, "an integer" if kind is int else "a number",
                                                    env.get(key))) from None
    if value < 0:
        raise ValueError("%s must not be negative, got %r" % (key, env.get(key)))
    return value


def _command(env: Dict[str, str], key: str, default: str) -> List[str]:
    try:
        argv = shlex.split(_env(env, key, default))
    except ValueError as exc:
        raise ValueError("%s is not a valid command line: %s" % (key, exc)) from None
    if not argv:
        raise ValueError("%s is empty" % key)
    return argv


@dataclass
class Settings:
    root: str = "/"
    bundle_root: str = ""  # the directory holding hpq/ (where on_create.sh's bundle landed)
    start_dir: str = ""  # where OnCreate was started (HyperPod: /tmp/<bucket>/<prefix>/)
    imds_url: str = "http://169.254.169.254"
    resource_config: str = ""  # path as given, else names.RESOURCE_CONFIG under root
    provisioning_parameters: str = ""  # path as given; default: searched (identity.role_files)
    cluster_config: str = ""  # hpq-cluster.json, path as given; default: searched
    node_ips: List[str] = field(default_factory=list)  # this node's addresses; default: asked of the kernel
    proc_mounts: str = ""  # path as given, else /proc/mounts under root
    slurm_prefix: str = "/opt/slurm"  # binaries (real path, not under root)
    slurm_conf_dir: str = ""  # node path; default <slurm_prefix>/etc
    slurmctld_port: int = DEFAULT_SLURMCTLD_PORT
    slurm_node_root: str = "/"  # each Slurm node's root as jobs see it; %n = the job's Slurm node name
    service_manager: str = ""  # systemd | direct; default: systemd when it is PID 1
    mount_cmd: List[str] = field(default_factory=lambda: ["mount"])
    modprobe_cmd: List[str] = field(default_factory=lambda: ["modprobe"])
    default_user: str = "ubuntu"
    munge_user: str = "munge"
    nccl_profile: str = "default"
    bin_dir: str = "/usr/local/bin"
    eks_data_disk: str = names.EKS_DATA_DISK
    steps: Optional[List[str]] = None
    slurm_conf_wait_s: float = 900.0
    shared_wait_s: float = 600.0
    fsx_wait_s: float = 1800.0
    fsx_poll_s: float = 10.0
    fsx_mount_attempts: int = 5
    fsx_mount_retry_s: float = 5.0
    dns_wait_s: float = 60.0
    eks_disk_wait_s: float = 60.0
    service_wait_s: float = 120.0
    log_file: str = "/var/log/hpq/lifecycle.log"

    @classmethod
    def from_env(cls, env: Optional[Dict[str, str]] = None, bundle_root: str = "") -> "Settings":
        env = dict(os.environ if env is None else env)
        s = cls()
        # Relative paths are relative to where the run was started (on_create.sh then moves to the bundle).
        s.start_dir = os.path.abspath(_env(env, "HPQ_START_DIR", os.getcwd()))

        def given(path: str) -> str:
            return os.path.normpath(os.path.join(s.start_dir, path)) if path else ""

        def command(key: str, default: str) -> List[str]:
            argv = _command(env, key, default)
            return [given(argv[0]) if "/" in argv[0] else argv[0]] + argv[1:]

        s.root = given(_env(env, "HPQ_ROOT", "/"))
        s.bundle_root = given(_env(env, "HPQ_BUNDLE_ROOT", bundle_root or _default_bundle_root()))
        s.imds_url = _env(env, "HPQ_IMDS_URL", s.imds_url).rstrip("/")
        # SAGEMAKER_RESOURCE_CONFIG_PATH: the variable AWS's reference on_create.sh honours
        # (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/on_create.sh).
        rc = _env(env, "HPQ_RESOURCE_CONFIG", env.get("SAGEMAKER_RESOURCE_CONFIG_PATH", ""))
        s.resource_config = given(rc) or s.path(names.RESOURCE_CONFIG)
        s.provisioning_parameters = given(_env(env, "HPQ_PROVISIONING_PARAMETERS", ""))
        s.cluster_config = given(_env(env, "HPQ_CLUSTER_CONFIG", ""))
        s.node_ips = [x.strip() for x in _env(env, "HPQ_NODE_IP", "").split(",") if x.strip()]
        s.proc_mounts = given(_env(env, "HPQ_PROC_MOUNTS", "")) or s.path(names.PROC_MOUNTS)
        s.slurm_prefix = _env(env, "HPQ_SLURM_PREFIX", s.slurm_prefix)
        s.slurm_conf_dir = _env(env, "HPQ_SLURM_CONF_DIR", os.path.join(s.slurm_prefix, "etc"))
        s.slurmctld_port = _number(env, "HPQ_SLURMCTLD_PORT", DEFAULT_SLURMCTLD_PORT, int)
        s.slurm_node_root = _env(env, "HPQ_SLURM_NODE_ROOT", s.slurm_node_root)
        s.service_manager = _env(env, "HPQ_SERVICE_MANAGER",
                                 "systemd" if os.path.isdir("/run/systemd/system") else "direct")
        s.mount_cmd = command("HPQ_MOUNT_CMD", "mount")
        s.modprobe_cmd = command("HPQ_MODPROBE_CMD", "modprobe")
        s.default_user = _env(env, "HPQ_DEFAULT_USER", s.default_user)
        s.munge_user = _env(env, "HPQ_MUNGE_USER", s.munge_user)
        s.nccl_profile = _env(env, "HPQ_NCCL_PROFILE", s.nccl_profile)
        s.bin_dir = _env(env, "HPQ_BIN_DIR", s.bin_dir)
        s.eks_data_disk = _env(env, "HPQ_EKS_DATA_DISK", s.eks_data_disk)
        steps = _env(env, "HPQ_STEPS", "")
        s.steps = [x.strip() for x in steps.split(",") if x.strip()] or None
        s.slurm_conf_wait_s = _number(env, "HPQ_SLURM_CONF_WAIT_S", s.slurm_conf_wait_s)
        s.shared_wait_s = _number(env, "HPQ_SHARED_WAIT_S", s.shared_wait_s)
        s.fsx_wait_s = _number(env, "HPQ_FSX_WAIT_S", s.fsx_wait_s)
        s.fsx_poll_s = _number(env, "HPQ_FSX_POLL_S", s.fsx_poll_s)
        s.fsx_mount_attempts = max(1, _number(env, "HPQ_FSX_MOUNT_ATTEMPTS", s.fsx_mount_attempts, int))
        s.fsx_mount_retry_s = _number(env, "HPQ_FSX_MOUNT_RETRY_S", s.fsx_mount_retry_s)
        s.dns_wait_s = _number(env, "HPQ_DNS_WAIT_S", s.dns_wait_s)
        s.eks_disk_wait_s = _number(env, "HPQ_EKS_DISK_WAIT_S", s.eks_disk_wait_s)
        s.service_wait_s = _number(env, "HPQ_SERVICE_WAIT_S", s.service_wait_s)
        s.log_file = _env(env, "HPQ_LOG_FILE", s.log_file)
        return s

    def path(self, node_path: str) -> str:
        """Where the node path ``node_path`` (absolute, as on a real node) lives under ``root``."""
        if self.root in ("", "/"):
            return node_path
        return os.path.join(self.root, node_path.lstrip("/"))


def _default_bundle_root() -> str:
    # lifecycle/ -> the package dir -> its parent holds hpq/ in the bundle layout.
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(here))


class Degraded(str):
    """A step's result when it logged a warning and went on without doing its part (no FSx, no host CA...).

    The node still works, with less; run_steps logs the step's end as a WARNING
    (``step X: done in Ns, with a warning: ...``) so the CloudWatch stream and the rehearsal tell it apart
    from a step that did everything. A plain ``str`` everywhere else.
    """


class Context:
    """Settings plus what earlier steps learned (node identity), passed to every step."""

    def __init__(self, settings: Settings, log=None):
        self.s = settings
        self.log = log
        self.node = None  # identity.NodeInfo once the identify step ran (or node-info was read back)
        self._services = None
        self._imds = None

    def path(self, node_path: str) -> str:
        return self.s.path(node_path)

    @property
    def services(self):
        if self._services is None:
            from . import services

            self._services = services.manager(self)
        return self._services

    @property
    def imds(self):
        """One IMDS client per run: its session token serves every step."""
        if self._imds is None:
            from .imds import ImdsClient

            self._imds = ImdsClient(self.s.imds_url)
        return self._imds

    def node_info(self) -> Dict:
        """The node-info JSON written by the identify step (for steps run on their own)."""
        with open(self.path(names.NODE_INFO)) as fh:
            return json.load(fh)
