#!/usr/bin/env bash
# ZeRO-1, 2 and 3 with the parameters on the host and AdamW streamed
# (--zero K --offload-params --offload-optimizer stream,
# adam=host:stream:shard(N[,grads|params]) with layers.weights=host:stream;
# issue 22 item 4): each rank's host keeps only its slice of the master
# weights and moments, whose pieces pass through the device's optimizer
# ring, while the weight ring streams the parameters (ZeRO-1 and 2: whole
# on every rank's host, all-gathered there after the update; ZeRO-3: the
# rank's master slice, staged up before each layer's gather).
# On 2 ranks, GPT-2 and Llama, several activation policies, --grad-accum 2,
# --offload-embeddings (ZeRO-1 and 2): the same files, bit for bit, as
# --zero 0 in the same mode and as --zero K with AdamW on host threads.
# On 3 ranks (the last slice padded): within 1e-6 of one process with the
# global batch, and the bits of --zero K --offload-params
# --offload-optimizer cpu (ZeRO-1: of --zero 0).  Saved on 2 ranks at step
# 3: resumed on 2, the unbroken run's bits; on 3 and on 1, within 1e-6 of
# its losses.  `ferry plan` prints the placement, --place reproduces it,
# and a rank's host bytes are worked out from the parameter count (each
# rank's measured bytes are its plan's: plan_ranks.sh).  ZeRO-3 streamed
# with --offload-embeddings: zero3_stream_edges.sh; with --param-prefetch
# D: zero3_stream_prefetch.sh; in bf16: plan_zero3.sh (the plan) and
# tests/gpu/data_parallel.sh (the bits).  Skips without mpirun or a ferry
# built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
off=(--offload-params --offload-optimizer stream)
cpu=(--offload-params --offload-optimizer cpu)

# NAME|MODEL|STAGES|MORE on 2 ranks: each stage against --zero 0 in the
# same mode and against the stage with AdamW on host threads
runs=("gpt2|gpt|1 2 3|" "gpt2 qkv_proj_offloaded|gpt|1 2 3|--policy qkv_proj_offloaded"
	"gpt2 nothing_saveable, micro-batches|gpt|1 2 3|--policy nothing_saveable --grad-accum 2"
	"gpt2 embeddings streamed, micro-batches|gpt|1 2|--offload-embeddings --grad-accum 2"
	"llama|llama|1 2 3|" "llama minimal_offloaded, micro-batches|llama|1 2 3|--policy minimal_offloaded --grad-accum 2")
for entry in "${runs[@]}"; do
	IFS='|' read -r name model stages more <<<"$entry"
	unset -n shape
	declare -n shape=$model
	read -r -a extra <<<"$more"
	trains z0 2 "${shape[@]}" --batch 2 "${off[@]}" --zero 0 "${extra[@]}" || continue
	for z in $stages; do
		checks=$((checks + 1))
		trains "z$z" 2 "${shape[@]}" --batch 2 "${off[@]}" --zero "$z" "${extra[@]}" &&
			trains "cpu$z" 2 "${shape[@]}" --batch 2 "${cpu[@]}" --zero "$z" "${extra[@]}" || continue
		if same_save z0 "z$z" && same_save "cpu$z" "z$z"; then
			echo "ok: $name ($more) on 2 ranks: --zero $z streamed saves the bits of --zero 0 streamed and of" \
				"--zero $z on host threads"
		else
			fail "$name ($more) on 2 ranks: --zero $z streamed, --zero 0 streamed and --zero $z on host threads differ"
		fi
	done
done

# 3 ranks (the last slice padded) against one process with the global
# batch, and against the stage on host threads (the same reduce-scatter)
for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	one_and_3_ranks "${off[@]}" || continue
	for z in 1 2 3; do
		checks=$((checks + 1))
		trains "on3_$z" 3 "${shape[@]}" --steps 8 --batch 2 "${off[@]}" --zero "$z" --json many.json &&
			trains "on3_cpu$z" 3 "${shape[@]}" --steps 8 --batch 2 "${cpu[@]}" --zero "$z" || continue
		# ZeRO-1 averages as --zero 0 does: its bits on any number of ranks
		if d=$(losses_agree one.json many.json) && same_save "on3_cpu$z" "on3_$z" &&
			{ [ "$z" != 1 ] || same_save on3_0 on3_1; }; then
			echo "ok: $model on 3 ranks, --zero $z streamed: the bits of --zero $z on host threads; against" \
				"one process: $d"
		else
			fail "$model on 3 ranks, --zero $z streamed against one process (${d:-other losses}) or against" \
				"--zero $z on host threads (or ZeRO-1 against --zero 0): other bits"
		fi
	done
