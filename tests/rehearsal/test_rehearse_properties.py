"""Property tests (Hypothesis) over what the rehearsal reads: its own state files and the options it parses
before anything is created (``--workers``, ``--throttle INDEX=RATE``, ``--node-env [NODE:]NAME=VALUE``,
the faults a user injects).

Invariant, for any input: a clean refusal (UsageError / click's usage error: exit code 2, one line) or a
value that round-trips (written back out and read again, it is the same value); never another
exception. Examples Hypothesis found are kept with ``@example`` as regression cases. The profile
(examples, deadline, derandomized) is tests/conftest.py's.
"""

from __future__ import annotations

import json
import math
import os
import string
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as s

from hpq.cli.commands import rehearse
from hpq.errors import EXIT_USAGE, UsageError
from hpq.rehearsal import procs, state, throttle

RUN = "0a1b2c"


def valid_state(tmp: str = "/tmp") -> dict:
    """A state as a three-node rehearsal writes it (RunState.save), the starting point of mutations."""
    work = f"{tmp}/hpq-rehearse-{RUN}-k2j4"
    nodes = [{"name": name, "netns": f"hpq-{RUN}-{name}", "host_iface": f"hpq{RUN}n{i}", "holder_pid": 4000 + i,
              "ip": f"10.100.3.{ip}", "hostname": f"ip-10-100-3-{ip}", "role": role, "holder_start": 123456 + i}
             for i, (name, role, ip) in enumerate([("controller", "controller", 10), ("worker-1", "worker", 21),
                                                    ("worker-2", "worker", 22)])]
    return {"run_id": RUN, "variant": "slurm-gpu", "pid": 999, "started": 1764000000.5, "workdir": work,
            "logdir": f"/var/log/hpq-rehearse/{RUN}", "bridge": f"hpqbr-{RUN}", "subnet": "10.100.3.0/24",
            "fsx_export": f"{work}/fsx", "keep": True, "finished": True, "ssh_key": f"{work}/ssh/id_ed25519",
            "nodes": nodes, "pid_start": 55}


json_leaf = s.one_of(s.none(), s.booleans(), s.integers(-2**70, 2**70), s.floats(allow_nan=True),
                     s.text(max_size=30))
json_any = s.recursive(json_leaf, lambda c: s.lists(c, max_size=4) | s.dictionaries(s.text(max_size=12), c,
                                                                                      max_size=4), max_leaves=12)
FIELDS = list(valid_state()) + ["nodes.0." + k for k in valid_state()["nodes"][0]]


@s.composite
def mutated_state(draw) -> dict:
    """A real state with a few fields replaced, removed or added: close enough to pass most checks."""
    data = valid_state()
    # node fields first: a later top-level change may replace the node list itself
    keys = sorted(draw(s.lists(s.sampled_from(FIELDS + ["extra"]), min_size=1, max_size=3)),
                  key=lambda k: not k.startswith("nodes."))
    for key in keys:
        target, name = (data["nodes"][0], key.split(".")[2]) if key.startswith("nodes.") else (data, key)
        action = draw(s.sampled_from(["replace", "delete", "string"]))
        if action == "delete":
            target.pop(name, None)
        elif action == "string":
            target[name] = draw(s.text(alphabet=string.printable + "é/\u2028\0", max_size=40))
        else:
            target[name] = draw(json_any)
    return data


def check_state_file(path: Path) -> None:
    try:
        st = state.RunState.load(path)
    except state.StateError as exc:
        assert exc.exit_code == EXIT_USAGE and "\n" not in str(exc) and str(path) in str(exc)
        return
    # accepted: it round-trips, and everything teardown would act on is this run's own
    st.save()
    assert state.RunState.load(st.path) == st
    assert not st.workdir or os.path.basename(st.workdir).startswith(f"hpq-rehearse-{st.run_id}-")
    assert not st.logdir or os.path.basename(st.logdir) == st.run_id
    assert all(n.netns.startswith(f"hpq-{st.run_id}-") and st.run_id in n.host_iface for n in st.nodes)
    assert st.bridge in ("", f"hpqbr-{st.run_id}") and math.isfinite(st.started)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path)
    return tmp_path


