#!/usr/bin/env bash
# Checkpoints across host tiers: a Llama whose offloaded layer inputs
# (decoder_layer_input, the rest recomputed) exceed a --host-mem budget
# spreads them layer by layer over activations.host=dram+nvme (and
# dram+node:1+nvme on simulated nodes), each tier loaded its own depth
# ahead (--prefetch-depth 1+3: the schedule's loads, the trace's NVMe
# reads).  The plan says which layers sit on
# which tier and their bytes; ferry train allocates exactly that per tier
# (its measured peaks) and trains to the bits of the all-DRAM run; bad
# spans are refused with one clear line.
. "$(dirname "$0")/lib.bash"
make_corpus
mkdir nvme
# 4 layers, 1024 tokens x 256 channels x 4 bytes: 1 MiB of checkpoint per
# layer (4 rows of 256 tokens: a quarter of one 1024-token row's attention,
# ferry's own kernel, the address sanitizer's slowest part: 5 times faster)
SHAPE=(--model llama --layers 4 --channels 256 --heads 4 --kv-heads 2 --max-seq 256 --batch 4 --seq 256
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
same_save dram span || fail "weights and state differ from the all-DRAM run"
[ -z "$(ls nvme)" ] || fail "the NVMe file is left behind"

printf 'node 0 cpus 2 mem 8G\nnode 1 cpus 0 mem 1M\n' >topology.txt
expect_ok "train over DRAM, a CXL node and NVMe" "$FERRY" train "${TRAIN[@]}" --topology topology.txt \
	--host-tier activations=dram+node:1+nvme --nvme-dir nvme --host-mem 1M --save three
grep -q "peaks (bytes, measured / planned): dram (node 0) $MiB / $MiB; node:1 $MiB / $MiB; nvme $((2 * MiB)) / $((2 * MiB));" out.txt ||
	fail "three tiers, a layer, a layer, two: $(grep '^host tier peaks' out.txt)"
same_save dram three || fail "three tiers: bits differ from the all-DRAM run"

# a depth per tier: DRAM's layers 1 ahead, NVMe's 3 (8 layers: 0-1 in DRAM;
# the ring holds 4, so layers 4-7 are read where they are)
DEEP=(--model llama --layers 8 --channels 256 --heads 4 --kv-heads 2 --max-seq 256 --batch 4 --seq 256
	--policy custom:decoder_layer_input=offload)
expect_ok "plan depths per tier" "$FERRY" plan "${DEEP[@]}" "${SPAN[@]}" --prefetch-depth 1+3 --schedule
grep -q "^placement: .*activations.host=dram+nvme,activations.prefetch=1+3" out.txt || fail "the placement has 1+3"
grep -q "^prefetch per host tier (layers loaded ahead, in the span's order): 2 layers 1 ahead; 6 layers 3 ahead; ring of 4 slots$" out.txt ||
	fail "the plan says each tier's depth: $(grep '^prefetch per' out.txt)"
# each layer loaded back after the backward of the layer its depth ahead
awk '$2 == "backward" && $5 == "grads" { done = $4 }
     $2 == "backward" && $3 == "h2d" && $5 == "copy" { want = $4 + ($4 < 2 ? 1 : 3) + 1; n++
	if (done != want) { print "layer " $4 " loaded after layer " done "'"'"'s backward, want " want; bad = 1 } }
     END { if (n != 4) { print n " layers loaded, want 4"; bad = 1 } exit bad }' out.txt >order.txt ||
	fail "the schedule's loads: $(cat order.txt)"
expect_ok "plan --json depths" "$FERRY" plan "${DEEP[@]}" "${SPAN[@]}" --prefetch-depth 1+3 --json
grep -q '"tier_prefetch": \[{"layers": 2, "depth": 1}, {"layers": 6, "depth": 3}\], "ring_slots": 4,' out.txt ||
	fail "the JSON has each tier's depth"
planned=$(grep -o '"peak_bytes": [0-9]*' out.txt | head -1 | grep -o '[0-9]*$')
expect_ok "train with depths per tier" "$FERRY" train "${DEEP[@]}" --data 'corpus_train_*.bin' --steps 2 --sample 0 \
	--threads 2 --val-every 0 "${SPAN[@]}" --prefetch-depth 1+3 --save deep13 --trace deep.json --json deep.jsonl
grep -q "\"device_peak_bytes\": $planned[,}]" deep.jsonl || fail "1+3: the device peak is the plan's ($planned)"
grep -q "peaks (bytes, measured / planned): dram (node 0) $((2 * MiB)) / $((2 * MiB)); nvme $((6 * MiB)) / $((6 * MiB));" out.txt ||
	fail "1+3: peaks per tier as planned: $(grep '^host tier peaks' out.txt)"
[ "$(grep -o '"cat":"read from NVMe"' deep.json | wc -l)" -eq 2 ] || fail "the trace shows 2 NVMe reads (layers 2-3)"
expect_ok "train all in DRAM, 8 layers" "$FERRY" train "${DEEP[@]}" --data 'corpus_train_*.bin' --steps 2 --sample 0 \
	--threads 2 --val-every 0 --host-tier activations=dram --save deepdram
same_save deepdram deep13 || fail "1+3: bits differ from the all-DRAM run"
expect_error "depths without a span" "2 depths for the 1 tier(s)" "$FERRY" plan "${DEEP[@]}" --host-tier activations=dram \
	--prefetch-depth 1+3
expect_error "three depths, two tiers" "3 depths for the 2 tier(s)" "$FERRY" plan "${DEEP[@]}" \
	--place activations.host=dram+nvme,activations.prefetch=1+2+3 --nvme-dir nvme
expect_error "a bad depth" "--prefetch-depth 1+0: activations.prefetch=1+0: layers loaded ahead" "$FERRY" plan \
	"${DEEP[@]}" "${SPAN[@]}" --prefetch-depth 1+0

expect_error "NVMe not last" "the NVMe tier comes last" "$FERRY" plan "${SHAPE[@]}" \
	--host-tier activations=nvme+dram --nvme-dir nvme
expect_error "a span of weights" "only offloaded activations span tiers" "$FERRY" plan --offload-optimizer stream \
	--host-tier params=dram+nvme --nvme-dir nvme
expect_error "a span too small" "host tiers too small: activations need 4.0 MiB" "$FERRY" plan "${SHAPE[@]}" \
	--topology topology.txt --host-tier activations=dram+node:1 --host-mem 1M --json
# several offloaded tensors a layer (minimal_offloaded: 8.5 MiB of them a
# layer) span tiers too, a layer's tensors together
MIN=(--policy minimal_offloaded --host-tier activations=dram+nvme --nvme-dir nvme --host-mem 18M)
expect_ok "plan several tensors a layer" "$FERRY" plan "${SHAPE[@]}" "${MIN[@]}"
grep -qE "^  dram .* \(layers 0-1, 17825792 bytes\)$" out.txt && grep -qE "^  nvme .* \(layers 2-3, 17825792 bytes\)$" out.txt ||
	{ fail "minimal_offloaded: layers 0-1 in DRAM, 2-3 on NVMe"; cat out.txt >&2; }
expect_ok "train several tensors a layer over tiers" "$FERRY" train "${TRAIN[@]}" "${MIN[@]}" --save minspan
grep -q "peaks (bytes, measured / planned): dram (node 0) 17825792 / 17825792; nvme 17825792 / 17825792;" out.txt ||
	fail "minimal_offloaded: peaks per tier as planned: $(grep '^host tier peaks' out.txt)"
expect_ok "train several tensors a layer in DRAM" "$FERRY" train "${TRAIN[@]}" --policy minimal_offloaded \
	--host-tier activations=dram --save mindram
same_save mindram minspan || fail "minimal_offloaded over tiers: bits differ from the all-DRAM run"
finish
