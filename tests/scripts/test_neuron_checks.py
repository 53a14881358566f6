"""The Trainium checks (scripts/neuron_checks.py, node_doctor.neuron_findings) on what Neuron's tools print, as
documented by AWS (tests/data/node_tools/neuron/README.md: neuron-ls -j from the Neuron LS User Guide, the
NEURON_HW_ERR kernel line from the Neuron Runtime troubleshooting guide). No Trainium host here: node_doctor runs
with a stand-in ``neuron-ls`` and ``dmesg`` on PATH that print those documented samples, healthy and broken."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest

from hpq.lifecycle import catalog
from hpq.scripts import neuron_checks, node_doctor
from tests.support import CHECKOUT

DATA = Path(CHECKOUT) / "tests/data/node_tools"
DOC = json.loads((DATA / "neuron/neuron-ls-j-trn2.json").read_text())
HW_ERR = (DATA / "neuron/kernel-neuron-hw-err.txt").read_text()
HEALTHY_DMESG = (DATA / "h100-x1/dmesg.out").read_text()


def _devices(count: int) -> list:
    """The documented device 0, once per device of the type (its own index and bus id), as neuron-ls lists them."""
    out = []
    for i in range(count):
        d = copy.deepcopy(DOC[0])
        d["neuron_device"], d["bdf"] = i, "%02x:00.0" % (0x80 + i)
        out.append(d)
    return out


def test_the_documented_sample_parses():
    devices = neuron_checks.parse_neuron_ls(json.dumps(DOC))
    assert [(d.index, d.bdf, d.cores) for d in devices] == [(0, "cc:00.0", 4), (15, "f7:00.0", 4)]
    assert devices[0].runtime_versions == ("2.0.0",)
    # The 2.34 form: instance-wide fields around the same device objects.
    wrapped = {"instance_type": "trn2.48xlarge", "neuron_devices": DOC}
    assert [d.index for d in neuron_checks.parse_neuron_ls(json.dumps(wrapped))] == [0, 15]


@pytest.mark.parametrize("bad", ["", "not json", "{}", '{"a": 1}', '[{"bdf": "cc:00.0"}]', '[{"neuron_device": "0"}]'])
def test_what_is_not_neuron_ls_json_is_refused(bad):
    with pytest.raises(ValueError):
        neuron_checks.parse_neuron_ls(bad)


@pytest.mark.parametrize("itype", ["ml.trn1.32xlarge", "ml.trn2.48xlarge"])
def test_device_count_against_the_catalog_and_its_broken_twin(itype):
    want = catalog.lookup(itype).accelerator_count
    assert neuron_checks.judge_neuron(neuron_checks.parse_neuron_ls(json.dumps(_devices(want))), want) == []
    short = neuron_checks.judge_neuron(neuron_checks.parse_neuron_ls(json.dumps(_devices(want - 1))), want)
    assert [(f.kind, f.severity, f.action) for f in short] == [("neuron_count", "critical", "reboot")]
    assert f"{want - 1} of {want}" in short[0].evidence
    assert neuron_checks.judge_neuron(None, want)[0].kind == "neuron_count"


def test_neuron_hardware_errors_in_the_kernel_log_replace_the_node():
    assert neuron_checks.judge_neuron_log(HEALTHY_DMESG) == []
    found = neuron_checks.judge_neuron_log(HEALTHY_DMESG + "[ 4242.000000] " + HW_ERR * 2)
    assert [(f.kind, f.severity, f.action, f.gpu) for f in found] == [("neuron_hw_error", "critical", "replace", "0")]
    assert "SRAM_UNCORRECTABLE_ERROR on Neuron device 0 (2 times)" in found[0].evidence


def _tools(tmp_path, monkeypatch, neuron_ls: str | None, dmesg: str) -> None:
    """neuron-ls and dmesg stand-ins first on PATH (neuron-ls None: not installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "dmesg.txt").write_text(dmesg)
    scripts = {"dmesg": f"#!/bin/sh\ncat {tmp_path}/dmesg.txt\n"}
    if neuron_ls is not None:
        (tmp_path / "neuron-ls.out").write_text(neuron_ls)
        scripts["neuron-ls"] = (f"#!/bin/sh\n[ -s {tmp_path}/neuron-ls.out ] || "
                                "{ echo 'neuron-ls: no Neuron devices found' >&2; exit 1; }\n"
                                f"cat {tmp_path}/neuron-ls.out\n")
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    if neuron_ls is None:
        assert os.path.exists(bin_dir / "dmesg")


def test_node_doctor_on_a_trainium_node_healthy_and_broken(tmp_path, monkeypatch):
    entry = catalog.lookup("ml.trn1.32xlarge")
    cases = {
        "healthy": (json.dumps(_devices(16)), HEALTHY_DMESG, [], []),
        "one device gone": (json.dumps(_devices(15)), HEALTHY_DMESG, ["neuron_count"], []),
        "neuron-ls failing": ("", HEALTHY_DMESG, ["neuron_count"], []),
        "hardware error": (json.dumps(_devices(16)), HEALTHY_DMESG + HW_ERR, ["neuron_hw_error"], []),
        "not installed": (None, HEALTHY_DMESG, [], ["neuron: neuron-ls not found"]),
    }
    for name, (ls, dmesg, kinds, unchecked) in cases.items():
        case = tmp_path / name.replace(" ", "-")
        case.mkdir()
        _tools(case, monkeypatch, ls, dmesg)
        found, why = node_doctor.neuron_findings(entry)
        assert ([f.kind for f in found], why) == (kinds, unchecked), name
