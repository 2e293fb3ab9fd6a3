#!/usr/bin/env python3
"""PyTorch's way to train Llama 3.1 8B's shape on one GPU by offloading: the
reference bench/llama8b.sh compares ferry with (issue 24, item 3).

One implementation per run (--impl), random weights and random tokens, a few
steps; each step prints its time, and the last line is one JSON object with
every figure (status "ok", "refused", "skipped" or "failed").

  offload  ZeRO-Offload written out in plain PyTorch: the bf16 model on the
           device; fp32 master weights and AdamW's moments on the host
           (torch.optim.AdamW, fused CPU kernel); each gradient copied to
           one pinned host buffer as backward produces it (a post-accumulate
           hook, on a side stream) and freed on the device; after backward
           the clipped CPU step, layer by layer, each layer's new bf16
           weights copied back while the next layer updates.
  fsdp2    fully_shard on one rank with CPUOffloadPolicy and a bf16
           MixedPrecisionPolicy: fp32 parameters, gradients and moments on
           the host, 16 bytes a parameter.
  matmul   only the bf16 product's rate (the driver's peak for ferry's MFU).
  torchao  torchao.optim.CPUOffloadOptimizer (offload_gradients=True) over
           the bf16 model: bf16 host copies and bf16 moments (fp32 would be
           16 bytes a parameter again), no gradient clipping (the
           gradients leave the device before their norm is known).

All three checkpoint every decoder layer (transformers'
gradient_checkpointing_enable, non-reentrant) and use sdpa attention.
Before anything is allocated, the host memory an implementation needs is
compared with MemAvailable (/proc/meminfo); one that cannot fit is refused
with the figures instead of swapping.  --device-mem caps the device's
memory as ferry's flag does (set_per_process_memory_fraction), so that an
H200 stands for an 80 GB H100.

Model FLOPs are ferry's (src/ops/op.c ferry_op_flops, summed by
ferry_model_step_flops in src/exec/build.c): per token 6 x the matrix
products' weights (the LM head included, the embedding lookup not), plus
causal attention 6*B*C*T*(T+1) per layer; recomputation is not counted.

    python3 bench/llama8b_torch.py --impl offload            # 8B, on cuda
    python3 bench/llama8b_torch.py --impl offload --device cpu --layers 2 \\
        --channels 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --seq 64
"""
import argparse
import json
import os
import re
import resource
import signal
import statistics
import sys
import time

GIB = 1 << 30
T0 = time.perf_counter()
IMPLS = ("offload", "fsdp2", "torchao", "matmul")
torch = None  # imported once the arguments are read and the host check passed


def parse_size(s):
    """A size as ferry's --device-mem takes it: 80G, 512M (powers of 1024)."""
    m = re.fullmatch(r"([0-9.]+)\s*([KMGT])(i?B?)?", s, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 80G or 512M, got '{s}'")
    return int(float(m.group(1)) * 1024 ** ("KMGT".index(m.group(2).upper()) + 1))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit status: 0 ok, 3 refused or skipped, 1 failed or stopped (SIGTERM: status "
                                "partial, with the steps taken), 2 usage.")
    p.add_argument("--impl", choices=IMPLS, default="offload")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run at a small shape)")
    p.add_argument("--steps", type=int, default=3, help="steps; the median leaves the first out (default 3)")
    p.add_argument("--device-mem", type=parse_size, help="cap the device's memory, e.g. 80G (as ferry's flag)")
    p.add_argument("--host-reserve", type=parse_size, default=4 * GIB,
                   help="host memory kept aside for the process itself (CUDA, libraries; default 4G)")
    p.add_argument("--matmul-size", type=int, help="the bf16 N^3 product timed first (default 8192; cpu 512)")
    p.add_argument("--checkpoint", choices=("on", "off"), default="on",
                   help="activation checkpointing per decoder layer (default on)")
    p.add_argument("--json", metavar="FILE", help="also append the final JSON line to FILE")
    s = p.add_argument_group("shape (default Llama 3.1 8B at sequence 4096, batch 1)")
    for flag, default in (("layers", 32), ("channels", 4096), ("heads", 32), ("kv-heads", 8),
                          ("ffn", 14336), ("vocab", 128256), ("seq", 4096), ("batch", 1)):
        s.add_argument("--" + flag, type=int, default=default)
    o = p.add_argument_group("AdamW (ferry's defaults)")
    o.add_argument("--lr", type=float, default=3e-4)
    o.add_argument("--beta1", type=float, default=0.9)
    o.add_argument("--beta2", type=float, default=0.95)
    o.add_argument("--eps", type=float, default=1e-8)
    o.add_argument("--weight-decay", type=float, default=0.1, help="of matrices and embeddings, not norms")
    o.add_argument("--grad-clip", type=float, default=1.0)
    a = p.parse_args(argv)
    if a.steps < 1 or min(a.layers, a.channels, a.heads, a.kv_heads, a.ffn, a.vocab, a.seq, a.batch) < 1:
        p.error("--steps and the shape's sizes must be positive")
    if a.channels % a.heads or a.heads % a.kv_heads:
        p.error("--heads must divide --channels and --kv-heads must divide --heads")
    return a


