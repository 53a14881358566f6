"""scripts/efa_metrics.py: the EFA driver's hw_counters under AWS's EFA exporter's names.

Ground truth: a real scrape of AWS's EFA exporter on a 4-EFA node, as AWS's README prints it
(data/exporters/efa_exporter_sample.txt; its header says where from). The test rebuilds the sysfs that scrape was
read from (``/sys/class/infiniband/<dev>/ports/1/hw_counters/<counter>``, the layout class_amazon_efa.go reads,
with ``<dev>/device/driver`` the efa driver) and checks hpq's writer prints the same families, help texts, types,
labels and values. That node's driver had no retransmit/unresponsive/impaired counters, so the collector (which
skips a missing counter) printed none: hpq must leave them out too. Broken twins: a device of another driver, a
counter that is not a number, no EFA device at all.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpq.scripts import efa_metrics
from tests.support import CHECKOUT

SAMPLE = Path(CHECKOUT) / "tests/observability/data/exporters/efa_exporter_sample.txt"
NAMES = {
    line.strip()
    for line in (Path(CHECKOUT) / "tests/observability/data/exporters/efa_exporter.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}


def families(text: str) -> dict:
    """name -> (type, help, {(device, port): value}) through Prometheus's own parser (hpq's own series dropped)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("node_amazonefa"):
            continue
        rows = {(s.labels.get("device"), s.labels.get("port")): s.value for s in fam.samples}
        out[fam.name] = (fam.type, fam.documentation, rows)
    return out


def build_sysfs(root: Path, fams: dict, driver: str = "efa") -> Path:
    """The sysfs a scrape was read from: one file per counter and port, the device bound to ``driver``."""
    (root / ".drivers" / driver).mkdir(parents=True, exist_ok=True)
    devices = set(fams["node_amazonefa_info"][2]) if "node_amazonefa_info" in fams else set()
    for device, _ in devices:
        (root / device / "device").mkdir(parents=True, exist_ok=True)
        os.symlink(root / ".drivers" / driver, root / device / "device" / "driver")
    for name, (_, _, rows) in fams.items():
        if name == "node_amazonefa_info":
            continue
        for (device, port), value in rows.items():
            folder = root / device / "ports" / port / "hw_counters"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name.removeprefix("node_amazonefa_")).write_text(f"{int(value)}\n")
    return root


def test_the_sysfs_of_a_real_scrape_gives_the_same_series_help_and_types(tmp_path):
    real = families(SAMPLE.read_text())
    assert len(real) == 19 and len(real["node_amazonefa_info"][2]) == 4  # info + 18 counters
    text, ok = efa_metrics.collect(str(build_sysfs(tmp_path, real)))
    ours = families(text)
    assert ok and ours == real
    # the sick-link counters this driver lacked are left out, never written as 0
    assert "node_amazonefa_retrans_timeout_events" not in ours
    assert all(name in NAMES for name in ours)


def test_the_sick_link_counters_are_written_where_the_driver_has_them(tmp_path):
    real = families(SAMPLE.read_text())
    root = build_sysfs(tmp_path, real)
    folder = root / "rdmap16s27/ports/1/hw_counters"
    for counter, value in (("retrans_timeout_events", 3), ("unresponsive_remote_events", 0),
                           ("impaired_remote_conn_events", 1), ("retrans_pkts", 91)):
        (folder / counter).write_text(f"{value}\n")
    ours = families(efa_metrics.collect(str(root))[0])
    assert ours["node_amazonefa_retrans_timeout_events"][2] == {("rdmap16s27", "1"): 3}
    assert ours["node_amazonefa_impaired_remote_conn_events"][0] == "counter"
    assert ours["node_amazonefa_unresponsive_remote_events"][1] == (
        "Number of times SRD connection remote was unresponsive")


def test_a_device_of_another_driver_and_a_counter_that_is_not_a_number_are_left_out(tmp_path):
    real = families(SAMPLE.read_text())
    root = build_sysfs(tmp_path, real)
    (root / "rdmap16s27/ports/1/hw_counters/tx_bytes").write_text("garbage\n")
    (root / "rdmap32s27/ports/1/hw_counters/rx_bytes").unlink()
    other = {"node_amazonefa_info": ("gauge", "", {("mlx5_0", None): 1}),
             "node_amazonefa_tx_bytes": ("counter", "", {("mlx5_0", "1"): 5})}
    build_sysfs(root, other, driver="mlx5_core")
    ours = families(efa_metrics.collect(str(root))[0])
    assert ("rdmap16s27", "1") not in ours["node_amazonefa_tx_bytes"][2]
    assert ("rdmap32s27", "1") not in ours["node_amazonefa_rx_bytes"][2]
    assert not any(dev == "mlx5_0" for _, _, rows in ours.values() for dev, _ in rows)
    assert len(ours["node_amazonefa_info"][2]) == 4


def test_no_efa_device_writes_up_0_and_exit_1(tmp_path, capsys):
    text, ok = efa_metrics.collect(str(tmp_path / "absent"))
    assert not ok and text.strip().endswith("hpq_efa_metrics_up 0.0")
    assert "no device under" in capsys.readouterr().err
    res = subprocess.run(["python3", "-m", "hpq.scripts.efa_metrics", "--textfile-dir", str(tmp_path)],
                         capture_output=True, text=True, cwd=CHECKOUT)
    assert res.returncode in (0, 1) and (tmp_path / efa_metrics.OUTPUT_NAME).is_file()  # this host's own sysfs
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / efa_metrics.OUTPUT_NAME).mkdir()
    res = subprocess.run(["python3", "-m", "hpq.scripts.efa_metrics", "--textfile-dir", str(tmp_path / "taken")],
                         capture_output=True, text=True, cwd=CHECKOUT)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith("efa_metrics: cannot write ")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=80))
def test_any_counter_file_gives_valid_exposition_text(data):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = build_sysfs(Path(tmp), {"node_amazonefa_info": ("gauge", "", {("rdmap0s0", None): 1}),
                                       "node_amazonefa_tx_bytes": ("counter", "", {("rdmap0s0", "1"): 0})})
        (root / "rdmap0s0/ports/1/hw_counters/tx_bytes").write_bytes(data)
        text, ok = efa_metrics.collect(str(root))
        fams = families(text)
        assert ok and fams["node_amazonefa_info"][2] == {("rdmap0s0", None): 1}
        value = fams.get("node_amazonefa_tx_bytes", ("", "", {}))[2].get(("rdmap0s0", "1"))
        stripped = data.strip()
        assert value == (int(stripped) if stripped.isdigit() and stripped.isascii() else None)


def test_it_keeps_to_python37():
    from tests.lifecycle.test_lifecycle_python37 import py37_offences

    path = Path(efa_metrics.__file__)
    assert py37_offences(path.read_text(), path.name) == []
