#!/usr/bin/env bash
# Qwen 2 and Llama 3.1's rope scaling from the command line: a Qwen 2 trains
# from flags and saves a Qwen2ForCausalLM directory (q/k/v biases under
# transformers' names); every placement policy, parameter and optimizer
# offloading save the bits the plain run saves; plan, eval, resume and
# sampling work on it; a Llama directory whose config.json carries llama3
# rope_scaling trains and is saved back with it.
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

for policy in everything_saveable qkv_proj_offloaded minimal_offloaded nothing_saveable; do
	expect_ok "plan $policy" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --policy $policy
	expect_ok "train $policy" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --policy $policy --save p_$policy
	cmp -s dev/model.safetensors p_$policy/model.safetensors && cmp -s dev/ferry_state.bin p_$policy/ferry_state.bin ||
		fail "--policy $policy: other bits saved"
done
for mode in "--offload-params" "--offload-params --offload-optimizer cpu --policy minimal_offloaded" \
	"--offload-params --offload-embeddings --offload-optimizer stream"; do
	# shellcheck disable=SC2086
	expect_ok "train $mode" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 $mode --save off
	cmp -s dev/model.safetensors off/model.safetensors && cmp -s dev/ferry_state.bin off/ferry_state.bin ||
		fail "$mode: other bits saved"
done

expect_ok "eval the directory" "$FERRY" eval --checkpoint dev "${EVAL[@]}"
grep -q "checkpoint dev: qwen2, 2 layers" out.txt || fail "eval names the model: $(head -2 out.txt)"
expect_ok "plan from the directory" "$FERRY" plan --checkpoint dev --batch 2 --seq 16 --policy qkv_proj_offloaded
expect_ok "2 steps" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 2 --save half
expect_ok "resume" "$FERRY" train --resume half "${RUN[@]}" --steps 4 --save resumed
cmp -s dev/model.safetensors resumed/model.safetensors || fail "resumed qwen2 differs from the unbroken run"
expect_ok "sample" "$FERRY" train --checkpoint dev "${RUN[@]}" --steps 1 --sample 8
grep -q -- "--- sample" out.txt || fail "prints a sample"

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
