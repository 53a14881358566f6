"""The foundation every area builds on: the catalog, the node bundle, the CLI entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hpq
from hpq.lifecycle import bundle, catalog, names


def run_hpq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", *args], capture_output=True, text=True, timeout=120)


class TestCatalog:
    def test_required_types_present(self):
        required = [f"ml.g5.{s}" for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
                                            "24xlarge", "48xlarge")]
        required += ["ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
                     "ml.p5en.48xlarge", "ml.trn1.32xlarge", "ml.trn1n.32xlarge", "ml.trn2.48xlarge",
                     "ml.g6.48xlarge", "ml.g6e.48xlarge", "ml.m5.xlarge", "ml.c5.xlarge"]
        missing = [r for r in required if r not in catalog.CATALOG]
        assert not missing

    def test_seed_measurements(self):
        """Seed 004's table: the transport class of the four measured types, and its two-node busbw
        figures (p4d/p5 figures come from later publications: tests/scripts/test_report_verdict.py)."""
        assert catalog.lookup("ml.g5.16xlarge").efa_interfaces == 0
        assert catalog.expected_busbw("ml.g5.16xlarge", 2).gbps == 3.0
        g548 = catalog.lookup("ml.g5.48xlarge")
        assert g548.has_efa and not g548.efa_device_rdma and catalog.expected_busbw("ml.g5.48xlarge", 2).gbps == 12.0
        assert catalog.lookup("ml.p4d.24xlarge").efa_device_rdma
        p5 = catalog.lookup("ml.p5.48xlarge")
        assert p5.efa_interfaces == 32 and p5.efa_device_rdma

    @pytest.mark.parametrize("entry", list(catalog.CATALOG.values()), ids=lambda e: e.name)
    def test_entry_is_consistent(self, entry: catalog.InstanceType):
        assert entry.name.startswith("ml.") and entry.name.count(".") == 2
        assert entry.accelerator in (catalog.GPU, catalog.TRAINIUM, catalog.CPU)
        assert (entry.accelerator_count > 0) == entry.is_accelerated
        assert not entry.efa_device_rdma or entry.has_efa, "device RDMA without EFA is impossible"
        assert entry.network_gbps > 0 and entry.vcpus > 0 and entry.memory_gib > 0
        fields = set(catalog.InstanceType.__dataclass_fields__)
        assert set(entry.unconfirmed) <= fields

    def test_kinds_partition_the_catalog(self):
        gpu, trn, cpu = catalog.gpu_types(), catalog.trainium_types(), catalog.controller_types()
        assert set(gpu).isdisjoint(trn) and set(gpu).isdisjoint(cpu) and set(trn).isdisjoint(cpu)
        assert len(gpu) + len(trn) + len(cpu) == len(catalog.CATALOG)

    def test_lookup_accepts_short_names_and_explains_unknown(self):
        assert catalog.lookup("p5.48xlarge").name == "ml.p5.48xlarge"
        with pytest.raises(catalog.UnknownInstanceType, match="known p5 sizes: ml.p5.48xlarge"):
            catalog.lookup("ml.p5.4xlarge")


class TestNames:
    def test_cluster_name_rule(self):
        assert names.valid_hyperpod_name("train-2")
        assert not names.valid_hyperpod_name("-train")
        assert not names.valid_hyperpod_name("a" * 64)

    def test_key_layout(self):
        assert names.template_key("1.0", "slurm-gpu") == "hpq/1.0/templates/slurm-gpu/root.json"
        assert names.node_bundle_prefix("1.0") == "hpq/1.0/node/"


class TestNodeBundle:
    def test_bundle_keeps_import_names_and_no_caches(self):
        files = bundle.node_bundle_files()
        assert "hpq/__init__.py" in files and "hpq/errors.py" in files
        assert "hpq/lifecycle/transport.py" in files and "hpq/lifecycle/catalog.py" in files
        # Everything under hpq/, plus the OnCreate entry at the root (contract: OnCreate = "on_create.sh").
        assert all(k.startswith(("hpq/lifecycle/", "hpq/scripts/", "hpq/")) for k in files if k != names.ON_CREATE_ENTRY)
        assert names.ON_CREATE_ENTRY == "on_create.sh" and names.ON_CREATE_ENTRY in files
        assert "hpq/lifecycle/on_create.sh" in files  # what the entry runs
        assert not any("__pycache__" in k or k.endswith(".pyc") for k in files)
        assert not any(k.startswith(("hpq/cli/", "hpq/cfn/", "hpq/tests/")) for k in files)

    def test_bundle_runs_with_only_its_own_files(self, tmp_path):
        """Copy the bundle alone into a folder and import the transport function from it with -I -S."""
        for key, src in bundle.node_bundle_files().items():
            dest = tmp_path / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(open(src, "rb").read())
        code = (f"import sys, json; sys.path.insert(0, {str(tmp_path)!r}); from hpq.lifecycle import transport; "
                "print(json.dumps(transport.node_environment('ml.g5.16xlarge').variables))")
        out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["NCCL_NET_PLUGIN"] == "none"


class TestCli:
    def test_version(self):
        res = run_hpq("--version")
        assert res.returncode == 0 and hpq.__version__ in res.stdout

    def test_help_imports_no_heavy_sdk(self):
        code = ("import sys; from hpq.cli.main import cli\n"
                "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
                "heavy = [m for m in ('boto3', 'botocore', 'troposphere', 'kubernetes', 'cfnlint', 'paramiko',"
                " 'jinja2', 'rich', 'torch') if m in sys.modules]\nprint('HEAVY', heavy)")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "HEAVY []" in res.stdout

    def test_every_registered_command_resolves(self):
        """Each command in the registry imports and is a click command (catches typos in the table)."""
        import click

        from hpq.cli.main import COMMANDS, cli

        ctx = click.Context(cli)
        for name in COMMANDS:
            cmd = cli.get_command(ctx, name)
            assert isinstance(cmd, click.Command), name

    def test_unknown_command_is_one_line_exit_2(self):
        res = run_hpq("no-such-command")
        assert res.returncode == 2
        assert "Traceback" not in res.stderr
        assert res.stderr.strip().startswith("hpq: error:")


def test_the_tests_do_not_ship_with_hpq():
    """The distribution installs hpq's packages only: no folder of pyproject's package-dir is tests/, no package
    is named like one (the tests import as ``tests`` from the checkout, pyproject's pytest ``pythonpath``)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip's own copy of the same parser
        from pip._vendor import tomli as tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    setup = project["tool"]["setuptools"]
    assert "tests" not in setup["package-dir"].values()
    assert not [p for p in setup["packages"] if "tests" in p.split(".")]
    assert project["tool"]["pytest"]["ini_options"]["pythonpath"] == ["."]


def test_ctrl_c_during_a_batch_commit_lands_after_every_rename_even_with_other_threads(tmp_path, monkeypatch):
    """hpq.atomic.Batch.commit holds Ctrl-C back until the whole set is in place. With another thread alive
    (uploads, SSH, servers) a signal mask on the main thread does not do that: the kernel hands the signal to
    the other thread and Python still runs the handler in the main thread. Broken twin: the same commit with
    nothing held back is cut off after the first rename."""
    import os
    import signal
    import threading
    import time

    from hpq import atomic, signals_held

    real_replace = os.replace

    def replace_then_ctrl_c(src, dst):  # the first rename is followed by a Ctrl-C and a moment for it to land
        real_replace(src, dst)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)

    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    helper.start()
    try:
        for held, name in ((True, "whole"), (False, "twin")):
            sent: list[int] = []
            folder = tmp_path / name
            monkeypatch.setattr(atomic.os, "replace", replace_then_ctrl_c)
            if not held:
                monkeypatch.setattr(atomic, "held_back", lambda signals: signals_held.contextlib.nullcontext())
            with pytest.raises(KeyboardInterrupt), atomic.Batch() as batch:
                for i in range(3):
                    batch.stage(folder / f"f{i}", b"new")
                batch.commit()
            placed = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
            assert placed == (["f0", "f1", "f2"] if held else ["f0"]), (name, placed)
    finally:
        stop.set()
        helper.join()
