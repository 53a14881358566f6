"""Property tests (Hypothesis) over the lifecycle's readers and node-file writers: any input gives either the
reader's own clean refusal or output that parses back to the same fields. Never another exception, never a line
break smuggled into a line-based file.

Readers: hpq-cluster.json (roles.load_cluster_config), provisioning_parameters.json (roles.load_provisioning_
parameters, HyperPod's documented schema), resource_config.json (ResourceConfig), and the settings
(context.Settings.from_env). Writers: the managed block (files.replace_block: fstab, /etc/environment, ssh files)
and the fstab line (fsx.fstab_line). Examples stay few (max_examples) so the file runs in seconds.
"""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpq.lifecycle import context, fields, files, fsx, roles
from hpq.lifecycle.resource_config import ResourceConfig, ResourceConfigError
from tests import node_samples

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Text with what breaks line-based files: blanks, every kind of line break, NUL, markers, non-ASCII.
nasty_text = st.text(alphabet=st.sampled_from(list("aZ09-._ /:@#=\t\n\r\x0b\x0c\x1c\x85\u2028\u2029\x00é")),
                     max_size=30) | st.sampled_from(["", node_samples.FSX_DNS, node_samples.FSX_MOUNTNAME, "worker-group-1", "10.1.2.3",
                                                     files.END % "fsx", "a" * 70])
json_scalar = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) | nasty_text
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3) |
                          st.dictionaries(nasty_text, inner, max_size=3), max_leaves=8)


def _write(tmp_path_factory, doc) -> str:
    path = tmp_path_factory.mktemp("doc") / "file.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _one_line_tokens(*values) -> bool:
    return all(v is None or (isinstance(v, str) and files.line_problem(v) is None and " " not in v) for v in values)


@FAST
@given(doc=st.fixed_dictionaries({"schema_version": st.just(1) | json_scalar,
                                  "orchestrator": st.sampled_from(["slurm", "eks"]) | json_scalar},
                                 optional={"cluster_name": json_value, "controller_group": json_value,
                                           "login_group": json_value, "worker_groups": st.lists(nasty_text, max_size=3)
                                           | json_value, "partition": json_value, "fsx_dns_name": json_value,
                                           "fsx_mountname": json_value}))
@example(doc=dict(node_samples.hpq_cluster_config(), fsx_dns_name=node_samples.FSX_DNS, fsx_mountname=node_samples.FSX_MOUNTNAME))
@example(doc=dict(node_samples.hpq_cluster_config(), fsx_dns_name=node_samples.FSX_DNS + "\nx", fsx_mountname=node_samples.FSX_MOUNTNAME))
def test_hpq_cluster_json_reader(tmp_path_factory, doc):
    path = _write(tmp_path_factory, doc)
    try:
        rf = roles.load_cluster_config(path)
    except roles.RoleFileError:
        return
    names = [rf.cluster_name, rf.controller_group, rf.login_group, rf.fsx_dns_name, rf.fsx_mountname,
             *rf.worker_groups, *rf.partitions.values()]
    assert _one_line_tokens(*names)
    for key in ("cluster_name", "controller_group", "login_group", "fsx_dns_name", "fsx_mountname"):
        assert getattr(rf, key) == (doc.get(key) or None)  # the same fields, not a cleaned-up version
    assert rf.worker_groups == doc["worker_groups"]
    assert (rf.fsx_dns_name is None) == (rf.fsx_mountname is None)


@FAST
@given(doc=st.fixed_dictionaries({}, optional={
    "version": json_scalar, "workload_manager": st.just("slurm") | json_scalar,
    "controller_group": nasty_text | json_value, "login_group": json_value,
    "worker_groups": st.lists(st.fixed_dictionaries({"instance_group_name": nasty_text},
                                                    optional={"partition_name": nasty_text | json_scalar}),
                              max_size=3) | json_value,
    "fsx_dns_name": nasty_text | json_scalar, "fsx_mountname": nasty_text | json_scalar}))
