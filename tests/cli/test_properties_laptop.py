"""Property-based tests (Hypothesis) over the laptop's parsers, the manifest renderer and synth's writer.

Invariants (issue 21, item 7): a parser answers a value or a one-line usage error (exit 2), never
another exception; a rendered manifest parses and carries the user's text exactly, or the text is
refused; synth's writer either writes every file or leaves the tree byte for byte as it was, and
never changes anything outside the output folder. The examples Hypothesis found while this was
written are kept as @example cases. A fixed budget: the "laptop" profile keeps the file under ~60 s.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpq import atomic
from hpq.cfn import synth_out
from hpq.cli.commands.rehearse import _env_pairs
from hpq.errors import HpqError, OperationFailed, UsageError
from hpq.manifests import render, yamlsafe
from hpq.rehearsal import throttle

# The budget, per test (a profile loaded here would change every other module's defaults in the same run): a count
# of examples, not a per-example deadline, which a busy CI machine would turn into Hypothesis "Flaky" failures.
LAPTOP = settings(max_examples=60, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)  # every code point Python can hold as UTF-8
SHORTISH = st.text(alphabet=st.sampled_from("ab=:_ 0.-\n\t\x00\u2028é1"), max_size=12)


# --param KEY=VALUE (click type), --node-env, --throttle: a value or a UsageError, nothing else.
@LAPTOP
@given(st.one_of(ANY_TEXT, SHORTISH))
@example("WorkerCount=٣")
@example("=")
@example("A=\n")
def test_param_type_answers_a_value_or_a_usage_line(text):
    from hpq.cli import inputs

    try:
        value = inputs.KEY_VALUE.convert(text, None, None)
    except click.BadParameter as exc:
        assert "\n" not in exc.format_message().strip()
        return
    key, sep, _ = value.partition("=")
    assert sep and re.fullmatch(r"[A-Za-z0-9]+", key), value


@pytest.fixture(scope="module")
def root_specs():
    from hpq.cfn import synth

    return {p["Name"]: p for p in synth.root_parameters("slurm-gpu")}


@LAPTOP
@given(st.data(), st.one_of(ANY_TEXT, SHORTISH, st.from_regex(r"-?[0-9]{1,6}", fullmatch=True)))
@example(None, "nan")
@example(None, "2.5")
@example(None, "٣")
@example(None, "")
def test_param_values_are_kept_as_given_or_refused(root_specs, data, value):
    """Every root parameter's check (cfn/synth._check_value): the value exactly as given, or one usage line."""
    from hpq.cfn import synth
    from hpq.cfn.variants import VARIANTS

    key = data.draw(st.sampled_from(sorted(root_specs))) if data is not None else "WorkerCount"
    spec = {k: v for k, v in root_specs[key].items() if k != "Name"}
    try:
        out = synth._check_value(VARIANTS["slurm-gpu"], key, value, spec)
    except UsageError as exc:
        assert "\n" not in str(exc).replace(repr(value), "")
        return
    assert out == value
    if spec.get("Type") == "Number":
        assert re.fullmatch(r"-?[0-9]+", value)
        assert spec.get("MinValue", -10**12) <= int(value) <= spec.get("MaxValue", 10**12)


@LAPTOP
@given(st.lists(st.one_of(ANY_TEXT, SHORTISH), max_size=3))
@example(["worker-1:A=1"])
@example([":A=1"])
@example(["A=\u2028"])
@example(["ÉTÉ=1"])
def test_node_env_answers_pairs_or_a_usage_error(values):
    nodes = ["controller", "worker-1", "worker-2"]
    try:
        out = _env_pairs(tuple(values), nodes)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    for node, pairs in out.items():
        assert node == "" or node in nodes
        for name, value in pairs.items():
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
            assert value.isprintable() or value == "", "a value that would split the node's environment file"


@LAPTOP
@given(st.lists(st.one_of(ANY_TEXT, st.from_regex(r"[0-9]{1,3}=[0-9]{1,4}[a-z]{3,5}", fullmatch=True)), max_size=3),
       st.integers(1, 16))
@example(["٢=30mbit"], 4)
@example(["4=30mbit"], 4)
@example(["0=0mbit"], 2)
def test_throttle_answers_worker_rates_or_a_usage_error(values, workers):
    try:
        out = throttle.parse(tuple(values), workers)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert all(0 <= index < workers for index in out)


@LAPTOP
@given(st.one_of(ANY_TEXT, st.from_regex(r"[0-9]{0,5}(\.[0-9]{0,3})?", fullmatch=True), st.sampled_from(
    ["nan", "inf", "-0", "1e3", "٣", "1_0", " 5", "+5", "0x10", "3600", "3600.0001"])))
