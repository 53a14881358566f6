"""EKS clusters run the same OnCreate script: identity and the NCCL environment, but no Slurm parts.

IMDS is the local token-enforcing stand-in from fixtures_imds (no EC2 here).
"""

from __future__ import annotations

import json
import logging

import pytest

from hpq.lifecycle import identity, main, names
from hpq.tests.fixtures_imds import imds_factory  # noqa: F401
from hpq.tests.fixtures_slurm import make_context

EKS_RC = {"InstanceGroups": [{"Name": "gpu-workers", "InstanceType": "ml.g5.48xlarge", "Instances": [
    {"InstanceId": "i-0eks1", "InstanceName": "gpu-workers-1", "CustomerIpAddress": "10.1.0.11"},
    {"InstanceId": "i-0eks2", "InstanceName": "gpu-workers-2", "CustomerIpAddress": "10.1.0.12"}]}]}
EKS_PARAMS = {"version": "1.0.0", "orchestrator": "eks", "cluster_name": "eks-c", "worker_groups": ["gpu-workers"]}


def _node(tmp_path, params=EKS_PARAMS):
    root = tmp_path / "node"
    (root / "opt/ml/config").mkdir(parents=True)
    (root / "opt/ml/config/resource_config.json").write_text(json.dumps(EKS_RC))
    pp = tmp_path / "pp.json"
    pp.write_text(json.dumps(params))
    return root, pp


def test_eks_parameters_need_no_controller(tmp_path):
    _, pp = _node(tmp_path)
    params = identity.ProvisioningParameters.load(str(pp))
    assert params.orchestrator == "eks" and params.controller_group is None
    node = identity.identify(EKS_RC, "i-0eks2", params)
    assert (node.role, node.controller_ips, node.worker_count) == ("worker", [], 2)


def test_slurm_parameters_still_need_a_controller(tmp_path):
    _, pp = _node(tmp_path, {**EKS_PARAMS, "orchestrator": "slurm"})
    with pytest.raises(identity.IdentityError, match="lack controller_group"):
        identity.ProvisioningParameters.load(str(pp))


def test_unknown_orchestrator_is_a_clear_error(tmp_path):
    _, pp = _node(tmp_path, {**EKS_PARAMS, "orchestrator": "nomad"})
    with pytest.raises(identity.IdentityError, match="orchestrator 'nomad'"):
        identity.ProvisioningParameters.load(str(pp))


def test_eks_node_runs_identity_and_nccl_env_and_skips_slurm_steps(tmp_path, imds_factory, caplog):  # noqa: F811
    srv = imds_factory({"": {"instance-id": "i-0eks1", "instance-type": "ml.g5.48xlarge"}})
    root, pp = _node(tmp_path)
    ctx = make_context(root, HPQ_IMDS_URL=srv.url, HPQ_PROVISIONING_PARAMETERS=str(pp))
    with caplog.at_level(logging.INFO):
        main.run_steps(ctx, ["identify", "nccl-env", "install", "munge", "slurm", "ssh-keys"])
    info = json.loads((root / names.NODE_INFO.lstrip("/")).read_text())
    assert info["role"] == "worker" and info["instance_type"] == "ml.g5.48xlarge"
    for step in ("install", "munge", "slurm", "ssh-keys"):
        assert f"step {step}: skipped (EKS cluster" in caplog.text
    written = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert not any("munge" in p or "slurm" in p for p in written), written
    assert any(p.startswith("etc/profile.d/") for p in written), "the NCCL environment is still written"
