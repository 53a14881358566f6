"""moto, fixed where it answers otherwise than AWS: one set of fixes for every moto hpq runs.

The rehearsal's embedded moto (rehearsal/aws.EmbeddedMoto) and the tests' moto server
(``python -m hpq.standins.moto -H 127.0.0.1 -p PORT``, tests/moto_server.py) apply the same
fixes, before the server starts; the HTTP APIs stay moto's otherwise:

- FSx DescribeFileSystems lacks ``Lifecycle`` and ``LustreConfiguration.MountName``, both of which
  the real API returns (FSx API Reference, FileSystem and LustreFileSystemConfiguration): the fix
  answers ``AVAILABLE`` (CloudFormation's create completes only then) and an 8-character mount
  name (botocore's FSx model, LustreFileSystemMountName ``^([A-Za-z0-9_-]{1,8})$``).
- SageMaker ListClusterNodes builds its NextToken from a ``ClusterNode.arn`` attribute that does
  not exist (moto 5.2), so a cluster with more than one page of nodes answers HTTP 500: the token
  is built from the instance id (pagination stays moto's: MaxResults 100, NextToken).
- moto names HyperPod nodes ``<group>-<n>``, which the real API never returns and refuses as a
  NodeId (sagemaker ``ClusterNodeId``: ``i-[a-f0-9]{8}(?:[a-f0-9]{9})?`` in botocore's service
  model): each node gets an instance id of that shape (``i-`` and 17 hex digits, stable per
  cluster and node).
- A real cluster ARN ends in a 12-character cluster id (sagemaker ``ClusterArn``:
  ``...:cluster/[a-z0-9]{12}``), which SSM targets use, where moto puts the name: each cluster
  gets such an id, and ARNs are resolved by it.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from typing import Any

_APPLIED: list[bool] = []


def fix_fsx() -> None:
    """DescribeFileSystems as the real API answers it: Lifecycle AVAILABLE and a LustreConfiguration.MountName."""
    from moto.fsx import models

    original = models.FileSystem.to_dict

    def to_dict(self: Any) -> dict[str, Any]:
        out = original(self)
        out["Lifecycle"] = "AVAILABLE"
        if self.file_system_type == "LUSTRE":
            conf = dict(self.lustre_configuration or {})
            conf.setdefault("MountName", hashlib.sha256(self.file_system_id.encode()).hexdigest()[:8])
            out["LustreConfiguration"] = conf
        return out

    models.FileSystem.to_dict = to_dict


def _real_instance_ids(create_cluster: Any) -> Any:
    """Wrap moto's create_cluster so its nodes carry instance ids, and the cluster an ARN, of the real shape."""

    @functools.wraps(create_cluster)
    def wrapper(self: Any, cluster_name: str, *args: Any, **kwargs: Any) -> str:
        create_cluster(self, cluster_name, *args, **kwargs)
        cluster = self.clusters[cluster_name]
        cluster_id = hashlib.sha256(cluster_name.encode()).hexdigest()[:12]
        cluster.arn = cluster.arn.rsplit("/", 1)[0] + "/" + cluster_id
        renamed = {}
        for old_id, node in cluster.nodes.items():
            node.instance_id = "i-" + hashlib.sha256(f"{cluster_name}/{old_id}".encode()).hexdigest()[:17]
            renamed[node.instance_id] = node
        cluster.nodes = renamed
        return cluster.arn

    return wrapper


def _by_real_arn(method: Any) -> Any:
    """Wrap a moto method whose first argument is ClusterName (a name or an ARN) to resolve ARNs by id."""

    @functools.wraps(method)
    def wrapper(self: Any, cluster_name: str, *args: Any, **kwargs: Any) -> Any:
        if cluster_name.startswith("arn:"):
            named = [c.cluster_name for c in self.clusters.values() if c.arn == cluster_name]
            cluster_name = named[0] if named else cluster_name.rsplit("/", 1)[-1]
        return method(self, cluster_name, *args, **kwargs)

    return wrapper


def fix_sagemaker() -> None:
    """HyperPod's ListClusterNodes pages, node ids and cluster ARNs as the real API has them."""
    from moto.sagemaker import models

    models.PAGINATION_MODEL["list_cluster_nodes"]["unique_attribute"] = "instance_id"
    backend = models.SageMakerModelBackend
    backend.create_cluster = _real_instance_ids(backend.create_cluster)
    for name in ("describe_cluster", "delete_cluster", "describe_cluster_node", "list_cluster_nodes"):
        setattr(backend, name, _by_real_arn(getattr(backend, name)))


def apply() -> None:
    """Every fix, once per process (before any moto server of this process starts)."""
    if _APPLIED:
        return
    fix_fsx()
    fix_sagemaker()
    _APPLIED.append(True)


def main(argv: list[str]) -> None:
    """moto_server with the fixes: ``python -m hpq.standins.moto -H HOST -p PORT``."""
    apply()
    from moto.server import main as moto_main

    moto_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
