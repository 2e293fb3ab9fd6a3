#!/usr/bin/env bash
# The CLI contract scripts rely on: usage, --json records, eval's last line,
# save/resume equal to an unbroken run.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 --sample 0 --threads 2)

expect_ok "no arguments prints usage" "$FERRY"
grep -q "usage: ferry" out.txt || fail "usage text"
expect_ok "--help" "$FERRY" --help
expect_ok "train --help" "$FERRY" train --help
grep -q -- "--checkpoint" out.txt || fail "train --help lists flags"
expect_ok "info" "$FERRY" info
grep -q "blas: OpenBLAS, core" out.txt || fail "info shows the BLAS core"
# a core the user sets is respected (and reported), never overridden
OPENBLAS_CORETYPE=Prescott "$FERRY" info >out.txt 2>&1
grep -q "core Prescott, set by OPENBLAS_CORETYPE" out.txt || fail "info reports a user-set core: $(grep blas out.txt)"

expect_ok "train with --json" "$FERRY" train "${TINY[@]}" --data 'corpus_train_*.bin' --val-data 'corpus_val_*.bin' \
	--steps 6 --json steps.jsonl --save straight.bin
[ "$(wc -l <steps.jsonl)" -eq 6 ] || fail "6 json records, got $(wc -l <steps.jsonl)"
for key in step loss lr step_ms tokens_per_s device_peak_bytes; do
	grep -c "\"$key\": " steps.jsonl | grep -qx 6 || fail "every record has $key"
done
grep -q '"step": 6,' steps.jsonl || fail "last record is step 6"
grep -q '"val_loss"' steps.jsonl || fail "the last step has a validation loss"
grep -q "^summary: 6 steps" out.txt || fail "a summary line"

expect_ok "eval" "$FERRY" eval --checkpoint straight.bin --data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3
tail -n 1 out.txt | grep -Eq '^loss [0-9]+\.[0-9]+$' || fail "eval ends with 'loss <value>': $(tail -n 1 out.txt)"
expect_ok "eval again" "$FERRY" eval --checkpoint straight.bin --data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3
cp out.txt eval2.txt
expect_ok "eval is deterministic" "$FERRY" eval --checkpoint straight.bin --data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3
cmp -s out.txt eval2.txt || fail "two evals differ"

# Resume from the step-3 checkpoint of a 6-step run == the unbroken run, bit
# for bit ({step} in --save names each periodic checkpoint).
expect_ok "periodic saves" "$FERRY" train "${TINY[@]}" --data 'corpus_train_*.bin' --steps 6 --save-every 3 --save 'run_{step}.bin'
for f in run_3.bin run_3.bin.state run_6.bin run_6.bin.state; do [ -f $f ] || fail "$f written"; done
cmp -s run_6.bin straight.bin || fail "--json/--val-data changed the training result"
expect_ok "resume" "$FERRY" train --resume run_3.bin --data 'corpus_train_*.bin' --batch 2 --seq 16 --steps 6 --sample 0 --threads 2 --save resumed.bin
grep -q "resumed at step 3" out.txt || fail "says where it resumed"
grep -q "note: the saved run followed" err.txt && fail "no schedule note when the flags match"
expect_ok "resume with another schedule" "$FERRY" train --resume run_3.bin --data 'corpus_train_*.bin' --batch 2 --seq 16 \
	--steps 8 --sample 0 --threads 2
grep -q "note: the saved run followed a schedule of 6 steps" err.txt || fail "says the schedule changed: $(cat err.txt)"
cmp -s run_6.bin resumed.bin || fail "resumed checkpoint differs from the unbroken run's"
cmp -s run_6.bin.state resumed.bin.state || fail "resumed optimizer state differs"

# Shuffled batches (the default), llm.c's way: resumed in epoch 1 == the
# unbroken run, bit for bit; in order (--shuffle off) is another run, and
# resumes exactly too; a resume in another order says so.
B16=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 16 --seq 32 --sample 0 --threads 2 --data 'corpus_train_*.bin')
expect_ok "shuffled, straight" "$FERRY" train "${B16[@]}" --steps 24 --save shuf.bin
grep -q "batch 16 x 32 tokens shuffled" out.txt || fail "the banner says shuffled: $(grep ^batch out.txt)"
expect_ok "shuffled, saved at 10 and 20" "$FERRY" train "${B16[@]}" --steps 24 --save-every 10 --save 'shuf_{step}.bin'
# state header [36] shuffled, [38..39] the position's epoch
[ "$(od -An -td4 -j $((36 * 4)) -N4 shuf_20.bin.state | tr -d ' ')" = 1 ] || fail "the state records shuffling"
[ "$(od -An -td8 -j $((38 * 4)) -N8 shuf_20.bin.state | tr -d ' ')" = 1 ] || fail "step 20 is in epoch 1"
expect_ok "shuffled, resumed in epoch 1" "$FERRY" train --resume shuf_20.bin --sample 0 --threads 2 --save shuf_r.bin
grep -q "resumed at step 20$" out.txt || fail "resumed without overrides: $(grep resumed out.txt)"
cmp -s shuf.bin shuf_r.bin || fail "the resumed shuffled run differs from the unbroken one"
cmp -s shuf.bin.state shuf_r.bin.state || fail "the resumed shuffled state differs"
expect_ok "in order, saved at 20" "$FERRY" train "${B16[@]}" --steps 24 --shuffle off --save-every 20 --save 'seq_{step}.bin'
grep -q "batch 16 x 32 tokens in order" out.txt || fail "the banner says in order: $(grep ^batch out.txt)"
cmp -s seq_24.bin shuf.bin && fail "in order and shuffled trained the same"
expect_ok "in order, resumed" "$FERRY" train --resume seq_20.bin --sample 0 --threads 2 --save seq_r.bin
cmp -s seq_24.bin seq_r.bin || fail "the resumed in-order run differs from the unbroken one"
expect_ok "resumed in another order" "$FERRY" train --resume shuf_10.bin --shuffle off --steps 11 --sample 0 --threads 2
grep -q "in-order batches (saved shuffled; read from the data's start)" out.txt ||
	fail "the banner names the order override: $(grep resumed out.txt)"
expect_error "--shuffle takes on or off" "--shuffle expects on or off, got 'yes'" "$FERRY" train "${B16[@]}" --shuffle yes

# Starting from an llm.c checkpoint keeps its shape.
expect_ok "from a checkpoint" "$FERRY" train --checkpoint straight.bin --data 'corpus_train_*.bin' --batch 2 --seq 16 --steps 1 --sample 20
grep -q "2 layers, 16 channels" out.txt || fail "shape from the checkpoint"
grep -q -- "--- sample" out.txt || fail "prints a sample"
finish
