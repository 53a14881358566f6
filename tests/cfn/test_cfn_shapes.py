"""AWS-facing shapes of the rendered templates, each checked against the AWS reference it comes from.

Every test names its source: the AWS::SageMaker::Cluster / AWS::EKS / AWS::FSx CloudFormation
reference, the SageMaker Developer Guide (HyperPod prerequisites, Slurm configuration), the EKS user
guide, AWS's own console stacks (aws/sagemaker-hyperpod-cluster-setup) and samples
(awslabs/awsome-distributed-ai). Golden files only record these shapes; each one is guarded here.
"""

from __future__ import annotations

import datetime
import json

import pytest

from hpq.cfn import helm as cfn_helm
from hpq.cfn import synth
from tests.cfn_render import COMBOS, RENDER_DATE

EKS = [c for c in COMBOS if c[0].startswith("eks")]
SLURM = [c for c in COMBOS if c[0].startswith("slurm")]


def _resources(template: dict, rtype: str) -> dict[str, dict]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == rtype}


# --------------------------------------------------------------------------- helm layer (issue 9 item 2)


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_helm_stack_creates_its_own_helm_layer(rendered, variant, size):
    """No public AWS layer ARN carries helm: the Helm stack builds an AWS::Lambda::LayerVersion from the
    CDK kubectl layer zip that hpq uploads (AssetsBucket/HelmLayerS3Key); KubectlLayerArn overrides it."""
    helm_t = rendered[(variant, size)]["Helm.json"]
    [(logical, layer)] = _resources(helm_t, "AWS::Lambda::LayerVersion").items()
    assert layer["Properties"]["Content"] == {"S3Bucket": {"Ref": "AssetsBucket"}, "S3Key": {"Ref": "HelmLayerS3Key"}}
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]  # layer.zip holds linux x86_64 binaries
    assert layer["Condition"] == cfn_helm.USE_SHIPPED_LAYER
    assert helm_t["Conditions"][cfn_helm.USE_SHIPPED_LAYER] == {"Fn::And": [
        {"Fn::Equals": [{"Ref": "KubectlLayerArn"}, ""]}, {"Fn::Not": [{"Fn::Equals": [{"Ref": "HelmLayerS3Key"}, ""]}]}]}
    fn = helm_t["Resources"]["HelmFunction"]["Properties"]
    assert fn["Layers"] == {"Fn::If": [cfn_helm.USE_SHIPPED_LAYER, [{"Ref": logical}], {"Fn::If": [
        cfn_helm.HAS_OWN_LAYER, [{"Ref": "KubectlLayerArn"}], {"Ref": "AWS::NoValue"}]}]}
    assert fn["Architectures"] == ["x86_64"]
    root = rendered[(variant, size)]["root.json"]
    passed = root["Resources"]["HelmStack"]["Properties"]["Parameters"]
    assert passed["HelmLayerS3Key"] == {"Ref": "HelmLayerS3Key"} and passed["AssetsBucket"] == {"Ref": "AssetsBucket"}
    # A console deploy without either is refused before anything is created.
    assert "HelmNeedsALayer" in root["Rules"]


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_helm_chart_is_pinned_never_a_branch(rendered, variant, size):
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
def test_slurm_is_configured_through_the_api(rendered, variant, size):
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
def test_eks_clusters_carry_no_slurm_configuration(rendered, variant, size):
    cluster = rendered[(variant, size)]["HyperPod.json"]["Resources"]["Cluster"]["Properties"]
    assert set(cluster["Orchestrator"]) == {"Eks"}
    assert all("SlurmConfig" not in g for g in _groups(rendered[(variant, size)]["HyperPod.json"]))


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_no_template_writes_a_file_hyperpod_reads(rendered, variant, size):
    """HyperPod refuses a cluster with both the API-driven Slurm configuration and a
    provisioning_parameters.json (Developer Guide, "Migrating to API-driven Slurm configuration"):
    nothing hpq renders mentions that file (outside the handler's own code, which removes an old one)."""
    from hpq.cfn import synth
    from tests.cfn.golden import golden_view, handler_sources

    for name, template in rendered[(variant, size)].items():
        assert "provisioning_parameters" not in synth.to_json(golden_view(template, handler_sources())), name


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_on_create_is_a_bare_file_name_at_the_root_of_the_source_uri(rendered, variant, size):
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
def test_hpq_cluster_json_follows_the_node_contract(rendered, variant, size):
    """hpq-cluster.json (names.HPQ_CLUSTER_CONFIG) at the root of the lifecycle prefix, for every variant:
    schema 1, orchestrator, cluster name, groups, partition (the node contract, item 2)."""
    import json

    from hpq.cfn import common
    from hpq.lifecycle import names

    props = rendered[(variant, size)]["S3.json"]["Resources"]["LifecycleContents"]["Properties"]
    assert props["ClusterConfigKey"] == f"{names.LIFECYCLE_PREFIX}/{names.HPQ_CLUSTER_CONFIG}"
    sub = props["ClusterConfig"]["Fn::Sub"]
    slurm = variant.startswith("slurm")
    for login, prolog in (((True, "false"), (False, "true")) if slurm else ((False, "false"),)):
        fsx = {"FsxDnsName": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "FsxMountName": "abcdefgh"}
        doc = json.loads(_resolve_sub(sub, {"ClusterName": "my-cluster", "HasLoginGroup": login, **fsx,
                                            "PrometheusRemoteWriteUrl": "", "EnableNodeProlog": prolog}))
        assert doc == {
            "schema_version": 1, "orchestrator": "slurm" if slurm else "eks", "cluster_name": "my-cluster",
            "controller_group": names.CONTROLLER_GROUP if slurm else None,
            "login_group": names.LOGIN_GROUP if (slurm and login) else None,
            "worker_groups": [names.WORKER_GROUP],
            "partition": common.SLURM_PARTITION if slurm else None,
            # Slurm nodes mount /fsx by these names (no FSx API call at boot); EKS nodes mount nothing on the host.
            "fsx_dns_name": fsx["FsxDnsName"] if slurm else None,
            "fsx_mountname": fsx["FsxMountName"] if slurm else None,
            # Slurm: where the nodes' Prometheus agent writes ("" when observability is off; cfn/observability.py)
            **({"prometheus_remote_write_url": ""} if slurm else {}),
            # Slurm: the EnableNodeProlog parameter as a JSON boolean (lifecycle/prolog.py, roles.node_prolog)
            **({"node_prolog": prolog == "true"} if slurm else {}),
        }
    if slurm:  # the partition hpq-cluster.json names is the one the workers' SlurmConfig puts them in
        workers = [g for g in _groups(rendered[(variant, size)]["HyperPod.json"])
                   if g["InstanceGroupName"] == names.WORKER_GROUP]
        assert workers[0]["SlurmConfig"]["PartitionNames"] == [common.SLURM_PARTITION]


