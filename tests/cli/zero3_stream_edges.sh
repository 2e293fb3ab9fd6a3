#!/usr/bin/env bash
# ZeRO-3 with the parameters and the edges on the host and AdamW streamed
# (--zero 3 --offload-params --offload-optimizer stream
# --offload-embeddings: adam=host:stream:shard(N,params) with
# layers.weights and edges.weights=host:stream; issue 22 item 4): each
# rank's host keeps its slice of the master weights and moments, the
# embeddings, head and final norm included; the edges' ring gathers a
# stage's parameters from the ranks' host slices (staged up in pieces)
# into the edge region, their gradients go home whole and are
# reduce-scattered from there, and the device's optimizer ring passes the
# rank's slice, the edges' part too, through AdamW and back into the
# host slice the next forward's gathers stage from.
# On 2 ranks, GPT-2 (tied head) and Llama (its own head), an embedding
# table across the bound of the ranks' slices (--vocab 4096), several
# policies, --grad-accum 2: the same files, bit for bit, as --zero 3 with
# AdamW on host threads (--offload-optimizer cpu) and as --zero 0 in the
# same mode; --place as the plan prints it trains those bits too.  On 3
# ranks (the last slice padded): the bits of --zero 3 on host threads and
# within 1e-6 of one process with the global batch.  Saved on 2 ranks at
# step 3: resumed on 2, the unbroken run's bits; on 3, the bits of --zero
# 3 on host threads resumed so; on 1, within 1e-6 of the unbroken run.
# `ferry plan`: the placement read back; the host bytes worked out from
# the parameter count and the shape; the device's the edge region in
# place of the edges' whole copy and gradients; every rank's measured
# peaks its plan's on 2 and 3 ranks.  Skips without mpirun or a ferry
# built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
off=(--offload-params --offload-optimizer stream --offload-embeddings)
cpu=(--offload-params --offload-optimizer cpu --offload-embeddings)

# On 2 ranks: streamed, on host threads, and --zero 0 streamed.
alike() { # NAME ORDER MORE
	saves_alike "$1 ($3) on 2 ranks: --zero 3 streamed, --zero 3 on host threads, --zero 0 streamed" 2 \
		"z3 --batch 2 ${off[*]} --zero 3" "z3cpu --batch 2 ${cpu[*]} --zero 3" "z0 --batch 2 ${off[*]} --zero 0"
}
for_runs alike "gpt2 (tied head)|gpt||--vocab 4096" "gpt2 qkv_proj_offloaded|gpt||--policy qkv_proj_offloaded" \
	"gpt2 nothing_saveable, micro-batches|gpt||--vocab 4096 --policy nothing_saveable --grad-accum 2" \
	"llama (its own head)|llama||--vocab 4096" \
	"llama minimal_offloaded, micro-batches|llama||--vocab 4096 --policy minimal_offloaded --grad-accum 2"

# The placement `ferry plan` prints, given back as --place: the bits of
# the flags (z3 is Llama's last run above).
pshape=(--max-seq 32 --seq 16) # (`common`'s shape, for ferry plan)
checks=$((checks + 1))
"$FERRY" plan "${pshape[@]}" "${llama[@]}" --batch 2 --vocab 4096 --policy minimal_offloaded \
	"${off[@]}" --zero 3 --ranks 2 --json placed.json >/dev/null || fail "plan: $(tail -n 1 placed.json)"
place=$(json_place placed.json)
if grep -qF 'adam=host:stream:shard(2,params)' <<<"$place" && grep -q 'edges.weights=host:stream' <<<"$place" &&
	trains byplace 2 "${llama[@]}" --batch 2 --vocab 4096 --grad-accum 2 --place "$place" &&
	same_save z3 byplace; then
	echo "ok: --place $place on 2 ranks: the bits of the flags"
else
	fail "--place $place: other bits than the flags' (or it failed)"
fi

