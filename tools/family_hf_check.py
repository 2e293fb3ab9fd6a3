#!/usr/bin/env python3
"""ferry's Llama-family checkpoints run by Hugging Face transformers itself.

Loads a checkpoint directory (config.json + model.safetensors, as ferry
saves it or a test writes it) with transformers' AutoModelForCausalLM, its
own modeling file for the model_type (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM, Gemma2ForCausalLM), with attn_implementation="eager"
(the implementation that applies Gemma 2's attention soft cap; the masks
carry the sliding windows), in float64: ferry's fp32 rounding is then
nearly all of the difference (transformers' own code still takes its
norms, rotary tables and softmax through float32 in any dtype, about 1e-8
of the loss here; tools/family_numpy_check.py is float64 throughout).
Prints the mean cross-entropy over the first batches of a token shard
exactly as
`ferry eval --checkpoint DIR --data SHARD --batch B --seq T --batches N`
takes them (rows of T consecutive tokens, targets shifted by one, batches
advancing by B*T), and the global norm of the gradient of the first
batch's loss over every parameter (a tied embedding counted once): what
`ferry train --checkpoint DIR --shuffle off --steps 1 --grad-clip 0 --json F`
reports as the first step's grad_norm.

    python3 tools/family_hf_check.py DIR SHARD --batch 2 --seq 16 --batches 3

With --ferry-step DIR1 (DIR after that one training step, saved in f32,
with --weight-decay 0 --warmup 0 --lr-schedule constant --lr LR --eps EPS),
also checks ferry's gradient element by element: AdamW's first step moves
each weight by LR * g / (|g| + EPS) (its moments' bias corrections make
them g and g^2), so g comes back from DIR1 - DIR (a large LR keeps the
step's rounding relative to it).  Each tensor's gradient must be as close
to transformers' float64 one as transformers' own float32 gradient is,
within a factor (--spread-factor) over a floor (--floor), relative to the
tensor's gradient norm: the bound a correct fp32 computation of the same
formulas meets, and what a wrong formula misses by orders of magnitude.
--ferry-grad-norm X holds the grad_norm ferry reported for that step to the
same bound.  Exits 1 naming each tensor (or the norm) that misses it.

Needs torch, transformers and numpy; without them prints why and exits 77
(skipped).
"""
import argparse
import os
import sys

from family_numpy_check import eval_arguments, read_shard  # beside this script


def import_or_skip():
    try:
        import numpy  # noqa: F401  (family_numpy_check.read_shard needs it)
        import torch
        import transformers
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    return torch, transformers


def load(transformers, directory, dtype):
    """The directory's model, as transformers builds it, in dtype."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: never the network
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    config = transformers.AutoConfig.from_pretrained(directory)
    if config.model_type == "gemma2" and config.sliding_window is None:
        # transformers' Gemma 2 always builds a window mask and refuses a null
        # window; no window is one as long as the model's longest sequence
        config.sliding_window = config.max_position_embeddings
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        directory, config=config, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    # a tensor under another name would be initialised at random, silently
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"{directory}: transformers loads it otherwise: {bad}")
    if model.config._attn_implementation != "eager":
        raise SystemExit(f"{directory}: attention {model.config._attn_implementation!r}, not eager")
    return model.eval()


def batch_loss(torch, model, chunk, batch, seq):
    """Mean cross-entropy of rows chunk[:-1] against chunk[1:] ([batch, seq])."""
    inputs, targets = chunk[:-1].view(batch, seq), chunk[1:].view(batch, seq)
    logits = model(input_ids=inputs, use_cache=False).logits  # no cache: Gemma 2's builds a window
    return torch.nn.functional.cross_entropy(logits.reshape(batch * seq, -1), targets.reshape(-1))


def gradients(torch, model, chunk, batch, seq):
    """name -> float64 gradient of the batch's loss (tied tensors once)."""
    model.zero_grad()
    batch_loss(torch, model, chunk, batch, seq).backward()
    return {n: p.grad.double() for n, p in model.named_parameters()}