# --------------------------------------------------------------------------- EKS (items 4, 7; issue 15 item 3)


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_kubernetes_versions_are_hyperpods_documented_ones_eks_still_creates(rendered, variant, size):
    """HyperPod's EKS prerequisites page (sagemaker-hyperpod-eks-prerequisites.html, read 2026-11-26) lists 1.28 to
    1.34; the EKS release calendar (kubernetes-versions.html) no longer creates 1.30 (2026-07-23) nor 1.31 (from
    2026-11-26). So on the render date 2026-11-26 the template offers 1.32, 1.33, 1.34 and defaults to 1.34, the
    newest documented; 1.34 leaves standard support on 2026-12-02, within the horizon, so EksSupportType defaults
    to EXTENDED (EKS would otherwise upgrade the control plane to 1.35, which HyperPod does not list)."""
    from hpq.cfn import eks as cfn_eks

    assert RENDER_DATE == datetime.date(2026, 11, 26)
    params = rendered[(variant, size)]["root.json"]["Parameters"]
    assert params["KubernetesVersion"]["AllowedValues"] == ["1.32", "1.33", "1.34"]
    assert params["KubernetesVersion"]["Default"] == "1.34" == cfn_eks.HYPERPOD_VERSIONS[-1]
    assert params["EksSupportType"]["Default"] == "EXTENDED"
    assert params["EksSupportType"]["AllowedValues"] == ["STANDARD", "EXTENDED"]
    cluster = rendered[(variant, size)]["EKS.json"]["Resources"]["Cluster"]["Properties"]
    assert cluster["UpgradePolicy"] == {"SupportType": {"Ref": "EksSupportType"}}
    assert cluster["Version"] == {"Ref": "KubernetesVersion"}
    # Rendered months earlier, 1.31 was still created and 1.34 far from its end: STANDARD by default.
    early = synth.synthesize(variant, size, as_of=datetime.date(2026, 8, 1))["root.json"]["Parameters"]
    assert early["KubernetesVersion"]["AllowedValues"] == ["1.31", "1.32", "1.33", "1.34"]
    assert early["EksSupportType"]["Default"] == "STANDARD"


