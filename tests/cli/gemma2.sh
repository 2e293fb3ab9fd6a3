#!/usr/bin/env bash
# Gemma 2 from the command line: a Gemma 2 with a sliding window shorter
# than the sequence trains from flags and saves a Gemma2ForCausalLM
# directory (its window, caps and query_pre_attn_scalar in config.json, the
# four norms per layer under transformers' names, a tied head); every
# placement policy, --policy auto, every offload mode and a host tier save
# the bits the plain run saves; plan, eval, resume and sampling work on it;
# config.json's window changes the loss and null is none (window, caps),
# what it may not say is refused by name (an activation, layer_types against
# its even layers, max_window_layers; a cap in a Llama's); what it lacks on
# the CUDA backend is refused when planned, naming it; on 2 ranks every ZeRO
# stage saves the bits of --zero 0, one process with the global batch's
# losses (where MPI is).  (The caps' effect on
# the loss: tests/cli/families_ref.sh.)
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--model gemma2 --layers 3 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --sliding-window 5)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')
EVAL=(--data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3 --threads 2)
export XDG_CACHE_HOME=$WORK/cache

expect_ok "train a gemma2 from flags" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --save dev
for want in '"Gemma2ForCausalLM"' '"model_type": "gemma2"' '"hidden_activation": "gelu_pytorch_tanh"' \
	'"sliding_window": 5' '"query_pre_attn_scalar": 8' '"attn_logit_softcapping": 50.0' \
	'"final_logit_softcapping": 30.0' '"tie_word_embeddings": true'; do
	grep -qF "$want" dev/config.json || fail "config.json lacks $want: $(cat dev/config.json)"
done
for t in model.layers.2.pre_feedforward_layernorm.weight model.layers.2.post_feedforward_layernorm.weight \
	model.layers.0.post_attention_layernorm.weight model.norm.weight; do
	grep -q "$t" dev/model.safetensors || fail "$t is saved"
done
! grep -q 'lm_head.weight' dev/model.safetensors || fail "a tied head is not saved"

POLICIES+=(save_dot_except_mlp)
MODES+=("--policy minimal_offloaded --offload-optimizer stream --host-tier activations=nvme --nvme-dir $WORK")
placements_same_bits

# --policy auto: calibrated on this machine (Gemma's own ops measured), then
# a placement under a small device that trains the same bits
expect_ok "calibrate" "$FERRY" calibrate "${SHAPE[@]}" --batch 2 --seq 16 --threads 2 --backend cpu --quick
for op in geglu softcap scale; do
	grep -q "\"op\": \"$op\"" "$XDG_CACHE_HOME"/ferry/calibration-*.json || fail "calibrate measured $op"
done
expect_ok "plan --policy auto" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --threads 2 --backend cpu \
	--policy auto --device-mem 1M
grep -q "^--policy auto: " out.txt || fail "plan --policy auto chooses: $(head -3 out.txt)"
expect_ok "train --policy auto" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --backend cpu --policy auto \
	--device-mem 1M --save auto
cmp -s dev/model.safetensors auto/model.safetensors || fail "--policy auto: other bits saved"

hf_directory_works gemma2 3
cp dev_eval.txt windowed.txt
expect_ok "ferry sample" "$FERRY" sample --checkpoint dev --prompt-tokens 100,111,99 --tokens 6 --temperature 0 --threads 2
cp out.txt greedy.txt
expect_ok "ferry sample again" "$FERRY" sample --checkpoint dev --prompt-tokens 100,111,99 --tokens 6 --temperature 0 \
	--seed 9 --threads 2
cmp -s out.txt greedy.txt || fail "temperature 0 samples the most probable tokens whatever the seed"

