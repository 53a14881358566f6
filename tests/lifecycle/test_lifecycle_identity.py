"""Who a node is, from HyperPod's real on-node files, through the bundle as it ships.

Samples: tests/node_samples.py (real formats, sources in its docstring). IMDS: the token-enforcing
stand-in (hpq.standins.imds, the imds_factory fixture of tests/conftest.py) answering as EC2 does (instance-type without ``ml.``). Every end-to-end
case runs the bundle's root ``on_create.sh`` from the bundle directory, as HyperPod runs OnCreate, with
the documented HPQ_* overrides only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpq.lifecycle import identity, names, roles
from hpq.lifecycle.resource_config import ResourceConfig
from tests import node_samples

SLURM_IDS = {name: iid for name, (iid, _, _) in node_samples.SLURM_NODES.items()}


@pytest.fixture
def bundle(tmp_path) -> Path:
    return node_samples.build_bundle(tmp_path / "tmp/bucket/lifecycle")


def node_info(root: Path) -> dict:
    return json.loads((root / names.NODE_INFO.lstrip("/")).read_text())


def identify(entry: Path, root: Path, env: dict, *extra: str):
    res = node_samples.run_on_create(entry, dict(env, HPQ_ROOT=str(root)), "--steps", "identify", *extra)
    assert "Traceback" not in res.stdout + res.stderr
    return res


@pytest.mark.parametrize("instance,role", [("worker-group-1-1", "worker"), ("controller-machine-1", "controller"),
                                           ("login-group-1", "login")])
def test_documented_provisioning_parameters_give_the_role(tmp_path, bundle, imds_factory, instance, role):
    samples = tmp_path / "samples"
    rc = node_samples.write_json(samples / "resource_config.json", node_samples.slurm_resource_config())
    pp = node_samples.write_json(samples / "provisioning_parameters.json", node_samples.provisioning_parameters())
    srv = imds_factory({"": node_samples.imds_answers(SLURM_IDS[instance])})
    root = tmp_path / "node"
    res = identify(bundle, root, dict(HPQ_IMDS_URL=srv.url, HPQ_RESOURCE_CONFIG=str(rc),
                                      HPQ_PROVISIONING_PARAMETERS=str(pp)))
    assert res.returncode == 0, res.stdout + res.stderr
    info = node_info(root)
    _, ip, _ = node_samples.SLURM_NODES[instance]
    assert (info["role"], info["instance_name"], info["ip"], info["matched_by"]) == (role, instance, ip, "InstanceId")
    assert info["cluster_name"] == node_samples.CLUSTER and info["orchestrator"] == "slurm"  # from ClusterConfig
    assert info["slurm_node_name"] == "ip-" + ip.replace(".", "-")
    assert info["controller_ips"] == [node_samples.SLURM_NODES["controller-machine-1"][1]]
    assert info["fsx_dns_name"] == node_samples.FSX_DNS and info["fsx_mountname"] == node_samples.FSX_MOUNTNAME
    assert info["region"] == node_samples.REGION  # from ClusterArn, no IMDS call needed for it
    assert info["worker_count"] == 2  # the worker group's instances; the login node is not one
    # Slurm NodeNames (ip-a-b-c-d) of the workers and the login node: what the no-FSx key job names.
    assert info["worker_nodes"] == ["ip-10-1-92-200", "ip-10-1-86-31"] and info["login_nodes"] == ["ip-10-1-33-12"]
    if role == "worker":
        assert info["partition"] == "ml.p5.48xlarge" and info["instance_type"] == "ml.p5.48xlarge"
    assert f"is {role} in group" in res.stdout


@pytest.mark.parametrize("where", ["bundle", "start dir", "opt/ml/config"])
def test_provisioning_parameters_found_where_hyperpod_or_a_user_puts_them(tmp_path, bundle, imds_factory, where):
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.slurm_resource_config())
    start = tmp_path / "elsewhere"
    place = {"bundle": bundle.parent, "start dir": start, "opt/ml/config": root / "opt/ml/config"}[where]
    node_samples.write_json(place / names.PROVISIONING_PARAMETERS, node_samples.provisioning_parameters())
    srv = imds_factory({"": node_samples.imds_answers(SLURM_IDS["controller-machine-1"], "m5.12xlarge")})
    # HyperPod starts OnCreate in the bundle directory; a user may start the entry from anywhere.
    res = node_samples.run_on_create(bundle, dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url), "--steps", "identify",
                           cwd=start if where == "start dir" else None)
    assert res.returncode == 0, res.stdout + res.stderr
    info = node_info(root)
    assert info["role"] == "controller" and info["role_source"] == f"{place / names.PROVISIONING_PARAMETERS} " \
                                                                   "(provisioning_parameters.json)"


def test_hpq_cluster_config_next_to_the_bundle(tmp_path, bundle, imds_factory):
    """The S3 stack's hpq-cluster.json gives the roles; a provisioning_parameters.json HyperPod keeps in
    /opt/ml/config still names the FSx filesystem."""
    root = tmp_path / "node"
    node_samples.write_json(root / "opt/ml/config/resource_config.json", node_samples.slurm_resource_config())
    node_samples.write_json(bundle.parent / names.HPQ_CLUSTER_CONFIG, node_samples.hpq_cluster_config())
    node_samples.write_json(root / names.NODE_PROVISIONING_PARAMETERS.lstrip("/"), node_samples.provisioning_parameters())
    srv = imds_factory({"": node_samples.imds_answers(SLURM_IDS["worker-group-1-2"])})
    res = identify(bundle, root, dict(HPQ_IMDS_URL=srv.url))
    assert res.returncode == 0, res.stdout
    info = node_info(root)
    assert info["role"] == "worker" and info["partition"] == "workers"
    assert info["role_source"].endswith(f"{names.HPQ_CLUSTER_CONFIG} ({names.HPQ_CLUSTER_CONFIG})")
    assert info["fsx_mountname"] == node_samples.FSX_MOUNTNAME


def test_eks_node_without_instance_id_is_matched_by_its_hyperpod_name(tmp_path, bundle, imds_factory):
    """EKS: no InstanceId in resource_config.json, instances named hyperpod-i-<id>, no role file at all."""
    rc = node_samples.write_json(tmp_path / "samples/resource_config.json", node_samples.eks_resource_config())
    iid = list(node_samples.EKS_NODES)[1]
    srv = imds_factory({"": node_samples.imds_answers(iid, "g5.48xlarge")})
    root = tmp_path / "node"
    res = identify(bundle, root, dict(HPQ_IMDS_URL=srv.url, HPQ_RESOURCE_CONFIG=str(rc)))
    assert res.returncode == 0, res.stdout + res.stderr
    info = node_info(root)
    assert (info["role"], info["orchestrator"], info["instance_id"], info["instance_name"]) == (
        "worker", "eks", iid, "hyperpod-" + iid)
    assert info["matched_by"] == f"InstanceName hyperpod-{iid}" and info["controller_ips"] == []
    assert info["cluster_name"] == "eks-ml-cluster" and info["instance_type"] == "ml.g5.48xlarge"
    assert info["slurm_node_name"] == ""


def test_unreachable_imds_falls_back_to_the_nodes_address(tmp_path, bundle):
    rc = node_samples.write_json(tmp_path / "samples/resource_config.json", node_samples.slurm_resource_config())
    pp = node_samples.write_json(tmp_path / "samples/pp.json", node_samples.provisioning_parameters())
    root = tmp_path / "node"
    res = identify(bundle, root, dict(HPQ_IMDS_URL="http://127.0.0.1:9", HPQ_RESOURCE_CONFIG=str(rc),
                                      HPQ_PROVISIONING_PARAMETERS=str(pp), HPQ_NODE_IP="192.168.0.5,10.1.86.31"))
    assert res.returncode == 0, res.stdout
    assert "no instance id (IMDS token request at http://127.0.0.1:9 failed" in res.stdout
    info = node_info(root)
    assert info["instance_name"] == "worker-group-1-2" and info["matched_by"] == "CustomerIpAddress 10.1.86.31"
    assert info["instance_id"] == node_samples.SLURM_NODES["worker-group-1-2"][0]  # from the entry it matched
    assert info["instance_type"] == "ml.p5.48xlarge"  # from the group: IMDS was not needed


def test_a_node_in_no_entry_fails_with_one_clear_line(tmp_path, bundle, imds_factory):
    rc = node_samples.write_json(tmp_path / "samples/resource_config.json", node_samples.slurm_resource_config())
    pp = node_samples.write_json(tmp_path / "samples/pp.json", node_samples.provisioning_parameters())
    srv = imds_factory({"": node_samples.imds_answers("i-0ffffffffffffffff")})
    res = identify(bundle, tmp_path / "node", dict(HPQ_IMDS_URL=srv.url, HPQ_RESOURCE_CONFIG=str(rc),
                                                   HPQ_PROVISIONING_PARAMETERS=str(pp), HPQ_NODE_IP="192.168.0.5"))
    assert res.returncode == 1
    assert ("step identify failed: this node (instance i-0ffffffffffffffff, addresses 192.168.0.5) is not in "
            f"{rc}") in res.stdout
    assert "it lists 4 instance(s): i-0c1a2b3c4d5e6f701" in res.stdout


def test_hpqs_old_provisioning_schema_is_refused_with_the_reason(tmp_path, bundle, imds_factory):
    """hpq's former invention (cluster_name, orchestrator, worker_groups as names) under HyperPod's file name."""
    rc = node_samples.write_json(tmp_path / "samples/resource_config.json", node_samples.slurm_resource_config())
    old = node_samples.write_json(tmp_path / "samples/pp.json", {
        "version": "1.0.0", "cluster_name": "c", "orchestrator": "slurm", "controller_group": "controller-machine",
        "worker_groups": ["worker-group-1"]})
    srv = imds_factory({"": node_samples.imds_answers(SLURM_IDS["worker-group-1-1"])})
    res = identify(bundle, tmp_path / "node", dict(HPQ_IMDS_URL=srv.url, HPQ_RESOURCE_CONFIG=str(rc),
                                                   HPQ_PROVISIONING_PARAMETERS=str(old)))
    assert res.returncode == 1
    assert "worker_groups must be a list of {\"instance_group_name\", \"partition_name\"} objects" in res.stdout


def test_eks_node_matched_by_address_takes_its_instance_id_from_its_hyperpod_name():
    """EKS entries may have no InstanceId; with IMDS unreachable the address match still names the
    instance through ``InstanceName hyperpod-<id>`` (tests/node_samples.py eks_resource_config)."""
    iid, (ip, _) = next(iter(node_samples.EKS_NODES.items()))
    node = identity.identify(ResourceConfig(node_samples.eks_resource_config()), None, [ip], roles.RoleSources(None, None, []))
    assert node.matched_by == f"CustomerIpAddress {ip}" and node.instance_id == iid
    assert identity.instance_id_from_name("worker-group-1-2") == ""  # a Slurm name carries no id


def test_renamed_group_is_an_error_naming_both_sides():
    rc = ResourceConfig(node_samples.slurm_resource_config())
    pp = roles.RoleFile("pp.json", names.PROVISIONING_PARAMETERS, "slurm", None, "controller-machine", None,
                        ["workers"])
    with pytest.raises(identity.IdentityError, match="group 'worker-group-1' is none of controller "
                                                     "'controller-machine', login None, workers \\['workers'\\]"):
        identity.identify(rc, SLURM_IDS["worker-group-1-1"], [], roles.RoleSources(pp, None, []))


def test_without_role_file_slurm_config_still_tells_the_controller():
    rc = ResourceConfig(node_samples.slurm_resource_config())
    none = roles.RoleSources(None, None, ["a", "b"])
    assert identity.identify(rc, SLURM_IDS["controller-machine-1"], [], none).role == "controller"
    worker = identity.identify(rc, SLURM_IDS["worker-group-1-1"], [], none)
    assert worker.role == "worker" and "SlurmConfig" in worker.role_source
    assert worker.worker_count == 3  # no role file: every node but the controller
    bare = node_samples.slurm_resource_config()
    del bare["ClusterConfig"]["SlurmConfig"]
    with pytest.raises(identity.IdentityError, match="no role for this Slurm node: none of a, b exists"):
        identity.identify(ResourceConfig(bare), SLURM_IDS["worker-group-1-1"], [], none)


def test_role_file_and_resource_config_must_agree_on_the_orchestrator():
    rc = ResourceConfig(node_samples.eks_resource_config())
    cc = roles.RoleFile("hpq-cluster.json", names.HPQ_CLUSTER_CONFIG, "slurm", "x", "controller-machine", None,
                        ["gpu-workers"])
    with pytest.raises(identity.IdentityError, match="ClusterType 'Kubernetes' but hpq-cluster.json"):
        identity.identify(rc, list(node_samples.EKS_NODES)[0], [], roles.RoleSources(cc, None, []))


def test_two_entries_with_this_nodes_address_are_not_guessed_between():
    doc = node_samples.slurm_resource_config()
    doc["InstanceGroups"][1]["Instances"][0]["CustomerIpAddress"] = "10.1.92.200"  # stale entry, same address
    with pytest.raises(identity.IdentityError, match="match 2 instances"):
        identity.identify(ResourceConfig(doc), None, ["10.1.92.200"], roles.RoleSources(None, None, []))


def test_cluster_config_schema_is_checked(tmp_path):
    bad = node_samples.write_json(tmp_path / "cc.json", dict(node_samples.hpq_cluster_config(), schema_version=2))
    with pytest.raises(roles.RoleFileError, match="schema_version 2 is not 1"):
        roles.load_cluster_config(str(bad))
    eks = roles.load_cluster_config(str(node_samples.write_json(tmp_path / "e.json", node_samples.hpq_cluster_config("eks"))))
    assert eks.orchestrator == "eks" and eks.controller_group is None and eks.worker_groups == ["gpu-workers"]


def test_local_addresses_read_the_kernels_local_routes(tmp_path):
    """/proc/net/fib_trie as the kernel prints it (net/ipv4/fib_trie.c, fib_trie_seq_show): every
    ``/32 host LOCAL`` leaf is an address of this host; loopback is left out."""
    trie = tmp_path / "fib_trie"
    trie.write_text("""Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.1.0.0/16 2 0 2
        |-- 10.1.0.0
           /16 link UNICAST
        |-- 10.1.92.200
           /32 host LOCAL
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.1.92.200
        /32 host LOCAL
""")
    assert "10.1.92.200" in identity.local_addresses(str(trie))
    assert not any(ip.startswith("127.") for ip in identity.local_addresses(str(trie)))


def test_relative_paths_are_relative_to_where_the_run_started(tmp_path, bundle, imds_factory):
    """on_create.sh moves into the bundle before Python starts; paths given relative to the caller still work."""
    node_samples.write_json(tmp_path / "samples/resource_config.json", node_samples.slurm_resource_config())
    node_samples.write_json(tmp_path / "samples/pp.json", node_samples.provisioning_parameters())
    srv = imds_factory({"": node_samples.imds_answers(SLURM_IDS["login-group-1"], "m5.4xlarge")})
    res = node_samples.run_on_create(bundle, dict(HPQ_ROOT="node", HPQ_IMDS_URL=srv.url,
                                        HPQ_RESOURCE_CONFIG="samples/resource_config.json",
                                        HPQ_PROVISIONING_PARAMETERS="samples/pp.json"),
                           "--steps", "identify", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert node_info(tmp_path / "node")["role"] == "login"
    assert (tmp_path / "node/var/log/hpq/on_create.log").exists()
