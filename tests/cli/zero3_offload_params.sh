#!/usr/bin/env bash
# ZeRO-3 with the parameters on the host (--zero 3 --offload-params
# --offload-optimizer cpu: adam=host:cpu:shard(N,params) with
# layers.weights=host:stream, FSDP2's CPU offload; issue 22 item 4): each
# rank keeps its slice of the parameters in host memory only (the fp32
# master, which AdamW on the rank's threads updates in place), and before
# each layer's all-gather its part of that layer goes up into a device
# staging slot.  On 2 ranks, GPT-2 and Llama, several activation policies
# (one offloaded), --grad-accum 2, exact and speculative order (clipped, so
# undone and redone, and not), an embedding table across the bound of the
# ranks' slices (the update's in-place gather of the unstacked
# parameters): the same files, bit for bit, as --zero 3
# --offload-optimizer cpu (the slice on the device) and as --zero 0
# --offload-params --offload-optimizer cpu (two ranks' sums are exact).  On
# 3 ranks (the last slice padded): the bits of --zero 3 --offload-optimizer
# cpu.  --param-prefetch 2 and 3 (the ring of gathered layers deeper) and
# --offload-embeddings (the embeddings, head and final norm gathered from
# the slices into the edge region, their gradients home whole and
# reduce-scattered from there): on 2 ranks the bits of --zero 0 in the
# same mode, on 3 within 1e-6 of one process.  Saved on 2 ranks (with and
# without --offload-embeddings): resumed on 2, the unbroken run's bits; on
# 3, those of --zero 3 --offload-optimizer cpu resumed so; on 1, within
# 1e-6 of the unbroken run.  `ferry plan` prints the placement, --place
# reproduces it, the device holds a staging slot for the largest layer's
# part of one parameter instead of the slice, the host the same bytes, a
# deeper ring the slots --zero 0's does, the edge region what it saves at
# --zero 0 (each rank's measured bytes are its plan's: plan_ranks.sh).
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
host=(--offload-optimizer cpu)
off=(--offload-params --offload-optimizer cpu)

# On 2 ranks: against --zero 3 with the slice on the device and --zero 0
# with the parameters on the host, in ORDER.
against_both() { # NAME ORDER MORE
	saves_alike "$1 ($2 $3) on 2 ranks: --zero 3 --offload-params, --zero 3 and --zero 0 --offload-params" 2 \
		"z3off --batch 2 ${off[*]} --clip-order $2 --zero 3" "z3 --batch 2 ${host[*]} --clip-order $2 --zero 3" \
		"z0 --batch 2 ${off[*]} --clip-order $2 --zero 0"
}
# (and with the embedding table across the slices' bound: its parts go up
# into the whole copy where they fall, gathered around them in place)
for_runs against_both "${ZERO3_RUNS[@]}" "gpt2, the embeddings split between the ranks|gpt|exact|--vocab 4096"

# --param-prefetch D: the ring of gathered layers D + 1 slots deep (5
# layers: slots reused), each layer gathered D ahead in forward and
# backward; --offload-embeddings: a stage's parameters gathered into the
# edge region before its forward and the prologue's backward (pieces of
# the staging slot's size), their gradients home whole and
# reduce-scattered from there.  The bits of --zero 0 in the same mode,
# an embedding table across the slices' bound.
as_zero0() {
	saves_alike "$1 on 2 ranks ($3): --zero 3 --offload-params and --zero 0 --offload-params" 2 \
		"z3off --batch 2 --layers 5 ${off[*]} --clip-order $2 --zero 3" \
		"z0 --batch 2 --layers 5 ${off[*]} --clip-order $2 --zero 0"
}
for_runs as_zero0 "gpt2|gpt|exact|--param-prefetch 2 --vocab 4096" \
	"gpt2 speculative, clipped|gpt|speculative|--param-prefetch 3 --vocab 4096 --grad-accum 2" \
	"llama|llama|exact|--param-prefetch 3 --vocab 4096 --policy qkv_proj_offloaded" \
	"llama speculative, unclipped|llama|speculative|--param-prefetch 2 --vocab 4096 --grad-clip 10" \
	"gpt2 (tied head)|gpt|exact|--offload-embeddings --vocab 4096" \
	"gpt2 micro-batches, speculative, clipped|gpt|speculative|--offload-embeddings --vocab 4096 --grad-accum 2 --param-prefetch 2" \
	"gpt2 nothing_saveable|gpt|exact|--offload-embeddings --vocab 4096 --policy nothing_saveable --param-prefetch 3" \
	"llama|llama|exact|--offload-embeddings --vocab 4096 --policy minimal_offloaded --param-prefetch 2" \
	"llama micro-batches, speculative, unclipped|llama|speculative|--offload-embeddings --vocab 4096 --grad-accum 2 --grad-clip 10 --param-prefetch 3"

