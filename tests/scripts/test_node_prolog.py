"""The Slurm prolog option (scripts/node_prolog.py, lifecycle/prolog.py): node_doctor's quick checks drain the node
with hpq's reason and fail the prolog (the job does not start there) on a critical finding, and let the job start
otherwise; the lifecycle's slurm.conf line appears only with hpq-cluster.json's node_prolog true.

The node's tools are stand-ins on PATH printing the rehearsal's expansion of the real H100 capture
(rehearsal/faults.smi_xml: tests/data/node_tools/h100-x1, one <gpu> for ml.g5.xlarge's one GPU) and, for the
broken twin, the same with the ECC count inject() writes; ``scontrol`` is a stand-in that records its arguments.
Under a real slurmd: tests/validation/test_doctor_rehearse.py (``hpq rehearse --prolog``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hpq.lifecycle import prolog, roles
from hpq.rehearsal import faults
from hpq.scripts import node_prolog

DMESG = (Path(__file__).parents[1] / "data/node_tools/h100-x1/dmesg.out").read_text()


def _node(tmp_path: Path, monkeypatch, ecc: bool) -> Path:
    xml = faults.smi_xml(1, "A10G")
    if ecc:
        xml = xml.replace("<dram_uncorrectable>0<", "<dram_uncorrectable>4<", 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "smi.xml").write_text(xml)
    (tmp_path / "dmesg.txt").write_text(DMESG)
    tools = {
        "nvidia-smi": f'case "$1 $2" in\n "-q -x") cat {tmp_path}/smi.xml ;;\n'
                      '\n *) exit 2 ;;\nesac\n',
        "dmesg": f"cat {tmp_path}/dmesg.txt\n",
        "systemctl": "exit 1\n",
        "scontrol": f'printf "%s\\n" "$@" > {tmp_path}/scontrol.args\n',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SLURMD_NODENAME", "node-3")
    return tmp_path


def test_a_healthy_node_lets_the_job_start_and_its_broken_twin_is_drained_with_the_reason(tmp_path, monkeypatch,
                                                                                          capsys):
    ok = _node(tmp_path / "ok", monkeypatch, ecc=False)
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge", "--fsx", ""]) == node_prolog.EXIT_OK
    assert not (ok / "scontrol.args").exists()  # nothing drained
    sick = _node(tmp_path / "sick", monkeypatch, ecc=True)
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge", "--fsx", ""]) == node_prolog.EXIT_DRAINED
    args = (sick / "scontrol.args").read_text().splitlines()
    assert args[:3] == ["update", "NodeName=node-3", "State=DRAIN"]
    assert args[3].startswith("Reason=hpq prolog: ecc_uncorrectable: 00000000:00:06.0: 4 uncorrectable ECC")
    assert len(args[3]) <= len("Reason=") + node_prolog.REASON_MAX
    assert "ecc_uncorrectable" in capsys.readouterr().err


def test_fsx_is_expected_only_where_the_lifecycle_mounted_it(tmp_path, monkeypatch, capsys):
    """No record of an FSx mount (the lifecycle found none, or an EKS node): /fsx is not checked, the job starts.
    With the fsx step's record (names.FSX_RECORD): checked in the mount table the record names, which is how the
    prolog sees the table the lifecycle read, since slurmd gives its Prolog no HPQ_PROC_MOUNTS (tried under a real
    slurmd 22.05: docs/doctor.md). A table showing /fsx as lustre passes; the same table without it drains
    (the broken twin); HPQ_PROC_MOUNTS still wins over the record."""
    node = _node(tmp_path / "n", monkeypatch, ecc=False)
    root = tmp_path / "root"
    monkeypatch.setenv("HPQ_ROOT", str(root))
    monkeypatch.delenv("HPQ_PROC_MOUNTS", raising=False)
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge"]) == node_prolog.EXIT_OK  # no record: no /fsx
    assert not (node / "scontrol.args").exists()
    lustre, bare = tmp_path / "lustre.mounts", tmp_path / "bare.mounts"
    lustre.write_text("10.1.0.9@tcp:/abcdefgh /fsx lustre rw,relatime,flock 0 0\n")
    bare.write_text("/dev/root / ext4 rw 0 0\n")
    record = root / "etc/hpq/fsx.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"mount_point": "/fsx", "mount_table": str(lustre)}))
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge"]) == node_prolog.EXIT_OK
    assert not (node / "scontrol.args").exists()
    record.write_text(json.dumps({"mount_point": "/fsx", "mount_table": str(bare)}))
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge"]) == node_prolog.EXIT_DRAINED
    assert "Reason=hpq prolog: fsx_missing: /fsx is not mounted as lustre (no mount)" in \
        (node / "scontrol.args").read_text()
    (node / "scontrol.args").unlink()
    monkeypatch.setenv("HPQ_PROC_MOUNTS", str(lustre))
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge"]) == node_prolog.EXIT_OK
    assert node_prolog.main(["--instance-type", "ml.g5.xlarge", "--fsx", ""]) == node_prolog.EXIT_OK


def test_the_prolog_refuses_bad_arguments_and_lets_an_unknown_type_run(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        node_prolog.main(["--tool-timeout", "0"])
    assert exc.value.code == 2
    assert node_prolog.main(["--instance-type", "ml.nope.xlarge"]) == node_prolog.EXIT_OK
    assert "not checked" in capsys.readouterr().err


CONF = "ClusterName=c1\nSlurmctldHost=ip-10-1-0-4\nSlurmctldParameters=enable_configless\nNodeName=node-[1-2]\n"


def test_the_slurm_conf_line_follows_the_setting_and_leaves_a_prolog_of_the_clusters_own_alone():
    on, done = prolog.ensure(CONF, True)
    assert done == "added" and on.endswith(f"{prolog.MARK}\nProlog={prolog.PROLOG_PROGRAM}\n")
    assert prolog.ensure(on, True) == (on, "kept")  # idempotent
    off, done = prolog.ensure(on, False)
    assert (off, done) == (CONF, "removed")
    assert prolog.ensure(CONF, False) == (CONF, "absent")  # off by default: nothing added
    theirs = CONF + "Prolog=/opt/site/prolog.sh\n"
    assert prolog.ensure(theirs, True) == (theirs, "theirs")
    assert prolog.ensure(theirs, False) == (theirs, "theirs")


def _cluster_json(tmp_path: Path, **extra) -> str:
    doc = {"schema_version": 1, "orchestrator": "slurm", "cluster_name": "c1", "controller_group": "controller",
           "login_group": None, "worker_groups": ["workers"], "partition": "dev", "fsx_dns_name": None,
           "fsx_mountname": None, **extra}
    path = tmp_path / "hpq-cluster.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_hpq_cluster_json_node_prolog_is_off_by_default_and_must_be_a_boolean(tmp_path):
    from hpq.lifecycle import names

    assert names.HPQ_CLUSTER_CONFIG_SCHEMA == 1
    assert roles.load_cluster_config(_cluster_json(tmp_path)).node_prolog is False
    assert roles.load_cluster_config(_cluster_json(tmp_path, node_prolog=True)).node_prolog is True
    with pytest.raises(roles.RoleFileError):
        roles.load_cluster_config(_cluster_json(tmp_path, node_prolog="true"))


def test_the_wrapper_runs_the_prolog(tmp_path):
    bin_path = Path(__file__).parents[2] / "scripts" / "bin" / "hpq-node-prolog"
    res = subprocess.run([str(bin_path), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "drain the node" in res.stdout
