"""The ``--region`` type, and the AWS services each kind of command needs (the region must have them).

The rules themselves are the AWS library's (hpq.aws.settings): a region botocore knows, with an
endpoint for every service named here.
"""

from __future__ import annotations

from hpq.aws.settings import region_problem
from hpq.cli.inputs.text import Text

# Commands that talk to AWS name the services they need; a region must be one botocore knows for each.
SERVICES_DEPLOY = ("cloudformation", "s3", "ec2", "sagemaker")
SERVICES_PUBLISH = ("cloudformation", "s3")
SERVICES_NODES = ("sagemaker", "ssm")
SERVICES_EKS = ("eks", "sts")
SERVICES_QUOTAS = ("service-quotas", "sagemaker")


class Region(Text):
    """A region botocore knows (e.g. us-west-2); which services it has is checked per command."""

    name = "region"

    def __init__(self) -> None:
        super().__init__("region")

    def check(self, value: str) -> str | None:
        return region_problem(value, ())


REGION = Region()


