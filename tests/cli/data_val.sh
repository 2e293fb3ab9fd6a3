#!/usr/bin/env bash
# ferry data (issue 25 item 12): one big file with --val-fraction 0.1 is one
# document, so validation gets none: it says so rather than printing
# "val: 0 tokens" alone; FILEs without --out are refused, and nothing is
# written under data/ (the demo corpus's data/demo_* stays as it was).
. "$(dirname "$0")/lib.bash"
# 200 paragraphs of 100 lines, a blank line after each
for i in $(seq 1 20000); do
	echo "line $i of one big file: the quick brown fox jumps over the lazy dog"
	[ $((i % 100)) -eq 0 ] && echo
done >big.txt
expect_ok "one big file with --val-fraction 0.1" "$FERRY" data --out W/big --val-fraction 0.1 big.txt
grep -q "^ferry data: warning: no document went to validation (1 document;" err.txt ||
	fail "warns that val got no document: $(cat err.txt)"
grep -q "val:   0 tokens in 0 shards" out.txt || fail "val is empty: $(cat out.txt)"
[ ! -e W/big_val_000000.bin ] || fail "a val shard was written"
expect_ok "the same file split by --doc-sep" "$FERRY" data --out W/split --val-fraction 0.1 --doc-sep "" big.txt
grep -q "warning" err.txt && fail "warns although val got documents: $(cat err.txt)"

expect_error "FILEs without --out" "FILEs need --out PREFIX" "$FERRY" data --val-fraction 0.1 big.txt
[ -e data ] && fail "wrote under data/: $(ls -R data)"
finish
