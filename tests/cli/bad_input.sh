#!/usr/bin/env bash
# Bad input to the CLI: a clear one-line error naming the file or flag and
# the problem, a non-zero exit, no crash, nothing half-written.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 1 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 --sample 0)

expect_ok "a tiny run saves a checkpoint" "$FERRY" train "${TINY[@]}" --data 'corpus_train_*.bin' --steps 2 --save good.bin

expect_error "missing checkpoint" "missing.bin" "$FERRY" train --checkpoint missing.bin --data 'corpus_train_*.bin'
head -c 100 good.bin >trunc_header.bin
expect_error "truncated header" "trunc_header.bin" "$FERRY" train --checkpoint trunc_header.bin --data 'corpus_train_*.bin'
head -c 5000 good.bin >trunc_params.bin
expect_error "truncated parameters" "trunc_params.bin" "$FERRY" eval --checkpoint trunc_params.bin --data 'corpus_val_*.bin'
cp good.bin magic.bin && printf '\x01\x02\x03\x04' | dd of=magic.bin conv=notrunc status=none
expect_error "wrong magic" "magic" "$FERRY" eval --checkpoint magic.bin --data 'corpus_val_*.bin'
cp good.bin version.bin && printf '\x05\x00\x00\x00' | dd of=version.bin bs=1 seek=4 conv=notrunc status=none
expect_error "wrong version" "version" "$FERRY" eval --checkpoint version.bin --data 'corpus_val_*.bin'

expect_error "no data" "no files match" "$FERRY" train "${TINY[@]}" --data 'nothing_*.bin'
head -c 600 corpus_train_000000.bin >short_shard.bin
expect_error "truncated shard" "short_shard.bin" "$FERRY" train "${TINY[@]}" --data short_shard.bin
cp corpus_train_000000.bin badmagic_shard.bin && printf '\x09\x09\x09\x09' | dd of=badmagic_shard.bin conv=notrunc status=none
expect_error "shard magic" "badmagic_shard.bin" "$FERRY" train "${TINY[@]}" --data badmagic_shard.bin
expect_error "token >= vocabulary" "corpus_train_000000.bin" "$FERRY" train "${TINY[@]}" --vocab 100 --data 'corpus_train_*.bin'
expect_error "sequence longer than the model" "longer than the model's maximum" "$FERRY" train "${TINY[@]}" --seq 64 --data 'corpus_train_*.bin'
expect_error "eval sequence longer than the checkpoint's" "longer than the model's maximum" "$FERRY" eval --checkpoint good.bin --data 'corpus_val_*.bin' --seq 64
expect_error "channels not divisible by heads" "not divisible" "$FERRY" train --channels 20 --heads 3 --data 'corpus_train_*.bin'
expect_error "zero layers" "layers" "$FERRY" train --layers 0 --data 'corpus_train_*.bin'
expect_error "negative channels" "channels" "$FERRY" train --channels -8 --data 'corpus_train_*.bin'
expect_error "zero batch" "positive" "$FERRY" train "${TINY[@]}" --batch 0 --data 'corpus_train_*.bin'
expect_error "non-numeric flag" "--steps expects an integer" "$FERRY" train --steps ten
expect_error "unknown flag" "unknown flag '--bogus'" "$FERRY" train --bogus
expect_error "unknown command" "unknown command 'fly'" sh -c "'$FERRY' fly 2>&1 >/dev/null | head -1 >&2; exit 2"
expect_error "device memory no model fits in" "--device-mem 64K: at least 1M" "$FERRY" train "${TINY[@]}" --device-mem 64K --data 'corpus_train_*.bin'
expect_error "device memory without a unit" "--device-mem 80: a size needs a unit" "$FERRY" train "${TINY[@]}" --device-mem 80 --data 'corpus_train_*.bin'

# A save that cannot complete leaves the previous checkpoint intact.
cp good.bin keep.bin
mkdir -p ro && cp good.bin ro/keep.bin && chmod 500 ro
if [ "$(id -u)" -ne 0 ]; then
	expect_error "unwritable save" "ro/keep.bin" "$FERRY" train "${TINY[@]}" --data 'corpus_train_*.bin' --steps 1 --save ro/keep.bin
	cmp -s good.bin ro/keep.bin || fail "the old checkpoint was damaged"
fi
chmod 700 ro
ls ./*.tmp ro/*.tmp 2>/dev/null && fail "a .tmp file was left behind"
finish
