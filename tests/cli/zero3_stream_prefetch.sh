#!/usr/bin/env bash
# ZeRO-3 with the parameters on the host, AdamW streamed and a deeper ring
# of gathered layers (--zero 3 --offload-params --offload-optimizer stream
# --param-prefetch D: adam=host:stream:shard(N,params) with
# layers.weights=host:stream(D); issue 22 item 4): each layer's part of the
# rank's host master slice staged up and all-gathered D layers ahead, into
# D + 1 slots, while the update streams the slice's pieces through the
# optimizer ring and the comm stream waits for their copies down before
# the next forward's first gathers (D + 1 of them at once).  5 layers, so
# the slots are reused.  On 2 ranks, GPT-2 and Llama, D = 2 and 3, several
# activation policies (one offloaded), --grad-accum 2, an embedding table
# across the bound of the ranks' slices: the same files, bit for bit, as
# the same flags with --offload-optimizer cpu, as --zero 0 in the same
# mode at that depth, and as --place set to the plan's placement.  On 3
# ranks (the last slice padded): the bits of --offload-optimizer cpu and
# within 1e-6 of one process with the global batch.  Saved on 2 ranks at
# step 3: resumed on 2 at another depth, the unbroken run's bits; on 3,
# those of --offload-optimizer cpu resumed so; on 1, within 1e-6 of the
# unbroken run.  The plan: D + 1 gathered slots, the device 2 slots more
# at depth 3 than at depth 1 (each slot a layer's parameters, worked out
# from GPT-2's shape) as --zero 0's ring grows, the host's bytes 12 S at
# every depth (each rank's measured bytes are its plan's: plan_ranks.sh).
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 5
off=(--offload-params --offload-optimizer stream)
cpu=(--offload-params --offload-optimizer cpu)

# On 2 ranks: against AdamW on host threads and --zero 0, at that depth.
on2() { # NAME ORDER MORE
	saves_alike "$1 on 2 ranks ($3): --zero 3 streamed, on host threads and --zero 0 streamed" 2 \
		"z3 --batch 2 ${off[*]} --zero 3" "z3cpu --batch 2 ${cpu[*]} --zero 3" "z0 --batch 2 ${off[*]} --zero 0"
}
for_runs on2 "gpt2|gpt||--param-prefetch 2" "gpt2 qkv_proj_offloaded|gpt||--param-prefetch 3 --policy qkv_proj_offloaded" \
	"gpt2 nothing_saveable, micro-batches|gpt||--param-prefetch 2 --policy nothing_saveable --grad-accum 2" \
	"gpt2, the embeddings split between the ranks|gpt||--param-prefetch 3 --vocab 4096" \
	"llama|llama||--param-prefetch 3" "llama minimal_offloaded, micro-batches|llama||--param-prefetch 2 --policy minimal_offloaded --grad-accum 2" \
	"llama nothing_saveable|llama||--param-prefetch 2 --policy nothing_saveable --vocab 4096"

# The plan's placement given back as --place trains the same bits.
checks=$((checks + 1))
shape=("${gpt[@]}")
extra=()
"$FERRY" plan --vocab 257 --max-seq 32 --seq 16 "${gpt[@]}" --batch 2 "${off[@]}" --zero 3 --param-prefetch 3 --ranks 2 --json run.json \
	>/dev/null || fail "plan: $(tail -n 1 run.json)"
place=$(json_plan run.json 'd["place"]')
if grep -qF 'layers.weights=host:stream(3)' <<<"$place" && grep -qF 'adam=host:stream:shard(2,params)' <<<"$place"; then
	saves_alike "--place $place on 2 ranks: the flags' bits" 2 \
		"flags --batch 2 ${off[*]} --zero 3 --param-prefetch 3" "placed --batch 2 --place $place"
else
	fail "plan --zero 3 streamed --param-prefetch 3: placement $place"
fi

# 3 ranks: the bits of AdamW on host threads (the same reduce-scatter),
# and within 1e-6 of one process reading their batch (--batch 6).
on3() { # NAME ORDER MORE
	rm -f r3.json one.json
	trains r3 3 "${shape[@]}" --batch 2 "${off[@]}" --zero 3 "${extra[@]}" --json r3.json &&
		trains r3cpu 3 "${shape[@]}" --batch 2 "${cpu[@]}" --zero 3 "${extra[@]}" &&
		"$FERRY" train "${common[@]}" "${shape[@]}" --batch 6 "${off[@]}" "${extra[@]}" \
			--json one.json >one.out 2>&1 || { fail "$1 ($3): $(tail -n 2 one.out)"; return; }
	if d=$(losses_agree one.json r3.json) && same_save r3cpu r3; then
		echo "ok: $1 on 3 ranks ($3): the bits of AdamW on host threads; against one process: $d"
	else
		fail "$1 on 3 ranks ($3): against one process ${d:-}, or other bits than on host threads"
	fi
}
for_runs on3 "gpt2|gpt||--param-prefetch 3 --vocab 4096" "llama|llama||--param-prefetch 2 --grad-accum 2"

