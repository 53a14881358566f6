"""The shared validation layer (hpq.cli.inputs) and the command line's help, as a new user meets them.

The name rules must be the services' own: each pattern is compared, string by string, with the
shape in botocore's service models (the data the AWS SDKs are generated from).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest

from hpq.cfn import synth
from hpq.cli import inputs
from hpq.cli.main import COMMANDS, cli, main

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "nccl"


def _shape(service: str, shape: str) -> dict:
    import botocore.session

    return botocore.session.get_session().get_service_model(service).shape_for(shape).metadata


def _member(service: str, shape: str, member: str) -> dict:
    import botocore.session

    return botocore.session.get_session().get_service_model(service).shape_for(shape).members[member].metadata


CANDIDATES = [
    "a", "A", "0", "a-b", "a--b", "-a", "a-", "a_b", "a b", "a.b", "hpq-slurm-gpu", "Team-A", "9stack",
    "x" * 63, "x" * 64, "x-" * 31 + "x", "x-" * 32 + "x", "x" * 100, "x" * 101, "x" * 128, "x" * 129, "",
    "i-0123abcd", "i-0123456789abcdef0", "i-0123456789abcdef", "i-xyz", "I-0123456789ABCDEF0",
    "fs-0123abcd", "fs-0123456789abcdef0", "fs-XYZ", "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
    "fc-0123456789abcdef0.fsx.us-west-2.amazonaws.com", "abcdefgh", "abcdefghi", "ab_c-d",
    "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456",
    "arn:aws:sagemaker:us-west-2:123456789012:cluster/My-Cluster",
    "arn:aws-cn:sagemaker:cn-north-1:123456789012:cluster/abcdef123456",
    "arn:aws:cloudformation:us-west-2:123456789012:stack/hpq/1a2b3c4d-0000-1111-2222-333344445555",
    "arn:aws:cloudformation:us-west-2:123456789012:stack/hpq bad",
]


def _agree(ours: click.ParamType, pattern: str, lo: int | None, hi: int | None) -> list[str]:
    """Candidates where our type and the AWS pattern + length bounds disagree."""
    theirs = re.compile(pattern.lstrip("^").rstrip("$"))
    wrong = []
    for value in CANDIDATES:
        aws_ok = bool(theirs.fullmatch(value)) and (lo is None or len(value) >= lo) and (hi is None or len(value) <= hi)
        try:
            ours.convert(value, None, None)
            our_ok = True
        except click.BadParameter:
            our_ok = False
        if aws_ok != our_ok:
            wrong.append(f"{value!r}: aws {aws_ok}, hpq {our_ok}")
    return wrong


def test_hyperpod_names_follow_the_sagemaker_model():
    name = _shape("sagemaker", "ClusterName")
    assert _agree(inputs.Pattern("n", [inputs.HYPERPOD_NAME_PATTERN], "r", inputs.HYPERPOD_CLUSTER.max_len),
                  name["pattern"], name["min"], name["max"]) == []
    group = _shape("sagemaker", "ClusterInstanceGroupName")
    assert _agree(inputs.INSTANCE_GROUP, group["pattern"], group["min"], group["max"]) == []
    either = _shape("sagemaker", "ClusterNameOrArn")
    # The model's own length bound (256) is for the ARN; a name is also a ClusterName (<= 63).
    wrong = _agree(inputs.HYPERPOD_CLUSTER, either["pattern"], either["min"], either["max"])
    assert all(w.startswith(("'x-x", "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")) for w in wrong), wrong
    assert inputs.HYPERPOD_ARN_RE == _shape("sagemaker", "ClusterArn")["pattern"]
    node = _shape("sagemaker", "ClusterNodeId")
    assert inputs.NODE_ID_RE == node["pattern"]
    assert _member("sagemaker", "ClusterInstanceGroupSpecification", "InstanceCount")["max"] == inputs.MAX_INSTANCES
    assert _member("sagemaker", "ClusterEbsVolumeConfig", "VolumeSizeInGB")["max"] == inputs.EBS_GIB_MAX


def test_stack_eks_and_fsx_names_follow_their_models():
    import botocore.session

    stack = _shape("cloudformation", "StackNameOrId")
    name_re, arn_re = stack["pattern"].split(")|(")
    name_re, arn_re = name_re + ")", "(" + arn_re
    assert name_re == f"({inputs.STACK_NAME_RE})" and arn_re == f"({inputs.STACK_ARN_RE})"
    eks = _shape("eks", "ClusterName")
    assert _agree(inputs.Pattern("n", [inputs.EKS_NAME_RE], "r", inputs.EKS_NAME_MAX),
                  eks["pattern"], eks["min"], eks["max"]) == []
    for ours, shape in ((inputs.FSX_ID, "FileSystemId"), (inputs.FSX_DNS, "DNSName"),
                        (inputs.FSX_MOUNT_NAME, "LustreFileSystemMountName")):
        meta = _shape("fsx", shape)
        assert _agree(ours, meta["pattern"], meta.get("min"), meta.get("max")) == [], shape
    assert _shape("fsx", "StorageCapacity")["max"] == inputs.FSX_CAPACITY_MAX
    assert botocore.session.get_session()  # the models above were read from disk, not fetched


def test_region_checks_need_no_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a region check opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert inputs.region_problem("us-west-2", ("sagemaker", "cloudformation")) is None
    assert inputs.region_problem("cn-north-1", ("cloudformation",)) is None  # other partitions count too
    assert "not an AWS region name" in inputs.region_problem("mars-1", ())
    assert "not a region this botocore knows" in inputs.region_problem("us-west-9", ())
    # A service botocore has no endpoint for in that region is refused by name.
    regions = inputs.known_regions() - inputs.service_regions("sagemaker")
    if regions:
        assert "has no sagemaker endpoint" in inputs.region_problem(sorted(regions)[0], ("sagemaker",))


def test_aws_region_comes_first_as_in_the_aws_cli(monkeypatch, tmp_path):
    from hpq.aws.session import make_session

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    assert inputs.resolve_region(None, None) == "eu-west-1"
    assert make_session().region_name == "eu-west-1"
    assert make_session("ap-south-1").region_name == "ap-south-1"
    monkeypatch.setenv("AWS_REGION", "moon-1")
    with pytest.raises(inputs.UsageError, match="AWS_REGION 'moon-1'"):
        inputs.check_aws_inputs(None, None, ("cloudformation",))


@pytest.mark.parametrize("url", ["http://127.0.0.1:5000", "https://sagemaker.us-west-2.amazonaws.com",
                                 "http://[::1]:5000/"])
def test_good_endpoints_pass(url):
    assert inputs.endpoint_problem(url) is None


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1", "http://", "http://[::1", "http://host:99999",
                                 "", " ", "http://bad host", "http://127.0.0.1:9/ path"])
def test_bad_endpoints_are_refused(url):
    assert inputs.endpoint_problem(url)


@pytest.mark.parametrize(("kind", "value"), [
    (inputs.NODES, "３"), (inputs.NODES, "1.5"), (inputs.NODES, "1e3"), (inputs.NODES, True),
    (inputs.NODE, "３"), (inputs.NODE, "6758"), (inputs.NODE, " 1"), (inputs.POLL_SECONDS, "inf"),
    (inputs.POLL_SECONDS, "-1"), (inputs.IMAGE, "MyRepo:latest"), (inputs.IMAGE, "repo:tag with space"),
    (inputs.NAMESPACE, "a" * 64), (inputs.JOB_NAME, "a" * 43), (inputs.USER, "Root"), (inputs.IFACE, "ens5/1"),
    (inputs.IFACE, "a" * 16), (inputs.HOST, "host;reboot"), (inputs.KEY_VALUE, "Key With Space=1"),
    (inputs.STACK, "a" * 129), (inputs.HYPERPOD_CLUSTER, "a\nb"), (inputs.EKS_CLUSTER, "x" * 101),
    (inputs.FSX_CAPACITY, "3600"), (inputs.FSX_GIB, "4800.0"), (inputs.REGION, "us-west-2\n"),
    (inputs.IFACE, "."), (inputs.IFACE, ".."), (inputs.IFACE, "é" * 9), (inputs.TEST_NODES, "513"),
    (inputs.JOB_NAME, "1abc"), (inputs.FSX_DNS, "fs-0123456789abcdef0.a b c"),
])
def test_odd_values_are_refused(kind, value):
    with pytest.raises(click.BadParameter):
        kind.convert(value, None, None)


@pytest.mark.parametrize(("kind", "value", "expected"), [
    (inputs.NODES, " 4 ", 4), (inputs.NODE, "i-0123456789abcdef0", "i-0123456789abcdef0"), (inputs.NODE, "12", "12"),
    (inputs.POLL_SECONDS, "0.5", 0.5), (inputs.FSX_CAPACITY, "4800", 4800), (inputs.FSX_GIB, "0", 0),
    (inputs.IMAGE, "public.ecr.aws/hpc-cloud/nccl-tests:latest", "public.ecr.aws/hpc-cloud/nccl-tests:latest"),
    (inputs.IMAGE, "localhost:5000/a/b@sha256:" + "a" * 64, "localhost:5000/a/b@sha256:" + "a" * 64),
    (inputs.INSTANCE_TYPE, "p5.48xlarge", "ml.p5.48xlarge"), (inputs.USER, "ubuntu", "ubuntu"),
    (inputs.HOST, "sagemaker-cluster:abc123_worker-i-0123456789abcdef0",
     "sagemaker-cluster:abc123_worker-i-0123456789abcdef0"),
])
def test_good_values_pass(kind, value, expected):
    assert kind.convert(value, None, None) == expected


def _run_main(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_non_utf8_argument_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = b"out-\xff".decode("utf-8", "surrogateescape")  # what Python makes of such a byte in argv
    code, out, err = _run_main(["synth", "slurm-gpu", "-o", bad], capsys)
    assert code == 2 and out == "" and err == "hpq: error: argument 'out-\\udcff' is not valid UTF-8\n"
    assert list(tmp_path.iterdir()) == []


def test_a_bug_is_one_line_exit_1(monkeypatch, capsys):
    @click.command("boom")
    def boom() -> None:
        raise RuntimeError("multi\nline")

    monkeypatch.setitem(cli.commands, "boom", boom)
    monkeypatch.setenv("HPQ_DEBUG", "")  # off; and whatever --debug sets below is undone after the test
    code, _, err = _run_main(["boom"], capsys)
    assert code == 1 and err.startswith("hpq: internal error: RuntimeError: multi line") and err.count("\n") == 1
    assert "hpq --debug" in err  # says how to get the traceback
    with pytest.raises(RuntimeError, match="multi"):  # --debug: the traceback, for the bug report
        main(["--debug", "boom"])


@pytest.mark.parametrize("args", [[], ["eks"]])
def test_bare_group_prints_help_and_exits_0(args):
    res = subprocess.run([sys.executable, "-m", "hpq", *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("Usage: hpq") and "Commands:" in res.stdout


def _all_commands() -> list[tuple[str, click.Command]]:
    out = []
    for name in sorted(COMMANDS):
        cmd = cli.get_command(click.Context(cli), name)
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", cmd.commands[sub]) for sub in sorted(cmd.commands)]
        else:
            out.append((name, cmd))
    return out


@pytest.mark.parametrize(("name", "cmd"), _all_commands(), ids=[n for n, _ in _all_commands()])
def test_every_option_and_argument_is_explained(name, cmd):
    ctx = click.Context(cmd, info_name=f"hpq {name}")
    text = cmd.get_help(ctx)
    assert "Examples:" in text
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"hpq {name} {param.opts[0]} has no help"
        if isinstance(param, click.Argument):
            word = param.human_readable_name.strip("[].").upper()
            if param.type.__class__ is click.Choice:
                continue  # the choices are the help
            body = text.split("\n", 1)[1]
            assert re.search(rf"\b{re.escape(word)}\b", body), f"hpq {name}: argument {word} is not explained"
    params = [p for p in cmd.params if isinstance(p, click.Option) and "--param" in p.opts]
    assert all(p.metavar in (None, "KEY=VALUE") for p in params), "one spelling: KEY=VALUE"


def _examples() -> list[tuple[str, list[str]]]:
    """Every `hpq ...` invocation in an Examples: block, as (the line, the argv after hpq)."""
    found = []
    seen = set()
    for _, cmd in [("", cli)] + _all_commands():
        doc = cmd.help or ""
        block = doc.split("Examples:", 1)[1].strip("\n").split("\n\n")[0] if "Examples:" in doc else ""
        for line in block.splitlines():
            for match in re.finditer(r"\bhpq (?!synth wrote)", line):
                text = line[match.start():]
                text = re.split(r" {2,}|\s#|\s\||\s&&|\s>|\)\"", text)[0].strip()
                if text not in seen:
                    seen.add(text)
                    found.append((text, shlex.split(text)[1:]))
    return found


OFFLINE = {"synth", "lint", "nccl-env", "nccl-report", "render", "report"}


def test_every_help_example_works_when_pasted(tmp_path, monkeypatch, capsys):
    """Offline examples run for real (in order, in one folder); AWS ones must parse and pass every local check.

    A file an example names (nccl-test.log) is a real nccl-tests log here, as it would be for a user.
    """
    examples = _examples()
    assert len(examples) >= 30
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HPQ_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "nccl-test.log").write_text((DATA / "h200x2_nccl_baseline_allreduce.txt").read_text())
    (tmp_path / "nccom.log").write_text((DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt").read_text())
    # `hpq report nccl.json sweep.json`: the results `hpq test nccl|sweep --output json` would have written
    from tests import report_samples

    report_samples.write(tmp_path, "nccl.json", report_samples.nccl_g5())
    report_samples.write(tmp_path, "sweep.json", report_samples.sweep(tmp_path / "sweep", report_samples.p5_speeds(3, slow=None)))
    failures = []
    for text, args in examples:
        offline = args[0] in OFFLINE or (args[0] == "eks" and args[1] == "render")
        if offline:
            log = (tmp_path / "nccl-test.log").read_bytes()
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log)))  # for `... | hpq nccl-report -`
            code, _, err = _run_main(args, capsys)
            # Exit 1 and 3 are verdicts (this H200 log judged as p5: FAIL or INCONCLUSIVE; a lint finding),
            # not a refused example.
            if code not in (0, 1, 3) or "hpq: error: Invalid" in err or "internal error" in err:
                failures.append(f"{text}: exit {code}: {err.strip()}")
            continue
        with monkeypatch.context() as m:  # parse and convert every value; do not call AWS
            m.setattr(click.Command, "invoke", lambda self, ctx: None)
            code, _, err = _run_main(args, capsys)
        if code:
            failures.append(f"{text}: exit {code}: {err.strip()}")
        if args[0] == "deploy":
            params = [a.split("=", 1) for a in args[args.index("--param") + 1:args.index("--param") + 2]] \
                if "--param" in args else []
            size = args[args.index("--size") + 1] if "--size" in args else "small"
            synth.synthesize(args[1], size, dict(params))  # raises on a parameter the template refuses
    assert not failures, "\n".join(failures)


def test_synth_replaces_only_what_it_wrote(tmp_path, monkeypatch):
    """A user's own files in OUT/<variant>/ survive; a file an earlier synth wrote and no longer renders goes;
    a manifest without hpq's header (an older or a stranger's list of names) is refused, not trusted."""
    import hashlib

    from hpq.cfn import synth_out

    env = {**os.environ, "HPQ_STATE_DIR": str(tmp_path / "s")}
    target = tmp_path / "out" / "slurm-gpu"
    target.mkdir(parents=True)
    (target / "notes.json").write_text('{"mine": true}')
    (target / "Old.json").write_text("{}")
    (target / synth.MANIFEST_FILE).write_text("Old.json\nroot.json\n")
    run = [sys.executable, "-m", "hpq", "synth", "slurm-gpu", "-o", str(tmp_path / "out")]
    res = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert "was not written by this hpq" in res.stderr and (target / "Old.json").exists()
    digest = hashlib.sha256(b"{}").hexdigest()
    (target / synth.MANIFEST_FILE).write_text(f"{synth_out.MANIFEST_HEADER}\n{digest}  Old.json\n")
    res = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert (target / "notes.json").read_text() == '{"mine": true}'
    assert not (target / "Old.json").exists()
    listed = synth_out.read_manifest(target)
    assert "root.json" in listed and "notes.json" not in listed
    assert sorted(listed) == sorted(Path(p).name for p in res.stdout.split())


def test_nccl_report_refuses_a_terminal_on_stdin():
    import pty

    leader, follower = pty.openpty()
    try:
        res = subprocess.run([sys.executable, "-m", "hpq", "nccl-report", "-"], stdin=follower, capture_output=True,
                             text=True, timeout=30)
    finally:
        os.close(leader)
        os.close(follower)
    assert res.returncode == 2 and res.stderr.startswith("hpq: error: FILE '-' reads standard input, which is a "
                                                         "terminal")


def test_the_aws_environment_as_botocore_reads_it(monkeypatch, tmp_path):
    """AWS_PROFILE='' and a named profile that is missing ("default" too: botocore's
    Session.get_scoped_config refuses any profile that is named but absent) are usage errors;
    AWS_CONFIG_FILE=/dev/null is the usual way to say "no config file" and is accepted."""
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_DEFAULT_PROFILE", raising=False)
    monkeypatch.setenv("AWS_PROFILE", "")
    with pytest.raises(inputs.UsageError, match="AWS_PROFILE is set but empty"):
        inputs.check_profile(None)
    monkeypatch.setenv("AWS_PROFILE", "default")
    with pytest.raises(inputs.UsageError, match="AWS profile 'default' not found"):
        inputs.check_profile(None)
    monkeypatch.delenv("AWS_PROFILE")
    inputs.check_profile(None)  # nothing named: botocore falls back to an empty default
    inputs.check_aws_environment({"AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    with pytest.raises(inputs.UsageError, match="AWS_CA_BUNDLE='/dev/null' is a character device"):
        inputs.check_aws_environment({"AWS_CA_BUNDLE": os.devnull})


def test_moto_probe_survives_a_url_http_client_refuses():
    from hpq.standins.rendition import endpoint_is_moto

    assert endpoint_is_moto("http://127.0.0.1:9/ path", timeout=0.5) is False

