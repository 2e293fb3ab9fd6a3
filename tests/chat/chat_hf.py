"""The reference for tests/cli/chat_hf.sh: conversations rendered, tokenized
and masked by transformers and `tokenizers` (chat_ref.py's rule, the one of
docs/data.md), and a tiny random Llama's loss on them computed by
transformers itself (tests/cli/pack_hf.py's doc_loss: each conversation
alone, labels -100 outside the assistant spans, the mean over the counted
targets).

    chat_hf.py DIR FAMILY...  chat_ref's tokenizer directories and
                              conversations in DIR; for each FAMILY a Llama
                              saved by transformers in DIR/model_FAMILY
                              (its vocabulary the tokenizer's) and the line
                              "FAMILY LOSS COUNT LONGEST", LONGEST the
                              longest conversation in tokens

Needs torch, transformers and tokenizers; without them exits 77."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "cli")]

try:
    import torch
    import transformers
    import chat_ref
    import pack_hf
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

MAXT = 256


def main(d, families):
    transformers.logging.set_verbosity_error()
    chat_ref.setup(d)
    for fam in families:
        masks = os.path.join(d, "masks_%s.json" % fam)
        chat_ref.masks(d, fam, masks)
        docs = [(c["ids"], c["flags"]) for c in json.load(open(masks))]
        tok = chat_ref.load(d, fam)
        cfg = pack_hf.llama_config(len(tok), docs[0][0][0], MAXT)
        torch.manual_seed(0)
        model = pack_hf.noisy(transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32))
        model.save_pretrained(os.path.join(d, "model_" + fam))
        model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(d, "model_" + fam),
                                                                  dtype=torch.float32, attn_implementation="eager")
        mean, count = pack_hf.doc_loss(model, docs)
        print(f"{fam} {mean:.9f} {count} {max(len(i) for i, _ in docs)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
