"""Fixtures of the Kubernetes tests (tests/kube/): the CloudFormation response endpoint and the helm stand-in
(tests/kube/helm_standin.py), and real Open MPI workers (tests/kube/mpi_world.py).

Shared ones (``moto_aws``, ``fake_kube``) are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import helm_standin
from tests.kube import mpi_world as mpi


@pytest.fixture
def cfn_responses() -> Iterator[helm_standin.CfnResponses]:
    yield from helm_standin.serve_cfn_responses()


@pytest.fixture(scope="session")
def real_helm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return helm_standin.real_helm(tmp_path_factory)


@pytest.fixture
def fake_helm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_helm: str) -> helm_standin.FakeHelm:
    return helm_standin.fake_helm(tmp_path, monkeypatch, real_helm)


@pytest.fixture(scope="module")
def mpi_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mpi.MpiWorld]:
    yield from mpi.start(tmp_path_factory)