def param_sizes(a):
    """Each parameter's element count: the embedding, each layer's, the final norm and the head."""
    kv = a.kv_heads * (a.channels // a.heads)
    c, f = a.channels, a.ffn
    layer = [c, c * c, kv * c, kv * c, c * c, c, f * c, f * c, c * f]  # norms, q k v o, gate up down
    return [a.vocab * c] + layer * a.layers + [c, a.vocab * c]


def shape_params(a):
    """(all parameters, the matrix products' weights, the largest update
    chunk: a decoder layer, the embedding, or the head and final norm)."""
    sizes = param_sizes(a)
    layer = sum(sizes[1:10])
    dots = layer - 2 * a.channels
    embed = a.vocab * a.channels
    return sum(sizes), a.layers * dots + embed, max(layer, embed + a.channels)


def model_flops(a):
    """ferry's model FLOPs of one step (ferry_model_step_flops)."""
    tokens = a.batch * a.seq
    attention = 6.0 * a.batch * a.channels * a.seq * (a.seq + 1)
    return 6.0 * shape_params(a)[1] * tokens + a.layers * attention


def pinned(nbytes):
    """PyTorch's caching host allocator rounds each pinned block up to a power of 2."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 0 else 0


def host_need(a):
    """Bytes of host memory the implementation allocates, at least."""
    n, _, chunk = shape_params(a)
    sizes = param_sizes(a)
    need = {"offload": 12 * n + pinned(2 * n) + 4 * chunk,  # fp32 master, m, v; one bf16 buffer; a chunk's fp32 grads
            "fsdp2": sum(pinned(4 * k) for k in sizes) + 12 * n,  # pinned fp32 parameters; gradients, m, v
            "torchao": 2 * sum(pinned(2 * k) for k in sizes) + 4 * n,  # pinned bf16 parameters and grads; m, v
            "matmul": 0}[a.impl]
    return need + a.host_reserve


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def finish(a, res, status, reason=None):
    """Print the one JSON line and exit: 0 ok, 3 refused or skipped, 1 failed."""
    res.update(status=status, reason=reason, wall_s=round(time.perf_counter() - T0, 1), host_rss_peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if reason:
        print(f"{a.impl}: {status}: {reason}", flush=True)
    line = json.dumps(res)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")
    sys.exit({"ok": 0, "refused": 3, "skipped": 3}.get(status, 1))


def cap_device(a, dev, res):
    """--device-mem: the caching allocator refuses past it, as on a smaller GPU."""
    if dev.type != "cuda":
        return
    total = torch.cuda.get_device_properties(dev).total_memory
    res["gpu"] = torch.cuda.get_device_name(dev)
    res["gpu_total_bytes"] = total
    if a.device_mem and a.device_mem < total:
        torch.cuda.set_per_process_memory_fraction(a.device_mem / total, dev)
        res["device_mem_bytes"] = a.device_mem


def matmul_rate(a, dev):
    """FLOP/s of a bf16 N^3 product, the best of a few timed batches."""
    n = a.matmul_size or (8192 if dev.type == "cuda" else 512)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    reps, best = (20 if dev.type == "cuda" else 3), float("inf")
    for _ in range(4):
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            x @ y
        sync(dev)
        best = min(best, (time.perf_counter() - t0) / reps)
    del x, y
    return 2.0 * n ** 3 / best, n


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build_model(a, dev, dtype):
    """transformers' LlamaForCausalLM with random weights, made directly on
    the device in dtype (initialising 8B parameters on the CPU takes minutes)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.channels, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=a.seq, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      use_cache=False, attn_implementation="sdpa")
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model.train()
    print(f"{a.impl}: model made on {dev} in {time.perf_counter() - T0:.1f} s since start", flush=True)
    if a.checkpoint == "on":
        kw = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # what newer transformers call it
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    return model


