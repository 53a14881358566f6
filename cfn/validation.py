"""Validation stack (optional): after the cluster exists, route HyperPod events to an SNS topic.

Post-deploy signal without logging in: node health and cluster state events of
SageMaker HyperPod (EventBridge, detail-type prefix "SageMaker HyperPod") reach
an encrypted topic, optionally mailed to an address. It consumes the cluster ARN,
so it is created only after the cluster, and the rule matches only THIS cluster's
events: HyperPod's EventBridge events name the cluster ARN in ``resources``
(SageMaker Developer Guide, "SageMaker HyperPod cluster events reference";
cluster events need NodeProvisioningMode Continuous). The functional checks (NCCL,
training) are `hpq remote-nccl-test` and `hpq eks nccl-test`.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import Equals, GetAtt, If, Not, Ref, Sub, events, sns

from hpq.cfn import common

EVENT_DETAIL_TYPE_PREFIX = "SageMaker HyperPod"


@dataclass(frozen=True)
class ValidationConfig:
    pass


def build(cfg: ValidationConfig) -> common.Template:
    t = common.new_template("hpq validation: HyperPod health and state events to an SNS topic.")
    common.param(t, "ClusterArn", "HyperPod cluster ARN (the stack waits for the cluster).",
                 AllowedPattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/.+$",
                 ConstraintDescription="a SageMaker cluster ARN.")
    email = common.param(t, "NotificationEmail", "Optional address for event mails (empty: none).", Default="",
                         AllowedPattern=r"^$|^[^@\s]+@[^@\s]+\.[^@\s]+$", ConstraintDescription="an e-mail address.")
    t.add_condition("HasEmail", Not(Equals(email, "")))
    topic = t.add_resource(sns.Topic(
        # No SSE with the AWS-managed SNS key: its key policy does not let EventBridge publish.
        "EventsTopic",
        Subscription=If("HasEmail", [sns.Subscription(Protocol="email", Endpoint=email)], Ref("AWS::NoValue")),
        Tags=common.tags(),
    ))
    rule = t.add_resource(events.Rule(
        "ClusterEventsRule", Description=Sub("HyperPod events; deployed after ${ClusterArn}"), State="ENABLED",
        EventPattern={"source": ["aws.sagemaker"], "detail-type": [{"prefix": EVENT_DETAIL_TYPE_PREFIX}],
                      "resources": [Ref("ClusterArn")]},
        Targets=[events.Target(Id="topic", Arn=Ref(topic))],
    ))
    t.add_resource(sns.TopicPolicy(
        "EventsTopicPolicy", Topics=[Ref(topic)],
        PolicyDocument={"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sns:Publish",
            "Resource": Ref(topic), "Condition": {"ArnEquals": {"aws:SourceArn": GetAtt(rule, "Arn")}},
        }]},
    ))
    common.output(t, "EventsTopicArn", Ref(topic), "SNS topic receiving HyperPod events.")
    return t
