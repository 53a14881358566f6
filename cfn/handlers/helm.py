"""Helm custom resource handler (placeholder; the EKS issue writes the real one).

Answers CloudFormation SUCCESS for every request so templates can be synthesized.
"""

import json
import urllib.request


def handler(event, context):
    body = json.dumps({
        "Status": "SUCCESS",
        "Reason": "placeholder",
        "PhysicalResourceId": event.get("PhysicalResourceId") or "helm-placeholder",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": {},
    }).encode()
    req = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                 headers={"Content-Type": "", "Content-Length": str(len(body))})
    urllib.request.urlopen(req, timeout=30)
