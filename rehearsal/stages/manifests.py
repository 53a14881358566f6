"""Stage ``manifests`` (EKS variants): the test manifests rendered for this cluster and schema-checked."""

from __future__ import annotations

from typing import Any

from hpq.rehearsal import aws, eks
from hpq.rehearsal.plan import Plan
from hpq.rehearsal.stages.base import Failure, Say


def check_manifests(plan: Plan, deployed: aws.Deployed, say: Say) -> dict[str, Any]:
    say("manifests", "no Kubernetes API server runs in a rehearsal: the test manifests are rendered for "
                     "this cluster and validated against the Kubernetes schemas, not applied")
    report = eks.check(plan, deployed)
    for item in report["manifests"]:
        say("manifests", f"{item['test']}: {item['objects']} object(s) {item['status']}")
    if not report["ok"]:
        raise Failure("manifests", "; ".join(i["error"] for i in report["manifests"] if i.get("error")),
                      found={"manifests": report})
    return report