def test_a_real_state_file_round_trips(state_dir):
    path = state_dir / f"{RUN}.json"
    path.write_text(json.dumps(valid_state()))
    st = state.RunState.load(path)
    assert st.nodes[1].name == "worker-1" and st.nodes[1].holder_start == 123457
    check_state_file(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated_state())
@example(data={**valid_state(), "workdir": "/"})  # teardown would have removed /
@example(data={**valid_state(), "workdir": f"/tmp/hpq-rehearse-{RUN}-x/../.."})
@example(data={**valid_state(), "nodes": [{**valid_state()["nodes"][0], "netns": "host-netns"}]})
@example(data={**valid_state(), "pid": True})
@example(data={**valid_state(), "started": float("nan")})
@example(data={**valid_state(), "nodes": [valid_state()["nodes"][0]] * 2})
def test_any_state_is_refused_in_one_line_or_round_trips(state_dir, data):
    path = state_dir / f"{RUN}.json"
    path.write_text(json.dumps(data, allow_nan=True))
    check_state_file(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=s.binary(max_size=300) | json_any.map(lambda v: json.dumps(v).encode()))
@example(raw=b"\xff\xfe{}")
@example(raw=b"[" * 100000)  # deep nesting: RecursionError inside json
@example(raw=b"{}")
def test_any_bytes_are_refused_in_one_line_or_round_trip(state_dir, raw):
    path = state_dir / f"{RUN}.json"
    path.write_bytes(raw)
    check_state_file(path)


def test_an_oversized_state_file_is_refused_without_reading_it_whole(state_dir):
    path = state_dir / f"{RUN}.json"
    with open(path, "wb") as fh:
        fh.truncate(state.MAX_STATE_BYTES + 10)
    with pytest.raises(state.StateError, match="larger than"):
        state.RunState.load(path)


