"""stack-errors, failure explanation, and destroy of a versioned bucket.

The stacks (root + nested, created from S3 TemplateURLs) are real moto stacks. moto never fails a
resource and records only stack-level events, so the failure *events* of the deliberately failing
nested stack are a stand-in: a botocore ``before-call`` hook answers DescribeStackEvents (and, for
the follow test, DescribeStacks) for those stacks with events shaped like CloudFormation's own
cascade (the real failure, "Resource creation cancelled" siblings, "Embedded stack ... was not
successfully created" in the parent, "The following resource(s) failed" summaries). Everything
else, including walking the nested stacks, is answered by moto over HTTP.
"""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from hpq.aws import events as aws_events
from hpq.aws import session as aws_session
from hpq.aws import stacks as aws_stacks
from hpq.cli import printing
from hpq.cli.main import main
from hpq.errors import OperationFailed
from tests.support import patch_aws_client

REGION = "us-east-1"
T0 = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.timezone.utc)
FSX_REASON = ('Resource handler returned message: "Unable to create file system: storage capacity quota exceeded '
              '(Service: FSx, Status Code: 400)" (HandlerErrorCode: ServiceLimitExceeded)')


def ev(stack_id: str, stack_name: str, logical: str, rtype: str, status: str, sec: int, reason: str = "",
       physical: str | None = None) -> dict:
    return {
        "StackId": stack_id, "StackName": stack_name, "EventId": f"{logical}-{status}-{sec}",
        "LogicalResourceId": logical, "PhysicalResourceId": physical if physical is not None else f"phys-{logical}",
        "ResourceType": rtype, "Timestamp": T0 + dt.timedelta(seconds=sec), "ResourceStatus": status,
        **({"ResourceStatusReason": reason} if reason else {}),
    }


STACK = "AWS::CloudFormation::Stack"


def failing_scenario(root_id: str, root_name: str, ids: dict[str, str]) -> dict[str, list[dict]]:
    """Storage's FSx fails on a quota; Compute is cancelled; the root rolls back."""
    r = lambda *a, **k: ev(root_id, root_name, *a, **k)  # noqa: E731
    st_id, cp_id = ids["StorageStack"], ids["ComputeStack"]
    s = lambda *a, **k: ev(st_id, "storage", *a, **k)  # noqa: E731
    c = lambda *a, **k: ev(cp_id, "compute", *a, **k)  # noqa: E731
    return {
        root_id: [
            # an older, finished operation whose failure must not be reported again
            r(root_name, STACK, "UPDATE_IN_PROGRESS", -500, "User Initiated", physical=root_id),
            r("NetworkStack", STACK, "UPDATE_FAILED", -490, "old failure from last week", physical=ids["NetworkStack"]),
            r(root_name, STACK, "UPDATE_ROLLBACK_COMPLETE", -480, physical=root_id),
            r(root_name, STACK, "UPDATE_IN_PROGRESS", 0, "User Initiated", physical=root_id),
            r("StorageStack", STACK, "UPDATE_IN_PROGRESS", 1, physical=st_id),
            r("ComputeStack", STACK, "UPDATE_IN_PROGRESS", 6, physical=cp_id),
            r("StorageStack", STACK, "UPDATE_FAILED", 9,
              f"Embedded stack {st_id} was not successfully updated: The following resource(s) failed to "
              "update: [FsxFileSystem].", physical=st_id),
            r("ComputeStack", STACK, "UPDATE_FAILED", 9, "Resource update cancelled", physical=cp_id),
            r(root_name, STACK, "UPDATE_ROLLBACK_IN_PROGRESS", 10,
              "The following resource(s) failed to update: [ComputeStack, StorageStack].", physical=root_id),
            r(root_name, STACK, "UPDATE_ROLLBACK_COMPLETE", 12, physical=root_id),
        ],
        st_id: [
            s("storage", STACK, "UPDATE_IN_PROGRESS", 2, physical=st_id),
            s("FsxFileSystem", "AWS::FSx::FileSystem", "UPDATE_IN_PROGRESS", 3),
            s("FsxLogGroup", "AWS::Logs::LogGroup", "UPDATE_IN_PROGRESS", 3),
            s("FsxFileSystem", "AWS::FSx::FileSystem", "UPDATE_FAILED", 8, FSX_REASON),
            s("FsxLogGroup", "AWS::Logs::LogGroup", "UPDATE_FAILED", 8, "Resource update cancelled"),
            s("storage", STACK, "UPDATE_FAILED", 8, "The following resource(s) failed to update: [FsxFileSystem].",
              physical=st_id),
        ],
        cp_id: [
            c("compute", STACK, "UPDATE_IN_PROGRESS", 7, physical=cp_id),
            c("Cluster", "AWS::SageMaker::Cluster", "UPDATE_IN_PROGRESS", 7),
            c("Cluster", "AWS::SageMaker::Cluster", "UPDATE_FAILED", 9, "Resource update cancelled"),
            c("compute", STACK, "UPDATE_FAILED", 9, "The following resource(s) failed to update: [Cluster].",
              physical=cp_id),
        ],
    }


