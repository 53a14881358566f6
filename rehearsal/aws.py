"""The emulated AWS account: an embedded moto server, the real deploy path, and the stand-ins realized.

1. moto runs in this process (``ThreadedMotoServer``) on 127.0.0.1 for hpq itself and on the
   rehearsal bridge's gateway address for the nodes (two listeners, one account state).
2. ``hpq deploy``'s library path (``aws/deploy.deploy_stack``) uploads the release and creates
   the stack, with the moto rendition of the templates chosen explicitly (``rendition.moto_compatible``).
3. What moto's CloudFormation cannot create, the rehearsal creates the way CloudFormation would,
   from the REAL templates' properties (``cfn_eval``): the FSx filesystem through moto's FSx API
   (with the exact ``hpq:cluster-name`` tag, so the lifecycle's discovery runs for real), custom
   resources by running their real handler code (``cfn/handlers``) against moto, and the
   ``AWS::SageMaker::Cluster`` request, which becomes the cluster the HyperPod stand-in provisions.

moto's gaps are fixed before the server starts, with the fixes every moto of hpq's gets (standins/moto.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hpq.aws import events, stacks
from hpq.aws.session import client
from hpq.errors import OperationFailed
from hpq.rehearsal import cfn_eval, plan
from hpq.standins import moto, rendition


class AwsStageError(OperationFailed):
    pass


# ---------------------------------------------------------------------------- moto, embedded


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedMoto:
    """moto in this process: ``url`` for hpq on this host, ``node_url`` for the nodes on the bridge."""

    node_host: str
    url: str = ""
    node_url: str = ""
    _servers: list[Any] = field(default_factory=list)

    def start(self) -> EmbeddedMoto:
        import logging
        import warnings

        from moto.moto_server.threaded_moto_server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        logging.getLogger("moto").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module=r"moto\..*")
        moto.apply()
        for host in ("127.0.0.1", self.node_host):
            srv = ThreadedMotoServer(ip_address=host, port=_free_port(host), verbose=False)
            srv.start()
            self._servers.append(srv)
        h, p = self._servers[0].get_host_and_port()
        self.url = f"http://{h}:{p}"
        h, p = self._servers[1].get_host_and_port()
        self.node_url = f"http://{h}:{p}"
        return self

    def stop(self) -> None:
        for srv in self._servers:
            try:
                srv.stop()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
        self._servers.clear()


AWS_ENV_KEYS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED")


@contextmanager
def environment(url: str, region: str = plan.REGION) -> Iterator[None]:
    """This process's AWS settings point at the emulated account for the block, then are restored.

    The same variables a user sets to aim ``hpq deploy`` at an endpoint (AWS_ENDPOINT_URL), with dummy
    credentials and no config files, so nothing of the user's real AWS setup is read or reached.
    """
    saved = {k: os.environ.get(k) for k in AWS_ENV_KEYS}
    for k in AWS_ENV_KEYS:
        os.environ.pop(k, None)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": region, "AWS_REGION": region, "AWS_CONFIG_FILE": "/dev/null",
                       "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def session(region: str = plan.REGION) -> Any:
    """A boto3 session; inside ``environment`` it talks to the emulated account only."""
    import boto3

    return boto3.Session(region_name=region)


# ---------------------------------------------------------------------------- deploy


@dataclass
class Deployed:
    """The result of the emulated deploy: real templates, moto's stacks, realized stand-ins."""

    variant: str
    stack_name: str
    stack_id: str
    parameters: dict[str, str]
    templates: dict[str, dict[str, Any]]
    realized: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)  # the AWS::SageMaker::Cluster request
    cluster_arn: str = ""
    eks: dict[str, Any] = field(default_factory=dict)
    release_version: str = ""
    fsx_deleted: list[str] = field(default_factory=list)  # filesystems deleted after the deploy (--without-fsx)


