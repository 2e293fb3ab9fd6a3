#!/usr/bin/env bash
# MPI through pinned host staging (issue 22 item 2; sched/comm_stage.c),
# the path the CUDA backend's ranks take without NCCL, run here on the CPU
# backend (FERRY_COMM_STAGE=1 stages its memory as if the host could not
# address it): on 2 ranks, GPT-2 and Llama, --zero 0 and 1, with a
# staging buffer of 100 bytes (every collective cut into many pieces, the
# all-gathers' into 50 bytes a rank) and of the default size (one piece):
# the same bits as the unstaged run, which is within 1e-6 of one process
# at the global batch.  Every rank's measured host bytes count the staging
# buffer as `ferry plan --ranks 2` plans it; the start says which engine;
# --zero 2 through staging is refused.  Skips without mpirun or MPI.
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

checks=$((checks + 1))
"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 1 \
	--steps 1 --zero 2 >z2.out 2>&1 && fail "--zero 2 through staging: trained"
grep -q "zero 2 with MPI through host staging: not yet" z2.out && echo "ok: --zero 2 through staging: refused" ||
	fail "--zero 2 through staging: $(tail -n 2 z2.out)"

finish
