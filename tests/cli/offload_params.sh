#!/usr/bin/env bash
# Parameter offloading from the command line: `ferry plan --offload-params`
# shows the rings and the host's bytes and its peak is the one `ferry train`
# measures; GPT-2 and Llama save the same bytes as with nothing offloaded,
# with AdamW streamed or on host threads; a resumed run equals an unbroken
# one; bad combinations are refused.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 3 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
TRAIN=("${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 2)

expect_ok "plan --offload-params" "$FERRY" plan "${SHAPE[@]}" --offload-params --param-prefetch 2
grep -q "parameters offloaded: the layers' weights and gradients on the host, 3-layer weight ring" out.txt ||
	fail "plan names the ring: $(head -3 out.txt)"
grep -q "^  weight ring " out.txt && grep -q "^  gradient ring " out.txt || fail "plan lists the rings"
for policy in everything_saveable qkv_proj_offloaded; do
	expect_ok "plan --json $policy" "$FERRY" plan "${SHAPE[@]}" --offload-params --policy $policy --json plan.json
	[ "$(json_field plan.json param_ring_slots)" = 2 ] || fail "plan JSON: two slots at the default depth"
	expect_ok "train $policy, parameters offloaded" "$FERRY" train "${TRAIN[@]}" --steps 3 --offload-params \
		--policy $policy --json steps.jsonl
	[ "$(json_field plan.json peak_bytes)" = "$(json_field steps.jsonl device_peak_bytes)" ] ||
		fail "$policy: measured peak $(json_field steps.jsonl device_peak_bytes) != planned $(json_field plan.json peak_bytes)"
done
"$FERRY" plan "${SHAPE[@]}" --json dev.json >/dev/null
[ "$(json_field plan.json peak_bytes)" -lt "$(json_field dev.json peak_bytes)" ] || fail "a smaller device plan"

expect_ok "train, nothing offloaded" "$FERRY" train "${TRAIN[@]}" --steps 4 --save dev.bin
for mode in cpu stream; do
	expect_ok "train, parameters offloaded, optimizer $mode" "$FERRY" train "${TRAIN[@]}" --steps 4 --offload-params \
		--offload-optimizer $mode --policy minimal_offloaded --save $mode.bin
	cmp -s dev.bin $mode.bin && same_state dev.bin.state $mode.bin.state || fail "--offload-params, $mode: other bits saved"
done
expect_ok "train 2 steps, parameters offloaded" "$FERRY" train "${TRAIN[@]}" --steps 2 --offload-params --save half.bin
expect_ok "resume, parameters offloaded" "$FERRY" train --resume half.bin --steps 4 --threads 2 --sample 0 \
	--offload-params --save resumed.bin
cmp -s dev.bin resumed.bin && same_state dev.bin.state resumed.bin.state || fail "resumed run differs from the unbroken one"

LLAMA=(--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --batch 2 --seq 16
	--data 'corpus_train_*.bin' --sample 0 --threads 2)
expect_ok "llama, nothing offloaded" "$FERRY" train "${LLAMA[@]}" --steps 3 --save ldev
expect_ok "llama, parameters offloaded" "$FERRY" train "${LLAMA[@]}" --steps 3 --offload-params --save lhost
cmp -s ldev/model.safetensors lhost/model.safetensors && same_state ldev/ferry_state.bin lhost/ferry_state.bin ||
	fail "llama --offload-params: other bits saved"

# --offload-embeddings: the plan names the edge region and its peak is the
# measured one; the same bytes saved as with nothing offloaded (GPT-2's
# tied embedding, Llama's own head), and a resumed run equals an unbroken one.
expect_ok "plan --offload-embeddings" "$FERRY" plan "${SHAPE[@]}" --offload-params --offload-embeddings --json edge.json
grep -q '"edge_bytes": [1-9]' edge.json || fail "plan JSON: the edge region"
expect_ok "plan --offload-embeddings, text" "$FERRY" plan "${SHAPE[@]}" --offload-params --offload-embeddings
grep -q "^embeddings offloaded: the embeddings, head and final norm on the host, one [0-9]*-byte edge region" out.txt &&
	grep -q "^  edge region (embeddings, head) " out.txt && ! grep -q "^  unstacked grads " out.txt ||
	fail "plan lists the edge region: $(head -3 out.txt)"
for mode in cpu stream; do
	expect_ok "train, embeddings offloaded, optimizer $mode" "$FERRY" train "${TRAIN[@]}" --steps 4 --offload-params \
		--offload-embeddings --offload-optimizer $mode --policy minimal_offloaded --save edge_$mode.bin \
		--json edge.jsonl
	cmp -s dev.bin edge_$mode.bin && same_state dev.bin.state edge_$mode.bin.state ||
		fail "--offload-embeddings, $mode: other bits saved"
done
"$FERRY" plan "${SHAPE[@]}" --offload-params --offload-embeddings --offload-optimizer stream --policy minimal_offloaded \
	--json edge.json >/dev/null
[ "$(json_field edge.json peak_bytes)" = "$(json_field edge.jsonl device_peak_bytes)" ] ||
	fail "--offload-embeddings: measured peak $(json_field edge.jsonl device_peak_bytes) != planned $(json_field edge.json peak_bytes)"
expect_ok "train 2 steps, embeddings offloaded" "$FERRY" train "${TRAIN[@]}" --steps 2 --offload-params \
	--offload-embeddings --save ehalf.bin
expect_ok "resume, embeddings offloaded" "$FERRY" train --resume ehalf.bin --steps 4 --threads 2 --sample 0 \
	--offload-params --offload-embeddings --save eresumed.bin
cmp -s dev.bin eresumed.bin && same_state dev.bin.state eresumed.bin.state ||
	fail "--offload-embeddings: resumed run differs from the unbroken one"
expect_ok "llama, embeddings offloaded" "$FERRY" train "${LLAMA[@]}" --steps 3 --offload-params --offload-embeddings \
	--save ledge
cmp -s ldev/model.safetensors ledge/model.safetensors && same_state ldev/ferry_state.bin ledge/ferry_state.bin ||
	fail "llama --offload-embeddings: other bits saved"
expect_error "embeddings without the layers" "--offload-embeddings streams the embeddings and the head as" \
	"$FERRY" plan --offload-embeddings
grep -qF "it needs --offload-params" err.txt || fail "the message says what it needs: $(cat err.txt)"
expect_ok "train --help lists --offload-embeddings" "$FERRY" train --help
grep -q "^  --offload-embeddings " out.txt || fail "train --help: --offload-embeddings"


# The speculative clipping order: the same bytes as the exact one, with
# clipping on no step (the default clip) and on every step (every early
# update undone and redone).
for clip in 1.0 0.01; do
	expect_ok "exact, clip $clip" "$FERRY" train "${TRAIN[@]}" --steps 3 --grad-clip $clip --save exact.bin
	for extra in "" --offload-params "--offload-params --offload-embeddings"; do
		expect_ok "speculative $extra, clip $clip" "$FERRY" train "${TRAIN[@]}" --steps 3 --grad-clip $clip \
			--offload-optimizer cpu --clip-order speculative $extra --save spec.bin
		cmp -s exact.bin spec.bin && same_state exact.bin.state spec.bin.state ||
			fail "--clip-order speculative $extra, clip $clip: other bits saved"
	done
done
expect_error "speculation needs host threads" "needs --offload-optimizer cpu" "$FERRY" plan --clip-order speculative
expect_error "clip order name" "--clip-order 'late': exact or speculative" "$FERRY" plan --clip-order late

# Pinned memory with a budget: the plan splits the host bytes, training
# past the limit warns once and gives the same bits.
WIDE=(--layers 4 --channels 64 --heads 2 --max-seq 32 --batch 2 --seq 16)
expect_ok "plan --pinned-limit" "$FERRY" plan "${WIDE[@]}" --offload-optimizer stream --pinned-limit 1M --json pin.json
[ "$(json_field pin.json pinned_limit)" = 1048576 ] || fail "plan JSON: the limit"
[ "$(json_field pin.json pinned_bytes)" -le 1048576 ] && [ "$(json_field pin.json pageable_bytes)" -gt 0 ] ||
	fail "plan JSON: at most 1M pinned, the rest pageable"
expect_ok "train under a tight pinned limit" "$FERRY" train "${WIDE[@]}" --data 'corpus_train_*.bin' --sample 0 \
	--threads 2 --steps 2 --offload-optimizer stream --pinned-limit 1M --save tight.bin
[ "$(grep -c 'warning: .* of host buffers pinned (--pinned-limit 1.0 MiB)' err.txt)" = 1 ] ||
	fail "one warning: $(cat err.txt)"
expect_ok "train without a limit" "$FERRY" train "${WIDE[@]}" --data 'corpus_train_*.bin' --sample 0 \
	--threads 2 --steps 2 --offload-optimizer stream --save loose.bin
grep -q "warning: .* pinned" err.txt && fail "no warning without a limit: $(cat err.txt)"
cmp -s tight.bin loose.bin && same_state tight.bin.state loose.bin.state || fail "--pinned-limit changed the bits"
expect_ok "ferry info says how much a run pins" "$FERRY" info
grep -q "^pinned host memory: a run pins at most --pinned-limit" out.txt || fail "info: pinned memory"

# The tutorial's second example: parameter offloading on its network.
expect_ok "ferry example" "$FERRY" example
grep -q "parameter offloading reduces the argument by 20.00 MB (JAX: 20.00 MB)" out.txt || fail "example: the argument"
grep -q "results match within tolerance: True (bit for bit: yes)" out.txt || fail "example: the same gradients"
grep -q "total                      25.00 MB     11.50 MB" out.txt || fail "example: ferry's total: $(grep total out.txt)"
grep -q "peak                              -     11.50 MB  (measured: 11.50 MB)" out.txt || fail "example: measured peak"

expect_error "the device optimizer" "--offload-optimizer stream or cpu (not device)" "$FERRY" plan --offload-params \
	--offload-optimizer device
expect_error "prefetch without offloading" "--param-prefetch needs --offload-params" "$FERRY" plan --param-prefetch 2
expect_error "prefetch range" "--param-prefetch must be from 1 to 64" "$FERRY" plan --offload-params --param-prefetch 0
finish
