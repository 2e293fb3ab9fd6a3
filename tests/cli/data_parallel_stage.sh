#!/usr/bin/env bash
# MPI through pinned host staging (issue 22 items 2, 11; sched/comm_stage.c),
# the path the CUDA backend's ranks take without NCCL, run here on the CPU
# backend (FERRY_COMM_STAGE=1 stages its memory as if the host could not
# address it): on 2 ranks, GPT-2 and Llama, --zero 0 and 1, with a
# staging buffer of 100 bytes (every collective cut into many pieces, the
# all-gathers' into 50 bytes a rank) and of the default size (one piece):
# the same bits as the unstaged run, which is within 1e-6 of one process
# at the global batch.  --zero 2 and 3 (each layer's gradients
# reduce-scattered, gathered back with --grad-accum, ZeRO-3's layers and
# unstacked parameters gathered), AdamW on the device and on the host, on
# 2 and 3 ranks, GPT-2 and Llama: the saved files of the unstaged run,
# through 100 bytes and through one piece.  Every rank's measured host
# bytes count the staging buffer as `ferry plan --ranks 2` plans it; the
# start says which engine; a malformed FERRY_COMM_STAGE or
# FERRY_COMM_STAGE_BYTES is refused by name (plan, and every rank of a
# run with one message).  Skips without mpirun or MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus

models=("gpt2|--layers 2 --channels 32 --heads 4" "llama|--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2")
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --steps 4 --lr 1e-3 --sample 0 --threads 1)
STAGE=(-x FERRY_COMM_STAGE=1 -x FERRY_COMM_STAGE_BYTES=100)

# every step's loss and gradient norm, as printed
bits() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }

for entry in "${models[@]}"; do
	name=${entry%%|*} shape=${entry#*|}
	# shellcheck disable=SC2086
	"$FERRY" train "${common[@]}" $shape --batch 4 --json one.json >one.out 2>&1 ||
		{ fail "$name: one process: $(tail -n 2 one.out)"; continue; }
	for z in 0 1; do
		checks=$((checks + 1))
		# shellcheck disable=SC2086
		mpi_run 2 "$FERRY" train "${common[@]}" $shape --batch 2 --zero $z --json plain.json >plain.out 2>&1 ||
			{ fail "$name --zero $z on 2 ranks: $(tail -n 2 plain.out)"; continue; }
		if d=$(losses_agree one.json plain.json); then
			echo "ok: $name --zero $z, 2 ranks unstaged = one process: $d"
		else
			fail "$name --zero $z, 2 ranks against one process: $d"
		fi
		for how in small default; do
			checks=$((checks + 1))
			s=("${STAGE[@]}")
			[ $how = default ] && s=(-x FERRY_COMM_STAGE=1)
			# shellcheck disable=SC2086
			"${MPIRUN[@]}" "${s[@]}" -np 2 "$FERRY" train "${common[@]}" $shape --batch 2 --zero $z \
				--json staged.json >staged.out 2>&1 ||
				{ fail "$name --zero $z staged ($how): $(tail -n 2 staged.out)"; continue; }
			if [ -n "$(bits plain.json)" ] && [ "$(bits plain.json)" = "$(bits staged.json)" ] &&
				grep -q "^collectives: MPI through host staging (FERRY_COMM_STAGE=1)" staged.out; then
				echo "ok: $name --zero $z staged through a $how buffer: the unstaged run's bits"
			else
				fail "$name --zero $z staged ($how): [$(bits staged.json | tr '\n' ' ')], unstaged [$(bits plain.json | tr '\n' ' ')]"
			fi
		done
	done
done

# plan = measured: every rank's host bytes the staging buffer's (100)
checks=$((checks + 1))
SHAPE=(--layers 2 --channels 32 --heads 4 --vocab 257 --max-seq 32 --seq 16 --batch 2)
FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=100 "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 --json plan.json >/dev/null
"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 1 \
	--steps 2 --zero 1 --json run.jsonl >run.out 2>&1
ranks() { grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g'; }
planned=$(ranks plan.json device_bytes) measured=$(ranks run.jsonl device_peak_bytes)
if [ "$(echo "$planned" | grep -c ' 100$')" -eq 2 ] && [ "$planned" = "$measured" ]; then
	echo "ok: staged on 2 ranks: every rank measures its plan, 100 host bytes of staging"
else
	fail "staged plan against measured: planned [$planned], measured [$measured]"
fi

# --zero 2 and 3: every collective they emit staged, the unstaged run's files
zero_staged() { # zero_staged NAME SHAPE N Z OPT: through 100 bytes and one piece
	local name=$1 shape=$2 n=$3 z=$4 opt=$5 how s
	# shellcheck disable=SC2086
	mpi_run "$n" "$FERRY" train "${common[@]}" $shape --batch 2 --grad-accum 2 --zero "$z" --offload-optimizer "$opt" \
		--save plain >plain.out 2>&1 || { fail "$name --zero $z ($opt) on $n ranks: $(tail -n 2 plain.out)"; return; }
	for how in small default; do
		checks=$((checks + 1))
		s=("${STAGE[@]}")
		[ $how = default ] && s=(-x FERRY_COMM_STAGE=1)
		rm -rf staged staged.state
		# shellcheck disable=SC2086
		"${MPIRUN[@]}" "${s[@]}" -np "$n" "$FERRY" train "${common[@]}" $shape --batch 2 --grad-accum 2 --zero "$z" \
			--offload-optimizer "$opt" --save staged >staged.out 2>&1 ||
			{ fail "$name --zero $z ($opt) on $n ranks staged ($how): $(tail -n 2 staged.out)"; continue; }
		if same_save plain staged && grep -q "^collectives: MPI through host staging (FERRY_COMM_STAGE=1)" staged.out; then
			echo "ok: $name --zero $z ($opt) on $n ranks staged through a $how buffer: the unstaged run's files"
		else
			fail "$name --zero $z ($opt) on $n ranks staged ($how): its saved files differ from the unstaged run's"
		fi
	done
	rm -rf plain plain.state staged staged.state
}
for entry in "${models[@]}"; do
	for n in 2 3; do
		for z in 2 3; do
			for opt in device cpu; do
				zero_staged "${entry%%|*}" "${entry#*|}" $n $z $opt
			done
		done
	done
done

# plan = measured with --zero 3 and AdamW on the host: the staging buffer's
# 100 bytes on top of the unstaged plan's host bytes
checks=$((checks + 1))
Z3=(--zero 3 --offload-optimizer cpu)
"$FERRY" plan "${SHAPE[@]}" "${Z3[@]}" --ranks 2 --json plan0.json >/dev/null
FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=100 "$FERRY" plan "${SHAPE[@]}" "${Z3[@]}" --ranks 2 --json plan.json >/dev/null
"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 1 \
	--steps 2 "${Z3[@]}" --json run.jsonl >run.out 2>&1
planned=$(ranks plan.json device_bytes) measured=$(ranks run.jsonl device_peak_bytes)
more=$(paste <(ranks plan0.json device_bytes) <(echo "$planned") | awk '{ print $6 - $3 }' | sort -u)
if [ -n "$planned" ] && [ "$planned" = "$measured" ] && [ "$more" = 100 ]; then
	echo "ok: --zero 3 with AdamW on the host staged on 2 ranks: every rank measures its plan, 100 host bytes more"
else
	fail "--zero 3 (cpu) staged plan against measured: planned [$planned], measured [$measured], more [$more]"
fi

# malformed staging variables: refused by name, with the form they take
for bad in 8X abc -1 0 10 1.5Q; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=$bad "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 >bad.out 2>&1 &&
		fail "FERRY_COMM_STAGE_BYTES=$bad: planned"
	grep -q "FERRY_COMM_STAGE_BYTES=$bad: the staging buffer's size, at least 64 bytes" bad.out &&
		echo "ok: FERRY_COMM_STAGE_BYTES=$bad: refused" || fail "FERRY_COMM_STAGE_BYTES=$bad: $(tail -n 2 bad.out)"
done
for bad in yes 2; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=$bad "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 >bad.out 2>&1 && fail "FERRY_COMM_STAGE=$bad: planned"
	grep -q "FERRY_COMM_STAGE=$bad: 1 (stage" bad.out && echo "ok: FERRY_COMM_STAGE=$bad: refused" ||
		fail "FERRY_COMM_STAGE=$bad: $(tail -n 2 bad.out)"
done
# sizes as ferry writes them elsewhere: K, M (powers of 1024)
for good in 1K:1024 8M:8388608 4096:4096; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=${good%%:*} "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 \
		--json good.json >good.out 2>&1
	got=$(ranks good.json device_bytes | awk '{ print $3 }' | sort -u)
	[ "$got" = "${good#*:}" ] && echo "ok: FERRY_COMM_STAGE_BYTES=${good%%:*}: ${good#*:} host bytes a rank" ||
		fail "FERRY_COMM_STAGE_BYTES=${good%%:*}: host bytes [$got] ($(tail -n 1 good.out))"
done
# a run: every rank stops, one message
for var in FERRY_COMM_STAGE_BYTES=8X FERRY_COMM_STAGE=yes; do
	checks=$((checks + 1))
	"${MPIRUN[@]}" -x "$var" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' \
		--sample 0 --threads 1 --steps 1 >bad.out 2>&1 && fail "$var: trained"
	[ "$(grep -c "$var: " bad.out)" = 1 ] && echo "ok: $var on 2 ranks: refused, one message" ||
		fail "$var on 2 ranks: $(tail -n 3 bad.out)"
done

finish
