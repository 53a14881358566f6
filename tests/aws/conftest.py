"""Fixtures of the AWS library tests (tests/aws/): moto with hpq's fixes (hpq.standins.moto).

Shared ones (``moto_server``, ``aws_env``, ``sshd``) are in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import moto_server


@pytest.fixture(scope="session")
def moto_server_paging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of moto with the ListClusterNodes pagination fix and the others of hpq.standins.moto."""
    yield from moto_server.moto_server_paging(tmp_path_factory)


@pytest.fixture
def aws_env_paging(moto_server_paging: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """boto3 pointed at ``moto_server_paging`` as ``aws_env`` points it at the plain one."""
    moto_server.set_aws_env(monkeypatch, moto_server_paging, tmp_path)
    return moto_server_paging
