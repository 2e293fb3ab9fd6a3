#!/usr/bin/env bash
# ZeRO-3 with AdamW on host threads (--zero 3 --offload-optimizer cpu,
# adam=host:cpu:shard(N,params), FSDP2's CPU offload; issue 22 item 4):
# each rank keeps on the host its slice of the master weights, moments and
# gradients, on the device its slice of the compute weights, each layer
# all-gathered ahead of use, its gradients reduce-scattered into the slice
# and copied down, the slice updated by the rank's threads and sent up.
# On 2 ranks, GPT-2 and Llama, several activation policies, --grad-accum,
# exact and speculative order (clipped, so undone and redone, and not): the
# same files, bit for bit, as --zero 0 with AdamW on the host and as
# --zero 3 on the device.  On 3 ranks (the last slice padded): the bits of
# --zero 3 on the device (the same collectives) and within 1e-6 of one
# process with the global batch (MPI's reduce-scatter may add in another
# order than its all-reduce).  Saved on 2 ranks and resumed on 2, the bits
# of the unbroken run; resumed on 3, those of --zero 3 on the device
# resumed so, within 1e-6 of --zero 0.  `ferry plan` prints the placement,
# --place reproduces it, a rank's host bytes are 16 a slice element (each
# rank's measured bytes are its plan's: plan_ranks.sh).  Skips without
# mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
host=(--offload-optimizer cpu)

# On 2 ranks: ZeRO-3 on the host against --zero 0 on the host (in ORDER)
# and --zero 3 on the device (exact: either order's bits).
against_both() { # NAME ORDER MORE
	saves_alike "$1 ($2 $3) on 2 ranks: --zero 3 on the host, --zero 0 on the host and --zero 3 on the device" 2 \
		"z3 --batch 2 ${host[*]} --clip-order $2 --zero 3" "z0 --batch 2 ${host[*]} --clip-order $2 --zero 0" \
		"dev --batch 2 --zero 3"
}
for_runs against_both "${ZERO3_RUNS[@]}"

# 3 ranks: the last slice padded.
for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	checks=$((checks + 1))
	"$FERRY" train "${common[@]}" "${shape[@]}" --steps 8 --batch 6 --json one.json >one.out 2>&1 ||
		{ fail "$model: one process: $(tail -n 2 one.out)"; continue; }
	trains dev 3 "${shape[@]}" --steps 8 --batch 2 --zero 3 &&
		trains z3 3 "${shape[@]}" --steps 8 --batch 2 "${host[@]}" --zero 3 --json many.json || continue
	if same_save dev z3 && d=$(losses_agree one.json many.json); then
		echo "ok: $model on 3 ranks: --zero 3 on the host saves the bits of --zero 3 on the device; against one" \
			"process: $d"
	else
		fail "$model on 3 ranks: --zero 3 on the host against the device run or one process: ${d:-other bits}"
	fi
done

# Saved on 2 ranks at step 3 (6 rows a step): resumed on 2, the unbroken run's bits; on 3,
# the bits of --zero 3 on the device resumed so, within 1e-6 of --zero 0.
checks=$((checks + 1))
trains unbroken 2 "${gpt[@]}" --batch 3 "${host[@]}" --zero 0 &&
	trains half 2 "${gpt[@]}" --batch 3 "${host[@]}" --zero 3 --steps 3 || true
resume 2 again "${host[@]}" --zero 3
resume 3 on3 "${host[@]}" --zero 3
resume 3 on3_dev --zero 3
resume 3 on3_z0 "${host[@]}" --zero 0
if [ -f again ] && same_save unbroken again && same_save on3 on3_dev && d=$(losses_agree on3_z0.json on3.json); then
	echo "ok: --zero 3 on the host saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; on 3: the" \
		"bits of --zero 3 on the device, against --zero 0: $d"
else
	fail "resuming --zero 3 on the host: ${d:-other bits}"
fi

# The plan of one rank of 2: the placement printed and read back; its host
# bytes 16 S (master, m, v, gradient), S whole blocks of the norm's sum (256
# blocks of ceil(n/256) elements), n the unsplit exact plan's (16 bytes an
# element); with 8 layers (the ring holds 2) the device's peak below
# ZeRO-2 on the host's.
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
checks=$((checks + 1))
"$FERRY" plan "${plan[@]}" "${host[@]}" --json whole.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --zero 3 "${host[@]}" --ranks 2 --json z3.json >/dev/null 2>&1 &&
	"$FERRY" plan "${plan[@]}" --place 'adam=host:cpu:shard(2,grads)' --json z2.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --place "$(json_place z3.json)" --ranks 2 --json again.json >/dev/null ||
	fail "plan --zero 3 --offload-optimizer cpu: $(tail -n 1 z3.json)"
n=$(($(json_host_total whole.json) / 16)) && per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
if grep -q 'adam=host:cpu:shard(2,params)' <<<"$(json_place z3.json)" &&
	[ "$(json_host_total z3.json)" = $((16 * S)) ] &&
	[ "$(json_field z3.json peak_bytes)" -lt "$(json_field z2.json peak_bytes)" ] &&
	grep -q '"weight ring (gathered)"' z3.json && cmp -s z3.json again.json; then
	echo "ok: plan adam=host:cpu:shard(2,params): host $((16 * S)) bytes (S = $S), device $(json_field z3.json \
peak_bytes) (ZeRO-2 on the host: $(json_field z2.json peak_bytes)), --place reproduces it"
else
	fail "plan adam=host:cpu:shard(2,params): $(json_place z3.json), host $(json_host_total z3.json) not" \
		"$((16 * S)), device $(json_field z3.json peak_bytes) (ZeRO-2's $(json_field z2.json peak_bytes))"
fi

expect_error "adam=host:cpu:shard(2,params) in one process" \
	"adam=host:cpu:shard(2,params) splits AdamW's state over 2 ranks; this run has 1" \
	"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:cpu:shard(2,params)'
finish