# null is no window, no cap: another loss, saved back null
sed -i 's/"sliding_window": 5/"sliding_window": null/' dev/config.json
expect_ok "eval without a window" "$FERRY" eval --checkpoint dev "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" != "$(tail -n 1 windowed.txt)" ] || fail "the window changes nothing"
sed -i 's/"attn_logit_softcapping": 50.0/"attn_logit_softcapping": 0.5/' dev/config.json
sed -i 's/"final_logit_softcapping": 30.0/"final_logit_softcapping": null/' dev/config.json
expect_ok "train without a final cap" "$FERRY" train --checkpoint dev "${RUN[@]}" --steps 1 --save nocap
grep -q '"sliding_window": null' nocap/config.json && grep -q '"final_logit_softcapping": null' nocap/config.json &&
	grep -q '"attn_logit_softcapping": 0.5' nocap/config.json || fail "null saved back: $(cat nocap/config.json)"

# what config.json may not say
cp -r nocap bad
sed -i 's/"hidden_activation": "gelu_pytorch_tanh"/"hidden_activation": "gelu"/' bad/config.json
expect_error "another activation" 'hidden_activation "gelu" is not supported (ferry'"'"'s Gemma 2 uses gelu_pytorch_tanh)' \
	"$FERRY" eval --checkpoint bad "${EVAL[@]}"
cp nocap/config.json bad/ && sed -i 's/"num_hidden_layers": 3,/"num_hidden_layers": 3,\n  "layer_types": ["full_attention", "full_attention", "full_attention"],/; s/"sliding_window": null/"sliding_window": 5/' bad/config.json
expect_error "layer_types against the even layers" 'layer_types[0] "full_attention" is not supported (ferry'"'"'s Gemma 2 has sliding_attention there)' \
	"$FERRY" eval --checkpoint bad "${EVAL[@]}"
cp nocap/config.json bad/ && sed -i 's/"num_hidden_layers": 3,/"num_hidden_layers": 3,\n  "max_window_layers": 1,/' bad/config.json
expect_error "max_window_layers" "max_window_layers is not a field of Gemma2ForCausalLM (its window acts on the layers whose index is a multiple of 2)" \
	"$FERRY" eval --checkpoint bad "${EVAL[@]}"
expect_ok "a llama" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --max-seq 32 "${RUN[@]}" \
	--steps 1 --save llama
sed -i 's/"rope_theta"/"final_logit_softcapping": 30.0,\n  "rope_theta"/' llama/config.json
expect_error "a cap on llama" "final_logit_softcapping is not a field of LlamaForCausalLM" \
	"$FERRY" eval --checkpoint llama "${EVAL[@]}"
# on 2 ranks (where MPI is): every ZeRO stage saves the bits of --zero 0,
# and --zero 0 is one process with the global batch within 1e-6
if command -v mpirun >/dev/null && "$FERRY" info 2>/dev/null | grep -q "MPI built in"; then
	ONE=(--sample 0 --threads 1 --data 'corpus_train_*.bin' --seq 16 --steps 4)
	expect_ok "one process, batch 4" "$FERRY" train "${SHAPE[@]}" "${ONE[@]}" --batch 4 --json one.json --save one
	for z in 0 1 2 3; do
		checks=$((checks + 1))
		mpi_run 2 "$FERRY" train "${SHAPE[@]}" "${ONE[@]}" --batch 2 --zero "$z" --json z$z.json --save z$z \
			>z$z.out 2>&1 || fail "2 ranks, --zero $z: $(tail -n 2 z$z.out)"
	done
	for z in 1 2 3; do
		cmp -s z0/model.safetensors z$z/model.safetensors && echo "ok: 2 ranks, --zero $z: the bits of --zero 0" ||
			fail "2 ranks, --zero $z saves other bits than --zero 0"
	done
	checks=$((checks + 1))
	if d=$(losses_agree one.json z0.json); then
		echo "ok: 2 ranks against one process with the global batch: $d"
	else
		fail "2 ranks against one process with the global batch: $d"
	fi
else
	echo "skipped: the 2-rank checks (no mpirun or MPI)"
fi
# every op of it has a CUDA kernel: planned there as on the CPU (no GPU
# needed); a build without the CUDA backend cannot know its kernels'
# workspace, and says so
if "$FERRY" info | grep -q "^  cuda "; then
	expect_ok "gemma2 on the cuda backend" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --backend cuda
else
	expect_error "gemma2 planned for a backend not built in" "backend 'cuda' is not compiled into this build" \
		"$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --backend cuda
fi
finish
