#!/usr/bin/env bash
# Inputs that used to give a wrong answer without a word: a topology line
# over 511 bytes was split, so a commented-out node became a node; `eval`
# of a checkpoint whose values overflow printed "loss -nan" and exited 0;
# `eval --batches` beyond the data read the first batches again.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 32 --heads 2 --max-seq 32)

{ echo "node 0 cpus 2 mem 64G"; printf '#%600s node 1 cpus 0 mem 64G\n' ''; } >long.txt
expect_ok "a topology with a long comment" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --offload-optimizer cpu \
	--topology long.txt
grep -q "node 0: CPUs" out.txt || fail "node 0 is read: $(grep node out.txt)"
grep -q "node 1" out.txt && fail "the commented-out node 1 became a node: $(grep node out.txt)"
{ printf 'node 0 cpus 2 mem 64G %600s\n' ''; echo "node 1 cpus 0 mem 64G # CXL"; } >long2.txt
expect_ok "a topology with a long line" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --offload-optimizer cpu \
	--topology long2.txt
grep -q "node 1: no CPUs" out.txt || fail "both nodes read: $(grep node out.txt)"

"$FERRY" train "${SHAPE[@]}" --batch 4 --seq 32 --sample 0 --data 'corpus_train_*.bin' --steps 2 --save ck.bin \
	>/dev/null 2>&1 || { echo "cannot make ck.bin" >&2; exit 1; }
# every weight +-3e38: finite in the file, the logits overflow
python3 - <<'PY'
import struct
b = bytearray(open("ck.bin", "rb").read())
for i in range((len(b) - 1024) // 4):
    struct.pack_into("<f", b, 1024 + 4 * i, 3e38 if i % 2 == 0 else -3e38)
open("huge.bin", "wb").write(b)
PY
EVAL=(--data corpus_val_000000.bin --batch 4 --seq 32)
expect_error "eval of values that overflow" "the loss of batch 1 is not a number: the model's values overflow" \
	"$FERRY" eval --checkpoint huge.bin "${EVAL[@]}" --batches 2
grep -q "^loss" out.txt && fail "eval printed a loss: $(cat out.txt)"
# the validation shard holds (tokens - 1) / (4 x 32) whole batches
tokens=$(python3 -c 'import struct; print(struct.unpack_from("<i", open("corpus_val_000000.bin", "rb").read(), 8)[0])')
n=$(((tokens - 1) / 128))
expect_ok "eval of all $n batches" "$FERRY" eval --checkpoint ck.bin "${EVAL[@]}" --batches $n
grep -q "^loss [0-9.]*$" out.txt || fail "eval prints the loss: $(cat out.txt)"
expect_error "eval of one batch more" "corpus_val_000000.bin holds $n batches of 4 x 32 tokens, fewer than the $((n + 1)) asked for" \
	"$FERRY" eval --checkpoint ck.bin "${EVAL[@]}" --batches $((n + 1))
# rope_theta too small for a float became 0, "not given", and so the default
# 10000, saved as such; an explicit --rope-theta 0 did the same;
# attention_bias must be the boolean false, not 1.
"$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --batch 2 --seq 16 \
	--sample 0 --steps 1 --data 'corpus_train_*.bin' --save hf >/dev/null 2>&1 || { echo "cannot make hf" >&2; exit 1; }
LL=(--data 'corpus_train_*.bin' --batch 2 --seq 16 --sample 0 --steps 1)
rm -rf tiny && mkdir tiny && cp hf/config.json hf/model.safetensors tiny/
python3 -c 'import json; c = json.load(open("hf/config.json")); c["rope_theta"] = 1e-300; json.dump(c, open("tiny/config.json", "w"))'
expect_error "rope_theta 1e-300" "rope_theta 1e-300" "$FERRY" train --checkpoint tiny "${LL[@]}"
python3 -c 'import json; c = json.load(open("hf/config.json")); c["attention_bias"] = 1; json.dump(c, open("tiny/config.json", "w"))'
expect_error "attention_bias 1" "attention_bias" "$FERRY" train --checkpoint tiny "${LL[@]}"
expect_error "--rope-theta 0" "--rope-theta must be positive, got '0'" "$FERRY" train --model llama "${SHAPE[@]}" \
	--rope-theta 0 "${LL[@]}"
finish
