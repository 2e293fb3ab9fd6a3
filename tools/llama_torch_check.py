#!/usr/bin/env python3
"""An independent check of ferry's Llama and its Hugging Face checkpoints.

Reads a checkpoint directory ferry saved (config.json + model.safetensors,
parsed here from the format's specification, or by the safetensors package
when it is installed), runs Hugging Face's LlamaForCausalLM forward pass as
transformers' modeling_llama.py computes it (RMSNorm, rotate_half rotary
embedding, grouped-query attention by repeat_kv, SwiGLU MLP, untied or tied
head), written out in torch, in float64 and float32, and prints the mean
cross-entropy over the first batches of a token shard exactly as
`ferry eval --checkpoint DIR --data SHARD --batch B --seq T --batches N`
takes them (rows of T consecutive tokens, targets shifted by one, batches
advancing by B*T).  Compare its float64 loss with ferry's last line.

    python3 tools/llama_torch_check.py DIR SHARD --batch 2 --seq 16 --batches 3

Needs numpy and torch; without them it prints why and exits 77 (skipped).
"""
import argparse
import json
import os
import struct
import sys

from family_numpy_check import eval_arguments, read_shard  # beside this script

np = torch = None  # imported by main() once the arguments are read, so --help needs neither


def import_torch():
    global np, torch
    try:
        import numpy
        import torch as torch_module
    except ImportError as e:  # pragma: no cover
        print(f"skipped: {e}")
        sys.exit(77)
    np, torch = numpy, torch_module


def load_safetensors(path):
    """name -> float32 tensor; F32, F16 and BF16 (widened exactly)."""
    try:
        from safetensors.torch import load_file  # the reference reader, when installed

        return {k: v.float() for k, v in load_file(path).items()}, "safetensors package"
    except ImportError:
        pass
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b : base + e]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ("F32", "F16"):
            arr = np.frombuffer(raw, dtype="<f4" if info["dtype"] == "F32" else "<f2").astype(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not handled")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out, "own reader"


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_loss(cfg, w, inputs, targets, dtype):
    """Mean cross-entropy of LlamaForCausalLM over inputs [B, T]."""
    B, T = inputs.shape
    C = cfg["hidden_size"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads", NH)
    hd = cfg.get("head_dim") or C // NH
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    W = {k: v.to(dtype) for k, v in w.items()}

    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(dtype) / hd))
    freqs = torch.outer(torch.arange(T, dtype=dtype), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)

    h = W["model.embed_tokens.weight"][inputs]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], eps)
        q = (x @ W[p + "self_attn.q_proj.weight"].T).view(B, T, NH, hd).transpose(1, 2)
        k = (x @ W[p + "self_attn.k_proj.weight"].T).view(B, T, NKV, hd).transpose(1, 2)
        v = (x @ W[p + "self_attn.v_proj.weight"].T).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = NH // NKV  # repeat_kv: query head i reads key/value head i // rep
        k = k[:, :, None].expand(B, NKV, rep, T, hd).reshape(B, NH, T, hd)
        v = v[:, :, None].expand(B, NKV, rep, T, hd).reshape(B, NH, T, hd)
        att = torch.softmax(q @ k.transpose(2, 3) / hd**0.5 + mask, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(B, T, NH * hd)
        h = h + ctx @ W[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        gate = x @ W[p + "mlp.gate_proj.weight"].T
        up = x @ W[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    logits = h @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    eval_arguments(ap)
    a = ap.parse_args()
    import_torch()

    with open(os.path.join(a.checkpoint, "config.json")) as f:
        cfg = json.load(f)
    assert cfg.get("model_type") == "llama", "not a Llama"
    w, how = load_safetensors(os.path.join(a.checkpoint, "model.safetensors"))

    tokens = read_shard(a.shard)
    n = a.batch * a.seq
    for dtype in (torch.float64, torch.float32):
        losses = []
        for i in range(a.batches):
            chunk = torch.from_numpy(tokens[i * n : i * n + n + 1])
            losses.append(llama_loss(cfg, w, chunk[:-1].view(a.batch, a.seq), chunk[1:].view(a.batch, a.seq), dtype))
        print(f"torch {str(dtype).split('.')[1]} ({how}): loss {sum(losses) / len(losses):.8f}")


if __name__ == "__main__":
    main()
