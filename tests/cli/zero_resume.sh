#!/usr/bin/env bash
# ZeRO runs saved on some ranks and resumed on others (issue 22 item 4),
# each placement's (what the placement matrix, placements.matrix, does not
# do: it trains every row from step 0).  A save's bits do not depend on
# who held which slice: saved split at step 3 and resumed split on the
# same ranks, a run goes on as the unbroken one, bit for bit; on another
# number of ranks, as the same placement resumed so, and within 1e-6 of
# the unbroken run's losses (MPI adds 3 or 4 ranks' values in orders of
# its own).  In the sanitizer builds (FERRY_SANITIZED) the blocks marked
# "asan" below run: a stage of each placement kind (on the device, AdamW on
# host threads, streamed, the parameters on the host, the gradients on the
# device).  Also --zero 3's sample refusal and one rank through MPI.
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
gpt2=(--layers 2 --channels 32 --heads 4)
cpu=(--offload-optimizer cpu)
stream=(--offload-optimizer stream)
OP=(--offload-params --offload-optimizer cpu)
OS=(--offload-params --offload-optimizer stream)
dg=(--device-grads)

# ZeRO-2 and 3 on the device saved on 2 ranks at step 3: resumed on 2 the
# unbroken --zero 0 run's bits; on 4, within 1e-6 of it.  A split run saved
# on 2 ranks, resumed on 4 split and not: the same bits.
device() {
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero 0 --save unbroken >/dev/null 2>&1
	mpi_run 4 "$FERRY" train --resume unbroken --zero 0 --steps 8 --sample 0 --threads 1 --json on4_0.json \
		>/dev/null 2>&1
	for z in 2 3; do
		mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero $z --steps 3 --save half >/dev/null 2>&1
		mpi_run 2 "$FERRY" train --resume half --zero $z --steps 6 --sample 0 --threads 1 --save again >/dev/null 2>&1
		mpi_run 4 "$FERRY" train --resume again --zero $z --steps 8 --sample 0 --threads 1 --json "on4_$z.json" \
			>/dev/null 2>&1
		checks=$((checks + 1))
		if [ -f again ] && same_save unbroken again && d=$(losses_agree on4_0.json "on4_$z.json"); then
			echo "ok: --zero $z saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; then on 4: $d"
		else
			fail "resuming a --zero $z run: $(ls again 2>&1) ${d:-}"
		fi
		rm -rf half half.state again again.state
	done
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 --zero 1 --steps 3 --save half >/dev/null 2>&1
	for z in 0 1; do
		mpi_run 4 "$FERRY" train --resume half --zero $z --steps 6 --sample 0 --threads 1 --save "on4_$z" >/dev/null 2>&1
	done
	checks=$((checks + 1))
	if [ -f on4_1 ] && same_save on4_0 on4_1; then
		echo "ok: split over 2 ranks at step 3, resumed on 4 split as unsplit: the same bits"
	else
		fail "resuming a split run on 4 ranks: --zero 1 and --zero 0 differ"
	fi
}

# AdamW on host threads: split over 2 ranks at step 3, resumed on 4 split
# on the host, on the device and not, the same bits; ZeRO-2 on the host
# saves at step 3 the bits of --zero 1; a run saved unsplit on 4 ranks,
# resumed on 2 with --zero 2 on the host, goes on as --zero 0 does.
host() {
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt2[@]}" --batch 4 "${cpu[@]}" --zero 1 --steps 3 --save half >/dev/null 2>&1
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
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt2[@]}" --batch 4 "${cpu[@]}" --zero 2 --steps 3 --save half2 \
		>/dev/null 2>&1
	mpi_run 4 "$FERRY" train "${common[@]}" "${gpt2[@]}" --batch 4 --steps 3 --save on4 >/dev/null 2>&1
	for z in 0 2; do
		mpi_run 2 "$FERRY" train --resume on4 --zero $z --offload-optimizer cpu --steps 6 --sample 0 --threads 1 \
			--save "on2_$z" >/dev/null 2>&1
	done
	if [ -f half2 ] && [ -f on2_2 ] && same_save half half2 && same_save on2_0 on2_2; then
		echo "ok: --zero 2 on the host saves at step 3 the bits of --zero 1; a 4-rank run resumed on 2 so, of --zero 0"
	else
		fail "--zero 2 on the host, saved on 2 ranks or resumed from 4: other bits"
	fi
	rm -rf half* on4* on2_*
}

# ZeRO-3 on host threads saved on 2 ranks at step 3 (6 rows a step):
# resumed on 2, the unbroken run's bits; on 3, the bits of --zero 3 on the
# device resumed so, within 1e-6 of --zero 0.
host3() {
	checks=$((checks + 1))
	trains unbroken 2 "${gpt[@]}" --batch 3 "${cpu[@]}" --zero 0 &&
		trains half 2 "${gpt[@]}" --batch 3 "${cpu[@]}" --zero 3 --steps 3 || true
	resume 2 again "${cpu[@]}" --zero 3
	resume 3 on3 "${cpu[@]}" --zero 3
	resume 3 on3_dev --zero 3
	resume 3 on3_z0 "${cpu[@]}" --zero 0
	if [ -f again ] && same_save unbroken again && same_save on3 on3_dev && d=$(losses_agree on3_z0.json on3.json); then
		echo "ok: --zero 3 on the host saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; on 3: the" \
			"bits of --zero 3 on the device, against --zero 0: $d"
	else
		fail "resuming --zero 3 on the host: ${d:-other bits}"
	fi
}