def deploy(sess: Any, variant: str, stack_name: str, bucket: str, params: dict[str, str],
           on_note: Any = None, timeout: float = 300.0, realizers: dict[str, Realize] | None = None) -> Deployed:
    """``hpq deploy VARIANT BUCKET --emulate moto`` as a library call, followed to the end. ``realizers``: resource
    type -> what creates it from its evaluated properties (the attributes CloudFormation would return), for types
    the rehearsal runs a stand-in of (the AMP workspace with ``--observability``)."""
    import hpq.aws.deploy

    s3 = client(sess, "s3")
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": sess.region_name})
    # moto serves Service Quotas for VPCs only (HTTP 500 for the rest): the deploy's quota step would only say
    # "not checked" for each; the rehearsal says once that it skips it.
    if on_note:
        on_note("quota check skipped: the emulated account has no Service Quotas for SageMaker or FSx")
    dep = hpq.aws.deploy.deploy_stack(sess, variant, bucket, stack_name, "small", params,
                                  transform=lambda v, t: rendition.moto_compatible(v, t), on_note=on_note,
                                  quotas=False)
    cfn = client(sess, "cloudformation")
    deadline = time.time() + timeout
    info = stacks.describe(cfn, dep.submit.stack_id)
    while not stacks.is_terminal(info.status):
        if time.time() > deadline:
            raise AwsStageError(f"stack {stack_name} still {info.status} after {timeout:.0f}s in the emulated account")
        time.sleep(0.2)
        info = stacks.describe(cfn, dep.submit.stack_id)
    if stacks.is_failed(info.status):
        rc = events.root_cause(cfn, dep.submit.stack_id, label=stack_name)
        detail = f": {rc.root.logical_id}: {rc.root.reason}" if rc.root else ""
        raise AwsStageError(f"emulated deploy of {stack_name} ended {info.status}{detail}")
    real = hpq.aws.deploy.synthesize(variant, "small", params)
    out = Deployed(variant, stack_name, dep.submit.stack_id, dict(dep.parameters), real,
                   release_version=dep.release.version)
    Realizer(sess, out, realizers).run()
    return out


def delete_filesystems(sess: Any, deployed: Deployed) -> list[str]:
    """Delete the deployed FSx filesystem(s) through the FSx API, as a user who removes one in the console does.

    What a cluster meets when its filesystem was deleted out of band (``--without-fsx``): the stack and its
    outputs still name it, HyperPod still runs OnCreate on every node, and the lifecycle's lookup by the
    exact ``hpq:cluster-name`` tag finds nothing (FSx API Reference, DeleteFileSystem: the filesystem goes
    to DELETING, then leaves DescribeFileSystems; the lifecycle skips DELETING ones either way).
    """

    fsx = client(sess, "fsx")
    for (fname, logical), attrs in deployed.realized.items():
        if deployed.templates[fname]["Resources"][logical]["Type"] == "AWS::FSx::FileSystem":
            fsx.delete_file_system(FileSystemId=attrs["Ref"])
            deployed.fsx_deleted.append(attrs["Ref"])
            deployed.notes.append(f"AWS::FSx::FileSystem {logical}: {attrs['Ref']} deleted after the deploy "
                                  "(--without-fsx): no filesystem carries the cluster's tag; the stack's outputs "
                                  "still name it, as on AWS after a delete outside CloudFormation")
    return deployed.fsx_deleted


# ---------------------------------------------------------------------------- realization


Realize = Callable[[dict[str, Any]], dict[str, Any]]


