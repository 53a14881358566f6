"""AWS's CloudFormation resource provider (registry) schemas, as cfn-lint ships them: what ``Ref`` and
``Fn::GetAtt`` return for a resource type (tests/cfn/ and tests/rehearsal/ read them).

cfn-lint bundles the schemas AWS publishes per region: ``cfnlint/data/schemas/providers/<region>.json`` maps a
resource type to a digest, and ``cfnlint/data/schemas/resources/<digest>.json`` is the type's schema. For a
resource, ``Ref`` returns "a value that you can typically use to refer to that resource, such as a physical ID"
(CloudFormation, "Ref": https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/
intrinsic-function-reference-ref.html); for a registry type that is the schema's ``primaryIdentifier``, "the
property ... that uniquely identifies an instance of the resource" (CloudFormation CLI, "Resource type schema":
https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-schema.html). So Ref on an
AWS::APS::Workspace (primaryIdentifier /properties/Arn) is the workspace ARN, and its ``ws-...`` ID is GetAtt
WorkspaceId. Types without a registry schema (custom resources, a few legacy AWS types) are None here.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import cfnlint

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"
REGION = "us-east-1"


@lru_cache(maxsize=1)
def _providers() -> dict[str, str]:
    return json.loads((SCHEMAS / "providers" / f"{REGION}.json").read_text(encoding="utf-8"))


@cache
def schema(resource_type: str) -> dict[str, Any] | None:
    """The type's registry schema, or None for a type without one."""
    digest = _providers().get(resource_type)
    if digest is None:
        return None
    return json.loads((SCHEMAS / "resources" / f"{digest}.json").read_text(encoding="utf-8"))


def primary_identifier(resource_type: str) -> list[str] | None:
    """The schema's primaryIdentifier (JSON pointers such as ``/properties/Arn``), what Ref returns."""
    found = schema(resource_type)
    return None if found is None else list(found["primaryIdentifier"])


def ref_property(resource_type: str) -> str | None:
    """The one property Ref returns (``Arn`` for AWS::APS::Workspace); None without a schema or for a compound
    identifier (CloudFormation then joins the parts with ``|``)."""
    ids = primary_identifier(resource_type)
    if not ids or len(ids) != 1:
        return None
    return ids[0].removeprefix("/properties/")


def property_spec(resource_type: str, name: str) -> dict[str, Any]:
    """The schema's definition of one top-level property (pattern, lengths ...)."""
    found = schema(resource_type)
    assert found is not None, f"{resource_type} has no registry schema in cfn-lint"
    return found["properties"][name]