def test_a_newer_kubernetes_version_only_on_explicit_request_with_a_warning():
    """1.35 exists in EKS but not in HyperPod's list: a default render does not offer it; --param
    KubernetesVersion=1.35 renders it (root and EKS stack) and calendar_notes warns; a version EKS does not create
    at all stays refused."""
    from hpq.errors import UsageError

    default = synth.synthesize("eks-gpu", as_of=RENDER_DATE)
    assert "1.35" not in default["root.json"]["Parameters"]["KubernetesVersion"]["AllowedValues"]
    asked = synth.synthesize("eks-gpu", params={"KubernetesVersion": "1.35"}, as_of=RENDER_DATE)
    assert asked["root.json"]["Parameters"]["KubernetesVersion"]["Default"] == "1.35"
    assert "1.35" in asked["EKS.json"]["Parameters"]["KubernetesVersion"]["AllowedValues"]
    notes = synth.calendar_notes("eks-gpu", {"KubernetesVersion": "1.35"}, as_of=RENDER_DATE)
    assert any("1.35 is newer than every version SageMaker HyperPod documents" in n for n in notes)
    assert not any("newer" in n for n in synth.calendar_notes("eks-gpu", as_of=RENDER_DATE))
    assert any("render and publish again after 2026-12-02" in n for n in synth.calendar_notes("eks-gpu",
                                                                                               as_of=RENDER_DATE))
    with pytest.raises(UsageError):
        synth.synthesize("eks-gpu", params={"KubernetesVersion": "1.36"}, as_of=RENDER_DATE)
    with pytest.raises(UsageError):
        synth.synthesize("eks-gpu", params={"KubernetesVersion": "1.30"}, as_of=RENDER_DATE)


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_eks_public_endpoint_cidrs_are_a_parameter(rendered, variant, size):
    """The EksPublicAccessCidrs parameter: CIDR list, default open, each entry checked. (That the endpoint uses it:
    tests/cfn/test_cfn_security.py.)"""
    import re

    files = rendered[(variant, size)]
    spec = files["root.json"]["Parameters"]["EksPublicAccessCidrs"]
    assert spec["Type"] == "CommaDelimitedList" and spec["Default"] == "0.0.0.0/0"
    assert re.fullmatch(spec["AllowedPattern"], "203.0.113.0/24") and not re.fullmatch(spec["AllowedPattern"], "x")


def test_public_cidrs_are_checked_one_by_one_at_synth():
    from hpq.cfn import synth
    from hpq.errors import UsageError

    files = synth.synthesize("eks-gpu", "small", {"EksPublicAccessCidrs": "203.0.113.0/24,198.51.100.7/32"})
    assert files["root.json"]["Parameters"]["EksPublicAccessCidrs"]["Default"] == "203.0.113.0/24,198.51.100.7/32"
    with pytest.raises(UsageError, match="EksPublicAccessCidrs"):
        synth.synthesize("eks-gpu", "small", {"EksPublicAccessCidrs": "203.0.113.0/24,nope"})


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_fsx_csi_driver_addon_with_pod_identity(rendered, variant, size):
    """The EKS add-on aws-fsx-csi-driver (as AWS's console stack installs it: aws/sagemaker-hyperpod-cluster-setup
    eks/cloudformation/fsx-template.yaml) with its controller service account fsx-csi-controller-sa mapped
    through EKS Pod Identity (EKS user guide update-addon-role.html, fsx-csi-create.html) to a role trusted by
    pods.eks.amazonaws.com with AmazonFSxFullAccess (kubernetes-sigs/aws-fsx-csi-driver docs/install.md); the
    pod identity agent add-on it needs is installed first."""
    files = rendered[(variant, size)]
    addons = {r["Properties"]["AddonName"]: (k, r) for k, r in _resources(files["EKS.json"], "AWS::EKS::Addon").items()}
    assert "eks-pod-identity-agent" in addons
    logical, fsx = addons["aws-fsx-csi-driver"]
    assert fsx["Properties"]["PodIdentityAssociations"] == [
        {"ServiceAccount": "fsx-csi-controller-sa", "RoleArn": {"Ref": "FsxCsiRoleArn"}}]
    assert fsx["DependsOn"] == addons["eks-pod-identity-agent"][0]
    role = files["IAM.json"]["Resources"]["FsxCsiDriverRole"]["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert role["ManagedPolicyArns"] == [{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonFSxFullAccess"}]
    passed = files["root.json"]["Resources"]["EKSStack"]["Properties"]["Parameters"]["FsxCsiRoleArn"]
    assert passed == {"Fn::GetAtt": ["IAMStack", "Outputs.FsxCsiRoleArn"]}


# --------------------------------------------------------------------------- instance types and plans (item 5)


