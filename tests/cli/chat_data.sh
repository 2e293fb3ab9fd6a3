#!/usr/bin/env bash
# ferry data --chat (issue 38 item 3) on its own, no reference library:
# version-3 shards of whole conversations (a document never straddles two
# shards, every shard starts one, the val split as for text), .gz and .zst
# input (the same shards), and
# bad input refused naming FILE:LINE with nothing written (a line that is
# not JSON, a role the template raises on, no assistant turn, a tokenizer
# without a template, a template outside the subset).
. "$(dirname "$0")/lib.bash"
REF=$(cd "$(dirname "$0")/../chat" && pwd)/chat_ref.py

mkdir tok
printf 'hello world, how are you? fine thanks. user assistant system\n%.0s' 1 2 3 >corpus.txt
expect_ok "a tokenizer" "$FERRY" tokenizer train --vocab 300 --special '<|im_start|>' --special '<|im_end|>' \
	--out tok/tokenizer.json corpus.txt
cat >tok/tokenizer_config.json <<'JSON'
{"eos_token": "<|im_end|>", "chat_template": "{%- for m in messages %}\n{%- if m.role not in ['system', 'user', 'assistant'] %}\n{{- raise_exception('Unknown role: ' ~ m.role) }}\n{%- endif %}\n{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\n{%- endfor %}\n{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"}
JSON
conv() { printf '{"messages": [{"role": "user", "content": "how are you %s?"}, {"role": "assistant", "content": "fine thanks %s"}]}\n' "$1" "$1"; }
for i in 1 2 3 4 5 6; do conv $i; done >good.jsonl
printf '{"prompt": "hello", "completion": "world"}\n' >>good.jsonl
gzip -k good.jsonl

expect_ok "conversations to shards" "$FERRY" data --chat --tokenizer tok --val-fraction 0.25 --shard-tokens 40 \
	--out out/c good.jsonl.gz
checks=$((checks + 1))
if python3 - "$REF" out/c_train_*.bin -- out/c_val_*.bin <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("chat_ref", sys.argv[1]); ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
cut = sys.argv.index("--")
train, val = sys.argv[2:cut], sys.argv[cut + 1:]
for path in train + val:
    raw = open(path, "rb").read()
    assert raw[1024 + 4 * int.from_bytes(raw[8:12], "little")] & 2, path + ": does not start a document"
    assert len(ref.shard_docs(path)) >= 1
docs_t = [d for p in train for d in ref.shard_docs(p)]
docs_v = [d for p in val for d in ref.shard_docs(p)]
assert len(docs_t) == 6 and len(docs_v) == 1, (len(docs_t), len(docs_v))  # the 4th of 7 is val
assert len(train) >= 3, train  # 40-token shards: several, each of whole conversations
for d in docs_t + docs_v:
    assert any(f & 1 for f in d["flags"]) and not all(f & 1 for f in d["flags"]), d
print("ok: %d train shards, %d documents, %d val; every shard starts a document" % (len(train), len(docs_t), len(docs_v)))
PY
then :; else fail "the shards"; fi

# .zst reads as .gz does: the same shards (where a zstd program can make one)
if command -v zstd >/dev/null; then
	zstd -q good.jsonl -o good.jsonl.zst
	expect_ok "conversations from .zst" "$FERRY" data --chat --tokenizer tok --val-fraction 0.25 --shard-tokens 40 \
		--out zst/c good.jsonl.zst
	checks=$((checks + 1))
	[ "$(cd out && cat c_* | md5sum)" = "$(cd zst && cat c_* | md5sum)" ] && [ "$(ls out)" = "$(ls zst)" ] &&
		echo "ok: .zst gives the .gz run's shards" || fail ".zst and .gz shards differ: $(ls out zst)"
fi

# bad input: FILE:LINE, nothing written (the corpus of out/c stays as it was)
before=$(cat out/c_* | md5sum)
{ conv 1; echo '{"messages": [oops'; } >notjson.jsonl
expect_error "a line that is not JSON" "notjson.jsonl:2: not JSON" \
	"$FERRY" data --chat --tokenizer tok --out out/c notjson.jsonl
{ conv 1; conv 2; printf '{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}\n'; } >role.jsonl
expect_error "a role the template raises on" "role.jsonl:3: chat template line 3: raise_exception: Unknown role: tool" \
	"$FERRY" data --chat --tokenizer tok --out out/c role.jsonl
{ conv 1; printf '{"messages": [{"role": "user", "content": "x"}]}\n'; } >noasst.jsonl
expect_error "no assistant turn" "noasst.jsonl:2: the conversation has no assistant turn" \
	"$FERRY" data --chat --tokenizer tok --out out/c noasst.jsonl
printf '{"text": "hi"}\n' >text.jsonl
expect_error "a record without messages" "text.jsonl:1: a record needs \"messages\"" \
	"$FERRY" data --chat --tokenizer tok --out out/c text.jsonl
mkdir notmpl && cp tok/tokenizer.json notmpl/
expect_error "a tokenizer without a template" "notmpl: no chat template" \
	"$FERRY" data --chat --tokenizer notmpl --out out/c good.jsonl
mkdir macro && cp tok/tokenizer.json macro/
printf '{"chat_template": "a\\n{%% macro m() %%}x{%% endmacro %%}"}' >macro/tokenizer_config.json
expect_error "a template outside the subset" "line 2: 'macro' is outside the subset ferry interprets" \
	"$FERRY" data --chat --tokenizer macro --out out/c good.jsonl
# an assistant turn the whole conversation renders otherwise: its span stops
# where the renderings part, and a conversation left with no target is refused
mkdir rewrite && cp tok/tokenizer.json rewrite/
cat >rewrite/tokenizer_config.json <<'JSON'
{"chat_template": "{%- for m in messages %}{{ m.role }}:{% if m.role == 'assistant' and not loop.last %}(old){% else %}{{ m.content }}{% endif %}\n{% endfor %}{%- if add_generation_prompt %}assistant:{% endif %}"}
JSON
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "fine"}, {"role": "user", "content": "bye"}]}\n' >rewritten.jsonl
expect_error "no token in an assistant span" "rewritten.jsonl:1: no token lies in an assistant span" \
	"$FERRY" data --chat --tokenizer rewrite --out out/c rewritten.jsonl
expect_error "--text-field with --chat" "--doc-sep and --text-field do not apply" \
	"$FERRY" data --chat --tokenizer tok --text-field x --out out/c good.jsonl
checks=$((checks + 1))
if [ "$(cat out/c_* | md5sum)" = "$before" ] && ! ls out | grep -q tmp; then
	echo "ok: the failed runs left out/c as it was"
else
	fail "a failed run changed out/c or left a temporary"; ls -l out >&2
fi
finish
