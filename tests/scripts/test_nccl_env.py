"""The transport decision for every catalog entry x probe, and ``hpq nccl-env`` for the types users ask about."""

from __future__ import annotations

import itertools
import json

import pytest
import yaml
from click.testing import CliRunner

from hpq.cli.main import cli
from hpq.lifecycle import catalog, transport

FORBIDDEN = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_TREE_THRESHOLD")
PROBES = [
    transport.NodeProbe(efa_devices=efa, fi_info_efa=fi, device_rdma=rdma, default_iface=iface)
    for efa, fi, rdma, iface in itertools.product((None, 0, 1, 4), (None, True, False), (None, True, False),
                                                   (None, "ens5"))
]


def expected_transport(entry: catalog.InstanceType, probe: transport.NodeProbe) -> str:
    """The decision written out again, independently of transport.py's code: EFA only where a device (or, unprobed,
    the catalog) and libfabric's efa provider are there; device RDMA only where the catalog says the type has it
    (aws/sagemaker-training-toolkit src/sagemaker_training/torch_distributed.py sets FI_EFA_USE_DEVICE_RDMA=1 only
    for its list of RDMA instance types) and a probe does not deny it; else TCP."""
    efa = entry.efa_interfaces > 0 if probe.efa_devices is None else probe.efa_devices > 0
    if not efa or probe.fi_info_efa is False:
        return transport.TCP
    if entry.efa_device_rdma and probe.device_rdma is not False:
        return transport.EFA_RDMA
    return transport.EFA_SENDRECV


@pytest.mark.parametrize("name", sorted(catalog.CATALOG))
def test_every_catalog_entry_and_probe(name):
    entry = catalog.CATALOG[name]
    for probe, profile in itertools.product(PROBES, transport.PROFILES):
        env = transport.node_environment(name, probe, profile)
        v = env.variables
        want = expected_transport(entry, probe)
        assert env.transport == want == v["HPQ_TRANSPORT"], (probe, profile)
        assert not set(FORBIDDEN) & set(v)
        assert ("NCCL_BUFFSIZE" in v) == ("NCCL_P2P_NET_CHUNKSIZE" in v) == (profile == "legacy")
        if want == transport.TCP:
            assert v["NCCL_NET_PLUGIN"] == "none"
            assert "FI_PROVIDER" not in v and "FI_EFA_USE_DEVICE_RDMA" not in v
            assert v["NCCL_SOCKET_IFNAME"] == (probe.default_iface or "^docker,lo,veth")
            assert "ens6" not in v.values()
        else:
            assert v["FI_PROVIDER"] == "efa" and "NCCL_NET_PLUGIN" not in v
            # RDMA=1 on a non-RDMA instance aborts in MPI_Init: only ever where the catalog says RDMA.
            assert v["FI_EFA_USE_DEVICE_RDMA"] == ("1" if want == transport.EFA_RDMA else "0")
            if v["FI_EFA_USE_DEVICE_RDMA"] == "1":
                assert entry.efa_device_rdma
        if entry.accelerator == catalog.TRAINIUM:
            assert env.path_prepend == ("/opt/aws/neuron/bin",)
            assert v["OMPI_ALLOW_RUN_AS_ROOT"] == v["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
        else:
            assert env.path_prepend == () and "OMPI_ALLOW_RUN_AS_ROOT" not in v
        if entry.accelerator == catalog.GPU:
            assert v["HPQ_TORCH_BACKEND"] == ("gloo" if want == transport.TCP else "nccl")


def nccl_env(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["nccl-env", *args], catch_exceptions=False, standalone_mode=False)
    return res.exit_code, res.output


def as_json(*args: str) -> dict:
    code, out = nccl_env(*args, "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())
    return doc


def test_g5_16xlarge_is_tcp():
    v = as_json("g5.16xlarge")
    assert v["NCCL_NET_PLUGIN"] == "none" and v["HPQ_TRANSPORT"] == "tcp" and v["HPQ_TORCH_BACKEND"] == "gloo"
    assert "FI_PROVIDER" not in v and "FI_EFA_USE_DEVICE_RDMA" not in v


def test_g5_48xlarge_is_efa_sendrecv():
    v = as_json("ml.g5.48xlarge")
    assert v["FI_PROVIDER"] == "efa" and v["FI_EFA_USE_DEVICE_RDMA"] == "0" and v["HPQ_TRANSPORT"] == "efa-sendrecv"
    assert "NCCL_NET_PLUGIN" not in v


@pytest.mark.parametrize("name", ["p4d.24xlarge", "ml.p5.48xlarge"])
def test_p4d_p5_are_efa_rdma(name):
    v = as_json(name)
    assert v["FI_PROVIDER"] == "efa" and v["FI_EFA_USE_DEVICE_RDMA"] == "1" and v["HPQ_TORCH_BACKEND"] == "nccl"
    assert v["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert not set(FORBIDDEN) & set(v) and "NCCL_BUFFSIZE" not in v


def test_trn1_gets_neuron_path_and_ompi_root():
    v = as_json("trn1.32xlarge")
    assert v["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and v["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    code, sh = nccl_env("trn1.32xlarge")
    assert code == 0 and "/opt/aws/neuron/bin:$PATH" in sh and "export FI_PROVIDER=efa" in sh


def test_no_efa_override_and_legacy_profile():
    v = as_json("p5.48xlarge", "--no-efa", "--iface", "ens5")
    assert v["NCCL_NET_PLUGIN"] == "none" and v["NCCL_SOCKET_IFNAME"] == "ens5" and v["GLOO_SOCKET_IFNAME"] == "ens5"
    legacy = as_json("p5.48xlarge", "--nccl-profile", "legacy")
    assert legacy["NCCL_BUFFSIZE"] == "8388608" and legacy["NCCL_P2P_NET_CHUNKSIZE"] == "524288"


def test_sh_output_applies_in_a_shell(tmp_path):
    import subprocess

    code, sh = nccl_env("g5.48xlarge")
    script = tmp_path / "env.sh"
    script.write_text(sh)
    out = subprocess.run(["sh", "-c", f". {script} && echo $FI_EFA_USE_DEVICE_RDMA $NCCL_SOCKET_IFNAME"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "^docker,lo,veth"]


def test_k8s_format_is_a_container_env_list():
    code, out = nccl_env("p4d.24xlarge", "--output", "k8s")
    env = yaml.safe_load(out)["env"]
    assert {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"} in env
    assert all(isinstance(e["value"], str) for e in env)


def test_unknown_type_is_a_usage_error():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "hpq.cli.main", "nccl-env", "p5.96xlarge"], capture_output=True,
                         text=True)
    assert res.returncode == 2
    assert res.stderr.startswith("hpq: error: ") and "unknown instance type 'p5.96xlarge'" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1
    assert "ml.p5.48xlarge" in res.stderr  # the hint lists known p5 sizes
