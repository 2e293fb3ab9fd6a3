#!/usr/bin/env bash
# --device-grads on several ranks (adam.grads=device:stream(D) with
# adam=host:cpu and, with --zero 1, 2, 3, :shard(N[,grads|params]);
# issue 22 item 4): each layer's gradients averaged on the device as the
# backward goes on (ZeRO-2 and 3: reduce-scattered into the rank's
# slice), then only the rank's pieces of them copied through the host
# ring and updated by its threads.  On 2 ranks, GPT-2 and Llama, several
# policies, --grad-accum 2, both clipping orders (clipped, so redone, and
# not): --zero 0, 1, 2 and 3 save the bits of --zero 0 with the host copy
# of the gradients (--offload-optimizer cpu), and the losses are within
# 1e-6 of one process of the global batch (not its bits: one process sums
# 4 rows' gradients in one product, 2 ranks average two sums of 2); one
# rank through MPI (FERRY_COMM_ENGINE=mpi, the comm stream's averages of
# one rank) saves a plain process's bits, both orders.  On 3 ranks --zero 1
# saves --zero 0's bits, 2 and 3 those of --zero 2 with the host copy (the
# same reduce-scatter; not --zero 0's all-reduce order), every stage within
# 1e-6 of one process.  Saved at step 3 on 2 ranks, the bits of AdamW on
# the device; resumed on 3 (--zero 1: the bits of AdamW on the device
# resumed there; 2 and 3 those of --zero 2 with the host copy resumed so,
# within 1e-6 of the device's) and on 1 (the bits of one process resumed).  Through MPI host staging
# (FERRY_COMM_STAGE=1, pieces of 100 bytes) the unstaged bits.  The plan:
# the device bytes of the host copy's, the host bytes its less the
# rank's gradient slice plus the ring, the placement read back (plan =
# measured on every rank: plan_ranks.sh).  Skips without mpirun or MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 2
dg=(--device-grads)

# saves_host NAME: the save NAME has the bits of `host` (the reference)
saves_host() { same_save host "$1" || { fail "$2: $1 differs from the host copy's --zero 0"; return 1; }; }

# on2 NAME ORDER MORE: one process of 4 rows, and on 2 ranks of 2 the
# host copy at --zero 0 and --device-grads at every stage
on2() {
	local name=$1 order=$2 z ok=1
	rm -f one.json z*.json
	"$FERRY" train "${common[@]}" "${shape[@]}" --batch 4 "${dg[@]}" --clip-order "$order" "${extra[@]}" \
		--json one.json >one.out 2>&1 || { fail "$name: one process: $(tail -n 2 one.out)"; return; }
	trains host 2 "${shape[@]}" --batch 2 --offload-optimizer cpu --clip-order "$order" "${extra[@]}" || return
	for z in 0 1 2 3; do
		trains "z$z" 2 "${shape[@]}" --batch 2 "${dg[@]}" --zero $z --clip-order "$order" "${extra[@]}" \
			--json "z$z.json" && saves_host "z$z" "$name --zero $z" || ok=0
	done
	d=$(losses_agree one.json z0.json) || { fail "$name: 2 ranks against one process: $d"; return; }
	[ $ok = 1 ] && echo "ok: $name ($order $3): --zero 0-3 --device-grads on 2 ranks save the host copy's bits; one process: $d"
}
RUNS=("gpt2|gpt|exact|" "gpt2 qkv_proj_offloaded|gpt|exact|--policy qkv_proj_offloaded"
	"gpt2 nothing_saveable, micro-batches|gpt|exact|--policy nothing_saveable --grad-accum 2"
	"gpt2 speculative, clipped|gpt|speculative|" "gpt2 speculative, unclipped, micro-batches|gpt|speculative|--grad-clip 10 --grad-accum 2"
	"llama|llama|exact|" "llama minimal_offloaded|llama|exact|--policy minimal_offloaded"
	"llama micro-batches|llama|exact|--grad-accum 2"
	"llama speculative, clipped|llama|speculative|--policy nothing_saveable"
	"llama speculative, unclipped|llama|speculative|--grad-clip 10")
for_runs on2 "${RUNS[@]}"

# one rank through MPI: every gradient averaged over one rank on the comm
# stream (--zero has nothing to split over one rank), a plain process's bits
for order in exact speculative; do
	checks=$((checks + 1))
	"$FERRY" train "${common[@]}" "${llama[@]}" --batch 2 "${dg[@]}" --clip-order $order --save plain >plain.out 2>&1
	mpi_run 1 env FERRY_COMM_ENGINE=mpi "$FERRY" train "${common[@]}" "${llama[@]}" --batch 2 "${dg[@]}" \
		--clip-order $order --save one_rank >one_rank.out 2>&1 || { fail "one rank: $(tail -n 2 one_rank.out)"; continue; }
	grep -q "^collectives: MPI" one_rank.out && same_save plain one_rank &&
		echo "ok: one rank through MPI, --device-grads, $order: a plain process's bits" ||
		fail "one rank through MPI, --device-grads, $order: other bits ($(grep collectives one_rank.out))"
