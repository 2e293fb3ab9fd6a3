#!/usr/bin/env bash
# What `ferry train` measures MFU against on the CPU: the sgemm rate of this
# machine's calibration when ferry calibrate made one (a rate measured at
# start under load is low, and MFU read above 100%), else one measured now;
# the banner says which, and MFU above 100% is never shown silently.
. "$(dirname "$0")/lib.bash"
export XDG_CACHE_HOME=$WORK/cache
make_corpus
TINY=(--backend cpu --layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 --sample 0 --threads 1
	--data 'corpus_train_*.bin' --val-every 0)

expect_ok "no calibration" "$FERRY" train "${TINY[@]}" --steps 2
grep -q "^MFU: .* GFLOP/s, a 1024^3 sgemm on 1 threads measured now (no calibration of this machine" out.txt ||
	fail "without a calibration the banner says the peak was measured now: $(grep MFU: out.txt)"

expect_ok "calibrate --quick" "$FERRY" calibrate --backend cpu --layers 2 --channels 16 --heads 2 --max-seq 32 \
	--batch 2 --seq 16 --threads 1 --quick
expect_ok "with a calibration" "$FERRY" train "${TINY[@]}" --steps 2
grep -q "^MFU: [0-9.]* GFLOP per step (the model's) against the calibrated sgemm rate [0-9.]* GFLOP/s" out.txt ||
	fail "with a calibration MFU is against its sgemm rate: $(grep MFU: out.txt)"
grep -q '| MFU ' out.txt || fail "lines show MFU against the calibrated rate"

expect_ok "a peak too low" "$FERRY" train "${TINY[@]}" --steps 2 --peak-flops 1K
grep -q "warning: MFU above 100% against --peak-flops" err.txt ||
	fail "MFU above 100% says so: $(cat err.txt)"
[ "$(grep -c 'MFU above 100%' err.txt)" -eq 1 ] || fail "once, not on every line"
finish