def test_numbers_are_ascii_finite_and_in_range(text):
    """inputs.Count and inputs.Seconds: an ASCII number in range, or one usage line."""
    import math

    from hpq.cli import inputs

    for kind in (inputs.PORT, inputs.Count(1, 16, "worker nodes"), inputs.POLL_SECONDS, inputs.Seconds(1, 86400)):
        try:
            number = kind.convert(text, None, None)
        except click.BadParameter as exc:
            assert "\n" not in exc.format_message()
            continue
        assert text.strip().isascii() and math.isfinite(number)
        lo, hi = (kind.lo, kind.hi)
        assert lo <= number <= hi


# eks render --program: the manifest parses and the ConfigMap carries the file byte for byte.
@LAPTOP
@given(st.text(st.characters(codec="utf-8"), max_size=200))
@example("    indented first line\nx = 1\n")
@example("a\r\nb\r\n")
@example("x\x85y")
@example("x\u2028y")
@example("\x1b[31mred\x1b[0m")
@example("tail spaces   \n  \n\n\n")
@example("x=1\n\n")  # a literal block would need |+ and the emitter's "..." end marker (found by review)
@example("\n")
@example("\ufeffbom")
@example("\t\n")
@example("")
def test_rendered_program_round_trips_or_is_refused(tmp_path_factory, source):
    path = tmp_path_factory.mktemp("prog") / "train.py"
    path.write_bytes(source.encode("utf-8", "surrogatepass"))
    req = render.RenderRequest("nanogpt", instance_type="ml.g5.48xlarge", program=str(path))
    try:
        text = render.render(req)
    except UsageError as exc:
        assert "\n" not in str(exc)
        assert yamlsafe.first_refused(source) is not None, f"refused a text YAML can carry: {exc}"
        return
    assert yamlsafe.first_refused(source) is None
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs[0]["data"] == {"train.py": source}


@LAPTOP
@given(st.text(st.characters(codec="utf-8", blacklist_categories=("Cs",)), max_size=60))
@example("--lr '1e-3' \"two words\"")
@example("a\u2028b")
def test_rendered_program_args_reach_the_shell_line_exactly(args):
    import shlex

    req = render.RenderRequest("nanogpt", instance_type="ml.g5.48xlarge", program_args=args)
    try:
        words = shlex.split(args)
        text = render.render(req)
    except (ValueError, UsageError):
        return
    pod = [d for d in yaml.safe_load_all(text) if d][1]
    line = pod["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"][2]
    tail = shlex.split(line)[-len(words):] if words else []
    assert tail == words


# synth's writer: all or nothing, only over hpq's own files, never outside the folder.
NAMES = ["root.json", "A.json", "B.json"]
STATES = ["absent", "hpq", "edited", "foreign", "link-out", "folder"]
MANIFESTS = ["none", "hpq", "foreign", "link-out"]


def _snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p.relative_to(root))] = ("dir", b"")
            else:
                out[str(p.relative_to(root))] = ("file", p.read_bytes())
    return out


def _setup(base: Path, states: list[str], manifest: str) -> tuple[Path, Path]:
    out, outside = base / "out", base / "outside.txt"
    folder = out / "v"
    folder.mkdir(parents=True)
    outside.write_bytes(b"the user's file\n")
    old = {n: f"old {n}\n".encode() for n in NAMES}
    listed = {}
    for name, state in zip(NAMES, states, strict=True):
        p = folder / name
        if state in ("hpq", "edited"):
            p.write_bytes(old[name])
            listed[name] = old[name]
            if state == "edited":
                p.write_bytes(b"edited by hand\n")
        elif state == "foreign":
            p.write_bytes(b"the user's own\n")
        elif state == "link-out":
            p.symlink_to(outside)
        elif state == "folder":
            p.mkdir()
    (folder / "notes.txt").write_bytes(b"not hpq's\n")
    if manifest == "hpq":
        (folder / synth_out.MANIFEST_FILE).write_bytes(synth_out.manifest_text(listed))
    elif manifest == "foreign":
        (folder / synth_out.MANIFEST_FILE).write_text("root.json\nA.json\nB.json\n")
    elif manifest == "link-out":
        (folder / synth_out.MANIFEST_FILE).symlink_to(outside)
    return out, outside


@LAPTOP
@given(st.lists(st.sampled_from(STATES), min_size=3, max_size=3), st.sampled_from(MANIFESTS),
       st.integers(0, 4), st.integers(0, 3), st.booleans())