def inject(client, events: dict[str, list[dict]], statuses: dict[str, str] | None = None) -> None:
    """Answer DescribeStackEvents (and DescribeStacks status) for the given stack ids; the rest goes to moto."""
    asked: dict[str, str] = {}

    def remember(params, **_):
        asked["name"] = params.get("StackName", "")

    def find(name: str) -> str | None:
        for sid in events:
            if name == sid or (sid.startswith("arn:") and sid.split("/")[1] == name) or sid.endswith("/" + name):
                return sid
        return None

    def answer_events(**_):
        sid = find(asked.get("name", ""))
        if sid is None:
            return None
        newest_first = sorted(events[sid], key=lambda e: e["Timestamp"], reverse=True)
        return AWSResponse(None, 200, {}, None), {"StackEvents": newest_first, "ResponseMetadata": {}}

    client.meta.events.register("before-parameter-build.cloudformation.DescribeStackEvents", remember)
    client.meta.events.register("before-call.cloudformation.DescribeStackEvents", answer_events)
    if statuses:
        real_describe = client.describe_stacks

        def patched(**kw):
            data = real_describe(**kw)
            for st in data["Stacks"]:
                if st["StackId"] in statuses:
                    st["StackStatus"] = statuses[st["StackId"]]
            return data

        client.describe_stacks = patched


def make_nested_stacks(name: str, bucket: str) -> tuple[str, dict[str, str]]:
    """A real moto root stack with three nested stacks created from S3 TemplateURLs."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket)
    child = {"Resources": {"Param": {"Type": "AWS::SSM::Parameter",
                                     "Properties": {"Type": "String", "Value": "v",
                                                    "Name": {"Fn::Sub": "/t/${AWS::StackName}"}}}}}
    s3.put_object(Bucket=bucket, Key="t/child.json", Body=json.dumps(child))
    url = f"https://{bucket}.s3.{REGION}.amazonaws.com/t/child.json"
    root = {"Resources": {n: {"Type": STACK, "Properties": {"TemplateURL": url}}
                          for n in ("NetworkStack", "StorageStack", "ComputeStack")}}
    s3.put_object(Bucket=bucket, Key="t/root.json", Body=json.dumps(root))
    cfn = boto3.client("cloudformation", region_name=REGION)
    root_id = cfn.create_stack(StackName=name, TemplateURL=f"https://{bucket}.s3.{REGION}.amazonaws.com/t/root.json")["StackId"]
    ids = {r["LogicalResourceId"]: r["PhysicalResourceId"]
           for r in cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]}
    # moto names nested stacks; resolve to their ids (ARNs) like CloudFormation reports them
    ids = {k: cfn.describe_stacks(StackName=v)["Stacks"][0]["StackId"] for k, v in ids.items()}
    return root_id, ids


# --- pure analysis ---------------------------------------------------------------------------------


def test_analyse_picks_first_real_failure_and_drops_noise():
    root_id = "arn:aws:cloudformation:us-east-1:1:stack/r/1"
    ids = {"NetworkStack": "arn:aws:cloudformation:us-east-1:1:stack/r-Net/2",
           "StorageStack": "arn:aws:cloudformation:us-east-1:1:stack/r-Sto/3",
           "ComputeStack": "arn:aws:cloudformation:us-east-1:1:stack/r-Com/4"}
    evs = failing_scenario(root_id, "r", ids)
    since = aws_events.operation_start(sorted(evs[root_id], key=lambda e: e["Timestamp"]))
    assert since == T0
    stacks = [aws_events.StackEvents(p, sid, sorted([e for e in evs[sid] if e["Timestamp"] >= since],
                                                    key=lambda e: e["Timestamp"]))
              for p, sid in (("r", root_id), ("r/StorageStack", ids["StorageStack"]),
                             ("r/ComputeStack", ids["ComputeStack"]))]
    rc = aws_events.analyse(stacks, "r", since)
    assert [f.logical_id for f in rc.failures] == ["FsxFileSystem"]
    assert rc.root.stack_path == "r/StorageStack" and "quota exceeded" in rc.root.reason
    assert "check-quotas" in rc.root.hint


def test_embedded_failure_is_root_cause_when_nested_stack_never_ran():
    """If the nested stack left no events (template unreadable), the parent's line is the root cause."""
    root_id = "arn:aws:cloudformation:us-east-1:1:stack/r/1"
    events = [
        ev(root_id, "r", "r", STACK, "CREATE_IN_PROGRESS", 0, "User Initiated", physical=root_id),
        ev(root_id, "r", "Storage", STACK, "CREATE_FAILED", 2,
           "Embedded stack arn:aws:cloudformation:us-east-1:1:stack/r-Sto/9 was not successfully created: "
           "Template format error: S3 error: Access Denied", physical="arn:aws:cloudformation:us-east-1:1:stack/r-Sto/9"),
        ev(root_id, "r", "Net", STACK, "CREATE_FAILED", 3, "Resource creation cancelled"),
    ]
    rc = aws_events.analyse([aws_events.StackEvents("r", root_id, events)], "r", T0)
    assert len(rc.failures) == 1 and rc.root.logical_id == "Storage" and "Access Denied" in rc.root.reason