# 3 ranks: the last slice padded.
on3() { # MODEL
	saves_alike "$1 on 3 ranks: --zero 3 --offload-params and --zero 3" 3 \
		"z3off --steps 8 --batch 2 ${off[*]} --zero 3" "z3 --steps 8 --batch 2 ${host[*]} --zero 3"
}
for_runs on3 "gpt2|gpt||" "llama|llama||"

# 3 ranks against one process reading their batch (--batch 6) in the same
# mode: losses, norms and validation losses within 1e-6.
against_one() {
	rm -f r3.json one.json
	trains r3 3 "${shape[@]}" --batch 2 --layers 5 "${off[@]}" --zero 3 "${extra[@]}" --json r3.json &&
		"$FERRY" train "${common[@]}" "${shape[@]}" --batch 6 --layers 5 "${off[@]}" "${extra[@]}" \
			--json one.json >one.out 2>&1 || { fail "$1 ($3): $(tail -n 2 one.out)"; return; }
	if d=$(losses_agree one.json r3.json); then
		echo "ok: $1 on 3 ranks ($3) against one process: $d"
	else
		fail "$1 on 3 ranks ($3) against one process: $d"
	fi
}
for_runs against_one "gpt2|gpt|exact|--param-prefetch 3 --vocab 4096" "llama|llama|exact|--param-prefetch 2 --vocab 4096" \
	"gpt2|gpt|exact|--offload-embeddings --vocab 4096 --param-prefetch 2" \
	"llama|llama|exact|--offload-embeddings --vocab 4096 --grad-accum 2"

# Saved on 2 ranks at step 3 (6 rows a step; --param-prefetch 2), with
# MORE: resumed on 2 (--param-prefetch 3), the unbroken run's bits; on 3
# (--param-prefetch 2), those of --zero 3 with the slice on the device
# resumed so; on 1 (no split), within 1e-6 of the unbroken run.
resumes() { # MORE...
	local d
	checks=$((checks + 1))
	rm -f unbroken.json
	trains unbroken 2 "${gpt[@]}" --batch 3 "${off[@]}" "$@" --zero 0 --json unbroken.json &&
		trains half 2 "${gpt[@]}" --batch 3 "${off[@]}" "$@" --zero 3 --param-prefetch 2 --steps 3 || true
	resume 2 again "${off[@]}" "$@" --zero 3 --param-prefetch 3
	resume 3 on3 "${off[@]}" "$@" --zero 3 --param-prefetch 2
	resume 3 on3_host "${host[@]}" --zero 3
	resume 1 on1 "${off[@]}" "$@"
	if [ -f again ] && same_save unbroken again && same_save on3 on3_host && d=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: --zero 3 --offload-params${*:+ $*} saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits;" \
			"on 3: the bits of --zero 3 with the slice on the device; on 1, against the unbroken run: $d"
	else
		fail "resuming --zero 3 --offload-params${*:+ $*}: ${d:-other bits}"
	fi
}
resumes
resumes --offload-embeddings

# The plan of one rank of 2: the placement printed and read back; the
# device's bytes those of the slice on the device less the slice (S floats,
# S whole blocks of the norm's sum: 256 blocks of ceil(n/256) elements, n
# the unsplit exact plan's host bytes / 16) plus the staging slot (GPT-2's
# largest layer part: the MLP's 4C x C weights, 4 C^2 floats), each
# rounded up to 256 bytes; the host's the same.
r256() { echo $((($1 + 255) / 256 * 256)); }
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
checks=$((checks + 1))
"$FERRY" plan "${plan[@]}" "${host[@]}" --json whole.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --zero 3 "${host[@]}" --ranks 2 --json z3.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --zero 3 "${off[@]}" --ranks 2 --json z3off.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --place "$(json_place z3off.json)" --ranks 2 --json again.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --zero 3 "${off[@]}" --ranks 2 >z3off.txt ||
	fail "plan --zero 3 --offload-params: $(tail -n 1 z3off.json)"
