#!/usr/bin/env bash
# Checkpoints across host tiers: a Llama whose offloaded layer inputs
# (decoder_layer_input, the rest recomputed) exceed a --host-mem budget
# spreads them layer by layer over activations.host=dram+nvme (and
# dram+node:1+nvme on simulated nodes).  The plan says which layers sit on
# which tier and their bytes; ferry train allocates exactly that per tier
# (its measured peaks) and trains to the bits of the all-DRAM run; bad
# spans are refused with one clear line.
. "$(dirname "$0")/lib.bash"
make_corpus
mkdir nvme
# 4 layers, 1024 tokens x 256 channels x 4 bytes: 1 MiB of checkpoint per layer
SHAPE=(--model llama --layers 4 --channels 256 --heads 4 --kv-heads 2 --max-seq 1024 --batch 1 --seq 1024
	--policy custom:decoder_layer_input=offload --prefetch-depth 1)
TRAIN=("${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 3 --sample 0 --threads 2 --val-every 0)
SPAN=(--host-tier activations=dram+nvme --nvme-dir nvme --host-mem 2M)
MiB=1048576

expect_ok "plan a span" "$FERRY" plan "${SHAPE[@]}" "${SPAN[@]}"
grep -q "^placement: .*activations.host=dram+nvme" out.txt || fail "the placement names the span"
grep -qE "^  dram \(node 0\) .* activations 2.0 MiB \(layers 0-1, $((2 * MiB)) bytes\)$" out.txt ||
	{ fail "layers 0-1 (2 MiB) in DRAM, the budget"; cat out.txt >&2; }
grep -qE "^  nvme .* activations 2.0 MiB \(layers 2-3, $((2 * MiB)) bytes\)$" out.txt ||
	fail "layers 2-3 (2 MiB) on NVMe"
# the same through the placement, and a budget the first layer alone fits
expect_ok "plan --place activations.host" "$FERRY" plan "${SHAPE[@]}" --place activations.host=dram+nvme \
	--nvme-dir nvme --host-mem 1M
grep -qE "^  dram .* \(layers 0-0, $MiB bytes\)$" out.txt && grep -qE "^  nvme .* \(layers 1-3, $((3 * MiB)) bytes\)$" out.txt ||
	{ fail "1 MiB of DRAM: layer 0 there, 1-3 on NVMe"; cat out.txt >&2; }

losses() { grep -o '"loss": [0-9.]*' "$1"; }
expect_ok "train all in DRAM" "$FERRY" train "${TRAIN[@]}" --host-tier activations=dram --json dram.jsonl --save dram
expect_ok "train over DRAM and NVMe" "$FERRY" train "${TRAIN[@]}" "${SPAN[@]}" --json span.jsonl --save span
grep -q "^host tiers: activations 2.0 MiB on dram (node 0); activations 2.0 MiB on nvme;" out.txt ||
	fail "the banner shows the span: $(grep '^host tiers' out.txt)"
grep -q "^host tier peaks (bytes, measured / planned): dram (node 0) $((2 * MiB)) / $((2 * MiB)); nvme $((2 * MiB)) / $((2 * MiB));" out.txt ||
	fail "measured peaks per tier equal the plan: $(grep '^host tier peaks' out.txt)"
cmp -s <(losses dram.jsonl) <(losses span.jsonl) || fail "losses differ from the all-DRAM run"
diff -r dram span >/dev/null || fail "weights and state differ from the all-DRAM run"
[ -z "$(ls nvme)" ] || fail "the NVMe file is left behind"

printf 'node 0 cpus 2 mem 8G\nnode 1 cpus 0 mem 1M\n' >topology.txt
expect_ok "train over DRAM, a CXL node and NVMe" "$FERRY" train "${TRAIN[@]}" --topology topology.txt \
	--host-tier activations=dram+node:1+nvme --nvme-dir nvme --host-mem 1M --save three
grep -q "peaks (bytes, measured / planned): dram (node 0) $MiB / $MiB; node:1 $MiB / $MiB; nvme $((2 * MiB)) / $((2 * MiB));" out.txt ||
	fail "three tiers, a layer, a layer, two: $(grep '^host tier peaks' out.txt)"
diff -r dram three >/dev/null || fail "three tiers: bits differ from the all-DRAM run"

expect_error "NVMe not last" "the NVMe tier comes last" "$FERRY" plan "${SHAPE[@]}" \
	--host-tier activations=nvme+dram --nvme-dir nvme
expect_error "a span of weights" "only offloaded activations span tiers" "$FERRY" plan --offload-optimizer stream \
	--host-tier params=dram+nvme --nvme-dir nvme
expect_error "a span too small" "host tiers too small: activations need 4.0 MiB" "$FERRY" plan "${SHAPE[@]}" \
	--topology topology.txt --host-tier activations=dram+node:1 --host-mem 1M --json
expect_error "several tensors per layer" "not one tensor per layer" "$FERRY" plan "${SHAPE[@]}" \
	--policy minimal_offloaded "${SPAN[@]}" --json
finish
