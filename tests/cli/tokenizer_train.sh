#!/usr/bin/env bash
# ferry tokenizer train: a byte-level BPE learned on a corpus with contractions,
# digits, whitespace runs, non-ASCII text and a special token inside text is
# written as a tokenizer.json; the same file at any thread count; ferry data
# --tokenizer encodes with it; and Python's `tokenizers` (the test
# environment's, ref_python in lib.bash; skipped, 77, without it) loads the file and encodes every document to the ids in ferry's shards
# (the independent check: thousands of distinct words, so the merges do not
# run out before the vocabulary); bad usage is refused with one line.
. "$(dirname "$0")/lib.bash"

python3 - <<'PY'
import random
random.seed(7)
words = ["the", "quick", "brown", "fox", "don't", "we'll", "it's", "naïve", "café", "Zürich", "日本語",
         "テスト", "emoji🙂", "1234", "2026", "x=y+1;", "  spaced", "\ttab", "über", "ok!"]
for f in range(4):
    with open(f"doc{f}.txt", "w", encoding="utf-8") as out:
        for line in range(400):
            line_words = [random.choice(words) if random.random() < 0.6 else
                          "".join(random.choice("abcdeéfghiklmnoprstuü日本") for _ in range(random.randint(1, 9)))
                          for _ in range(random.randint(3, 12))]
            out.write(" ".join(line_words))
            out.write("<|endoftext|>" if line % 97 == 5 else "")
            out.write("\n" if line % 13 else "\n\n   \n")
PY

expect_ok "train, 1 thread" "$FERRY" tokenizer train --vocab 1200 --out one.json --threads 1 doc?.txt
expect_ok "train, 2 threads" "$FERRY" tokenizer train --vocab 1200 --out two.json --threads 2 doc?.txt
cmp -s one.json two.json || fail "the tokenizer depends on --threads"
expect_ok "data with the trained tokenizer" "$FERRY" data --tokenizer one.json --out shards --val-fraction 0 doc?.txt
ls shards_train_*.bin >/dev/null 2>&1 || fail "no shards written"

# the independent check: Hugging Face's tokenizers reads the file and gives
# every document the ids ferry wrote (each document starts with the
# end-of-text token, as ferry data separates GPT-2-style documents); without
# it the test ends skipped
ref_python tokenizers && "$REF_PY" - <<'PY'
import glob, sys
from tokenizers import Tokenizer
import struct
tok = Tokenizer.from_file("one.json")
eot = tok.token_to_id("<|endoftext|>")
want = []
for f in sorted(glob.glob("doc?.txt")):
    want.append(eot)
    want += tok.encode(open(f, encoding="utf-8").read(), add_special_tokens=False).ids
got = []
for path in sorted(glob.glob("shards_train_*.bin")):
    data = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", data[:12])
    width = 2 if version == 1 else 4
    got += list(struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", data[1024:1024 + n * width]))
if sorted(got) != sorted(want) or len(got) != len(want):
    print(f"FAIL: ferry wrote {len(got)} ids, tokenizers gives {len(want)}")
    sys.exit(1)
# documents may be written in another order: compare them as a multiset of documents
def docs(ids):
    out, cur = [], None
    for i in ids:
        if i == eot:
            if cur is not None:
                out.append(tuple(cur))
            cur = []
        else:
            cur.append(i)
    out.append(tuple(cur))
    return sorted(out)
if docs(got) != docs(want):
    print("FAIL: ferry's ids differ from tokenizers' for some document")
    sys.exit(1)
print(f"tokenizers agrees on all {len(want)} ids")
PY
rc=$?
[ $rc -eq 0 ] || [ -n "$ref_missing" ] || fail "Hugging Face tokenizers encodes ferry's tokenizer.json differently"

expect_error "no vocab" "--vocab" "$FERRY" tokenizer train --out x.json doc0.txt
expect_error "vocab below the bytes" "vocab" "$FERRY" tokenizer train --vocab 100 --out x.json doc0.txt
expect_error "no files" "" "$FERRY" tokenizer train --vocab 1200 --out x.json
finish
