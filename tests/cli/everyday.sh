#!/usr/bin/env bash
# Everyday use (issue 40, item 14): the model's vocabulary checked against
# the shards before step 1, naming the --vocab that fits; ferry eval at the
# batch and sequence the checkpoint was trained at; --log-every N; a stray
# path says the glob was not quoted; --place naming a group twice,
# --policy '' and a malformed --policy beside --place activations= refused.
. "$(dirname "$0")/lib.bash"
make_corpus
for d in 0 1 2 3; do
	for i in $(seq 1 30); do echo "doc $d line $i: the quick brown fox jumps over the lazy dog"; done >"text$d.txt"
done
"$FERRY" tokenizer train --vocab 300 --out tok.json text?.txt >/dev/null 2>&1 || { echo "no tokenizer" >&2; exit 1; }
"$FERRY" data --tokenizer tok.json --out bpe text?.txt >/dev/null 2>&1 || { echo "no shards" >&2; exit 1; }
SHAPE=(--layers 1 --channels 16 --heads 2 --max-seq 64 --batch 2 --seq 16 --threads 2 --sample 0)

# token ids up to 299 against a byte-level model of 257: refused before step 1
expect_error "data past the vocabulary" "bpe_train_000000.bin holds token id 299, past the model's vocabulary of 257: a model for this data needs --vocab 300 or more" \
	"$FERRY" train "${SHAPE[@]}" --data 'bpe_train_*.bin' --steps 1
grep -q '^step' out.txt && fail "no step taken: $(cat out.txt)"
expect_error "validation data past it" "bpe_train_000000.bin holds token id 299" \
	"$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --val-data 'bpe_train_*.bin' --steps 1
expect_ok "a byte-level model" "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 2 --save byte.bin
expect_error "a checkpoint's vocabulary" "made with another tokenizer than the model's, whose ids need a vocabulary of 300 or more" \
	"$FERRY" train --checkpoint byte.bin --data 'bpe_train_*.bin' --steps 1 --threads 2 --sample 0 --batch 2 --seq 16

expect_ok "eval at the trained batch and sequence" "$FERRY" eval --checkpoint byte.bin --data 'corpus_val_*.bin' \
	--batches 2 --threads 2
grep -q "^batches 2 of 2 x 16 tokens (the batch and sequence it was trained at)" out.txt || fail "$(cat out.txt)"
expect_ok "eval with --seq given" "$FERRY" eval --checkpoint byte.bin --data 'corpus_val_*.bin' --batches 2 \
	--threads 2 --seq 8
grep -q "^batches 2 of 2 x 8 tokens (the batch it was trained at)" out.txt || fail "$(cat out.txt)"
expect_error "eval --batch 0" "--batch and --seq must be positive" "$FERRY" eval --checkpoint byte.bin \
	--data 'corpus_val_*.bin' --batch 0

expect_ok "--log-every 5" "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 12 --log-every 5 \
	--json steps.jsonl
[ "$(grep '^step' out.txt | awk '{ print $2 }' | tr '\n' ' ')" = "1/12 5/12 10/12 12/12 " ] ||
	fail "lines of steps 1, 5, 10 and the last: $(grep '^step' out.txt)"
[ "$(grep -c '"step"' steps.jsonl)" -eq 12 ] || fail "--json gets every step: $(wc -l <steps.jsonl)"
expect_error "--log-every 0" "--log-every 0: 1 or more" "$FERRY" train --log-every 0

# the shell expands --data corpus_*.bin: the second file is a stray argument
expect_error "an unquoted glob" "unexpected argument 'corpus_val_000000.bin' after --data: the shell expanded an unquoted glob" \
	"$FERRY" train --data corpus_train_000000.bin corpus_val_000000.bin
expect_error "a stray path" "unexpected argument 'text0.txt': a path" "$FERRY" train --steps 1 text0.txt

expect_error "--place naming a group twice" "--place: adam is named twice" \
	"$FERRY" plan --place 'adam=host:cpu,adam=device'
expect_error "--policy ''" "--policy '': name a policy" "$FERRY" plan --policy ''
expect_error "a malformed --policy beside --place activations=" "unknown policy 'bogus'" \
	"$FERRY" plan --policy bogus --place activations=full
finish
