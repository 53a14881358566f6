"""``hpq deploy`` on an existing stack: the full parameter plan, the change set it shows, and exactly that executed.

Three layers, each saying what stands in for AWS:
- the parameter rule (aws/deploy_plan.py) on the real synthesized root template, no AWS;
- the change set's resource actions on DescribeChangeSet answers as the CloudFormation User Guide prints them
  (tests/aws/data/cfn_change_sets/README.md), through botocore's Stubber, which checks every request against
  botocore's CloudFormation model;
- ``hpq deploy`` end to end against moto over HTTP (--emulate moto). moto 5.2 executes change sets and updates the
  nested stacks' parameters, but its DescribeChangeSet lists only template edits (no parameter-driven Modify, no
  Replacement, no nested ChangeSetId): where a test needs replacements, moto's own change set is kept and only its
  ``Changes`` are the documented nested-stack shape (``NestedAnswers``), which says so.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber

from hpq.aws import deploy_plan, stacks
from hpq.cfn import synth
from hpq.errors import UsageError
from tests.support import run_cli

REGION = "us-east-1"
SAMPLES = Path(__file__).parent / "data" / "cfn_change_sets"
# moto's account reaches its (real default) 5-VPC quota after a few stacks; the quota step is tested on its own.
EMULATE = ["--emulate", "moto", "--poll-seconds", "0.05", "--no-quota-check"]


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


def wire(answer):  # type: ignore[no-untyped-def]
    """The CLI printout's nulls are members the API leaves out: drop them (Stubber validates the shape)."""
    if isinstance(answer, dict):
        return {k: wire(v) for k, v in answer.items() if v is not None}
    if isinstance(answer, list):
        return [wire(v) for v in answer]
    return answer


def root_declared(variant: str = "slurm-gpu") -> dict:
    return synth.synthesize(variant)["root.json"]["Parameters"]


# A stack created with --param WorkerCount=5 and a VPC CIDR of its own, on the small preset otherwise.
CURRENT = {
    "ClusterName": "team-a", "WorkerInstanceType": "ml.g5.16xlarge", "WorkerCount": "5",
    "FsxStorageCapacityGiB": "1200", "EbsVolumeSizeGB": "500", "VpcCidr": "10.1.0.0/16",
    "AvailabilityZoneId": "use1-az4", "AssetsBucket": "b", "AssetsPrefix": "hpq/old/node/",
    "TemplateBaseUrl": "https://b.s3.us-east-1.amazonaws.com/hpq/old/templates/slurm-gpu",
}


# --- the parameter rule -----------------------------------------------------------------------------


def test_size_on_an_update_changes_the_size_parameters_and_keeps_the_rest():
    plan = deploy_plan.parameter_plan(root_declared(), CURRENT, {}, "large")
    rows = {r.key: r for r in plan.rows}
    assert (rows["WorkerCount"].old, rows["WorkerCount"].new, rows["WorkerCount"].rule) == ("5", "16", "--size large")
    assert (rows["FsxStorageCapacityGiB"].new, rows["EbsVolumeSizeGB"].new) == ("19200", "2000")
    # What the user never set keeps its current value, not the template default (10.0.0.0/16).
    assert (rows["VpcCidr"].new, rows["VpcCidr"].rule, rows["VpcCidr"].changed) == ("10.1.0.0/16", "kept", False)
    assert rows["ClusterName"].new == "team-a" and rows["AvailabilityZoneId"].new == "use1-az4"
    # A parameter the stack does not have yet (added by a newer release) takes the template default, visibly.
    assert rows["ThreadsPerCore"].old is None and rows["ThreadsPerCore"].rule == "default"
    assert set(plan.values) == set(root_declared())


def test_without_size_an_update_keeps_sizes_and_param_wins_over_size():
    """Broken twin of the above: no --size keeps the stack's 5 workers; --param beats --size."""
    kept = {r.key: r for r in deploy_plan.parameter_plan(root_declared(), CURRENT, {}, None).rows}
    assert (kept["WorkerCount"].new, kept["WorkerCount"].rule) == ("5", "kept")
    assert kept["FsxStorageCapacityGiB"].new == "1200"
    both = {r.key: r for r in deploy_plan.parameter_plan(root_declared(), CURRENT, {"WorkerCount": "3"}, "large").rows}
    assert (both["WorkerCount"].new, both["WorkerCount"].rule) == ("3", "--param")
    assert both["FsxStorageCapacityGiB"].new == "19200"


