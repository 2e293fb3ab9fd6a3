#!/usr/bin/env bash
# ferry data --tokenizer and ferry sample with a Hugging Face tokenizer.json
# written here (Llama-2-style: '▁' normalizer, byte fallback, <s> template):
# JSON Lines, gzip and zstd inputs give the same shards, whatever the thread
# count; documents start with BOS; a vocabulary past 65536 ids writes
# version-2 (uint32) shards that train and eval read; sample encodes its
# prompt with the checkpoint directory's tokenizer.json; refusals are clear.
. "$(dirname "$0")/lib.bash"

# tokenizer.json: <unk> <s> </s>, <0x00>..<0xFF>, '▁' and a-z, two merges
write_tokenizer() { # DIR [EXTRA_ADDED_TOKEN_ID]
	local dir=$1 extra=${2:-} vocab='"<unk>":0,"<s>":1,"</s>":2' i=3 c added entry
	for b in $(seq 0 255); do
		printf -v entry ',"<0x%02X>":%d' "$b" $((i++))
		vocab+=$entry
	done
	vocab+=",\"▁\":$((i++))"
	for c in a b c d e f g h i j k l m n o p q r s t u v w x y z; do vocab+=",\"$c\":$((i++))"; done
	vocab+=",\"▁t\":$((i++)),\"he\":$((i++))"
	added='{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}'
	[ -n "$extra" ] && added+=",{\"id\":$extra,\"content\":\"<big>\",\"special\":true}"
	mkdir -p "$dir"
	cat >"$dir/tokenizer.json" <<JSON
{"added_tokens":[$added],
 "normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
 "pre_tokenizer":null,
 "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
   "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
 "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
 "model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,"vocab":{$vocab},"merges":["▁ t","h e"]}}
JSON
}
write_tokenizer tok
write_tokenizer big 70000

for i in $(seq 1 40); do
	printf '{"text": "the doc %d: over the hill, caf\\u00e9 \\u65e5 \\ud83d\\ude42", "id": %d}\n' "$i" "$i"
done >docs.jsonl
gzip -k docs.jsonl

# header int [1] (the version) and the first token (uint16) of a shard
version() { od -A n -t d4 -j 4 -N 4 "$1" | tr -d ' '; }
first_token() { od -A n -t u2 -j 1024 -N 2 "$1" | tr -d ' '; }

expect_ok "data --tokenizer DIR, JSON Lines" "$FERRY" data --tokenizer tok --out a/x docs.jsonl
grep -q "tokenizer tok: 288 ids (shards of uint16 tokens), BOS 1, EOS 2" out.txt || fail "describes the tokenizer: $(cat out.txt)"
grep -q "40 documents from 1 file" out.txt || fail "40 documents: $(cat out.txt)"
[ "$(version a/x_train_000000.bin)" = 1 ] || fail "a small vocabulary writes version 1"
[ "$(first_token a/x_train_000000.bin)" = 1 ] || fail "documents start with <s> (1)"
expect_ok "data --threads 1 from .gz" "$FERRY" data --tokenizer tok/tokenizer.json --out b/x --threads 1 docs.jsonl.gz
expect_ok "data --threads 2" "$FERRY" data --tokenizer tok --out c/x --threads 2 docs.jsonl
for s in train val; do
	cmp -s a/x_${s}_000000.bin b/x_${s}_000000.bin || fail "$s: .gz with 1 thread differs"
	cmp -s a/x_${s}_000000.bin c/x_${s}_000000.bin || fail "$s: 2 threads differ"
done
if command -v zstd >/dev/null; then
	zstd -q docs.jsonl -o docs.jsonl.zst
	expect_ok "data from .zst" "$FERRY" data --tokenizer tok --out d/x docs.jsonl.zst
	cmp -s a/x_train_000000.bin d/x_train_000000.bin || fail ".zst differs"
fi
# --text-field, and a record without it named by line
sed 's/"text"/"body"/' docs.jsonl >body.jsonl
expect_ok "--text-field body" "$FERRY" data --tokenizer tok --out e/x --text-field body body.jsonl
cmp -s a/x_train_000000.bin e/x_train_000000.bin || fail "--text-field body differs"
expect_error "a record without the field" 'body.jsonl:1: no string field "text"' \
	"$FERRY" data --tokenizer tok --out f/x body.jsonl
expect_error "FILEs without --out" "FILEs need --out PREFIX" "$FERRY" data --tokenizer tok docs.jsonl
[ -e data ] && fail "nothing written under data/"
echo '{"model":{"type":"WordPiece","vocab":{}}}' >wp.json
expect_error "an unsupported tokenizer" "wp.json: model type WordPiece is not supported" \
	"$FERRY" data --tokenizer wp.json --out g/x docs.jsonl
expect_error "a directory without tokenizer.json" "a: no tokenizer.json in the directory" \
	"$FERRY" data --tokenizer a --out g/x docs.jsonl
echo "one single document" >one.txt
expect_ok "one document" "$FERRY" data --tokenizer tok --out h/x one.txt
grep -q "warning: no document went to validation" err.txt || fail "warns that val is empty: $(cat err.txt)"

# past 65536 ids: uint32 shards that train and eval read
expect_ok "data with 70001 ids" "$FERRY" data --tokenizer big --out w/x --val-fraction 0.25 docs.jsonl
[ "$(version w/x_train_000000.bin)" = 2 ] || fail "a large vocabulary writes version 2"
[ "$(od -A n -t u4 -j 1024 -N 4 w/x_train_000000.bin | tr -d ' ')" = 1 ] || fail "uint32 BOS first"
expect_ok "train on uint32 shards" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --kv-heads 1 \
	--vocab 70001 --max-seq 32 --batch 2 --seq 16 --steps 3 --threads 2 --sample 0 \
	--data 'w/x_train_*.bin' --val-data 'w/x_val_*.bin' --save big_run
expect_ok "eval on uint32 shards" "$FERRY" eval --checkpoint big_run --data 'w/x_val_*.bin' --batch 2 --seq 16 --threads 2

# sample: the prompt encoded by the directory's tokenizer.json
expect_ok "a model for the tokenizer" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --kv-heads 1 \
	--vocab 288 --max-seq 32 --batch 2 --seq 16 --steps 3 --threads 2 --sample 0 --data 'a/x_train_*.bin' --save run
cp tok/tokenizer.json run/
expect_ok "train's sample through --tokenizer" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 \
	--kv-heads 1 --vocab 288 --max-seq 32 --batch 2 --seq 16 --steps 2 --threads 2 --sample 6 --tokenizer tok \
	--data 'a/x_train_*.bin' || tail -20 out.txt >&2
grep -A1 -- "--- sample (6 tokens" out.txt | tail -1 | grep -q '<[0-9]' && fail "sample tokens printed as ids: $(cat out.txt)"
expect_ok "sample --prompt with the directory's tokenizer" "$FERRY" sample --checkpoint run --prompt "the hill" \
	--tokens 5 --threads 2
head -c 8 out.txt | grep -qx "the hill" || fail "prints the prompt: $(cat out.txt)"
# <s>, then ▁t he ▁ h i l l (7)
grep -q "after a prompt of 8," err.txt || fail "<s> and 7 tokens: $(cat err.txt)"
finish
