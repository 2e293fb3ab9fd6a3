#!/usr/bin/env bash
# The collective timeout (issue 22 item 10, a rank that hangs alive): on 2
# ranks, one stopped with SIGSTOP mid-run under --comm-timeout 3 leaves the
# other waiting in a collective; the job exits non-zero within 20 s (3 s
# of waiting, up to 2 s of roll call, the abort), with one message naming
# the stopped rank, and the last save resumes.  Steps longer than the
# timeout (measured so) do not fire it: the time is one collective's wait,
# not a step's.
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --batch 2 --lr 1e-3 --sample 0 --threads 1
	--layers 2 --channels 32 --heads 4 --val-every 0)

expect_error "--comm-timeout -1" "--comm-timeout must be 0 (never) or a number of seconds" \
	"$FERRY" train "${common[@]}" --steps 1 --comm-timeout -1

checks=$((checks + 1))
"${MPIRUN[@]}" -np 2 "$FERRY" train "${common[@]}" --steps 1000000 --save hung --save-every 50 --comm-timeout 3 \
	>hung.out 2>hung.err &
mp=$!
for _ in $(seq 1 300); do [ -f hung.state ] && break; sleep 0.1; done
victim=$(pgrep -P "$mp" | tail -n 1)
rank=$(tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
start=$(date +%s)
[ -n "$rank" ] && kill -STOP "$victim"
for _ in $(seq 1 200); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
took=$(($(date +%s) - start))
if [ -z "$rank" ]; then
	fail "a stopped rank: no rank to stop (mpirun's children: $(pgrep -P "$mp" | tr '\n' ' '))"
	kill "$mp"
elif kill -0 "$mp" 2>/dev/null; then
	kill -CONT "$victim"
	kill "$mp"
	fail "a stopped rank: the job still runs after 20 s"
elif wait "$mp"; then
	fail "a stopped rank: the job exited 0"
elif [ "$(grep -c 'stopping every rank' hung.err)" -eq 1 ] &&
	grep -q "^ferry train: rank $rank did not answer; rank $((1 - rank)) waited [0-9.]* s in collective [0-9]* ([a-z-]*) of communicator [0-9]* (--comm-timeout 3): stopping every rank$" hung.err; then
	echo "ok: rank $rank stopped: the job ended in ${took} s: $(grep 'stopping every rank' hung.err)"
else
	fail "a stopped rank ($rank): $(cat hung.err)"
fi
wait "$mp" 2>/dev/null
checks=$((checks + 1))
last=$(sed -n 's/^step *\([0-9]*\)\/.*/\1/p' hung.out | tail -n 1)
# at a save (every 50 steps), no later than the stopped run got, and
# trains on from there: more than an exit code
if "$FERRY" train --resume hung --steps $((${last:-0} + 60)) --sample 0 --threads 1 >after.out 2>&1 &&
	at=$(sed -n 's/^resumed at step \([0-9]*\).*/\1/p' after.out) && [ -n "$at" ] && [ $((at % 50)) -eq 0 ] &&
	[ "$at" -ge 50 ] && [ "$at" -le "${last:-0}" ] && grep -q "^step *$((at + 1))/" after.out; then
	echo "ok: the stopped run's last save resumes: $(grep -m1 '^resumed at' after.out)"
else
	fail "resuming the stopped run (its last step ${last:-?}): $(grep -m1 '^resumed at' after.out) $(tail -n 2 after.out)"
fi

# steps longer than the timeout: nothing fires.  The timeout is 3 s, not
# less: a collective legitimately waits for the slowest rank, and on a
# loaded machine two ranks' skew (the first step's above all) passes 1 s.
# A step's time measured here first, then micro-batches enough that every
# step outlasts the timeout (else the check would show nothing).
# A shard of its own, one document: a quiet machine's short steps need
# many micro-batches (at most 64: 64 x 2 ranks x 12 rows of 129 tokens).
checks=$((checks + 1))
for i in $(seq 1 40000); do echo "line $i: pack my box with five dozen liquor jugs"; done >long.txt
"$FERRY" data --out long --val-fraction 0 long.txt >/dev/null 2>&1 || fail "cannot make the long corpus"
LONG=(--data 'long_train_*.bin' --vocab 257 --max-seq 128 --seq 128 --batch 12 --layers 4 --channels 384 --heads 4
	--sample 0 --threads 1 --val-every 0 --comm-timeout 3)
mpi_run 2 "$FERRY" train "${LONG[@]}" --steps 2 --json probe.json >probe.out 2>&1
ms=$(sed -n 's/.*"step_ms": \([0-9]*\).*/\1/p' probe.json | tail -n 1)
accum=$((4500 / (${ms:-0} > 0 ? ${ms:-1} : 1) + 1))
[ "$accum" -le 64 ] || accum=64
if mpi_run 2 "$FERRY" train "${LONG[@]}" --steps 2 --grad-accum "$accum" --json long.json >long.out 2>long.err &&
	[ "$(grep -c '^{"step"' long.json)" -eq 2 ] &&
	[ -z "$(sed -n 's/.*"step_ms": \([0-9]*\).*/\1/p' long.json | awk '$1 <= 3000')" ]; then
	echo "ok: steps of $(sed -n 's/.*"step_ms": \([0-9]*\).*/\1/p' long.json | tr '\n' ' ')ms ($accum micro-batches) under --comm-timeout 3: no timeout"
else
	fail "steps longer than --comm-timeout 3 ($accum micro-batches of ${ms:-?} ms): $(cat long.err) $(sed -n 's/.*"step_ms": \([0-9.]*\).*/\1/p' long.json | tr '\n' ' ')"
fi
finish
