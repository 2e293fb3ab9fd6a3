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
# with that one line of ferry's on stderr (mpirun adds its own; a message
# ending in * is the line's start) and no step run.
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
	elif [ "$(grep -c '^ferry ' mpmd.err)" -ne 1 ] ||
		{ [ "${want%\*}" = "$want" ] && ! grep -qxF -- "$want" mpmd.err; } ||
		! grep -q "^$(printf '%s' "${want%\*}" | sed 's/[][\.*^$]/\\&/g')" mpmd.err; then
		fail "$what: wanted '$want', got: $(cat mpmd.err)"
	else
		echo "ok: $what -> $(cat mpmd.err)"
	fi
}

mpmd "an unwritable --trace on rank 1" \
	"ferry train: rank 1: cannot write --trace nodir/t.rank1.json: nodir: No such file or directory" \
	"" "--trace nodir/t.json"
mpmd "a usage error on rank 1 only" \
	"ferry train: rank 1: --lr expects a number that fits a float, got 'x'" "" "--lr x"

# Flags that must agree, each refused before step 1 naming the rank and
# the flag: before, these deadlocked until the timeout, trained the whole
# run then refused to save, aborted inside MPI or trained on other data.
mpmd "different --steps" "ferry train: rank 1: --steps is 3, rank 0 has 2" "" "--steps 3"
mpmd "different --save-every" "ferry train: rank 1: --save-every is 1, rank 0 has 0" "--save s0" "--save s1 --save-every 1"
mpmd "different --seed" "ferry train: rank 1: --seed is 7, rank 0 has 1337" "" "--seed 7"
mpmd "different --weight-decay" "ferry train: rank 1: --weight-decay is 0, rank 0 has 0.1" "" "--weight-decay 0"
mpmd "different --model" "ferry train: rank 1: --model is llama, rank 0 has default" "" "--model llama --kv-heads 2"
mpmd "different --channels" "ferry train: rank 1: --channels is 32, rank 0 has 16" "" "--channels 32"
mpmd "--val-data on rank 1 only" "ferry train: rank 1: --val-data is given, rank 0 has none" "" "--val-data corpus_val_*.bin"
mpmd "different --batch" "ferry train: rank 1: --batch is 4, rank 0 has 2" "" "--batch 4"
mpmd "different --shuffle" "ferry train: rank 1: --shuffle is off, rank 0 has on" "" "--shuffle off"
for d in 0 1 2 3; do sed 's/fox/cat/' "text$d.txt" >"other$d.txt"; done
"$FERRY" data --out other --val-fraction 0.5 other?.txt >/dev/null 2>&1 || fail "cannot make the other corpus"
mpmd "different --data" "ferry train: rank 1: --data file 1 of 1 is *" "" "--data other_train_*.bin"
"$FERRY" train "${common[@]}" --save a >/dev/null 2>&1 && "$FERRY" train "${common[@]}" --seed 2 --save b >/dev/null 2>&1 ||
	fail "cannot make the saves to resume"
mpmd "different --resume" "ferry train: rank 1: --resume file 1 of 1 is *" "--resume a --steps 3" "--resume b --steps 3"
mpmd "--resume missing on rank 1" "ferry train: rank 1: nothere: cannot open: No such file or directory" \
	"--resume a --steps 3" "--resume nothere --steps 3"

# The parameters themselves (issue 40 item 2): rank 1's --checkpoint has
# the same shape and differs in one value, where the flags' exchange (the
# files' sizes and sampled hashes) does not look: refused before step 1
# by the parameters' hash (before, both trained and the save refused).
big=(--channels 64 --heads 4 --steps 3)
"$FERRY" train "${common[@]}" "${big[@]}" --steps 1 --save init >/dev/null 2>&1 || fail "cannot make the checkpoint"
cp init init2 && cp init.state init2.state 2>/dev/null
size=$(stat -c %s init2)
# a float halfway between two of the hash's sampled 4 KiB blocks (size * k / 17)
at=$((size * 3 / 34 / 4 * 4))
[ $((size / 17 + 4096)) -lt "$at" ] && [ $((at + 4)) -lt $((size * 2 / 17)) ] || fail "checkpoint too small: $size"
printf '\x00\x00\x80\x3f' | dd of=init2 bs=1 seek="$at" conv=notrunc status=none
cmp -s init init2 && fail "the copy was not changed"
checks=$((checks + 1))
timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" "${big[@]}" --checkpoint init : \
	-np 1 "$FERRY" train "${common[@]}" "${big[@]}" --checkpoint init2 >differ.out 2>differ.err
rc=$?
want="ferry train: rank 1: its parameters differ from rank 0's before step 1 (loaded from its --checkpoint; hash "
# (the other ferry line: the note that shape flags give way to the checkpoint's)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q '^step ' differ.out &&
	[ "$(grep -c '^ferry train: rank' differ.err)" -eq 1 ] && grep -qF -- "$want" differ.err; then
	echo "ok: a --checkpoint with other values on rank 1: $(grep '^ferry train: rank' differ.err)"
else
	fail "a --checkpoint with other values on rank 1: exit $rc, $(grep -c '^step ' differ.out) steps: $(cat differ.err)"
fi
# --zero 3 (each rank keeps a slice): the whole array each loaded
checks=$((checks + 1))
timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" "${big[@]}" --zero 3 --checkpoint init : \
	-np 1 "$FERRY" train "${common[@]}" "${big[@]}" --zero 3 --checkpoint init2 >differ3.out 2>differ3.err
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q '^step ' differ3.out &&
	[ "$(grep -c '^ferry train: rank' differ3.err)" -eq 1 ] && grep -qF -- "$want" differ3.err; then
	echo "ok: --zero 3, a --checkpoint with other values on rank 1: refused"
else
	fail "--zero 3, a --checkpoint with other values on rank 1: exit $rc, $(grep -c '^step ' differ3.out) steps: $(cat differ3.err)"
fi
# the same values on both ranks (from files of the same bytes): trains
checks=$((checks + 1))
cp init init3 && cp init.state init3.state 2>/dev/null
if timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" "${big[@]}" --checkpoint init : \
	-np 1 "$FERRY" train "${common[@]}" "${big[@]}" --checkpoint init3 >same.out 2>same.err &&
	[ "$(grep -c '^step ' same.out)" -eq 3 ] &&
	timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" "${big[@]}" --zero 3 --checkpoint init : \
	-np 1 "$FERRY" train "${common[@]}" "${big[@]}" --zero 3 --checkpoint init3 >same.out 2>same.err &&
	[ "$(grep -c '^step ' same.out)" -eq 3 ]; then
	echo "ok: the same parameters from two copies of a checkpoint: trains (and with --zero 3)"
else
	fail "the same checkpoint on both ranks: $(cat same.err)"
fi

# What may differ: a rank's own files and threads, and the data's path
# where the files are the same.
checks=$((checks + 1))
mkdir -p copy && cp corpus_train_*.bin copy/
if timeout 60 "${MPIRUN[@]}" -np 1 "$FERRY" train "${common[@]}" --json j.json --trace t.json : \
	-np 1 "$FERRY" train "${common[@]}" --data 'copy/corpus_train_*.bin' --threads 2 --trace u.json \
	>ok.out 2>ok.err && [ "$(grep -c '^step ' ok.out)" -eq 2 ] && [ -f u.rank1.json ]; then
	echo "ok: own --trace, --json, --threads and the same data elsewhere: trains"
else
	fail "own flags on each rank: $(cat ok.err)"
fi
finish
