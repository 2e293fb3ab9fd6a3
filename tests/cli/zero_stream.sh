#!/usr/bin/env bash
# ZeRO-2 and 3 with AdamW's state streamed from the host (--zero 2|3
# --offload-optimizer stream, adam=host:stream:shard(N,grads|params); issue
# 22 item 4): each rank's host keeps its slice of the master weights and
# moments, whose pieces pass through the device's optimizer ring; there
# AdamW reads ZeRO-2's gradient slice and writes the compute copy (ZeRO-3:
# the device's weight slice).  On 2 ranks, GPT-2 and Llama, several
# activation policies, --grad-accum 2: the same files, bit for bit, as
# --zero 0 streamed and as --zero 2 or 3 on the device.  On 3 ranks (the
# last slice padded): the bits of --zero 2 or 3 on the device (the same
# reduce-scatter; not --zero 0's, whose all-reduce adds in another order).
# Saved on 2 ranks at step 3 and resumed: on 2, the unbroken --zero 0
# run's bits; on 3, those of the device's --zero K resumed so; on 1, those
# of one process resumed with AdamW on the device, within 1e-6 of the
# unbroken run.  `ferry plan` prints the placement, --place reproduces it,
# a rank's host bytes are 12 a slice element (each rank's measured bytes
# are its plan's: plan_ranks.sh).  Skips without mpirun or a ferry built
# with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
stream=(--offload-optimizer stream)

# NAME|MODEL|MORE on 2 ranks: --zero 2 and 3 streamed against --zero 0
# streamed and against the same stage on the device
runs=("gpt2|gpt|" "gpt2 qkv_proj_offloaded|gpt|--policy qkv_proj_offloaded"
	"gpt2 nothing_saveable, micro-batches|gpt|--policy nothing_saveable --grad-accum 2"
	"llama|llama|" "llama minimal_offloaded|llama|--policy minimal_offloaded" "llama micro-batches|llama|--grad-accum 2")
for entry in "${runs[@]}"; do
	IFS='|' read -r name model more <<<"$entry"
	unset -n shape
	declare -n shape=$model
	read -r -a extra <<<"$more"
	trains z0 2 "${shape[@]}" --batch 2 "${stream[@]}" --zero 0 "${extra[@]}" || continue
	for z in 2 3; do
		checks=$((checks + 1))
		trains dev 2 "${shape[@]}" --batch 2 --zero $z "${extra[@]}" &&
			trains zs 2 "${shape[@]}" --batch 2 "${stream[@]}" --zero $z "${extra[@]}" || continue
		if same_save z0 zs && same_save dev zs; then
			echo "ok: $name ($more) on 2 ranks: --zero $z streamed saves the bits of --zero 0 streamed and of" \
				"--zero $z on the device"
		else
			fail "$name ($more) on 2 ranks: --zero $z streamed, --zero 0 streamed and --zero $z differ"
		fi
	done
done

# 3 ranks: the last slice padded.
for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	for z in 2 3; do
		checks=$((checks + 1))
		trains dev 3 "${shape[@]}" --batch 2 --zero $z &&
			trains zs 3 "${shape[@]}" --batch 2 "${stream[@]}" --zero $z || continue
		if same_save dev zs; then
			echo "ok: $model on 3 ranks: --zero $z streamed saves the bits of --zero $z on the device"
		else
			fail "$model on 3 ranks: --zero $z streamed and on the device differ"
		fi
	done
done

# Saved on 2 ranks at step 3 (6 rows a step): resumed on 2, the unbroken
# --zero 0 run's bits; on 3, the device's --zero K resumed so; on 1, one
# process's with AdamW on the device, within 1e-6 of the unbroken run.
trains unbroken 2 "${gpt[@]}" --batch 3 "${stream[@]}" --zero 0 --json unbroken.json
for z in 2 3; do
	checks=$((checks + 1))
	trains half 2 "${gpt[@]}" --batch 3 "${stream[@]}" --zero $z --steps 3 || continue
	resume 2 again "${stream[@]}" --zero $z
	resume 3 on3 "${stream[@]}" --zero $z
	resume 3 on3_dev --zero $z
	resume 1 on1 "${stream[@]}"
	resume 1 on1_dev
	if [ -f again ] && same_save unbroken again && same_save on3 on3_dev && same_save on1 on1_dev &&
		d=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: --zero $z streamed, saved on 2 ranks at step 3: resumed on 2, the unbroken run's bits; on 3," \
			"the device's --zero $z bits; on 1, one process's bits, against the unbroken run: $d"
	else
		fail "resuming --zero $z streamed from 2 ranks: ${d:-other bits}"
	fi
done

# The plan of one rank of 2: the placement printed and read back; its host
# bytes 12 S (master, m, v), S whole blocks of the norm's sum (256 blocks
# of ceil(n/256) elements), n the unsplit streamed plan's (12 bytes an
# element); with 8 layers (the ring holds 2) ZeRO-3's device peak below
# ZeRO-2's, and ZeRO-2's below ZeRO-1's.
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
finish
