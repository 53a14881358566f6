"""hpq remote / remote-nccl-test against a real OpenSSH sshd on 127.0.0.1 with paramiko.

The SSM ProxyCommand is replaced by a local byte relay (tests/sshd.py): a stand-in for
``aws ssm start-session --document-name AWS-StartSSHSession``, which needs AWS. Everything on
the SSH side (handshake, key auth, host-key pinning, exec, stdout/stderr, exit status) is real.
"""

from __future__ import annotations

import io
import json
import os
import stat
import textwrap
import time

import pytest

from hpq.aws import ssh
from hpq.cli.main import main
from tests.sshd import Sshd

pytestmark = pytest.mark.slow


def target(s: Sshd, known_hosts: str | None = None, key: str | None = None) -> ssh.SshTarget:
    return ssh.SshTarget(s.host, s.proxy_command(), s.user, s.port, key or s.key, known_hosts or s.known_hosts,
                             connect_timeout=20)


def cli_args(s: Sshd) -> list[str]:
    return ["--proxy-command", s.relay, "--host", s.host, "--port", str(s.port), "--key", s.key,
            "--known-hosts", s.known_hosts, "--user", s.user]


def test_exit_code_and_streams(sshd):
    out, err = io.BytesIO(), io.BytesIO()
    code = ssh.run(target(sshd), ssh.remote_command(["echo to-out; echo to-err >&2; exit 7"]), out, err)
    assert code == 7
    assert out.getvalue() == b"to-out\n" and err.getvalue() == b"to-err\n"
    assert os.path.getsize(sshd.known_hosts) > 0  # host key pinned on first use


def test_remote_stdin_is_closed(sshd):
    """A command that reads stdin gets EOF at once instead of hanging (timeout 5 bounds a regression)."""
    out = io.BytesIO()
    code = ssh.run(target(sshd), ssh.remote_command(["timeout 5 cat; echo rc=$?"]), out, io.BytesIO())
    assert code == 0 and out.getvalue() == b"rc=0\n"


def test_failed_proxy_is_one_line_fast_and_says_why(tmp_path, capsys):
    """The ProxyCommand exits at once with SSM's complaint (a stand-in for TargetNotConnected)."""
    proxy = "sh -c 'echo \"An error occurred (TargetNotConnected) when calling StartSession\" >&2; exit 255'"
    base = ["remote", "c", "--host", "h", "--known-hosts", str(tmp_path / "kh"), "--proxy-command"]
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main([*base, proxy, "--", "true"])
    assert exc.value.code == 1 and time.monotonic() - started < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TargetNotConnected" in err[0] and "exited 255" in err[0], err
    with pytest.raises(SystemExit) as exc:
        main([*base, "hpq-no-such-proxy-program %h %p", "--", "true"])
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot run ProxyCommand 'hpq-no-such-proxy-program'" in err[0], err


def test_silent_proxy_says_no_banner_came_and_names_no_ssm_plugin(tmp_path):
    """A user's own ProxyCommand that connects nowhere and says nothing: the error names the missing SSH
    banner and the wait, not the SSM plugin (it was "No existing session ... is the SSM plugin installed?")."""
    t = ssh.SshTarget("node1", "sleep 30", known_hosts=str(tmp_path / "kh"), connect_timeout=1)
    with pytest.raises(ssh.OperationFailed) as exc:
        ssh.connect(t)
    assert "gave no SSH banner within 1 s" in str(exc.value) and "SSM" not in str(exc.value)
    t.via_ssm = True
    with pytest.raises(ssh.OperationFailed, match="is the SSM session manager plugin installed"):
        ssh.connect(t)


def test_output_streams_before_command_ends(sshd):
    first_seen: list[float] = []

    def seen(chunk: bytes) -> None:
        if b"first" in chunk and not first_seen:
            first_seen.append(time.monotonic())

    code = ssh.run(target(sshd), ssh.remote_command(["echo first; sleep 1.5; echo second"]),
                       io.BytesIO(), io.BytesIO(), on_stdout=seen)
    done = time.monotonic()
    assert code == 0 and first_seen
    assert done - first_seen[0] >= 1.0  # 'first' arrived while the command was still sleeping


def test_cli_remote_propagates_exit_code(sshd, capfd):
    with pytest.raises(SystemExit) as exc:
        main(["remote", "any-cluster", *cli_args(sshd), "--", "bash", "-c", "echo quoted ok; exit 4"])
    assert exc.value.code == 4
    assert "quoted ok" in capfd.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["remote", "any-cluster", *cli_args(sshd), "--", "true"])
    assert exc.value.code == 0


def test_wrong_key_is_one_line_exit_1(sshd, tmp_path, capsys):
    other = tmp_path / "other_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other} >/dev/null")
    args = cli_args(sshd)
    args[args.index("--key") + 1] = str(other)
    with pytest.raises(SystemExit) as exc:
        main(["remote", "c", *args, "--", "true"])
    assert exc.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "authentication" in err[0]


def _runner(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


NCCL_OK = """\
cat <<'EOF'
#  Rank  0 Group  0 Pid 1 on node-1 device  0 [0x00] NVIDIA A10G
#  Rank  1 Group  0 Pid 1 on node-2 device  0 [0x00] NVIDIA A10G
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   134217728      33554432     float     sum      -1  44510.9    3.02    3.02      0  44420.1    3.02    3.02      0
  4294967296    1073741824     float     sum      -1  1427063    3.01    3.01      0  1427001    3.01    3.01      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 3.01
EOF
"""


def test_remote_nccl_test_verdict(sshd, tmp_path, capfd):
    ok = _runner(tmp_path, "nccl-ok", NCCL_OK + "echo \"args: $*\" >&2\n")
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", "2", "1", *cli_args(sshd), "--runner", ok, "--instance-type", "ml.g5.16xlarge"])
    out, err = capfd.readouterr()
    assert exc.value.code == 0, out + err
    assert "4294967296" in out and "PASS" in out and "args: 2 1" in err
    slow = _runner(tmp_path, "nccl-slow", NCCL_OK.replace("3.02", "0.52").replace("3.01", "0.51"))
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", *cli_args(sshd), "--runner", slow, "--instance-type", "ml.g5.16xlarge",
              "--output", "json"])
    out, err = capfd.readouterr()
    assert exc.value.code == 1
    assert '"ok": false' in out and "FAIL" in out


