"""The IMDS stand-in (hpq.standins.imds, the one the rehearsal's nodes get) as a pytest fixture.

``imds_factory(nodes, **faults)`` starts a server for ``nodes`` (URL prefix -> the answers a test
names: ``instance-id``, ``instance-type`` as IMDS reports it, ``region``; "" is the root) with the
faults of :class:`hpq.standins.imds.Faults` (an IMDSv1-only token API, slow or failing answers);
every server is stopped at teardown. Several nodes share one server:
``http://127.0.0.1:PORT/<node>`` is node ``<node>``'s IMDS.
"""

from __future__ import annotations

import pytest

from hpq.standins import imds

DEFAULT_NODE = {"instance-id": "i-0123456789abcdef0", "instance-type": "p5.48xlarge"}


@pytest.fixture
def imds_factory():
    """Start IMDS stand-ins with the given nodes and faults; all stopped at teardown."""
    started: list[imds.Server] = []

    def make(nodes: dict[str, dict[str, str]] | None = None, **faults) -> imds.Server:
        answers = nodes or {"": DEFAULT_NODE}
        srv = imds.start({k: imds.Metadata.of(v) for k, v in answers.items()}, imds.Faults(**faults))
        started.append(srv)
        return srv

    yield make
    for srv in started:
        imds.stop(srv)
