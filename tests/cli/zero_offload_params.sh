#!/usr/bin/env bash
# ZeRO-1 and 2 with the parameters on the host (--zero K --offload-params
# --offload-optimizer cpu, adam=host:cpu:shard(N) with
# layers.weights=host:stream; issue 22 item 4): every rank keeps the
# parameters whole on the host (the weight ring reads them) but only its
# slice of AdamW's moments, updates that slice on its own threads and
# all-gathers the parameters on the host before the next forward.
# On 2 ranks, GPT-2 and Llama, several activation policies, --grad-accum,
# --offload-embeddings, exact and speculative order (clipped, so undone and
# redone, and not): the same files, bit for bit, as --zero 0 in the same
# mode.  On 3 ranks (the last slice padded): within 1e-6 of one process
# with the global batch.  Saved on 2 ranks at step 3, resumed on 3 and on
# 1: within 1e-6 of the unbroken run.  ZeRO-2 (--zero 2, shard(N,grads))
# also keeps only the rank's slice of the gradients on the host, each
# layer's reduce-scattered from a host slot as the ring sends it there.
# `ferry plan` prints the placement, --place reproduces it, a rank's host
# bytes hold the parameters whole and 8 bytes a slice element of the
# moments (each rank's measured bytes are its plan's: plan_ranks.sh).
# With AdamW streamed: zero_params_stream.sh.  Skips without mpirun or a
# ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
off=(--offload-params --offload-optimizer cpu)
stages=(1 2)

# NAME|MODEL|ORDER|MORE on 2 ranks: each stage against --zero 0, same mode
runs=("gpt2|gpt|exact|" "gpt2 qkv_proj_offloaded|gpt|exact|--policy qkv_proj_offloaded"
	"gpt2 nothing_saveable, micro-batches|gpt|exact|--policy nothing_saveable --grad-accum 2"
	"gpt2 embeddings streamed|gpt|exact|--offload-embeddings --grad-accum 2"
	"gpt2 speculative, clipped|gpt|speculative|" "gpt2 speculative, unclipped|gpt|speculative|--grad-clip 10"
	"llama|llama|exact|" "llama minimal_offloaded, micro-batches|llama|exact|--policy minimal_offloaded --grad-accum 2"
	"llama speculative, unclipped|llama|speculative|--grad-clip 10 --policy nothing_saveable")
for entry in "${runs[@]}"; do
	IFS='|' read -r name model order more <<<"$entry"
	unset -n shape
	declare -n shape=$model
	read -r -a extra <<<"$more"
	trains z0 2 "${shape[@]}" --batch 2 "${off[@]}" --clip-order "$order" --zero 0 "${extra[@]}" || continue
	for z in "${stages[@]}"; do
		checks=$((checks + 1))
		trains "z$z" 2 "${shape[@]}" --batch 2 "${off[@]}" --clip-order "$order" --zero "$z" "${extra[@]}" ||
			continue
		if same_save z0 "z$z"; then
			echo "ok: $name ($order $more) on 2 ranks: --zero $z --offload-params saves the bits of --zero 0"
		else
			fail "$name ($order $more) on 2 ranks: --zero $z --offload-params and --zero 0 differ"
		fi
	done
done

# 3 ranks (the last slice padded) against one process with the global batch
for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	one_and_3_ranks "${off[@]}" || continue
	for z in "${stages[@]}"; do
		checks=$((checks + 1))
		trains "on3_$z" 3 "${shape[@]}" --steps 8 --batch 2 "${off[@]}" --zero "$z" --json many.json || continue
		# ZeRO-1 averages as --zero 0 does: its bits on any number of ranks
		if d=$(losses_agree one.json many.json) && { [ "$z" != 1 ] || same_save on3_0 on3_1; }; then
			echo "ok: $model on 3 ranks, --zero $z --offload-params against one process: $d"
		else
			fail "$model on 3 ranks, --zero $z --offload-params against one process (or ZeRO-1 against" \
				"--zero 0): ${d:-other bits}"
		fi
	done
done

# Saved on 2 ranks at step 3 (6 rows a step), resumed on 3 and on 1: within
# 1e-6 of the unbroken run (on 2 ranks, --zero 0)
trains unbroken 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero 0 --json unbroken.json
for z in "${stages[@]}"; do
	checks=$((checks + 1))
	trains half 2 "${gpt[@]}" --batch 3 "${off[@]}" --zero "$z" --steps 3 || continue
	resume 3 on3 "${off[@]}" --zero "$z"
	resume 1 on1 "${off[@]}"
	if d3=$(losses_agree unbroken.json on3.json 4) && d1=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: --zero $z --offload-params saved on 2 ranks at step 3: resumed on 3 ($d3), on 1 ($d1)"
	else
		fail "resuming --zero $z --offload-params on 3 or 1: ${d3:-} ${d1:-}"
	fi
done

# The plan of one rank of 2: the placement printed and read back; the host
# holds the parameters and gradients whole, the moments a slice: 16 bytes
# an unsplit element less 8 for the half of the moments a rank does not
# hold (S = ceil(n/2); the parameters padded to 2S).
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
checks=$((checks + 1))
"$FERRY" plan "${plan[@]}" "${off[@]}" --json whole.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" "${off[@]}" --zero 1 --ranks 2 --json z1.json >/dev/null 2>&1 &&
	"$FERRY" plan "${plan[@]}" --place "$(json_place z1.json)" --ranks 2 --json again.json >/dev/null ||
	fail "plan --zero 1 --offload-params: $(tail -n 1 z1.json)"
n=$(($(json_host_total whole.json) / 16)) && S=$(((n + 1) / 2))
want=$((8 * n + 8 * S + 4 * (2 * S - n)))
if grep -q 'layers.weights=host:stream.*adam=host:cpu:shard(2)' <<<"$(json_place z1.json)" &&
	[ "$(json_host_total z1.json)" = "$want" ] && cmp -s z1.json again.json; then
	echo "ok: plan --zero 1 --offload-params: host $want bytes (n = $n, S = $S), --place reproduces it"
else
	fail "plan --zero 1 --offload-params: $(json_place z1.json), host $(json_host_total z1.json) not $want," \
		"or no round trip"
fi

# ZeRO-2's plan: the gradients a slice too, the host below ZeRO-1's
checks=$((checks + 1))
"$FERRY" plan "${plan[@]}" "${off[@]}" --zero 2 --ranks 2 --json z2.json >/dev/null 2>&1 &&
	"$FERRY" plan "${plan[@]}" --place "$(json_place z2.json)" --ranks 2 --json again.json >/dev/null ||
	fail "plan --zero 2 --offload-params: $(tail -n 1 z2.json)"
if grep -q 'layers.weights=host:stream.*adam=host:cpu:shard(2,grads)' <<<"$(json_place z2.json)" &&
	[ "$(json_host_total z2.json)" -lt "$want" ] && cmp -s z2.json again.json; then
	echo "ok: plan --zero 2 --offload-params: host $(json_host_total z2.json) bytes (ZeRO-1's $want), --place reproduces it"
else
	fail "plan --zero 2 --offload-params: $(json_place z2.json), host $(json_host_total z2.json) (ZeRO-1's $want)," \
		"or no round trip"
fi

expect_error "adam=host:cpu:shard(2) with the parameters offloaded in one process" \
	"adam=host:cpu:shard(2) splits AdamW's state over 2 ranks; this run has 1" \
	"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:cpu:shard(2),layers.weights=host:stream'
finish
