#!/usr/bin/env bash
# Checkpoints independent of the number of ranks (issue 22 item 6, in its
# own words: "a run saved on 4 ranks resumes on 1, 2 or 8"): runs saved
# at step 3 on 4 ranks (ZeRO-3, and ZeRO-1 with AdamW on host threads:
# each rank holding only its slice of the state), resumed on 1, 2 and 8
# ranks at other stages and offload modes, go on as the unbroken
# one-process run with the same global batch (steps 4-6 within 1e-6);
# the 4-rank save is the files one process reads (ferry eval).  Skips
# without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 2
shape=(--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2)

"$FERRY" train "${common[@]}" "${shape[@]}" --batch 8 --json unbroken.json >unbroken.out 2>&1 ||
	fail "the unbroken run: $(tail -n 2 unbroken.out)"
# SAVE|FLAGS ON 4 RANKS
SAVES=("zero 3|--zero 3" "zero 1, AdamW on host threads|--zero 1 --offload-optimizer cpu")
# RANKS|FLAGS OF THE RESUMED RUN
RESUMES=("1|" "2|--zero 2 --offload-optimizer stream" "8|--zero 1")
for save in "${SAVES[@]}"; do
	IFS='|' read -r name flags <<<"$save"
	read -r -a saved_with <<<"$flags"
	checks=$((checks + 1))
	rm -rf half half.state
	if mpi_run 4 "$FERRY" train "${common[@]}" "${shape[@]}" --batch 2 "${saved_with[@]}" --steps 3 --save half \
		>half.out 2>&1 && "$FERRY" eval --checkpoint half --data 'corpus_val_*.bin' --seq 16 >eval.out 2>&1; then
		echo "ok: $name, saved on 4 ranks: one process reads it ($(grep -m1 -i loss eval.out))"
	else
		fail "$name, saved on 4 ranks: $(tail -n 2 half.out) $(tail -n 2 eval.out)"
		continue
	fi
	for resume in "${RESUMES[@]}"; do
		IFS='|' read -r n more <<<"$resume"
		read -r -a resumed_with <<<"$more"
		checks=$((checks + 1))
		rm -f resumed.json
		if [ "$n" = 1 ]; then
			"$FERRY" train --resume half --steps 6 --sample 0 --threads 1 "${resumed_with[@]}" --json resumed.json \
				>resumed.out 2>&1
		else
			mpi_run "$n" "$FERRY" train --resume half --steps 6 --sample 0 --threads 1 "${resumed_with[@]}" \
				--json resumed.json >resumed.out 2>&1
		fi || { fail "$name, saved on 4 ranks, resumed on $n (${more:-no flags}): $(tail -n 2 resumed.out)"; continue; }
		if d=$(losses_agree unbroken.json resumed.json 4); then
			echo "ok: $name, saved on 4 ranks at step 3, resumed on $n (${more:-no flags}): steps 4-6 as the unbroken run's ($d)"
		else
			fail "$name, saved on 4 ranks, resumed on $n (${more:-no flags}): $d"
		fi
	done
done
finish