def test_stack_level_failure_is_reported_when_no_resource_failed():
    """A stack rejected before any resource ran (e.g. a parameter) still gets a root cause line."""
    root_id = "arn:aws:cloudformation:us-east-1:1:stack/r/1"
    events = [
        ev(root_id, "r", "r", STACK, "CREATE_IN_PROGRESS", 0, "User Initiated", physical=root_id),
        ev(root_id, "r", "r", STACK, "ROLLBACK_IN_PROGRESS", 1,
           "Parameter validation failed: parameter value use1-az9 for parameter name AvailabilityZoneId "
           "does not exist", physical=root_id),
        ev(root_id, "r", "r", STACK, "ROLLBACK_COMPLETE", 2, physical=root_id),
    ]
    rc = aws_events.analyse([aws_events.StackEvents("r", root_id, events)], "r", T0)
    assert len(rc.failures) == 1 and rc.root.status == "ROLLBACK_IN_PROGRESS"
    assert "AvailabilityZoneId" in rc.root.reason


def test_stack_level_summary_is_not_a_root_cause_when_a_resource_failed():
    root_id = "arn:aws:cloudformation:us-east-1:1:stack/r/1"
    events = [
        ev(root_id, "r", "r", STACK, "CREATE_IN_PROGRESS", 0, "User Initiated", physical=root_id),
        ev(root_id, "r", "Vpc", "AWS::EC2::VPC", "CREATE_FAILED", 1, "VPC limit exceeded"),
        ev(root_id, "r", "r", STACK, "ROLLBACK_IN_PROGRESS", 2, "Rollback requested by user.", physical=root_id),
    ]
    rc = aws_events.analyse([aws_events.StackEvents("r", root_id, events)], "r", T0)
    assert [f.logical_id for f in rc.failures] == ["Vpc"]


def test_no_failures_reports_none():
    rc = aws_events.analyse([aws_events.StackEvents("r", "id", [])], "r", None)
    assert rc.root is None and rc.as_dict()["root_cause"] is None


