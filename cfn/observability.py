"""Observability stack (optional, off by default): Amazon Managed Prometheus, hpq's alert rules, Managed Grafana.

The root parameter EnableObservability turns it on. What it creates:
- an AMP workspace (``AWS::APS::Workspace``) tagged ``SageMaker=true`` as AWS's EKS observability module tags it
  (awslabs/awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf/
  modules/observability/prometheus_workspace.tf);
- a rule groups namespace (``AWS::APS::RuleGroupsNamespace``) whose ``Data`` is observability/alerts/hpq-alerts.yaml
  verbatim: AMP takes "the same format as a rules file in standalone Prometheus" (AMP user guide, AMP-Ruler.html;
  CloudFormation reference aws-resource-aps-rulegroupsnamespace.html: Data a String, Name 1-64, Workspace the
  workspace ARN);
- EKS variants: the ``amazon-sagemaker-hyperpod-observability`` EKS add-on (``AWS::EKS::Addon``), configured as
  AWS's module configures it (modules/observability/eks_addon.tf: ampWorkspace endpoint and ARN, a metricsProvider
  level per family at scrapeInterval 30, the pod identity association for the service account
  ``hyperpod-observability-operator-otel-collector``), created after the HyperPod cluster as AWS's module is
  (hyperpod-eks-tf/main.tf: ``depends_on = [module.hyperpod_cluster ...]``), with a pod identity role
  (iam_roles.tf) that may ``aps:RemoteWrite`` to this workspace only (AWS's grants ``workspace/*``);
- Managed Grafana where the region has it (``GrafanaInRegion``; cfn/regions.py).

Slurm variants: the nodes remote-write with the HyperPod execution role (the Extensions README: "the cluster
execution role gets aps:RemoteWrite on the workspace ARN"). The IAM stack creates that grant with
:func:`add_remote_write_grant`, from this stack's ``PrometheusWorkspaceId`` output (the ``ws-...`` ID), and the
S3 stack writes ``PrometheusRemoteWriteUrl`` into hpq-cluster.json for the lifecycle's installer
(lifecycle/observability.py).
Every ``aps:`` action any role here gets names this workspace's ARN (tests/observability/test_observability_cfn.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from troposphere import GetAtt, If, Ref, Sub, aps, eks, grafana, iam

from hpq.cfn import common, regions
from hpq.observability import ALERT_DIR

GRAFANA_VERSION = "10.4"
GRAFANA_ABSENT = "Managed Grafana is not available in this region (Managed Prometheus only)"
ALERTS_FILE = Path(ALERT_DIR) / "hpq-alerts.yaml"
RULES_NAMESPACE = "hpq-alerts"
# The EKS add-on and its collector's service account (AWS's eks_addon.tf).
ADDON_NAME = "amazon-sagemaker-hyperpod-observability"
ADDON_SERVICE_ACCOUNT = "hyperpod-observability-operator-otel-collector"
# AWS's module's defaults (modules/observability/variables.tf), inference BASIC as it hard-codes.
ADDON_METRIC_LEVELS = {
    "trainingMetrics": "BASIC", "inferenceMetrics": "BASIC", "taskGovernanceMetrics": "DISABLED",
    "scalingMetrics": "DISABLED", "customMetrics": "BASIC", "nodeMetrics": "BASIC",
    "acceleratedComputeMetrics": "BASIC", "networkMetrics": "DISABLED",
}
ADDON_SCRAPE_INTERVAL_S = 30

# Output names (the root re-exports them; hpq observe reads them).
OUT_WORKSPACE_ID = "PrometheusWorkspaceId"
OUT_WORKSPACE_ARN = "PrometheusWorkspaceArn"
OUT_ENDPOINT = "PrometheusEndpoint"
OUT_REMOTE_WRITE_URL = "PrometheusRemoteWriteUrl"
OUT_QUERY_URL = "PrometheusQueryUrl"
OUT_GRAFANA_URL = "GrafanaUrl"
OUT_RULES_NAMESPACE = "AlertRulesNamespace"

# The IAM stack's parameter and condition for the Slurm nodes' grant: the workspace ID, from which the grant builds
# the ARN in this partition, region and account (IAM's format for the aps workspace resource type).
WORKSPACE_ID_PARAM = "PrometheusWorkspaceId"
HAS_WORKSPACE = "HasPrometheusWorkspace"
# An AMP workspace ID (ws-<uuid>, the tail of RuleGroupsNamespace.Workspace's ARN pattern), or "" (observability off).
WORKSPACE_ID_PATTERN = r"^$|^ws-[a-zA-Z0-9-]+$"
WORKSPACE_ARN_FROM_ID = f"workspace/${{{WORKSPACE_ID_PARAM}}}"


@dataclass(frozen=True)
class ObservabilityConfig:
    eks: bool = False  # EKS variants: the HyperPod observability add-on and its pod identity role


def alert_rules() -> str:
    """hpq's rules file, the namespace's Data as is."""
    return ALERTS_FILE.read_text(encoding="utf-8")


def remote_write_statement(workspace_arn) -> dict:
    """The one statement that lets a role write samples: ``aps:RemoteWrite`` on one workspace ARN."""
    return {"Sid": "PrometheusRemoteWrite", "Effect": "Allow", "Action": ["aps:RemoteWrite"],
            "Resource": workspace_arn}


def add_remote_write_grant(t: common.Template, role: iam.Role) -> None:
    """The IAM stack's optional grant for the Slurm nodes: a parameter with the workspace ID (empty: none) and a
    policy on the execution role, created only when the ID is given."""
    ws = common.param(t, WORKSPACE_ID_PARAM, "ID of the Observability stack's AMP workspace the nodes "
                      "remote-write to; empty when observability is off.", Default="",
                      AllowedPattern=WORKSPACE_ID_PATTERN, ConstraintDescription="an AMP workspace ID, or empty.")
    t.add_condition(HAS_WORKSPACE, {"Fn::Not": [{"Fn::Equals": [ws, ""]}]})
    t.add_resource(iam.PolicyType(
        "ExecutionRoleRemoteWrite", PolicyName="hpq-prometheus-remote-write", Roles=[Ref(role)],
        PolicyDocument={"Version": "2012-10-17", "Statement": [
            remote_write_statement(common.arn("aps", WORKSPACE_ARN_FROM_ID))]},
        Condition=HAS_WORKSPACE,
    ))


def addon_configuration() -> Sub:
    """The add-on's configuration values (a JSON string), as AWS's eks_addon.tf writes them."""
    doc = {
        "ampWorkspace": {"prometheusEndpoint": "${PrometheusWorkspace.PrometheusEndpoint}",
                         "arn": "${PrometheusWorkspace.Arn}"},
        "metricsProvider": {family: {"level": level, "scrapeInterval": ADDON_SCRAPE_INTERVAL_S}
                            for family, level in ADDON_METRIC_LEVELS.items()},
        "logging": {"enabled": False},
    }
    return Sub(json.dumps(doc, sort_keys=True, separators=(",", ":")))


def _add_eks_addon(t: common.Template, workspace: aps.Workspace) -> None:
    # The same constraints as the Helm, HyperPod and Validation stacks' parameters of the same values.
    cluster = common.param(t, "EksClusterName", "EKS cluster the HyperPod cluster is attached to.", MinLength=1,
                           MaxLength=100, AllowedPattern=r"^[0-9A-Za-z][A-Za-z0-9_-]*$",
                           ConstraintDescription="an EKS cluster name.")
    common.param(t, "EksClusterArn", "ARN of that EKS cluster (the add-on role's trust condition).",
                 AllowedPattern=r"^arn:aws[a-z-]*:eks:[a-z0-9-]+:[0-9]{12}:cluster/.+$",
                 ConstraintDescription="an EKS cluster ARN.")
    common.param(t, "HyperPodClusterArn", "HyperPod cluster ARN: the add-on is created after the cluster, as AWS's "
                 "module creates it.", AllowedPattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/.+$",
                 ConstraintDescription="a SageMaker cluster ARN.")
    role = t.add_resource(iam.Role(
        "AddonRole",
        AssumeRolePolicyDocument={"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {"aws:SourceAccount": Ref("AWS::AccountId"),
                                           "aws:SourceArn": Ref("EksClusterArn")}},
        }]},
        Policies=[iam.Policy(PolicyName="hpq-prometheus-remote-write", PolicyDocument={
            "Version": "2012-10-17", "Statement": [remote_write_statement(GetAtt(workspace, "Arn"))]})],
        Tags=common.tags(),
    ))
    t.add_resource(eks.Addon(
        "ObservabilityAddon", AddonName=ADDON_NAME, ClusterName=cluster, ResolveConflicts="OVERWRITE",
        ConfigurationValues=addon_configuration(),
        PodIdentityAssociations=[eks.PodIdentityAssociationProperty(
            RoleArn=GetAtt(role, "Arn"), ServiceAccount=ADDON_SERVICE_ACCOUNT)],
        Tags=common.tags(extra={"SageMaker": "true", "HyperPodCluster": Ref("HyperPodClusterArn")}),
    ))


def build(cfg: ObservabilityConfig) -> common.Template:
    t = common.new_template("hpq observability: Managed Prometheus workspace with hpq's alert rules"
                            + (", the HyperPod observability EKS add-on" if cfg.eks else "")
                            + " and Managed Grafana (SSO) where offered.")
    common.cluster_name_param(t)
    t.add_condition(regions.GRAFANA_CONDITION, regions.region_condition(regions.grafana_regions()))
    prom = t.add_resource(aps.Workspace("PrometheusWorkspace", Alias=Sub("${ClusterName}-metrics"),
                                        Tags=common.tags(extra={"SageMaker": "true"})))
    rules = t.add_resource(aps.RuleGroupsNamespace(
        "AlertRules", Name=RULES_NAMESPACE, Workspace=GetAtt(prom, "Arn"), Data=alert_rules(), Tags=common.tags()))
    if cfg.eks:
        _add_eks_addon(t, prom)
    role = t.add_resource(iam.Role(
        "GrafanaRole", AssumeRolePolicyDocument=common.assume_role("grafana"),
        Policies=[iam.Policy(PolicyName="hpq-grafana", PolicyDocument={"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels",
                                           "aps:GetMetricMetadata", "aps:DescribeWorkspace"],
             "Resource": GetAtt(prom, "Arn")},
            {"Effect": "Allow", "Action": ["cloudwatch:GetMetricData", "cloudwatch:ListMetrics",
                                           "cloudwatch:DescribeAlarms"], "Resource": "*"},
        ]})],
        Tags=common.tags(), Condition=regions.GRAFANA_CONDITION,
    ))
    graf = t.add_resource(grafana.Workspace(
        "GrafanaWorkspace", Name=Sub("${ClusterName}-grafana"), AccountAccessType="CURRENT_ACCOUNT",
        AuthenticationProviders=["AWS_SSO"], PermissionType="CUSTOMER_MANAGED", RoleArn=GetAtt(role, "Arn"),
        DataSources=["PROMETHEUS", "CLOUDWATCH"], GrafanaVersion=GRAFANA_VERSION,
        Description="hpq cluster dashboards", Condition=regions.GRAFANA_CONDITION,
    ))
    endpoint = GetAtt(prom, "PrometheusEndpoint")  # https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/
    # Ref returns a registry resource's primaryIdentifier, and AWS::APS::Workspace's is /properties/Arn; the
    # ws-... ID is the read-only attribute WorkspaceId (AWS's resource provider schema as cfn-lint ships it:
    # cfnlint/data/schemas/providers/us-east-1.json -> data/schemas/resources/<digest>.json). The IAM stack's
    # parameter takes the ID (WORKSPACE_ID_PATTERN); tests/cfn/test_cfn_ref_shapes.py checks every Ref so.
    common.output(t, OUT_WORKSPACE_ID, GetAtt(prom, "WorkspaceId"), "Managed Prometheus workspace ID.")
    common.output(t, OUT_WORKSPACE_ARN, GetAtt(prom, "Arn"), "Managed Prometheus workspace ARN.")
    common.output(t, OUT_ENDPOINT, endpoint, "Workspace endpoint (ends in '/').")
    common.output(t, OUT_REMOTE_WRITE_URL, Sub("${PrometheusWorkspace.PrometheusEndpoint}api/v1/remote_write"),
                  "Remote-write URL (SigV4, service aps).")
    common.output(t, OUT_QUERY_URL, Sub("${PrometheusWorkspace.PrometheusEndpoint}api/v1/query"),
                  "Query URL (SigV4, service aps; aps:QueryMetrics).")
    common.output(t, OUT_RULES_NAMESPACE, Ref(rules), "Rule groups namespace holding hpq's alert rules.")
    common.output(t, OUT_GRAFANA_URL, If(regions.GRAFANA_CONDITION,
                                         Sub("https://${Endpoint}", Endpoint=GetAtt(graf, "Endpoint")),
                                         GRAFANA_ABSENT),
                  "Managed Grafana URL (sign in with IAM Identity Center), where the region has Managed Grafana.")
    return t
