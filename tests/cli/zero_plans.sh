#!/usr/bin/env bash
# The plans of ZeRO's placements, one rank of several (issue 22 items 4,
# 7): `ferry plan` prints each placement, --place reproduces the plan byte
# for byte, and a rank's bytes are worked out by hand from the parameter
# count and the shape; what a run in one process cannot split is refused.
# That each rank measures its plan, the sharding a stage brings and the
# bits each placement trains: the placement matrix (placements.matrix).
# Plans only, no mpirun: the same checks in every build.
. "$(dirname "$0")/lib.bash"
zero_setup 3

# ZeRO on the device: the plan of one rank of 2 smaller stage by stage, and
# naming the placements, the gradient slots and the gathered weight ring.
# (zero.sh before the matrix)
device_plans() {
	local deep=(--layers 6 --channels 32 --heads 4 --batch 2) z
	plan_zero() { # plan_zero K SHARD: ferry plan's JSON of --place adam=device:shard(SHARD) into planK.json
		"$FERRY" plan --vocab 257 --max-seq 32 --seq 16 "${deep[@]}" --place "adam=device:shard($2)" --json "plan$1.json" \
			>/dev/null 2>&1
	}
	plan_zero 1 2 && plan_zero 2 2,grads && plan_zero 3 2,params || fail "planning --zero 1, 2, 3"
	for z in 2 3; do
		checks=$((checks + 1))
		if [ "$(json_field "plan$z.json" peak_bytes)" -lt "$(json_field "plan$((z - 1)).json" peak_bytes)" ]; then
			echo "ok: --zero $z planned $(json_field "plan$z.json" peak_bytes) bytes a rank" \
				"(--zero $((z - 1)): $(json_field "plan$((z - 1)).json" peak_bytes))"
		else
			fail "--zero $z's plan: $(json_field "plan$z.json" peak_bytes), --zero $((z - 1))'s" \
				"$(json_field "plan$((z - 1)).json" peak_bytes)"
		fi
	done
	checks=$((checks + 1))
	if grep -q '"place": "[^"]*adam=device:shard(2,grads)' plan2.json && grep -q '"gradient slots"' plan2.json &&
		grep -q '"place": "[^"]*adam=device:shard(2,params)' plan3.json && grep -q '"weight ring (gathered)"' plan3.json
	then
		echo "ok: the plans name the placements, the gradient slots and the gathered weight ring"
	else
		fail "the plans of --zero 2 and 3 lack their placement or slots"
	fi
	expect_error "--zero 4" "--zero 4: 0, 1, 2 or 3" "$FERRY" train "${common[@]}" --zero 4
	expect_error "a split over 2 ranks in one process" "over 2 ranks; this run has 1" \
		"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=device:shard(2)'
}

# The plan of one rank of 2: the placement printed and read back, its
# host bytes a slice's (16 bytes an element: master, m, v, gradient; the
# speculative order's undo copy of master, m and v 12 more) of the
# parameters the unsplit exact plan holds (16 bytes each).
# (zero_host.sh before the matrix)
host_plans() {
	local gpt=(--layers 2 --channels 32 --heads 4) llama=(--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2)
	local cpu=(--offload-optimizer cpu)
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
}

# The plan of one rank of 2: the placement printed and read back; its host
# bytes 12 S (master, m, v), S whole blocks of the norm's sum (256 blocks
# of ceil(n/256) elements), n the unsplit streamed plan's (12 bytes an
# element); with 8 layers (the ring holds 2) ZeRO-3's device peak below
# ZeRO-2's, and ZeRO-2's below ZeRO-1's.
# (zero_stream.sh before the matrix)
stream_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local stream=(--offload-optimizer stream)
	plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}" --layers 8)
	"$FERRY" plan "${plan[@]}" "${stream[@]}" --json whole.json >/dev/null ||
		fail "plan --offload-optimizer stream: $(tail -n 1 whole.json)"
	n=$(($(json_host_total whole.json) / 12)) && per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
	for z in 1 2 3; do
		"$FERRY" plan "${plan[@]}" --zero $z "${stream[@]}" --ranks 2 --json "z$z.json" >/dev/null 2>&1 ||
			fail "plan --zero $z --offload-optimizer stream: $(tail -n 1 "z$z.json")"
	done
	for z in 2 3; do
		checks=$((checks + 1))
		want=$([ $z = 2 ] && echo 'adam=host:stream:shard(2,grads)' || echo 'adam=host:stream:shard(2,params)')
		"$FERRY" plan "${plan[@]}" --place "$(json_place "z$z.json")" --ranks 2 --json again.json >/dev/null 2>&1 ||
			fail "plan --place $(json_place "z$z.json"): $(tail -n 1 again.json)"
		if grep -qF "$want" <<<"$(json_place "z$z.json")" && [ "$(json_host_total "z$z.json")" = $((12 * S)) ] &&
			[ "$(json_field "z$z.json" peak_bytes)" -lt "$(json_field "z$((z - 1)).json" peak_bytes)" ] &&
			grep -q '"optimizer ring"' "z$z.json" && cmp -s "z$z.json" again.json; then
			echo "ok: plan $want: host $((12 * S)) bytes (S = $S), device $(json_field "z$z.json" peak_bytes)" \
				"(--zero $((z - 1)): $(json_field "z$((z - 1)).json" peak_bytes)), --place reproduces it"
		else
			fail "plan $want: $(json_place "z$z.json"), host $(json_host_total "z$z.json") not $((12 * S)), device" \
				"$(json_field "z$z.json" peak_bytes) (--zero $((z - 1)): $(json_field "z$((z - 1)).json" peak_bytes))"
		fi
	done

	expect_error "adam=host:stream:shard(2,params) in one process" \
		"adam=host:stream:shard(2,params) splits AdamW's state over 2 ranks; this run has 1" \
		"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:stream:shard(2,params)'
}

