#!/usr/bin/env bash
# Ctrl-C (SIGINT) and SIGTERM during `ferry train`: the step under way
# finishes, the run is saved to --save, ferry says so and exits 128 + the
# signal; the saved checkpoint resumes to the same result as a run that was
# never interrupted, bit for bit.  Without --save it says nothing was saved.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 2 --channels 32 --heads 2 --max-seq 32 --batch 4 --seq 32 --sample 0 --threads 2
	--data 'corpus_train_*.bin')
STEPS=600 # seconds: the signal arrives long before the last step

# Starts ferry train in the background with the given flags (--json
# steps.jsonl added), waits for its first records, sends the signal and
# waits for it; $rc is its exit status, out.txt and err.txt its output.
train_and_signal() {
	local sig=$1; shift
	rm -f steps.jsonl
	"$FERRY" train "${TINY[@]}" --json steps.jsonl "$@" >out.txt 2>err.txt &
	local pid=$! i=0
	while [ "$(cat steps.jsonl 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
	kill -s "$sig" $pid
	wait $pid
	rc=$?
}

# A non-interactive shell starts background jobs with SIGINT ignored; job
# control (set -m) starts them as a terminal would, with SIGINT delivered.
set -m
checks=$((checks + 1))
train_and_signal INT --steps $STEPS --save 'run_{step}.bin'
step=$(tail -n 1 steps.jsonl | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
if [ $rc -ne 130 ]; then
	fail "SIGINT: exit $rc, not 130"; cat err.txt >&2
elif ! grep -q "^ferry train: stopped by SIGINT (Ctrl-C) after step $step of $STEPS, saved run_$step.bin; continue with --resume run_$step.bin$" err.txt; then
	fail "SIGINT: the message: $(cat err.txt)"
elif [ ! -f run_$step.bin ] || [ ! -f run_$step.bin.state ]; then
	fail "SIGINT: run_$step.bin and its state not saved: $(ls)"
elif ! grep -q "^summary: $step steps" out.txt; then
	fail "SIGINT: no summary of the $step steps: $(tail -n 2 out.txt)"
else
	echo "ok: SIGINT after step $step -> exit 130, saved run_$step.bin"
fi
[ "$step" -lt $STEPS ] || fail "the run ended before the signal: make STEPS larger"

expect_ok "resume the interrupted run" "$FERRY" train --resume run_$step.bin "${TINY[@]}" --steps $STEPS --save resumed.bin
grep -q "resumed at step $step" out.txt || fail "resumes at step $step: $(grep resumed out.txt)"
expect_ok "the same run, not interrupted" "$FERRY" train "${TINY[@]}" --steps $STEPS --save straight.bin
cmp -s resumed.bin straight.bin || fail "interrupted and resumed differs from the straight run"
cmp -s resumed.bin.state straight.bin.state || fail "the optimizer state differs from the straight run's"

# stopped between validations, the summary says which step its
# validation loss is from
checks=$((checks + 1))
train_and_signal INT --steps $STEPS --val-data 'corpus_val_*.bin' --val-every 2 --val-batches 1
step=$(tail -n 1 steps.jsonl | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
vstep=$(grep '"val_loss"' steps.jsonl | tail -n 1 | grep -o '"step": [0-9]*' | grep -o '[0-9]*$')
line=$(grep "^summary:" out.txt)
if [ -z "$vstep" ]; then
	fail "no validation before the signal: $(cat steps.jsonl)"
elif [ "$vstep" != "$step" ] && ! grep -q "validation loss [0-9.]* (at step $vstep)" <<<"$line"; then
	fail "stopped at step $step, validated at $vstep: the summary does not say so: $line"
elif [ "$vstep" = "$step" ] && grep -q "(at step" <<<"$line"; then
	fail "validated at the last step, yet the summary names a step: $line"
else
	echo "ok: summary after step $step, validation at step $vstep: ${line#*train loss}"
fi

checks=$((checks + 1))
train_and_signal TERM --steps $STEPS
if [ $rc -ne 143 ]; then
	fail "SIGTERM: exit $rc, not 143"; cat err.txt >&2
elif ! grep -Eq "^ferry train: stopped by SIGTERM after step [0-9]+ of $STEPS, not saved \(no --save\)$" err.txt; then
	fail "SIGTERM: the message: $(cat err.txt)"
else
	echo "ok: SIGTERM without --save -> exit 143, $(cat err.txt)"
fi

# A SIGINT that the parent ignores (a background job of a script, nohup)
# was not meant for ferry: the run goes on, and SIGTERM still stops it.
set +m
checks=$((checks + 1))
rm -f steps.jsonl
"$FERRY" train "${TINY[@]}" --json steps.jsonl --steps $STEPS >out.txt 2>err.txt &
pid=$!
i=0
while [ "$(cat steps.jsonl 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -s INT $pid
sleep 0.3
if kill -0 $pid 2>/dev/null; then
	kill -s TERM $pid
	wait $pid
	rc=$?
	[ $rc -eq 143 ] && echo "ok: an ignored SIGINT stays ignored; SIGTERM stops (exit 143)" ||
		fail "after an ignored SIGINT, SIGTERM: exit $rc"
else
	wait $pid
	fail "a SIGINT its parent ignores stopped the run (exit $?)"
fi
ls ./*.tmp* 2>/dev/null && fail "a temporary file was left behind"
finish