def test_new_stack_gets_small_and_defaults_and_removed_parameters_are_listed():
    new = {r.key: r for r in deploy_plan.parameter_plan(root_declared(), None, {}, None).rows}
    assert (new["WorkerCount"].new, new["WorkerCount"].rule) == ("2", "--size small (new stack default)")
    assert new["VpcCidr"].rule == "default" and new["VpcCidr"].old is None
    assert "AvailabilityZoneId" not in new  # no default: the caller picks it (rule "chosen")
    gone = deploy_plan.parameter_plan(root_declared(), dict(CURRENT, OldKnob="x"), {}, None)
    row = next(r for r in gone.rows if r.key == "OldKnob")
    assert (row.new, row.rule) == (None, "removed") and "OldKnob" not in gone.values
    lines = deploy_plan.format_parameters(gone)
    assert any(line.startswith("~ OldKnob") and "x -> (removed)" in line for line in lines)
    assert any("WorkerCount" in line and line.startswith(" ") and "[kept]" in line for line in lines)


def test_a_kept_value_this_release_refuses_is_one_line_naming_it():
    """A stack value a newer release no longer allows (CloudFormation would refuse it too) is said before anything is
    uploaded, as the stack's value, with the way out; the same value given by the user is synth's own error."""
    from hpq.aws import deploy

    values = dict(deploy_plan.parameter_plan(root_declared(), CURRENT, {}, None).values,
                  OnStartDeepHealthChecks="EveryTest")
    existing = stacks.StackInfo("team-a", "arn:aws:cloudformation:us-east-1:1:stack/team-a/1", "UPDATE_COMPLETE")
    with pytest.raises(UsageError) as exc:
        deploy.build_planned_release("b", REGION, "slurm-gpu", None, values, existing, None)
    msg = str(exc.value)
    assert msg.startswith("the stack's current parameters do not fit this release: OnStartDeepHealthChecks=")
    assert msg.endswith("pass --param KEY=VALUE to choose a value it accepts") and "\n" not in msg
    with pytest.raises(UsageError) as exc:
        deploy.build_planned_release("b", REGION, "slurm-gpu", None, values, None, None)
    assert not str(exc.value).startswith("the stack's current")


def create_only(resource_type: str) -> list[str]:
    """createOnlyProperties of a type's registry schema as cfn-lint ships it (us-east-1): the properties the
    CloudFormation resource reference marks "Update requires: Replacement"."""
    import cfnlint

    data = Path(cfnlint.__file__).parent / "data" / "schemas"
    ref = json.loads((data / "providers" / "us-east-1.json").read_text())[resource_type]
    return json.loads((data / "resources" / f"{ref}.json").read_text()).get("createOnlyProperties", [])


def test_what_each_parameter_replaces_rests_on_the_resource_schemas():
    """docs/updates.md's table (deploy_plan.REPLACED_BY / UPDATED_IN_PLACE) against the schemas: every property a
    replacing parameter feeds is create-only; none an in-place parameter feeds is (nor any part of it)."""
    for param, (_, chain) in deploy_plan.REPLACED_BY.items():
        for rtype, prop in chain:
            assert prop in create_only(rtype), (param, rtype, prop)
    for param, props in deploy_plan.UPDATED_IN_PLACE.items():
        for rtype, prop in props:
            hits = [p for p in create_only(rtype) if p == prop or p.startswith(prop + "/")]
            assert not hits, (param, rtype, hits)
    declared = set(root_declared("eks-gpu")) | set(root_declared("slurm-gpu"))
    assert set(deploy_plan.REPLACED_BY) | set(deploy_plan.UPDATED_IN_PLACE) <= declared


# --- the change set's resource actions on documented answers ------------------------------------------


def test_actions_from_the_documented_samples():
    multiple = [deploy_plan.resource_action("", c) for c in sample("multiple")["Changes"]]
    [inst] = multiple
    assert inst.replaces and inst.replacement == "True"
    assert "KeyName <- KeyPairName (recreates)" in inst.causes
    assert "InstanceType <- InstanceType (may recreate)" in inst.causes
    [line] = deploy_plan.format_actions(multiple)
    assert "Modify  MyEC2Instance [AWS::EC2::Instance] REPLACEMENT: " in line
    [tags] = [deploy_plan.resource_action("", c) for c in sample("parameter")["Changes"]]
    assert not tags.replaces and deploy_plan.format_actions([tags])[0].endswith("in place: Tags <- Purpose")
    addremove = [deploy_plan.resource_action("", c) for c in sample("addremove")["Changes"]]
    assert [a.action for a in addremove] == ["Add", "Add", "Remove"]
    assert not deploy_plan.guarded(multiple + addremove)  # EC2 instances are not what --yes guards


