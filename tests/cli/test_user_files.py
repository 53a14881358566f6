"""Every file a user names (option, argument, environment variable) goes through one guarded reader
(hpq.user_files): the same bad files fed to each command give one line and exit 2, never a traceback, a hang,
memory exhaustion or a written file. Issue 25: a non-UTF-8 ``HPQ_PRICE_FILE`` was "internal error:
UnicodeDecodeError", deep nesting a RecursionError, /dev/zero read until memory ran out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpq import user_files
from hpq.errors import UsageError


def bad_file(kind: str, tmp_path: Path) -> str:
    """A path of the given kind of bad input."""
    path = tmp_path / f"bad-{kind}"
    if kind == "non-utf8":
        path.write_bytes(b'{"offers": "\xff\xfe"}')
    elif kind == "deep":
        path.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    elif kind == "huge":
        with path.open("wb") as fh:
            fh.truncate(80 << 20)  # sparse: over every reader's bound
    elif kind == "devzero":
        return "/dev/zero"
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    return str(path)


KINDS = ["non-utf8", "deep", "huge", "devzero", "directory", "fifo"]

# (arguments with {F} for the file, extra environment with {F}, cwd-relative outputs that must not appear)
COMMANDS = {
    "prices show --file": (["prices", "show", "--file", "{F}"], {}),
    "HPQ_PRICE_FILE prices show": (["prices", "show"], {"HPQ_PRICE_FILE": "{F}"}),
    "report": (["report", "{F}", "-o", "out.html"], {}),
    "nccl-report": (["nccl-report", "{F}"], {}),
    "lint (synth's state file)": (["lint"], {"HPQ_STATE_DIR": "{D}"}),
    "doctor --sweep-result": (["doctor", "my-cluster", "--sweep-result", "{F}", "--region", "us-west-2"],
                              {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}),
}


def hpq(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, **env})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_refuses_each_bad_file_in_one_line(tmp_path, command, kind):
    args, env = COMMANDS[command]
    if command.startswith("lint"):  # the state file is <HPQ_STATE_DIR>/last-synth-dir
        state_dir = tmp_path / "state"
        state_dir.mkdir()
        target = state_dir / "last-synth-dir"
        if kind == "devzero":
            target.symlink_to("/dev/zero")
        else:
            src = bad_file(kind, tmp_path)
            os.rename(src, target)
        path, env = str(target), {k: v.replace("{D}", str(state_dir)) for k, v in env.items()}
    else:
        path = bad_file(kind, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    res = hpq([a.replace("{F}", path) for a in args], {k: v.replace("{F}", path) for k, v in env.items()}, work)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("hpq: error: "), res.stderr[-2000:]
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert list(work.iterdir()) == []  # nothing written


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_names_the_file_and_why(tmp_path, kind):
    path = bad_file(kind, tmp_path)
    with pytest.raises(UsageError) as err:
        user_files.read_json(path, 16 << 20, "price file")
    line = str(err.value)
    assert "\n" not in line and "price file" in line and len(line) < 300
    why = {"non-utf8": "not UTF-8", "deep": "nests too deeply", "huge": "over 16777216 bytes",
           "devzero": "character device", "directory": "a directory", "fifo": "FIFO"}[kind]
    assert why in line, line


def test_a_good_file_reads_whole(tmp_path):
    good = tmp_path / "ok.json"
    good.write_text('{"offers": {}}', encoding="utf-8")
    assert user_files.read_json(str(good), 100) == {"offers": {}}
    with pytest.raises(UsageError, match="over 5 bytes"):  # the bound is exact: N bytes pass, N+1 do not
        user_files.read_bytes(str(good), 5)
    assert user_files.read_bytes(str(good), len(good.read_bytes())) == good.read_bytes()
