#!/usr/bin/env bash
# AdamW on host threads with the gradients kept on the device
# (--device-grads, adam.grads=device:stream(D)): `ferry plan` (text and
# JSON) shows the placement and a host gradient ring of D + 1 slots in
# place of the host copy of every gradient; the measured device peak is
# the plan's; GPT-2 and Llama save the same bytes as with the host copy
# (--offload-optimizer cpu) and as AdamW on the device, with clipping that
# bites and without, with --grad-accum 2, in both clipping orders, and
# resumed; what it does not go with is refused before step 1 (on several
# ranks and with --zero: the DG rows of tests/cli/placements.matrix).
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 3 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
TRAIN=("${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 2)
host_total() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["host"]["total_bytes"])' "$1"; }
kind_host() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_kind"][sys.argv[2]]["host_bytes"])' "$1" "$2"; }

# The plan: the placement, the ring's bytes (two slots of a layer's
# parameters, each parameter's slice rounded up to 64 floats), the rest
# as with the host copy.
expect_ok "plan --device-grads" "$FERRY" plan "${SHAPE[@]}" --device-grads
grep -q "adam=host:cpu,adam.grads=device:stream(1)," out.txt || fail "plan prints the placement: $(head -2 out.txt)"
"$FERRY" plan "${SHAPE[@]}" --offload-optimizer cpu --json cpu.json >/dev/null
"$FERRY" plan "${SHAPE[@]}" --device-grads --json dg.json >/dev/null
"$FERRY" plan "${SHAPE[@]}" --offload-optimizer cpu --place 'adam.grads=device:stream(3)' --json dg3.json >/dev/null
grep -q '"place": "[^"]*adam.grads=device:stream(1)' dg.json || fail "plan --json prints the placement"
# GPT-2's layer: ln 2x16, qkv 16x48 + 48, proj 16x16 + 16, ln 2x16, fc 16x64 + 64, fcproj 64x16 + 16
slot=0
for n in 16 16 768 48 256 16 16 16 1024 64 1024 16; do slot=$((slot + (n + 63) / 64 * 64)); done
want=$(( $(kind_host cpu.json gradients) ))
got=$(kind_host dg.json gradients)
[ "$got" = $((2 * slot * 4)) ] && [ "$(kind_host dg3.json gradients)" = $((4 * slot * 4)) ] &&
	echo "ok: host gradients $want -> $got bytes (two slots of $slot floats), four slots with stream(3)" ||
	fail "host gradients: $got (2 slots of $slot floats?), stream(3) $(kind_host dg3.json gradients), host copy $want"
[ "$(json_field dg.json peak_bytes)" = "$(json_field cpu.json peak_bytes)" ] || fail "the device holds what it did"
[ "$(host_total dg.json)" -lt "$(host_total cpu.json)" ] || fail "less host memory"
placed=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["place"])' dg3.json)
"$FERRY" plan "${SHAPE[@]}" --place "$placed" --json back.json >/dev/null
cmp -s <(grep -v '"place"' dg3.json) <(grep -v '"place"' back.json) && grep -q 'adam.grads=device:stream(3)' back.json ||
	fail "--place reproduces the plan"

# Measured = planned, and the bits of the host copy and of the device.
expect_ok "train, AdamW on the device" "$FERRY" train "${TRAIN[@]}" --steps 4 --save dev.bin
for clip in 100 0.01; do
	expect_ok "train --offload-optimizer cpu, clip $clip" "$FERRY" train "${TRAIN[@]}" --steps 4 --grad-clip $clip \
		--offload-optimizer cpu --save cpu_$clip.bin --json cpu_$clip.jsonl
	for order in exact speculative; do
		expect_ok "train --device-grads, clip $clip, $order" "$FERRY" train "${TRAIN[@]}" --steps 4 --grad-clip $clip \
			--device-grads --clip-order $order --save dg_$clip.bin --json dg_$clip.jsonl
		cmp -s cpu_$clip.bin dg_$clip.bin && same_state cpu_$clip.bin.state dg_$clip.bin.state ||
			fail "clip $clip, $order: other bits saved than the host copy's"
		cmp -s <(grep -o '"loss": [0-9.]*' cpu_$clip.jsonl) <(grep -o '"loss": [0-9.]*' dg_$clip.jsonl) ||
			fail "clip $clip, $order: other losses"
		[ "$(json_field dg.json peak_bytes)" = "$(json_field dg_$clip.jsonl device_peak_bytes)" ] ||
			fail "measured peak $(json_field dg_$clip.jsonl device_peak_bytes) != planned $(json_field dg.json peak_bytes)"
	done
