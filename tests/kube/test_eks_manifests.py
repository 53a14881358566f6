"""Rendered EKS manifests for every accelerated instance type in the catalog.

Built-in kinds (Job, ConfigMap, PersistentVolume/Claim) and every pod template inside the custom
resources are validated with kubernetes-validate (offline OpenAPI schemas). The custom resources
(MPIJob kubeflow.org/v2beta1, PyTorchJob kubeflow.org/v1) are validated against the CRD schemas the
HyperPod dependency chart installs (tests/kube/data/crds; strict, as ``kubectl apply --validate=strict``) and
against what their operators refuse after defaulting (tests/crd_schema.py). Golden files cover a
representative subset; set HPQ_UPDATE_GOLDEN=1 to rewrite them after an intended change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hpq.errors import UsageError
from hpq.lifecycle import catalog, transport
from hpq.manifests.render import RenderRequest, render, render_objects
from tests.crd_schema import controller_errors, crd_errors
from tests.support import free_port

GOLDEN = Path(__file__).parent / "data" / "golden"
PROGRAM = str(GOLDEN / "program.py")
K8S_VERSION = kubernetes_validate.latest_version()
ACCELERATED = catalog.gpu_types() + catalog.trainium_types()
BUILTIN = {("v1", "ConfigMap"), ("batch/v1", "Job"), ("v1", "PersistentVolume"), ("v1", "PersistentVolumeClaim")}
REPLICAS_KEY = {"MPIJob": "mpiReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs"}


def crd_problems(obj: dict[str, Any]) -> list[str]:
    return crd_errors(obj) + controller_errors(obj)


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]]
    if obj["kind"] in REPLICAS_KEY:
        return [rs["template"] for rs in obj["spec"][REPLICAS_KEY[obj["kind"]]].values()]
    return []


def k8s_validate(obj: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{obj['kind']} {obj['metadata'].get('name')}: {str(exc).splitlines()[0]}")


def validate_all(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in BUILTIN:
            k8s_validate(obj)
        else:
            assert crd_problems(obj) == [], (obj["kind"], crd_problems(obj))
        for i, tpl in enumerate(pod_templates(obj)):
            k8s_validate({"apiVersion": "v1", "kind": "PodTemplate",
                          "metadata": {"name": f"{obj['metadata']['name']}-{i}"}, "template": tpl})


def worker_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pod specs that run on the accelerated nodes (every pod except the MPI launcher)."""
    out = []
    for obj in objects:
        if obj["kind"] == "MPIJob":
            out.append(obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"])
        elif obj["kind"] == "PyTorchJob":
            out += [rs["template"]["spec"] for rs in obj["spec"]["pytorchReplicaSpecs"].values()]
        elif obj["kind"] == "Job":
            out.append(obj["spec"]["template"]["spec"])
    return out


def check_pod(spec: dict[str, Any], entry: catalog.InstanceType, gpus: int) -> None:
    env_expected = transport.node_environment(entry.name).variables
    efa = entry.efa_interfaces if transport.node_environment(entry.name).transport != transport.TCP else 0
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": entry.name}
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    [container] = spec["containers"]
    limits = container["resources"]["limits"]
    accel = "aws.amazon.com/neuron" if entry.accelerator == catalog.TRAINIUM else "nvidia.com/gpu"
    other = "nvidia.com/gpu" if accel == "aws.amazon.com/neuron" else "aws.amazon.com/neuron"
    assert limits[accel] == gpus and other not in limits
    if efa:
        assert limits["vpc.amazonaws.com/efa"] == efa
        assert limits["hugepages-2Mi"] == "5120Mi"
        assert "memory" in container["resources"]["requests"]  # hugepages need a memory request
    else:
        assert "vpc.amazonaws.com/efa" not in limits and "hugepages-2Mi" not in limits
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for key, val in env_expected.items():
        assert env[key] == val, key


@pytest.mark.parametrize("instance_type", ACCELERATED)
def test_every_type_renders_valid_manifests(instance_type):
    entry = catalog.lookup(instance_type)
    for test in ("nccl-test", "validate", "nanogpt"):
        objects = render_objects(RenderRequest(test, instance_type, nodes=2, program=PROGRAM))
        validate_all(objects)
        pods = worker_pods(objects)
        assert pods, test
        for spec in pods:
            check_pod(spec, entry, entry.accelerator_count)
    # replicas: one worker per node for every job kind
    mpi = render_objects(RenderRequest("nccl-test", instance_type, nodes=3))[0]
    assert mpi["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    pt = render_objects(RenderRequest("nanogpt", instance_type, nodes=3, program=PROGRAM))[1]
    assert pt["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] + pt["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


def test_p5_gets_32_efa_and_rdma():
    mpi = render_objects(RenderRequest("nccl-test", "ml.p5.48xlarge", nodes=2))[0]
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    launcher = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in launcher["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["FI_PROVIDER"] == "efa"
    assert "NCCL_NET_PLUGIN" not in env
    cmd = launcher["command"]
    # every transport variable is forwarded to the ranks that sshd starts on the workers
    forwarded = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    assert set(env) <= forwarded
    assert cmd[cmd.index("-np") + 1] == "16" and cmd[cmd.index("-npernode") + 1] == "8"
    for var in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE"):
        assert var not in env


def test_g5_16xlarge_is_tcp_without_efa():
    mpi = render_objects(RenderRequest("nccl-test", "ml.g5.16xlarge", nodes=2))[0]
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 1}
    env = {e["name"]: e["value"] for e in worker["containers"][0]["env"]}
    assert env["NCCL_NET_PLUGIN"] == "none" and "FI_EFA_USE_DEVICE_RDMA" not in env
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert all(t["key"] != "vpc.amazonaws.com/efa" for t in worker["tolerations"])


def test_g5_48xlarge_is_sendrecv():
    mpi = render_objects(RenderRequest("nccl-test", "g5.48xlarge", nodes=2))[0]
    env = {e["name"]: e["value"] for e in mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "0"


def test_trainium_uses_neuron_devices_and_nccom():
    mpi = render_objects(RenderRequest("nccl-test", "ml.trn1.32xlarge", nodes=2))[0]
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["aws.amazon.com/neuron"] == 16
    assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == 8
    launcher = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "/opt/aws/neuron/bin/nccom-test -r 64 -N 2" in launcher["command"][-1]
    env = {e["name"]: e["value"] for e in launcher["env"]}
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    validate = render_objects(RenderRequest("validate", "ml.trn1.32xlarge", nodes=2))[0]
    assert "neuron-ls" in validate["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def test_fewer_gpus_and_custom_image():
    mpi = render_objects(RenderRequest("nccl-test", "ml.p4d.24xlarge", nodes=4, gpus=2, image="my.ecr/nccl:1"))[0]
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 2 and worker["image"] == "my.ecr/nccl:1"
    cmd = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("-np") + 1] == "8"


def test_default_nanogpt_ships_the_hpq_program_and_its_imports():
    cm, job = render_objects(RenderRequest("nanogpt", "ml.g5.16xlarge", nodes=2))
    root = Path(__file__).resolve().parents[2]
    assert cm["data"]["hpq.scripts.nanogpt.py"] == (root / "scripts" / "nanogpt.py").read_text()
    assert {"hpq.__init__.py", "hpq.scripts.__init__.py"} <= set(cm["data"])
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    items = master["volumes"][0]["configMap"]["items"]
    assert {i["key"] for i in items} == set(cm["data"])
    assert "-m hpq.scripts.nanogpt" in master["containers"][0]["command"][-1]
    env = {e["name"]: e["value"] for e in master["containers"][0]["env"]}
    assert env["HPQ_TORCH_BACKEND"] == "gloo" and env["PYTHONPATH"] == "/opt/hpq"


def test_module_closure_follows_absolute_and_relative_imports():
    from hpq.manifests.render import module_files

    assert set(module_files("hpq.lifecycle.transport")) == {
        "hpq/__init__.py", "hpq/lifecycle/__init__.py", "hpq/lifecycle/transport.py", "hpq/lifecycle/catalog.py"}
    files = module_files("hpq.scripts.nccl_report")  # "from hpq.errors import UsageError": a module, not a package
    assert "hpq/errors.py" in files and "hpq/scripts/nccl_report.py" in files


@pytest.mark.parametrize("kwargs, match", [
    ({"test": "nccl-test", "instance_type": "ml.m5.xlarge"}, "no GPU or Trainium"),
    ({"test": "nccl-test", "instance_type": "ml.p9.48xlarge"}, "unknown instance type"),
    ({"test": "nccl-test", "instance_type": "ml.g5.16xlarge", "gpus": 2}, r"GPUS\) must be 1..1"),
    ({"test": "nccl-test", "instance_type": "ml.g5.16xlarge", "nodes": 0}, "--nodes"),
    ({"test": "nccl-test", "instance_type": None}, "--instance-type is required"),
    ({"test": "nccl-test", "instance_type": "ml.p5.48xlarge", "name": "Bad_Name"}, "invalid job name"),
    ({"test": "fsx"}, "--fsx-id"),
    ({"test": "fsx", "fsx_id": "fs-xyz", "fsx_dns": "d", "fsx_mount_name": "m"}, "invalid FSx"),
    ({"test": "nanogpt", "instance_type": "ml.p5.48xlarge", "program": "/nonexistent/train.py"}, "cannot read"),
    ({"test": "nanogpt", "instance_type": "ml.p5.48xlarge", "program": "/nonexistent/my train;x.py"}, "file name"),
])
def test_bad_input_is_a_usage_error(kwargs, match):
    with pytest.raises(UsageError, match=match):
        render(RenderRequest(**kwargs))


def test_fsx_pv_and_claim():
    pv, pvc = render_objects(RenderRequest("fsx", fsx_id="fs-0123456789abcdef0", fsx_dns="fs.example",
                                           fsx_mount_name="abcdefgh", fsx_capacity_gib=2400))
    validate_all([pv, pvc])
    assert pv["spec"]["csi"] == {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-0123456789abcdef0",
                                 "volumeAttributes": {"dnsname": "fs.example", "mountname": "abcdefgh"}}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2400Gi"
    job = render_objects(RenderRequest("nanogpt", "ml.p5.48xlarge", program=PROGRAM, fsx_claim="hpq-fsx"))[1]
    spec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "hpq-fsx"}} in spec["volumes"]


GOLDEN_CASES = {
    "nccl-test.yaml": [RenderRequest("nccl-test", t, nodes=2) for t in
                       ("ml.p5.48xlarge", "ml.g5.16xlarge", "ml.trn1.32xlarge")],
    "validate.yaml": [RenderRequest("validate", "ml.g5.48xlarge", nodes=2)],
    "nanogpt.yaml": [RenderRequest("nanogpt", "ml.p4d.24xlarge", nodes=2, program=PROGRAM,
                                   program_args="--iters 100")],
    "fsx.yaml": [RenderRequest("fsx", fsx_id="fs-0123456789abcdef0",
                               fsx_dns="fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com", fsx_mount_name="abcdefgh")],
}


@pytest.mark.parametrize("fname", sorted(GOLDEN_CASES))
def test_golden(fname):
    text = "---\n".join(render(req) for req in GOLDEN_CASES[fname])
    text = text.replace(str(GOLDEN), "<golden>")
    path = GOLDEN / fname
    if os.environ.get("HPQ_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with HPQ_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{fname} differs from the golden file; HPQ_UPDATE_GOLDEN=1 to accept"
    assert all(doc for doc in yaml.safe_load_all(text))


@pytest.mark.parametrize("itype, efa, plugin", [("ml.p5.48xlarge", 32, None), ("ml.g5.16xlarge", None, "none")])
def test_cli_render(itype, efa, plugin):
    """The command the issue names, run as a user runs it."""
    res = subprocess.run([sys.executable, "-m", "hpq", "eks", "render", "nccl-test", "--instance-type", itype,
                          "--nodes", "2"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    mpi = next(yaml.safe_load_all(res.stdout))
    c = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"].get("vpc.amazonaws.com/efa") == efa
    assert {e["name"]: e["value"] for e in c["env"]}.get("NCCL_NET_PLUGIN") == plugin


def test_cli_render_cpu_type_exits_2():
    res = subprocess.run([sys.executable, "-m", "hpq", "eks", "render", "nccl-test", "-t", "ml.m5.large"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "no GPU or Trainium" in res.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_nanogpt_configmap_program_trains_with_the_manifest_command(tmp_path):
    """Unpack the rendered ConfigMap as the kubelet would (items -> paths), run the container's own
    command line with its env (torchrun, 2 CPU processes, gloo as the TCP transport says), and judge
    the output with the one nanoGPT judge (Slurm's too). Proves the shipped files are complete and the command works."""
    from hpq.validation.judges import judge_nanogpt
    from hpq.validation.request import NANOGPT, TestRequest
    from hpq.validation.result import RawOutcome

    cm, job = render_objects(RenderRequest("nanogpt", "ml.g5.16xlarge", nodes=1,
                                           program_args="--iters 20 --log-every 5 --corpus-chars 20000"))
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    root = tmp_path / "opt-hpq"
    for item in master["volumes"][0]["configMap"]["items"]:
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cm["data"][item["key"]])
    container = master["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env["PYTHONPATH"] = str(root)  # the manifest mounts the ConfigMap at PYTHONPATH=/opt/hpq
    # every hpq module the program loads must come from the ConfigMap, not from this checkout
    probe = ("import sys, hpq.scripts.nanogpt; "
             "bad = [m.__file__ for n, m in sys.modules.items() if n.startswith('hpq') and "
             f"not (m.__file__ or '').startswith({str(root)!r})]; print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    env.update(RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    cmd = container["command"]
    assert cmd[:2] == ["/bin/sh", "-c"] and "--nproc_per_node 1" in cmd[2]
    res = subprocess.run(["/bin/sh", "-c", cmd[2].replace("--nproc_per_node 1", "--nproc_per_node 2")],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    verdict = judge_nanogpt(TestRequest(NANOGPT, 1), RawOutcome(0, res.stdout, state="Succeeded"),
                                "ml.g5.16xlarge", "eks", "local")
    assert verdict.ok, verdict.message
    assert "backend gloo" in res.stdout
