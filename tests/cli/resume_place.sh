#!/usr/bin/env bash
# A resumed run keeps its placement: a run saved with its weights and AdamW
# on the host resumes so (the same plan, and a --device-mem that only the
# offloaded plan fits), the banner saying it is the saved run's; placement
# flags given replace it, the banner and the overrides saying so.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 32 --heads 2 --max-seq 64 --batch 4 --seq 32 --threads 2 --sample 0
	--data 'corpus_train_*.bin')
SAVED='layers.weights=host:stream(1),edges.weights=device,adam=host:cpu,activations=everything_saveable'

expect_ok "an offloaded run" "$FERRY" train "${SHAPE[@]}" --steps 2 --offload-params --offload-optimizer cpu \
	--save m.bin
PLAN=$(grep '^policy ' out.txt)
expect_ok "the same run on the device" "$FERRY" train "${SHAPE[@]}" --steps 1
[ "$(grep '^policy ' out.txt)" != "$PLAN" ] || fail "the device's plan differs from the offloaded one: $PLAN"

expect_ok "a resume without placement flags" "$FERRY" train --resume m.bin --steps 3 --save m.bin --threads 2 --sample 0
grep -qF "placement: $SAVED" out.txt && grep -q "^placement: .* (the saved run's)$" out.txt ||
	fail "the banner names the saved placement: $(grep placement out.txt)"
[ "$(grep '^policy ' out.txt)" = "$PLAN" ] || fail "the offloaded plan: $(grep '^policy ' out.txt), saved run: $PLAN"
# 1.2 MiB: the offloaded plan (1.1 MiB) fits, everything on the device (1.4) does not
expect_ok "a --device-mem only the saved placement fits" "$FERRY" train --resume m.bin --steps 4 --save m.bin \
	--threads 2 --sample 0 --device-mem 1200K

expect_ok "a resume with a placement flag" "$FERRY" train --resume m.bin --steps 5 --save m.bin --threads 2 \
	--sample 0 --offload-params --offload-optimizer stream
grep -q "^placement: layers.weights=host:stream(1),edges.weights=device,adam=host:stream.* (as the flags give; the saved run's differs)$" out.txt ||
	fail "the banner says the flags': $(grep placement out.txt)"
grep -qF "placement 'layers.weights=host:stream(1),edges.weights=device,adam=host:stream" out.txt &&
	grep -qF "(saved '$SAVED" out.txt || fail "an override: $(grep resumed out.txt)"
expect_ok "the next resume continues the new one" "$FERRY" train --resume m.bin --steps 6 --threads 2 --sample 0
grep -q "^placement: .*adam=host:stream.* (the saved run's)$" out.txt || fail "$(grep placement out.txt)"
finish
