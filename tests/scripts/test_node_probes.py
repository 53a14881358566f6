"""What node-side code learns from the node itself: the EFA probe (sysfs + fi_info) and the IMDS client.

Real: the probe's own file walking and subprocess call, the IMDS client's HTTP (IMDSv2 token, then
v1). Stand-ins: a sysfs tree in a temp folder laid out like the kernel's (/sys/class/infiniband/<dev>/
device/driver -> .../drivers/efa), an ``fi_info`` script printing what libfabric's prints (``provider:
efa`` blocks; with no efa provider it prints ``fi_getinfo: -61 (No data available)`` on stderr and exits
non-zero), and the imds_factory fixture of tests/conftest.py (hpq.standins.imds) for IMDS.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from hpq.lifecycle import transport
from hpq.scripts import nodeinfo

FI_INFO_EFA = """provider: efa
    fabric: efa
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""


def fake_sysfs(root: Path, devices: int) -> None:
    drivers = root / "sys/bus/pci/drivers/efa"
    drivers.mkdir(parents=True)
    for i in range(devices):
        dev = root / f"sys/class/infiniband/rdmap{16 + i}s27/device"
        dev.mkdir(parents=True)
        (dev / "driver").symlink_to(drivers)
    route = root / "proc/net/route"
    route.parent.mkdir(parents=True)
    route.write_text("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                     "enp71s0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")


def fake_fi_info(where: Path, stdout: str, rc: int, stderr: str = "") -> str:
    path = where / "fi_info"
    path.write_text("#!/bin/sh\n"
                    f"[ \"$1 $2\" = \"-p efa\" ] || exit 3\n"
                    f"printf '%s' {stdout!r}\nprintf '%s' {stderr!r} >&2\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_efa_devices_and_a_working_provider_keep_rdma(tmp_path):
    fake_sysfs(tmp_path, 4)
    probe = transport.probe_node(str(tmp_path), fi_info=fake_fi_info(tmp_path, FI_INFO_EFA, 0))
    assert probe.efa_devices == 4 and probe.fi_info_efa is True and probe.default_iface == "enp71s0"
    env = transport.node_environment("ml.p4d.24xlarge", probe, "default")
    assert env.transport == transport.EFA_RDMA and env.variables["FI_PROVIDER"] == "efa"


def test_efa_device_without_an_efa_provider_falls_back_to_tcp(tmp_path):
    """The device is there but libfabric has no efa provider (EFA installer missing): NCCL over EFA would fail
    the handshake, so the node gets the TCP environment and says why."""
    fake_sysfs(tmp_path, 4)
    fi = fake_fi_info(tmp_path, "", 1, "fi_getinfo: -61 (No data available)\n")
    probe = transport.probe_node(str(tmp_path), fi_info=fi)
    assert probe.efa_devices == 4 and probe.fi_info_efa is False
    env = transport.node_environment("ml.p4d.24xlarge", probe, "default")
    assert env.transport == transport.TCP and env.variables["NCCL_NET_PLUGIN"] == "none"
    assert any("fi_info reports no efa provider" in n for n in env.notes)
    assert env.variables["NCCL_SOCKET_IFNAME"] == "enp71s0"


def test_no_fi_info_means_unknown_not_tcp(tmp_path, monkeypatch):
    fake_sysfs(tmp_path, 1)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert transport.fi_info_has_efa(None) is None or os.path.exists("/opt/amazon/efa/bin/fi_info")
    probe = transport.probe_node(str(tmp_path))
    assert transport.node_environment("ml.g5.48xlarge", probe, "default").transport == transport.EFA_SENDRECV


def test_imds_client_uses_a_token(imds_factory, monkeypatch):
    """HyperPod enforces IMDSv2: the node commands ask for a token and send it (v1 is refused here)."""
    imds = imds_factory({"": {"instance-type": "p5.48xlarge"}})
    monkeypatch.setenv("HPQ_IMDS_ENDPOINT", imds.url)
    assert nodeinfo.imds_instance_type() == "p5.48xlarge"
    assert ("GET", "/latest/meta-data/instance-type", True) in imds.log


def test_imds_client_falls_back_to_v1(imds_factory, monkeypatch):
    imds = imds_factory({"": {"instance-type": "g5.48xlarge"}}, v1_enabled=True, refuse_token=403)
    monkeypatch.setenv("HPQ_IMDS_ENDPOINT", imds.url)
    assert nodeinfo.imds_instance_type() == "g5.48xlarge"


def test_imds_unreachable_or_off_is_none_quickly(monkeypatch, tmp_path):
    from tests.support import free_port

    monkeypatch.setenv("HPQ_IMDS_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    start = time.monotonic()
    assert nodeinfo.imds_instance_type(timeout=0.5) is None
    assert time.monotonic() - start < 5
    monkeypatch.setenv("HPQ_IMDS_ENDPOINT", "off")
    assert nodeinfo.imds_instance_type() is None
    # resolve_instance_type: the override, then node-info.json, then IMDS; normalised to ml.
    info = tmp_path / "node-info.json"
    info.write_text('{"instance_type": "trn1.32xlarge"}')
    monkeypatch.setenv("HPQ_NODE_INFO", str(info))
    monkeypatch.delenv("HPQ_INSTANCE_TYPE", raising=False)
    assert nodeinfo.resolve_instance_type() == "ml.trn1.32xlarge"
    assert nodeinfo.resolve_instance_type("p5.48xlarge") == "ml.p5.48xlarge"


@pytest.mark.parametrize("mode", [{"fail_status": 500, "fail_requests": 5}])
def test_imds_errors_are_none(imds_factory, monkeypatch, mode):
    imds = imds_factory({"": {"instance-type": "p5.48xlarge"}}, **mode)
    monkeypatch.setenv("HPQ_IMDS_ENDPOINT", imds.url)
    assert nodeinfo.imds_instance_type() is None