# --- through moto ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_stack_errors_finds_nested_root_cause(monkeypatch, capsys):
    root_id, ids = make_nested_stacks("hpq-t-err", "hpq-t-err-bucket")
    scenario = failing_scenario(root_id, "hpq-t-err", ids)
    real_client = aws_session.client

    def client(session, service, region=None):
        c = real_client(session, service, region)
        if service == "cloudformation":
            inject(c, scenario)
        return c

    patch_aws_client(monkeypatch, client)
    with pytest.raises(SystemExit) as exc:
        main(["stack-errors", "hpq-t-err", "--output", "json"])
    assert exc.value.code in (0, None)
    data = json.loads(capsys.readouterr().out)
    assert data["root_cause"]["resource"] == "FsxFileSystem"
    assert data["root_cause"]["stack"] == "hpq-t-err/StorageStack"
    assert [f["resource"] for f in data["failures"]] == ["FsxFileSystem"]
    with pytest.raises(SystemExit):
        main(["stack-errors", "hpq-t-err"])
    out = capsys.readouterr().out
    assert "root cause:" in out and "FsxFileSystem" in out and "cancelled" not in out
    # --all also reports last week's failure in the root
    with pytest.raises(SystemExit):
        main(["stack-errors", "hpq-t-err", "--all", "--output", "json"])
    data = json.loads(capsys.readouterr().out)
    assert [f["resource"] for f in data["failures"]] == ["NetworkStack", "FsxFileSystem"]


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_failed_operation_prints_root_cause_and_exits_1(capsys):
    """What deploy does after following: the failure's root cause, then exit 1."""
    root_id, ids = make_nested_stacks("hpq-t-fail", "hpq-t-fail-bucket")
    cfn = aws_session.client(aws_session.make_session(REGION), "cloudformation")
    inject(cfn, failing_scenario(root_id, "hpq-t-fail", ids), {root_id: "UPDATE_ROLLBACK_COMPLETE"})
    with pytest.raises(OperationFailed) as exc:
        printing.follow_and_explain(cfn, root_id, "hpq-t-fail", "update", poll_seconds=0.01)
    assert exc.value.exit_code == 1
    assert "UPDATE_ROLLBACK_COMPLETE" in str(exc.value) and "FsxFileSystem" in str(exc.value)
    err = capsys.readouterr().err
    assert "root cause:" in err and "hpq-t-fail/StorageStack/FsxFileSystem" in err and "check-quotas" in err


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_destroy_empties_versioned_bucket(capsys):
    """A stack's versioned bucket with object versions and delete markers is emptied, then the stack deleted."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="hpq-t-tmpl")
    tmpl = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {
        "BucketName": "hpq-t-versioned", "VersioningConfiguration": {"Status": "Enabled"}}}}}
    s3.put_object(Bucket="hpq-t-tmpl", Key="b.json", Body=json.dumps(tmpl))
    root = {"Resources": {"S3Stack": {"Type": STACK, "Properties": {
        "TemplateURL": f"https://hpq-t-tmpl.s3.{REGION}.amazonaws.com/b.json"}}}}
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="hpq-t-destroy", TemplateBody=json.dumps(root))
    # moto's CloudFormation ignores VersioningConfiguration; switch it on the way the template asks
    s3.put_bucket_versioning(Bucket="hpq-t-versioned", VersioningConfiguration={"Status": "Enabled"})
    for i in range(3):
        s3.put_object(Bucket="hpq-t-versioned", Key="lifecycle/on_create.sh", Body=f"v{i}".encode())
    s3.put_object(Bucket="hpq-t-versioned", Key="other", Body=b"x")
    s3.delete_object(Bucket="hpq-t-versioned", Key="other")  # leaves a delete marker
    versions = s3.list_object_versions(Bucket="hpq-t-versioned")
    total = len(versions.get("Versions", [])) + len(versions.get("DeleteMarkers", []))
    assert total == 5
    with pytest.raises(SystemExit) as exc:
        main(["destroy", "hpq-t-destroy", "--yes", "--empty-buckets", "--poll-seconds", "0.02", "--output", "json"])
    assert exc.value.code in (0, None)
    data = json.loads(capsys.readouterr().out)
    assert data["emptied"] == {"hpq-t-versioned": 5}
    assert data["status"] == "DELETE_COMPLETE"
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    if "hpq-t-versioned" in names:  # moto may leave the bucket itself; it must at least be empty
        left = s3.list_object_versions(Bucket="hpq-t-versioned")
        assert not left.get("Versions") and not left.get("DeleteMarkers")


def test_delete_failed_reason_gets_a_hint():
    assert "--empty-buckets" in aws_events.hint_for("The bucket you tried to delete is not empty")
    assert "wait" in aws_events.hint_for("resource sg-1 has a dependent object (DependencyViolation)")


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_stack_tree_walks_nested():
    root_id, ids = make_nested_stacks("hpq-t-tree", "hpq-t-tree-bucket")
    cfn = boto3.client("cloudformation", region_name=REGION)
    tree = aws_stacks.stack_tree(cfn, root_id, label="hpq-t-tree")
    assert tree[0].path == "hpq-t-tree" and tree[0].stack_id == root_id
    assert sorted(n.path for n in tree[1:]) == ["hpq-t-tree/ComputeStack", "hpq-t-tree/NetworkStack",
                                                "hpq-t-tree/StorageStack"]


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_ctrl_c_stops_following_not_the_stack(monkeypatch, capsys):
    """Ctrl-C while following: exit 130 with how to resume; the stack is untouched."""
    from hpq.cli import follow

    root_id, ids = make_nested_stacks("hpq-t-int", "hpq-t-int-bucket")
    cfn = aws_session.client(aws_session.make_session(REGION), "cloudformation")
    inject(cfn, {}, {root_id: "CREATE_IN_PROGRESS"})

    def interrupt(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(follow.time, "sleep", interrupt)
    with pytest.raises(follow.Interrupted) as exc:
        printing.follow_and_explain(cfn, root_id, "hpq-t-int", "create", poll_seconds=5)
    assert exc.value.exit_code == 130 and f"hpq status hpq-t-int --follow --region {REGION}" in str(exc.value)
    # Ctrl-C during the first poll (it reads every nested template) is the same clean stop
    monkeypatch.setattr(follow, "template_resource_count", lambda *_: interrupt(0))
    with pytest.raises(follow.Interrupted) as exc:
        printing.follow_and_explain(cfn, root_id, "hpq-t-int", "create", poll_seconds=5)
    assert "hpq status hpq-t-int --follow" in str(exc.value)
    assert boto3.client("cloudformation", region_name=REGION).describe_stacks(
        StackName="hpq-t-int")["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
