"""A small GPT trained with DDP: the training smoke test and benchmark behind ``run-nanogpt``.

Written here (no git clone, no pip install at run time): a GPT-2-style decoder (pre-norm
blocks, causal attention through ``scaled_dot_product_attention`` so flash kernels are used
on GPUs, tanh-GELU MLP, tied embeddings), character-level data from ``--data`` or the
generated offline corpus, AdamW (fused on CUDA), bf16 autocast and TF32 on GPUs, optional
``torch.compile``. DDP over nccl on GPUs or gloo on CPUs (or where the transport function
says TCP-only nodes should train with gloo).

It proves a cluster trains: rank 0 checkpoints to the shared filesystem every
``--ckpt-every`` iterations and every rank resumes from the newest checkpoint (rank 0's, sent to
the others when the directory is not shared); it logs loss, iteration time, tokens/s and MFU
(against the bf16 matmul rate it measures on the GPU at start, or ``--peak-tflops``); it exits 1
when the loss did not fall or the ranks' parameters disagree at the end (a float64 checksum
compared across ranks).

Launch with ``run-nanogpt`` (srun or the local launcher); by hand:
``srun -N2 --ntasks-per-node=8 python3 -m hpq.scripts.nanogpt --model gpt2-124m --compile``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import socket
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from hpq.scripts import corpus, distenv

# Per-interval points kept in the metrics (``history``: one per --log-every line). Past this many every other point is
# dropped and the stride doubles, so a long run's curve stays whole at bounded size (hpq report draws it).
HISTORY_MAX = 500
# The result line of a run that trained on the CPUs of Trainium nodes (see distenv.unused_neuron_devices).
NEURON_UNUSED_RESULT = ("INCONCLUSIVE: the model trained on the host CPUs with gloo (loss fell, ranks agree), but the "
                        "Neuron devices were not used: this is not a Trainium training test. Check Trainium with "
                        "run-nccom-test / hpq eks nccl-test and a torch-neuronx training job.")


@dataclass
class ModelConfig:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int = 0  # 0: the data's character count


@dataclass
class Preset:
    model: ModelConfig
    batch_size: int
    lr: float
    grad_accum: int = 1


PRESETS: Dict[str, Preset] = {
    # The measured runs' smoke-test size (docs/design.md): 4 layers, 4 heads, 128 wide (~0.8M parameters).
    "tiny": Preset(ModelConfig(4, 4, 128, 64), batch_size=16, lr=2e-3),
    "small": Preset(ModelConfig(6, 6, 384, 256), batch_size=32, lr=1e-3),
    # GPT-2 124M shape; vocabulary padded like GPT-2's (50257 -> 50304) so FLOPs match the real model.
    # 8 micro-batches per optimizer step: 4 GPUs x 16 x 1024 x 8 = 524,288 tokens, GPT-2's ~0.5M batch;
    # gradients are all-reduced once per step, as the reference GPT-2 trainers do.
    "gpt2-124m": Preset(ModelConfig(12, 12, 768, 1024, vocab_size=50304), batch_size=16, lr=6e-4,
                        grad_accum=8),
}


def build_model(torch, cfg: ModelConfig):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            c = cfg.n_embd
            self.ln1 = nn.LayerNorm(c, bias=False)
            self.qkv = nn.Linear(c, 3 * c, bias=False)
            self.proj = nn.Linear(c, c, bias=False)
            self.ln2 = nn.LayerNorm(c, bias=False)
            self.fc = nn.Linear(c, 4 * c, bias=False)
            self.fc_out = nn.Linear(4 * c, c, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            h = cfg.n_head
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q = q.view(b, t, h, c // h).transpose(1, 2)
            k = k.view(b, t, h, c // h).transpose(1, 2)
            v = v.view(b, t, h, c // h).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
            self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2
            self.apply(self._init)
            for name, p in self.named_parameters():
                if name.endswith("proj.weight") or name.endswith("fc_out.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            pos = torch.arange(t, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    return GPT()


def count_params(model) -> int:
    """Parameters that cost FLOPs per token: all but the position table (tied head counted once)."""
    return sum(p.numel() for n, p in model.named_parameters() if not n.startswith("wpe"))


def flops_per_token(cfg: ModelConfig, n_params: int) -> float:
    """Forward+backward FLOPs per token: 6N plus attention's 12 * layers * width * context."""
    return 6.0 * n_params + 12.0 * cfg.n_layer * cfg.n_embd * cfg.block_size