def decay_groups(params, wd):
    """ferry decays matrices and embeddings, not norm gains."""
    params = list(params)
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": wd},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def adamw(a, groups):
    """torch's AdamW, the fused kernel where this torch has it for the device."""
    kw = dict(lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    try:
        return torch.optim.AdamW(groups, fused=True, **kw)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kw)


class HostAdam:
    """ZeRO-Offload's update on the host: fp32 master weights and AdamW state
    in host memory, bf16 gradients in (during backward) and bf16 weights out
    (after the step) through one pinned buffer."""

    def __init__(self, a, model, dev):
        self.a, self.dev = a, dev
        self.cuda = dev.type == "cuda"
        self.side = torch.cuda.Stream(dev) if self.cuda else None
        m = model.model
        chunks = [list(layer.parameters()) for layer in m.layers]
        chunks += [list(m.embed_tokens.parameters()), list(m.norm.parameters()) + list(model.lm_head.parameters())]
        self.chunks = [c for c in chunks if c]
        total = sum(p.numel() for c in self.chunks for p in c)
        self.flat = torch.empty(total, dtype=torch.bfloat16, pin_memory=self.cuda)
        self.scratch = torch.empty(max(sum(p.numel() for p in c) for c in self.chunks), dtype=torch.float32)
        self.slot, self.master, self.opts, off = {}, {}, [], 0
        for c in self.chunks:
            for p in c:
                self.slot[p] = self.flat[off:off + p.numel()].view(p.shape)
                self.master[p] = torch.nn.Parameter(p.detach().to("cpu", torch.float32))
                p.register_post_accumulate_grad_hook(self.grad_ready)
                off += p.numel()
            self.opts.append(adamw(a, decay_groups([self.master[p] for p in c], a.weight_decay)))
        self.sq = torch.zeros((), dtype=torch.float32, device=dev)

    def grad_ready(self, p):
        """Backward produced p's gradient: its square into the norm, a copy
        to the host, and the device's memory back."""
        g = p.grad
        self.sq += torch.linalg.vector_norm(g, dtype=torch.float32).square()
        if self.cuda:
            self.side.wait_stream(torch.cuda.current_stream(self.dev))
            with torch.cuda.stream(self.side):
                self.slot[p].copy_(g, non_blocking=True)
            g.record_stream(self.side)
        else:
            self.slot[p].copy_(g)
        p.grad = None

    def step(self):
        """After backward: wait for the gradients, then per chunk the clipped
        CPU AdamW and the new bf16 weights' copy back (overlapping the next
        chunk's update). Returns the gradient norm."""
        if self.cuda:
            self.side.wait_stream(torch.cuda.current_stream(self.dev))
            self.side.synchronize()
        norm = self.sq.sqrt().item()
        self.sq.zero_()
        clip = self.a.grad_clip / (norm + 1e-6) if self.a.grad_clip > 0 and norm > self.a.grad_clip else 1.0
        for c, opt in zip(self.chunks, self.opts):
            self.update(c, opt, clip)
        return norm

    def update(self, c, opt, clip):
        off = 0
        for p in c:
            g = self.scratch[off:off + p.numel()].view(p.shape)
            g.copy_(self.slot[p])
            if clip != 1.0:
                g.mul_(clip)
            self.master[p].grad = g
            off += p.numel()
        opt.step()
        for p in c:
            self.slot[p].copy_(self.master[p].detach())
            if self.cuda:
                with torch.cuda.stream(self.side):
                    p.detach().copy_(self.slot[p], non_blocking=True)
            else:
                p.detach().copy_(self.slot[p])

    def before_forward(self):
        """The next forward reads the weights the step copied back."""
        if self.cuda:
            torch.cuda.current_stream(self.dev).wait_stream(self.side)


