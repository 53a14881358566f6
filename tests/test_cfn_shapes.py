"""AWS-facing shapes of the rendered templates, each checked against the AWS reference it comes from.

Every test names its source: the AWS::SageMaker::Cluster / AWS::EKS / AWS::FSx CloudFormation
reference, the SageMaker Developer Guide (HyperPod prerequisites, Slurm configuration), the EKS user
guide, AWS's own console stacks (aws/sagemaker-hyperpod-cluster-setup) and samples
(awslabs/awsome-distributed-ai). Golden files only record these shapes; each one is guarded here.
"""

from __future__ import annotations

import pytest

from hpq.cfn import helm as cfn_helm
from hpq.tests.fixtures_cfn import COMBOS, rendered  # noqa: F401

EKS = [c for c in COMBOS if c[0].startswith("eks")]
SLURM = [c for c in COMBOS if c[0].startswith("slurm")]


def _resources(template: dict, rtype: str) -> dict[str, dict]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == rtype}


# --------------------------------------------------------------------------- helm layer (issue 9 item 2)


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_helm_stack_creates_its_own_helm_layer(rendered, variant, size):  # noqa: F811
    """No public AWS layer ARN carries helm: the Helm stack builds an AWS::Lambda::LayerVersion from the
    CDK kubectl layer zip that hpq uploads (AssetsBucket/HelmLayerS3Key); KubectlLayerArn overrides it."""
    helm_t = rendered[(variant, size)]["Helm.json"]
    [(logical, layer)] = _resources(helm_t, "AWS::Lambda::LayerVersion").items()
    assert layer["Properties"]["Content"] == {"S3Bucket": {"Ref": "AssetsBucket"}, "S3Key": {"Ref": "HelmLayerS3Key"}}
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]  # layer.zip holds linux x86_64 binaries
    assert layer["Condition"] == cfn_helm.USE_SHIPPED_LAYER
    assert helm_t["Conditions"][cfn_helm.USE_SHIPPED_LAYER] == {"Fn::Equals": [{"Ref": "KubectlLayerArn"}, ""]}
    fn = helm_t["Resources"]["HelmFunction"]["Properties"]
    assert fn["Layers"] == [{"Fn::If": [cfn_helm.USE_SHIPPED_LAYER, {"Ref": logical}, {"Ref": "KubectlLayerArn"}]}]
    assert fn["Architectures"] == ["x86_64"]
    root = rendered[(variant, size)]["root.json"]
    passed = root["Resources"]["HelmStack"]["Properties"]["Parameters"]
    assert passed["HelmLayerS3Key"] == {"Ref": "HelmLayerS3Key"} and passed["AssetsBucket"] == {"Ref": "AssetsBucket"}
    # A console deploy without either is refused before anything is created.
    assert "HelmNeedsALayer" in root["Rules"]


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_helm_chart_is_pinned_never_a_branch(rendered, variant, size):  # noqa: F811
    """HelmChartVersion defaults to a commit of aws/sagemaker-hyperpod-cli that has
    helm_chart/HyperPodHelmChart (v3.9.0), and the parameter refuses branch names."""
    import re

    spec = rendered[(variant, size)]["root.json"]["Parameters"]["HelmChartVersion"]
    assert re.fullmatch(r"[0-9a-f]{40}", spec["Default"])
    for branch in ("main", "master", "HEAD"):
        assert not re.fullmatch(spec["AllowedPattern"], branch)
    for pin in ("v3.9.0", spec["Default"], "1.4.0"):
        assert re.fullmatch(spec["AllowedPattern"], pin)


# --------------------------------------------------------------------------- Slurm configuration (item 3)


def _groups(template: dict) -> list[dict]:
    groups = template["Resources"]["Cluster"]["Properties"]["InstanceGroups"]
    return [g["Fn::If"][1] if "Fn::If" in g else g for g in groups]