done

# Saved on 2 ranks at step 3 (6 rows a step): resumed on 2, the unbroken
# run's bits; on 3 and on 1, within 1e-6 of its losses
trains unbroken 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 0 --json unbroken.json
for z in 1 2 3; do
	checks=$((checks + 1))
	trains half 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero "$z" --steps 3 || continue
	resume 2 again "${off[@]}" --zero "$z"
	resume 3 on3 "${off[@]}" --zero "$z"
	resume 1 on1 "${off[@]}"
	if [ -f again ] && same_save unbroken again && d3=$(losses_agree unbroken.json on3.json 4) &&
		d1=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: --zero $z streamed saved on 2 ranks at step 3: resumed on 2, the unbroken run's bits; on 3" \
			"($d3), on 1 ($d1)"
	else
		fail "resuming --zero $z streamed from 2 ranks: on 2 other bits, or ${d3:-on 3 other losses} ${d1:-}"
	fi
done

# The plan of one rank of 2 (8 layers): the placement printed and read
# back; the host bytes from n, the unsplit plan's parameter count (16
# bytes an element: master, gradient, m, v), S = ceil(n/2) for ZeRO-1 and
# S2, ZeRO-2's whole blocks of the norm's sum (256 blocks of ceil(n/256)):
# ZeRO-1 the parameters (padded to 2S) and gradients whole, m and v a
# slice; ZeRO-2 the host bytes of ZeRO-2 on host threads (the same
# arrays), below ZeRO-1's; ZeRO-3 the master, m and v a slice (12 S2),
# and the device the optimizer ring, below --zero 3 streamed without
# --offload-params (the device's slice 4 S2 less the staging slot).
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
"$FERRY" plan "${plan[@]}" "${off[@]}" --json whole.json >/dev/null || fail "plan: $(tail -n 1 whole.json)"
n=$(($(json_host_total whole.json) / 16)) && S=$(((n + 1) / 2))
per=$(((n + 255) / 256)) && S2=$(((((n + per - 1) / per) + 1) / 2 * per))
for z in 1 2 3; do
	"$FERRY" plan "${plan[@]}" "${off[@]}" --zero $z --ranks 2 --json "z$z.json" >/dev/null 2>&1 ||
		fail "plan --zero $z: $(tail -n 1 "z$z.json")"
done
"$FERRY" plan "${plan[@]}" "${cpu[@]}" --zero 2 --ranks 2 --json cpu2.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --offload-optimizer stream --zero 3 --ranks 2 --json dev3.json >/dev/null ||
	fail "plan --zero 2 --offload-optimizer cpu or --zero 3 without --offload-params"
want=([1]=$((8 * n + 8 * S + 4 * (2 * S - n))) [2]=$(json_host_total cpu2.json) [3]=$((12 * S2)))
shard=([1]='adam=host:stream:shard(2)' [2]='adam=host:stream:shard(2,grads)' [3]='adam=host:stream:shard(2,params)')
for z in 1 2 3; do
	checks=$((checks + 1))
	place=$(json_place "z$z.json")
	"$FERRY" plan "${plan[@]}" --place "$place" --ranks 2 --json again.json >/dev/null 2>&1 ||
		fail "plan --place $place: $(tail -n 1 again.json)"
	host=$(json_host_total "z$z.json") dev=$(json_field "z$z.json" peak_bytes)
	if grep -qF "${shard[$z]}" <<<"$place" && grep -q 'layers.weights=host:stream' <<<"$place" &&
		[ "$host" = "${want[$z]}" ] && grep -q '"optimizer ring"' "z$z.json" && cmp -s "z$z.json" again.json &&
		{ [ $z != 2 ] || [ "$host" -lt "${want[1]}" ]; } &&
		{ [ $z != 3 ] || [ "$dev" -lt "$(json_field dev3.json peak_bytes)" ]; }; then
		echo "ok: plan --zero $z streamed with --offload-params: ${shard[$z]}, host $host bytes (n = $n," \
			"S = $S, S2 = $S2), device $dev, --place reproduces it"
	else
		fail "plan --zero $z streamed with --offload-params: $place, host $host not ${want[$z]}, device $dev" \
			"(--zero 3 without --offload-params: $(json_field dev3.json peak_bytes)), or no round trip"
	fi
done

expect_error "adam=host:stream:shard(2) with the parameters offloaded in one process" \
	"adam=host:stream:shard(2) splits AdamW's state over 2 ranks; this run has 1" \
	"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:stream:shard(2),layers.weights=host:stream'
finish
