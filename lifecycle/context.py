"""Everything a lifecycle run may override, in one place, read from ``HPQ_*`` environment variables.

Every system path is resolved under ``root`` (``HPQ_ROOT``, default ``/``) so tests
run a whole node in a temp directory; every external address (IMDS, AWS endpoint)
and every host-specific choice (Slurm prefix, service manager, mount command) can be
swapped. On a HyperPod node nothing needs setting: the defaults are the node's.
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
        return kind(_env(env, key, str(default)))
    except ValueError:
        raise ValueError("%s must be %s, got %r" % (key, "an integer" if kind is int else "a number",
                                                    env.get(key))) from None


@dataclass
class Settings:
    root: str = "/"
    bundle_root: str = ""  # the directory holding hpq/ (where on_create.sh's bundle landed)
    imds_url: str = "http://169.254.169.254"
    resource_config: str = ""  # node path; default names.RESOURCE_CONFIG
    provisioning_parameters: str = ""  # real path; default: searched next to the bundle
    slurm_prefix: str = "/opt/slurm"  # binaries (real path, not under root)
    slurm_conf_dir: str = ""  # node path; default <slurm_prefix>/etc
    slurmctld_port: int = DEFAULT_SLURMCTLD_PORT
    service_manager: str = ""  # systemd | direct; default: systemd when it is PID 1
    mount_cmd: List[str] = field(default_factory=lambda: ["mount"])
    default_user: str = "ubuntu"
    munge_user: str = "munge"
    nccl_profile: str = "default"
    bin_dir: str = "/usr/local/bin"
    steps: Optional[List[str]] = None
    slurm_conf_wait_s: float = 900.0
    shared_wait_s: float = 600.0
    fsx_wait_s: float = 1800.0
    fsx_poll_s: float = 10.0
    service_wait_s: float = 120.0
    log_file: str = "/var/log/hpq/lifecycle.log"

    @classmethod
    def from_env(cls, env: Optional[Dict[str, str]] = None, bundle_root: str = "") -> "Settings":
        env = dict(os.environ if env is None else env)
        s = cls()
        s.root = os.path.abspath(_env(env, "HPQ_ROOT", "/"))
        s.bundle_root = os.path.abspath(_env(env, "HPQ_BUNDLE_ROOT", bundle_root or _default_bundle_root()))
        s.imds_url = _env(env, "HPQ_IMDS_URL", s.imds_url).rstrip("/")
        s.resource_config = _env(env, "HPQ_RESOURCE_CONFIG", names.RESOURCE_CONFIG)
        s.provisioning_parameters = _env(env, "HPQ_PROVISIONING_PARAMETERS", "")
        s.slurm_prefix = _env(env, "HPQ_SLURM_PREFIX", s.slurm_prefix)
        s.slurm_conf_dir = _env(env, "HPQ_SLURM_CONF_DIR", os.path.join(s.slurm_prefix, "etc"))
        s.slurmctld_port = _number(env, "HPQ_SLURMCTLD_PORT", DEFAULT_SLURMCTLD_PORT, int)
        s.service_manager = _env(env, "HPQ_SERVICE_MANAGER",
                                 "systemd" if os.path.isdir("/run/systemd/system") else "direct")
        s.mount_cmd = shlex.split(_env(env, "HPQ_MOUNT_CMD", "mount"))
        s.default_user = _env(env, "HPQ_DEFAULT_USER", s.default_user)
        s.munge_user = _env(env, "HPQ_MUNGE_USER", s.munge_user)
        s.nccl_profile = _env(env, "HPQ_NCCL_PROFILE", s.nccl_profile)
        s.bin_dir = _env(env, "HPQ_BIN_DIR", s.bin_dir)
        steps = _env(env, "HPQ_STEPS", "")
        s.steps = [x.strip() for x in steps.split(",") if x.strip()] or None
        s.slurm_conf_wait_s = _number(env, "HPQ_SLURM_CONF_WAIT_S", s.slurm_conf_wait_s)
        s.shared_wait_s = _number(env, "HPQ_SHARED_WAIT_S", s.shared_wait_s)
        s.fsx_wait_s = _number(env, "HPQ_FSX_WAIT_S", s.fsx_wait_s)
        s.fsx_poll_s = _number(env, "HPQ_FSX_POLL_S", s.fsx_poll_s)
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


class Context:
    """Settings plus what earlier steps learned (node identity), passed to every step."""

    def __init__(self, settings: Settings, log=None):
        self.s = settings
        self.log = log
        self.node = None  # identity.NodeInfo once the identify step ran
        self.params = None  # identity.ProvisioningParameters
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
