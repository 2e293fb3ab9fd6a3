#!/usr/bin/env bash
# The collective timeout under ZeRO 2 and 3 (issue 40 item 1): their
# reduce-scatters and all-gathers of uneven slices are watched like every
# other collective, so a rank stopped with SIGSTOP mid-run under
# --comm-timeout 3 ends the job within 20 s, with one message naming it,
# instead of leaving the other rank in MPI_Reduce_scatter for ever.
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --batch 2 --lr 1e-3 --sample 0 --threads 1
	--layers 2 --channels 32 --heads 4 --val-every 0 --steps 1000000 --comm-timeout 3)

# stopped ZERO: one rank of a --zero ZERO run stopped after a few steps.
stopped() {
	local zero=$1 mp victim rank start took
	checks=$((checks + 1))
	rm -f "z$zero.json"
	"${MPIRUN[@]}" -np 2 "$FERRY" train "${common[@]}" --zero "$zero" --json "z$zero.json" \
		>"z$zero.out" 2>"z$zero.err" &
	mp=$!
	for _ in $(seq 1 300); do [ "$(cat "z$zero.json" 2>/dev/null | grep -c '^{"step"')" -ge 3 ] && break; sleep 0.1; done
	victim=$(pgrep -P "$mp" | tail -n 1)
	rank=$(tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
	start=$(date +%s.%N)
	[ -n "$rank" ] && kill -STOP "$victim"
	for _ in $(seq 1 200); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
	took=$(echo "$(date +%s.%N) - $start" | bc)
	if [ -z "$rank" ]; then
		fail "--zero $zero, a stopped rank: no rank to stop"
		kill "$mp"
	elif kill -0 "$mp" 2>/dev/null; then
		kill -CONT "$victim"
		kill "$mp"
		fail "--zero $zero, a stopped rank: the job still runs after 20 s: $(cat "z$zero.err")"
	elif wait "$mp"; then
		fail "--zero $zero, a stopped rank: the job exited 0"
	elif [ "$(grep -c 'stopping every rank' "z$zero.err")" -eq 1 ] &&
		grep -q "^ferry train: rank $rank did not answer; rank $((1 - rank)) waited [0-9.]* s in collective [0-9]* ([a-z-]*) of communicator [0-9]* (--comm-timeout 3): stopping every rank$" "z$zero.err"; then
		echo "ok: --zero $zero, rank $rank stopped: the job ended in ${took} s: $(grep 'stopping every rank' "z$zero.err")"
	else
		fail "--zero $zero, a stopped rank ($rank): $(cat "z$zero.err")"
	fi
	wait "$mp" 2>/dev/null
}

stopped 2
stopped 3
finish
