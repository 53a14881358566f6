"""Every row of docs/bad-input.md, run through the real ``hpq`` entry point in a subprocess.

The doc is the single source: each table row is one test case. A row must exit with its code
(2), print exactly its one stderr line and nothing that looks like a traceback, leave the working
folder and $HOME untouched, and finish within a few seconds. AWS is a closed port on 127.0.0.1,
so a check that was skipped reaches "AWS" and fails with exit 1 instead of 2.
``HPQ_UPDATE_GOLDEN=1`` rewrites the stderr column from what hpq prints now (review the diff).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"
UPDATE = os.environ.get("HPQ_UPDATE_GOLDEN") == "1"
TIME_LIMIT_S = 8.0  # "a few seconds": a cold python + botocore import takes ~0.5 s here
_ROW_RE = re.compile(r"^\|\s*(\d+)\s*\|")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass
class Row:
    number: int
    command: str
    exit_code: int
    stderr: str
    line_index: int


def _unspan(cell: str) -> str:
    """The text of a markdown code span cell (`x` or `` x ``), with escaped pipes restored."""
    cell = cell.strip()
    for fence in ("``", "`"):
        if cell.startswith(fence) and cell.endswith(fence) and len(cell) >= 2 * len(fence):
            cell = cell[len(fence):-len(fence)]
            if fence == "``":
                cell = cell[1:-1] if cell.startswith(" ") and cell.endswith(" ") else cell
            break
    return cell.replace("\\|", "|")


def _span(text: str) -> str:
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def load_rows() -> list[Row]:
    rows = []
    for index, line in enumerate(DOC.read_text(encoding="utf-8").splitlines()):
        if not _ROW_RE.match(line):
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line)[1:-1]]
        number, command, code, stderr = cells
        rows.append(Row(int(number), _unspan(command), int(code), _unspan(stderr) if stderr else "", index))
    return rows


ROWS = load_rows()

# Files a row may name; each is created only for the rows that name it.
FIXTURES = {
    "binary.dat": lambda p: p.write_bytes(bytes(range(128, 256)) * 2),
    "fifo": lambda p: os.mkfifo(p),
    "folder": lambda p: p.mkdir(),
    "empty.log": lambda p: p.write_bytes(b""),
    "big.py": lambda p: p.write_text("# filler\n" * 233_017),
    "my train.py": lambda p: p.write_text("print('training')\n"),
    "key.pem": lambda p: p.write_text("not really a key\n"),
    "blocked": lambda p: (p / "eks-trn" / "root.json").mkdir(parents=True),
    # synth's writer (issue 21): a link out of the folder, a file hpq did not write, a forged manifest.
    "linked": lambda p: ((p / "slurm-gpu").mkdir(parents=True), (p.parent / "outside.json").write_text("{}\n"),
                         (p / "slurm-gpu" / "root.json").symlink_to(p.parent / "outside.json")),
    "foreign": lambda p: ((p / "slurm-gpu").mkdir(parents=True),
                          (p / "slurm-gpu" / "root.json").write_text('{"mine": true}\n')),
    "forged": lambda p: ((p / "slurm-gpu").mkdir(parents=True),
                         (p / "slurm-gpu" / ".hpq-synth-files").write_text("root.json\n")),
    "badstate": lambda p: (p.mkdir(), (p / "last-synth-dir").write_bytes(b"/tmp/\xff\xfe\n")),
    "nel.py": lambda p: p.write_text("print('a\u0085b')\n", encoding="utf-8"),
    "loop.cfg": lambda p: p.write_text("[profile a]\nsource_profile = b\nrole_arn = arn:aws:iam::123456789012:role/x\n"
                                       "[profile b]\nsource_profile = a\nrole_arn = arn:aws:iam::123456789012:role/y\n"),
    "kh.link": lambda p: ((p.parent / "outside_known_hosts").write_text(""), p.symlink_to(p.parent / "outside_known_hosts")),
    "process.cfg": lambda p: p.write_text("[profile cp]\ncredential_process = /nonexistent/get-credentials\n"),
    # benchmark logs that once took quadratic time or unbounded memory (issue 21): a 2 MB line of '#', an
    # NCCL "Using network" line padded with 100k spaces, a sparse file past nccl-report's 64 MiB limit, and
    # result rows whose every value is impossible (nan busbw, negative #wrong)
    "hashes.log": lambda p: p.write_text("#" * 2_000_000 + "\n"),
    "spaces.log": lambda p: p.write_text("h:1:2 [0] NCCL INFO Using network" + " " * 100_000 + "x\n"),
    "huge.log": lambda p: p.open("wb").truncate((64 << 20) + 1),
    "nan.log": lambda p: p.write_text("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                                      "1048576 262144 float sum -1 10.0 1.0 nan 0 10.0 1.0 1.0 -5\n"
                                      "# Avg bus bandwidth : 1.0\n"),
}


def split_command(command: str) -> tuple[dict[str, str], list[str]]:
    """``NAME=value ... hpq ARGS`` -> (environment additions, ARGS)."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words and words[0] == "hpq", f"a row's command starts with hpq: {command!r}"
    return env, words[1:]