# Saved on 2 ranks at step 3 (6 rows a step, --param-prefetch 2): resumed
# on 2 (--param-prefetch 3), the unbroken run's bits; on 3 (depth 2),
# those of AdamW on host threads resumed so; on 1 (depth 3), within 1e-6.
checks=$((checks + 1))
rm -f unbroken.json
trains unbroken 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 0 --param-prefetch 2 --json unbroken.json &&
	trains half 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 3 --param-prefetch 2 --steps 3
resume 2 again "${off[@]}" --zero 3 --param-prefetch 3
resume 3 on3 "${off[@]}" --zero 3 --param-prefetch 2
resume 3 on3_cpu "${cpu[@]}" --zero 3 --param-prefetch 2
resume 1 on1 "${off[@]}" --param-prefetch 3
if [ -f again ] && same_save unbroken again && same_save on3_cpu on3 && d3=$(losses_agree unbroken.json on3.json 4) &&
	d1=$(losses_agree unbroken.json on1.json 4); then
	echo "ok: saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; on 3: the bits of AdamW on host" \
		"threads ($d3); on 1 ($d1)"
else
	fail "resuming --zero 3 streamed --param-prefetch: on 2 or 3 other bits, or ${d3:-on 3 other losses} ${d1:-}"
fi

# The plan of one rank of 2 (8 layers) at depths 1, 2 and 3: D + 1 slots;
# the device's bytes at depth 3 two slots more than at depth 1 as at
# --zero 0, a slot being a layer's 12 parameters, each rounded up to 256
# bytes (C = 32: the norms' and biases' C, 3C and 4C, the weights' 3C^2,
# C^2 and twice 4C^2); the host's 12 S at every depth (S the
# slice of ZeRO-2's whole blocks of the norm's sum, zero_params_stream.sh), and --place reproduces it.
r256() { echo $((($1 + 255) / 256 * 256)); }
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
C=32 slot=0
for numel in $C $C $((3 * C * C)) $((3 * C)) $((C * C)) $C $C $C $((4 * C * C)) $((4 * C)) $((4 * C * C)) $C; do
	slot=$((slot + $(r256 $((4 * numel)))))
done
"$FERRY" plan "${plan[@]}" "${off[@]}" --json whole.json >/dev/null || fail "plan: $(tail -n 1 whole.json)"
n=$(($(json_host_total whole.json) / 16)) && per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
for z in 0 3; do
	for d in 1 2 3; do
		"$FERRY" plan "${plan[@]}" --zero $z "${off[@]}" --param-prefetch $d --ranks 2 --json "z${z}d$d.json" \
			>/dev/null || fail "plan --zero $z streamed --param-prefetch $d: $(tail -n 1 "z${z}d$d.json")"
	done
done
for d in 2 3; do
	checks=$((checks + 1))
	grow0=$(($(json_field "z0d$d.json" peak_bytes) - $(json_field z0d1.json peak_bytes)))
	grow3=$(($(json_field "z3d$d.json" peak_bytes) - $(json_field z3d1.json peak_bytes)))
	"$FERRY" plan "${plan[@]}" --place "$(json_place "z3d$d.json")" --ranks 2 --json again.json >/dev/null 2>&1 ||
		fail "plan --place $(json_place "z3d$d.json"): $(tail -n 1 again.json)"
	if [ "$(json_plan "z3d$d.json" 'd["param_ring_slots"]')" = $((d + 1)) ] && [ "$grow3" = $(((d - 1) * slot)) ] &&
		[ "$grow3" = "$grow0" ] && [ "$(json_host_total "z3d$d.json")" = $((12 * S)) ] &&
		grep -q '"optimizer ring"' "z3d$d.json" && cmp -s "z3d$d.json" again.json; then
		echo "ok: plan --zero 3 streamed --param-prefetch $d: $((d + 1)) gathered slots, $grow3 device bytes more" \
			"than at depth 1 (slots of $slot bytes; --zero 0: $grow0), host $((12 * S)) (S = $S)," \
			"--place reproduces it"
	else
		fail "plan --zero 3 streamed --param-prefetch $d: $(json_plan "z3d$d.json" 'd["param_ring_slots"]') slots," \
			"$grow3 bytes more than at depth 1 (by hand $(((d - 1) * slot)), --zero 0 $grow0), host" \
			"$(json_host_total "z3d$d.json") (12 S = $((12 * S))), or no round trip"
	fi
done
finish
