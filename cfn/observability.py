"""Observability stack (optional, off by default): Amazon Managed Prometheus + Managed Grafana.

Off by default because Managed Grafana needs IAM Identity Center, which many
accounts do not have; the root parameter EnableObservability flips it on.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, Ref, Sub, aps, grafana, iam

from hpq.cfn import common

GRAFANA_VERSION = "10.4"


@dataclass(frozen=True)
class ObservabilityConfig:
    pass


def build(cfg: ObservabilityConfig) -> common.Template:
    t = common.new_template("hpq observability: Managed Prometheus workspace and Managed Grafana (SSO).")
    common.cluster_name_param(t)
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
        Tags=common.tags(),
    ))
    graf = t.add_resource(grafana.Workspace(
        "GrafanaWorkspace", Name=Sub("${ClusterName}-grafana"), AccountAccessType="CURRENT_ACCOUNT",
        AuthenticationProviders=["AWS_SSO"], PermissionType="CUSTOMER_MANAGED", RoleArn=GetAtt(role, "Arn"),
        DataSources=["PROMETHEUS", "CLOUDWATCH"], GrafanaVersion=GRAFANA_VERSION,
        Description="hpq cluster dashboards",
    ))
    common.output(t, "PrometheusWorkspaceId", Ref(prom), "Managed Prometheus workspace ID.")
    common.output(t, "PrometheusEndpoint", GetAtt(prom, "PrometheusEndpoint"), "Remote-write/query endpoint.")
    common.output(t, "GrafanaUrl", Sub("https://${Endpoint}", Endpoint=GetAtt(graf, "Endpoint")),
                  "Managed Grafana URL (sign in with IAM Identity Center).")
    return t
