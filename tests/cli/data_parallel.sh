#!/usr/bin/env bash
# Training on many ranks (issue 22 items 3, 5, 10), ZeRO 0, on the CPU
# backend: mpirun -np 2 and -np 4 (more ranks than cores, each on one
# thread), GPT-2 and Llama, 8 steps, against one process with the global
# batch (--batch N*B): the losses, gradient norms and validation losses
# within 1e-6 relative, also with the optimizer on host threads (exact and
# speculative), streamed, the weights streamed, and over tiles of tokens;
# micro-batches with the weights streamed give the device run's bits;
# the saved model read by one process gives the same eval loss; a run
# saved on 2 ranks resumes on 1 and on 4 as the unbroken run goes on;
# every rank's parameters agree (the library test, and the check a save
# makes); a bad token in rank 1's rows only stops every rank before step
# 1 (each reads the shards' largest id) with one message, its data missing
# with one message naming rank 1; a rank killed mid-run ends the job
# within a bounded time with a message naming it, and the last save
# resumes.  Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

gpt=(--layers 2 --channels 32 --heads 4)
models=("gpt2|--layers 2 --channels 32 --heads 4" "llama|--model llama --layers 2 --channels 32 --heads 4 --kv-heads 2")
common=(--data 'corpus_train_*.bin' --val-data 'corpus_val_*.bin' --vocab 257 --max-seq 32 --seq 16
	--steps 8 --lr 1e-3 --val-every 4 --val-batches 2 --sample 0 --threads 1)
