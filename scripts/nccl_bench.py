"""hpq's built-in collective benchmark: nccl-tests' columns, written on torch.distributed.

Used by ``run-nccl-test`` when no nccl-tests binary exists on the cluster. One process
per GPU (nccl backend) or per CPU rank (gloo). For every size it checks the result of a
fresh run element by element against the exact expected values (inputs are small
integers, so every sum is exact in the chosen type) and counts mismatches in ``#wrong``,
summed over ranks like nccl-tests. Times are the mean over ``--iters`` back-to-back calls,
averaged over ranks; ``algbw = bytes / time``, ``busbw = algbw * factor`` with nccl-tests'
factors (all_reduce ``2(n-1)/n``, all_gather and reduce_scatter ``(n-1)/n``).

torch.distributed has no out-of-place all-reduce. On GPUs the out-of-place column calls
ncclAllReduce(send, recv) on the libnccl torch loaded (ctypes; a second communicator whose
unique id travels over torch.distributed); where that is not usable, it is a reduce-scatter from the send buffer plus an all-gather into the receive
buffer (the two halves of a ring all-reduce, about 15% slower on 2x H200); on gloo, a copy
into the receive buffer plus an in-place all-reduce. In-place is ``dist.all_reduce(buf)``,
the call DDP makes: ncclAllReduce(buf, buf).

Run: ``srun -N2 --ntasks-per-node=8 python3 -m hpq.scripts.nccl_bench -b 8 -e 16G``
(``run-nccl-test`` does this for you).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from typing import List, Optional, Tuple

from hpq.scripts import distenv
from hpq.scripts.args import byte_size  # nccl-tests style sizes: 8, 128K, 1M, 16G

OPS = ("all_reduce", "all_gather", "reduce_scatter")
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32"}
CHUNK = 1 << 26  # elements generated/checked per step (bounded temporary memory)
CPU_MAX_BYTES = 256 << 20


def sizes(min_bytes: int, max_bytes: int, factor: int, step: int) -> List[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s = s * factor if factor > 1 else s + step
    return out


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    return (n - 1) / float(n)


def fmt_time(us: float) -> str:
    if us >= 10000:
        return "%8.0f" % us
    if us >= 100:
        return "%8.1f" % us
    return "%8.2f" % us


def _load_libnccl(ctypes):
    """The libnccl this process already has loaded (torch's), else the default one."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1]
                if "libnccl.so" in path and os.path.exists(path):
                    return ctypes.CDLL(path)
    except OSError:
        pass
    return ctypes.CDLL("libnccl.so.2")


class Bench:
    def __init__(self, torch, dist, args, info: distenv.DistInfo, device, dtype, backend: str):
        self.torch, self.dist, self.args, self.info = torch, dist, args, info
        self.device, self.dtype, self.backend = device, dtype, backend
        self.n = info.world_size
        self.exact_small = dtype in (torch.float16, torch.bfloat16)
        self.comm = None
        self.oop_note = ""
        if backend == "nccl" and args.op == "all_reduce" and not args.no_direct_nccl:
            self.comm = self._direct_comm()

    def _direct_comm(self):
        """A second NCCL communicator on the libnccl torch loaded, for a true out-of-place all-reduce.

        torch.distributed only offers in-place all-reduce and torch.cuda.nccl's unique_id() is
        broken on Python 3.12 (torch 2.11), so the out-of-place column calls ncclAllReduce(send,
        recv) through ctypes; the unique id travels over torch.distributed.
        """
        import ctypes

        t, dist = self.torch, self.dist
        try:
            lib = _load_libnccl(ctypes)

            class UniqueId(ctypes.Structure):
                _fields_ = [("internal", ctypes.c_char * 128)]

            lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
            lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
            lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                          ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
            uid = UniqueId()
            if self.info.rank == 0 and lib.ncclGetUniqueId(ctypes.byref(uid)) != 0:
                raise RuntimeError("ncclGetUniqueId failed")
            box = [ctypes.string_at(ctypes.addressof(uid), 128) if self.info.rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            ctypes.memmove(ctypes.addressof(uid), box[0], 128)
            comm = ctypes.c_void_p()
            if lib.ncclCommInitRank(ctypes.byref(comm), self.n, uid, self.info.rank) != 0:
                raise RuntimeError("ncclCommInitRank failed")
            self.nccl_dtype = {t.float32: 7, t.float16: 6, t.bfloat16: 9, t.float64: 8, t.int32: 2}[self.dtype]
            self.lib = lib
            probe = t.full((4,), 1, dtype=self.dtype, device=self.device)
            out = t.zeros(4, dtype=self.dtype, device=self.device)
            self._nccl_allreduce(probe, out, comm)
            self.sync()
            if not bool((out == self.n).all()):
                raise RuntimeError("probe all-reduce gave %s" % out.tolist())
            self.oop_note = "out-of-place: ncclAllReduce(send, recv) on torch's libnccl (ctypes)"
            return comm
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to torch.distributed only
            self.oop_note = ("out-of-place: reduce-scatter + all-gather (direct NCCL call unusable: %s)"
                             % (str(exc).splitlines() or ["?"])[0][:120])
            return None

    def _nccl_allreduce(self, send, recv, comm) -> None:
        stream = self.torch.cuda.current_stream(self.device).cuda_stream
        rc = self.lib.ncclAllReduce(send.data_ptr(), recv.data_ptr(), send.numel(), self.nccl_dtype, 0, comm,
                                    stream)
        if rc != 0:
            raise RuntimeError("ncclAllReduce returned %d" % rc)

    def close(self) -> None:
        if self.comm is not None:
            self.sync()
            self.lib.ncclCommDestroy(self.comm)
            self.comm = None

    # --- data: small integers so every reduction (and every partial sum) is exact -------------
    def _weight(self, rank):
        """Rank r's multiplier (int or tensor). bf16 holds integers exactly only up to 256, so in
        half types the weights are 1 and 2 (sums <= 1.5 n) instead of r+1 (sums up to n(n+1)/2)."""
        return rank % 2 + 1 if self.exact_small else rank + 1

    def _base(self, offset: int, count: int):
        t = self.torch
        idx = t.arange(offset, offset + count, device=self.device, dtype=t.int64)
        return idx % 2 if self.exact_small else idx % 7 + 1

    def _pattern(self, offset: int, count: int, rank: int):
        return (self._base(offset, count) * self._weight(rank)).to(self.dtype)

    def _expected_sum(self, offset: int, count: int):
        return (self._base(offset, count) * sum(self._weight(r) for r in range(self.n))).to(self.dtype)

    def fill(self, buf, rank: int, offset: int = 0) -> None:
        total = buf.numel()
        for off in range(0, total, CHUNK):
            cnt = min(CHUNK, total - off)
            buf[off:off + cnt].copy_(self._pattern(offset + off, cnt, rank))

    def count_wrong(self, buf, expected_fn) -> int:
        t = self.torch
        wrong = t.zeros((), dtype=t.int64, device=self.device)
        total = buf.numel()
        for off in range(0, total, CHUNK):
            cnt = min(CHUNK, total - off)
            wrong += (buf[off:off + cnt] != expected_fn(off, cnt)).sum()
        return int(wrong.item())

    # --- one collective, out-of-place or in-place --------------------------------------------
    def make_op(self, op: str, count: int, in_place: bool):
        t, dist, n, r = self.torch, self.dist, self.n, self.info.rank
        if op == "all_reduce":
            recv = t.empty(count, dtype=self.dtype, device=self.device)
            if in_place:
                def run():
                    dist.all_reduce(recv)

                def prep():
                    self.fill(recv, r)
                return run, prep, recv, (lambda off, cnt: self._expected_sum(off, cnt))
            send = t.empty(count, dtype=self.dtype, device=self.device)
            if self.comm is not None:
                comm = self.comm

                def run():
                    self._nccl_allreduce(send, recv, comm)
            elif self.backend == "nccl" and count % n == 0 and count >= n:
                part = t.empty(count // n, dtype=self.dtype, device=self.device)

                def run():
                    dist.reduce_scatter_tensor(part, send)
                    dist.all_gather_into_tensor(recv, part)
            else:
                def run():
                    recv.copy_(send)
                    dist.all_reduce(recv)

            def prep():
                self.fill(send, r)
                recv.fill_(0)
            return run, prep, recv, (lambda off, cnt: self._expected_sum(off, cnt))
        per = count // n
        if op == "all_gather":
            recv = t.empty(per * n, dtype=self.dtype, device=self.device)
            send = recv[r * per:(r + 1) * per] if in_place else t.empty(per, dtype=self.dtype, device=self.device)

            def run():
                dist.all_gather_into_tensor(recv, send)

            def prep():
                recv.fill_(0)  # in-place too: other ranks' blocks must come from the collective
                self.fill(send, r, offset=r * per)

            def expected(off, cnt):
                owner = t.arange(off, off + cnt, device=self.device, dtype=t.int64) // per
                return (self._base(off, cnt) * self._weight(owner)).to(self.dtype)
            return run, prep, recv, expected
        if op == "reduce_scatter":
            send = t.empty(per * n, dtype=self.dtype, device=self.device)
            recv = send[r * per:(r + 1) * per] if in_place else t.empty(per, dtype=self.dtype, device=self.device)

            def run():
                dist.reduce_scatter_tensor(recv, send)

            def prep():
                self.fill(send, r)
                if not in_place:
                    recv.fill_(0)  # a fresh buffer may still hold a right answer from the last size
            return run, prep, recv, (lambda off, cnt: self._expected_sum(r * per + off, cnt))
        raise ValueError(op)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def measure(self, op: str, size: int, in_place: bool) -> Tuple[float, int]:
        """Mean seconds per call (averaged over ranks) and #wrong (summed over ranks)."""
        t, dist = self.torch, self.dist
        esize = t.empty((), dtype=self.dtype).element_size()
        count = max(size // esize, 1)
        run, prep, result, expected = self.make_op(op, count, in_place)
        wrong = -1
        if self.args.check:
            prep()
            self.sync()
            run()
            self.sync()
            wrong = self.count_wrong(result, expected)
        for _ in range(self.args.warmup):
            run()
        self.sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(self.args.iters):
            run()
        self.sync()
        elapsed = (time.perf_counter() - t0) / self.args.iters
        stats = t.tensor([elapsed / self.n, float(max(wrong, 0))], dtype=t.float64,
                         device=self.device if self.backend == "nccl" else "cpu")
        dist.all_reduce(stats)
        return float(stats[0].item()), (int(stats[1].item()) if wrong >= 0 else -1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts.nccl_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=OPS, default="all_reduce")
    ap.add_argument("-b", "--minbytes", type=byte_size, default=byte_size("8"))
    ap.add_argument("-e", "--maxbytes", type=byte_size, default=byte_size("16G"))
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("-i", "--stepbytes", type=byte_size, default=byte_size("1M"))
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("-d", "--datatype", choices=sorted(DTYPES), default="float")
    ap.add_argument("-c", "--check", type=int, choices=(0, 1), default=1)
    ap.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl on GPUs, else gloo")
    ap.add_argument("--no-direct-nccl", action="store_true",
                    help="out-of-place all-reduce as reduce-scatter + all-gather instead of torch.cuda.nccl")
    args = ap.parse_args(argv)
    if args.minbytes > args.maxbytes:
        ap.error("-b must not exceed -e")

    torch = distenv.import_torch()
    import torch.distributed as dist

    info = distenv.dist_info()
    os.environ.setdefault("MASTER_ADDR", info.master_addr)
    os.environ.setdefault("MASTER_PORT", str(info.master_port))
    # An NCCL test uses NCCL wherever there are GPUs (also on TCP-only nodes, where the transport
    # function picks gloo for *training*); gloo only on CPU.
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        ndev = torch.cuda.device_count()
        device = torch.device("cuda", info.local_rank % max(ndev, 1))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(info.local_world_size, 1)))
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend=backend, init_method="env://", rank=info.rank, world_size=info.world_size,
                            **kwargs)
    dtype = getattr(torch, DTYPES[args.datatype])
    bench = Bench(torch, dist, args, info, device, dtype, backend)
    rank0 = info.rank == 0
    maxbytes = args.maxbytes
    note = ""
    if backend == "nccl":
        free, _total = torch.cuda.mem_get_info(device)
        cap = int(free * 0.40)  # send + receive buffers + bounded check temporaries
        cap_t = torch.tensor([cap], dtype=torch.int64, device=device)
        dist.all_reduce(cap_t, op=dist.ReduceOp.MIN)
        cap = int(cap_t.item())
        if maxbytes > cap:
            maxbytes = 1 << (cap.bit_length() - 1)
            note = "maxBytes lowered to %d to fit GPU memory" % maxbytes
    elif maxbytes > CPU_MAX_BYTES:
        maxbytes = CPU_MAX_BYTES
        note = "maxBytes lowered to %d on CPU (gloo)" % maxbytes
    size_list = sizes(args.minbytes, maxbytes, args.stepfactor, args.stepbytes)

    # Who is where: one line per rank, gathered to rank 0 like nccl-tests' device list.
    me = "#  Rank %3d Pid %6d on %10s device %2s [%s]" % (
        info.rank, os.getpid(), os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        device.index if device.type == "cuda" else "-",
        torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    lines: List[Optional[str]] = [None] * info.world_size
    dist.all_gather_object(lines, me)
    if rank0:
        nccl_v = ""
        if backend == "nccl":
            try:
                nccl_v = " NCCL %s" % ".".join(str(x) for x in torch.cuda.nccl.version())
            except Exception:  # noqa: BLE001 - version is decoration only
                nccl_v = ""
        out = [
            "# hpq built-in benchmark: %s, torch.distributed backend %s, torch %s%s" % (
                args.op, backend, torch.__version__, nccl_v),
            "# nRanks %d minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %d validation: %d" % (
                info.world_size, args.minbytes, maxbytes, args.stepfactor, args.warmup, args.iters, args.check),
        ]
        if note:
            out.append("# note: " + note)
        if bench.oop_note:
            out.append("# note: " + bench.oop_note)
        out += ["#", "# Using devices"] + [str(x) for x in lines] + ["#"]
        out.append("# %57s %34s" % ("out-of-place", "in-place"))
        out.append("# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s" % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong"))
        out.append("# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
        print("\n".join(out), flush=True)
    factor = bus_factor(args.op, info.world_size)
    esize = torch.empty((), dtype=dtype).element_size()
    busbws: List[float] = []
    wrong_total = 0
    for requested in size_list:
        count = max(requested // esize, 1)
        if args.op != "all_reduce":
            count = (count // info.world_size) * info.world_size
            if count == 0:
                continue
        nbytes = count * esize
        cols = []
        for in_place in (False, True):
            sec, wrong = bench.measure(args.op, nbytes, in_place)
            algbw = nbytes / 1e9 / sec if sec > 0 else 0.0
            busbw = algbw * factor
            busbws.append(busbw)
            wrong_total += max(wrong, 0)
            cols.append("%s %7.2f %7.2f %6s" % (fmt_time(sec * 1e6), algbw, busbw, "N/A" if wrong < 0 else wrong))
        if rank0:
            shown = count if args.op == "all_reduce" else count // info.world_size  # per rank, like nccl-tests
            print("  %10d %12d %8s %6s %6d %s %s" % (nbytes, shown, args.datatype,
                                                    "sum" if args.op != "all_gather" else "none", -1, cols[0],
                                                    cols[1]), flush=True)
        del cols
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if rank0:
        print("# Out of bounds values : %d %s" % (wrong_total, "FAILED" if wrong_total else "OK"))
        print("# Avg bus bandwidth    : %g " % (sum(busbws) / len(busbws) if busbws else 0.0))
        print("#", flush=True)
    dist.barrier()
    bench.close()
    dist.destroy_process_group()
    return 1 if wrong_total else 0


if __name__ == "__main__":
    distenv.exit_after_teardown(main())
