#!/usr/bin/env python3
"""Makes the safetensors fixtures tests/test_safetensors.c reads, with the
reference implementation (Hugging Face's `safetensors` Python package), so
that ferry's reader is checked against files it did not write.

    python3 tests/data/make_safetensors_fixtures.py   # from the repo root

Needs numpy and safetensors (any version: only save_file and serialize_file
are used).  The committed files were made with safetensors 0.2.8 built from
its source; CI only reads them.

ref_mixed.safetensors, metadata {"format": "pt"}:
  model.embed_tokens.weight  F32  [2, 3]  (i - 5) * 0.375
  model.norm.weight          BF16 [4]     bits 3f80 c020 4049 714a
                                          (1, -2.5, pi and 1e30 rounded)
  lm_head.weight             F16  [3, 2]  65504, 2^-24, -0, inf, -inf, nan
  ref.f16_src                F32  [64]    awkward values (ties, subnormals,
                                          overflow, random over all exponents)
  ref.f16_rounded            F16  [64]    numpy's fp32 -> fp16 of ref.f16_src
  ref.bf16_src               F32  [8]     ties and near-ties for bf16
  ref.bf16_rounded           BF16 [8]     their roundings, worked out by hand
  scalar                     F32  []      42
ref_sharded/: model-0000{1,2}-of-00002.safetensors and the index
transformers writes; model.layers.{0,1,2}.self_attn.q_proj.weight, BF16
[4, 4], values (16 * layer + k) / 8 (exact in bf16).
"""
import json
import os

import numpy as np
from safetensors.numpy import serialize_file

HERE = os.path.dirname(os.path.abspath(__file__))


def bf16(name_bits, shape):
    """A BF16 tensor for serialize_file (numpy has no bfloat16)."""
    bits = np.asarray(name_bits, dtype="<u2")
    return {"dtype": "bfloat16", "shape": list(shape), "data": bits.tobytes()}


def raw(a):
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()}


def f16_sources():
    f = lambda bits: np.array([bits], dtype="<u4").view("<f4")[0]
    vals = [
        1.0 + 2.0**-11,        # tie between 1 and 1+2^-10: to even (1)
        1.0 + 3 * 2.0**-11,    # tie: to even (1 + 2^-9)
        65504.0, 65519.0, 65520.0, 1e6, -65520.0,
        2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 3 * 2.0**-25, 2.0**-26,
        2047 * 2.0**-25,       # rounds up to the smallest normal
        2.0**-14, -(2.0**-15) * 1.5,
        f(0x3F800FFF), f(0x3F801000), f(0x3F801001), f(0x3F803000),
        float("inf"), -0.0, 0.0,
    ]
    rng = np.random.default_rng(20240901)
    n = 64 - len(vals)
    mant = rng.uniform(1.0, 2.0, n) * rng.choice([-1.0, 1.0], n)
    expo = rng.integers(-28, 17, n)
    vals += list(np.ldexp(mant, expo))
    return np.array(vals, dtype=np.float32)


def f16_rounded(src):
    with np.errstate(over="ignore"):  # 65520 and up become inf, as they should
        return src.astype(np.float16)


def bf16_cases():
    # (fp32 bits, bf16 bits rounded to nearest even), worked out by hand.
    return [
        (0x3F808000, 0x3F80),  # 1 + 2^-8: tie, lower is even
        (0x3F818000, 0x3F82),  # tie, upper is even
        (0x3F80C000, 0x3F81),  # above the tie
        (0x3F807FFF, 0x3F80),  # below the tie
        (0x7F7FFFFF, 0x7F80),  # FLT_MAX rounds to inf
        (0x80000001, 0x8000),  # tiny negative denormal: -0
        (0xC0490FDB, 0xC049),  # -pi
        (0x00FF8000, 0x0100),  # carry into the exponent
    ]


def main():
    src = f16_sources()
    cases = bf16_cases()
    bsrc = np.array([c[0] for c in cases], dtype="<u4").view("<f4")
    tensors = {
        "model.embed_tokens.weight": raw(
            ((np.arange(6, dtype=np.float32) - 5) * 0.375).reshape(2, 3)),
        "model.norm.weight": bf16([0x3F80, 0xC020, 0x4049, 0x714A], [4]),
        "lm_head.weight": raw(np.array(
            [65504.0, 2.0**-24, -0.0, np.inf, -np.inf, np.nan],
            dtype=np.float16).reshape(3, 2)),
        "ref.f16_src": raw(src),
        "ref.f16_rounded": raw(f16_rounded(src)),
        "ref.bf16_src": raw(bsrc),
        "ref.bf16_rounded": bf16([c[1] for c in cases], [8]),
        "scalar": raw(np.array(42.0, dtype=np.float32)),
    }
    serialize_file(tensors, os.path.join(HERE, "ref_mixed.safetensors"),
                   metadata={"format": "pt"})

    d = os.path.join(HERE, "ref_sharded")
    os.makedirs(d, exist_ok=True)
    shards = {"model-00001-of-00002.safetensors": [0, 1],
              "model-00002-of-00002.safetensors": [2]}
    weight_map, total = {}, 0
    for fname, layers in shards.items():
        part = {}
        for l in layers:
            name = "model.layers.%d.self_attn.q_proj.weight" % l
            v = (np.arange(16, dtype=np.float32) + 16 * l) / 8
            bits = (v.view("<u4") >> 16).astype("<u2")  # exact: low bits 0
            assert ((v.view("<u4") & 0xFFFF) == 0).all()
            part[name] = bf16(bits, [4, 4])
            weight_map[name] = fname
            total += 32
        serialize_file(part, os.path.join(d, fname), metadata={"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
