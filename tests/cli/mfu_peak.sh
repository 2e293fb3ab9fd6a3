#!/usr/bin/env bash
# What `ferry train` measures MFU against on the CPU: the better of the
# sgemm rate of this machine's calibration, if ferry calibrate made one, and
# one measured now (either can read low: under load, or a calibration of
# small products; MFU then read above 100%);
# the banner says which, and MFU above 100% is never shown: a step faster
# than the peak becomes the peak, said once.
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
# the calibration's products timed 1000 times faster (its rate above any
# sgemm now), then 1000 times slower (as if taken on a busy machine): the
# peak is the better of it and an sgemm now
calib=$(ls cache/ferry/calibration-*.json)
cp "$calib" calib.orig
scale() { python3 -c 'import json,sys
c = json.load(open(sys.argv[1]))
for op in c["ops"]:
    op["seconds"] *= float(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))' "$calib" "$1"; }
scale 1e-3
expect_ok "with a calibration faster than now" "$FERRY" train "${TINY[@]}" --steps 2
grep -q "^MFU: [0-9.]* GFLOP per step (the model's) against the calibrated sgemm rate [0-9.]* GFLOP/s" out.txt ||
	fail "with a calibration MFU is against its sgemm rate: $(grep MFU: out.txt)"
grep -q '| MFU ' out.txt || fail "lines show MFU against the calibrated rate"
cp calib.orig "$calib"
scale 1e3
expect_ok "with a calibration slower than now" "$FERRY" train "${TINY[@]}" --steps 2
grep -q "^MFU: .* GFLOP/s, a 1024^3 sgemm on 1 threads measured now (above the calibrated rate" out.txt ||
	fail "a calibrated rate below the one now is not the peak: $(grep MFU: out.txt)"
grep -q 'MFU above 100%' err.txt && fail "MFU above 100% against a rate measured now: $(cat err.txt)"

# on the CPU no peak is known, only rates seen: a step faster than the peak
# becomes it, said once, and no line shows more than 100%
expect_ok "a peak too low" "$FERRY" train "${TINY[@]}" --steps 3 --peak-flops 1K
grep -q "^ferry train: note: step 1 ran at [0-9.e+]* GFLOP/s, above the peak MFU was against (--peak-flops, 1e-06 GFLOP/s): the best rate seen is the peak from here$" err.txt ||
	fail "a step above the peak says so: $(cat err.txt)"
[ "$(grep -c 'above the peak' err.txt)" -eq 1 ] || fail "once, not on every line: $(cat err.txt)"
[ "$(grep -c '| MFU ' out.txt)" -eq 3 ] || fail "every line shows MFU: $(grep '^step' out.txt)"
grep '| MFU ' out.txt | sed 's/.*| MFU *\([0-9.]*\)%.*/\1/' | awk '$1 > 100 { bad = 1 } END { exit bad }' ||
	fail "no line shows MFU above 100%: $(grep '^step' out.txt)"
grep -q ', MFU [0-9.]*%' out.txt && ! grep -q ', MFU [0-9]\{4,\}' out.txt || fail "the summary's MFU: $(grep summary out.txt)"
finish