class Realizer:
    """Evaluates the real templates against moto's stacks and creates what moto only stubbed."""

    def __init__(self, sess: Any, deployed: Deployed, realizers: dict[str, Realize] | None = None):
        self.sess = sess
        self.d = deployed
        self.realizers = dict(realizers or {})
        self.cfn = client(sess, "cloudformation")
        self.region = sess.region_name
        self.scopes: dict[str, cfn_eval.StackScope] = {}
        self.stack_ids: dict[str, str] = {"root.json": deployed.stack_id}
        self._physical: dict[str, dict[str, str]] = {}
        self._outputs: dict[str, dict[str, Any]] = {}

    def client(self, service: str) -> Any:
        return client(self.sess, service)

    # ------------------------------------------------------------------ scopes

    def pseudo(self, fname: str) -> dict[str, Any]:
        stack_id = self.stack_ids.get(fname, "")
        return {"AWS::Region": self.region, "AWS::AccountId": plan.ACCOUNT, "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com", "AWS::StackId": stack_id,
                "AWS::StackName": stack_id.split("/")[1] if stack_id.count("/") >= 2 else self.d.stack_name,
                "AWS::NotificationARNs": []}

    def scope(self, fname: str) -> cfn_eval.StackScope:
        if fname in self.scopes:
            return self.scopes[fname]
        tmpl = self.d.templates[fname]
        if fname == "root.json":
            params: dict[str, Any] = dict(self.d.parameters)
        else:
            root = self.scope("root.json")
            logical = self.nested_logical(fname)
            props = root.template["Resources"][logical]["Properties"]
            params = root.evaluate(props.get("Parameters") or {})
            self.stack_ids[fname] = self.physical("root.json").get(logical, "")
        sc = cfn_eval.StackScope(fname, tmpl, params, self.pseudo(fname),
                                 ref=lambda lg, f=fname: self.ref(f, lg),
                                 getatt=lambda lg, attr, f=fname: self.getatt(f, lg, attr))
        self.scopes[fname] = sc
        return sc

    def nested_logical(self, fname: str) -> str:
        for logical, res in self.d.templates["root.json"]["Resources"].items():
            if res["Type"] == "AWS::CloudFormation::Stack":
                url = json.dumps(res["Properties"].get("TemplateURL"))
                if f"/{fname}" in url:
                    return logical
        raise cfn_eval.EvalError(f"no nested stack in root.json is built from {fname}")

    def nested_file(self, logical: str) -> str:
        res = self.d.templates["root.json"]["Resources"][logical]
        url = json.dumps(res["Properties"].get("TemplateURL"))
        for fname in self.d.templates:
            if f"/{fname}" in url:
                return fname
        raise cfn_eval.EvalError(f"nested stack {logical}: template not found")

    def physical(self, fname: str) -> dict[str, str]:
        if fname not in self._physical:
            stack_id = self.stack_ids.get(fname) or self.scope(fname).pseudo["AWS::StackId"]

            self._physical[fname] = {r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
                                     for r in stacks.list_resources(self.cfn, stack_id)}
        return self._physical[fname]

    def outputs(self, fname: str) -> dict[str, Any]:
        """The stack's outputs: moto's where it computed a real value, else evaluated from the real template
        (outputs built from a stand-in are placeholders in moto's copy)."""
        if fname not in self._outputs:
            sc = self.scope(fname)

            # A nested stack moto never created (an optional stack: the moto copy leaves conditional resources
            # out) has no outputs there: every output is evaluated from the real template.
            created = fname != "root.json" and bool(self.stack_ids.get(fname))
            moto = stacks.describe(self.cfn, self.stack_ids[fname]).outputs if created else {}
            out: dict[str, Any] = {}
            for key, spec in (sc.template.get("Outputs") or {}).items():
                if "Condition" in spec and not sc.condition(spec["Condition"]):
                    continue
                value = moto.get(key)
                if value is None or "moto-" in str(value) or "stand-in for" in str(value):
                    value = sc.evaluate(spec["Value"])
                out[key] = value
            self._outputs[fname] = out
        return self._outputs[fname]

    # ------------------------------------------------------------------ resources

    def rtype(self, fname: str, logical: str) -> str:
        return self.d.templates[fname]["Resources"][logical]["Type"]

    def is_stub(self, fname: str, logical: str) -> bool:
        t = self.rtype(fname, logical)  # what the moto rendition swapped for a stand-in, plus the generic custom type
        return rendition.is_stub_only(t) or t == "AWS::CloudFormation::CustomResource"

    def ref(self, fname: str, logical: str) -> Any:
        if self.is_stub(fname, logical):
            return self.realize(fname, logical)["Ref"]
        phys = self.physical(fname).get(logical)
        if phys is None:
            raise cfn_eval.EvalError(f"{fname}: {logical} was not created by the emulated deploy")
        return phys

    def getatt(self, fname: str, logical: str, attr: str) -> Any:
        rtype = self.rtype(fname, logical)
        if rtype == "AWS::CloudFormation::Stack" and attr.startswith("Outputs."):
            return self.outputs(self.nested_file(logical))[attr[len("Outputs."):]]
        if self.is_stub(fname, logical):
            attrs = self.realize(fname, logical)
            if attr not in attrs:
                raise cfn_eval.EvalError(f"{fname}: {logical} ({rtype}) has no attribute {attr} in the rehearsal")
            return attrs[attr]
        phys = self.ref(fname, logical)
        if rtype == "AWS::IAM::Role" and attr == "Arn":
            return self.client("iam").get_role(RoleName=phys)["Role"]["Arn"]
        if rtype == "AWS::S3::Bucket" and attr == "Arn":
            return f"arn:aws:s3:::{phys}"
        if rtype == "AWS::Logs::LogGroup" and attr == "Arn":
            return f"arn:aws:logs:{self.region}:{plan.ACCOUNT}:log-group:{phys}:*"
        if rtype == "AWS::EC2::SecurityGroup" and attr == "GroupId":
            return phys
        if rtype == "AWS::KMS::Key" and attr in ("Arn", "KeyId"):
            # Ref is the key id; the ARN's documented form (moto's DescribeKey cannot read a policy its own
            # CloudFormation stored as an object, so it is built here as for S3 and Logs).
            return f"arn:aws:kms:{self.region}:{plan.ACCOUNT}:key/{phys}" if attr == "Arn" else phys
        raise cfn_eval.EvalError(f"{fname}: GetAtt {logical}.{attr} ({rtype}) is not known to the rehearsal")

    def realize(self, fname: str, logical: str) -> dict[str, Any]:
        key = (fname, logical)
        if key in self.d.realized:
            return self.d.realized[key]
        rtype = self.rtype(fname, logical)
        sc = self.scope(fname)
        res = sc.template["Resources"][logical]
        if rtype == "AWS::FSx::FileSystem":
            attrs = self._fsx(sc.evaluate(res.get("Properties") or {}))
        elif rtype == "AWS::Lambda::Function":
            name = f"{sc.pseudo['AWS::StackName']}-{logical}"[:64]
            attrs = {"Ref": name, "Arn": f"arn:aws:lambda:{self.region}:{plan.ACCOUNT}:function:{name}"}
        elif rtype.startswith("Custom::") or rtype == "AWS::CloudFormation::CustomResource":
            attrs = self._custom(fname, logical, sc)
        elif rtype == "AWS::SageMaker::Cluster":
            attrs = self._cluster(sc.evaluate(res.get("Properties") or {}))
        elif rtype == "AWS::EKS::Cluster":
            attrs = self._eks(sc.evaluate(res.get("Properties") or {}))
        elif rtype in self.realizers:
            attrs = self.realizers[rtype](sc.evaluate(res.get("Properties") or {}))
        elif rtype == "AWS::Grafana::Workspace":
            # Managed Grafana needs IAM Identity Center: nothing stands in for it. Its Endpoint attribute in the
            # documented form (g-<id>.grafana-workspace.<region>.amazonaws.com) so the outputs evaluate.
            gid = "g-" + hashlib.sha256(f"{self.d.stack_id}/{logical}".encode()).hexdigest()[:10]
            attrs = {"Ref": gid, "Id": gid, "Endpoint": f"{gid}.grafana-workspace.{self.region}.amazonaws.com"}
            self.d.notes.append(f"{rtype} {logical}: not created (Managed Grafana needs IAM Identity Center; "
                                "the dashboards are checked against the workspace's data instead)")
        else:
            name = f"{sc.pseudo['AWS::StackName']}-{logical}"
            attrs = {"Ref": name, "Arn": f"arn:aws:{rtype.split('::')[1].lower()}:{self.region}:"
                                         f"{plan.ACCOUNT}:{logical.lower()}/{name}"}
            self.d.notes.append(f"{rtype} {logical}: not created (no API for it in the rehearsal)")
        self.d.realized[key] = attrs
        return attrs

    def _fsx(self, props: dict[str, Any]) -> dict[str, Any]:
        fsx = self.client("fsx")
        kw = {k: props[k] for k in ("FileSystemType", "StorageCapacity", "StorageType", "SubnetIds",
                                    "SecurityGroupIds", "Tags", "LustreConfiguration", "FileSystemTypeVersion")
              if k in props}
        kw["StorageCapacity"] = int(kw["StorageCapacity"])
        lustre = dict(kw.get("LustreConfiguration") or {})
        if "PerUnitStorageThroughput" in lustre:
            lustre["PerUnitStorageThroughput"] = int(lustre["PerUnitStorageThroughput"])
        kw["LustreConfiguration"] = lustre
        fs = fsx.create_file_system(**kw)["FileSystem"]
        fs = fsx.describe_file_systems(FileSystemIds=[fs["FileSystemId"]])["FileSystems"][0]
        mount = (fs.get("LustreConfiguration") or {}).get("MountName", "")
        return {"Ref": fs["FileSystemId"], "DNSName": fs["DNSName"], "LustreMountName": mount,
                "Id": fs["FileSystemId"], "ResourceARN": fs.get("ResourceARN", "")}

    def _custom(self, fname: str, logical: str, sc: cfn_eval.StackScope) -> dict[str, Any]:
        res = sc.template["Resources"][logical]
        token = (res.get("Properties") or {}).get("ServiceToken")
        fn_logical = token.get("Fn::GetAtt", [None])[0] if isinstance(token, dict) else None
        code = ""
        if fn_logical:
            code = ((sc.template["Resources"].get(fn_logical) or {}).get("Properties") or {}).get("Code", {}) \
                .get("ZipFile", "")
        handler = _handler_for(code)
        props = sc.evaluate({k: v for k, v in (res.get("Properties") or {}).items() if k != "ServiceToken"})
        if handler == "bucket_cleanup":
            from hpq.cfn.handlers import bucket_cleanup

            event = {"RequestType": "Create", "ResourceProperties": props, "LogicalResourceId": logical,
                     "StackId": sc.pseudo["AWS::StackId"], "RequestId": "rehearsal"}
            physical, data = bucket_cleanup.apply(event, self.client("s3"))
            return {"Ref": physical, **data}
        why = ("its helm handler needs a Kubernetes API server, and no API server runs in a rehearsal"
               if handler == "helm" else f"handler {handler or 'unknown'} needs a service the rehearsal does not emulate")
        self.d.notes.append(f"{res['Type']} {logical}: not run ({why})")
        return {"Ref": f"{logical}-rehearsal"}

    def _cluster(self, props: dict[str, Any]) -> dict[str, Any]:
        name = props["ClusterName"]
        cluster_id = hashlib.sha256(f"{self.d.stack_id}/{name}".encode()).hexdigest()[:12]
        arn = f"arn:aws:sagemaker:{self.region}:{plan.ACCOUNT}:cluster/{cluster_id}"
        self.d.cluster = props
        self.d.cluster_arn = arn
        return {"Ref": arn, "ClusterArn": arn, "ClusterStatus": "InService", "ClusterName": name}

    def _eks(self, props: dict[str, Any]) -> dict[str, Any]:
        eks = self.client("eks")
        vpc = props.get("ResourcesVpcConfig") or {}
        cl = eks.create_cluster(name=props["Name"], roleArn=props.get("RoleArn", ""), version=str(props.get("Version", "")),
                                resourcesVpcConfig={"subnetIds": vpc.get("SubnetIds", []),
                                                    "securityGroupIds": vpc.get("SecurityGroupIds", [])})["cluster"]
        self.d.eks = {"name": cl["name"], "arn": cl["arn"], "endpoint": cl.get("endpoint", ""),
                      "version": cl.get("version", "")}
        ca = (cl.get("certificateAuthority") or {}).get("data", "")
        return {"Ref": cl["name"], "Arn": cl["arn"], "Endpoint": cl.get("endpoint", ""),
                "CertificateAuthorityData": ca, "ClusterSecurityGroupId": "sg-rehearsal",
                "OpenIdConnectIssuerUrl": "https://oidc.eks.rehearsal.invalid/id/0"}

    def run(self) -> None:
        """Create every stand-in of every stack (CloudFormation creates all resources, referenced or not)."""
        root = self.scope("root.json")
        for logical, res in root.template["Resources"].items():
            if res["Type"] != "AWS::CloudFormation::Stack" or not root.resource_exists(logical):
                continue
            fname = self.nested_file(logical)
            sc = self.scope(fname)
            for inner, _ires in sc.template["Resources"].items():
                if self.is_stub(fname, inner) and sc.resource_exists(inner):
                    self.realize(fname, inner)
        self.d.outputs = self.outputs("root.json")


def _handler_for(code: str) -> str | None:
    """Which cfn/handlers module a Lambda's inline code is (they are embedded verbatim)."""
    if not code:
        return None
    from hpq.cfn import common

    for name in ("bucket_cleanup", "helm"):
        try:
            if common.handler_source(name) == code:
                return name
        except (OSError, ValueError):
            continue
    return None
