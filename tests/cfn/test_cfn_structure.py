"""Structural properties of the rendered templates (issue 2, item 7), checked on the JSON itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hpq import vocab
from hpq.cfn import synth
from hpq.errors import UsageError
from hpq.lifecycle import catalog, names
from tests.cfn.golden import handler_sources, lambda_functions
from tests.cfn_render import COMBOS

ALL = pytest.mark.parametrize(("variant", "size"), COMBOS)


def _refs(node: Any) -> set[str]:
    """Logical names a JSON fragment references through Ref, Fn::GetAtt or Fn::Sub."""
    out: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                out.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else value.split(".")[0]
                out.add(target)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                out.update(m.split(".")[0] for m in re.findall(r"\$\{([^!}][^}]*)\}", text))
                if isinstance(value, list):
                    out |= _refs(value[1])
            else:
                out |= _refs(value)
    elif isinstance(node, list):
        for item in node:
            out |= _refs(item)
    return out


def dependency_graph(template: dict) -> dict[str, set[str]]:
    """Resource -> resources it waits for (DependsOn plus references)."""
    resources = template["Resources"]
    graph = {}
    for name, body in resources.items():
        deps = _refs(body)
        depends_on = body.get("DependsOn", [])
        deps |= {depends_on} if isinstance(depends_on, str) else set(depends_on)
        graph[name] = {d for d in deps if d in resources}
    return graph


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def stack_params(root: dict, stack: str) -> dict:
    return root["Resources"][f"{stack}Stack"]["Properties"]["Parameters"]


def networking_output(name: str) -> dict:
    return {"Fn::GetAtt": ["NetworkingStack", f"Outputs.{name}"]}


@ALL
def test_no_arn_aws_literal(rendered, variant, size):
    for name, template in rendered[(variant, size)].items():
        assert "arn:aws:" not in synth.to_json(template), name


@ALL
def test_every_instance_group_uses_the_one_node_subnet(rendered, variant, size):
    files = rendered[(variant, size)]
    cluster = files["HyperPod.json"]["Resources"]["Cluster"]["Properties"]
    assert cluster["VpcConfig"]["Subnets"] == [{"Ref": "NodeSubnetId"}]
    groups = cluster["InstanceGroups"]
    flat = [g["Fn::If"][1] if "Fn::If" in g else g for g in groups]
    assert flat and all("OverrideVpcConfig" not in g for g in flat)
    assert stack_params(files["root.json"], "HyperPod")["NodeSubnetId"] == networking_output(names.OUT_NODE_SUBNET_ID)
    net = files["Networking.json"]
    assert net["Outputs"][names.OUT_NODE_SUBNET_ID]["Value"] == {"Ref": "NodeSubnet"}
    assert net["Resources"]["NodeSubnet"]["Properties"]["AvailabilityZoneId"] == {"Ref": "AvailabilityZoneId"}
    names_ = [g["InstanceGroupName"] for g in flat]
    if variant.startswith("slurm"):
        assert names_ == [names.CONTROLLER_GROUP, names.LOGIN_GROUP, names.WORKER_GROUP]
    else:
        assert names_ == [names.WORKER_GROUP]
        assert cluster["Orchestrator"]["Eks"]["ClusterArn"] == {"Ref": "EksClusterArn"}
    for g in flat:
        assert g["LifeCycleConfig"]["SourceS3Uri"] == {"Ref": "LifecycleS3Uri"}
        assert "ThreadsPerCore" in g
        assert g["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"]
    assert cluster["NodeRecovery"] == "Automatic"


@ALL
def test_fsx_in_node_subnet_with_exact_cluster_tag(rendered, variant, size):
    files = rendered[(variant, size)]
    fs = files["Storage.json"]["Resources"]["FileSystem"]["Properties"]
    assert fs["SubnetIds"] == [{"Ref": "NodeSubnetId"}]
    assert fs["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
    assert fs["LustreConfiguration"]["DataCompressionType"] == "LZ4"
    assert {"Key": names.CLUSTER_TAG_KEY, "Value": {"Ref": "ClusterName"}} in fs["Tags"]
    root = files["root.json"]
    storage = stack_params(root, "Storage")
    assert storage["NodeSubnetId"] == networking_output(names.OUT_NODE_SUBNET_ID)
    # The tag value is the very name the HyperPod cluster gets.
    assert storage["ClusterName"] == stack_params(root, "HyperPod")["ClusterName"] == {"Ref": "ClusterName"}


@ALL
def test_fsx_and_eks_create_in_parallel(rendered, variant, size):
    root = rendered[(variant, size)]["root.json"]
    graph = dependency_graph(root)
    assert all("DependsOn" not in body for body in root["Resources"].values())
    assert reaches(graph, "HyperPodStack", "StorageStack")
    if variant.startswith("eks"):
        assert not reaches(graph, "StorageStack", "EKSStack")
        assert not reaches(graph, "EKSStack", "StorageStack")
        assert reaches(graph, "HyperPodStack", "HelmStack")
        assert reaches(graph, "HelmStack", "EKSStack")


def test_dependency_check_can_fail(rendered):
    """Guard for the check above: a DependsOn between FSx and EKS is detected."""
    root = rendered[("eks-gpu", "small")]["root.json"]
    graph = dependency_graph({"Resources": {**root["Resources"], "EKSStack": {
        **root["Resources"]["EKSStack"], "DependsOn": "StorageStack"}}})
    assert reaches(graph, "EKSStack", "StorageStack")


@ALL
def test_template_limits(rendered, variant, size):
    for name, template in rendered[(variant, size)].items():
        assert len(synth.to_json(template).encode()) < 1_000_000, name
        assert len(template["Resources"]) < 500, name
        assert len(template.get("Parameters", {})) <= 200 and len(template.get("Outputs", {})) <= 200, name


@ALL
def test_lambda_code_equals_source_file(rendered, variant, size):
    sources = handler_sources()
    expected = {"ContentsFunction": "cfn/handlers/bucket_cleanup.py", "HelmFunction": "cfn/handlers/helm.py"}
    seen = set()
    for name, template in rendered[(variant, size)].items():
        for logical, fn in lambda_functions(template).items():
            code = fn["Properties"]["Code"]["ZipFile"]
            assert code == sources[expected[logical]], f"{name}:{logical} differs from {expected[logical]}"
            assert len(code.encode()) < 4 * 1024 * 1024
            assert fn["Properties"]["Handler"] == "index.handler"
            seen.add(logical)
    assert seen == ({"ContentsFunction", "HelmFunction"} if variant.startswith("eks") else {"ContentsFunction"})


@ALL
def test_root_template_urls_come_from_base_parameter(rendered, variant, size):
    files = rendered[(variant, size)]
    stacks = {k: r for k, r in files["root.json"]["Resources"].items() if r["Type"] == "AWS::CloudFormation::Stack"}
    assert set(files) == {"root.json"} | {k.removesuffix("Stack") + ".json" for k in stacks}
    for logical, body in stacks.items():
        assert body["Properties"]["TemplateURL"] == {
            "Fn::Join": ["", [{"Ref": "TemplateBaseUrl"}, "/" + logical.removesuffix("Stack") + ".json"]]}
        nested = files[logical.removesuffix("Stack") + ".json"]
        passed, declared = set(body["Properties"].get("Parameters", {})), set(nested.get("Parameters", {}))
        assert passed <= declared, logical
        assert all("Default" in nested["Parameters"][p] for p in declared - passed), logical


@ALL
def test_every_parameter_is_constrained(rendered, variant, size):
    for name, template in rendered[(variant, size)].items():
        for pname, spec in template.get("Parameters", {}).items():
            constrained = ("AllowedValues" in spec or "AllowedPattern" in spec
                           or spec["Type"].startswith(("AWS::", "List<AWS::"))
                           or (spec["Type"] == "Number" and "MinValue" in spec and "MaxValue" in spec))
            if pname == "HelmReleaseId":  # an output handed through to make the dependency real
                constrained = True
            assert constrained, f"{name}: parameter {pname} has no allowed values or constraint"
            assert spec.get("Description"), f"{name}: parameter {pname} has no description"


@ALL
def test_instance_types_come_from_the_catalog(rendered, variant, size):
    params = rendered[(variant, size)]["root.json"]["Parameters"]
    expected = catalog.trainium_types() if variant.endswith("trn") else catalog.gpu_types()
    assert params["WorkerInstanceType"]["AllowedValues"] == expected
    if variant.startswith("slurm"):
        # The catalog's CPU types with an on-demand HyperPod offer in every HyperPod region (cfn-lint's data):
        # cfn-lint resolves each allowed value in each region (W1030). cfn-lint 1.58.0: ml.m5.2xlarge has no
        # offer in ap-southeast-3, so it is left out.
        from hpq.cfn import offers, regions

        offered = [t for t in catalog.controller_types()
                   if all(offers.has_on_demand_offer(t, r) for r in regions.hyperpod_regions())]
        assert "ml.m5.2xlarge" not in offered and "ml.m5.xlarge" in offered
        assert params["ControllerInstanceType"]["AllowedValues"] == offered
        assert params["LoginInstanceType"]["AllowedValues"] == offered


def test_size_presets(rendered):
    def defaults(size):
        p = rendered[("slurm-gpu", size)]["root.json"]["Parameters"]
        return int(p["WorkerCount"]["Default"]), int(p["FsxStorageCapacityGiB"]["Default"]), int(
            p["EbsVolumeSizeGB"]["Default"])

    small, medium, large = defaults("small"), defaults("medium"), defaults("large")
    assert all(a < b < c for a, b, c in zip(small, medium, large, strict=True))


def test_param_sets_root_default_and_validates():
    files = synth.synthesize("eks-gpu", "small", {"WorkerInstanceType": "p5.48xlarge", "WorkerCount": "8"})
    params = files["root.json"]["Parameters"]
    assert params["WorkerInstanceType"]["Default"] == "ml.p5.48xlarge"
    assert params["WorkerCount"]["Default"] == "8"
    for bad in ({"NoSuch": "1"}, {"WorkerInstanceType": "ml.trn1.32xlarge"}, {"WorkerCount": "0"},
                {"ClusterName": "-bad"}, {"TemplateBaseUrl": "https://x/y/"}, {"EnableObservability": "yes"},
                {"WorkerCount": "nan"}, {"EbsVolumeSizeGB": "inf"}):
        with pytest.raises(UsageError):
            synth.synthesize("eks-gpu", "small", bad)
    with pytest.raises(UsageError):
        synth.synthesize("slurm-gpu", "small", {"ControllerInstanceType": "ml.p5.48xlarge"})


def test_root_parameters_as_data():
    params = {p["Name"]: p for p in synth.root_parameters("eks-trn")}
    for required in ("TemplateBaseUrl", "AssetsBucket", "AssetsPrefix", "ClusterName", "KubectlLayerArn",
                     "HelmChartSource", "HelmChartPath", "HelmChartVersion", "AvailabilityZoneId"):
        assert required in params
    assert params["AssetsPrefix"]["Default"].endswith("/")
    assert synth.stack_files("slurm-gpu") == [
        "Networking.json", "Security.json", "Storage.json", "S3.json", "IAM.json", "HyperPod.json",
        "Observability.json", "Validation.json"]


def test_every_root_parameter_is_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "templates.md").read_text(encoding="utf-8")
    for variant in vocab.VARIANTS:
        for p in synth.root_parameters(variant):
            assert f"`{p['Name']}`" in doc, f"docs/templates.md does not describe root parameter {p['Name']}"


@pytest.mark.parametrize(("file", "logical", "handler"), [
    ("Helm.json", "HelmChart", "cfn/handlers/helm.py"),
    ("S3.json", "LifecycleContents", "cfn/handlers/bucket_cleanup.py"),
])
def test_custom_resource_properties_match_what_the_handler_reads(rendered, file, logical, handler):
    """Template and handler agree on property names (read from the handler source at test time)."""
    source = handler_sources()[handler]
    read = set(re.findall(r"""props(?:\.get\(|\[)["'](\w+)["']""", source))
    props = set(rendered[("eks-gpu", "small")][file]["Resources"][logical]["Properties"])
    props -= {"ServiceToken", "ServiceTimeout"}
    assert read, f"found no property reads in {handler}"
    assert props == read, f"template sets {sorted(props - read)} unread; handler reads {sorted(read - props)} unset"