def test_down_names_an_untrusted_state_file_and_touches_nothing(state_dir):
    """`hpq rehearse down` with a damaged file next to nothing else: exit 2, the file named, the file kept."""
    import subprocess
    import sys

    bad = state_dir / f"{RUN}.json"
    bad.write_text(json.dumps({**valid_state(), "workdir": "/"}))
    env = {**os.environ, "HPQ_REHEARSE_STATE_DIR": str(state_dir)}
    for args in (["down"], ["down", "--run", RUN], ["shell", "--run", RUN]):
        res = subprocess.run([sys.executable, "-m", "hpq", "rehearse", *args], capture_output=True, text=True,
                             env=env, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == EXIT_USAGE, res.stderr
        assert res.stderr.count("\n") == 1 and str(bad) in res.stderr and "workdir '/'" in res.stderr, res.stderr
    assert bad.exists()


# ---------------------------------------------------------------------------- options parsed before any work


def parse_run(args: list[str]) -> dict:
    """`hpq rehearse run ARGS` up to where it starts creating: click's parsing, then the checks run_cmd makes."""
    ctx = rehearse.run_cmd.make_context("run", list(args))
    p = ctx.params
    p["throttle"] = rehearse._sweep_options(p["variant"], p["workers"], p["sweep"], p["throttles"], p["sweep_args"],
                                       p["nccl_args"])
    p["env"] = rehearse._env_pairs(p["node_env"], rehearse.node_names(p["variant"], p["workers"], p["login"]))
    return p


def refused_cleanly(exc: BaseException) -> bool:
    if isinstance(exc, click.UsageError):  # click's own: exit 2
        return exc.exit_code == EXIT_USAGE and "\n" not in exc.format_message().strip()
    return isinstance(exc, UsageError) and exc.exit_code == EXIT_USAGE and "\n" not in str(exc)


word = s.text(alphabet=s.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20) | s.sampled_from(
    ["0", "3", "16", "17", "-1", "1e3", "0x3", " 2", "2=30mbit", "1=1mbit", "0=1tbit", "9=30mbit", "=", "2="])


@given(workers=word)
@example(workers="٣")  # Arabic-Indic three: int() takes it, click's IntRange too
@example(workers="1_6")
def test_workers_any_text(workers):
    try:
        p = parse_run(["--nodes", workers])
    except (click.UsageError, UsageError) as exc:
        assert refused_cleanly(exc), exc
        return
    assert 1 <= p["workers"] <= 16 and parse_run(["--nodes", str(p["workers"])])["workers"] == p["workers"]


rate = s.one_of(word, s.builds(lambda n, u: f"{n}{u}", s.decimals(0, 10**13, places=3, allow_nan=False,
                                                                    allow_infinity=False),
                               s.sampled_from(sorted(throttle.RATE_SUFFIXES) + ["", "MBIT", "%", "bitz"])))


@given(workers=s.integers(1, 16), specs=s.lists(s.builds(lambda i, r: f"{i}={r}", s.integers(-2, 20) | word, rate)
                                                 | word, max_size=4))
@example(workers=4, specs=["1=30mbit", "01=30mbit"])
@example(workers=5, specs=["0=1e2mbit"])
@example(workers=5, specs=["0=.5gbit"])
def test_throttle_any_specs(workers, specs):
    args = ["--nodes", str(workers), "--sweep"] + [a for v in specs for a in ("--throttle", v)]
    try:
        p = parse_run(args)
    except (click.UsageError, UsageError) as exc:
        assert refused_cleanly(exc), exc
        return
    out = p["throttle"]
    assert all(0 <= i < workers for i in out) and len(out) <= max(0, (workers - 1) // 2)
    assert all(throttle.MIN_RATE_BITS <= throttle.rate_bits(r) <= throttle.MAX_RATE_BITS for r in out.values())
    again = parse_run(["--nodes", str(workers), "--sweep"] + [a for i, r in out.items() for a in ("--throttle",
                                                                                                       f"{i}={r}")])
    assert again["throttle"] == out


@given(workers=s.integers(1, 4), login=s.booleans(), specs=s.lists(
    s.builds(lambda n, k, v: f"{n}{k}={v}", s.sampled_from(["", "worker-1:", "worker-9:", "controller:", ":",
                                                           "login-1:", "a:b:"]),
             s.text(alphabet=string.ascii_letters + "_0-:", min_size=0, max_size=12), word) | word, max_size=3))
@example(workers=2, login=False, specs=["worker-2:HPQ_SLURMCTLD_PORT=9"])
@example(workers=1, login=False, specs=["HPQ_X=a\u2028b"])
@example(workers=1, login=False, specs=["HPQ_X=a=b"])
def test_node_env_any_specs(workers, login, specs):
    args = ["--nodes", str(workers)] + (["--login"] if login else []) + [a for v in specs for a in ("--node-env", v)]
    try:
        p = parse_run(args)
    except (click.UsageError, UsageError) as exc:
        assert refused_cleanly(exc), exc
        return
    env = p["env"]
    names = rehearse.node_names("slurm-gpu", workers, login)
    assert all(node == "" or node in names for node in env)
    back = [f"{node + ':' if node else ''}{k}={v}" for node, kv in env.items() for k, v in kv.items()]
    assert parse_run(["--nodes", str(workers)] + (["--login"] if login else []) +
                     [a for v in back for a in ("--node-env", v)])["env"] == env


@given(name=word | s.sampled_from(["controller", "worker-2", "ip-10-100-3-21", "10.100.3.22", "worker-9", ""]))
def test_shell_node_any_name(name):
    """`hpq rehearse shell NODE`: a node of the run (by name, hostname or address) or KeyError, which the
    command turns into one exit-2 line listing the nodes."""
    from hpq.rehearsal.run import shell_command

    st = state.from_dict(valid_state())
    me = procs.identify(os.getpid())
    for n in st.nodes:  # a live holder: this process stands in for it (pid and start time recorded)
        n.holder_pid, n.holder_start = me.pid, me.start
    try:
        argv = shell_command(st, name or None)
    except KeyError:
        assert name and st.node(name) is None
        return
    node = st.node(name) if name else st.nodes[0]
    assert node is not None and argv[:3] == ["nsenter", "--target", str(node.holder_pid)]


def test_shell_refuses_a_node_whose_holder_pid_is_now_another_process():
    """The recorded holder pid is alive but started at another time (pid reused): no nsenter into it."""
    from hpq.rehearsal.node import NodeError
    from hpq.rehearsal.run import shell_command

    st = state.from_dict(valid_state())
    me = procs.identify(os.getpid())
    st.nodes[0].holder_pid, st.nodes[0].holder_start = me.pid, me.start + 1
    with pytest.raises(NodeError, match="is not running"):
        shell_command(st, "controller")