def _worker_branches(template: dict) -> tuple[str, dict, dict]:
    """(condition, on-demand group, training-plan group) of the worker group's Fn::If."""
    from hpq.lifecycle import names

    for g in template["Resources"]["Cluster"]["Properties"]["InstanceGroups"]:
        if "Fn::If" in g and g["Fn::If"][1].get("InstanceGroupName") == names.WORKER_GROUP:
            return g["Fn::If"][0], g["Fn::If"][1], g["Fn::If"][2]
    raise AssertionError("no conditional worker group")


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_workers_are_on_demand_only_where_offered_else_on_a_training_plan(rendered, variant, size):
    """cfn-lint's per-region HyperPod offer data (cfn/offers.py) decides where a worker type may run on
    demand; elsewhere the group runs on TrainingPlanArn (ClusterInstanceGroup.TrainingPlanArn) and a rule
    refuses a type without an offer and without a plan before anything is created."""
    from hpq.cfn import hyperpod, offers

    files = rendered[(variant, size)]
    hp = files["HyperPod.json"]
    cond, on_demand, on_plan = _worker_branches(hp)
    assert cond == hyperpod.ON_DEMAND_WORKERS
    assert on_demand["InstanceType"] == {"Ref": "WorkerInstanceType"} and "TrainingPlanArn" not in on_demand
    assert on_plan["InstanceType"] == {"Ref": "TrainingPlanInstanceType"}
    assert on_plan["TrainingPlanArn"] == {"Ref": "TrainingPlanArn"}
    worker_types = files["root.json"]["Parameters"]["WorkerInstanceType"]["AllowedValues"]
    assert hp["Conditions"][hyperpod.ON_DEMAND_OFFER] == offers.offer_condition("WorkerInstanceType", worker_types)
    root = files["root.json"]
    assert root["Rules"][hyperpod.NEEDS_PLAN_RULE] == hp["Rules"][hyperpod.NEEDS_PLAN_RULE]
    passed = root["Resources"]["HyperPodStack"]["Properties"]["Parameters"]
    assert passed["TrainingPlanArn"] == {"Ref": "TrainingPlanArn"}
    assert passed["TrainingPlanInstanceType"] == {"Fn::If": ["HasTrainingPlan", {"Ref": "WorkerInstanceType"}, ""]}
    assert root["Parameters"]["TrainingPlanArn"]["Default"] == ""


def _eval(node, env: dict) -> object:
    """Evaluate a condition or rule expression the way CloudFormation does, for a given parameter set."""
    if isinstance(node, dict):
        (fn, arg), = node.items()
        if fn == "Ref":
            return env[arg]
        if fn == "Fn::Equals":
            return _eval(arg[0], env) == _eval(arg[1], env)
        if fn == "Fn::Contains":
            return _eval(arg[1], env) in arg[0]
        if fn == "Fn::And":
            return all(_eval(a, env) for a in arg)
        if fn == "Fn::Or":
            return any(_eval(a, env) for a in arg)
        if fn == "Fn::Not":
            return not _eval(arg[0], env)
        raise AssertionError(f"unexpected {fn}")
    return node


@pytest.mark.parametrize("variant", ["slurm-gpu", "eks-trn"])
def test_offer_condition_and_rule_agree_with_cfn_lint_data(rendered, variant):
    """For every (worker type, region) in cfn-lint's data, the template's condition and rule say exactly
    what the data says: ml.p5e.48xlarge nowhere, ml.trn2.48xlarge only in us-east-2 (cfn-lint 1.58.0)."""
    import json
    from importlib import resources

    from hpq.cfn import hyperpod, offers

    raw = json.loads(resources.files(offers.DATA_PACKAGE).joinpath(offers.DATA_FILE).read_text())
    data = {r: set(v["enum"]) for r, v in raw.items() if isinstance(v, dict)}
    hp = rendered[(variant, "small")]["HyperPod.json"]
    condition = hp["Conditions"][hyperpod.ON_DEMAND_OFFER]
    assertion = hp["Rules"][hyperpod.NEEDS_PLAN_RULE]["Assertions"][0]["Assert"]
    for worker_type in hp["Parameters"]["WorkerInstanceType"]["AllowedValues"]:
        for region in list(data) + ["eu-west-3"]:  # eu-west-3: no HyperPod prices at all in the data
            env = {"WorkerInstanceType": worker_type, "AWS::Region": region, "TrainingPlanArn": ""}
            offered = worker_type in data.get(region, set())
            assert _eval(condition, env) is offered, (worker_type, region)
            assert _eval(assertion, env) is offered, (worker_type, region)
            env["TrainingPlanArn"] = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p"
            assert _eval(assertion, env) is True  # a plan makes any type acceptable
    if variant == "slurm-gpu":
        assert offers.offer_regions("ml.p5e.48xlarge") == []
    else:
        assert offers.offer_regions("ml.trn2.48xlarge") == ["us-east-2"]