def measure_matmul_tflops(torch, device, n: int = 8192, reps: int = 10) -> float:
    """bf16 dense matmul rate of this GPU on random data: the MFU denominator."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize(device)
    sec = start.elapsed_time(end) / 1000.0
    del a, b
    return 2.0 * n ** 3 * reps / sec / 1e12


def load_text(path: Optional[str], n_chars: int) -> str:
    if path:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise SystemExit("error: cannot read --data %s: %s" % (path, exc.strerror)) from None
        if len(text) < 4096:
            raise SystemExit("error: --data %s has only %d characters; need at least 4096" % (path, len(text)))
        return text
    return corpus.generate(n_chars)


def newest_checkpoint(ckpt_dir: str) -> Optional[str]:
    found = sorted(glob.glob(os.path.join(ckpt_dir, "ckpt-*.pt")))
    return found[-1] if found else None


def add_point(history: List[Dict[str, float]], stride: int, interval: int, last: bool, point: Dict[str, float],
              limit: int = HISTORY_MAX) -> int:
    """Append the ``interval``-th logged point when it falls on the stride (or is the run's last); past ``limit``
    points keep every second one (the doubled stride's multiples; the run's last point stays). Returns the stride."""
    if interval % stride and not last:
        return stride
    history.append(point)
    if len(history) > limit:
        history[:] = history[1::2] + ([history[-1]] if last and len(history) % 2 else [])
        stride *= 2
    return stride


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts.nanogpt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--iters", type=int, default=200, help="total iterations (a resumed run continues to this)")
    ap.add_argument("--batch-size", type=int, default=None, help="per-process micro-batch (default: preset)")
    ap.add_argument("--block-size", type=int, default=None, help="context length (default: preset)")
    ap.add_argument("--grad-accum", type=int, default=None,
                    help="micro-batches per optimizer step; gradients all-reduced once per step (default: preset)")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--data", default=None, help="UTF-8 text file (default: generated offline corpus)")
    ap.add_argument("--corpus-chars", type=int, default=1 << 20)
    ap.add_argument("--ckpt-dir", default=None, help="shared directory for checkpoints (none: no checkpoints)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="0: never")
    ap.add_argument("--fresh", action="store_true", help="ignore existing checkpoints")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--timing-skip", type=int, default=None,
                    help="iterations left out of throughput (warm-up, compilation); default 10, 20 with --compile")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (GPU; slow start, faster steps)")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (e.g. max-autotune-no-cudagraphs)")
    ap.add_argument("--bucket-cap-mb", type=float, default=100.0,
                    help="DDP gradient bucket size (100 MB measured faster than torch's 25 on 2x H200)")
    ap.add_argument("--grad-comm", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: all-reduce gradients compressed to bf16 (DDP comm hook, nccl only): half the bytes")
    ap.add_argument("--static-graph", action="store_true", help="DDP static_graph=True")
    ap.add_argument("--no-ddp-graph-split", action="store_true",
                    help="with --compile: one graph, gradients all-reduced after backward (no overlap)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="per-GPU peak for MFU (default: measure a bf16 matmul at start)")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                    help="default: $HPQ_TORCH_BACKEND from the transport function, else nccl on GPUs")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--json", default=None, help="rank 0 writes the run's metrics here")
    ap.add_argument("--min-drop", type=float, default=0.02,
                    help="the last window's loss must be this fraction below the first window's")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.log_every < 1 or args.ckpt_every < 0:
        ap.error("--iters and --log-every must be positive, --ckpt-every >= 0")

    torch = distenv.import_torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    info = distenv.dist_info()
    os.environ.setdefault("MASTER_ADDR", info.master_addr)
    os.environ.setdefault("MASTER_PORT", str(info.master_port))
    backend = distenv.choose_backend(torch, args.backend)
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device("cuda", info.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(info.local_world_size, 1)))
    # On Trainium the devices stay idle (no torch-neuronx/XLA path here): say so, and never call it a pass.
    neuron_unused = distenv.unused_neuron_devices(torch)
    distributed = info.world_size > 1
    if distributed:
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, init_method="env://", rank=info.rank,
                                world_size=info.world_size, **kwargs)
    rank0 = info.rank == 0

    def log(msg: str) -> None:
        if rank0:
            print(msg, flush=True)

    preset = PRESETS[args.model]
    cfg = ModelConfig(**asdict(preset.model))
    if args.block_size:
        cfg.block_size = args.block_size
    batch = args.batch_size or preset.batch_size
    accum = args.grad_accum or preset.grad_accum
    if accum < 1:
        raise SystemExit("error: --grad-accum must be >= 1")
    lr_max = args.lr or preset.lr
    text = load_text(args.data, args.corpus_chars)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    if cfg.vocab_size == 0:
        cfg.vocab_size = len(chars)
    elif cfg.vocab_size < len(chars):
        raise SystemExit("error: the data has %d distinct characters, more than the %s vocabulary (%d)"
                         % (len(chars), args.model, cfg.vocab_size))
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long, device=device)
    if data.numel() <= cfg.block_size + 1:
        raise SystemExit("error: the data is shorter than one context (%d)" % cfg.block_size)

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = build_model(torch, cfg).to(device)
    n_params = count_params(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt_kwargs = {"fused": True} if cuda else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr_max, betas=(0.9, 0.95), eps=1e-8, **opt_kwargs)

    # ---- resume from the newest checkpoint -------------------------------------------------
    start_iter, first_loss, resumed_from = 0, None, None
    ckpt_dir = args.ckpt_dir
    if ckpt_dir and rank0:
        os.makedirs(ckpt_dir, exist_ok=True)
    if distributed:
        dist.barrier()
    state = None
    if ckpt_dir and not args.fresh:
        mine = newest_checkpoint(ckpt_dir)
        names: List[Optional[str]] = [mine]
        if distributed:
            names = [None] * info.world_size
            dist.all_gather_object(names, os.path.basename(mine) if mine else None)
        chosen = names[0]
        if chosen:
            chosen_path = os.path.join(ckpt_dir, os.path.basename(chosen))
            if all(n == names[0] for n in names):
                state = torch.load(chosen_path, map_location=device, weights_only=False)
            else:  # the directory is not shared: rank 0 sends its checkpoint
                obj = [torch.load(chosen_path, map_location="cpu", weights_only=False) if rank0 else None]
                dist.broadcast_object_list(obj, src=0)
                state = obj[0]
            resumed_from = os.path.basename(chosen)
    if state is not None:
        if state.get("config") != asdict(cfg) or state.get("vocab") != "".join(chars):
            raise SystemExit("error: the newest checkpoint in %s is for another model or data; use --fresh or "
                             "another --ckpt-dir" % ckpt_dir)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_iter = int(state["iter"])
        first_loss = state.get("first_loss")
        log("resumed from %s at iteration %d" % (os.path.join(ckpt_dir, resumed_from), start_iter))
        del state
    if start_iter >= args.iters:
        log("checkpoint is at iteration %d >= --iters %d: nothing to train (raise --iters or use --fresh)"
            % (start_iter, args.iters))
        if distributed:
            dist.destroy_process_group()
        return 0

    raw_model = model
    if args.compile:
        if args.no_ddp_graph_split:
            import torch._dynamo

            torch._dynamo.config.optimize_ddp = False
        model = torch.compile(model, mode=args.compile_mode)
    if distributed:
        model = DDP(model, device_ids=[device.index] if cuda else None, gradient_as_bucket_view=True,
                    bucket_cap_mb=args.bucket_cap_mb, static_graph=args.static_graph)
        if args.grad_comm == "bf16" and backend == "nccl":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.bf16_compress_hook)

    where = [os.environ.get("SLURMD_NODENAME") or socket.gethostname()]
    if distributed:
        where = [None] * info.world_size
        dist.all_gather_object(where, os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    log("ranks on: %s" % ", ".join("%d=%s" % (i, h) for i, h in enumerate(where)))
    if neuron_unused:
        log("note: this is a Trainium node (%s) but hpq's nanoGPT has no torch-neuronx/XLA path: it trains on the "
            "host CPUs with %s and the Neuron devices stay idle" % (
                "%d Neuron devices" % neuron_unused if neuron_unused > 0 else "HPQ_TORCH_BACKEND=xla", backend))
    peak_tflops = args.peak_tflops
    if peak_tflops is None and cuda:
        peak_tflops = measure_matmul_tflops(torch, device)
    fpt = flops_per_token(cfg, n_params)
    log("model %s: %.2fM parameters (%d layers, %d heads, %d wide, context %d, vocab %d) | backend %s | "
        "world %d | micro-batch %d x %d per step | %s%s" % (
            args.model, n_params / 1e6, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size,
            backend, info.world_size, batch, accum, ("bf16 autocast" if cuda else "fp32 CPU") + (
                ", gradients all-reduced in bf16" if args.grad_comm == "bf16" and distributed else ""),
            (" | peak %.0f TFLOP/s (bf16 matmul, measured)" % peak_tflops) if peak_tflops else ""))

    gen = torch.Generator(device="cpu")
    gen.manual_seed(args.seed * 1000003 + info.rank * 7919 + start_iter)
    offsets = torch.arange(cfg.block_size + 1, device=device)

    def get_batch():
        ix = torch.randint(data.numel() - cfg.block_size - 1, (batch,), generator=gen)
        rows = data[ix.to(device, non_blocking=True)[:, None] + offsets]
        return rows[:, :-1], rows[:, 1:]

    warmup = max(1, min(100, args.iters // 10))

    def lr_at(it: int) -> float:
        if it < warmup:
            return lr_max * (it + 1) / warmup
        frac = (it - warmup) / max(1, args.iters - warmup)
        return lr_max * (0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0))))

    skip = args.timing_skip if args.timing_skip is not None else (20 if args.compile else 10)
    skip = min(skip, max(0, args.iters - start_iter - 1))
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    tokens_per_iter = batch * cfg.block_size * info.world_size * accum
    window_loss = torch.zeros((), device=device)
    window_n = 0
    last_loss = None
    history: List[Dict[str, float]] = []  # {iter, loss, ms_per_iter, tokens_per_s} per logged interval
    history_stride = 1
    ckpts: List[str] = []
    t_last = time.perf_counter()
    t_steady = None
    it_last = start_iter
    model.train()
    for it in range(start_iter, args.iters):
        if it - start_iter == skip:
            if cuda:
                torch.cuda.synchronize(device)
            t_steady = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        for micro in range(accum):
            x, y = get_batch()
            # DDP all-reduces gradients only on the last micro-batch of the step.
            sync = nullcontext() if (micro == accum - 1 or not distributed) else model.no_sync()
            with sync:
                with autocast:
                    loss = model(x, y)
                (loss / accum if accum > 1 else loss).backward()
        torch.nn.utils.clip_grad_norm_(raw_model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        window_loss += loss.detach()
        window_n += 1
        done = it + 1
        if done % args.log_every == 0 or done == args.iters:
            mean = window_loss / window_n
            if distributed:
                dist.all_reduce(mean)
                mean = mean / info.world_size
            last_loss = float(mean.item())
            if first_loss is None:
                first_loss = last_loss
            now = time.perf_counter()
            dt = (now - t_last) / max(1, done - it_last)
            tps = tokens_per_iter / dt
            mfu = (fpt * tps / info.world_size / (peak_tflops * 1e12)) if peak_tflops else None
            log("iter %d: loss %.4f | %.1f ms/iter | %s tok/s (%s /process)%s" % (
                done, last_loss, dt * 1e3, format(int(tps), ","), format(int(tps / info.world_size), ","),
                (" | MFU %.1f%%" % (mfu * 100)) if mfu is not None else ""))
            history_stride = add_point(history, history_stride, done // args.log_every, done == args.iters,
                                       {"iter": done, "loss": last_loss, "ms_per_iter": dt * 1e3, "tokens_per_s": tps})
            window_loss.zero_()
            window_n = 0
            t_last, it_last = time.perf_counter(), done
        if ckpt_dir and args.ckpt_every and (done % args.ckpt_every == 0 or done == args.iters):
            if rank0:
                path = os.path.join(ckpt_dir, "ckpt-%08d.pt" % done)
                tmp = path + ".tmp"
                torch.save({"model": raw_model.state_dict(), "optimizer": opt.state_dict(), "iter": done,
                            "config": asdict(cfg), "vocab": "".join(chars), "first_loss": first_loss}, tmp)
                os.replace(tmp, path)
                ckpts.append(path)
                for old in sorted(glob.glob(os.path.join(ckpt_dir, "ckpt-*.pt")))[:-2]:
                    os.remove(old)
                log("checkpoint %s" % path)
            if distributed:
                dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
    t_end = time.perf_counter()
    steady_iters = args.iters - start_iter - skip
    tps = tokens_per_iter * steady_iters / (t_end - t_steady) if t_steady and steady_iters > 0 else None
    mfu = (fpt * tps / info.world_size / (peak_tflops * 1e12)) if (tps and peak_tflops) else None

    # ---- do the ranks hold the same model? ---------------------------------------------------
    with torch.no_grad():
        total = torch.zeros(2, dtype=torch.float64, device=device)
        for p in raw_model.parameters():
            total[0] += p.double().sum()
            total[1] += p.double().abs().sum()
    agree = True
    spread = 0.0
    if distributed:
        hi, lo = total.clone(), total.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        spread = float((hi - lo).abs().max().item())
        agree = spread <= 1e-6 * max(1.0, float(total[1].item()))
    fell = first_loss is not None and last_loss is not None and last_loss < first_loss * (1 - args.min_drop)
    result = {
        "model": args.model, "config": asdict(cfg), "params": n_params, "world_size": info.world_size,
        "backend": backend, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "micro_batch": batch, "iters": args.iters, "start_iter": start_iter, "resumed_from": resumed_from,
        "timed_iters": steady_iters, "tokens_per_s": tps,
        "tokens_per_s_per_process": tps / info.world_size if tps else None,
        "iter_ms": (tokens_per_iter / tps * 1e3) if tps else None, "mfu": mfu, "peak_tflops": peak_tflops,
        "flops_per_token": fpt, "first_loss": first_loss, "final_loss": last_loss, "loss_fell": fell,
        "ranks_agree": agree, "checksum": float(total[0].item()), "checksum_spread": spread,
        "checkpoints": ckpts, "compile": args.compile, "torch": torch.__version__,
        "grad_comm": args.grad_comm, "bucket_cap_mb": args.bucket_cap_mb, "ddp_graph_split": not args.no_ddp_graph_split,
        "neuron_devices_unused": neuron_unused > 0 or neuron_unused < 0,
        "history": history,
    }
    if tps:
        log("summary: %s tok/s total, %s tok/s per process, %.1f ms/iter over %d iterations%s" % (
            format(int(tps), ","), format(int(tps / info.world_size), ","), tokens_per_iter / tps * 1e3,
            steady_iters, (", MFU %.1f%% of %.0f TFLOP/s" % (mfu * 100, peak_tflops)) if mfu else ""))
    log("loss %.4f -> %.4f: %s; ranks %s (checksum %.6e, spread %.3g)" % (
        first_loss or float("nan"), last_loss or float("nan"), "falls" if fell else "DID NOT FALL",
        "agree" if agree else "DISAGREE", total[0].item(), spread))
    if rank0 and args.json:
        # run-nanogpt names a file in its results directory on the node it runs on; without a shared filesystem
        # rank 0's node may not have that directory yet (its home is its own).
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    ok = fell and agree
    if ok and neuron_unused:
        # The program did its part (exit 0); run-nanogpt and hpq eks turn this into a non-pass verdict.
        log("RESULT: %s" % NEURON_UNUSED_RESULT)
    else:
        log("RESULT: %s" % ("PASS" if ok else "FAIL: " + ", ".join(
            m for m, bad in (("loss did not fall", not fell), ("ranks disagree", not agree)) if bad)))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    distenv.exit_after_teardown(main())
