#!/usr/bin/env bash
# ZeRO-1 with AdamW's state on the host (--zero 1 --offload-optimizer cpu,
# adam=host:cpu:shard(N); issue 22 item 4): each rank keeps its slice of
# the master weights, moments and host gradients and updates it on its own
# threads, then the compute copy is gathered (--offload-optimizer stream,
# adam=host:stream:shard(N): the slice streamed through the device's ring).
# On 2, 3 and 4 ranks, GPT-2 and Llama, exact and speculative order
# (clipping, so undone and redone, and not), with --grad-accum, and
# streamed: the same files, bit for bit, as --zero 0
# with the same offload mode and as the device run; a split run resumed on
# 4 ranks goes on as an unsplit one does.  ZeRO-2 on the host (--zero 2
# --offload-optimizer cpu, adam=host:cpu:shard(N,grads)): the gradients
# reduce-scattered into the device's slice, only it copied down; the same
# bits, resumed on another rank count too; `ferry plan` prints the placement,
# --place reproduces the plan, and its host bytes are a slice's (that each
# rank's measured host bytes are its plan's, exactly: plan_ranks.sh).
# ZeRO-3 on the host: zero3_host.sh; with --offload-params:
# zero_offload_params.sh, zero_params_stream.sh.  Skips without mpirun or a
# ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 2
cpu=(--offload-optimizer cpu)
spec=(--offload-optimizer cpu --clip-order speculative)
stream=(--offload-optimizer stream)

# NAME|RANKS|MODEL|MODE|MORE: --zero STAGE against --zero 0 in MODE, and the device run
against_zero0() {
	local stage=$1 name n model mode more
	IFS='|' read -r name n model mode more <<<"$2"
	declare -n shape=$model opts=$mode
	read -r -a extra <<<"$more"
	checks=$((checks + 1))
	rm -rf dev z0 z1 dev.state z0.state z1.state
	trains dev "$n" "${shape[@]}" --batch 2 "${extra[@]}" &&
		trains z0 "$n" "${shape[@]}" --batch 2 "${opts[@]}" --zero 0 "${extra[@]}" &&
		trains z1 "$n" "${shape[@]}" --batch 2 "${opts[@]}" --zero "$stage" "${extra[@]}" || return
	if same_save z0 z1 && same_save dev z1; then
		echo "ok: $name (${opts[*]} $more) on $n ranks: --zero $stage saves the bits of --zero 0 and of the device run"
	else
		fail "$name (${opts[*]} $more) on $n ranks: --zero $stage, --zero 0 and the device run differ"
	fi
}
runs=("gpt2|2|gpt|cpu|" "gpt2 speculative, clipped|2|gpt|spec|" "gpt2 speculative, unclipped|2|gpt|spec|--grad-clip 10"
	"gpt2|3|gpt|cpu|" "gpt2, micro-batches|4|gpt|cpu|--grad-accum 2"
	"llama|2|llama|cpu|" "llama speculative|2|llama|spec|" "gpt2 streamed|3|gpt|stream|"
	"llama streamed|2|llama|stream|")
for entry in "${runs[@]}"; do
	against_zero0 1 "$entry"
done
# ZeRO-2 on the host (adam=host:cpu:shard(N,grads)): the gradients
# reduce-scattered into the device's slice, the slice copied down
# (on 2 ranks: on more MPI's reduce-scatter may add in another order than its all-reduce)
zero2=("gpt2|2|gpt|cpu|" "gpt2 speculative, clipped|2|gpt|spec|" "gpt2, micro-batches|2|gpt|cpu|--grad-accum 2"
	"llama|2|llama|cpu|" "llama speculative, unclipped|2|llama|spec|--grad-clip 10")
for entry in "${zero2[@]}"; do
	against_zero0 2 "$entry"
done

# Split on the host over 2 ranks at step 3, resumed on 4: split on the
# host, on the device, and not split, the same bits.
checks=$((checks + 1))
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 "${cpu[@]}" --zero 1 --steps 3 --save half >/dev/null 2>&1
for z in "0" "1 --offload-optimizer cpu" "1"; do
	# shellcheck disable=SC2086
	mpi_run 4 "$FERRY" train --resume half --zero $z --steps 6 --sample 0 --threads 1 --save "on4_${z// /_}" \
		>/dev/null 2>&1
done
if [ -f on4_1_--offload-optimizer_cpu ] && same_save on4_0 on4_1_--offload-optimizer_cpu && same_save on4_0 on4_1; then
	echo "ok: split on the host over 2 ranks at step 3, resumed on 4 split (host, device) and unsplit: the same bits"