def run_offload(a, dev, batch, res):
    model = build_model(a, dev, torch.bfloat16)
    t0 = time.perf_counter()
    host = HostAdam(a, model, dev)
    res["setup_host_s"] = round(time.perf_counter() - t0, 2)
    print(f"offload: host state (fp32 master, pinned buffer) made in {res['setup_host_s']} s", flush=True)
    res["cpu_adamw"] = "fused" if host.opts[0].defaults.get("fused") else "foreach"
    phases = []

    def step():
        host.before_forward()
        t = time.perf_counter()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        sync(dev)
        t1 = time.perf_counter()
        norm = host.step()
        t2 = time.perf_counter()
        sync(dev)
        phases.append({"fwd_bwd_ms": (t1 - t) * 1e3, "cpu_adamw_ms": (t2 - t1) * 1e3,
                       "copy_back_wait_ms": (time.perf_counter() - t2) * 1e3})
        res["phases"] = [{k: round(v, 1) for k, v in ph.items()} for ph in phases]
        res["exposed_optimizer_ms"] = round(statistics.median(
            ph["cpu_adamw_ms"] + ph["copy_back_wait_ms"] for ph in phases[1:] or phases), 1)
        return loss.item(), norm

    timed(a, dev, step, res)


def run_fsdp2(a, dev, batch, res):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    try:
        mesh = init_device_mesh(dev.type, (1,))
        # fp32 parameters made on the device, then moved to the host shard by shard
        model = build_model(a, dev, torch.float32)
        kw = dict(mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        if dev.type == "cuda":
            kw["offload_policy"] = CPUOffloadPolicy()
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
        sync(dev)
        opt = adamw(a, decay_groups(model.parameters(), a.weight_decay))
        res["cpu_adamw"] = "fused" if opt.defaults.get("fused") else "foreach"

        def step():
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip) if a.grad_clip > 0 else None
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item(), float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

        timed(a, dev, step, res)
    finally:
        dist.destroy_process_group()