done

# 3 ranks of 2 rows against one process of 6
for model in gpt llama; do
	declare -n shape=$model
	checks=$((checks + 1))
	rm -f one.json z*.json
	"$FERRY" train "${common[@]}" "${shape[@]}" --batch 6 "${dg[@]}" --json one.json >one.out 2>&1 ||
		fail "$model: one process of 6 rows"
	worst=""
	for z in 0 1 2 3; do
		trains "z$z" 3 "${shape[@]}" --batch 2 "${dg[@]}" --zero $z --clip-order speculative --json "z$z.json" || continue
		d=$(losses_agree one.json "z$z.json") || fail "$model --zero $z on 3 ranks against one process: $d"
		worst+=" ${d##* }"
	done
	trains h2 3 "${shape[@]}" --batch 2 --offload-optimizer cpu --zero 2 --clip-order speculative
	same_save z0 z1 && same_save h2 z2 && same_save h2 z3 &&
		echo "ok: $model on 3 ranks: --zero 1 saves --zero 0's bits, 2 and 3 those of --zero 2 with the host copy; --zero 0-3 within [$worst ] of one process" ||
		fail "$model on 3 ranks: --zero 1 --device-grads differs from --zero 0, or 2 or 3 from --zero 2 with the host copy"
	unset -n shape
done

# Saved on 2 ranks at step 3 (6 rows a step), resumed on 3 and on 1.
checks=$((checks + 1))
trains half 2 "${gpt[@]}" --batch 3 "${dg[@]}" --zero 2 --steps 3 &&
	trains dev_half 2 "${gpt[@]}" --batch 3 --steps 3 &&
	same_save dev_half half && echo "ok: --zero 2 --device-grads saved at step 3 on 2 ranks: AdamW on the device's bits" ||
	fail "--zero 2 --device-grads saved at step 3: other bits than AdamW on the device"
checks=$((checks + 1))
resume 3 r3_dev --zero 0
resume 3 r3_z1 --zero 1 "${dg[@]}"
same_save r3_dev r3_z1 && echo "ok: resumed on 3 ranks, --zero 1 --device-grads: the bits of AdamW on the device" ||
	fail "resumed on 3 ranks: --zero 1 --device-grads differs from AdamW on the device"
resume 3 r3_h2 --zero 2 --offload-optimizer cpu
for z in 2 3; do
	checks=$((checks + 1))
	resume 3 "r3_z$z" --zero $z "${dg[@]}"
	d=$(losses_agree r3_dev.json "r3_z$z.json" 4) && same_save r3_h2 "r3_z$z" &&
		echo "ok: resumed on 3 ranks, --zero $z --device-grads: --zero 2 with the host copy's bits; AdamW on the device's $d" ||
		fail "resumed on 3 ranks, --zero $z --device-grads: other bits than --zero 2 with the host copy, or against AdamW on the device $d"
done
checks=$((checks + 1))
resume 1 r1_dev
resume 1 r1_dg "${dg[@]}"
same_save r1_dev r1_dg && echo "ok: resumed in one process with --device-grads: the bits of AdamW on the device" ||
	fail "resumed in one process: --device-grads differs from AdamW on the device"

# Through MPI host staging, pieces of 100 bytes: the unstaged bits.
for z in 0 1 2 3; do
	checks=$((checks + 1))
	m=gpt order=speculative
	[ $z -ge 2 ] && m=llama order=exact
	declare -n shape=$m
	trains plain 2 "${shape[@]}" --batch 2 "${dg[@]}" --zero $z --grad-accum 2 --clip-order $order || continue
	rm -rf staged staged.state
	"${MPIRUN[@]}" -x FERRY_COMM_STAGE=1 -x FERRY_COMM_STAGE_BYTES=100 -np 2 "$FERRY" train "${common[@]}" \
		"${shape[@]}" --batch 2 "${dg[@]}" --zero $z --grad-accum 2 --clip-order $order --save staged >staged.out 2>&1
	grep -q "^collectives: MPI through host staging" staged.out && same_save plain staged &&
		echo "ok: $m --zero $z --device-grads ($order, micro-batches) staged through 100 bytes: the unstaged bits" ||
		fail "$m --zero $z --device-grads staged: $(tail -n 2 staged.out)"
	unset -n shape
done

# The plan of one rank of 2: the host copy's device bytes; its host bytes
# less its gradients (the rank's slice at --zero 1-3) plus the ring's
# slots (two of a layer, as on one rank); the placement read back.
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
finish
