#!/usr/bin/env bash
# Version-3 data (packed documents, docs/data.md): ferry train reports the
# counted targets and its loss is their mean; ferry eval reads every
# document once and gives the same loss and count for any --seq that holds
# the longest document (so no document sees another: positions restart and
# attention stops at its start); a document longer than --seq is refused,
# naming it, unless --truncate; token streams print as before.
W=$(cd "$(dirname "$0")" && pwd)/pack_write.py
. "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
read -r n_train long_train < <(python3 "$W" docs_train_000000.bin 1 60 2 20)
read -r n_val long_val < <(python3 "$W" docs_val_000000.bin 2 25 2 20)
python3 "$W" long_000000.bin 3 6 30 40 >/dev/null

GPT=(--layers 2 --channels 32 --heads 2 --max-seq 64 --threads 2)
expect_ok "train on documents" "$FERRY" train "${GPT[@]}" --data 'docs_train_*.bin' --batch 4 --seq 24 --steps 30 \
	--lr 3e-3 --log-every 10 --sample 0 --json steps.jsonl --save gpt.bin
grep -Eq '^step +10/30 \| loss [0-9.]+ \| .* \| [0-9]+ targets \|' out.txt ||
	fail "a step line says its counted targets: $(grep '^step' out.txt | head -n 2)"
