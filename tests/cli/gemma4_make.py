#!/usr/bin/env python3
"""Tiny random Gemma 4 (text, dense) models saved by transformers itself,
for tests/cli/gemma4_hf.sh:

  tf_gemma4    Gemma4TextConfig, 6 layers (the sixth full, the others
               windowed, window 5), head_dim 16 at width 32 with 4 heads and 2 kv heads,
               rope_parameters by layer type (bases 1e4 windowed, 5e5
               full, both plain), a final soft cap of 5 (small, so that it
               bends the logits), fp32;
  tf_gemma4b   the same saved in bfloat16;
  tf_gemma4_ple  the same with per-layer inputs on (refused by ferry);

with what ferry does not implement yet switched off (per-layer inputs 0, no
shared K/V, keys not values, the global layers' head size and kv heads
their own = the others', no MoE).  Each layer's layer_scalar buffer (1 in a
fresh model: asserted) is left out of model.safetensors, as ferry saves it
(transformers then makes it 1 again); tf_gemma4_scalar keeps it (refused).

    python3 tests/cli/gemma4_make.py OUTDIR

Prints one line per directory.  Exits 77 without torch and transformers.
"""
import os
import sys


def main():
    try:
        import torch
        import transformers
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    out = sys.argv[1]
    torch.manual_seed(37)
    shape = dict(vocab_size=257, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=16,
                 max_position_embeddings=32, sliding_window=5, hidden_size_per_layer_input=0,
                 num_kv_shared_layers=0, attention_k_eq_v=False, final_logit_softcapping=5.0,
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "default", "rope_theta": 500000.0}},
                 initializer_range=0.2)
    made = {"tf_gemma4": (shape, torch.float32, False), "tf_gemma4b": (shape, torch.bfloat16, False),
            "tf_gemma4_ple": (dict(shape, hidden_size_per_layer_input=8, vocab_size_per_layer_input=257),
                              torch.float32, True),
            "tf_gemma4_scalar": (shape, torch.float32, True)}
    for name, (kw, dtype, keep) in made.items():
        cfg = transformers.Gemma4TextConfig(**kw)
        model = transformers.Gemma4ForCausalLM(cfg)
        # norms' gains away from their start, so that a wrong rule shows
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.add_(0.3 * torch.randn_like(p))
        model = model.to(dtype)
        d = os.path.join(out, name)
        model.save_pretrained(d)
        st = os.path.join(d, "model.safetensors")
        tensors = load_file(st)
        scalars = [k for k in tensors if k.endswith(".layer_scalar")]
        assert all(float(tensors[k].float().item()) == 1.0 for k in scalars), "a layer_scalar is not 1"
        if not keep:
            for k in scalars:
                del tensors[k]
            save_file(tensors, st, metadata={"format": "pt"})
        print(f"{name}: {len(tensors)} tensors, {dtype}")


if __name__ == "__main__":
    main()