def test_remote_nccl_test_expect_goes_to_the_runner_and_the_local_verdict(sshd, tmp_path, capfd):
    slow = _runner(tmp_path, "nccl-slow", NCCL_OK.replace("3.02", "0.52").replace("3.01", "0.51") +
                   "echo \"args: $*\" >&2\n")
    for expect, code in (("none", 0), ("0.6", 0), ("0.9", 1)):
        with pytest.raises(SystemExit) as exc:
            main(["remote-nccl-test", "c", "2", *cli_args(sshd), "--runner", slow, "--instance-type",
                  "ml.g5.16xlarge", "--expect", expect, "--output", "json"])
        out, err = capfd.readouterr()
        assert exc.value.code == code, (expect, out, err)
        assert f"args: 2 --expect {expect}" in err
        verdict = json.loads(out)["verdict"]
        assert verdict["expect"] == expect and verdict["bandwidth_judged"] is (expect != "none")
    for bad in (["--expect", "soon"], ["--sweep", "--expect", "none"]):
        with pytest.raises(SystemExit) as exc:
            main(["remote-nccl-test", "c", *cli_args(sshd), "--runner", slow, *bad])
        assert exc.value.code == 2
        assert len(capfd.readouterr().err.strip().splitlines()) == 1


def test_remote_nccl_test_crash_is_a_fail_naming_the_runners_exit_status(sshd, tmp_path, capfd):
    """docs/validation.md: a non-zero exit status of the benchmark makes any outcome FAIL (exit 1)."""
    bad = _runner(tmp_path, "nccl-bad", "echo 'srun: error: nodes unavailable' >&2\nexit 5\n")
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", *cli_args(sshd), "--runner", bad])
    assert exc.value.code == 1
    out = capfd.readouterr().out
    assert out.startswith("FAIL: ") and "no nccl-tests results" in out and "exited 5" in out


def test_remote_nccl_test_sweep(sshd, tmp_path, capfd):
    """The real run-nccl-test --sweep runs behind sshd on a stand-in 4-node cluster (tests/fake_fabric.py) whose
    node-3 is slow; its JSON travels back over the SSH channel and the verdict is rendered here."""
    import json
    import shlex
    import sys

    from tests import fake_fabric

    env = fake_fabric.cluster_env(tmp_path, {"node-1": 48.0, "node-2": 47.0, "node-3": 6.0, "node-4": 48.5},
                                  seconds=0.1)
    binary = _runner(tmp_path, "all_reduce_perf", "exit 98\n")  # mpirun (the stand-in) plays it
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.startswith(("HPQ_", "SLURM_"))
                      or k == "PATH")
    runner = _runner(tmp_path, "run-nccl-test", f'{exports}exec {sys.executable} -m hpq.scripts.run_nccl_test "$@"\n')
    extra = f"--binary {binary} --instance-type p4d.24xlarge"
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", "--sweep", *cli_args(sshd), "--runner", runner, "--extra", extra])
    out, err = capfd.readouterr()
    assert exc.value.code == 1, out + err
    assert "# round 3/3" in err  # progress streamed from the controller's stderr
    assert "SLOW node-3: 6.00 GB/s vs median 47.00 GB/s" in out
    assert 'scontrol update NodeName=node-3 State=DRAIN Reason="hpq sweep: 6.00 GB/s vs median 47.00"' in out
    assert "sbatch --exclude=node-3" in out and out.strip().splitlines()[0].startswith("FAIL: 1 slow node(s)")
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", "2", "--sweep", *cli_args(sshd), "--runner", runner, "--extra", extra,
              "--output", "json"])
    out, err = capfd.readouterr()
    doc = json.loads(out)
    # Two nodes make one pair: nothing can tell which of them would be slow, so the sweep is INCONCLUSIVE (exit 3,
    # docs/validation.md), never a PASS.
    assert exc.value.code == 3 and doc["hosts"] == ["node-1", "node-2"] and doc["slow_nodes"] == []
    assert doc["outcome"] == "INCONCLUSIVE"
    assert doc["remote_exit_code"] == 3 and "met only one partner" in " ".join(doc["notes"])
    # bad usage is refused here, before any connection: one line, exit 2, no verdict invented
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", "1", "--sweep", *cli_args(sshd), "--runner", runner])
    out, err = capfd.readouterr()
    assert exc.value.code == 2 and out == ""
    assert err.splitlines() == ["hpq: error: --sweep measures pairs of nodes: NODES must be at least 2 "
                                "(or left out: every idle node)"]
    # bad usage only the controller can see (its own option): its one line comes back, exit 2
    with pytest.raises(SystemExit) as exc:
        main(["remote-nccl-test", "c", "2", "--sweep", *cli_args(sshd), "--runner", runner,
              "--extra", extra + " --sweep-size 0"])
    out, err = capfd.readouterr()
    assert exc.value.code == 2 and "run-nccl-test: error:" in err and "no sweep result came back" in err
    assert "FAIL" not in out  # bad usage is no verdict