@example(doc=node_samples.provisioning_parameters())
@example(doc=dict(node_samples.provisioning_parameters(), fsx_mountname="abc defg"))
def test_provisioning_parameters_reader(tmp_path_factory, doc):
    path = _write(tmp_path_factory, doc)
    try:
        rf = roles.load_provisioning_parameters(path)
    except roles.RoleFileError:
        return
    assert _one_line_tokens(rf.controller_group, rf.login_group, rf.fsx_dns_name, rf.fsx_mountname,
                            *rf.worker_groups, *rf.partitions.values())
    assert rf.controller_group == doc["controller_group"]
    assert rf.worker_groups == [w["instance_group_name"] for w in doc.get("worker_groups") or []]
    assert (rf.fsx_dns_name, rf.fsx_mountname) == (doc.get("fsx_dns_name") or None, doc.get("fsx_mountname") or None)


instance = st.fixed_dictionaries({}, optional={
    "InstanceName": nasty_text | json_scalar, "InstanceId": nasty_text | json_scalar,
    "CustomerIpAddress": st.sampled_from(["10.1.2.3", "10.1.2.3\n", "10.1.2", "010.1.2.3", "::1"]) | nasty_text,
    "AgentIpAddress": json_scalar})
group = st.fixed_dictionaries({"Name": nasty_text | json_scalar},
                              optional={"InstanceType": nasty_text | json_scalar,
                                        "Instances": st.lists(instance, max_size=3) | json_scalar})


@FAST
@given(doc=st.fixed_dictionaries({"InstanceGroups": st.lists(group, max_size=3) | json_value},
                                 optional={"ClusterConfig": st.fixed_dictionaries({}, optional={
                                     "ClusterName": nasty_text | json_scalar, "ClusterArn": nasty_text,
                                     "ClusterType": st.sampled_from(["Slurm", "Kubernetes"]) | nasty_text,
                                     "SlurmConfig": st.fixed_dictionaries({}, optional={
                                         "PrimaryControllerIp": nasty_text,
                                         "SecondaryControllerIps": st.lists(nasty_text, max_size=2) | json_scalar})})
                                     | json_value}))
@example(doc=node_samples.slurm_resource_config())
@example(doc=node_samples.eks_resource_config())
def test_resource_config_reader(tmp_path_factory, doc):
    path = _write(tmp_path_factory, doc)
    try:
        rc = ResourceConfig.load(path)
    except ResourceConfigError:
        return
    for inst in rc.instances:
        assert _one_line_tokens(inst.group or None, inst.name or None, inst.instance_id or None,
                                inst.customer_ip or None)
        if inst.customer_ip:
            assert fields.ipv4(inst.customer_ip, "ip") == inst.customer_ip
    assert _one_line_tokens(rc.cluster_name or None, *rc.slurm_controller_ips)


@FAST
@given(data=st.binary(max_size=200) | st.sampled_from([b"[" * 5000, b"\xff\xfe", b"", b"null", b"{\"a\": NaN}"]))
def test_readers_refuse_any_bytes_with_their_own_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "f.json"
    path.write_bytes(data)
    for read, error in ((ResourceConfig.load, ResourceConfigError), (roles.load_cluster_config, roles.RoleFileError),
                        (roles.load_provisioning_parameters, roles.RoleFileError)):
        try:
            read(str(path))
        except error:
            pass


@FAST
@given(existing=st.lists(nasty_text, max_size=6), body=st.lists(nasty_text, max_size=4), name=nasty_text)
@example(existing=["UUID=abc / ext4 defaults 0 1\r"], body=["a@tcp:/b /fsx lustre defaults 0 0"], name="fsx")
@example(existing=[], body=[""], name="")  # found by Hypothesis: an empty block name never read back

