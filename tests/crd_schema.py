"""Validate custom resources against the CRD schemas the HyperPod dependency chart installs.

The schemas (tests/kube/data/crds, sources in its README) are Kubernetes structural schemas. An API server
keeps only the fields a structural schema declares and drops the rest without a word, so a field in
the wrong place (a launcher ``restartPolicy`` inside the pod template instead of the replica spec, a
misspelt ``runPolicy`` key) would be lost on a real cluster. ``kubectl apply --validate=strict``
refuses such fields; this validator does the same: every object with declared ``properties`` gets
``additionalProperties: false`` unless the schema says otherwise
(``x-kubernetes-preserve-unknown-fields``, its own ``additionalProperties``). ``nullable`` and
``x-kubernetes-int-or-string`` are mapped to plain JSON Schema.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

CRD_DIR = Path(__file__).parent / "kube" / "data" / "crds"
SCHEMA_FILES = {
    ("kubeflow.org/v2beta1", "MPIJob"): "mpijobs.kubeflow.org_v2beta1.json",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjobs.kubeflow.org_v1.json",
}


def strict(node: Any) -> Any:
    """A copy of a structural schema in which undeclared fields are errors."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@cache
def validator(api_version: str, kind: str) -> jsonschema.Draft4Validator:
    schema = json.loads((CRD_DIR / SCHEMA_FILES[(api_version, kind)]).read_text())
    return jsonschema.Draft4Validator(strict(copy.deepcopy(schema)))


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of ``obj`` as 'path: message' (empty when it validates)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in SCHEMA_FILES:
        return [f"no CRD schema for {key}"]
    errors = sorted(validator(*key).iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message[:300]}" for e in errors]


_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def mpijob_controller_errors(obj: dict[str, Any]) -> list[str]:
    """What mpi-operator v0.5.0 refuses after defaulting, beyond the schema: its
    pkg/apis/kubeflow/v2beta1/default.go (launcher restartPolicy OnFailure, worker Never, cleanPodPolicy
    None, slotsPerWorker 1) then pkg/apis/kubeflow/validation/validation.go (replica restartPolicy Never or
    OnFailure, one launcher, workers >= 1, "<name>-worker-<n>" a DNS-1035 label). The controller marks such a
    job Failed instead of running it."""
    spec = obj.get("spec") or {}
    errs = []
    name = (obj.get("metadata") or {}).get("name", "")
    replicas = spec.get("mpiReplicaSpecs") or {}
    workers = (replicas.get("Worker") or {}).get("replicas") or 1
    host = f"{name}-worker-{workers - 1}"
    if len(host) > 63 or not _DNS1035.match(host):
        errs.append(f"metadata.name: worker hostname {host!r} is not a DNS-1035 label")
    if spec.get("slotsPerWorker", 1) < 0:
        errs.append("spec.slotsPerWorker: must be >= 0")
    if (spec.get("runPolicy") or {}).get("cleanPodPolicy", "None") not in ("None", "Running", "All"):
        errs.append("spec.runPolicy.cleanPodPolicy: not supported")
    if (spec.get("runPolicy") or {}).get("backoffLimit", 0) < 0:
        errs.append("spec.runPolicy.backoffLimit: must be >= 0")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        errs.append("spec.mpiImplementation: not supported")
    if "Launcher" not in replicas:
        errs.append("spec.mpiReplicaSpecs[Launcher]: required")
    for role, default in (("Launcher", "OnFailure"), ("Worker", "Never")):
        rs = replicas.get(role)
        if rs is None:
            continue
        if rs.get("restartPolicy", default) not in ("Never", "OnFailure"):
            errs.append(f"spec.mpiReplicaSpecs[{role}].restartPolicy: {rs.get('restartPolicy')!r} not supported")
        if not (rs.get("template") or {}).get("spec", {}).get("containers"):
            errs.append(f"spec.mpiReplicaSpecs[{role}].template.spec.containers: required")
    if "Launcher" in replicas and replicas["Launcher"].get("replicas", 1) != 1:
        errs.append("spec.mpiReplicaSpecs[Launcher].replicas: must be 1")
    if "Worker" in replicas and replicas["Worker"].get("replicas", 0) <= 0:
        errs.append("spec.mpiReplicaSpecs[Worker].replicas: must be >= 1")
    return errs


def pytorchjob_controller_errors(obj: dict[str, Any]) -> list[str]:
    """What training-operator v1.7.0 refuses beyond the schema (pkg/apis/kubeflow.org/v1/pytorch_validation.go):
    the name a DNS-1035 label, only Master/Worker replicas, each with an image and a container named
    "pytorch", exactly one Master."""
    errs = []
    name = (obj.get("metadata") or {}).get("name", "")
    if len(name) > 63 or not _DNS1035.match(name):
        errs.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    for role, rs in ((obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        containers = (rs.get("template") or {}).get("spec", {}).get("containers") or []
        if role not in ("Master", "Worker"):
            errs.append(f"replica type {role} must be Master or Worker")
        if not containers or any(not c.get("image") for c in containers):
            errs.append(f"{role}: every container needs an image")
        if "pytorch" not in [c.get("name") for c in containers]:
            errs.append(f"{role}: no container named pytorch")
        if role == "Master" and rs.get("replicas", 1) != 1:
            errs.append("Master: there must be only 1 master replica")
    return errs


def controller_errors(obj: dict[str, Any]) -> list[str]:
    return (mpijob_controller_errors(obj) if obj.get("kind") == "MPIJob" else pytorchjob_controller_errors(obj))
