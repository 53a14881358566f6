"""Prometheus remote write to an AMP workspace, signed with SigV4: how a result made off-node reaches the workspace.

On Slurm a node program's result goes through node_exporter's textfile collector and the node's agent
(scripts/result_metrics.py). On EKS nothing of hpq's runs on the nodes between tests, so ``hpq test`` sends the
result's series itself, once, from the machine it runs on, to the stack's ``PrometheusRemoteWriteUrl``.

The wire format is Prometheus's remote write 1.0 (https://prometheus.io/docs/specs/remote_write_spec/): a
``WriteRequest`` protobuf (prometheus/prompb remote.proto and types.proto: WriteRequest.timeseries = 1;
TimeSeries.labels = 1, samples = 2; Label.name = 1, value = 2; Sample.value = 1 double, timestamp = 2 int64
milliseconds), labels sorted by name with ``__name__`` among them, compressed with Snappy's block format
(https://github.com/google/snappy/blob/main/format_description.txt), POSTed with ``Content-Encoding: snappy``,
``Content-Type: application/x-protobuf`` and ``X-Prometheus-Remote-Write-Version: 0.1.0``. AMP takes it at
``<PrometheusEndpoint>api/v1/remote_write`` signed for ``aps`` with credentials allowed ``aps:RemoteWrite``
(https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-ingest-metrics-remote-write.html). The encoder
is written here (a few dozen lines) rather than taking protobuf and a Snappy binding as dependencies: the
message has four fields, and Snappy allows a block of literals only, which any decoder reads.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from hpq.aws import amp

TIMEOUT_S = 30.0
HEADERS = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
           "X-Prometheus-Remote-Write-Version": "0.1.0"}
Series = tuple[dict[str, str], float, int]  # labels (with __name__), value, timestamp in ms


class WriteError(Exception):
    """The workspace did not take the write; the message names the likely cause (endpoint, credentials, IAM)."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire_type)
    if wire_type == 2:  # length-delimited
        return key + _varint(len(payload)) + payload
    return key + payload


def encode_write_request(series: Iterable[Series]) -> bytes:
    """The WriteRequest protobuf (uncompressed)."""
    body = bytearray()
    for labels, value, timestamp_ms in series:
        ts = bytearray()
        for name in sorted(labels):
            label = _field(1, 2, name.encode()) + _field(2, 2, str(labels[name]).encode())
            ts += _field(1, 2, label)
        sample = _field(1, 1, struct.pack("<d", float(value))) + _field(2, 0, _varint(timestamp_ms & (2**64 - 1)))
        ts += _field(2, 2, sample)
        body += _field(1, 2, bytes(ts))
    return bytes(body)


def snappy_literal(data: bytes) -> bytes:
    """Snappy's block format with literals only: the uncompressed length, then 64 KiB literal chunks."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 65536):
        chunk = data[start:start + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + struct.pack("<H", n)
        out += chunk
    return bytes(out)


def write(session: Any, url: str, region: str, series: list[Series]) -> int:
    """POST the series to ``url`` signed with ``session``'s credentials; the number sent. WriteError otherwise."""
    post(session, url, region, snappy_literal(encode_write_request(series)))
    return len(series)


def post(session: Any, url: str, region: str, body: bytes) -> None:
    """One signed remote-write request with ``body`` (compressed already); WriteError when it is not taken."""
    try:
        amp.send(session, url, region, url, {
            403: "these credentials may not aps:RemoteWrite on the workspace (or the signature was refused)",
            404: "no such workspace or path (check PrometheusRemoteWriteUrl)",
            400: "the workspace refused the samples"}, "the write was refused", method="POST", body=body, extra=HEADERS)
    except amp.QueryError as exc:  # the same one line, as this module's error
        raise WriteError(str(exc)) from None
