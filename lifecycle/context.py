"""Everything a lifecycle run may override, in one place, read from ``HPQ_*`` environment variables.

Two kinds of paths:
- *node paths* (``/etc/fstab``, ``/opt/ml/config/resource_config.json``) are what a real node has;
  they resolve under ``root`` (``HPQ_ROOT``, default ``/``) so a whole node can run in a directory;
- *paths you give* (``HPQ_RESOURCE_CONFIG``, ``HPQ_PROVISIONING_PARAMETERS``, ``HPQ_CLUSTER_CONFIG``,
  ``HPQ_PROC_MOUNTS``) are used exactly as given: they point at the input you want read.
Every external address (IMDS, AWS endpoint) and every host-specific command (mount, modprobe,
systemctl) can be swapped. On a HyperPod node nothing needs setting. docs/lifecycle.md lists
them all.

One meaning per setting: an unset or empty variable means its default, except where the default would be
"everything" or "the real system" for a value someone meant to give (``HPQ_STEPS``, ``HPQ_ROOT`` set but
empty: a ValueError, i.e. exit 2). Numbers must be finite and in range (``nan``, ``inf``, a negative wait,
zero attempts, a port outside 1-65535 are refused); choices must be one of the documented ones.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import fields, names, services

DEFAULT_SLURMCTLD_PORT = 6817
# The longest wait any setting may ask for: a day (a bigger number is a typo, and time.sleep overflows on 1e300).
MAX_WAIT_S = 86400.0
NCCL_PROFILES = ("default", "legacy")  # transport.PROFILES


def _env(env: Dict[str, str], key: str, default: str) -> str:
    value = env.get(key, "")
    return value if value != "" else default


def _given(env: Dict[str, str], key: str) -> Optional[str]:
    """The value of a variable that, when set, must not be empty (empty would mean "everything")."""
    if key not in env:
        return None
    value = env[key]
    if value.strip() == "":
        raise ValueError("%s is set but empty; unset it for the default" % key)
    return value


def _number(env: Dict[str, str], key: str, default, kind=float, low: float = 0.0, high: float = MAX_WAIT_S,
            low_open: bool = False):
    """``kind(env[key])`` or the default; finite and within [low, high] (``low`` excluded with ``low_open``).

    A bad value is a ValueError naming the variable and the range."""
    raw = _env(env, key, str(default))
    try:
        value = kind(raw.strip())
    except ValueError:
        raise ValueError("%s must be %s, got %r" % (key, "an integer" if kind is int else "a number",
                                                    env.get(key))) from None
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        raise ValueError("%s must be %s %s, got %r" % (
            key, "an integer" if kind is int else "a finite number",
            ("above %g and at most %g" if low_open else "from %g to %g") % (low, high), env.get(key)))
    return value


def _choice(env: Dict[str, str], key: str, default: str, choices) -> str:
    value = _env(env, key, default)
    if value not in choices:
        raise ValueError("%s must be one of %s, got %r" % (key, ", ".join(choices), value))
    return value


def parse_steps(text: str, key: str = "--steps") -> List[str]:
    """``a,b`` as a list of step names; empty (``''``, ``,``, blanks) is a ValueError, never "every step"."""
    steps = [x.strip() for x in text.split(",")]
    if not any(steps):
        raise ValueError("%s is empty; give step names (see --list-steps) or leave it out to run every step" % key)
    if not all(steps):
        raise ValueError("%s %r has an empty step name" % (key, text))
    return steps


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
    systemctl_cmd: List[str] = field(default_factory=lambda: ["systemctl"])  # services.SystemdManager
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
    fsx_api_attempts: int = 8  # FSx API calls per request while throttled or unreachable (fsx.with_backoff)
    fsx_mount_retry_s: float = 5.0
    dns_wait_s: float = 60.0
    eks_disk_wait_s: float = 60.0
    service_wait_s: float = 120.0
    log_file: str = "/var/log/hpq/lifecycle.log"
    # observability.py: a mirror of the exporters' GitHub release URLs, and name=sha256 pins of its own
    observability_mirror: str = ""
    observability_sha256: str = ""

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

        s.root = given(_given(env, "HPQ_ROOT") or "/")
        s.bundle_root = given(_env(env, "HPQ_BUNDLE_ROOT", bundle_root or _default_bundle_root()))
        s.imds_url = _env(env, "HPQ_IMDS_URL", s.imds_url).rstrip("/")
        # SAGEMAKER_RESOURCE_CONFIG_PATH: the variable AWS's reference on_create.sh honours
        # (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/on_create.sh).
        rc = _env(env, "HPQ_RESOURCE_CONFIG", env.get("SAGEMAKER_RESOURCE_CONFIG_PATH", ""))
        s.resource_config = given(rc) or s.path(names.RESOURCE_CONFIG)
        s.provisioning_parameters = given(_env(env, "HPQ_PROVISIONING_PARAMETERS", ""))
        s.cluster_config = given(_env(env, "HPQ_CLUSTER_CONFIG", ""))
        s.node_ips = [fields.ipv4(x.strip(), "HPQ_NODE_IP address") for x in _env(env, "HPQ_NODE_IP", "").split(",")
                      if x.strip()]
        s.proc_mounts = given(_env(env, "HPQ_PROC_MOUNTS", "")) or s.path(names.PROC_MOUNTS)
        s.slurm_prefix = _env(env, "HPQ_SLURM_PREFIX", s.slurm_prefix)
        s.slurm_conf_dir = _env(env, "HPQ_SLURM_CONF_DIR", os.path.join(s.slurm_prefix, "etc"))
        s.slurmctld_port = _number(env, "HPQ_SLURMCTLD_PORT", DEFAULT_SLURMCTLD_PORT, int, 1, 65535)
        s.slurm_node_root = _env(env, "HPQ_SLURM_NODE_ROOT", s.slurm_node_root)
        s.systemctl_cmd = command("HPQ_SYSTEMCTL_CMD", "systemctl")
        s.mount_cmd = command("HPQ_MOUNT_CMD", "mount")
        s.modprobe_cmd = command("HPQ_MODPROBE_CMD", "modprobe")
        s.default_user = fields.token(_env(env, "HPQ_DEFAULT_USER", s.default_user), "HPQ_DEFAULT_USER")
        s.munge_user = fields.token(_env(env, "HPQ_MUNGE_USER", s.munge_user), "HPQ_MUNGE_USER")
        s.nccl_profile = _choice(env, "HPQ_NCCL_PROFILE", s.nccl_profile, NCCL_PROFILES)
        s.bin_dir = _env(env, "HPQ_BIN_DIR", s.bin_dir)
        s.eks_data_disk = _env(env, "HPQ_EKS_DATA_DISK", s.eks_data_disk)
        steps = env.get("HPQ_STEPS")
        s.steps = None if steps is None else parse_steps(steps, "HPQ_STEPS")
        s.slurm_conf_wait_s = _number(env, "HPQ_SLURM_CONF_WAIT_S", s.slurm_conf_wait_s)
        s.shared_wait_s = _number(env, "HPQ_SHARED_WAIT_S", s.shared_wait_s)
        s.fsx_wait_s = _number(env, "HPQ_FSX_WAIT_S", s.fsx_wait_s)
        s.fsx_poll_s = _number(env, "HPQ_FSX_POLL_S", s.fsx_poll_s, low_open=True)
        s.fsx_mount_attempts = _number(env, "HPQ_FSX_MOUNT_ATTEMPTS", s.fsx_mount_attempts, int, 1, 100)
        s.fsx_api_attempts = _number(env, "HPQ_FSX_API_ATTEMPTS", s.fsx_api_attempts, int, 1, 100)
        s.fsx_mount_retry_s = _number(env, "HPQ_FSX_MOUNT_RETRY_S", s.fsx_mount_retry_s)
        s.dns_wait_s = _number(env, "HPQ_DNS_WAIT_S", s.dns_wait_s)
        s.eks_disk_wait_s = _number(env, "HPQ_EKS_DISK_WAIT_S", s.eks_disk_wait_s)
        s.service_wait_s = _number(env, "HPQ_SERVICE_WAIT_S", s.service_wait_s)
        s.log_file = _env(env, "HPQ_LOG_FILE", s.log_file)
        s.observability_mirror = _env(env, "HPQ_OBSERVABILITY_MIRROR", "")
        s.observability_sha256 = _env(env, "HPQ_OBSERVABILITY_SHA256", "")
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
            self._services = services.SystemdManager(self)
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
        from . import files

        if not os.path.exists(self.path(names.NODE_INFO)):
            raise FileNotFoundError(2, "No such file or directory", self.path(names.NODE_INFO))
        doc = files.read_json(self.path(names.NODE_INFO))
        if not isinstance(doc, dict):
            raise files.InputError("%s is not a JSON object" % self.path(names.NODE_INFO))
        return doc
