#!/usr/bin/env bash
# Qwen 2 and Llama 3.1's rope scaling from the command line: a Qwen 2 trains
# from flags and saves a Qwen2ForCausalLM directory (q/k/v biases under
# transformers' names); every placement policy, parameter and optimizer
# offloading save the bits the plain run saves; plan, eval, resume and
# sampling work on it; its window (use_sliding_window) is saved and read,
# from max_window_layers on; a Llama directory whose config.json carries
# llama3 rope_scaling trains and is saved back with it.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--model qwen2 --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --tied-head
	--rope-theta 1000000)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')
EVAL=(--data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3 --threads 2)

expect_ok "train a qwen2 from flags" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --save dev
grep -q '"architectures": \[' dev/config.json && grep -q '"Qwen2ForCausalLM"' dev/config.json &&
	grep -q '"model_type": "qwen2"' dev/config.json && grep -q '"use_sliding_window": false' dev/config.json &&
	grep -q '"tie_word_embeddings": true' dev/config.json || fail "a Qwen2 config.json: $(cat dev/config.json)"
grep -q 'model.layers.1.self_attn.k_proj.bias' dev/model.safetensors || fail "the biases are saved"
! grep -q 'lm_head.weight' dev/model.safetensors || fail "a tied head is not saved"

placements_same_bits

hf_directory_works qwen2 2

# use_sliding_window: a window from flags acts on every layer (saved as
# max_window_layers 0); config.json's max_window_layers moves where it starts
expect_ok "a windowed qwen2" "$FERRY" train "${SHAPE[@]}" --sliding-window 5 "${RUN[@]}" --steps 4 --save win
grep -q '"use_sliding_window": true' win/config.json && grep -q '"sliding_window": 5' win/config.json &&
	grep -q '"max_window_layers": 0' win/config.json || fail "the window saved: $(cat win/config.json)"
expect_ok "eval it" "$FERRY" eval --checkpoint win "${EVAL[@]}"
cp out.txt allwin.txt
sed -i 's/"max_window_layers": 0/"max_window_layers": 1/' win/config.json
expect_ok "eval it windowed from layer 1" "$FERRY" eval --checkpoint win "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" != "$(tail -n 1 allwin.txt)" ] || fail "max_window_layers changes nothing"
sed -i 's/"use_sliding_window": true/"use_sliding_window": false/' win/config.json
expect_ok "eval it unwindowed" "$FERRY" eval --checkpoint win "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" != "$(tail -n 1 allwin.txt)" ] || fail "use_sliding_window false changes nothing"

# A Llama 3.1-style directory: llama3 rope_scaling is read, trained with and
# written back under the same fields.
expect_ok "a llama" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --max-seq 32 "${RUN[@]}" \
	--steps 1 --save l31
sed -i 's/"rope_theta": 10000.0,/"rope_theta": 500000.0,\n  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16, "rope_type": "llama3"},/' \
	l31/config.json
expect_ok "train from a llama3-scaled directory" "$FERRY" train --checkpoint l31 "${RUN[@]}" --steps 2 --save l31b
grep -q '"rope_type": "llama3"' l31b/config.json && grep -q '"original_max_position_embeddings": 16' l31b/config.json ||
	fail "rope_scaling saved back: $(cat l31b/config.json)"
expect_ok "eval it" "$FERRY" eval --checkpoint l31b "${EVAL[@]}"
cp out.txt scaled.txt
sed -i '/"rope_scaling"/,/}/d' l31b/config.json
expect_ok "eval it unscaled" "$FERRY" eval --checkpoint l31b "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" != "$(tail -n 1 scaled.txt)" ] || fail "the scaling changes nothing"
sed -i 's/"rope_theta"/"logit_scale": 2.0,\n  "rope_theta"/' l31b/config.json
expect_error "an unknown field" "logit_scale is not a field ferry implements" \
	"$FERRY" eval --checkpoint l31b "${EVAL[@]}"
finish