def test_managed_block_round_trips_or_is_refused(existing, body, name):
    """replace_block: refused (LineRefused), or the block reads back as the given lines and every other line is
    kept exactly, and a second replace changes nothing."""
    text = "\n".join(line for line in existing if not line.strip().startswith(("# BEGIN hpq", "# END hpq")))
    text = text + "\n" if text else ""
    try:
        out = files.replace_block(text, name, body)
    except files.LineRefused:
        assert not files._BLOCK_NAME.fullmatch(name) or any(
            files.line_problem(x) or x.strip().startswith(("# BEGIN hpq", "# END hpq")) for x in body)
        return
    if body:
        assert files.block_lines(out, name) == body
        assert files.replace_block(out, name, []) == files.replace_block(text, name, [])
    assert files.replace_block(out, name, body) == out
    kept = [ln for ln in out.split("\n") if ln not in body and ln.strip() not in (files.BEGIN % name, files.END % name)]
    assert [ln for ln in kept if ln] == [ln for ln in text.split("\n") if ln and ln not in body]


@FAST
@given(dns=nasty_text | st.sampled_from([node_samples.FSX_DNS, "a" * 64 + ".com", "fs-1.fsx.x-y.amazonaws.com"]),
       mount_name=nasty_text | st.sampled_from([node_samples.FSX_MOUNTNAME, "fsx", "abc_def-"]))
def test_fstab_line_parses_back_to_the_same_fields_or_is_refused(dns, mount_name):
    try:
        line = fsx.fstab_line(dns, mount_name)
    except fsx.FsxError:
        return
    assert "\n" not in line and files.line_problem(line) is None
    source, target, fstype, options, dump, passno = line.split()  # fstab(5): six fields
    assert (source, target, fstype, options, dump, passno) == (
        f"{dns}@tcp:/{mount_name}", "/fsx", "lustre", fsx.FSTAB_OPTIONS, "0", "0")


NUMERIC = ["HPQ_SLURMCTLD_PORT", "HPQ_FSX_POLL_S", "HPQ_DNS_WAIT_S", "HPQ_FSX_MOUNT_ATTEMPTS", "HPQ_FSX_API_ATTEMPTS",
           "HPQ_SHARED_WAIT_S", "HPQ_EKS_DISK_WAIT_S"]


@FAST
@given(key=st.sampled_from(NUMERIC),
       value=st.text(max_size=12) | st.sampled_from(["nan", "inf", "-inf", "1e309", "-0", "0", "65535", "65536",
                                                     "1e3", " 5 ", "0x10"]) | st.floats().map(repr))
def test_numeric_settings_are_finite_and_in_range_or_refused(tmp_path_factory, key, value):
    try:
        s = context.Settings.from_env({"HPQ_ROOT": "/tmp/hpq-prop-root", key: value})
    except ValueError as exc:
        assert key in str(exc) or "HPQ_" in str(exc)
        return
    got = {"HPQ_SLURMCTLD_PORT": s.slurmctld_port, "HPQ_FSX_POLL_S": s.fsx_poll_s, "HPQ_DNS_WAIT_S": s.dns_wait_s,
           "HPQ_FSX_MOUNT_ATTEMPTS": s.fsx_mount_attempts, "HPQ_FSX_API_ATTEMPTS": s.fsx_api_attempts,
           "HPQ_SHARED_WAIT_S": s.shared_wait_s, "HPQ_EKS_DISK_WAIT_S": s.eks_disk_wait_s}[key]
    assert math.isfinite(got) and 0 <= got <= context.MAX_WAIT_S
    if key == "HPQ_SLURMCTLD_PORT":
        assert 1 <= got <= 65535 and isinstance(got, int)
    if key == "HPQ_FSX_POLL_S":
        assert got > 0


@FAST
@given(steps=st.text(alphabet=st.sampled_from(list("identify,fsx ")), max_size=20))
def test_steps_are_never_empty(steps):
    try:
        parsed = context.parse_steps(steps)
    except ValueError:
        assert not steps.replace(",", "").strip() or any(not x.strip() for x in steps.split(","))
        return
    assert parsed and all(parsed) and parsed == [x.strip() for x in steps.split(",")]
