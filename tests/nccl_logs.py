# ruff: noqa: UP031  (the lines below are written with nccl-tests' own printf formats)
"""nccl-tests ``all_reduce_perf`` logs in the real output format, for the verdict tests.

The layout is nccl-tests 2.x (NVIDIA/nccl-tests src/common.cu): the ``# nThread ...`` banner, one
``#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s`` line per rank (the lines hpq counts
hosts from), NCCL_DEBUG=INFO chatter where the caller gives it, the three-line column header, rows
of ``%12li  %12li  %8s  %6s  %6i`` followed by (time, algbw, busbw, #wrong) out-of-place and
in-place, then ``# Out of bounds values`` and ``# Avg bus bandwidth``. The real samples in
tests/data/nccl/ (and the PREAMBLE of test_report_parser.py) have the same layout.

Only the bandwidth figures are chosen: each test passes the published figure it rests on (and cites
it); smaller messages get a lower busbw along a saturation curve, as real runs do.
"""

from __future__ import annotations

from collections.abc import Sequence

GIB = 1 << 30
MIB = 1 << 20


def _time_str(us: float) -> str:
    return "%7.1f" % us if us >= 10000 else "%7.2f" % us


def allreduce_log(hosts: Sequence[str], gpus_per_host: int, peak_busbw: float, *, peak_bytes: int = GIB,
                  min_bytes: int = MIB, max_bytes: int = 2 * GIB, gpu: str = "NVIDIA A100-SXM4-40GB",
                  nccl_info: Sequence[str] = (), wrong: int = 0) -> str:
    """A complete all_reduce_perf log of ``len(hosts) * gpus_per_host`` ranks, one process per GPU."""
    nranks = len(hosts) * gpus_per_host
    lines = [
        "# nccl-tests version 2.16.9 nccl-headers=22707 nccl-library=22707",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0" % (min_bytes, max_bytes),
        "#",
        "# Using devices",
    ]
    rank = 0
    for h, host in enumerate(hosts):
        for dev in range(gpus_per_host):
            lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0000:%02x:1c] %s"
                         % (rank, 0, 1000 + 10 * h + dev, host, dev, 0x10 + dev, gpu))
            rank += 1
    lines += list(nccl_info)
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = 2.0 * (nranks - 1) / nranks if nranks > 1 else 1.0
    knee = 64 * MIB
    ref = peak_bytes / (peak_bytes + knee)
    size, all_busbw = min_bytes, []
    while size <= max_bytes:
        busbw = peak_busbw if size >= peak_bytes else peak_busbw * (size / (size + knee)) / ref
        algbw = busbw / factor
        t = size / (algbw * 1e3)
        w = wrong if size == max_bytes else 0
        lines.append("%12i  %12i  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %6d  %7s  %6.2f  %6.2f  %6d" % (
            size, size // 4, "float", "sum", -1, _time_str(t), algbw, busbw, w, _time_str(t), algbw, busbw, 0))
        all_busbw.append(busbw)
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : %g " % (sum(all_busbw) / len(all_busbw)),
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
    ]
    return "\n".join(lines) + "\n"


def efa_info(host: str) -> list[str]:
    """NCCL_DEBUG=INFO lines of a run on EFA with GPUDirect RDMA (aws-ofi-nccl's wording)."""
    p = "%s:1000:1052 [0] NCCL INFO " % host
    return [p + "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
            p + "Using network AWS Libfabric",
            p + "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA"]


def socket_info(host: str) -> list[str]:
    """NCCL_DEBUG=INFO lines of a run that fell back to NCCL's TCP socket transport."""
    p = "%s:1000:1052 [0] NCCL INFO " % host
    return [p + "NET/Socket : Using [0]eth0:10.1.2.3<0>",
            p + "Using network Socket",
            p + "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0"]


def without_rank_lines(log: str) -> str:
    return "\n".join(ln for ln in log.splitlines() if not ln.startswith("#  Rank ")) + "\n"