def ferry_step(torch, directory, after, lr, eps):
    """ferry's gradient, recovered from its first AdamW step (module doc)."""
    from safetensors.torch import load_file

    w0 = load_file(os.path.join(directory, "model.safetensors"))
    w1 = load_file(os.path.join(after, "model.safetensors"))
    out = {}
    for name, w in w0.items():
        u = (w.double() - w1[name].double()) / lr  # g / (|g| + eps)
        out[name] = eps * u / (1 - u.abs())
    return out


def check_step(torch, a, g64, g32):
    """Each tensor of ferry's gradient against transformers'; the misses."""
    norm = torch.linalg.vector_norm
    gf = ferry_step(torch, a.checkpoint, a.ferry_step, a.lr, a.eps)
    misses = []
    for name, g in g64.items():
        if name not in gf:
            misses.append(f"{name}: not in ferry's checkpoint")
            continue
        scale = float(norm(g)) or 1.0
        ours, theirs = float(norm(gf[name] - g)) / scale, float(norm(g32[name] - g)) / scale
        bound = a.floor + a.spread_factor * theirs
        print(f"  {name}: |g| {scale:.6e}, ferry's fp32 off by {ours:.2e}, transformers' fp32 by {theirs:.2e}"
              f"{'' if ours <= bound else f'  OVER {bound:.2e}'}")
        if ours > bound:
            misses.append(f"{name}: ferry's gradient off by {ours:.2e} of its norm (bound {bound:.2e})")
    return misses


def check_norm(torch, a, g64, g32):
    """ferry's reported gradient norm (--ferry-grad-norm) against transformers'; the misses."""
    n64 = sum(float(g.pow(2).sum()) for g in g64.values()) ** 0.5
    n32 = sum(float(g.pow(2).sum()) for g in g32.values()) ** 0.5
    ours, theirs = abs(a.ferry_grad_norm - n64) / n64, abs(n32 - n64) / n64
    bound = a.floor + a.spread_factor * theirs
    print(f"  gradient norm: ferry {a.ferry_grad_norm}, off by {ours:.2e}; transformers' fp32 by {theirs:.2e}")
    if ours <= bound:
        return []
    return [f"gradient norm: ferry's {a.ferry_grad_norm} off by {ours:.2e} (bound {bound:.2e})"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    eval_arguments(ap)
    ap.add_argument("--ferry-step", metavar="DIR1", help="the checkpoint after ferry's first step (module doc)")
    ap.add_argument("--ferry-grad-norm", type=float, metavar="X", help="the grad_norm ferry reports for that step")
    ap.add_argument("--lr", type=float, default=1e4, help="that step's --lr")
    ap.add_argument("--eps", type=float, default=1.0, help="that step's --eps")
    ap.add_argument("--spread-factor", type=float, default=4.0)
    ap.add_argument("--floor", type=float, default=2e-6)
    a = ap.parse_args()
    torch, transformers = import_or_skip()

    model = load(transformers, a.checkpoint, torch.float64)
    tokens = torch.from_numpy(read_shard(a.shard))
    n = a.batch * a.seq
    name = f"transformers {transformers.__version__} {type(model).__name__} float64"
    with torch.no_grad():
        losses = [batch_loss(torch, model, tokens[i * n : i * n + n + 1], a.batch, a.seq).item()
                  for i in range(a.batches)]
    g64 = gradients(torch, model, tokens[: n + 1], a.batch, a.seq)
    sq = sum(float(g.pow(2).sum()) for g in g64.values())
    print(f"{name}: first batch's gradient norm {sq ** 0.5:.8f}")
    misses = []
    if a.ferry_step or a.ferry_grad_norm is not None:
        g32 = gradients(torch, load(transformers, a.checkpoint, torch.float32), tokens[: n + 1], a.batch, a.seq)
        misses += check_step(torch, a, g64, g32) if a.ferry_step else []
        misses += check_norm(torch, a, g64, g32) if a.ferry_grad_norm is not None else []
    print(f"{name}: loss {sum(losses) / len(losses):.8f}")
    if misses:
        raise SystemExit("ferry's gradient differs from transformers':\n  " + "\n  ".join(misses))


if __name__ == "__main__":
    main()
