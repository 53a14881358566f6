"""The S3 stack writes hpq-cluster.json; the lifecycle reads it. One test across the two sides.

The template carries the file as an Fn::Sub string (cfn/s3.py cluster_config); here it is resolved the way
CloudFormation resolves Fn::Sub (``${Name}`` from the variable map, else from the stack's parameters) and
handed to the node-side reader (lifecycle/roles.py). A field renamed on one side only fails here.
"""

from __future__ import annotations

import json
import re

import pytest

from hpq.cfn import s3
from hpq.lifecycle import identity, names, roles


def resolve_sub(sub, params: dict[str, str], conditions: dict[str, bool]) -> str:
    """Fn::Sub with a variable map whose values may be Fn::If on a named condition."""
    body = sub.to_dict()["Fn::Sub"]
    text, variables = (body, {}) if isinstance(body, str) else (body[0], body[1])

    def value(name: str) -> str:
        if name in variables:
            v = variables[name]
            if isinstance(v, dict) and "Fn::If" in v:
                cond, yes, no = v["Fn::If"]
                return yes if conditions[cond] else no
            return v
        return params[name]

    return re.sub(r"\$\{([A-Za-z0-9_:]+)\}", lambda m: value(m.group(1)), text)


FSX = {"FsxDnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "FsxMountName": "abcdefgh"}
OBS_OFF = {"PrometheusRemoteWriteUrl": ""}  # the root passes "" when EnableObservability is false
PROLOG_OFF = {"EnableNodeProlog": "false"}  # the root's default


@pytest.mark.parametrize("login", [True, False])
def test_slurm_variant_file_gives_each_group_its_role(tmp_path, login):
    text = resolve_sub(s3.cluster_config(s3.S3Config(slurm=True)),
                       {"ClusterName": "ml-cluster", **FSX, **OBS_OFF, **PROLOG_OFF}, {"HasLoginGroup": login})
    path = tmp_path / names.HPQ_CLUSTER_CONFIG
    path.write_text(text)
    rf = roles.load_cluster_config(str(path))
    assert rf.orchestrator == roles.SLURM and rf.cluster_name == "ml-cluster"
    assert identity.role_of(names.CONTROLLER_GROUP, "", rf.orchestrator, rf, []) == identity.CONTROLLER
    assert identity.role_of(names.WORKER_GROUP, "", rf.orchestrator, rf, []) == identity.WORKER
    assert rf.partitions[names.WORKER_GROUP] == json.loads(text)["partition"]
    if login:
        assert identity.role_of(names.LOGIN_GROUP, "", rf.orchestrator, rf, []) == identity.LOGIN
    else:
        assert rf.login_group is None
    # The Storage stack's FileSystem names, passed in by the root: the node mounts without an FSx API call.
    assert (rf.fsx_dns_name, rf.fsx_mountname) == (FSX["FsxDnsName"], FSX["FsxMountName"])
    assert rf.prometheus_remote_write_url is None  # observability off
    assert rf.node_prolog is False  # the Slurm prolog option off by default


def test_enable_node_prolog_reaches_the_nodes_lifecycle(tmp_path):
    """EnableNodeProlog=true: hpq-cluster.json's node_prolog is the JSON true the lifecycle turns on (prolog.py)."""
    text = resolve_sub(s3.cluster_config(s3.S3Config(slurm=True)),
                       {"ClusterName": "ml-cluster", **FSX, **OBS_OFF, "EnableNodeProlog": "true"},
                       {"HasLoginGroup": False})
    path = tmp_path / names.HPQ_CLUSTER_CONFIG
    path.write_text(text)
    assert roles.load_cluster_config(str(path)).node_prolog is True


AMP_URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1f9e8d7c-6b5a-4c3d/api/v1/remote_write"


@pytest.mark.parametrize(("url", "ok"), [(AMP_URL, True), (AMP_URL.replace("https", "http"), False),
                                         (AMP_URL + "\nx", False), (AMP_URL.replace("ws-", "ws/../"), False),
                                         ("https://example.com/api/v1/remote_write", False)])
def test_the_s3_stack_and_the_node_agree_on_the_remote_write_url(tmp_path, url, ok):
    """The S3 stack's AllowedPattern and the node's reader (lifecycle/fields.py) take and refuse the same URLs."""
    import re as re_

    assert bool(re_.fullmatch(s3.REMOTE_WRITE_URL_PATTERN, url)) is ok
    text = resolve_sub(s3.cluster_config(s3.S3Config(slurm=True)),
                       {"ClusterName": "ml-cluster", **FSX, "PrometheusRemoteWriteUrl": url, **PROLOG_OFF},
                       {"HasLoginGroup": False})
    path = tmp_path / names.HPQ_CLUSTER_CONFIG
    path.write_text(text)
    if ok:
        assert roles.load_cluster_config(str(path)).prometheus_remote_write_url == url
    else:
        with pytest.raises(roles.RoleFileError, match="prometheus_remote_write_url|not valid JSON"):
            roles.load_cluster_config(str(path))


def test_slurm_root_passes_the_storage_stacks_fsx_names_to_the_s3_stack():
    """FsxDnsName/FsxMountName of the S3 stack are the Storage stack's outputs, which are the FileSystem's
    Fn::GetAtt DNSName and LustreMountName (AWS::FSx::FileSystem return values); EKS roots pass neither (EKS nodes
    mount nothing on the host), so their S3 stack does not wait for FSx."""
    from hpq.cfn import synth

    for variant in ("slurm-gpu", "eks-gpu"):
        files = synth.synthesize(variant, "small")
        params = files["root.json"]["Resources"]["S3Stack"]["Properties"]["Parameters"]
        if variant.startswith("slurm"):
            assert params["FsxDnsName"] == {"Fn::GetAtt": ["StorageStack", "Outputs." + names.OUT_FSX_DNS]}
            assert params["FsxMountName"] == {"Fn::GetAtt": ["StorageStack", "Outputs." + names.OUT_FSX_MOUNT]}
            outs = files["Storage.json"]["Outputs"]
            assert outs[names.OUT_FSX_DNS]["Value"] == {"Fn::GetAtt": ["FileSystem", "DNSName"]}
            assert outs[names.OUT_FSX_MOUNT]["Value"] == {"Fn::GetAtt": ["FileSystem", "LustreMountName"]}
        else:
            assert "FsxDnsName" not in params and "FsxDnsName" not in files["S3.json"]["Parameters"]


@pytest.mark.parametrize(("dns", "mount"), [("fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com\nx /etc", "abcdefgh"),
                                            ("fs-0123456789abcdef0.fsx us-west-2", "abcdefgh"),
                                            (FSX["FsxDnsName"], "abc defg"), (FSX["FsxDnsName"], "abcdefghi")])
def test_the_s3_stack_and_the_node_refuse_the_same_bad_fsx_names(tmp_path, dns, mount):
    """The S3 stack's AllowedPattern and the node's reader (lifecycle/fields.py) agree on a broken twin."""
    import re as re_

    assert not (re_.fullmatch(s3.FSX_DNS_PATTERN.strip("^$"), dns) and re_.fullmatch(s3.FSX_MOUNT_PATTERN.strip("^$"),
                                                                                      mount))
    text = resolve_sub(s3.cluster_config(s3.S3Config(slurm=True)),
                       {"ClusterName": "ml-cluster", "FsxDnsName": dns, "FsxMountName": mount, **OBS_OFF, **PROLOG_OFF},
                       {"HasLoginGroup": False})
    path = tmp_path / names.HPQ_CLUSTER_CONFIG
    path.write_text(text)
    with pytest.raises(roles.RoleFileError):
        roles.load_cluster_config(str(path))


def test_eks_variant_file_has_no_slurm_groups(tmp_path):
    text = resolve_sub(s3.cluster_config(s3.S3Config(slurm=False)), {"ClusterName": "ml-eks"}, {})
    path = tmp_path / names.HPQ_CLUSTER_CONFIG
    path.write_text(text)
    rf = roles.load_cluster_config(str(path))
    assert rf.orchestrator == roles.EKS and rf.controller_group is None and rf.login_group is None
    assert identity.role_of(names.WORKER_GROUP, "", rf.orchestrator, rf, []) == identity.WORKER
    assert "partition" in json.loads(text) and json.loads(text)["partition"] is None