else
	fail "resuming a run split on the host on 4 ranks: other bits"
fi
# ZeRO-2 on the host: saved on 2 ranks at step 3, the save of --zero 1
# there; a run saved unsplit on 4 ranks, resumed on 2 with --zero 2 on the
# host, goes on as --zero 0 does (more ranks than 2 add in MPI's order)
checks=$((checks + 1))
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 "${cpu[@]}" --zero 2 --steps 3 --save half2 \
	>/dev/null 2>&1
mpi_run 4 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 --steps 3 --save on4 >/dev/null 2>&1
for z in 0 2; do
	mpi_run 2 "$FERRY" train --resume on4 --zero $z --offload-optimizer cpu --steps 6 --sample 0 --threads 1 \
		--save "on2_$z" >/dev/null 2>&1
done
if [ -f half2 ] && [ -f on2_2 ] && same_save half half2 && same_save on2_0 on2_2; then
	echo "ok: --zero 2 on the host saves at step 3 the bits of --zero 1; a 4-rank run resumed on 2 so, of --zero 0"
else
	fail "--zero 2 on the host, saved on 2 ranks or resumed from 4: other bits"
fi

# The plan of one rank of 2: the placement printed and read back, its
# host bytes a slice's (16 bytes an element: master, m, v, gradient; the
# speculative order's undo copy of master, m and v 12 more) of the
# parameters the unsplit exact plan holds (16 bytes each).
plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}")
for order in exact speculative; do
	checks=$((checks + 1))
	"$FERRY" plan "${plan[@]}" "${cpu[@]}" --clip-order $order --json whole.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" "${cpu[@]}" --clip-order $order --place "adam=host:cpu$(
			[ $order = speculative ] && echo '(speculative)'):shard(2)" --json split.json >/dev/null 2>&1 &&
		"$FERRY" plan "${plan[@]}" --place "$(json_place split.json)" --json again.json >/dev/null ||
		{ fail "plan, $order: $(tail -n 1 split.json)"; continue; }
	per=$([ $order = speculative ] && echo 28 || echo 16)
	[ $order = exact ] && n=$(($(json_host_total whole.json) / 16))
	want=$(((n + 1) / 2 * per))
	if [ "$(json_host_total split.json)" = "$want" ] && grep -q ':shard(2)' <<<"$(json_place split.json)" &&
		cmp -s split.json again.json; then
		echo "ok: plan, $order: $(json_place split.json | grep -o 'adam=[^,]*'), host $want bytes for $n parameters, --place reproduces it"
	else
		fail "plan, $order: host $(json_host_total split.json) bytes, not $want, or the placement does not round-trip"
	fi
done

# ZeRO-2's plan: the placement printed and read back; a rank's host
# bytes 16 S, S whole blocks of the norm's sum (256 blocks of ceil(n/256)
# elements; ZeRO-1's S is ceil(n/2))
checks=$((checks + 1))
per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
"$FERRY" plan "${plan[@]}" --place 'adam=host:cpu:shard(2,grads)' --json z2.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --place 'adam=host:cpu:shard(2)' --json z1.json >/dev/null &&
	"$FERRY" plan "${plan[@]}" --place "$(json_place z2.json)" --json again.json >/dev/null ||
	fail "plan --zero 2 --offload-optimizer cpu: $(tail -n 1 z2.json)"
h2=$(json_host_total z2.json) h1=$(json_host_total z1.json)
if grep -q 'adam=host:cpu:shard(2,grads)' <<<"$(json_place z2.json)" && cmp -s z2.json again.json &&
	[ "$h2" = $((16 * S)) ] && [ "$h1" = $((16 * ((n + 1) / 2))) ]; then
	echo "ok: plan adam=host:cpu:shard(2,grads): host $h2 bytes (S = $S; ZeRO-1's $h1), --place reproduces it"
else
	fail "plan adam=host:cpu:shard(2,grads): $(json_place z2.json), host $h2 not $((16 * S)) (ZeRO-1's $h1)," \
		"or no round trip"
fi

expect_error "a split on the host over 2 ranks in one process" "adam=host:cpu:shard(2) splits AdamW's state over 2 ranks; this run has 1" \
	"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:cpu:shard(2)'
expect_error "adam=host:cpu:shard(2,params,grads)" "host:cpu:shard(N,params): and the parameters" "$FERRY" plan \
	"${plan[@]}" --place 'adam=host:cpu:shard(2,params,grads)'
finish
