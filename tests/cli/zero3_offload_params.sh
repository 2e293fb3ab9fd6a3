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
# cpu.  Saved on 2 ranks: resumed on 2, the unbroken run's bits; on 3, those
# of --zero 3 --offload-optimizer cpu resumed so; on 1, within 1e-6 of the
# unbroken run.  `ferry plan` prints the placement, --place reproduces it,
# the device holds a staging slot for the largest layer's part of one
# parameter instead of the slice, the host the same bytes (each rank's
# measured bytes are its plan's: plan_ranks.sh).  Skips without mpirun or a
# ferry built with MPI.
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

# 3 ranks: the last slice padded.
on3() { # MODEL
	saves_alike "$1 on 3 ranks: --zero 3 --offload-params and --zero 3" 3 \
		"z3off --steps 8 --batch 2 ${off[*]} --zero 3" "z3 --steps 8 --batch 2 ${host[*]} --zero 3"
}
for_runs on3 "gpt2|gpt||" "llama|llama||"

# Saved on 2 ranks at step 3 (6 rows a step): resumed on 2, the unbroken
# run's bits; on 3, those of --zero 3 with the slice on the device resumed
# so; on 1 (no split), within 1e-6 of the unbroken run.
checks=$((checks + 1))
trains unbroken 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 0 --json unbroken.json &&
	trains half 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 3 --steps 3 || true
resume 2 again "${off[@]}" --zero 3
resume 3 on3 "${off[@]}" --zero 3
resume 3 on3_host "${host[@]}" --zero 3
resume 1 on1 "${off[@]}"
if [ -f again ] && same_save unbroken again && same_save on3 on3_host && d=$(losses_agree unbroken.json on1.json 4); then
	echo "ok: --zero 3 --offload-params saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; on 3:" \
		"the bits of --zero 3 with the slice on the device; on 1, against the unbroken run: $d"
else
	fail "resuming --zero 3 --offload-params: ${d:-other bits}"
fi

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

# Not yet, refused by name before step 1.
for entry in "--offload-embeddings|--zero 3 with --offload-embeddings" \
	"--param-prefetch 2|--zero 3 with --param-prefetch 2"; do
	IFS='|' read -r more needle <<<"$entry"
	read -r -a extra <<<"$more"
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero 3 --offload-params "${extra[@]}" \
		>no.out 2>no.err
	if [ $? -ne 0 ] && [ "$(grep -c '^ferry train' no.err)" -eq 1 ] && grep -qF -- "$needle" no.err &&
		! grep -q '^step' no.out; then
		echo "ok: --zero 3 --offload-params $more is refused before step 1: $(grep '^ferry train' no.err)"
	else
		fail "--zero 3 --offload-params $more: $(cat no.err)"
	fi
done
finish