# ZeRO-2 and 3 streamed saved on 2 ranks at step 3: resumed on 2, the
# unbroken --zero 0 run's bits; on 3, the device's --zero K resumed so; on
# 1, one process's with AdamW on the device, within 1e-6 of the unbroken run.
streamed() {
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
}

# The parameters on the host, AdamW on host threads, ZeRO-1 and 2: saved on
# 2 ranks at step 3, resumed on 3 and on 1, within 1e-6 of the unbroken run.
params_host() {
	trains unbroken 2 "${gpt[@]}" --batch 3 "${OP[@]}" --zero 0 --json unbroken.json
	for z in 1 2; do
		checks=$((checks + 1))
		trains half 2 "${gpt[@]}" --batch 3 "${OP[@]}" --zero "$z" --steps 3 || continue
		resume 3 on3 "${OP[@]}" --zero "$z"
		resume 1 on1 "${OP[@]}"
		if d3=$(losses_agree unbroken.json on3.json 4) && d1=$(losses_agree unbroken.json on1.json 4); then
			echo "ok: --zero $z --offload-params saved on 2 ranks at step 3: resumed on 3 ($d3), on 1 ($d1)"
		else
			fail "resuming --zero $z --offload-params on 3 or 1: ${d3:-} ${d1:-}"
		fi
	done
}

# The parameters on the host, AdamW streamed, ZeRO-1, 2 and 3: resumed on
# 2, the unbroken run's bits; on 3 and on 1, within 1e-6 of its losses.
params_stream() {
	trains unbroken 2 "${gpt[@]}" --batch 3 "${OS[@]}" --zero 0 --json unbroken.json
	for z in 1 2 3; do
		checks=$((checks + 1))
		trains half 2 "${gpt[@]}" --batch 3 "${OS[@]}" --zero "$z" --steps 3 || continue
		resume 2 again "${OS[@]}" --zero "$z"
		resume 3 on3 "${OS[@]}" --zero "$z"
		resume 1 on1 "${OS[@]}"
		if [ -f again ] && same_save unbroken again && d3=$(losses_agree unbroken.json on3.json 4) &&
			d1=$(losses_agree unbroken.json on1.json 4); then
			echo "ok: --zero $z streamed saved on 2 ranks at step 3: resumed on 2, the unbroken run's bits; on 3" \
				"($d3), on 1 ($d1)"
		else
			fail "resuming --zero $z streamed from 2 ranks: on 2 other bits, or ${d3:-on 3 other losses} ${d1:-}"
		fi
	done
}

# ZeRO-3 with the parameters on the host (MORE: and the edges), saved on 2
# ranks at step 3 (--param-prefetch 2): resumed on 2 (depth 3), the
# unbroken run's bits; on 3, those of --zero 3 with the slice on the device
# resumed so; on 1, within 1e-6 of the unbroken run.
params3() { # MORE...
	local d
	checks=$((checks + 1))
	rm -f unbroken.json
	trains unbroken 2 "${gpt[@]}" --batch 3 "${OP[@]}" "$@" --zero 0 --json unbroken.json &&
		trains half 2 "${gpt[@]}" --batch 3 "${OP[@]}" "$@" --zero 3 --param-prefetch 2 --steps 3 || true
	resume 2 again "${OP[@]}" "$@" --zero 3 --param-prefetch 3
	resume 3 on3 "${OP[@]}" "$@" --zero 3 --param-prefetch 2
	resume 3 on3_host "${cpu[@]}" --zero 3
	resume 1 on1 "${OP[@]}" "$@"
	if [ -f again ] && same_save unbroken again && same_save on3 on3_host && d=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: --zero 3 --offload-params${*:+ $*} saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits;" \
			"on 3: the bits of --zero 3 with the slice on the device; on 1, against the unbroken run: $d"
	else
		fail "resuming --zero 3 --offload-params${*:+ $*}: ${d:-other bits}"
	fi
}

# ZeRO-3 streamed with the edges (MODEL, --vocab 4096): resumed on 2, the
# unbroken run's bits; on 3, those on host threads resumed so; on 1,
# within 1e-6.
edges() { # MODEL
	local d
	local -n shape=$1
	local off=("${OS[@]}" --offload-embeddings) oncpu=("${OP[@]}" --offload-embeddings)
	checks=$((checks + 1))
	rm -f unbroken.json
	trains unbroken 2 "${shape[@]}" --batch 3 "${off[@]}" --zero 0 --vocab 4096 --json unbroken.json &&
		trains half 2 "${shape[@]}" --batch 3 "${off[@]}" --zero 3 --vocab 4096 --steps 3 || return
	resume 2 again "${off[@]}" --zero 3
	resume 3 on3 "${off[@]}" --zero 3
	resume 3 on3cpu "${oncpu[@]}" --zero 3
	resume 1 on1 "${off[@]}"
	if [ -e again ] && same_save unbroken again && same_save on3cpu on3 && d=$(losses_agree unbroken.json on1.json 4)
	then
		echo "ok: $1 streamed with the edges saved on 2 ranks at step 3: resumed on 2, the unbroken run's bits; on 3," \
			"those of --zero 3 on host threads; on 1, against the unbroken run: $d"
	else
		fail "resuming $1 streamed with the edges from 2 ranks: ${d:-other bits}"
	fi
}