# The plan of one rank of 2: the placement printed and read back; its host
# bytes 16 S (master, m, v, gradient), S whole blocks of the norm's sum (256
# blocks of ceil(n/256) elements), n the unsplit exact plan's (16 bytes an
# element); with 8 layers (the ring holds 2) the device's peak below
# ZeRO-2 on the host's.
# (zero3_host.sh before the matrix)
host3_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local host=(--offload-optimizer cpu)
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
}

# The plan of one rank of 2: the placement printed and read back; the host
# holds the parameters and gradients whole, the moments a slice: 16 bytes
# an unsplit element less 8 for the half of the moments a rank does not
# hold (S = ceil(n/2); the parameters padded to 2S).
# (zero_offload_params.sh before the matrix)
params_host_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local off=(--offload-params --offload-optimizer cpu)
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
}

# The plan of one rank of 2 (8 layers): the placement printed and read
# back; the host bytes from n, the unsplit plan's parameter count (16
# bytes an element: master, gradient, m, v), S = ceil(n/2) for ZeRO-1 and
# S2, ZeRO-2's whole blocks of the norm's sum (256 blocks of ceil(n/256)):
# ZeRO-1 the parameters (padded to 2S) and gradients whole, m and v a
# slice; ZeRO-2 the host bytes of ZeRO-2 on host threads (the same
# arrays), below ZeRO-1's; ZeRO-3 the master, m and v a slice (12 S2),
# and the device the optimizer ring, below --zero 3 streamed without
# --offload-params (the device's slice 4 S2 less the staging slot).
# (zero_params_stream.sh before the matrix)
params_stream_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local off=(--offload-params --offload-optimizer stream)
	local cpu=(--offload-params --offload-optimizer cpu)
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
}

# The plan of one rank of 2: the placement printed and read back; the
# device's bytes those of the slice on the device less the slice (S floats,
# S whole blocks of the norm's sum: 256 blocks of ceil(n/256) elements, n
# the unsplit exact plan's host bytes / 16) plus the staging slot (GPT-2's
# largest layer part: the MLP's 4C x C weights, 4 C^2 floats), each
# rounded up to 256 bytes; the host's the same.
# (zero3_offload_params.sh before the matrix)
params3_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local host=(--offload-optimizer cpu)
	local off=(--offload-params --offload-optimizer cpu)
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
}

# The plan of one rank of 2 (Llama, 8 layers, V = 4096, C = 32): the
# placement read back; the host's bytes 12 S (master, m and v: S the
# rank's slice, whole blocks of the norm's sum, 256 blocks of ceil(n/256)
# elements, n the unsplit plan's host bytes / 16) and the edges'
# gradients whole (4 (2 V C + C): embedding, head, final norm); the
# device's 8 V C less than without --offload-embeddings (the edges' whole
# copy and gradients, 2 x 4 (2 V C + C), for the edge region, the largest
# stage's weights and gradients: the head and norm's, 2 x 4 (V C + C)),
# as --zero 0 saves.
# (zero3_stream_edges.sh before the matrix)
edges_plans() {
	local gpt=(--layers 3 --channels 32 --heads 4) llama=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2)
	local off=(--offload-params --offload-optimizer stream --offload-embeddings)
	V=4096 C=32
	plan=(--vocab "$V" --max-seq 32 --seq 16 --batch 2 "${llama[@]}" --layers 8)
	checks=$((checks + 1))
	"$FERRY" plan "${plan[@]}" "${off[@]}" --json whole.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" "${off[@]}" --zero 3 --ranks 2 --json e3.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" "${off[@]:0:3}" --zero 3 --ranks 2 --json s3.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" "${off[@]}" --zero 0 --ranks 2 --json e0.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" "${off[@]:0:3}" --zero 0 --ranks 2 --json s0.json >/dev/null &&
		"$FERRY" plan "${plan[@]}" --place "$(json_place e3.json)" --ranks 2 --json again.json >/dev/null ||
		fail "plan --zero 3 streamed with the edges: $(tail -n 1 e3.json)"
	n=$(($(json_host_total whole.json) / 16)) && per=$(((n + 255) / 256)) && S=$(((((n + per - 1) / per) + 1) / 2 * per))
	host=$(json_host_total e3.json) want=$((12 * S + 4 * (2 * V * C + C)))
	drop3=$(($(json_field s3.json peak_bytes) - $(json_field e3.json peak_bytes)))
	drop0=$(($(json_field s0.json peak_bytes) - $(json_field e0.json peak_bytes)))
	place=$(json_place e3.json)
	if grep -qF 'adam=host:stream:shard(2,params)' <<<"$place" && grep -q 'edges.weights=host:stream' <<<"$place" &&
		[ "$host" = "$want" ] && [ "$drop3" = $((8 * V * C)) ] && [ "$drop0" = "$drop3" ] && cmp -s e3.json again.json
	then
		echo "ok: plan --zero 3 streamed with the edges on 2 ranks: host $host bytes (n = $n, S = $S), device" \
			"$drop3 bytes below the edges whole (--zero 0: $drop0), --place reproduces it"
	else
		fail "plan --zero 3 streamed with the edges: $place, host $host not $want, device $drop3 below the edges whole" \
			"not $((8 * V * C)) (--zero 0: $drop0), or no round trip"
	fi
}

