"""Validation stack (optional): after the cluster exists, route HyperPod events to an SNS topic.

Post-deploy signal without logging in: node health and cluster state events of
SageMaker HyperPod (EventBridge, detail-type prefix "SageMaker HyperPod") reach
an encrypted topic, optionally mailed to an address. It consumes the cluster ARN,
so it is created only after the cluster, and the rule matches only THIS cluster's
events: every HyperPod event names the cluster ARN in ``resources`` (SageMaker
Developer Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge",
the examples of "SageMaker HyperPod Cluster Event", "... Cluster Node Health Event"
and "... Cluster State Change"; "SageMaker HyperPod cluster events reference", the
envelope's ``resources`` field and its "Events for a specific cluster" pattern).
The ARN is in ``detail`` too, but at different places per type (``detail.ClusterArn``,
``detail.EventDetails.ClusterArn``), so ``resources`` is the one filter for all three.

What reaches the topic: state changes and node health events on every variant;
"SageMaker HyperPod Cluster Event" only for clusters with NodeProvisioningMode
Continuous (cluster events reference), which only EKS variants offer (cfn/hyperpod.py).
The functional checks (NCCL, training) are `hpq remote-nccl-test` and `hpq eks nccl-test`.
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
    # The AWS-managed key alias/aws/sns cannot serve here: its key policy cannot be changed and does not let
    # EventBridge publish. A customer-managed key whose policy allows events.amazonaws.com to generate data keys
    # and decrypt is what the SNS Developer Guide prescribes for AWS event sources ("Key management", section
    # "Enable compatibility between event sources from AWS services and encrypted topics", sns-key-management.html).
    key = common.kms_key(t, "EventsTopicKey", "Encrypts the HyperPod events topic.", {
        "Sid": "EventBridgePublishesToTheTopic", "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        # The guide's kms:GenerateDataKey* and kms:Decrypt, spelled out.
        "Action": ["kms:Decrypt", *common.KMS_GENERATE_DATA_KEY_ACTIONS], "Resource": "*",
    })
    topic = t.add_resource(sns.Topic(
        "EventsTopic", KmsMasterKeyId=GetAtt(key, "Arn"),
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
