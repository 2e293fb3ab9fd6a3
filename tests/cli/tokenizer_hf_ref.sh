#!/usr/bin/env bash
# Tokenizer files written here that Hugging Face's `tokenizers` (the
# reference) encodes: ferry data gives every document the ids it gives.
#  - split.json: Split pre-tokenizers with {"String": ...} patterns (one
#    non-ASCII), Isolated and Removed, before merges that would cross them
#    (issue 40 item 4: such a pattern was refused);
#  - llama.json: Llama-2-style (Prepend and Replace to "▁", byte fallback)
#    with added tokens marked normalized: true, which match in the
#    normalized text by their normalized form ("▁<s>"), so "a<s>b" holds no
#    added token and "a <s>b" does (issue 40 item 5).
# Skipped (77) without a Python that imports tokenizers: set
# FERRY_TORCH_PYTHON to a venv's python, or pip install tokenizers.
. "$(dirname "$0")/lib.bash"

PY=
for p in ${FERRY_TORCH_PYTHON:-} python3 /usr/bin/python3; do
	"$p" -c "import tokenizers" 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "skip: no python imports tokenizers (pip install tokenizers, or set FERRY_TORCH_PYTHON)"; exit 77; }

# the files and the documents, then the reference's ids per document
"$PY" - <<'PY'
import json

def vocab_of(extra):
    v = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        v["<0x%02X>" % b] = len(v)
    for t in ["▁"] + list("abcdefghijklmnopqrstuvwxyz-é") + extra:
        v.setdefault(t, len(v))
    return v

def added(content, i, special, normalized):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": special}

bos = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                 {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
merges = [["a", "-"], ["-", "b"], ["a", "é"], ["é", "b"], ["a", "b"], ["▁", "a"], ["▁", "b"]]
split = {"version": "1.0", "added_tokens": [added(t, i, True, False) for i, t in enumerate(["<unk>", "<s>", "</s>"])],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated", "invert": False},
             {"type": "Split", "pattern": {"String": "é"}, "behavior": "Removed", "invert": False},
             {"type": "Split", "pattern": {"String": "."}, "behavior": "MergedWithPrevious", "invert": False}]},
         "post_processor": bos, "decoder": None,
         "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                   "vocab": vocab_of(["a-", "-b", "aé", "éb", "ab", "▁a", "▁b"]), "merges": merges}}
vocab = vocab_of(["a-", "-b", "aé", "éb", "ab", "▁a", "▁b", "<x>"])
llama = dict(split, pre_tokenizer=None,
             added_tokens=[added(t, i, True, True) for i, t in enumerate(["<unk>", "<s>", "</s>"])] +
                          [added("<x>", vocab["<x>"], False, True)],
             normalizer={"type": "Sequence", "normalizers": [
                 {"type": "Prepend", "prepend": "▁"},
                 {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
             model=dict(split["model"], vocab=vocab))
json.dump(split, open("split.json", "w"), ensure_ascii=False)
json.dump(llama, open("llama.json", "w"), ensure_ascii=False)
docs = ["a-b", "a--b-", "aéb", "ébaé", "a.b.", "a-é.b", "x a-b é", "a<s>b", "a <s>b", "<s>", " <s> a",
        "a</s>", "b </s>", "a<x>b", "a <x> b", "<x>", "<s><x></s>", "ab-ab ab"]
with open("docs.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
PY

# check NAME: ferry's shard for NAME.json holds, document by document,
# the ids tokenizers gives (BOS first: the template adds it)
check() {
	local name=$1
	expect_ok "data --tokenizer $name.json" "$FERRY" data --tokenizer "$name.json" --out "$name/x" \
		--val-fraction 0 --threads 1 docs.jsonl || return
	checks=$((checks + 1))
	if "$PY" - "$name" <<'PY'; then echo "ok: $name.json: the ids tokenizers gives"; else fail "$name.json: other ids"; fi
import json, struct, sys
from tokenizers import Tokenizer
name = sys.argv[1]
tok = Tokenizer.from_file(name + ".json")
want = []
docs = [json.loads(l)["text"] for l in open("docs.jsonl")]
data = open(name + "/x_train_000000.bin", "rb").read()
n = struct.unpack("<3i", data[:12])[2]
got = list(struct.unpack("<%dH" % n, data[1024:1024 + 2 * n]))
at, bad = 0, 0
for d in docs:
    ids = tok.encode(d).ids
    mine = got[at:at + len(ids)]
    if mine != ids:
        print("  %r: ferry %s, tokenizers %s" % (d, mine, ids))
        bad += 1
        break
    at += len(ids)
if not bad and at != n:
    print("  ferry wrote %d ids, tokenizers gives %d" % (n, at))
    bad = 1
sys.exit(1 if bad else 0)
PY
}
check split
check llama
finish