# The plan of one rank of 2 (8 layers) at depths 1, 2 and 3: D + 1 slots;
# the device's bytes at depth 3 two slots more than at depth 1 as at
# --zero 0, a slot being a layer's 12 parameters, each rounded up to 256
# bytes (C = 32: the norms' and biases' C, 3C and 4C, the weights' 3C^2,
# C^2 and twice 4C^2); the host's 12 S at every depth (S the
# slice of ZeRO-2's whole blocks of the norm's sum, zero_params_stream.sh), and --place reproduces it.
# (zero3_stream_prefetch.sh before the matrix)
prefetch_plans() {
	local gpt=(--layers 5 --channels 32 --heads 4) llama=(--model llama --layers 5 --channels 32 --heads 4 --kv-heads 2)
	local off=(--offload-params --offload-optimizer stream)
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
}

# The plan of one rank of 2: the host copy's device bytes; its host bytes
# less its gradients (the rank's slice at --zero 1-3) plus the ring's
# slots (two of a layer, as on one rank); the placement read back.
# (device_grads_ranks.sh before the matrix)
device_grads_plans() {
	local gpt=(--layers 2 --channels 32 --heads 4) llama=(--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2)
	local dg=(--device-grads)
	plan=(--vocab 257 --max-seq 32 --seq 16 --batch 2 "${gpt[@]}")
	kind_host() { json_plan "$1" 'd["by_kind"]["gradients"]["host_bytes"]'; }
	"$FERRY" plan "${plan[@]}" "${dg[@]}" --json one_rank.json >/dev/null || fail "plan --device-grads"
	ring=$(kind_host one_rank.json)
	for shard in "" ":shard(2)" ":shard(2,grads)" ":shard(2,params)"; do
		checks=$((checks + 1))
		"$FERRY" plan "${plan[@]}" --place "adam=host:cpu$shard" --json cpu.json >/dev/null &&
			"$FERRY" plan "${plan[@]}" --place "adam=host:cpu$shard,adam.grads=device:stream(1)" --json dg.json >/dev/null &&
			"$FERRY" plan "${plan[@]}" --place "$(json_place dg.json)" --json again.json >/dev/null ||
			{ fail "plan adam=host:cpu$shard with the gradients on the device: $(tail -n 1 dg.json)"; continue; }
		want=$(($(json_host_total cpu.json) - $(kind_host cpu.json) + ring))
		if [ "$(json_host_total dg.json)" = "$want" ] && [ "$(json_field dg.json peak_bytes)" = "$(json_field cpu.json peak_bytes)" ] &&
			grep -q "adam=host:cpu$shard,adam.grads=device:stream(1)" <<<"$(json_place dg.json)" && cmp -s dg.json again.json; then
			echo "ok: plan adam=host:cpu$shard,adam.grads=device:stream(1): host $want bytes (gradients $(kind_host cpu.json) -> a $ring-byte ring), the device's unchanged, read back"
		else
			fail "plan adam=host:cpu$shard with the gradients on the device: host $(json_host_total dg.json) (want $want), device $(json_field dg.json peak_bytes) ($(json_field cpu.json peak_bytes)), $(json_place dg.json)"
		fi
	done
	expect_error "--device-grads with --zero 2 in one process" "adam=host:cpu:shard(2,grads) splits AdamW's state over 2 ranks; this run has 1" \
		"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=host:cpu:shard(2,grads),adam.grads=device:stream(1)'
}
for f in device_plans host_plans stream_plans host3_plans params_host_plans params_stream_plans params3_plans \
	edges_plans prefetch_plans device_grads_plans; do
	mkdir -p "$WORK/$f" && cd "$WORK/$f" && "$f"
	cd "$WORK" || exit 1
done
finish
