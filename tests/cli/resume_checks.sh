#!/usr/bin/env bash
# What a resume must refuse rather than continue from: a non-finite
# parameter in an llm.c checkpoint (named by tensor and index), a state
# whose bytes changed (its checksum), a step that does not fit ferry's
# counter (2^32 + 3 is not step 3); and a run that diverges stops at the
# step whose loss is not finite, saving nothing over the last checkpoint.
# And what a resume must carry: the saved run's validation data (it ran
# none, silently), and its --json log, appended to rather than truncated.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 2 --channels 16 --heads 2 --max-seq 32)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')

expect_ok "a run saved at step 3" "$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 3 --save run.bin

# poke FILE OFFSET BYTES: overwrite bytes (printf escapes) at OFFSET
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

# A NaN parameter: wte is [320, 16]; element [1, 1] is parameter 17.
cp run.bin nan.bin && cp run.bin.state nan.bin.state
poke nan.bin $((1024 + 4 * 17)) '\x00\x00\xc0\x7f'
expect_error "eval of a NaN parameter" "nan.bin: tensor wte holds a non-finite value (nan) at [1, 1]" \
	"$FERRY" eval --checkpoint nan.bin --data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 2
expect_error "resume from a NaN parameter" "tensor wte holds a non-finite value (nan)" \
	"$FERRY" train --resume nan.bin "${RUN[@]}" --steps 4

# One changed byte in the AdamW moments (the state's last bytes).
cp run.bin flip.bin && cp run.bin.state flip.bin.state
size=$(wc -c <flip.bin.state)
poke flip.bin.state $((size - 10)) '\x5a'
expect_error "a corrupted moment" "flip.bin.state: checksum mismatch" "$FERRY" train --resume flip.bin "${RUN[@]}" --steps 4

# Step 2^32 + 3, in a version-1 state (no checksum): refused, not step 3.
cp run.bin big.bin
glen=$(od -An -td4 -j $((27 * 4)) -N4 run.bin.state | tr -d ' ')
plen=$(od -An -td4 -j $((44 * 4)) -N4 run.bin.state | tr -d ' ') # version 6: the placement
[ "$(od -An -td4 -j 4 -N4 run.bin.state | tr -d ' ')" -eq 1 ] && glen=0 && plen=0
{ head -c 1024 run.bin.state; tail -c +$((1024 + (glen + 3) / 4 * 4 + (plen + 3) / 4 * 4 + 1)) run.bin.state; } >big.bin.state
poke big.bin.state 4 '\x01\x00\x00\x00'
dd if=/dev/zero of=big.bin.state bs=4 seek=21 count=235 conv=notrunc status=none
cp big.bin.state v1.bin.state && cp run.bin v1.bin
expect_ok "a version-1 state resumes" "$FERRY" train --resume v1.bin "${RUN[@]}" --steps 3
grep -q "resumed at step 3" out.txt || fail "at step 3: $(grep resumed out.txt)"
poke big.bin.state 12 '\x01\x00\x00\x00'
expect_error "step 2^32 + 3" "step 4294967299 of a 3-step schedule" "$FERRY" train --resume big.bin "${RUN[@]}" --steps 4

# A run that diverges: stopped at the first step whose loss is not finite;
# the checkpoint of the last good save stays.  (Not under the sanitizers:
# the CPU kernels' fast_expf of a NaN is undefined behaviour there.)
if grep -q __ubsan_handle "$FERRY" 2>/dev/null; then
	echo "skipped: a diverging run (sanitizer build)"
else
	expect_error "a diverging run" "the loss is" "$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 30 --lr 1e30 \
		--save-every 1 --save div.bin
	grep -Eq "step [0-9]+: the loss is -?nan" err.txt || fail "names the step: $(cat err.txt)"
	k=$(sed -En 's/.*step ([0-9]+): the loss is.*/\1/p' err.txt)
	[ -n "$k" ] && [ "$k" -ge 2 ] || fail "the step: $k"
	expect_ok "the last good save resumes" "$FERRY" train --resume div.bin "${RUN[@]}" --steps 1
	grep -q "resumed at step $((k - 1))" out.txt || fail "resumed at the step before: $(grep resumed out.txt)"
fi

expect_ok "a run with validation and --json" "$FERRY" train "${TINY[@]}" "${RUN[@]}" --val-data 'corpus_val_*.bin' \
	--steps 4 --save val.bin --json val.jsonl
expect_ok "its resume" "$FERRY" train --resume val.bin --batch 2 --sample 0 --threads 2 --steps 8 --save val.bin \
	--json val.jsonl
grep -q "^validation: every .* of corpus_val_\*.bin" out.txt || fail "the resume validates on the saved run's data: $(head -n 6 out.txt)"
grep -q "^step     8/8 .* | val loss [0-9.]*" out.txt || fail "the resume's last step has a validation loss"
[ "$(grep -c '^{"step": ' val.jsonl)" -eq 8 ] && [ "$(head -n 1 val.jsonl | grep -o '"step": [0-9]*')" = '"step": 1' ] ||
	fail "--json of the resume appends steps 5-8 to steps 1-4: $(grep -o '"step": [0-9]*' val.jsonl | tr '\n' ' ')"
finish
