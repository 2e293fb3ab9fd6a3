#!/usr/bin/env bash
# Ranks given different flags (issue 40 items 2 and 3), launched MPMD
# (mpirun -np 1 ferry train A : -np 1 ferry train B): refused before
# step 1 with one message naming the rank and what differs.  A failure of
# the CLI's own on rank 1 (an unwritable --trace) is printed by rank 0
# as rank 1 met it, not as a stale library error.
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --batch 2 --lr 1e-3 --sample 0 --threads 1
	--layers 1 --channels 16 --heads 2 --val-every 0 --steps 2 --comm-timeout 20)

# mpmd "what" "message" "rank 0's flags" "rank 1's flags": the job fails
# with that one line of ferry's on stderr (mpirun adds its own) and no
# step run.
mpmd() {
	local what=$1 want=$2 a=$3 b=$4 rc
	checks=$((checks + 1))
	# shellcheck disable=SC2086 # the flags split on purpose
	timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" $a : -np 1 "$FERRY" train "${common[@]}" $b \
		>mpmd.out 2>mpmd.err
	rc=$?
	if [ $rc -eq 0 ]; then
		fail "$what: exit 0"
	elif [ $rc -eq 124 ]; then
		fail "$what: still running after 60 s"
	elif grep -q '^step ' mpmd.out; then
		fail "$what: steps ran: $(grep -c '^step ' mpmd.out)"
	elif [ "$(grep -c '^ferry ' mpmd.err)" -ne 1 ] || ! grep -qxF -- "$want" mpmd.err; then
		fail "$what: wanted '$want', got: $(cat mpmd.err)"
	else
		echo "ok: $what -> $(cat mpmd.err)"
	fi
}

mpmd "an unwritable --trace on rank 1" \
	"ferry train: rank 1: cannot write --trace nodir/t.rank1.json: nodir: No such file or directory" \
	"" "--trace nodir/t.json"
finish