def fsx_replacement() -> dict:
    """The "multiple" sample's ResourceChange with the resource swapped for the Storage stack's FSx file system
    and the recreating property for SubnetIds (create-only in the AWS::FSx::FileSystem schema)."""
    change = copy.deepcopy(sample("multiple")["Changes"][0])
    rc = change["ResourceChange"]
    rc.update(ResourceType="AWS::FSx::FileSystem", LogicalResourceId="FileSystem", PhysicalResourceId="fs-0123456789abcdef0")
    rc["Details"] = [{"CausingEntity": "NodeSubnetId", "ChangeSource": "ParameterReference", "Evaluation": "Static",
                      "Target": {"Attribute": "Properties", "Name": "SubnetIds", "RequiresRecreation": "Always"}}]
    return change


def stubbed_update(confirm=None, dry_run=False, execute=True):  # type: ignore[no-untyped-def]
    """update_via_change_set through Stubber: root answer = nested-root sample, nested answer = FSx replacement."""
    cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    root, child = wire(sample("nested-root")), wire(sample("nested-child"))
    child["Changes"] = [fsx_replacement()]
    cs_id, nested_id = root["ChangeSetId"], root["Changes"][0]["ResourceChange"]["ChangeSetId"]
    info = stacks.StackInfo("my-root-stack", root["StackId"], "UPDATE_COMPLETE",
                                parameters={"WorkerCount": "2", "Gone": "x"})
    stub = Stubber(cfn)
    # Every parameter explicit, none by UsePreviousValue: the plan is exactly what CloudFormation gets.
    stub.add_response("create_change_set", {"Id": cs_id, "StackId": root["StackId"]}, {
        "StackName": "my-root-stack", "ChangeSetName": ANY, "ChangeSetType": "UPDATE", "TemplateURL": "https://t",
        "Parameters": [{"ParameterKey": "WorkerCount", "ParameterValue": "16"}], "Capabilities": ANY, "Tags": [],
        "IncludeNestedStacks": True})
    stub.add_response("describe_change_set", root, {"StackName": "my-root-stack", "ChangeSetName": cs_id})
    stub.add_response("describe_change_set", child, {"ChangeSetName": nested_id})
    if execute:
        stub.add_response("execute_change_set", {}, {"StackName": "my-root-stack", "ChangeSetName": cs_id})
    else:
        stub.add_response("delete_change_set", {}, {"StackName": "my-root-stack", "ChangeSetName": cs_id})
    seen: list = []
    with stub:
        try:
            result = stacks.update_via_change_set(cfn, info, "https://t", {"WorkerCount": "16"}, {},
                                                      on_changes=seen.extend, dry_run=dry_run, confirm=confirm)
        finally:
            stub.assert_no_pending_responses()
    return result, seen


def test_nested_change_sets_are_walked_and_a_guarded_replacement_can_be_refused():
    def refuse(actions):  # type: ignore[no-untyped-def]
        raise UsageError("refused: this update " + deploy_plan.describe_guarded(actions))

    with pytest.raises(UsageError) as exc:
        stubbed_update(confirm=refuse, execute=False)  # refused -> the change set is deleted, never executed
    assert "replaces the FSx for Lustre file system (its data) (ChildStack/FileSystem)" in str(exc.value)
    result, seen = stubbed_update(confirm=lambda actions: None)  # allowed -> executed
    assert result.kind == "update"
    assert [a.where for a in seen] == ["ChildStack", "ChildStack/FileSystem"]
    assert [a.where for a in deploy_plan.guarded(seen)] == ["ChildStack/FileSystem"]
    lines = deploy_plan.format_actions(seen)
    assert lines[1] == ("  Modify  ChildStack/FileSystem [AWS::FSx::FileSystem] REPLACEMENT: "
                        "SubnetIds <- NodeSubnetId (recreates)")