def test_lint_sees_a_wrong_offer_claim(tmp_path):
    """The on-demand group is guarded by the offer condition, and cfn-lint really checks what reaches it:
    claim ml.p5e.48xlarge is on demand in us-east-1 and W1030 comes back."""
    import json

    from hpq.cfn import hyperpod, lint, synth

    template = synth.synthesize("slurm-gpu")["HyperPod.json"]
    cond = template["Conditions"][hyperpod.ON_DEMAND_OFFER]
    template["Conditions"][hyperpod.ON_DEMAND_OFFER] = {"Fn::Or": [cond, {"Fn::And": [
        {"Fn::Equals": [{"Ref": "WorkerInstanceType"}, "ml.p5e.48xlarge"]},
        {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}]}]}
    path = tmp_path / "HyperPod.json"
    path.write_text(json.dumps(template))
    assert lint.lint_files([path], ["us-east-1"]) and any(
        f.rule == "W1030" for f in lint.lint_files([path], ["us-east-1"]))
    path.write_text(synth.to_json(synth.synthesize("slurm-gpu")["HyperPod.json"]))
    assert lint.lint_files([path], ["us-east-1"]) == []


# --------------------------------------------------------------------------- networking (item 6)


@pytest.mark.parametrize(("variant", "size"), EKS)
def test_eks_control_plane_subnets_are_their_own_and_avoid_unsupported_az_ids(rendered, variant, size):
    """EKS refuses control-plane subnets in use1-az3, usw1-az2, cac1-az3 (EKS user guide, network-reqs.html) and
    wants two AZs. The control plane has two EKS-only subnets, never the node subnet, so nodes may be in such an AZ
    when EksSecondAvailabilityZoneId names another. The rule sits in the root, checked before anything."""
    files = rendered[(variant, size)]
    assertions = files["root.json"]["Rules"]["EksControlPlaneAzs"]["Assertions"]

    def ok(az, eks_az, second=""):
        env = {"AvailabilityZoneId": az, "EksAvailabilityZoneId": eks_az, "EksSecondAvailabilityZoneId": second}
        return all(_eval(a["Assert"], env) for a in assertions)

    assert ok("use1-az4", "use1-az6")
    for bad in ("use1-az3", "usw1-az2", "cac1-az3"):
        assert not ok(bad, "use1-az1")  # nodes there, second control-plane subnet defaulting to the nodes' AZ
        assert not ok("use1-az1", bad)
        assert not ok("use1-az1", "use1-az2", bad)
        assert ok(bad, "use1-az1", "use1-az2")  # nodes in a refused AZ, control plane elsewhere
    assert not ok("use1-az4", "use1-az4") and not ok("use1-az3", "use1-az1", "use1-az1")
    net = files["Networking.json"]
    assert net["Outputs"]["EksSubnetIds"]["Value"] == {"Fn::Join": [",", [{"Ref": "EksSubnet"},
                                                                        {"Ref": "EksSubnetB"}]]}
    second = net["Resources"]["EksSubnetB"]["Properties"]["AvailabilityZoneId"]
    assert second == {"Fn::If": ["EksSecondSubnetInNodeAz", {"Ref": "AvailabilityZoneId"},
                                 {"Ref": "EksSecondAvailabilityZoneId"}]}
    blocks = {net["Resources"][n]["Properties"]["CidrBlock"]["Fn::Select"][0]
              for n in ("PublicSubnet", "EksSubnet", "EksSubnetB")}
    assert len(blocks) == 3  # three different /19s of the VPC's second half


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_node_subnet_holds_the_largest_cluster(rendered, variant, size):
    """HyperPod prerequisites: a p5.48xlarge node takes 81 IP addresses on EKS, 32 on Slurm; p5 has the most
    EFA interfaces in the catalog, so that bounds every type. The node subnet (a /17 of the /16) must hold
    WorkerCount's maximum plus controller and login."""
    import ipaddress

    from hpq.cfn import networking
    from hpq.lifecycle import catalog

    assert max(e.efa_interfaces for e in catalog.CATALOG.values()) == catalog.lookup("ml.p5.48xlarge").efa_interfaces
    files = rendered[(variant, size)]
    cidr = files["Networking.json"]["Resources"]["NodeSubnet"]["Properties"]["CidrBlock"]
    assert cidr == {"Fn::Select": [0, {"Fn::Cidr": [{"Ref": "VpcCidr"}, 2, 32 - networking.NODE_SUBNET_PREFIX]}]}
    vpc = ipaddress.ip_network(files["root.json"]["Parameters"]["VpcCidr"]["Default"])
    node = list(vpc.subnets(new_prefix=networking.NODE_SUBNET_PREFIX))[0]
    orchestrator = "eks" if variant.startswith("eks") else "slurm"
    nodes = int(files["root.json"]["Parameters"]["WorkerCount"]["MaxValue"]) + 2
    assert node.num_addresses - 5 >= nodes * networking.IPS_PER_NODE[orchestrator] + networking.SUBNET_RESERVED_IPS
    others = [files["Networking.json"]["Resources"][k]["Properties"]["CidrBlock"] for k in ("PublicSubnet",)]
    blocks = list(vpc.subnets(new_prefix=networking.SMALL_SUBNET_PREFIX))
    for other in others:  # the small subnets come from the other half: no overlap with the node subnet
        assert not blocks[other["Fn::Select"][0]].overlaps(node)