for entry in "${models[@]}"; do
	name=${entry%%|*} shape=${entry#*|}
	for n in 2 4; do
		checks=$((checks + 1))
		# shellcheck disable=SC2086
		"$FERRY" train "${common[@]}" $shape --batch $((2 * n)) --json one.json --save "one_$name" >one.out 2>&1 ||
			{ fail "$name: one process: $(tail -n 2 one.out)"; continue; }
		# shellcheck disable=SC2086
		mpi_run "$n" "$FERRY" train "${common[@]}" $shape --batch 2 --json many.json --save "many_$name" \
			>many.out 2>many.err || { fail "$name on $n ranks: $(cat many.err)"; continue; }
		if d=$(losses_agree one.json many.json); then
			echo "ok: $name, $n ranks of 2 rows = one process of $((2 * n)): $d"
		else
			fail "$name, $n ranks against one process: $d"
		fi
		checks=$((checks + 1))
		if [ "$(grep -c '^step ' many.out)" -eq 8 ] && grep -q "($n ranks of 2 rows, mpi)" many.out &&
			[ "$(grep -c '^{"step"' many.json)" -eq 8 ] && [ "$(grep -c . many.json)" -eq 9 ] &&
			[ "$(grep -o '"rank": [0-9]*' many.json | grep -c .)" -eq "$n" ]; then
			echo "ok: $name on $n ranks: rank 0 alone printed 8 steps and wrote 8 records and the ranks' memory"
		else
			fail "$name on $n ranks: output $(grep -c '^step ' many.out) step lines, $(grep -c . many.json) records"
		fi
		checks=$((checks + 1))
		e1=$("$FERRY" eval --checkpoint "one_$name" --data 'corpus_val_*.bin' --batch 4 --seq 16 --batches 2 2>&1 | sed -n 's/^loss //p')
		e2=$("$FERRY" eval --checkpoint "many_$name" --data 'corpus_val_*.bin' --batch 4 --seq 16 --batches 2 2>&1 | sed -n 's/^loss //p')
		if [ -n "$e1" ] && awk -v a="$e1" -v b="$e2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * a) }'; then
			echo "ok: $name saved on $n ranks, read by one process: eval loss $e2 (one process's $e1)"
		else
			fail "$name saved on $n ranks: eval loss '$e2', one process's '$e1'"
		fi
	done
done

# The modes that update while the backward runs or move the gradients to
# the host: each layer's average comes before its update; and tiles of
# tokens that do not divide a rank's rows (2 ranks, GPT-2).
modes=("--offload-optimizer cpu --clip-order speculative --grad-clip 0.05" "--offload-optimizer stream"
	"--offload-params --offload-embeddings" "--offload-params --offload-optimizer stream" "--grad-accum 2"
	"--mlp-tile 5 --loss-tile 7" "--mlp-tile 5 --loss-tile 7 --offload-params --offload-embeddings")
for mode in "${modes[@]}"; do
	checks=$((checks + 1))
	# shellcheck disable=SC2086
	"$FERRY" train "${common[@]}" "${gpt[@]}" $mode --batch 4 --json one.json >one.out 2>&1 &&
		mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" $mode --batch 2 --json many.json >many.out 2>&1 ||
		{ fail "$mode: $(tail -n 2 one.out many.out)"; continue; }
	if d=$(losses_agree one.json many.json); then
		echo "ok: $mode on 2 ranks = one process: $d"
	else
		fail "$mode on 2 ranks against one process: $d"
	fi
done

# Micro-batches on 2 ranks with the weights streamed: the bits of the
# device run on 2 ranks (each micro-batch's gradients added to the host's
# average and averaged again, as the device buffer is).
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --grad-accum 2 --save acc_dev.bin >/dev/null 2>&1
for mode in "--offload-params" "--offload-params --offload-optimizer cpu" "--offload-params --offload-embeddings"; do
	checks=$((checks + 1))
	rm -f acc.bin acc.bin.state
	# shellcheck disable=SC2086
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --grad-accum 2 $mode --save acc.bin >acc.out 2>&1 ||
		{ fail "$mode, 2 micro-batches on 2 ranks: $(tail -n 2 acc.out)"; continue; }
	if same_save acc_dev.bin acc.bin; then # the states but for their placements
		echo "ok: $mode, 2 micro-batches on 2 ranks: the device run's bits"
	else
		fail "$mode, 2 micro-batches on 2 ranks: other bits than the device run's"
	fi
done

# Resuming on other numbers of ranks: 2 ranks save at step 4; 1 and 4
# ranks go on to step 8 as the unbroken run of one process does.
"$FERRY" train "${common[@]}" "${gpt[@]}" --batch 8 --json unbroken.json >/dev/null 2>&1
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 --steps 4 --save half >/dev/null 2>&1
again=(--steps 8 --val-every 4 --val-batches 2 --sample 0 --threads 1 --json resumed.json)
for n in 1 4; do
	checks=$((checks + 1))
	rm -f resumed.json
	if [ "$n" -eq 1 ]; then
		"$FERRY" train --resume half "${again[@]}" >resumed.out 2>&1
	else
		mpi_run "$n" "$FERRY" train --resume half "${again[@]}" >resumed.out 2>&1
	fi
	if d=$(losses_agree unbroken.json resumed.json 5); then
		echo "ok: saved on 2 ranks at step 4, resumed on $n: steps 5-8 as the unbroken run's ($d)"
	else
		fail "resumed on $n ranks: $d $(tail -n 3 resumed.out)"
	fi
done
checks=$((checks + 1))
if mpi_run 3 "$FERRY" train --resume half --steps 8 --sample 0 --threads 1 >split.out 2>split.err ||
	! grep -q "does not split over 3 ranks" split.err; then
	fail "a global batch of 8 on 3 ranks: $(cat split.err)"
else
	echo "ok: a global batch of 8 on 3 ranks is refused: $(grep -m1 'ferry train' split.err)"
fi

# Every rank's parameters after each step, and a save refused when one
# rank's differ (tests/test_data_parallel.c).
TEST_DP=$(dirname "$FERRY")/tests/test_data_parallel
for n in 2 4; do
	[ -x "$TEST_DP" ] || break
	checks=$((checks + 1))
	if FERRY_TEST_TMP=$PWD mpi_run "$n" "$TEST_DP" >dp.out 2>dp.err &&
		[ "$(grep -c '^all [0-9]* checks passed' dp.out)" -eq "$n" ]; then
		echo "ok: test_data_parallel on $n ranks: parameters agree after every step, bad input agreed"
	else
		fail "test_data_parallel on $n ranks:"; cat dp.out dp.err >&2
	fi
done

# A bad token in rank 1's rows of the first batch only (shard of uint16
# tokens, in order, 2 rows of 8 per rank: rank 1 reads tokens 16-32).
perl -e 'print pack("l<256", 20240520, 1, 200); print pack("S<*", map { $_ == 19 ? 100 : $_ % 50 } 0..199)' >bad.bin
checks=$((checks + 1))
mpi_run 2 "$FERRY" train --data bad.bin --shuffle off --vocab 100 --max-seq 8 --seq 8 --batch 2 --layers 1 \
	--channels 16 --heads 2 --steps 2 --sample 0 --threads 1 >bad.out 2>bad.err
rc=$?
# (every rank reads the shards' largest id before step 1: refused there)
if [ $rc -ne 0 ] && [ "$(grep -c '^ferry train' bad.err)" -eq 1 ] && grep -q '^ferry train: .*token id 100' bad.err &&
	! grep -q '^step ' bad.out; then
	echo "ok: bad input in rank 1's rows: every rank stopped (exit $rc), one message: $(grep '^ferry train' bad.err)"
else
	fail "bad input in rank 1's rows: exit $rc, $(grep -c '^ferry train' bad.err) messages: $(cat bad.err)"
fi
# A shard missing on rank 1 only (its --data names no file, as on a host
# without the data): every rank stops before step 1, one message, in a
# bounded time.
checks=$((checks + 1))
start=$(date +%s)
timeout 120 "${MPIRUN[@]}" -np 2 bash -c 'data=$1; shift; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && data="nothere_*.bin"
	exec "$@" --data "$data"' missing 'corpus_train_*.bin' "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 \
	--steps 2 --sample 0 --threads 1 >missing.out 2>missing.err
rc=$? took=$(($(date +%s) - start))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^ferry train' missing.err)" -eq 1 ] &&
	grep -q "^ferry train: rank 1: no files match 'nothere_\*.bin'" missing.err && ! grep -q '^step ' missing.out; then
	echo "ok: a shard missing on rank 1 only: every rank stopped in ${took} s (exit $rc), one message: $(grep '^ferry train' missing.err)"
else
	fail "a shard missing on rank 1 only: exit $rc after ${took} s, $(grep -c '^ferry train' missing.err) messages: $(cat missing.err)"
fi

# A rank killed with SIGKILL mid-run: the job ends within 30 s, ferry
# naming the rank (its watchdog sees the process gone: issue 40 item 18);
# the last save resumes.
checks=$((checks + 1))
"${MPIRUN[@]}" -np 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --steps 1000000 --val-every 0 --save killed \
	--save-every 50 >killed.out 2>killed.err &
mp=$!
for _ in $(seq 1 300); do [ -f killed.state ] && break; sleep 0.1; done
victim=$(pgrep -P "$mp" | tail -n 1)
# the rank that sees it: the other one
vrank=$(tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
vrank=$((1 - ${vrank:-1}))
start=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
for _ in $(seq 1 300); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
took=$(($(date +%s) - start))
if kill -0 "$mp" 2>/dev/null; then
	kill "$mp"
	fail "a killed rank: the job still runs after 30 s"
elif wait "$mp"; then
	fail "a killed rank: the job exited 0"
elif grep -q "^ferry train: rank $((1 - ${vrank:-0})) (process $victim on this machine) ended without a word (killed: SIGKILL, the OOM killer?); rank ${vrank:-?} saw it: stopping every rank$" killed.err; then
	# ferry's own words, not the launcher's "exited on signal 9"
	echo "ok: a killed rank ended the job in ${took} s: $(grep -m1 '^ferry train' killed.err)"
else
	fail "a killed rank: no message naming it: $(cat killed.err)"
fi
# it resumes at the last save (every 50 steps; the one before when the
# kill came during a save), no later than the killed run got, and trains on
checks=$((checks + 1))
last=$(sed -n 's/^step *\([0-9]*\)\/.*/\1/p' killed.out | tail -n 1)
if "$FERRY" train --resume killed --steps "$((last + 60))" --sample 0 --threads 1 >after.out 2>&1 &&
	at=$(sed -n 's/^resumed at step \([0-9]*\).*/\1/p' after.out) && [ -n "$at" ] && [ $((at % 50)) -eq 0 ] &&
	[ "$at" -ge 50 ] && [ "$at" -ge $((last / 50 * 50 - 50)) ] && [ "$at" -le "$last" ] &&
	grep -q "^step *$((at + 1))/" after.out; then
	echo "ok: the killed run's last save resumes: $(grep -m1 '^resumed at' after.out)"
else
	fail "resuming the killed run (its last step $last): $(grep -m1 '^resumed at' after.out) $(tail -n 2 after.out)"
fi
finish