# ZeRO-3 streamed, 5 layers, saved at --param-prefetch 2: resumed on 2 at
# depth 3, the unbroken run's bits; on 3, those on host threads resumed
# so; on 1 (depth 3), within 1e-6.
prefetch() {
	local gpt5=(--layers 5 --channels 32 --heads 4)
	checks=$((checks + 1))
	rm -f unbroken.json
	trains unbroken 2 "${gpt5[@]}" --batch 3 "${OS[@]}" --zero 0 --param-prefetch 2 --json unbroken.json &&
		trains half 2 "${gpt5[@]}" --batch 3 "${OS[@]}" --zero 3 --param-prefetch 2 --steps 3
	resume 2 again "${OS[@]}" --zero 3 --param-prefetch 3
	resume 3 on3 "${OS[@]}" --zero 3 --param-prefetch 2
	resume 3 on3_cpu "${OP[@]}" --zero 3 --param-prefetch 2
	resume 1 on1 "${OS[@]}" --param-prefetch 3
	if [ -f again ] && same_save unbroken again && same_save on3_cpu on3 && d3=$(losses_agree unbroken.json on3.json 4) &&
		d1=$(losses_agree unbroken.json on1.json 4); then
		echo "ok: ZeRO-3 streamed, deeper ring, saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits;" \
			"on 3: the bits of AdamW on host threads ($d3); on 1 ($d1)"
	else
		fail "resuming --zero 3 streamed --param-prefetch: on 2 or 3 other bits, or ${d3:-on 3 other losses} ${d1:-}"
	fi
}

# The gradients on the device: saved at step 3 on 2 ranks (--zero 2), the
# bits of AdamW on the device; resumed on 3 (--zero 1: the device's bits;
# 2 and 3: --zero 2 with the host copy's, within 1e-6 of the device's) and
# on 1 (one process's bits).
device_grads() {
	checks=$((checks + 1))
	trains half 2 "${gpt2[@]}" --batch 3 "${dg[@]}" --zero 2 --steps 3 &&
		trains dev_half 2 "${gpt2[@]}" --batch 3 --steps 3 &&
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
}

# One rank through MPI (FERRY_COMM_ENGINE=mpi: every gradient averaged over
# one rank on the comm stream), --device-grads, both orders: a plain
# process's bits.  --zero 3 prints no sample (a forward on rank 0 alone
# would wait for the others).
one_rank() {
	for order in exact speculative; do
		checks=$((checks + 1))
		"$FERRY" train "${common[@]}" "${llama[@]}" --batch 2 "${dg[@]}" --clip-order $order --save plain >plain.out 2>&1
		mpi_run 1 env FERRY_COMM_ENGINE=mpi "$FERRY" train "${common[@]}" "${llama[@]}" --batch 2 "${dg[@]}" \
			--clip-order $order --save one_rank >one_rank.out 2>&1 || { fail "one rank: $(tail -n 2 one_rank.out)"; continue; }
		grep -q "^collectives: MPI" one_rank.out && same_save plain one_rank &&
			echo "ok: one rank through MPI, --device-grads, $order: a plain process's bits" ||
			fail "one rank through MPI, --device-grads, $order: other bits ($(grep collectives one_rank.out))"
	done
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero 3 --steps 1 --sample 20 >sample.out 2>&1
	if [ $? -eq 0 ] && grep -q "no sample: the parameters are split" sample.out; then
		echo "ok: --zero 3 prints no sample (a forward on rank 0 alone would wait for the others)"
	else
		fail "--zero 3 --sample: $(tail -n 2 sample.out)"
	fi
}

# block NAME [asan] ARGS...: run NAME ARGS (the sanitizer builds: only
# those marked asan), each in a directory of its own
block() {
	local name=$1 start=$SECONDS
	shift
	if [ "${1:-}" = asan ]; then shift; elif [ -n "${FERRY_SANITIZED:-}" ]; then return; fi
	mkdir -p "$WORK/$name$*" && cd "$WORK/$name$*" && ln -sf "$WORK"/corpus_*.bin . || return
	"$name" "$@"
	cd "$WORK" || exit 1
	echo "block $name $*: $((SECONDS - start)) s"
}
block device asan
block host
block host3
block streamed
block params_host
block params_stream
block params3 asan
block params3 --offload-embeddings
block edges gpt
block edges llama
block prefetch
block device_grads asan
block one_rank asan
finish
