#!/usr/bin/env bash
# Policies through the CLI: `ferry plan` (text and JSON), the measured peak
# of `ferry train` equal to the plan's, identical losses across policies,
# bad policies refused before any work, a plan over --device-mem refused.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
TRAIN=("${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 3 --sample 0 --threads 2)

expect_ok "plan lists the model's names" "$FERRY" plan "${SHAPE[@]}"
for name in decoder_layer_input query_proj key_proj value_proj context out_proj mlpwi mlpwo attention_lse pre_attention_norm_mean; do
	grep -q "^  $name " out.txt || fail "plan lists $name"
done
grep -q "argument" out.txt && grep -q "temp" out.txt && grep -q "peak" out.txt || fail "plan prints the memory analysis"

for policy in everything_saveable nothing_saveable qkv_proj_offloaded minimal_offloaded "custom:decoder_layer_input=offload,mlpwi=device"; do
	expect_ok "plan --json $policy" "$FERRY" plan "${SHAPE[@]}" --policy "$policy" --json plan.json
	for key in argument_bytes output_bytes alias_bytes temp_bytes total_bytes peak_bytes activations_bytes; do
		[ -n "$(json_field plan.json $key)" ] || fail "$policy: plan JSON has $key"
	done
	expect_ok "train $policy" "$FERRY" train "${TRAIN[@]}" --policy "$policy" --json steps.jsonl
	planned=$(json_field plan.json peak_bytes)
	measured=$(json_field steps.jsonl device_peak_bytes)
	[ "$planned" = "$measured" ] || fail "$policy: measured peak $measured != planned $planned"
	grep -o '"loss": [0-9.]*' steps.jsonl >"loss_$(echo "$policy" | tr -c 'a-z' _).txt"
done
for f in loss_*.txt; do
	cmp -s "$f" loss_everything_saveable_.txt || fail "$f: losses differ from everything_saveable"
done
[ "$(json_field plan.json activations_bytes)" -gt 0 ] || fail "an offloading policy puts bytes on the host"

expect_error "unknown policy" "unknown policy 'bogus' (known: nothing_saveable" "$FERRY" train "${TRAIN[@]}" --policy bogus
expect_error "unknown name lists the names" "this model's names: decoder_layer_input" "$FERRY" train "${TRAIN[@]}" --policy "save_only_these_names(foo)"
expect_error "saved and offloaded" "both saved and offloaded" "$FERRY" plan --policy "save_and_offload_only_these_names([query_proj], [query_proj])"
expect_error "layer input recomputed" "cannot be recomputed" "$FERRY" train "${TRAIN[@]}" --policy "custom:decoder_layer_input=remat"
expect_error "bad prefetch depth" "--prefetch-depth must be at least 1" "$FERRY" plan --prefetch-depth 0
expect_error "the layer output is not placeable" "unknown name 'decoder_layer_output'" "$FERRY" plan --policy custom:decoder_layer_output=offload

# A plan over --device-mem: refused before step 1 with what it needs (in
# MiB) and what fits.  (--device-mem has a unit and is at least 1M: a
# larger shape than the rest.)
BIG=(--layers 2 --channels 64 --heads 2 --max-seq 64 --batch 8 --seq 64)
"$FERRY" plan "${BIG[@]}" --json all.json >/dev/null
"$FERRY" plan "${BIG[@]}" --policy nothing_saveable --json none.json >/dev/null
mem=$(( ($(json_field all.json peak_bytes) + $(json_field none.json peak_bytes)) / 2 / 1024 ))K
expect_error "over the device" "presets that fit: nothing_saveable" "$FERRY" train "${BIG[@]}" --data 'corpus_train_*.bin' \
	--steps 3 --sample 0 --threads 2 --device-mem "$mem"
need=$(awk -v b="$(json_field all.json peak_bytes)" 'BEGIN { printf "%.1f MiB", b / 1048576 }')
grep -q "needs $need of device memory" err.txt || fail "says it needs $need: $(cat err.txt)"
grep -q "^step" out.txt && fail "no step ran"
expect_ok "the suggested preset runs there" "$FERRY" train "${BIG[@]}" --data 'corpus_train_*.bin' --steps 3 --sample 0 \
	--threads 2 --device-mem "$mem" --policy nothing_saveable
"$FERRY" plan "${BIG[@]}" --device-mem "$mem" >out.txt; rc=$?
[ $rc -eq 1 ] && grep -q "does not fit" out.txt || fail "plan says it does not fit (rc $rc)"
"$FERRY" plan "${BIG[@]}" --device-mem "$mem" --json >out.txt; rc=$?
[ $rc -eq 1 ] && grep -q '"fits": false' out.txt || fail "plan --json says it does not fit (rc $rc)"

# Optimizer state streamed through the host: the same checkpoint bytes,
# less device memory in the plan; a trace of the second step.
expect_ok "train, optimizer on the device" "$FERRY" train "${TRAIN[@]}" --save dev.bin
expect_ok "train, optimizer streamed, traced" "$FERRY" train "${TRAIN[@]}" --offload-optimizer stream \
	--policy qkv_proj_offloaded --save host.bin --trace step.json
cmp -s dev.bin host.bin && same_state dev.bin.state host.bin.state || fail "--offload-optimizer stream: other bits saved"
grep -q "trace of step 2 written to step.json" out.txt || fail "the trace is announced"
cp corpus_train_000.bin keep.bin 2>/dev/null || cp "$(ls corpus_train_*.bin | head -1)" keep.bin
expect_error "a trace onto an input" "is one of this run's inputs: refusing to replace it" "$FERRY" train \
	"${TRAIN[@]}" --trace "$(ls corpus_train_*.bin | head -1)"
cmp -s keep.bin "$(ls corpus_train_*.bin | head -1)" || fail "the input is untouched"
expect_error "a trace in a missing directory" "cannot write --trace no/such/dir/t.json" "$FERRY" train \
	"${TRAIN[@]}" --trace no/such/dir/t.json
grep -q "^step" out.txt && fail "no step ran before the trace path was refused"
head -c 15 step.json | grep -q '{"traceEvents"' || fail "step.json is a Chrome trace"
for kind in "copy to host" "copy to device" op; do
	grep -q "\"cat\":\"$kind\"" step.json || fail "the trace has $kind slices"
done
"$FERRY" plan "${SHAPE[@]}" --json dev.json >/dev/null
"$FERRY" plan "${SHAPE[@]}" --offload-optimizer stream --json host.json >/dev/null
[ "$(json_field host.json peak_bytes)" -lt "$(json_field dev.json peak_bytes)" ] || fail "streamed: a smaller device plan"
expect_ok "train, AdamW on host threads" "$FERRY" train "${TRAIN[@]}" --offload-optimizer cpu --save cpu.bin
cmp -s dev.bin cpu.bin && same_state dev.bin.state cpu.bin.state || fail "--offload-optimizer cpu: other bits saved"
expect_error "optimizer mode" "--offload-optimizer 'gpu': device, stream or cpu" "$FERRY" plan --offload-optimizer gpu

# ferry bench: policies side by side in one process; one that cannot run
# is a row saying why, not a failure
expect_ok "bench" "$FERRY" bench "${SHAPE[@]}" --steps 2 --threads 2 --json bench.json nothing_saveable \
	qkv_proj_offloaded bogus
grep -q "^qkv_proj_offloaded .*x " out.txt || fail "bench prints a row per policy: $(cat out.txt)"
grep -q "^bogus  *does not run: unknown policy 'bogus'" out.txt || fail "bench says why a policy does not run"
[ "$(grep -c '"runs": true' bench.json)" = 2 ] && grep -q '"runs": false' bench.json || fail "bench --json rows"
grep -q '"vs_full_remat": 1.0000' bench.json || fail "bench: full recomputation is the 1.00x row"

expect_ok "the JAX tutorial example" "$FERRY" example
grep -q "results match within tolerance: True" out.txt || fail "example results match"
grep -q "activation offloading reduces temp by 10.75 MB" out.txt || fail "example saving"
# the third example: planned at 7168 x 7168, run small; the arguments are JAX's
grep -q "optimizer-state offloading reduces the total by 1.42 GB (JAX: 1.72 GB)" out.txt || fail "example 3 saving"
[ "$(grep -c '  argument  *2.49 GB  *2.49 GB' out.txt)" = 1 ] && [ "$(grep -c '  argument  *0.96 GB  *0.96 GB' out.txt)" = 1 ] ||
	fail "example 3 arguments"
grep -q "device peak, planned = measured: yes and yes" out.txt || fail "example 3 peaks"
# ferry's least totals: below JAX's 2.87 GB offloaded and 4.59 GB not
grep -A4 "^optimizer state and x offloaded" out.txt | grep -q "  total  *-  *2.79 GB" || fail "example 3 leanest"
grep -q "y recomputed (policy nothing_saveable, ferry only): total 4.40 GB" out.txt || fail "example 3 lean, device"
grep -q "bit for bit the same: yes" out.txt || fail "example 3 modes agree"
expect_ok "the example's third part at another size" "$FERRY" example --dim 96
grep -q "3 steps at 96 x 96" out.txt || fail "--dim"
expect_error "a --dim out of range" "--dim 0: from 1 to 16384" "$FERRY" example --dim 0
finish
