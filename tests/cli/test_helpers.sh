#!/usr/bin/env bash
# The checks other tests lean on (lib.bash): losses_agree refuses runs
# whose losses are not finite and sees differences below the 6 decimals
# --json once printed (it now prints every digit of the float).
. "$(dirname "$0")/lib.bash"
make_corpus

printf '{"step": 1, "loss": nan, "grad_norm": nan}\n' >nan1.json
cp nan1.json nan2.json
checks=$((checks + 1))
d=$(losses_agree nan1.json nan2.json) && fail "two NaN runs agree: $d" || echo "ok: two NaN runs do not agree: $d"

expect_ok "a run with --json" "$FERRY" train --layers 1 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 \
	--threads 2 --sample 0 --data 'corpus_train_*.bin' --steps 2 --json run.json
grep -Eq '"loss": [0-9]\.[0-9]{7,}' run.json || fail "--json writes the loss to every digit: $(head -n 1 run.json)"
# the first loss moved by 2e-6 relative, below what 6 decimals show of a loss near 5
sed -E '1s/"loss": ([0-9.]+)/"loss": \1X/' run.json | awk '{ if (match($0, /"loss": [0-9.]+X/)) {
	v = substr($0, RSTART + 8, RLENGTH - 9) * (1 + 2e-6); $0 = substr($0, 1, RSTART + 7) sprintf("%.9g", v) substr($0, RSTART + RLENGTH) } print }' >moved.json
checks=$((checks + 1))
d=$(losses_agree run.json moved.json) && fail "a loss 2e-6 apart agrees: $d" || echo "ok: a loss 2e-6 apart: $d"
finish
