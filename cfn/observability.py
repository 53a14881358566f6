"""Observability stack (optional, off by default): Amazon Managed Prometheus + Managed Grafana.

Off by default because Managed Grafana needs IAM Identity Center, which many
accounts do not have; the root parameter EnableObservability flips it on.

Managed Grafana is not in every HyperPod region: CloudFormation has no ``AWS::Grafana::Workspace`` in 9 of
them (cfn-lint's per-region provider schemas, cfn/regions.py). There the stack is reduced to Managed
Prometheus: the workspace and its role are created only under the ``GrafanaInRegion`` condition, the
``GrafanaUrl`` output says it is not available, and ``hpq deploy``'s pre-flight says so before anything
is created.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, If, Ref, Sub, aps, grafana, iam

from hpq.cfn import common, regions

GRAFANA_VERSION = "10.4"
GRAFANA_ABSENT = "Managed Grafana is not available in this region (Managed Prometheus only)"


@dataclass(frozen=True)
class ObservabilityConfig:
    pass


def build(cfg: ObservabilityConfig) -> common.Template:
    t = common.new_template("hpq observability: Managed Prometheus workspace and Managed Grafana (SSO).")
    common.cluster_name_param(t)
    t.add_condition(regions.GRAFANA_CONDITION, regions.region_condition(regions.grafana_regions()))
    prom = t.add_resource(aps.Workspace("PrometheusWorkspace", Alias=Sub("${ClusterName}-metrics"),
                                        Tags=common.tags()))
    role = t.add_resource(iam.Role(
        "GrafanaRole", AssumeRolePolicyDocument=common.assume_role("grafana"),
        Policies=[iam.Policy(PolicyName="hpq-grafana", PolicyDocument={"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels",
                                           "aps:GetMetricMetadata", "aps:DescribeWorkspace"],
             "Resource": GetAtt(prom, "Arn")},
            {"Effect": "Allow", "Action": ["aps:ListWorkspaces"], "Resource": "*"},
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
    common.output(t, "PrometheusWorkspaceId", Ref(prom), "Managed Prometheus workspace ID.")
    common.output(t, "PrometheusEndpoint", GetAtt(prom, "PrometheusEndpoint"), "Remote-write/query endpoint.")
    common.output(t, "GrafanaUrl", If(regions.GRAFANA_CONDITION,
                                      Sub("https://${Endpoint}", Endpoint=GetAtt(graf, "Endpoint")),
                                      GRAFANA_ABSENT),
                  "Managed Grafana URL (sign in with IAM Identity Center), where the region has Managed Grafana.")
    return t