@example(["hpq", "hpq", "hpq"], "hpq", 0, 0, False)
@example(["link-out", "absent", "absent"], "none", 0, 0, False)
@example(["absent", "absent", "absent"], "link-out", 0, 0, False)
@example(["edited", "absent", "absent"], "hpq", 0, 0, False)
@example(["absent", "absent", "absent"], "none", 0, 2, False)
@example(["hpq", "absent", "hpq"], "hpq", 3, 2, True)
def test_synth_writer_is_all_or_nothing_and_stays_inside(tmp_path_factory, monkeypatch, states, manifest,
                                                         keep, fail_at, ctrl_c):
    """``fail_at`` > 0: the disk fills up at that fsync (ENOSPC), as a full tmpfs would answer, or with
    ``ctrl_c`` the user presses Ctrl-C there."""
    base = tmp_path_factory.mktemp("synth")
    out, outside = _setup(base, states, manifest)
    new = {n: f"new {n}\n".encode() for n in NAMES[:max(1, keep) if keep < 3 else 3]}
    before = _snapshot(base)
    # hpq may write only where every target is absent or its own, unchanged, under its own manifest.
    allowed = manifest in ("none", "hpq") and all(
        state == "absent" or (state == "hpq" and manifest == "hpq")
        for name, state in zip(NAMES, states, strict=True) if name in new)
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd):
        calls["n"] += 1
        if fail_at and calls["n"] == fail_at:
            if ctrl_c:
                raise KeyboardInterrupt
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(atomic.os, "fsync", fsync)
        try:
            synth_out.write_trees(out, {"v": new})
        except (UsageError, OperationFailed, KeyboardInterrupt) as exc:
            assert "\n" not in str(exc)
            assert _snapshot(base) == before, "a refusal or a failure changed the tree"
            assert not allowed or fail_at, f"refused a tree hpq owns: {exc}"
            return
    assert allowed, "wrote over a link, a foreign or an edited file, or past a foreign manifest"
    after = _snapshot(base)
    assert outside.read_bytes() == b"the user's file\n"
    assert after["out/v/notes.txt"] == ("file", b"not hpq's\n")
    for name, data in new.items():
        assert after[f"out/v/{name}"] == ("file", data)
    for name, state in zip(NAMES, states, strict=True):
        if name not in new and state == "hpq" and manifest == "hpq":
            assert f"out/v/{name}" not in after, "a file an earlier synth wrote and this one does not stays"
    listed = synth_out.read_manifest(out / "v")
    assert listed == {n: hashlib.sha256(d).hexdigest() for n, d in new.items()}
    assert not [k for k in after if k.endswith(atomic.TEMP_SUFFIX)], "a temporary file was left behind"


def test_a_full_tmpfs_leaves_the_previous_templates_whole(tmp_path):
    """The real thing where this machine lets us mount a 64 KiB tmpfs (root); the fault injection above
    covers the same path everywhere."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root); test_synth_writer_is_all_or_nothing covers ENOSPC")
    try:
        out = mnt / "out"
        first = {"v": {n: b"x" * 8000 for n in NAMES}}
        synth_out.write_trees(out, first)
        before = _snapshot(mnt)
        (mnt / "fill").write_bytes(b"\0" * (64 * 1024 - 3 * 8192 - 8192))
        before = _snapshot(mnt)
        with pytest.raises(HpqError, match="No space left on device"):
            synth_out.write_trees(out, {"v": {n: b"y" * 20000 for n in NAMES}})
        assert _snapshot(mnt) == before
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_ctrl_c_at_any_moment_is_one_line_and_130(tmp_path, delay):
    """SIGINT while Python starts, while hpq imports, while synth writes. Python's own startup (site and
    .pth files) comes before hpq can install anything: a signal there is a kill by SIGINT, or a
    traceback through site or the entry's own imports only; from hpq.console.main on it is one line and exit 130."""
    import signal
    import time

    env = {**os.environ, "HPQ_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "hpq", "synth", "--all", "-o", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        return  # finished before the signal
    if proc.returncode == -signal.SIGINT:  # killed by SIGINT during Python's own startup: hpq printed nothing
        assert "/hpq/" not in err and "/cli/" not in err, err
        return
    if proc.returncode == 1 and err.rstrip().endswith("KeyboardInterrupt"):
        # Before hpq.console.main installs the handler: Python's startup (site, .pth files) or the entry's own
        # modules still being imported (compiled, on a first run). Every hpq frame is then a module body of the
        # entry's chain, never main() or anything after it.
        frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', err)
        ours = [(path, where) for path, where in frames if "/hpq/" in path or "/cli/" in path]
        entry = ("/hpq/__init__.py", "/hpq/__main__.py", "/hpq/console.py", "/hpq/interrupts.py")
        assert all(path.endswith(entry) and where == "<module>" for path, where in ours), err
        return
    assert (proc.returncode, err.strip()) == (130, "hpq: interrupted"), err
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.name.endswith(atomic.TEMP_SUFFIX)] \
        if (tmp_path / "out").exists() else []
    assert not leftovers