grep -q 'counted targets a step' out.txt || fail "the summary says the targets: $(grep summary out.txt)"
grep -q '"targets": ' steps.jsonl || fail "the JSON records the targets: $(head -n 1 steps.jsonl)"
first=$(head -n 1 steps.jsonl | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
last=$(tail -n 1 steps.jsonl | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }' || fail "the loss falls: $first -> $last"

# shuffled rows (the default) resume where they were, across an epoch (7
# batches of 4 rows): 5 steps and a resume to 10 save the bits of 10 steps
R=(--data 'docs_train_*.bin' --batch 4 --seq 24 --lr 3e-3 --sample 0)
expect_ok "10 steps" "$FERRY" train "${GPT[@]}" "${R[@]}" --steps 10 --save ten.bin
expect_ok "5 steps" "$FERRY" train "${GPT[@]}" "${R[@]}" --steps 5 --save five.bin
expect_ok "resumed to 10" "$FERRY" train --resume five.bin --steps 10 --save five.bin --threads 2 --sample 0
checks=$((checks + 1))
cmp -s ten.bin five.bin && cmp -s ten.bin.state five.bin.state || fail "a resume on documents: other bits"

# the loss is the mean over the step's counted targets, whatever the
# micro-batches: 4 rows at once, or 2 micro-batches of 2 rows, the same
# first loss bit for bit (a mean of the micro-batches' means would differ)
# and the same gradients (norms) within rounding; validation on documents
# (the same rows: 3 batches of 4, 6 of 2)
A=(--data 'docs_train_*.bin' --val-data 'docs_val_*.bin' --val-every 2 --seq 24 --steps 4 --lr 1e-2 --shuffle off
	--sample 0)
expect_ok "4 rows a step" "$FERRY" train "${GPT[@]}" "${A[@]}" --batch 4 --val-batches 3 --json one.jsonl
expect_ok "2 micro-batches of 2" "$FERRY" train "${GPT[@]}" "${A[@]}" --batch 2 --grad-accum 2 --val-batches 6 \
	--json acc.jsonl
checks=$((checks + 2))
[ "$(head -n 1 one.jsonl | grep -o '"loss": [^,]*')" = "$(head -n 1 acc.jsonl | grep -o '"loss": [^,]*')" ] ||
	fail "micro-batches: another first loss: $(head -n 1 one.jsonl) vs $(head -n 1 acc.jsonl)"
losses_agree one.jsonl acc.jsonl >agree.txt || fail "micro-batches: $(cat agree.txt)"
grep -q '"val_loss"' one.jsonl || fail "validation on documents: $(tail -n 1 one.jsonl)"

# eval: every document once, the same figure at any --seq >= the longest
for shape in "--batch 3 --seq $long_val" "--batch 5 --seq 40" "--batch 1 --seq 64"; do
	# shellcheck disable=SC2086
	expect_ok "eval $shape" "$FERRY" eval --checkpoint gpt.bin --data 'docs_val_*.bin' $shape --threads 2
	grep -qx "targets $n_val" out.txt || fail "eval $shape counts the $n_val targets: $(cat out.txt)"
	grep '^loss ' out.txt >>losses.txt
done
[ "$(sort -u losses.txt | wc -l)" -eq 1 ] || fail "the loss depends on --seq: $(tr '\n' ' ' <losses.txt)"

# a llama (rotary positions, no position table) alike
LLAMA=(--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2 --max-seq 64 --threads 2)
expect_ok "a llama on documents" "$FERRY" train "${LLAMA[@]}" --data 'docs_train_*.bin' --batch 4 --seq 24 \
	--steps 5 --lr 3e-3 --sample 0 --save llama
: >losses.txt
for shape in "--batch 2 --seq $long_val" "--batch 4 --seq 56"; do
	# shellcheck disable=SC2086
	expect_ok "llama eval $shape" "$FERRY" eval --checkpoint llama --data 'docs_val_*.bin' $shape --threads 2
	grep '^loss ' out.txt >>losses.txt
done
[ "$(sort -u losses.txt | wc -l)" -eq 1 ] || fail "llama: the loss depends on --seq: $(tr '\n' ' ' <losses.txt)"

# the positions reach the layers however they run: recomputed, offloaded,
# streamed weights, the optimizer on the host: the plain run's bits
L=(--data 'docs_train_*.bin' --batch 4 --seq 24 --steps 2 --lr 1e-2 --sample 0)
expect_ok "llama: plain" "$FERRY" train "${LLAMA[@]}" "${L[@]}" --save plain
for more in "--policy nothing_saveable" "--policy minimal_offloaded --offload-params --offload-embeddings
	--offload-optimizer stream" "--offload-optimizer cpu --clip-order speculative"; do
	rm -rf placed
	# shellcheck disable=SC2086
	expect_ok "llama: $more" "$FERRY" train "${LLAMA[@]}" "${L[@]}" $more --save placed || continue
	checks=$((checks + 1))
	same_save plain placed || fail "llama: $more: other bits than the plain run's"
done

# longer than --seq: refused by name, or cut
expect_error "train: a document longer than --seq" "long_000000.bin: document 1 (tokens 0.." \
	"$FERRY" train "${GPT[@]}" --data 'long_*.bin' --batch 2 --seq 24 --steps 1 --sample 0
grep -q -- "--truncate" err.txt || fail "the refusal suggests --truncate: $(cat err.txt)"
expect_error "eval: a document longer than --seq" "more than the sequence length 24" \
	"$FERRY" eval --checkpoint gpt.bin --data 'long_*.bin' --seq 24 --threads 2
expect_ok "eval --truncate" "$FERRY" eval --checkpoint gpt.bin --data 'long_*.bin' --seq 24 --truncate --threads 2
expect_ok "train --truncate" "$FERRY" train "${GPT[@]}" --data 'long_*.bin' --batch 2 --seq 24 --steps 2 \
	--truncate --sample 0

# the plan counts the positions tensor, and only for documents
P=(--model llama --layers 2 --channels 32 --heads 4 --batch 4 --seq 16)
expect_ok "plan" "$FERRY" plan "${P[@]}" --schedule
grep -q positions out.txt && fail "a token stream's plan has positions: $(grep positions out.txt)"
grep -Eq '^  batch +512 ' out.txt || fail "tokens and targets: $(grep '^  batch' out.txt)"
expect_ok "plan --packed" "$FERRY" plan "${P[@]}" --schedule --packed
grep -Eq '^  positions +argument +256$' out.txt || fail "the positions tensor: $(grep positions out.txt)"
grep -Eq '^  batch +768 ' out.txt || fail "tokens, targets and positions: $(grep '^  batch' out.txt)"
grep -Eq 'forward +compute +- +copy +positions +256$' out.txt || fail "uploaded: $(grep 'copy.*positions' out.txt)"
# --doc-tokens prices attention within documents (tests/test_pack_predict.c): the
# plan itself is the same bytes; alone, without --packed, it is refused
cp out.txt packed.txt
expect_ok "plan --packed --doc-tokens" "$FERRY" plan "${P[@]}" --schedule --packed --doc-tokens 4
cmp -s out.txt packed.txt || fail "--doc-tokens changed the plan: $(diff packed.txt out.txt | head -5)"
expect_error "--doc-tokens without --packed" "--doc-tokens prices packed documents: give --packed too" \
	"$FERRY" plan "${P[@]}" --doc-tokens 4

# token streams: eval as before (no targets line)
make_corpus
expect_ok "eval a token stream" "$FERRY" eval --checkpoint gpt.bin --data 'corpus_val_*.bin' --seq 24 --batches 2 \
	--threads 2
grep -q '^targets' out.txt && fail "a token stream's eval has no targets line: $(cat out.txt)"
finish
