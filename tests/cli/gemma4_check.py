#!/usr/bin/env python3
"""tools/family_hf_check.py for Gemma 4 checkpoints without layer_scalar.

Gemma4ForCausalLM keeps a layer_scalar buffer per layer (1 in a fresh
model) that ferry does not hold (src/models/gemma4.c): a checkpoint ferry
loads or saves has none, and transformers makes each 1 again.  This runs
family_hf_check.py's main with its loader allowing exactly those missing
buffers, and checking each came out 1; anything else still fails it.
Same arguments and exit codes as tools/family_hf_check.py.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import family_hf_check  # noqa: E402

_load = family_hf_check.load


def load(transformers, directory, dtype):
    real = transformers.AutoModelForCausalLM.from_pretrained

    def from_pretrained(*args, **kwargs):
        model, info = real(*args, **kwargs)
        missing = set(info.get("missing_keys", ()))
        scalars = {k for k in missing if k.endswith(".layer_scalar")}
        if any(float(model.get_buffer(k).float().item()) != 1.0 for k in scalars):
            raise SystemExit(f"{directory}: a missing layer_scalar is not 1")
        info["missing_keys"] = missing - scalars
        return model, info

    transformers.AutoModelForCausalLM.from_pretrained = from_pretrained
    try:
        return _load(transformers, directory, dtype)
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = real


family_hf_check.load = load

if __name__ == "__main__":
    family_hf_check.main()