def run_torchao(a, dev, batch, res):
    from torchao.optim import CPUOffloadOptimizer
    model = build_model(a, dev, torch.bfloat16)
    opt = CPUOffloadOptimizer(decay_groups(model.parameters(), a.weight_decay), torch.optim.AdamW,
                              offload_gradients=True, fused=True, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    res["note"] = "bf16 host weights and moments; no gradient clipping"

    def step():
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item(), None

    timed(a, dev, step, res)


class Stopped(Exception):
    """SIGTERM (timeout's): the steps taken so far still count."""


def on_term(signum, frame):
    raise Stopped(f"stopped by signal {signum}")


def timed(a, dev, step, res):
    """--steps steps, each printed; the median leaves the first out."""
    tokens = a.batch * a.seq
    ms, losses = [], []
    for s in range(a.steps):
        sync(dev)
        t0 = time.perf_counter()
        loss, norm = step()
        sync(dev)
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(round(loss, 4))
        print(f"{a.impl} step {s + 1}/{a.steps}: {ms[-1]:.1f} ms, {tokens / ms[-1] * 1e3:.0f} tokens/s, "
              f"{res['model_flops_per_step'] / ms[-1] / 1e9:.3g} TFLOP/s, loss {loss:.4f}"
              + (f", grad norm {norm:.3f}" if norm is not None else ""), flush=True)
        summarize(a, dev, res, ms, losses)


def summarize(a, dev, res, ms, losses):
    """The figures of the steps so far."""
    tokens = a.batch * a.seq
    med = statistics.median(ms[1:] or ms)
    res.update(step_ms=[round(x, 1) for x in ms], median_ms=round(med, 1), loss=losses,
               tokens_per_s=round(tokens / med * 1e3, 1), model_flops_per_s=res["model_flops_per_step"] / med * 1e3)
    res["vs_matmul"] = round(res["model_flops_per_s"] / res["matmul_flops_per_s"], 4)
    if dev.type == "cuda":
        res["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        res["gpu_reserved_peak_bytes"] = torch.cuda.max_memory_reserved(dev)


def check_host(a, res):
    """Refuse, before allocating anything, what cannot fit in host memory."""
    need, have = host_need(a), mem_available()
    res.update(host_need_bytes=need, mem_available_bytes=have)
    if need > have:
        finish(a, res, "refused", f"needs at least {need / GIB:.1f} GiB of host memory "
               f"({shape_params(a)[0] / 1e9:.2f}B parameters), MemAvailable is {have / GIB:.1f} GiB")


def main(argv):
    global torch
    a = parse_args(argv)
    n = shape_params(a)[0]
    res = {"impl": a.impl, "device": a.device, "params": n, "model_flops_per_step": model_flops(a),
           "shape": {k: getattr(a, k) for k in ("layers", "channels", "heads", "kv_heads", "ffn", "vocab", "seq", "batch")},
           "checkpoint": a.checkpoint}
    check_host(a, res)
    signal.signal(signal.SIGTERM, on_term)
    import importlib.util
    if a.impl == "torchao" and importlib.util.find_spec("torchao") is None:
        finish(a, res, "skipped", "torchao is not installed")
    try:
        import torch as torch_module
        import transformers
    except ImportError as e:
        finish(a, res, "skipped", f"{e} (PYTHON: a python with torch and transformers)")
    torch = torch_module
    res.update(torch=torch.__version__, transformers=transformers.__version__, threads=torch.get_num_threads())
    try:
        dev = torch.device(a.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            finish(a, res, "skipped", "no CUDA device (use --device cpu for a dry run)")
        if dev.type == "cuda" and dev.index is None:  # set_per_process_memory_fraction needs the index
            dev = torch.device("cuda", torch.cuda.current_device())
        if a.impl == "torchao" and dev.type != "cuda":
            finish(a, res, "skipped", "torchao's CPUOffloadOptimizer needs a CUDA device")
        cap_device(a, dev, res)
        rate, size = matmul_rate(a, dev)
        res.update(matmul_flops_per_s=rate, matmul_size=size)
        print(f"{a.impl}: bf16 {size}^3 product: {rate / 1e12:.3g} TFLOP/s; "
              f"{n / 1e9:.3f}B parameters, {res['model_flops_per_step'] / 1e12:.3g} TFLOP per step (ferry's count)",
              flush=True)
        if a.impl == "matmul":
            finish(a, res, "ok")
        torch.manual_seed(0)
        batch = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        {"offload": run_offload, "fsdp2": run_fsdp2, "torchao": run_torchao}[a.impl](a, dev, batch, res)
    except Stopped as e:  # a partial result needs a step after the first
        finish(a, res, "partial" if len(res.get("step_ms", [])) > 1 else "failed", str(e))
    except Exception as e:  # noqa: BLE001: any failure (out of memory included) is one JSON line
        finish(a, res, "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    finish(a, res, "ok")


if __name__ == "__main__":
    main(sys.argv[1:])