done
expect_ok "train --device-grads, D = 2" "$FERRY" train "${TRAIN[@]}" --steps 4 --offload-optimizer cpu \
	--place 'adam.grads=device:stream(2)' --save dg2.bin
expect_ok "train, AdamW on the device, clip 100" "$FERRY" train "${TRAIN[@]}" --steps 4 --grad-clip 100 --save dev100.bin
same_save dev100.bin dg_100.bin && same_save dev.bin dg2.bin || fail "other bits saved than the device's"
# every norm above 0.01 (clipping bites on every step) and below 100 (never)
grep -o '"grad_norm": [0-9.]*' dg_0.01.jsonl | awk '{ if ($2 <= 0.01 || $2 >= 100) bad = 1 } END { exit bad || NR != 4 }' ||
	fail "the norms lie between the two clips: $(grep -o '"grad_norm": [0-9.]*' dg_0.01.jsonl | tr '\n' ' ')"

expect_ok "train --grad-accum 2, host copy" "$FERRY" train "${TRAIN[@]}" --steps 3 --grad-accum 2 \
	--offload-optimizer cpu --save acc_cpu.bin
expect_ok "train --grad-accum 2, --device-grads" "$FERRY" train "${TRAIN[@]}" --steps 3 --grad-accum 2 \
	--device-grads --save acc_dg.bin
cmp -s acc_cpu.bin acc_dg.bin && same_state acc_cpu.bin.state acc_dg.bin.state || fail "--grad-accum 2: other bits saved"

expect_ok "train 2 steps, --device-grads" "$FERRY" train "${TRAIN[@]}" --steps 2 --device-grads --save half.bin
expect_ok "resume, --device-grads" "$FERRY" train --resume half.bin --steps 4 --threads 2 --sample 0 \
	--device-grads --save resumed.bin
cmp -s dev.bin resumed.bin && same_state dev.bin.state resumed.bin.state || fail "resumed run differs from the unbroken one"

LLAMA=(--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --batch 2 --seq 16
	--data 'corpus_train_*.bin' --sample 0 --threads 2)
for clip in 100 0.01; do
	expect_ok "llama, AdamW on the device, clip $clip" "$FERRY" train "${LLAMA[@]}" --steps 3 --grad-clip $clip \
		--save ldev
	expect_ok "llama, host copy, clip $clip" "$FERRY" train "${LLAMA[@]}" --steps 3 --grad-clip $clip \
		--offload-optimizer cpu --save lcpu
	for order in exact speculative; do
		expect_ok "llama --device-grads, clip $clip, $order" "$FERRY" train "${LLAMA[@]}" --steps 3 --grad-clip $clip \
			--device-grads --clip-order $order --policy nothing_saveable --save ldg
		same_save ldev ldg && same_save lcpu ldg || fail "llama, clip $clip, $order: other bits saved"
	done
done
expect_ok "llama --grad-accum 2, host copy" "$FERRY" train "${LLAMA[@]}" --steps 2 --grad-accum 2 \
	--offload-optimizer cpu --save lacc_cpu
expect_ok "llama --grad-accum 2, --device-grads" "$FERRY" train "${LLAMA[@]}" --steps 2 --grad-accum 2 \
	--device-grads --save lacc_dg
same_save lacc_cpu lacc_dg || fail "llama --grad-accum 2: other bits"
expect_ok "llama 1 step, --device-grads" "$FERRY" train "${LLAMA[@]}" --steps 1 --device-grads --grad-clip 0.01 \
	--save lhalf
expect_ok "llama resume, --device-grads" "$FERRY" train --resume lhalf --steps 3 --threads 2 --sample 0 \
	--device-grads --save lres
same_save lres ldg || fail "llama: resumed run differs"

# Refused before step 1.
expect_error "with the optimizer on the device" "it needs --offload-optimizer cpu" "$FERRY" train "${TRAIN[@]}" \
	--steps 1 --device-grads --offload-optimizer device
expect_error "streamed" "it needs --offload-optimizer cpu" "$FERRY" plan "${SHAPE[@]}" --offload-optimizer stream \
	--device-grads
expect_error "with --offload-params" "--device-grads (adam.grads=device:stream(D)) with --offload-params" "$FERRY" \
	train "${TRAIN[@]}" --steps 1 --device-grads --offload-params
expect_error "a bad depth" "--place adam.grads=device:stream(16): host" "$FERRY" plan "${SHAPE[@]}" \
	--offload-optimizer cpu --place 'adam.grads=device:stream(16)'
grep -q "^step" out.txt && fail "no step ran"
finish
