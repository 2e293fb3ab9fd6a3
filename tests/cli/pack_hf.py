"""The reference for tests/cli/pack_hf.sh: tiny random models saved by
transformers, and their loss on version-3 documents computed by transformers
itself, each document alone.

    pack_hf.py make OUT_DIR   writes OUT_DIR/llama (a Hugging Face Llama,
                              save_pretrained), OUT_DIR/gpt2.bin (a GPT-2 of
                              transformers as an llm.c file), and
                              OUT_DIR/docs_000000.bin, docs_000001.bin:
                              random documents of random lengths, token 0 of
                              each the BOS, random target masks; prints the
                              longest document
    pack_hf.py both OUT_DIR   make, then loss (one start of torch)
    pack_hf.py loss OUT_DIR   for each model: "NAME LOSS COUNT", LOSS the mean
                              over the counted targets of transformers' cross-
                              entropy with labels -100 outside the masks, each
                              document run alone (float64)

Needs torch and transformers; without them exits 77."""
import os
import random
import struct
import sys

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

V, BOS, MAXT = 97, 96, 64
SHARDS = [(11, 14), (12, 9)]  # (seed, documents)


def documents(seed, n):
    """(ids, flags) of n random documents."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(2, 40)
        ids = [BOS] + [rng.randrange(V - 1) for _ in range(k - 1)]
        flags = [2] + [1 if rng.random() < 0.6 else 0 for _ in range(k - 1)]
        out.append((ids, flags))
    return out


def write_shard(path, docs):
    ids = [t for d in docs for t in d[0]]
    flags = [f for d in docs for f in d[1]]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 3, len(ids), *([0] * 253)))
        f.write(struct.pack("<%dI" % len(ids), *ids))
        f.write(bytes(flags))


def noisy(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "ln" in name or "norm" in name else 0.15))
    return model


def gpt2_llmc(model, path):
    """transformers' GPT-2 as an llm.c model file (its Conv1D weights are
    [in, out]: llm.c's are [out, in])."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    cfg = model.config
    L, C, Vp = cfg.n_layer, cfg.n_embd, V  # V is already a multiple of 1: pad to itself
    Vp = (V + 127) // 128 * 128
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = sd["transformer.wte.weight"]
    layer = lambda f: np.stack([f(i) for i in range(L)])
    h = lambda i, n: sd[f"transformer.h.{i}.{n}"]
    parts = [wte, sd["transformer.wpe.weight"],
             layer(lambda i: h(i, "ln_1.weight")), layer(lambda i: h(i, "ln_1.bias")),
             layer(lambda i: h(i, "attn.c_attn.weight").T), layer(lambda i: h(i, "attn.c_attn.bias")),
             layer(lambda i: h(i, "attn.c_proj.weight").T), layer(lambda i: h(i, "attn.c_proj.bias")),
             layer(lambda i: h(i, "ln_2.weight")), layer(lambda i: h(i, "ln_2.bias")),
             layer(lambda i: h(i, "mlp.c_fc.weight").T), layer(lambda i: h(i, "mlp.c_fc.bias")),
             layer(lambda i: h(i, "mlp.c_proj.weight").T), layer(lambda i: h(i, "mlp.c_proj.bias")),
             sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240326, 3, MAXT, V, L, cfg.n_head, C, Vp, *([0] * 248)))
        for p in parts:
            f.write(np.ascontiguousarray(p, np.float32).tobytes())


def llama_config(vocab, bos, maxt):
    """The tiny Llama of these tests (grouped-query attention, untied head)."""
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=maxt,
                                    bos_token_id=bos, eos_token_id=bos, tie_word_embeddings=False)


def models(out):
    llama = llama_config(V, BOS, MAXT)
    gpt2 = transformers.GPT2Config(vocab_size=V, n_positions=MAXT, n_embd=32, n_layer=2, n_head=4,
                                   bos_token_id=BOS, eos_token_id=BOS, activation_function="gelu_new")
    return {"llama": llama, "gpt2": gpt2}


def make(out):
    for name, cfg in models(out).items():
        torch.manual_seed(0)
        model = noisy(transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32))
        if name == "gpt2":
            gpt2_llmc(model, os.path.join(out, "gpt2.bin"))
        else:
            model.save_pretrained(os.path.join(out, name))
    longest = 0
    for i, (seed, n) in enumerate(SHARDS):
        docs = documents(seed, n)
        write_shard(os.path.join(out, "docs_%06d.bin" % i), docs)
        longest = max([longest] + [len(d[0]) for d in docs])
    print(longest)


def loss(out):
    docs = [d for seed, n in SHARDS for d in documents(seed, n)]
    for name in ("llama", "gpt2"):
        torch.manual_seed(0)
        cfg = models(out)[name]
        if name == "llama":
            model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(out, name), dtype=torch.float32,
                                                                      attn_implementation="eager")
        else:  # the same weights as gpt2.bin
            model = noisy(transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                                        attn_implementation="eager"))
        mean, count = doc_loss(model, docs)
        print(f"{name} {mean:.9f} {count}")


def doc_loss(model, docs):
    """(mean, count): transformers' cross-entropy over the documents'
    counted targets, each document [(ids, flags)] run alone in float64 with
    labels -100 where a token's FERRY_TOKEN_TARGET bit is clear."""
    model = model.double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, flags in docs:
            labels = [t if f & 1 else -100 for t, f in zip(ids, flags)]
            labels[0] = -100
            n = sum(1 for x in labels if x != -100)
            if not n:
                continue
            r = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
            total += float(r.loss) * n  # transformers' mean over the document's counted labels
            count += n
    return total / count, count


if __name__ == "__main__":
    transformers.logging.set_verbosity_error()
    if sys.argv[1] in ("make", "both"):
        make(sys.argv[2])
    if sys.argv[1] in ("loss", "both"):
        loss(sys.argv[2])
