"""The EKS jobs against the operators the HyperPod chart installs, and what runs inside the pods.

Schemas: tests/kube/data/crds (mpi-operator 0.5.0 MPIJob v2beta1 as the chart trims it, training-operator
v1.7.0 PyTorchJob; sources in its README), validated strictly (tests/crd_schema.py), plus what each
operator refuses after defaulting. Pod placement follows AWS's HyperPod CLI
(aws/sagemaker-hyperpod-cli src/sagemaker/hyperpod/cli/constants/command_constants.py), the launcher
command AWS's nccl-tests manifest (awslabs/awsome-distributed-ai
micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml: /opt/amazon/openmpi/bin/mpirun).
"""

from __future__ import annotations

import copy
import re

import pytest

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.manifests import render
from hpq.manifests.render import RenderRequest, render_objects
from tests.crd_schema import controller_errors, crd_errors

ACCELERATED = catalog.gpu_types() + catalog.trainium_types()
CHECKED_TYPES = ("ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.16xlarge", "ml.g5.48xlarge", "ml.trn1.32xlarge")


def job(test: str, itype: str, **kw) -> dict:
    return next(o for o in render_objects(RenderRequest(test, itype, **kw)) if o["kind"] in ("MPIJob", "PyTorchJob",
                                                                                                  "Job"))


def all_pod_specs(obj: dict) -> list[dict]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    key = "mpiReplicaSpecs" if obj["kind"] == "MPIJob" else "pytorchReplicaSpecs"
    return [rs["template"]["spec"] for rs in obj["spec"][key].values()]


def launcher_container(mpi: dict) -> dict:
    return mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("itype", ACCELERATED)
def test_custom_resources_validate_against_the_chart_crds(itype):
    for test in ("nccl-test", "nanogpt"):
        for nodes in (1, 2, 16):
            obj = job(test, itype, nodes=nodes)
            assert crd_errors(obj) == [], (test, nodes, crd_errors(obj)[:5])
            assert controller_errors(obj) == [], (test, nodes, controller_errors(obj))


@pytest.mark.parametrize("mutate, needle", [
    (lambda o: o["spec"].__setitem__("restartPolicy", "Never"), "'restartPolicy' was unexpected"),
    (lambda o: o["spec"]["runPolicy"].__setitem__("backofflimit", 0), "'backofflimit' was unexpected"),
    (lambda o: o["spec"].__setitem__("slotsPerWorker", "8"), "is not of type 'integer'"),
    (lambda o: o["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].__setitem__(
        "volumes", [{"name": "v", "csi": {"driver": "fsx.csi.aws.com"}}]), "'csi' was unexpected"),
    (lambda o: o["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0].__setitem__(
        "comand", ["x"]), "'comand' was unexpected"),
])
def test_the_schema_check_refuses_what_the_api_server_would_drop(mutate, needle):
    """Proof the validator can fail: fields in the wrong place, wrong types, and a volume source the chart's
    trimmed MPIJob schema lacks (csi: upstream v0.5.0 has it, the installed CRD does not)."""
    obj = copy.deepcopy(job("nccl-test", "ml.p5.48xlarge", nodes=2))
    mutate(obj)
    assert any(needle in e for e in crd_errors(obj)), crd_errors(obj)


def test_operator_checks_refuse_bad_replica_specs():
    obj = copy.deepcopy(job("nccl-test", "ml.p5.48xlarge", nodes=2))
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Always"
    assert any("restartPolicy" in e for e in controller_errors(obj))
    pt = copy.deepcopy(job("nanogpt", "ml.p5.48xlarge", nodes=2))
    pt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = "train"
    assert any("no container named pytorch" in e for e in controller_errors(pt))
    with pytest.raises(UsageError, match="lowercase letter"):
        job("nccl-test", "ml.p5.48xlarge", name="1st-run")  # "1st-run-worker-0" is no DNS-1035 label