# 3 ranks (the last slice padded): the bits of --zero 3 on host threads,
# and within 1e-6 of one process reading their batch.
on3() { # NAME ORDER MORE
	local d
	trains on3 3 "${shape[@]}" --steps 8 --batch 2 "${off[@]}" --zero 3 "${extra[@]}" --json on3.json &&
		trains on3cpu 3 "${shape[@]}" --steps 8 --batch 2 "${cpu[@]}" --zero 3 "${extra[@]}" || return
	"$FERRY" train "${common[@]}" "${shape[@]}" --steps 8 --batch 6 "${off[@]}" "${extra[@]}" --json one.json \
		>one.out 2>&1 || { fail "one process $3: $(tail -n 2 one.out)"; return; }
	if d=$(losses_agree one.json on3.json) && same_save on3cpu on3; then
		echo "ok: $1 ($3) on 3 ranks: the bits of --zero 3 on host threads; against one process: $d"
	else
		fail "$1 ($3) on 3 ranks: against one process ${d:-other losses}, or other bits than on host threads"
	fi
	rm -f on3.json one.json
}
for_runs on3 "gpt2|gpt||--vocab 4096" "llama|llama||--vocab 4096 --grad-accum 2"

# Saved on 2 ranks at step 3 (6 rows a step): resumed on 2, the unbroken
# run's bits; on 3, those of --zero 3 on host threads resumed so; on 1,
# within 1e-6 of the unbroken run.
resumes() { # NAME ORDER MORE
	local d
	rm -f unbroken.json
	trains unbroken 2 "${shape[@]}" --batch 3 "${off[@]}" --zero 0 "${extra[@]}" --json unbroken.json &&
		trains half 2 "${shape[@]}" --batch 3 "${off[@]}" --zero 3 "${extra[@]}" --steps 3 || return
	resume 2 again "${off[@]}" --zero 3
	resume 3 on3 "${off[@]}" --zero 3
	resume 3 on3cpu "${cpu[@]}" --zero 3
	resume 1 on1 "${off[@]}"
	if [ -e again ] && same_save unbroken again && same_save on3cpu on3 && d=$(losses_agree unbroken.json on1.json 4)
	then
		echo "ok: $1 ($3) saved on 2 ranks at step 3: resumed on 2, the unbroken run's bits; on 3, those of" \
			"--zero 3 on host threads; on 1, against the unbroken run: $d"
	else
		fail "resuming $1 ($3) from 2 ranks: ${d:-other bits}"
	fi
}
for_runs resumes "gpt2|gpt||--vocab 4096" "llama|llama||--vocab 4096"

# The plan of one rank of 2 (Llama, 8 layers, V = 4096, C = 32): the
# placement read back; the host's bytes 12 S (master, m and v: S the
# rank's slice, whole blocks of the norm's sum, 256 blocks of ceil(n/256)
# elements, n the unsplit plan's host bytes / 16) and the edges'
# gradients whole (4 (2 V C + C): embedding, head, final norm); the
# device's 8 V C less than without --offload-embeddings (the edges' whole
# copy and gradients, 2 x 4 (2 V C + C), for the edge region, the largest
# stage's weights and gradients: the head and norm's, 2 x 4 (V C + C)),
# as --zero 0 saves.
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

# Every rank's measured device peak and host bytes are its plan's (2 and 3
# ranks; 3: the last slice padded).
per_rank() { # FILE KEY: "rank device host" lines
	grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g; s/^ //'
}
for entry in "2|gpt|--vocab 4096" "3|llama|--vocab 4096 --policy nothing_saveable"; do
	IFS='|' read -r r model more <<<"$entry"
	unset -n shape
	declare -n shape=$model
	read -r -a extra <<<"$more"
	checks=$((checks + 1))
	rm -f measured.json
	"$FERRY" plan "${pshape[@]}" --vocab 257 "${shape[@]}" --batch 2 "${off[@]}" --zero 3 "${extra[@]}" --ranks "$r" \
		--json planned.json >/dev/null && trains measured "$r" "${shape[@]}" --batch 2 --steps 2 "${off[@]}" \
		--zero 3 "${extra[@]}" --json measured.json || continue
	planned=$(per_rank planned.json device_bytes) measured=$(per_rank measured.json device_peak_bytes)
	if [ "$(grep -c . <<<"$planned")" = "$r" ] && [ "$planned" = "$measured" ]; then
		echo "ok: $model ($more) on $r ranks: every rank measures its plan ($(head -1 <<<"$planned"))"
	else
		fail "$model ($more) on $r ranks: planned [$planned], measured [$measured]"
	fi
done
finish
