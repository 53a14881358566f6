"""EKS variants: the test manifests rendered for the emulated cluster and checked against Kubernetes' schemas.

No Kubernetes API server runs in a rehearsal (none can be had here), so nothing is applied: every
manifest ``hpq eks`` would submit is rendered for this cluster (its worker type, node count and FSx
filesystem from the emulated deploy) and each built-in object, and the pod template of each
operator object (MPIJob, PyTorchJob), is validated with ``kubernetes-validate`` against the schema
of the cluster's Kubernetes version (the newest the package knows when it does not know that one).
"""

from __future__ import annotations

from typing import Any

from hpq.errors import HpqError
from hpq.manifests import render
from hpq.rehearsal.plan import Plan


def _version(deployed: Any) -> str:
    import kubernetes_validate

    wanted = str(deployed.parameters.get("KubernetesVersion") or
                 (deployed.templates.get("root.json", {}).get("Parameters", {}).get("KubernetesVersion") or {})
                 .get("Default", ""))
    known = kubernetes_validate.all_versions() if hasattr(kubernetes_validate, "all_versions") else []
    for v in known:
        if wanted and v.startswith(wanted):
            return v
    return kubernetes_validate.latest_version()


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job":
        return [spec["template"]]
    for key in ("mpiReplicaSpecs", "pytorchReplicaSpecs"):
        if key in spec:
            return [rs["template"] for rs in spec[key].values()]
    return []


def check(plan: Plan, deployed: Any) -> dict[str, Any]:
    import kubernetes_validate

    version = _version(deployed)
    out = deployed.outputs
    items = []
    for test in render.TESTS:
        req = render.RenderRequest(test, instance_type=plan.worker_type, nodes=len(plan.worker_nodes),
                                   fsx_id=out.get("FsxFileSystemId"), fsx_dns=out.get("FsxDnsName"),
                                   fsx_mount_name=out.get("FsxMountName"))
        item: dict[str, Any] = {"test": test, "objects": 0, "kinds": [], "status": "valid"}
        try:
            objects = render.render_objects(req)
            item["objects"] = len(objects)
            item["kinds"] = [o["kind"] for o in objects]
            for obj in objects:
                name = (obj.get("metadata") or {}).get("name", "?")
                templates = _pod_templates(obj)
                if obj["kind"] in ("MPIJob", "PyTorchJob"):
                    checks = [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{name}-{i}"},
                               "template": t} for i, t in enumerate(templates)]
                else:
                    checks = [obj]
                for c in checks:
                    kubernetes_validate.validate(c, version, strict=True)
        except (HpqError, kubernetes_validate.ValidationError, KeyError, ValueError) as exc:
            item["status"] = "INVALID"
            item["error"] = f"{test}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        items.append(item)
    return {"ok": all(i["status"] == "valid" for i in items), "kubernetes_version_schema": version,
            "api_server": None, "manifests": items}