n=$(($(json_host_total whole.json) / 16)) && per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
want=$(($(json_field z3.json peak_bytes) - $(r256 $((4 * S))) + $(r256 $((4 * 4 * 32 * 32)))))
place=$(json_place z3off.json)
if grep -q 'adam=host:cpu:shard(2,params)' <<<"$place" && grep -q 'layers.weights=host:stream' <<<"$place" &&
	[ "$(json_field z3off.json peak_bytes)" = "$want" ] &&
	[ "$(json_host_total z3off.json)" = "$(json_host_total z3.json)" ] &&
	grep -q "params (a layer's part, staged)" z3off.txt && ! grep -q '"params (this rank.s slice)"' z3off.json &&
	cmp -s z3off.json again.json; then
	echo "ok: plan --zero 3 --offload-params on 2 ranks: device $want bytes (the slice on the device:" \
		"$(json_field z3.json peak_bytes), S = $S), host $(json_host_total z3off.json), --place reproduces it"
else
	fail "plan --zero 3 --offload-params: $place, device $(json_field z3off.json peak_bytes) not $want," \
		"host $(json_host_total z3off.json) not $(json_host_total z3.json)"
fi

# --param-prefetch 3 (8 layers): the plan's ring of 4 gathered layers,
# the device's two slots more than at depth 1, as --zero 0 --offload-params
# adds at that depth (its ring's slots are the layer's parameters too).
checks=$((checks + 1))
for z in 0 3; do
	for d in 1 3; do
		"$FERRY" plan "${plan[@]}" --zero $z "${off[@]}" --param-prefetch $d --ranks 2 --json "z${z}d$d.json" \
			>/dev/null || fail "plan --zero $z --offload-params --param-prefetch $d: $(tail -n 1 "z${z}d$d.json")"
	done
done
grow0=$(($(json_field z0d3.json peak_bytes) - $(json_field z0d1.json peak_bytes)))
grow3=$(($(json_field z3d3.json peak_bytes) - $(json_field z3d1.json peak_bytes)))
if [ "$(json_plan z3d3.json 'd["param_ring_slots"]')" = 4 ] && [ "$grow3" -gt 0 ] && [ "$grow3" = "$grow0" ] &&
	[ "$(json_host_total z3d3.json)" = "$(json_host_total z3d1.json)" ]; then
	echo "ok: plan --zero 3 --offload-params --param-prefetch 3: a 4-layer ring, $grow3 device bytes more" \
		"than at depth 1, as --zero 0's"
else
	fail "plan --zero 3 --param-prefetch 3: $(json_plan z3d3.json 'd["param_ring_slots"]') slots, $grow3 bytes" \
		"more than at depth 1 (--zero 0: $grow0)"
fi

# --offload-embeddings (Llama, its own head, --vocab 4096): the device
# drops the unstacked parameters' whole copy and gradients for the edge
# region, as it does at --zero 0 (the staging slot unchanged: the edges
# pass in pieces of it); the host gains the unstacked gradients whole.
checks=$((checks + 1))
for z in 0 3; do
	for e in "" --offload-embeddings; do
		"$FERRY" plan "${plan[@]}" "${llama[@]}" --layers 8 --vocab 4096 --zero $z "${off[@]}" $e --ranks 2 --json "v${z}$e.json" \
			>/dev/null || fail "plan --zero $z --offload-params $e: $(tail -n 1 "v${z}$e.json")"
	done
done
drop0=$(($(json_field v0.json peak_bytes) - $(json_field v0--offload-embeddings.json peak_bytes)))
drop3=$(($(json_field v3.json peak_bytes) - $(json_field v3--offload-embeddings.json peak_bytes)))
unstacked=$(((2 * 4096 * 32 + 32) * 4)) # the embedding, the head (V x C), the final norm (C), fp32
grow=$(($(json_host_total v3--offload-embeddings.json) - $(json_host_total v3.json)))
if [ "$drop3" -gt 0 ] && [ "$drop3" = "$drop0" ] && [ "$grow" = "$unstacked" ]; then
	echo "ok: plan --zero 3 --offload-params --offload-embeddings: $drop3 device bytes less (--zero 0: $drop0)," \
		"$grow host bytes more (the unstacked gradients)"
else
	fail "plan --zero 3 --offload-embeddings: device $drop3 bytes less (--zero 0: $drop0), host $grow more" \
		"(the unstacked gradients: $unstacked)"
fi

finish