def snapshot(*roots: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under the roots with its mode, size and modification time."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                st = path.lstat()
                out[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def base_env(home: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("HPQ_STATE_DIR", "XDG_CACHE_HOME", "HPQ_DEBUG")}
    env.update(
        HOME=str(home),
        AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        AWS_CONFIG_FILE=str(home / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="1",
        AWS_ENDPOINT_URL=endpoint,
    )
    return env


def run_row(row: Row, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float, dict, dict]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    extra, args = split_command(row.command)
    for name, make in FIXTURES.items():
        if name in args or name in extra.values():
            make(work / name)
    env = base_env(home, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    env.update(extra)
    before = snapshot(work, home)
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "hpq", *args], cwd=work, env=env, capture_output=True,
                         text=True, timeout=30, stdin=subprocess.DEVNULL)
    return res, time.monotonic() - start, before, snapshot(work, home)


def test_the_table_has_enough_rows():
    numbers = [r.number for r in ROWS]
    assert len(ROWS) >= 60
    assert numbers == list(range(1, len(ROWS) + 1)), "rows are numbered 1..N in order"
    assert len({r.command for r in ROWS}) == len(ROWS), "no two rows run the same command"


@pytest.mark.parametrize("row", ROWS, ids=[f"row{r.number}" for r in ROWS])
def test_bad_input_row(row: Row, tmp_path: Path):
    res, elapsed, before, after = run_row(row, tmp_path)
    lines = res.stderr.splitlines()
    if UPDATE:
        _record(row, lines[0] if len(lines) == 1 else res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == row.exit_code, f"exit {res.returncode}: {res.stderr}"
    assert len(lines) == 1, f"expected one stderr line, got: {res.stderr!r}"
    assert lines[0].startswith("hpq: error: ")
    assert lines[0] == row.stderr, "docs/bad-input.md says something else (HPQ_UPDATE_GOLDEN=1 to rewrite)"
    assert res.stdout == "", "nothing on stdout for bad input"
    assert after == before, "bad input must not write, change or remove anything"
    assert elapsed < TIME_LIMIT_S, f"took {elapsed:.1f}s"


def _record(row: Row, message: str) -> None:
    """Rewrite one row's stderr cell in the doc (update mode only)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    cells = _CELL_SPLIT.split(lines[row.line_index])
    cells[4] = f" {_span(message)} "
    lines[row.line_index] = "|".join(cells)
    DOC.write_text("\n".join(lines) + "\n", encoding="utf-8")


# What a table row cannot express: the standard streams themselves.
CLOSED_STDIN = [
    (["nccl-report", "-"], "hpq: error: FILE '-' reads standard input, which is closed: pipe a log in or give a file"),
    (["destroy", "hpq-slurm-gpu", "--region", "us-west-2"],
     "hpq: error: refusing to delete hpq-slurm-gpu without confirmation: pass --yes"),
]


@pytest.mark.parametrize("args,line", CLOSED_STDIN, ids=["nccl-report", "destroy"])
def test_closed_standard_input_is_usage_not_a_crash(args, line, tmp_path):
    """`hpq ... <&-`: Python sets sys.stdin to None; isatty() on it was an AttributeError ("internal error")."""
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}")
    res = subprocess.run([sys.executable, "-m", "hpq", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=30, preexec_fn=lambda: os.close(0))
    assert (res.returncode, res.stderr.strip()) == (2, line)


def test_closed_standard_output_is_refused(tmp_path):
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}")
    res = subprocess.run([sys.executable, "-m", "hpq", "nccl-env", "ml.p5.48xlarge"], cwd=tmp_path, env=env,
                         stderr=subprocess.PIPE, text=True, timeout=30, preexec_fn=lambda: os.close(1))
    assert (res.returncode, res.stderr.strip()) == (2, "hpq: error: standard output is closed")


@pytest.mark.parametrize("args", [["nccl-env", "ml.p5.48xlarge"], ["--help"], ["synth", "slurm-gpu", "-o", "out"]])
def test_full_disk_under_the_output_is_a_plain_error_not_a_bug(args, tmp_path):
    """stdout on /dev/full (ENOSPC): one line saying so, exit 1; never "internal error ... a bug in hpq"."""
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}")
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "hpq", *args], cwd=tmp_path, env=env, stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    assert res.returncode == 1 and res.stderr.strip() == "hpq: error: cannot write: No space left on device"


def test_write_only_standard_input_reads_as_closed(tmp_path):
    """`hpq nccl-report - 0>file`: reading fd 0 was EBADF, an "internal error"; now the closed-stdin line."""
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}")
    sink = os.open(tmp_path / "sink", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        res = subprocess.run([sys.executable, "-m", "hpq", "nccl-report", "-"], cwd=tmp_path, env=env, stdin=sink,
                             capture_output=True, text=True, timeout=30)
    finally:
        os.close(sink)
    assert (res.returncode, res.stderr.strip()) == (
        2, "hpq: error: FILE '-' reads standard input, which is closed: pipe a log in or give a file")


# The node commands, through their real bin wrappers (hpq.scripts.entry): a closed stdout is refused before
# anything runs; Ctrl-C while the command runs is one line and exit 130.
NODE_COMMANDS = ["run-nccl-test", "run-nccom-test", "run-nanogpt"]
BIN = Path(__file__).resolve().parents[2] / "scripts" / "bin"


def _node_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "HPQ_LAUNCHER_PYTHON": sys.executable}


@pytest.mark.parametrize("name", NODE_COMMANDS)
def test_node_command_with_stdout_closed_is_one_line(name, tmp_path):
    res = subprocess.run([str(BIN / name), "--launcher", "local", "--dry-run"], cwd=tmp_path, env=_node_env(tmp_path),
                         stderr=subprocess.PIPE, text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert (res.returncode, res.stderr.strip()) == (2, f"{name}: error: standard output is closed")
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_node_command_ctrl_c_mid_run_is_one_line_and_130(tmp_path):
    """SIGINT while run-nccl-test waits on a child (here the torch probe of a --python that hangs)."""
    import signal

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([str(BIN / "run-nccl-test"), "--launcher", "local", "--builtin", "--python", str(fake),
                             "--dry-run"], cwd=tmp_path, env=_node_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()  # main is running once it has printed its first line
    assert first.startswith("# run-nccl-test:"), first
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.strip()) == (130, "run-nccl-test: interrupted")


def test_dry_run_writes_nothing(tmp_path):
    """`--dry-run` names the results folder but does not create ~/hpq-results."""
    for name in ("run-nccl-test", "run-nanogpt"):
        res = subprocess.run([str(BIN / name), "--launcher", "local", "--dry-run"], cwd=tmp_path,
                             env=_node_env(tmp_path), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    assert not (tmp_path / "hpq-results").exists()


def test_aws_settings_check_does_not_run_credential_process(tmp_path):
    """The up-front check resolves the configuration without running a credential_process (it may prompt
    for a hardware key): the command itself runs it once, as without the check."""
    calls = tmp_path / "calls"
    program = tmp_path / "get-credentials"
    program.write_text(f'#!/bin/sh\necho run >> {calls}\n'
                       'echo \'{"Version": 1, "AccessKeyId": "AKIAIOSFODNN7EXAMPLE", "SecretAccessKey": "x"}\'\n')
    program.chmod(0o755)
    (tmp_path / "config").write_text(f"[profile p]\ncredential_process = {program}\n")
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(key)
    env["AWS_CONFIG_FILE"] = str(tmp_path / "config")
    res = subprocess.run([sys.executable, "-m", "hpq", "status", "hpq-slurm-gpu", "--region", "us-west-2", "--profile",
                          "p"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "cannot reach AWS" in res.stderr, res.stderr  # got as far as the call
    assert calls.read_text() == "run\n"
