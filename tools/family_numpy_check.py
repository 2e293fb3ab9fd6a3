#!/usr/bin/env python3
"""An independent check of ferry's Llama-family models: Llama, Qwen 2, Mistral, Gemma 2, Qwen 3.

Reads a checkpoint directory ferry saved (config.json + model.safetensors,
the latter parsed here from the format's specification), runs the family's
forward pass as transformers' modeling files compute it, written out in
numpy in float64 from config.json alone (each config class's defaults for
what the file leaves out), and prints the mean cross-entropy over the first
batches of a token shard exactly as
`ferry eval --checkpoint DIR --data SHARD --batch B --seq T --batches N`
takes them (rows of T consecutive tokens, targets shifted by one, batches
advancing by B*T).  Compare its loss with ferry's last line.

    python3 tools/family_numpy_check.py DIR SHARD --batch 2 --seq 16 --batches 3

The families, as transformers computes them:
  llama    RMSNorm w * x / rms, rotary embedding (rope_scaling linear or
           llama3), grouped-query attention scaled by head_dim^-1/2, SwiGLU;
  qwen2    Llama with biases on q, k, v; a sliding window on the layers from
           max_window_layers when use_sliding_window is true;
  mistral  Llama with a sliding window (sliding_window, null: none) on every
           layer;
  gemma2   RMSNorm (1 + w) * x / rms, the embedding times sqrt(hidden_size)
           cast to the model's dtype, post-attention, pre- and
           post-feedforward norms, GeGLU (gelu tanh), scores scaled by
           query_pre_attn_scalar^-1/2 and soft-capped, a window on the even
           layers, soft-capped logits, a tied head by default;
  qwen3    Llama with RMSNorm w * x / rms over each head of q and k before
           the rotary embedding, head_dim 128 by default, Qwen 2's window.
A config.json's layer_types, when present, says which layers slide.

With --transformers-config, also loads config.json with transformers'
AutoConfig (transformers needs no torch for its configuration classes) and
checks that it reads the fields this script computes with as this script
does (layer by layer which layers slide), then writes transformers' own
config.json into the directory given, for ferry to read back.

Needs numpy; without it prints why and exits 77 (skipped).
"""
import argparse
import json
import math
import os
import struct
import sys

np = None  # imported by main() once the arguments are read, so --help needs nothing

# Each config class's defaults for the keys this script reads (transformers).
DEFAULTS = {
    "llama": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False),
    "qwen2": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, use_sliding_window=False,
                  sliding_window=4096, max_window_layers=28),
    "mistral": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=4096),
    "gemma2": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, sliding_window=4096,
                   query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                   num_key_value_heads=4, head_dim=256),
    "qwen3": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, use_sliding_window=False,
                  sliding_window=4096, max_window_layers=28, num_key_value_heads=32, head_dim=128),
}


def field(cfg, key):
    """config.json's key, the class's default when absent (None when null)."""
    if key in cfg:
        return cfg[key]
    return DEFAULTS[cfg["model_type"]].get(key)


def rope_theta(cfg):
    rp = cfg.get("rope_parameters")
    if "rope_theta" not in cfg and isinstance(rp, dict) and "rope_theta" in rp:
        return rp["rope_theta"]
    return field(cfg, "rope_theta")


def sliding_layers(cfg):
    """Which layers have a sliding window (its size, or None for full attention)."""
    L, mt = cfg["num_hidden_layers"], cfg["model_type"]
    window = field(cfg, "sliding_window")
    if mt in ("qwen2", "qwen3") and not field(cfg, "use_sliding_window"):
        window = None
    if "layer_types" in cfg and cfg["layer_types"] is not None:
        kinds = cfg["layer_types"]
    elif mt in ("qwen2", "qwen3"):
        kinds = ["sliding_attention" if i >= field(cfg, "max_window_layers") else "full_attention" for i in range(L)]
    elif mt == "gemma2":
        kinds = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    elif mt == "mistral":
        kinds = ["sliding_attention"] * L
    else:
        kinds = ["full_attention"] * L
    return [window if k == "sliding_attention" else None for k in kinds]