def test_restart_policy_where_the_operators_read_it_and_one_attempt():
    """mpi-operator v0.5.0 takes the launcher's restartPolicy from the replica spec and overrides the pod
    template's (with a warning event): pkg/controller/mpi_job_controller.go newLauncherPodTemplate,
    setRestartPolicy. runPolicy.backoffLimit becomes the launcher Job's backoffLimit: 0, so a hard failure
    is reported once (the launcher waits for the workers' DNS records itself instead of relying on retries)."""
    mpi = job("nccl-test", "ml.p4d.24xlarge", nodes=2)
    for role in ("Launcher", "Worker"):
        rs = mpi["spec"]["mpiReplicaSpecs"][role]
        assert rs["restartPolicy"] == "Never" and "restartPolicy" not in rs["template"]["spec"]
    assert mpi["spec"]["runPolicy"]["backoffLimit"] == 0
    assert mpi["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    pt = job("nanogpt", "ml.p4d.24xlarge", nodes=2)
    assert pt["spec"]["runPolicy"]["backoffLimit"] == 0
    assert all(rs["restartPolicy"] == "Never" for rs in pt["spec"]["pytorchReplicaSpecs"].values())


@pytest.mark.parametrize("itype", [t for t in CHECKED_TYPES if t in catalog.gpu_types()])
def test_gpu_launcher_calls_mpirun_by_absolute_path(itype):
    cmd = launcher_container(job("nccl-test", itype, nodes=2))["command"]
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[2].endswith('exec "$0" "$@"')
    assert cmd[3] == render.MPIRUN == "/opt/amazon/openmpi/bin/mpirun"
    assert "mpirun" not in cmd[4:] and not any(re.search(r"(^|[;&|]\s*)mpirun\b", a) for a in cmd)
    assert cmd[cmd.index("-x", 4) + 1] == "PATH" and render.NCCL_TESTS_BINARY in cmd


def test_mpirun_path_follows_the_image():
    cmd = launcher_container(job("nccl-test", "ml.p5.48xlarge", image="my.ecr/nccl:1.0",
                                 mpirun="/usr/local/mpi/bin/mpirun"))["command"]
    assert cmd[3] == "/usr/local/mpi/bin/mpirun"
    for bad in ("mpirun", "bin/mpirun", "/opt/x y/mpirun"):
        with pytest.raises(UsageError, match="absolute path"):
            job("nccl-test", "ml.p5.48xlarge", mpirun=bad)


@pytest.mark.parametrize("itype", CHECKED_TYPES)
def test_every_pod_requires_a_healthy_node(itype):
    for test in ("nccl-test", "nanogpt", "validate"):
        for spec in all_pod_specs(job(test, itype, nodes=2)):
            node = spec["affinity"]["nodeAffinity"]
            [term] = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert term["matchExpressions"] == [{"key": "sagemaker.amazonaws.com/node-health-status",
                                                 "operator": "In", "values": ["Schedulable"]}], test
            pref = node["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchExpressions"][0]
            assert pref["key"] == "sagemaker.amazonaws.com/deep-health-check-status" and pref["values"] == ["Passed"]


@pytest.mark.parametrize("itype", CHECKED_TYPES)
def test_images_are_pinned_by_version(itype):
    neuron = catalog.lookup(itype).accelerator == catalog.TRAINIUM
    for test in ("nccl-test", "nanogpt", "validate"):
        for spec in all_pod_specs(job(test, itype, nodes=2)):
            for c in spec["containers"]:
                repo, _, tag = c["image"].rpartition(":")
                assert repo and tag and tag != "latest" and re.search(r"\d+\.\d+", tag), c["image"]
    nanogpt = all_pod_specs(job("nanogpt", itype, nodes=2))[0]["containers"][0]["image"]
    if neuron:
        assert nanogpt == render.NEURON_IMAGE
    else:  # an AWS DLC: EFA and AWS's OFI NCCL plugin inside, so NCCL does not fall back to TCP
        assert nanogpt.startswith("public.ecr.aws/deep-learning-containers/pytorch-training:") and "-ec2" in nanogpt
    nccl = launcher_container(job("nccl-test", itype, nodes=2))["image"]
    assert nccl == (render.NEURON_IMAGE if neuron else render.NCCL_TESTS_IMAGE)


def test_nccl_debug_is_an_option():
    def env(obj: dict, role: str = "Launcher") -> dict:
        c = obj["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        return {e["name"]: e["value"] for e in c["env"]}

    default = job("nccl-test", "ml.p5.48xlarge", nodes=2)
    assert env(default)["NCCL_DEBUG"] == "INFO" and env(default)["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    forwarded = launcher_container(default)["command"]
    assert {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"} <= {forwarded[i + 1] for i, a in enumerate(forwarded) if a == "-x"}
    warn = job("nccl-test", "ml.p5.48xlarge", nccl_debug="warn")
    assert env(warn)["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_SUBSYS" not in env(warn)
    assert "NCCL_DEBUG" not in env(job("nccl-test", "ml.p5.48xlarge", nccl_debug="off"))
    pt = job("nanogpt", "ml.p5.48xlarge")
    master = pt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "NCCL_DEBUG" not in {e["name"] for e in master["env"]}
    pt = job("nanogpt", "ml.p5.48xlarge", nccl_debug="INFO")
    master = pt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in master["env"]
    assert "NCCL_DEBUG" not in env(job("nccl-test", "ml.trn1.32xlarge"))  # nccom-test is not NCCL
    with pytest.raises(UsageError, match="--nccl-debug"):
        job("nccl-test", "ml.p5.48xlarge", nccl_debug="LOUD")


def test_trainium_nccom_launch_model():
    """Neuron docs (nccom-test -N) and AWS's nccom-tests example: nccom-test on the first node, with
    NEURON_RT_ROOT_COMM_ID naming it; here the launcher (no Neuron devices) starts it there over ssh."""
    mpi = job("nccl-test", "ml.trn1.32xlarge", nodes=2)
    script = launcher_container(mpi)["command"][2]
    assert "exec ssh" in script and '"$1"' in script
    assert f"NEURON_RT_ROOT_COMM_ID=$1:{render.NEURON_ROOT_COMM_PORT}" in script
    assert "/opt/aws/neuron/bin/nccom-test -r 64 -N 2" in script and "--hosts$ips allr" in script
    assert "FI_PROVIDER='efa'" in script and "OMPI_ALLOW_RUN_AS_ROOT='1'" in script
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["aws.amazon.com/neuron"] == 16
    assert worker["command"][-1].endswith("exec /usr/sbin/sshd -De") and "/etc/environment" in worker["command"][-1]
    assert launcher_container(mpi)["image"] == worker["image"] == render.NEURON_IMAGE
    trn2 = launcher_container(job("nccl-test", "ml.trn2.48xlarge", nodes=4))["command"][2]
    assert "nccom-test -r 256 -N 4" in trn2
