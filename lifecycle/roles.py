"""Which instance group plays which role: hpq-cluster.json, else the documented provisioning_parameters.json.

``hpq-cluster.json`` (names.HPQ_CLUSTER_CONFIG) is hpq's own file, written by the S3 stack at the root of
the lifecycle prefix (so next to the bundle): ``{"schema_version": 1, "orchestrator": "slurm"|"eks",
"cluster_name", "controller_group", "login_group", "worker_groups": [names], "partition", "fsx_dns_name",
"fsx_mountname"}``. The two FSx names come from the Storage stack's FileSystem (Fn::GetAtt DNSName and
LustreMountName, AWS::FSx::FileSystem return values) on Slurm variants, and are null or absent otherwise: with
them the fsx step makes no FSx API call at boot (names come from configuration, as in AWS's reference
lifecycle_script.py, which reads fsx_dns_name/fsx_mountname from provisioning_parameters.json).

Every name a role file gives is checked (fields.py) before use: a group, partition or FSx name with a blank
or a line break is a RoleFileError naming the file and the field, never a line spliced into a node file.

``provisioning_parameters.json`` is HyperPod's legacy Slurm file, accepted in its documented schema only
(awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/lifecycle_script.py,
class ProvisioningParameters; aws/sagemaker-hyperpod-cluster-setup
eks/cloudformation/resources/hyperpod-cluster-creator/lambda_function/lambda_function.py,
__get_provisioning_parameters_file): ``{"version", "workload_manager": "slurm", "controller_group",
"login_group", "worker_groups": [{"instance_group_name", "partition_name"}], "fsx_dns_name",
"fsx_mountname"}``, with no cluster name. hpq's earlier invention of that file (``cluster_name``,
``orchestrator``, ``worker_groups`` as plain names) is refused with a message: HyperPod reads that file
name, so a second schema under it would only hide mistakes. It is found wherever a user or HyperPod puts
it: next to the bundle, in the OnCreate working directory, or at /opt/ml/config/provisioning_parameters.json
(names.NODE_PROVISIONING_PARAMETERS; Extensions/detect-node/README.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import fields, files, names
from .resource_config import EKS, SLURM

ORCHESTRATORS = (SLURM, EKS)


class RoleFileError(Exception):
    pass


@dataclass
class RoleFile:
    path: str
    kind: str  # names.HPQ_CLUSTER_CONFIG or names.PROVISIONING_PARAMETERS
    orchestrator: Optional[str] = None
    cluster_name: Optional[str] = None
    controller_group: Optional[str] = None
    login_group: Optional[str] = None
    worker_groups: List[str] = field(default_factory=list)
    partitions: Dict[str, str] = field(default_factory=dict)  # worker group -> partition
    fsx_dns_name: Optional[str] = None
    fsx_mountname: Optional[str] = None
    prometheus_remote_write_url: Optional[str] = None  # hpq-cluster.json only: observability on (observability.py)
    node_prolog: bool = False  # hpq-cluster.json only: the Slurm prolog's quick node checks on (lifecycle/prolog.py)

    @property
    def label(self) -> str:
        return "%s (%s)" % (self.path, self.kind)


def _read(path: str) -> Dict:
    try:
        doc = files.read_json(path)
    except files.InputError as exc:
        raise RoleFileError(str(exc)) from None
    if not isinstance(doc, dict):
        raise RoleFileError("%s is not a JSON object" % path)
    return doc


def _opt_str(doc: Dict, key: str, path: str, check=None) -> Optional[str]:
    """``doc[key]``: None when null, absent or empty; else a string that passes ``check`` (fields.py)."""
    value = doc.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RoleFileError("%s: %s must be a string or null, got %r" % (path, key, value))
    return _checked(check or fields.token, value, key, path)


def _checked(check, value, what: str, path: str) -> str:
    try:
        return check(value, what)
    except fields.FieldError as exc:
        raise RoleFileError("%s: %s" % (path, exc)) from None


def _fsx_names(doc: Dict, path: str):
    """(fsx_dns_name, fsx_mountname): both or neither."""
    dns = _opt_str(doc, "fsx_dns_name", path, fields.dns_name)
    mount = _opt_str(doc, "fsx_mountname", path, fields.mount_name)
    if bool(dns) != bool(mount):
        raise RoleFileError("%s: fsx_dns_name and fsx_mountname go together; it gives only %s"
                            % (path, "fsx_dns_name" if dns else "fsx_mountname"))
    return dns, mount


def load_cluster_config(path: str) -> RoleFile:
    doc = _read(path)
    if doc.get("schema_version") != names.HPQ_CLUSTER_CONFIG_SCHEMA:
        raise RoleFileError("%s: schema_version %r is not %d (a bundle older or newer than this lifecycle?)"
                            % (path, doc.get("schema_version"), names.HPQ_CLUSTER_CONFIG_SCHEMA))
    orchestrator = doc.get("orchestrator")
    if orchestrator not in ORCHESTRATORS:
        raise RoleFileError("%s: orchestrator %r is none of %s" % (path, orchestrator, ", ".join(ORCHESTRATORS)))
    workers = doc.get("worker_groups")
    if not isinstance(workers, list) or not all(isinstance(w, str) and w for w in workers):
        raise RoleFileError("%s: worker_groups must be a list of instance group names, got %r" % (path, workers))
    workers = [_checked(fields.group_name, w, "worker group", path) for w in workers]
    rf = RoleFile(path, names.HPQ_CLUSTER_CONFIG, orchestrator,
                  _opt_str(doc, "cluster_name", path, fields.group_name),
                  _opt_str(doc, "controller_group", path, fields.group_name),
                  _opt_str(doc, "login_group", path, fields.group_name), list(workers))
    rf.fsx_dns_name, rf.fsx_mountname = _fsx_names(doc, path)
    rf.prometheus_remote_write_url = _opt_str(doc, "prometheus_remote_write_url", path, fields.amp_remote_write_url)
    prolog = doc.get("node_prolog", False)
    if not isinstance(prolog, bool):
        raise RoleFileError("%s: node_prolog must be true or false, got %r" % (path, prolog))
    rf.node_prolog = prolog
    partition = _opt_str(doc, "partition", path)
    if partition:
        rf.partitions = {w: partition for w in workers}
    if orchestrator == SLURM and not rf.controller_group:
        raise RoleFileError("%s: a Slurm cluster needs controller_group" % path)
    return rf


def load_provisioning_parameters(path: str) -> RoleFile:
    doc = _read(path)
    wm = doc.get("workload_manager")
    if wm not in (None, SLURM):
        raise RoleFileError("%s: workload_manager %r: the documented schema knows only \"slurm\"" % (path, wm))
    workers = doc.get("worker_groups") or []
    if not isinstance(workers, list) or not all(
            isinstance(w, dict) and isinstance(w.get("instance_group_name"), str) for w in workers):
        raise RoleFileError(
            "%s: worker_groups must be a list of {\"instance_group_name\", \"partition_name\"} objects (the "
            "documented provisioning_parameters.json schema), got %r" % (path, workers))
    controller = _opt_str(doc, "controller_group", path, fields.group_name)
    if not controller:
        raise RoleFileError("%s lacks controller_group" % path)
    groups = [_checked(fields.group_name, w["instance_group_name"], "instance_group_name", path) for w in workers]
    partitions = {w["instance_group_name"]: _checked(fields.token, w["partition_name"], "partition_name", path)
                  for w in workers if isinstance(w.get("partition_name"), str) and w["partition_name"]}
    dns, mount = _fsx_names(doc, path)
    return RoleFile(path, names.PROVISIONING_PARAMETERS, SLURM, None, controller,
                    _opt_str(doc, "login_group", path, fields.group_name), groups, partitions, dns, mount)


@dataclass
class RoleSources:
    roles: Optional[RoleFile]  # where the group -> role mapping comes from
    fsx: Optional[RoleFile]  # the role file whose fsx_dns_name/fsx_mountname name the FSx filesystem, if any
    looked: List[str]  # every place searched, for messages
    warnings: List[str] = field(default_factory=list)


def _first(paths: List[str]) -> Optional[str]:
    return next((p for p in paths if os.path.isfile(p)), None)


def find(settings) -> RoleSources:
    """Paths given in settings win; otherwise hpq-cluster.json next to the bundle or in the start directory,
    then provisioning_parameters.json next to the bundle, in the start directory, or in /opt/ml/config.

    A file that was given, or that the roles come from, must parse; a provisioning_parameters.json that
    was only found while hpq-cluster.json gives the roles is a warning when it does not.
    """
    dirs = []
    for d in (settings.bundle_root, settings.start_dir):
        if d and d not in dirs:
            dirs.append(d)
    cc_paths = [os.path.join(d, names.HPQ_CLUSTER_CONFIG) for d in dirs]
    pp_paths = [os.path.join(d, names.PROVISIONING_PARAMETERS) for d in dirs]
    pp_paths.append(settings.path(names.NODE_PROVISIONING_PARAMETERS))
    for given in (settings.cluster_config, settings.provisioning_parameters):
        if given and not os.path.isfile(given):
            raise RoleFileError("%s does not exist" % given)
    looked = ([settings.cluster_config] if settings.cluster_config else cc_paths) + (
        [settings.provisioning_parameters] if settings.provisioning_parameters else pp_paths)
    cc = load_cluster_config(settings.cluster_config) if settings.cluster_config else None
    pp = load_provisioning_parameters(settings.provisioning_parameters) if settings.provisioning_parameters \
        else None
    if cc is None and pp is None:
        found = _first(cc_paths)
        cc = load_cluster_config(found) if found else None
    out = RoleSources(cc or pp, pp, looked)
    if pp is None:
        found = _first(pp_paths)
        if found and cc is None:
            out.roles = out.fsx = load_provisioning_parameters(found)
        elif found:
            try:
                out.fsx = load_provisioning_parameters(found)
            except RoleFileError as exc:
                if _names_fsx(found):  # it was meant to name the filesystem: never mount something else instead
                    raise
                out.warnings.append("ignoring %s (roles come from %s): %s" % (found, cc.path, exc))
    if cc is not None and cc.fsx_dns_name:
        other = out.fsx
        if other is not None and other.fsx_dns_name and (other.fsx_dns_name, other.fsx_mountname) != (
                cc.fsx_dns_name, cc.fsx_mountname):
            out.warnings.append("%s names FSx %s@tcp:/%s but %s names %s@tcp:/%s: using %s's (written from the "
                                "stack's own filesystem)" % (other.path, other.fsx_dns_name, other.fsx_mountname,
                                                             cc.path, cc.fsx_dns_name, cc.fsx_mountname,
                                                             names.HPQ_CLUSTER_CONFIG))
        out.fsx = cc
    return out


def _names_fsx(path: str) -> bool:
    """Whether the JSON object in ``path`` gives a non-empty fsx_dns_name or fsx_mountname."""
    try:
        doc = files.read_json(path)
    except files.InputError:
        return False
    return isinstance(doc, dict) and any(doc.get(k) not in (None, "") for k in ("fsx_dns_name", "fsx_mountname"))