def load_safetensors(path):
    """name -> float64 array; F32, F16 and BF16 (widened exactly)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[8 + n + b : 8 + n + e]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ("F32", "F16"):
            arr = np.frombuffer(raw, dtype="<f4" if info["dtype"] == "F32" else "<f2")
        else:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not handled")
        out[name] = arr.astype(np.float64).reshape(info["shape"])
    return out


def read_shard(path):
    """An llm.c token shard's tokens (tools/llama_torch_check.py's too)."""
    import numpy as np  # its own import: the other script calls it

    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        # version 1: uint16 tokens (llm.c's); 2: uint32 (docs/data.md)
        tokens = np.frombuffer(f.read(), dtype="<u4" if header[1] == 2 else "<u2")
    assert header[0] == 20240520, f"{path}: not an llm.c token shard"
    return tokens[: header[2]].astype(np.int64)


def inv_freq(cfg, hd):
    """The rotary frequencies, scaled as rope_scaling says (linear, llama3)."""
    inv = 1.0 / rope_theta(cfg) ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        f, lo, hi, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs[
            "original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - lo) / (hi - lo)
        scaled = np.where(wavelen > orig / lo, inv / f, inv)
        mid = (wavelen <= orig / lo) & (wavelen >= orig / hi)
        return np.where(mid, (1 - smooth) * inv / f + smooth * inv, scaled)
    return inv


def rms_norm(x, w, eps, gemma):
    r = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return r * (1.0 + w) if gemma else w * r


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., h:], x[..., :h]), axis=-1) * sin


def attention(cfg, W, p, x, l, window, cos, sin):
    """Layer l's self-attention on x [B, T, C] (its input norm applied)."""
    B, T, _ = x.shape
    gemma = cfg["model_type"] == "gemma2"
    NH, NKV, hd = heads(cfg)

    def proj(name, n):
        y = x @ W[p + f"self_attn.{name}.weight"].T
        if p + f"self_attn.{name}.bias" in W:
            y = y + W[p + f"self_attn.{name}.bias"]
        y = y.reshape(B, T, n, hd).transpose(0, 2, 1, 3)
        norm = p + f"self_attn.{name[0]}_norm.weight"  # Qwen 3's, over each head
        return rms_norm(y, W[norm], field(cfg, "rms_norm_eps"), False) if norm in W else y

    q, k, v = proj("q_proj", NH), proj("k_proj", NKV), proj("v_proj", NKV)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    k, v = np.repeat(k, NH // NKV, axis=1), np.repeat(v, NH // NKV, axis=1)  # repeat_kv
    scaling = field(cfg, "query_pre_attn_scalar") ** -0.5 if gemma else hd**-0.5
    s = q @ k.transpose(0, 1, 3, 2) * scaling
    cap = field(cfg, "attn_logit_softcapping") if gemma else None
    if cap:
        s = np.tanh(s / cap) * cap
    t = np.arange(T)
    allowed = t[None, :] <= t[:, None]
    if window:
        allowed &= t[None, :] > t[:, None] - window
    s = np.where(allowed, s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    ctx = (s / s.sum(-1, keepdims=True)) @ v
    return ctx.transpose(0, 2, 1, 3).reshape(B, T, NH * hd) @ W[p + "self_attn.o_proj.weight"].T


def heads(cfg):
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or DEFAULTS[cfg["model_type"]].get("num_key_value_heads") or NH
    hd = cfg.get("head_dim") or DEFAULTS[cfg["model_type"]].get("head_dim") or cfg["hidden_size"] // NH
    return NH, NKV, hd


def loss(cfg, W, inputs, targets):
    """Mean cross-entropy of the family's ForCausalLM over inputs [B, T]."""
    B, T = inputs.shape
    gemma = cfg["model_type"] == "gemma2"
    eps = field(cfg, "rms_norm_eps")
    act = gelu_tanh if gemma else silu
    _, _, hd = heads(cfg)
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq(cfg, hd))
    emb = np.concatenate((freqs, freqs), axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)

    h = W["model.embed_tokens.weight"][inputs]
    if gemma:  # the normalizer in the model's dtype (float32)
        h = h * float(np.float32(cfg["hidden_size"] ** 0.5))
    for l, window in enumerate(sliding_layers(cfg)):
        p = f"model.layers.{l}."
        a = attention(cfg, W, p, rms_norm(h, W[p + "input_layernorm.weight"], eps, gemma), l, window, cos, sin)
        if gemma:
            a = rms_norm(a, W[p + "post_attention_layernorm.weight"], eps, True)
        h = h + a
        x = rms_norm(h, W[p + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm") + ".weight"],
                     eps, gemma)
        m = (act(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[
            p + "mlp.down_proj.weight"].T
        if gemma:
            m = rms_norm(m, W[p + "post_feedforward_layernorm.weight"], eps, True)
        h = h + m
    h = rms_norm(h, W["model.norm.weight"], eps, gemma)
    tied = field(cfg, "tie_word_embeddings")
    logits = h @ (W["model.embed_tokens.weight"] if tied else W["lm_head.weight"]).T
    cap = field(cfg, "final_logit_softcapping") if gemma else None
    if cap:
        logits = np.tanh(logits / cap) * cap
    logits = logits.reshape(B * T, -1)
    m = logits.max(-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(-1))
    return float((lse - logits[np.arange(B * T), targets.reshape(-1)]).mean())


def check_with_transformers(directory, cfg, out):
    """transformers' reading of config.json against this script's; its own
    config.json into out.  Exits 77 without transformers."""
    try:
        from transformers import AutoConfig
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    tc = AutoConfig.from_pretrained(directory)
    NH, NKV, hd = heads(cfg)
    want = {"hidden_size": cfg["hidden_size"], "num_attention_heads": NH, "num_key_value_heads": NKV,
            "num_hidden_layers": cfg["num_hidden_layers"], "vocab_size": cfg["vocab_size"],
            "rms_norm_eps": field(cfg, "rms_norm_eps"), "tie_word_embeddings": field(cfg, "tie_word_embeddings")}
    if cfg["model_type"] == "gemma2":
        want.update(head_dim=hd, query_pre_attn_scalar=field(cfg, "query_pre_attn_scalar"),
                    attn_logit_softcapping=field(cfg, "attn_logit_softcapping"),
                    final_logit_softcapping=field(cfg, "final_logit_softcapping"),
                    hidden_activation="gelu_pytorch_tanh")
    if cfg["model_type"] == "qwen3":
        want.update(head_dim=hd)
    bad = [f"{k}: transformers {getattr(tc, k, None)!r}, here {v!r}" for k, v in want.items()
           if getattr(tc, k, None) != v]
    windows = sliding_layers(cfg)
    kinds = getattr(tc, "layer_types", None)
    if kinds is not None and [k == "sliding_attention" for k in kinds] != [w is not None for w in windows]:
        if not (cfg["model_type"] == "gemma2" and not field(cfg, "sliding_window")):  # Gemma: sliding, no window
            bad.append(f"layer_types: transformers {kinds}, here {windows}")
    if any(w is not None and w != tc.sliding_window for w in windows):
        bad.append(f"sliding_window: transformers {tc.sliding_window}, here {windows}")
    if bad:
        raise SystemExit("transformers reads config.json otherwise:\n  " + "\n  ".join(bad))
    tc.save_pretrained(out)
    print(f"transformers {type(tc).__name__}: the same fields, layer types {kinds}; its config.json in {out}")


def eval_arguments(ap, shard=None):
    """The checkpoint and the batches of a shard, as `ferry eval` takes them
    (the other check scripts' arguments too)."""
    ap.add_argument("checkpoint", help="a directory with config.json and model.safetensors")
    ap.add_argument("shard", nargs=shard, help="an llm.c token shard (ferry data)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batches", type=int, default=10)


def main():
    global np
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    eval_arguments(ap, shard="?")
    ap.add_argument("--transformers-config", metavar="OUT", help="check config.json with transformers; "
                    "write its config.json into OUT")
    a = ap.parse_args()
    try:
        import numpy
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    np = numpy

    with open(os.path.join(a.checkpoint, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in DEFAULTS:
        raise SystemExit(f"model_type {cfg.get('model_type')!r}: not a {', '.join(DEFAULTS)}")
    if a.transformers_config:
        check_with_transformers(a.checkpoint, cfg, a.transformers_config)
        return
    W = load_safetensors(os.path.join(a.checkpoint, "model.safetensors"))
    tokens = read_shard(a.shard)
    n = a.batch * a.seq
    losses = [loss(cfg, W, tokens[i * n : i * n + n].reshape(a.batch, a.seq),
                   tokens[i * n + 1 : i * n + n + 1].reshape(a.batch, a.seq)) for i in range(a.batches)]
    print(f"numpy float64 {cfg['model_type']}: loss {sum(losses) / len(losses):.8f}")


if __name__ == "__main__":
    main()
