#!/usr/bin/env bash
# Mistral from the command line: a Mistral with a sliding window shorter
# than the sequence trains from flags and saves a MistralForCausalLM
# directory (its sliding_window in config.json); every placement policy and
# offload mode save the bits the plain run saves; plan, eval, resume and
# sampling work on it; the window changes the loss, and config.json's null
# is no window.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--model mistral --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --sliding-window 5)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')
EVAL=(--data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3 --threads 2)

expect_ok "train a mistral from flags" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --save dev
grep -q '"MistralForCausalLM"' dev/config.json && grep -q '"model_type": "mistral"' dev/config.json &&
	grep -q '"sliding_window": 5' dev/config.json || fail "a Mistral config.json: $(cat dev/config.json)"

placements_same_bits

hf_directory_works mistral 2
cp dev_eval.txt windowed.txt

# null is no window (Mistral 7B v0.2, v0.3): another loss, and saved back null
sed -i 's/"sliding_window": 5/"sliding_window": null/' dev/config.json
expect_ok "eval without a window" "$FERRY" eval --checkpoint dev "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" != "$(tail -n 1 windowed.txt)" ] || fail "the window changes nothing"
expect_ok "train without a window" "$FERRY" train --checkpoint dev "${RUN[@]}" --steps 1 --save nowin
grep -q '"sliding_window": null' nowin/config.json || fail "null saved back: $(cat nowin/config.json)"
sed -i 's/"sliding_window": null/"sliding_window": 5,\n  "max_window_layers": 1/' dev/config.json
expect_error "max_window_layers" "max_window_layers is not a field of MistralForCausalLM" \
	"$FERRY" eval --checkpoint dev "${EVAL[@]}"
expect_error "a window on llama" "attention has no window" \
	"$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --sliding-window 4 "${RUN[@]}" --steps 1
finish