@pytest.mark.parametrize(("variant", "size"), SLURM)
def test_slurm_is_configured_through_the_api(rendered, variant, size):  # noqa: F811
    """API-driven Slurm configuration (CloudFormation AWS::SageMaker::Cluster ClusterSlurmConfig and
    ClusterOrchestratorSlurmConfig; Developer Guide "SageMaker HyperPod Slurm configuration"; the same
    CreateCluster shape as awslabs/awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/Extensions/
    observability/README.md): Orchestrator.Slurm with SlurmConfigStrategy Managed, NodeType per group,
    the workers' one partition."""
    from hpq.cfn import common
    from hpq.lifecycle import names

    cluster = rendered[(variant, size)]["HyperPod.json"]["Resources"]["Cluster"]["Properties"]
    assert cluster["Orchestrator"] == {"Slurm": {"SlurmConfigStrategy": "Managed"}}
    by_name = {g["InstanceGroupName"]: g for g in _groups(rendered[(variant, size)]["HyperPod.json"])}
    assert by_name[names.CONTROLLER_GROUP]["SlurmConfig"] == {"NodeType": "Controller"}
    assert by_name[names.LOGIN_GROUP]["SlurmConfig"] == {"NodeType": "Login"}
    assert by_name[names.WORKER_GROUP]["SlurmConfig"] == {"NodeType": "Compute",
                                                          "PartitionNames": [common.SLURM_PARTITION]}


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_eks_clusters_carry_no_slurm_configuration(rendered, variant, size):  # noqa: F811
    cluster = rendered[(variant, size)]["HyperPod.json"]["Resources"]["Cluster"]["Properties"]
    assert set(cluster["Orchestrator"]) == {"Eks"}
    assert all("SlurmConfig" not in g for g in _groups(rendered[(variant, size)]["HyperPod.json"]))


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_no_template_writes_a_file_hyperpod_reads(rendered, variant, size):  # noqa: F811
    """HyperPod refuses a cluster with both the API-driven Slurm configuration and a
    provisioning_parameters.json (Developer Guide, "Migrating to API-driven Slurm configuration"):
    nothing hpq renders mentions that file (outside the handler's own code, which removes an old one)."""
    from hpq.cfn import synth
    from hpq.tests.fixtures_cfn import golden_view, handler_sources

    for name, template in rendered[(variant, size)].items():
        assert "provisioning_parameters" not in synth.to_json(golden_view(template, handler_sources())), name


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_on_create_is_a_bare_file_name_at_the_root_of_the_source_uri(rendered, variant, size):  # noqa: F811
    """ClusterLifeCycleConfig.OnCreate is documented as the file name of the entrypoint under SourceS3Uri
    (the node bundle's root on_create.sh shim); the bundle's keys land under SourceS3Uri unchanged."""
    from hpq.lifecycle import names

    files = rendered[(variant, size)]
    for group in _groups(files["HyperPod.json"]):
        assert group["LifeCycleConfig"] == {"OnCreate": names.ON_CREATE_ENTRY, "SourceS3Uri": {"Ref": "LifecycleS3Uri"}}
    assert "/" not in names.ON_CREATE_ENTRY
    s3 = files["S3.json"]
    props = s3["Resources"]["LifecycleContents"]["Properties"]
    uri = s3["Outputs"][names.OUT_LIFECYCLE_URI]["Value"]["Fn::Sub"][0]
    assert uri.endswith("/" + props["DestinationPrefix"].rstrip("/"))  # s3://bucket/lifecycle <- lifecycle/<key>


def _resolve_sub(sub: dict | list | str, values: dict[str, object]) -> str:
    """Fn::Sub with a variable map resolved the way CloudFormation does (strings only)."""
    text, local = (sub, {}) if isinstance(sub, str) else (sub[0], sub[1])
    for key, value in local.items():
        if isinstance(value, dict) and "Fn::If" in value:
            cond, yes, no = value["Fn::If"]
            value = yes if values[cond] else no
        text = text.replace("${" + key + "}", value)
    for key, value in values.items():
        if isinstance(value, str):
            text = text.replace("${" + key + "}", value)
    return text


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_hpq_cluster_json_follows_the_node_contract(rendered, variant, size):  # noqa: F811
    """hpq-cluster.json (names.HPQ_CLUSTER_CONFIG) at the root of the lifecycle prefix, for every variant:
    schema 1, orchestrator, cluster name, groups, partition (the node contract, item 2)."""
    import json

    from hpq.cfn import common
    from hpq.lifecycle import names

    props = rendered[(variant, size)]["S3.json"]["Resources"]["LifecycleContents"]["Properties"]
    assert props["ClusterConfigKey"] == f"{names.LIFECYCLE_PREFIX}/{names.HPQ_CLUSTER_CONFIG}"
    sub = props["ClusterConfig"]["Fn::Sub"]
    slurm = variant.startswith("slurm")
    for login in ((True, False) if slurm else (False,)):
        doc = json.loads(_resolve_sub(sub, {"ClusterName": "my-cluster", "HasLoginGroup": login}))
        assert doc == {
            "schema_version": 1, "orchestrator": "slurm" if slurm else "eks", "cluster_name": "my-cluster",
            "controller_group": names.CONTROLLER_GROUP if slurm else None,
            "login_group": names.LOGIN_GROUP if (slurm and login) else None,
            "worker_groups": [names.WORKER_GROUP],
            "partition": common.SLURM_PARTITION if slurm else None,
        }
    if slurm:  # the partition hpq-cluster.json names is the one the workers' SlurmConfig puts them in
        workers = [g for g in _groups(rendered[(variant, size)]["HyperPod.json"])
                   if g["InstanceGroupName"] == names.WORKER_GROUP]
        assert workers[0]["SlurmConfig"]["PartitionNames"] == [common.SLURM_PARTITION]