def test_dry_run_deletes_the_change_set_after_showing_it():
    result, seen = stubbed_update(dry_run=True, execute=False)
    assert result.kind == "dry-run" and len(seen) == 2


def test_conditional_replacement_and_removal_are_guarded_too():
    for replacement, action in (("Conditional", "Modify"), ("", "Remove")):
        a = deploy_plan.ResourceAction("HyperPodStack", action, "Cluster", "AWS::SageMaker::Cluster", replacement)
        assert a.guarded, (replacement, action)
    assert not deploy_plan.ResourceAction("HyperPodStack", "Modify", "Cluster", "AWS::SageMaker::Cluster",
                                          "False").guarded


# --- hpq deploy end to end against moto ---------------------------------------------------------------


@pytest.fixture
def bucket(request, aws_env: str) -> str:
    name = "hpq-upd-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=name)
    return name


def stack_params(name: str) -> dict[str, str]:
    cfn = boto3.client("cloudformation", region_name=REGION)
    return {p["ParameterKey"]: p["ParameterValue"] for p in cfn.describe_stacks(StackName=name)["Stacks"][0]["Parameters"]}


def nested_params(name: str, logical: str) -> dict[str, str]:
    cfn = boto3.client("cloudformation", region_name=REGION)
    res = [r for r in cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]
           if r["LogicalResourceId"] == logical][0]
    return stack_params(res["PhysicalResourceId"])


def object_keys(bucket: str) -> list[str]:
    s3 = boto3.client("s3", region_name=REGION)
    keys: list[str] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        keys += [v["Key"] for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
    return sorted(keys)


def change_sets(stack: str, executed: bool = False) -> list[dict]:
    """The stack's change sets waiting to be executed (or, ``executed``, those executed). Real CloudFormation drops
    a stack's change sets once one is executed (user guide, "Execute a change set"); moto keeps the executed one
    as EXECUTE_COMPLETE, which is the proof that the update went through ExecuteChangeSet."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    sid = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackId"]
    return [c for c in cfn.list_change_sets(StackName=stack)["Summaries"] if c.get("StackId") == sid
            and (c.get("ExecutionStatus") == "EXECUTE_COMPLETE") == executed]


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_size_large_on_an_existing_stack_plans_first_and_changes_what_it_says(bucket, capsys, monkeypatch):
    """The issue's check: create with --param WorkerCount=5 (and deep health checks), then --size large; dry run first (nothing lasting),
    then the update, whose plan is printed before anything changes and whose values the stacks then have."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    stack = "hpq-t-upd-size"
    code, _, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--param", "WorkerCount=5",
                            "--param", "OnStartDeepHealthChecks=InstanceConnectivity", "--yes", *EMULATE], capsys)
    assert code == 0, err
    assert "plan: create stack hpq-t-upd-size (slurm-gpu)" in err
    before, keys = stack_params(stack), object_keys(bucket)
    assert before["WorkerCount"] == "5" and before["FsxStorageCapacityGiB"] == "1200"

    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--size", "large", "--dry-run",
                              "--output", "json", *EMULATE], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["action"] == "dry-run"
    rows = {r["parameter"]: r for r in data["plan"]["parameters"]}
    assert (rows["WorkerCount"]["old"], rows["WorkerCount"]["new"], rows["WorkerCount"]["rule"]) == ("5", "16",
                                                                                                     "--size large")
    checks = rows["OnStartDeepHealthChecks"]
    assert (checks["old"], checks["new"], checks["rule"]) == ("InstanceConnectivity", "InstanceConnectivity", "kept")
    assert stack_params(stack) == before and change_sets(stack) == [] and object_keys(bucket) == keys

    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--size", "large", *EMULATE],
                             capsys)
    assert code == 0, err
    assert "~ WorkerCount              5 -> 16  [--size large]" in err
    assert "~ FsxStorageCapacityGiB    1200 -> 19200  [--size large]" in err
    assert "~ EbsVolumeSizeGB          500 -> 2000  [--size large]" in err
    assert "  OnStartDeepHealthChecks  InstanceConnectivity  [kept]" in err
    assert err.index("plan: update stack") < err.index("change set:") < err.index(f"{stack} UPDATE_IN_PROGRESS")
    after = stack_params(stack)
    assert (after["WorkerCount"], after["FsxStorageCapacityGiB"], after["EbsVolumeSizeGB"]) == ("16", "19200", "2000")
    assert after["OnStartDeepHealthChecks"] == "InstanceConnectivity" and f"stack {stack}: UPDATE_COMPLETE" in out
    hp = nested_params(stack, "HyperPodStack")  # reached the nested stacks, not only the root's parameter list
    assert (hp["WorkerCount"], hp["EbsVolumeSizeGB"]) == ("16", "2000")
    assert nested_params(stack, "StorageStack")["StorageCapacityGiB"] == "19200"
    assert change_sets(stack) == [] and len(change_sets(stack, executed=True)) == 1  # the one shown, executed

    # The same command again: nothing to do (the release is the same, so are the parameters).
    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--size", "large", "--output",
                              "json", *EMULATE], capsys)
    assert code == 0 and json.loads(out)["action"] == "no-changes", err


