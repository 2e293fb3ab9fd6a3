#!/usr/bin/env bash
# What `ferry train` shows while it runs: validation every tenth of the run
# by default (not only at the end), and a line per step with the time so
# far, the ETA, tokens/s, the model FLOP utilisation when a peak is known,
# and the device's peak memory when it changes.
. "$(dirname "$0")/lib.bash"
export XDG_CACHE_HOME=$WORK/cache # no calibration: the sgemm measured now
make_corpus
TINY=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 --sample 0 --threads 2
	--data 'corpus_train_*.bin' --val-data 'corpus_val_*.bin')
val_steps() { grep '"val_loss"' steps.jsonl | grep -o '"step": [0-9]*' | grep -o '[0-9]*$' | tr '\n' ' '; }

expect_ok "validation by default" "$FERRY" train "${TINY[@]}" --steps 20 --json steps.jsonl
[ "$(val_steps)" = "2 4 6 8 10 12 14 16 18 20 " ] || fail "validates every 2 of 20 steps: at $(val_steps)"
grep -q "^validation: every 2 steps and at the end, 8 batches of corpus_val_\*.bin$" out.txt ||
	fail "the banner says when it validates: $(grep validation: out.txt)"
[ "$(grep -c '| val loss ' out.txt)" -eq 10 ] || fail "10 lines with a validation loss"
expect_ok "a run of 7 steps" "$FERRY" train "${TINY[@]}" --steps 7 --json steps.jsonl
[ "$(val_steps)" = "1 2 3 4 5 6 7 " ] || fail "7 steps: every step (at least 1): $(val_steps)"
expect_ok "--val-every 0" "$FERRY" train "${TINY[@]}" --steps 20 --val-every 0 --json steps.jsonl
[ "$(val_steps)" = "20 " ] || fail "--val-every 0: at the end only: $(val_steps)"
expect_ok "--val-every 8" "$FERRY" train "${TINY[@]}" --steps 20 --val-every=8 --json steps.jsonl
[ "$(val_steps)" = "8 16 20 " ] || fail "--val-every 8: $(val_steps)"

expect_ok "the step line" "$FERRY" train "${TINY[@]}" --steps 5 --peak-flops 2G --json steps.jsonl
line='^step +[0-9]+/5 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| +[0-9.]+ ms \| +[0-9]+ tok/s \| MFU +[0-9.]+% \| [0-9]+s, ETA [0-9]+s'
[ "$(grep -Ec "$line" out.txt)" -eq 5 ] || fail "5 step lines with MFU, time and ETA: $(grep '^step' out.txt | head -2)"
grep -q "^MFU: [0-9.]* GFLOP per step (the model's) against --peak-flops 2 GFLOP/s$" out.txt ||
	fail "the banner says what MFU is against: $(grep MFU: out.txt)"
[ "$(grep -c '| device peak [0-9.]* KiB$' out.txt)" -eq 1 ] || fail "the device peak once (it does not change): $(grep -c 'device peak' out.txt)"
grep -E '^step +1/5' out.txt | grep -q 'device peak' || fail "the first line shows the device peak"
grep -q ', MFU [0-9.]*%, ' <(grep '^summary' out.txt) || fail "the summary has the MFU: $(grep summary out.txt)"
[ "$(grep -c '"mfu": ' steps.jsonl)" -eq 5 ] && [ "$(grep -c '"elapsed_s": ' steps.jsonl)" -eq 5 ] ||
	fail "records have mfu and elapsed_s"
expect_ok "MFU on the CPU without --peak-flops" "$FERRY" train "${TINY[@]}" --steps 2 --backend cpu
grep -q "against [0-9.]* GFLOP/s, a 1024^3 sgemm on 2 threads measured now (no calibration" out.txt || fail "sgemm peak: $(grep MFU: out.txt)"
grep -q '| MFU ' out.txt || fail "lines show MFU against the sgemm"
expect_error "a bad peak" "--peak-flops expects a positive rate like 150G" "$FERRY" train --peak-flops 0
finish