# --------------------------------------------------------------------------- smaller shapes (item 7)


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_fsx_metadata_mode_automatic(rendered, variant, size):
    """PERSISTENT_2 with MetadataConfiguration Mode AUTOMATIC, as in awslabs/awsome-distributed-ai
    1.architectures/5.sagemaker-hyperpod/sagemaker-hyperpod.yaml and 3.FSxLustre.yaml."""
    lustre = rendered[(variant, size)]["Storage.json"]["Resources"]["FileSystem"]["Properties"]["LustreConfiguration"]
    assert lustre["DeploymentType"] == "PERSISTENT_2"
    assert lustre["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_validation_rule_matches_only_this_cluster(rendered, variant, size):
    """HyperPod's EventBridge events carry the cluster ARN in ``resources`` (Developer Guide, "SageMaker
    HyperPod cluster events reference"): the rule matches on it, not on every cluster in the account."""
    rule = rendered[(variant, size)]["Validation.json"]["Resources"]["ClusterEventsRule"]["Properties"]
    assert rule["EventPattern"]["resources"] == [{"Ref": "ClusterArn"}]
    assert rule["EventPattern"]["source"] == ["aws.sagemaker"]


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_deep_health_checks_and_provisioning_mode_parameters(rendered, variant, size):
    """ClusterInstanceGroup.OnStartDeepHealthChecks (InstanceStress | InstanceConnectivity) on the workers and,
    Cluster.NodeProvisioningMode (only "Continuous"; absent = standard), both off by default."""
    files = rendered[(variant, size)]
    params = files["root.json"]["Parameters"]
    assert params["OnStartDeepHealthChecks"]["Default"] == "None"
    hp = files["HyperPod.json"]
    assert params["NodeProvisioningMode"]["Default"] == "Standard"
    assert set(params["NodeProvisioningMode"]["AllowedValues"]) == {"Standard", "Continuous"}
    cluster = hp["Resources"]["Cluster"]["Properties"]
    assert cluster["NodeProvisioningMode"] == {"Fn::If": ["ContinuousProvisioning", "Continuous",
                                                          {"Ref": "AWS::NoValue"}]}
    _, on_demand, on_plan = _worker_branches(hp)
    value = on_demand["OnStartDeepHealthChecks"]
    assert value == on_plan["OnStartDeepHealthChecks"]

    def resolve(node, choice):  # follow the Fn::If chain for one parameter value
        while isinstance(node, dict) and "Fn::If" in node:
            cond, yes, no = node["Fn::If"]
            node = yes if _eval(hp["Conditions"][cond], {"OnStartDeepHealthChecks": choice}) else no
        return node

    assert resolve(value, "None") == {"Ref": "AWS::NoValue"}
    assert resolve(value, "InstanceStress") == ["InstanceStress"]
    assert resolve(value, "InstanceStress,InstanceConnectivity") == ["InstanceStress", "InstanceConnectivity"]


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_continuous_provisioning_is_offered_on_both_orchestrators(rendered, variant, size):
    """The sources disagree on Slurm: botocore's SageMaker model says CreateCluster's Continuous "is only supported
    for EKS orchestrated clusters", yet its ClusterOrchestratorSlurmConfig.AccountingDatabase (Slurm only) "is only
    supported for clusters using Continuous"; CloudFormation's AWS::SageMaker::Cluster schema (cfn-lint's provider
    schema) accepts NodeProvisioningMode on any cluster. hpq follows the CloudFormation schema (docs/templates.md):
    every variant offers it, passes it through and sets the property only for Continuous."""
    from botocore.loaders import Loader
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::SageMaker::Cluster").schema
    assert schema["properties"]["NodeProvisioningMode"]["enum"] == ["Continuous"]
    assert "AccountingDatabase" in schema["definitions"]["ClusterOrchestratorSlurmConfig"]["properties"]
    model = Loader().load_service_model("sagemaker", "service-2")["shapes"]
    assert "Continuous" in model["ClusterOrchestratorSlurmConfig"]["members"]["AccountingDatabase"]["documentation"]
    files = rendered[(variant, size)]
    root_params = files["root.json"]["Parameters"]
    hp = files["HyperPod.json"]
    groups = files["root.json"]["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = {p for g in groups for p in g["Parameters"]}
    passed = files["root.json"]["Resources"]["HyperPodStack"]["Properties"]["Parameters"]
    assert "Continuous" in root_params["NodeProvisioningMode"]["AllowedValues"] and "NodeProvisioningMode" in grouped
    assert passed["NodeProvisioningMode"] == {"Ref": "NodeProvisioningMode"}
    assert hp["Conditions"]["ContinuousProvisioning"] == {"Fn::Equals": [{"Ref": "NodeProvisioningMode"},
                                                                         "Continuous"]}


# The three HyperPod events as the SageMaker Developer Guide shows them ("Events that Amazon SageMaker AI sends
# to Amazon EventBridge", automating-sagemaker-with-eventbridge.html: "SageMaker HyperPod cluster event", "...
# cluster node health", "... cluster state change"), trimmed to the envelope and the fields that carry the ARN.
DOC_CLUSTER_ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster"
DOC_EVENTS = {
    "SageMaker HyperPod Cluster Event": {"EventDetails": {"ClusterArn": DOC_CLUSTER_ARN, "ClusterName": "sample-cluster",
                                                          "ResourceType": "Instance"}},
    "SageMaker HyperPod Cluster Node Health Event": {"ClusterArn": DOC_CLUSTER_ARN, "ClusterName": "sample-cluster",
                                                     "HealthSummary": {"HealthStatus": "Unhealthy"}},
    "SageMaker HyperPod Cluster State Change": {"ClusterArn": DOC_CLUSTER_ARN, "ClusterName": "sample-cluster",
                                                "ClusterStatus": "InService"},
}


def _doc_event(detail_type: str, arn: str = DOC_CLUSTER_ARN) -> dict:
    detail = json.loads(json.dumps(DOC_EVENTS[detail_type]).replace(DOC_CLUSTER_ARN, arn))
    return {"version": "0", "id": "0bd4a141-0a02-9d8a-f977-3924c3fb259c", "detail-type": detail_type,
            "source": "aws.sagemaker", "account": "111122223333", "time": "2025-04-28T16:59:01Z",
            "region": "us-west-2", "resources": [arn], "detail": detail}


def test_validation_rule_pattern_matches_the_documented_events_of_this_cluster_only(rendered):
    """EventBridge's pattern semantics (moto's implementation, the stand-in) on the rule as rendered, the cluster ARN
    filled in: each documented HyperPod detail type of this cluster matches; another cluster's does not, nor does a
    SageMaker event of another kind."""
    from moto.events.models import EventPattern

    rule = rendered[("eks-gpu", "small")]["Validation.json"]["Resources"]["ClusterEventsRule"]["Properties"]
    pattern = json.loads(json.dumps(rule["EventPattern"]).replace('{"Ref": "ClusterArn"}', json.dumps(DOC_CLUSTER_ARN)))
    matcher = EventPattern.load(json.dumps(pattern))
    for detail_type in DOC_EVENTS:
        assert matcher.matches_event(_doc_event(detail_type)), detail_type
        other = _doc_event(detail_type, DOC_CLUSTER_ARN.replace("sample-cluster", "other-cluster"))
        assert not matcher.matches_event(other), detail_type
    endpoint = dict(_doc_event("SageMaker HyperPod Cluster State Change"), **{"detail-type": "SageMaker Endpoint State Change"})
    assert not matcher.matches_event(endpoint)


@pytest.mark.parametrize(("variant", "size"), [c for c in COMBOS if c[0].startswith("eks")])
def test_helm_release_is_awss_dependencies_in_kube_system(rendered, variant, size):
    """The release AWS installs and tells users to upgrade: ``helm upgrade dependencies helm_chart/HyperPodHelmChart
    --namespace kube-system`` (aws/sagemaker-hyperpod-cli helm_chart/readme.md), ``HelmRelease`` default
    ``dependencies`` in kube-system (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/helm-chart-template.yaml).
    Under the same name, a user following AWS's upgrade command upgrades this release instead of installing a second
    one that collides with it. The handler's own fallback is the same name."""
    from hpq.cfn.handlers import helm as handler

    helm = rendered[(variant, size)]["Helm.json"]
    assert helm["Parameters"]["ReleaseName"]["Default"] == "dependencies"
    assert helm["Parameters"]["Namespace"]["Default"] == "kube-system"
    chart = helm["Resources"]["HelmChart"]["Properties"]
    assert chart["ReleaseName"] == {"Ref": "ReleaseName"} and chart["Namespace"] == {"Ref": "Namespace"}
    props = handler.properties({"ResourceProperties": {"ClusterName": "c", "ChartSource": "s3://b/k.tgz"}})
    assert (props["release"], props["namespace"]) == ("dependencies", "kube-system")


@pytest.mark.parametrize("variant", ["slurm-gpu", "slurm-trn"])
def test_controller_and_login_types_need_an_offer_in_the_region(rendered, variant):
    """cfn-lint 1.58's offer data has no ml.m5.*/ml.c5.* (no controller type at all) in ap-southeast-5 and
    eu-central-2, where GPU workers are offered: without a rule the deploy would fail only once CloudFormation
    reached the cluster. A training plan covers the workers only (the group with TrainingPlanArn), so these rules
    have no plan escape; the login rule holds only with EnableLoginGroup=true. Root and HyperPod stack both carry them,
    and for every (type, region) they say what the data says."""
    import json
    from importlib import resources

    from hpq.cfn import hyperpod, offers

    raw = json.loads(resources.files(offers.DATA_PACKAGE).joinpath(offers.DATA_FILE).read_text())
    data = {r: set(v["enum"]) for r, v in raw.items() if isinstance(v, dict)}
    assert not any(t.startswith(("ml.m5.", "ml.c5.")) for r in ("ap-southeast-5", "eu-central-2") for t in data[r])
    files = rendered[(variant, "small")]
    hp, root = files["HyperPod.json"], files["root.json"]
    ctl = hp["Rules"][hyperpod.CONTROLLER_OFFER_RULE]["Assertions"][0]["Assert"]
    login = hp["Rules"][hyperpod.LOGIN_OFFER_RULE]["Assertions"][0]["Assert"]
    for rule in (hyperpod.CONTROLLER_OFFER_RULE, hyperpod.LOGIN_OFFER_RULE):
        assert root["Rules"][rule] == hp["Rules"][rule]
        assert "TrainingPlanArn" not in json.dumps(hp["Rules"][rule])
    types = hp["Parameters"]["ControllerInstanceType"]["AllowedValues"]
    assert types == hp["Parameters"]["LoginInstanceType"]["AllowedValues"]
    for instance_type in types:
        for region in list(data) + ["eu-west-3"]:
            offered = instance_type in data.get(region, set())
            env = {"ControllerInstanceType": instance_type, "LoginInstanceType": instance_type,
                   "AWS::Region": region, "EnableLoginGroup": "true"}
            assert _eval(ctl, env) is offered, (instance_type, region)
            assert _eval(login, env) is offered, (instance_type, region)
            assert _eval(login, dict(env, EnableLoginGroup="false")) is True
    default = hp["Parameters"]["ControllerInstanceType"]["Default"]
    assert _eval(ctl, {"ControllerInstanceType": default, "AWS::Region": "eu-central-2"}) is False
    assert _eval(ctl, {"ControllerInstanceType": default, "AWS::Region": "us-east-1"}) is True
    assert hyperpod.CONTROLLER_OFFER_RULE not in rendered[("eks-gpu", "small")]["HyperPod.json"].get("Rules", {})


@pytest.mark.parametrize(("variant", "size"), [c for c in COMBOS if c[0].startswith("eks")])
def test_versions_in_extended_support_need_eks_support_type_extended(rendered, variant, size):
    """EKS: a cluster in extended support cannot have extended support disabled ("Prevent increased cluster costs by
    disabling EKS extended support", disable-extended-support.html: only a cluster in standard support can be set to
    STANDARD). On the render date 1.32 and 1.33 are out of standard support, so a template Rule refuses them with
    EksSupportType=STANDARD before anything is created (console/publish path; hpq deploy's pre-flight says the same
    with today's date). Rendered on 2026-12-02 the rule covers 1.34 too. Root and EKS stack carry it."""
    from hpq.cfn import eks

    def check(files, refused):
        root, nested = files["root.json"], files["EKS.json"]
        rule = nested["Rules"][eks.EXTENDED_SUPPORT_RULE]
        assert root["Rules"][eks.EXTENDED_SUPPORT_RULE] == rule

        def holds(version: str, support: str) -> bool:
            env = {"KubernetesVersion": version, "EksSupportType": support}
            return not _eval(rule["RuleCondition"], env) or all(_eval(a["Assert"], env) for a in rule["Assertions"])

        for version in root["Parameters"]["KubernetesVersion"]["AllowedValues"]:
            assert holds(version, "EXTENDED")
            assert holds(version, "STANDARD") is (version not in refused), version
        assert "EXTENDED" in rule["Assertions"][0]["AssertDescription"]

    check(rendered[(variant, size)], ("1.32", "1.33"))
    check(synth.synthesize(variant, size, as_of=datetime.date(2026, 12, 2)), ("1.32", "1.33", "1.34"))


def test_kubernetes_version_docs_cite_the_hyperpod_page():
    """docs/templates.md names the default, the page it comes from and the date it was read."""
    from pathlib import Path

    from hpq.cfn import eks

    text = (Path(__file__).resolve().parents[2] / "docs" / "templates.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `KubernetesVersion`"))
    assert eks.DEFAULT_KUBERNETES_VERSION == "1.34" and "`1.34`" in row
    assert "sagemaker-hyperpod-eks-prerequisites.html" in row and "2026-11-26" in row
