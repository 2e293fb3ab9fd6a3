#!/usr/bin/env bash
# ferry data and ferry tokenizer train on inputs that are not what they
# should be (issue 40): a .gz, .zst or JSON Lines file cut short is refused
# naming the file, not read as half a corpus; the corpus of the prefix stays
# as it was.  JSON Lines written with a UTF-8 BOM read as without.  A
# tokenizer's regex that hits PCRE2's match limit is named with the
# tokenizer and the document.  --out or --tokenizer with no FILE (an empty
# glob in a script) is refused, not read as the demo corpus unless --demo
# asks for it.
. "$(dirname "$0")/lib.bash"

for i in $(seq 1 3000); do echo "{\"text\": \"document $i: $RANDOM $RANDOM $RANDOM\"}"; done >docs.jsonl
expect_ok "the corpus" "$FERRY" data --out c/x --val-fraction 0 docs.jsonl
cp c/x_train_000000.bin before.bin

# cut FILE: its first half, as cut_FILE
cut_half() { head -c $(($(stat -c %s "$1") / 2)) "$1" >"cut_$1"; }
gzip -k docs.jsonl && cut_half docs.jsonl.gz
expect_error "a .gz cut short" "cut_docs.jsonl.gz: gzip: the file ends inside the stream (truncated?)" \
	"$FERRY" data --out c/x --val-fraction 0 cut_docs.jsonl.gz
expect_error "tokenizer train on a .gz cut short" "cut_docs.jsonl.gz: gzip: the file ends inside the stream" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json cut_docs.jsonl.gz
if command -v zstd >/dev/null; then
	zstd -q docs.jsonl && cut_half docs.jsonl.zst
	expect_error "a .zst cut short" "cut_docs.jsonl.zst: zstd: the file ends inside a frame (truncated?)" \
		"$FERRY" data --out c/x --val-fraction 0 cut_docs.jsonl.zst
	# two frames, the second cut: the first is whole, the file is not
	zstd -q -c docs.jsonl >two.jsonl.zst && head -c 100 docs.jsonl.zst >>two.jsonl.zst
	expect_error "a second .zst frame cut short" "two.jsonl.zst: zstd: the file ends inside a frame" \
		"$FERRY" data --out c/x --val-fraction 0 two.jsonl.zst
fi
printf '{"text": "one"}\n{"text": "tw' >cut.jsonl
expect_error "JSON Lines cut short" "cut.jsonl:2: not JSON: " "$FERRY" data --out c/x --val-fraction 0 cut.jsonl
grep -q "the file ends in this line, with no newline: is it cut short?" err.txt || fail "says cut short: $(cat err.txt)"
printf '{"text": "one"}\n{"text": "tw\n{"text": "three"}\n' >bad.jsonl
expect_error "a bad line inside" "bad.jsonl:2: not JSON: " "$FERRY" data --out c/x --val-fraction 0 bad.jsonl
grep -q "cut short" err.txt && fail "a line ended by a newline is not called cut short: $(cat err.txt)"
cmp -s c/x_train_000000.bin before.bin || fail "the corpus changed"
ls c | grep -q '\.tmp\.' && fail "temporaries left: $(ls c)"
[ -e tok.json ] && fail "tokenizer train wrote tok.json"

{ printf '\xef\xbb\xbf'; cat docs.jsonl; } >bom.jsonl
expect_ok "JSON Lines with a BOM" "$FERRY" data --out bom/x --val-fraction 0 bom.jsonl
cmp -s bom/x_train_000000.bin before.bin || fail "a BOM changes the shards"

# (a|a)+$ backtracks 2^40 ways over 40 a's and a b
cat >slow.json <<'JSON'
{"added_tokens":[{"id":0,"content":"<|endoftext|>","special":true}],
 "pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a|a)+$"},"behavior":"Isolated"},
 "model":{"type":"BPE","vocab":{"<|endoftext|>":0,"a":1,"b":2},"merges":[]}}
JSON
{ echo '{"text": "ok"}'; echo '{"text": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}'; } >slow.jsonl
expect_error "a regex past the match limit" \
	"slow.jsonl:2: tokenizer slow.json: pre_tokenizer Split /(a|a)+\$/: match limit exceeded (PCRE2 error -47)" \
	"$FERRY" data --tokenizer slow.json --out s/x slow.jsonl
printf 'ok\n%%\nab\n%%\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\n' >slow.txt
expect_error "a regex past the match limit, plain text" "slow.txt (document 3 of the corpus): tokenizer slow.json:" \
	"$FERRY" data --tokenizer slow.json --out s/x --doc-sep % slow.txt

expect_error "--out and no FILE" "ferry data: --out given but no FILE to read (--demo for the demo corpus)" \
	"$FERRY" data --out nofiles/x
expect_error "--tokenizer and no FILE" "--tokenizer given but no FILE to read" \
	"$FERRY" data --tokenizer slow.json
expect_error "--demo and FILEs" "--demo reads the demo corpus, not FILEs" "$FERRY" data --demo --out nofiles/x slow.txt
[ -e nofiles ] && fail "a refused run wrote nofiles/: $(ls nofiles)"
if [ -d /usr/share/common-licenses ] || [ -d /usr/share/games/fortunes ]; then
	expect_ok "--demo --out" "$FERRY" data --demo --out demo/x
	grep -q "demo corpus" out.txt && [ -f demo/x_train_000000.bin ] || fail "--demo wrote no demo corpus: $(cat out.txt)"
fi
finish
