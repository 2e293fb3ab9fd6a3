#!/usr/bin/env python3
"""Small Llama-family checkpoints written by Hugging Face transformers itself.

Each is made by transformers' own config class and model class and saved
with save_pretrained (config.json as this transformers version writes it,
e.g. rope_parameters and layer_types; model.safetensors in float32, or
bfloat16 where the name ends in b), with
what ferry's command-line flags cannot give a model:

  tf_llama3    Llama, head_dim 16 (not hidden_size / heads), llama3 rope
               scaling over all three frequency bands
  tf_llamalin  Llama, linear rope scaling
  tf_qwen2w    Qwen 2, tied, use_sliding_window from its second layer
  tf_mistral   Mistral, head_dim 16, a window of 5
  tf_gemma2    Gemma 2, head_dim 16, query_pre_attn_scalar 12, an untied
               head, caps small enough to bend the scores and logits
  tf_qwen3     Qwen 3, head_dim 16, untied
  tf_qwen3w    Qwen 3, tied, use_sliding_window from its second layer
  tf_qwen3b    tf_qwen3 saved in bfloat16
  tf_gemma3    Gemma 3 (text), 7 layers (the sixth full, the others
               windowed by 5), head_dim 16, query_pre_attn_scalar 12,
               linear rope scaling on the full layer, 10000 on the others
  tf_gemma3b   tf_gemma3 saved in bfloat16

Their weights are transformers' initialisation plus seeded noise (norm
gains 0.3, the rest 0.15), so that every parameter matters.  ferry loads
them; tools/family_hf_check.py compares ferry with transformers on them.

    python3 tools/family_hf_make.py OUT_DIR

Needs torch and transformers; without them prints why and exits 77.
"""
import argparse
import os
import sys

SHAPE = dict(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32)


def configs(transformers):
    """name -> transformers config of each checkpoint (module doc)."""
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
    gemma3 = dict(SHAPE, num_hidden_layers=7, head_dim=16, query_pre_attn_scalar=12, sliding_window=5,
                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    return {
        "tf_llama3": transformers.LlamaConfig(**SHAPE, head_dim=16, rope_parameters=llama3),
        "tf_llamalin": transformers.LlamaConfig(
            **SHAPE, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
        "tf_qwen2w": transformers.Qwen2Config(**SHAPE, use_sliding_window=True, sliding_window=4, max_window_layers=1,
                                              tie_word_embeddings=True),
        "tf_mistral": transformers.MistralConfig(**SHAPE, head_dim=16, sliding_window=5),
        "tf_gemma2": transformers.Gemma2Config(**SHAPE, head_dim=16, query_pre_attn_scalar=12, sliding_window=5,
                                               tie_word_embeddings=False, attn_logit_softcapping=5.0,
                                               final_logit_softcapping=4.0),
        "tf_qwen3": transformers.Qwen3Config(**SHAPE, head_dim=16),
        "tf_qwen3w": transformers.Qwen3Config(**SHAPE, use_sliding_window=True, sliding_window=4, max_window_layers=1,
                                              tie_word_embeddings=True),
        "tf_qwen3b": transformers.Qwen3Config(**SHAPE, head_dim=16),
        "tf_gemma3": transformers.Gemma3TextConfig(**gemma3),
        "tf_gemma3b": transformers.Gemma3TextConfig(**gemma3),
    }


BF16 = {"tf_qwen3b", "tf_gemma3b"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the directory to write the checkpoints into")
    a = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"skipped: {e}")
        sys.exit(77)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name, config in configs(transformers).items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                p.add_(torch.randn_like(p) * (0.3 if "norm" in pname else 0.15))
        if name in BF16:
            model = model.to(torch.bfloat16)
        model.save_pretrained(os.path.join(a.out, name))
        print(f"{name}: {type(model).__name__}")


if __name__ == "__main__":
    main()
