#!/usr/bin/env bash
# The tokenizer travels with every model: `ferry train --tokenizer T --save`
# of a fresh model writes T into the save (a Hugging Face directory's
# tokenizer.json, an llm.c FILE's FILE.tokenizer), a resume's save carries
# it on, and `ferry sample --prompt` encodes with it, no --tokenizer given.
. "$(dirname "$0")/lib.bash"
for d in 0 1 2 3; do
	for i in $(seq 1 30); do echo "doc $d line $i: the quick brown fox jumps over the lazy dog"; done >"text$d.txt"
done
"$FERRY" tokenizer train --vocab 300 --out tok.json text?.txt >/dev/null 2>&1 || { echo "no tokenizer" >&2; exit 1; }
"$FERRY" data --tokenizer tok.json --out c text?.txt >/dev/null 2>&1 || { echo "no shards" >&2; exit 1; }
SHAPE=(--layers 1 --channels 32 --heads 2 --vocab 300 --max-seq 32 --batch 2 --seq 16 --threads 2 --sample 0
	--data 'c_train_*.bin')

expect_ok "a fresh Llama saved with --tokenizer" "$FERRY" train --model llama "${SHAPE[@]}" --steps 2 \
	--tokenizer tok.json --save dir
cmp -s tok.json dir/tokenizer.json || fail "dir/ holds the run's tokenizer.json: $(ls dir)"
grep -q "with tokenizer.json" out.txt || fail "the save names it: $(grep saved out.txt)"
expect_ok "sample --prompt from the directory alone" "$FERRY" sample --checkpoint dir --prompt "doc 1" --tokens 3 \
	--threads 2
head -c 5 out.txt | grep -qx "doc 1" || fail "the prompt, then the sample: $(cat out.txt)"
expect_ok "a resumed Llama" "$FERRY" train --resume dir --steps 3 --save dir2 --sample 0 --threads 2
cmp -s tok.json dir2/tokenizer.json || fail "a resume's save carries it on: $(ls dir2)"

expect_ok "a fresh GPT-2 saved with --tokenizer" "$FERRY" train "${SHAPE[@]}" --steps 2 --tokenizer tok.json \
	--save m.bin
cmp -s tok.json m.bin.tokenizer || fail "m.bin.tokenizer is the run's tokenizer: $(ls)"
grep -q "saved m.bin and m.bin.state and m.bin.tokenizer" out.txt || fail "the save names it: $(grep saved out.txt)"
expect_ok "sample --prompt from the llm.c file alone" "$FERRY" sample --checkpoint m.bin --prompt "doc 2" --tokens 3 \
	--threads 2
head -c 5 out.txt | grep -qx "doc 2" || fail "the prompt, then the sample: $(cat out.txt)"
expect_ok "a resumed GPT-2" "$FERRY" train --resume m.bin --steps 3 --save m2.bin --sample 4 --threads 2
cmp -s tok.json m2.bin.tokenizer || fail "a resume's save carries it on: $(ls)"
grep -q "no sample" err.txt && fail "the resume's sample uses it: $(cat err.txt)"

expect_ok "a byte-level save without --tokenizer" "$FERRY" train --layers 1 --channels 32 --heads 2 --max-seq 32 \
	--batch 2 --seq 16 --threads 2 --sample 0 --data 'c_train_*.bin' --vocab 300 --steps 1 --save plain.bin
[ ! -e plain.bin.tokenizer ] || fail "no tokenizer given, none written"
expect_error "a tokenizer that is not there, before step 1" "nothing.json" "$FERRY" train "${SHAPE[@]}" --steps 1 \
	--tokenizer nothing.json --save m3.bin
[ ! -e m3.bin ] || fail "nothing written"
finish