class NestedAnswers:
    """moto's CloudFormation client; only DescribeChangeSet's ``Changes`` are the documented nested-stack shape
    (nested-root sample whose nested change set replaces the FSx file system). Creating, deleting and executing
    the change set, and its Status, are moto's."""

    def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
        self.real = real
        self.nested = wire(sample("nested-child"))
        self.nested["Changes"] = [fsx_replacement()]
        self.nested_id = self.nested["ChangeSetId"]

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.real, name)

    def describe_change_set(self, **kw):  # type: ignore[no-untyped-def]
        if kw["ChangeSetName"] == self.nested_id:
            return self.nested
        answer = self.real.describe_change_set(**kw)
        root = wire(sample("nested-root"))["Changes"]
        root[0]["ResourceChange"]["LogicalResourceId"] = "StorageStack"
        return {**answer, "Changes": root}


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_replacing_fsx_needs_yes(bucket, capsys, monkeypatch):
    from hpq.aws import deploy

    stack = "hpq-t-upd-yes"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: no prompt
    code, _, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--param",
                            "AvailabilityZoneId=use1-az4", "--yes", *EMULATE], capsys)
    assert code == 0, err
    before = stack_params(stack)
    real = deploy.client
    monkeypatch.setattr(deploy, "client", lambda s, svc, region=None: NestedAnswers(real(s, svc, region))
                        if svc == "cloudformation" else real(s, svc, region))
    args = ["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--param", "AvailabilityZoneId=use1-az6", *EMULATE]
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    assert "REPLACEMENT: SubnetIds <- NodeSubnetId (recreates)" in err  # shown before the refusal
    assert "use1-az4 -> use1-az6  (replaces the node subnet, so FSx and the HyperPod cluster)  [--param]" in err
    last = err.strip().splitlines()[-1]
    assert last == ("hpq: error: refused: this update replaces the FSx for Lustre file system (its data) "
                    "(StorageStack/FileSystem); pass --yes to allow it (--dry-run shows the plan only)")
    assert stack_params(stack) == before and change_sets(stack) == []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))  # on a terminal it asks; "n" keeps the stack as it is
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "Execute the change set?" in err and stack_params(stack) == before, err
    assert change_sets(stack) == []

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _, err = run_cli([*args, "--dry-run"], capsys)  # a dry run shows it, and says --yes would be needed
    assert code == 0 and "needs --yes: this update replaces" in err and stack_params(stack) == before, err

    code, _, err = run_cli([*args, "--yes"], capsys)  # broken twin of the refusal: allowed, executed
    assert code == 0, err
    assert stack_params(stack)["AvailabilityZoneId"] == "use1-az6" and change_sets(stack) == []
    assert len(change_sets(stack, executed=True)) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_dry_run_of_a_new_stack_creates_nothing(bucket, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run_cli(["deploy", "eks-gpu", bucket, "--stack-name", "hpq-t-upd-dry", "--size", "medium",
                              "--dry-run", "--output", "json", *EMULATE], capsys)
    assert code == 0, err
    data = json.loads(out)
    rows = {r["parameter"]: r for r in data["plan"]["parameters"]}
    assert data["action"] == "dry-run" and rows["WorkerCount"]["new"] == "4" and rows["WorkerCount"]["old"] is None
    assert rows["ClusterName"]["rule"] == "stack name" and rows["AvailabilityZoneId"]["rule"] == "chosen"
    assert "would create" in err
    assert object_keys(bucket) == []
    cfn = boto3.client("cloudformation", region_name=REGION)
    assert not [s for s in cfn.list_stacks()["StackSummaries"] if s["StackName"] == "hpq-t-upd-dry"]
