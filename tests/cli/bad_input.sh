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

# A FIFO or a device as an input (checkpoint, its state, a Hugging Face
# directory's files, shards, tokenizer) is refused at once, saying what it
# is; none is opened for reading (a FIFO would block until a writer came).
# A --tokenizer is checked before training, not at the sample.
if command -v mkfifo >/dev/null; then
	mkfifo in.fifo
	T20=(timeout 20 "$FERRY")
	expect_error "a FIFO checkpoint" "in.fifo: not a regular file (a FIFO)" "${T20[@]}" train --checkpoint in.fifo \
		--data 'corpus_train_*.bin'
	expect_error "a FIFO shard" "in.fifo: not a regular file (a FIFO)" "${T20[@]}" train "${TINY[@]}" --data in.fifo
	expect_error "eval of a FIFO shard" "in.fifo: not a regular file (a FIFO)" "${T20[@]}" eval --checkpoint good.bin \
		--data in.fifo --batch 2 --seq 16
	expect_error "a FIFO tokenizer" "in.fifo: not a regular file (a FIFO)" "${T20[@]}" train "${TINY[@]}" \
		--data 'corpus_train_*.bin' --steps 1 --tokenizer in.fifo
	grep -q "^step" out.txt && fail "trained before refusing the tokenizer"
	expect_error "sample with a FIFO tokenizer" "in.fifo: not a regular file (a FIFO)" "${T20[@]}" sample \
		--checkpoint good.bin --tokenizer in.fifo --tokens 3
	cp good.bin fifo_state.bin && mkfifo fifo_state.bin.state
	expect_error "a FIFO state" "fifo_state.bin.state: not a regular file (a FIFO)" "${T20[@]}" train \
		--resume fifo_state.bin --steps 3
	expect_ok "a Llama checkpoint" "$FERRY" train --model llama --layers 1 --channels 16 --heads 2 --kv-heads 1 \
		--max-seq 32 --batch 2 --seq 16 --sample 0 --steps 1 --data 'corpus_train_*.bin' --save hf
	for f in config.json model.safetensors ferry_state.bin; do
		rm -rf hf_fifo && cp -r hf hf_fifo && rm hf_fifo/$f && mkfifo hf_fifo/$f
		expect_error "a FIFO $f" "hf_fifo/$f: not a regular file (a FIFO)" "${T20[@]}" train --resume hf_fifo --steps 2
	done
fi
expect_error "a device as checkpoint" "/dev/zero: not a regular file (a character device)" \
	timeout 20 "$FERRY" eval --checkpoint /dev/zero --data 'corpus_val_*.bin'
expect_error "a device as shards" "/dev/zero: not a regular file (a character device)" \
	timeout 20 "$FERRY" train "${TINY[@]}" --data /dev/zero

# ferry data that cannot finish (an input missing after others were read and
# whole shards written) leaves the previous corpus as it was, and no
# temporaries.
cp corpus_train_000000.bin train_before.bin && cp corpus_val_000000.bin val_before.bin
expect_error "ferry data with a missing input" "missing.txt: cannot open: No such file or directory" \
	"$FERRY" data --out corpus --shard-tokens 1000 text9.txt missing.txt
cmp -s corpus_train_000000.bin train_before.bin && cmp -s corpus_val_000000.bin val_before.bin ||
	fail "ferry data replaced the corpus before it failed"
[ ! -e corpus_train_000001.bin ] || fail "a shard of the failed run was left"
ls ./*.tmp* 2>/dev/null && fail "ferry data left temporaries"

# Under `ulimit -v` the CPU backend's default arena is 3/4 of the address
# space the limit leaves beyond the libraries' headroom (it used to reserve
# all of RAM, and fail); a plan over it is refused naming --device-mem, and
# so is a --device-mem that would leave the libraries less.  (Not under the sanitizers: their shadow memory needs more
# address space than such a limit allows.)
if grep -q "__asan_init\|__tsan_init" "$FERRY"; then
	echo "skipped: ulimit -v (sanitizer build)"
else
	LIMIT=(env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MALLOC_ARENA_MAX=2 bash -c 'ulimit -v 3000000 && exec "$@"' limit)
	expect_ok "a run under ulimit -v" "${LIMIT[@]}" "$FERRY" train "${TINY[@]}" --threads 2 --data 'corpus_train_*.bin' --steps 1
	grep -q "device arena .* (3/4 of the .* GiB that ulimit -v leaves beyond .* MiB for BLAS and threads)" out.txt ||
		fail "the arena fits the limit: $(grep arena out.txt)"
	expect_error "a plan over ulimit -v" "(3/4 of the" "${LIMIT[@]}" "$FERRY" train --layers 12 --channels 768 --heads 12 \
		--max-seq 1024 --batch 16 --seq 1024 --sample 0 --threads 2 --data 'corpus_train_*.bin' --steps 1
	grep -q "MiB for BLAS and threads; --device-mem sets it); presets that fit" err.txt || fail "names --device-mem: $(cat err.txt)"
	expect_error "a --device-mem over ulimit -v" "cpu backend: --device-mem 4.00 GiB and the 704.0 MiB that BLAS and 2 threads map do not fit" \
		"${LIMIT[@]}" "$FERRY" train "${TINY[@]}" --threads 2 --data 'corpus_train_*.bin' --steps 1 --device-mem 4G
fi

# A save that cannot complete leaves the previous checkpoint intact.
cp good.bin keep.bin
mkdir -p ro && cp good.bin ro/keep.bin && chmod 500 ro
if [ "$(id -u)" -ne 0 ]; then
	expect_error "unwritable save" "ro/keep.bin" "$FERRY" train "${TINY[@]}" --data 'corpus_train_*.bin' --steps 1 --save ro/keep.bin
	cmp -s good.bin ro/keep.bin || fail "the old checkpoint was damaged"
fi
chmod 700 ro
ls ./*.tmp ro/*.tmp 2>/dev/null && fail "a .tmp file was left behind"

# a state file given as the model names the model and --resume; a mistyped
# command gets the nearest one
for cmd in "train --data corpus_train_*.bin --steps 1" "eval --data corpus_val_*.bin" "sample --tokens 1"; do
	# shellcheck disable=SC2086
	expect_error "${cmd%% *} --checkpoint X.state" \
		"good.bin.state is a training state, not a model: the model is good.bin (--resume good.bin continues its run)" \
		"$FERRY" ${cmd%% *} --checkpoint good.bin.state ${cmd#* }
done
checks=$((checks + 1))
"$FERRY" trian >out.txt 2>err.txt
[ $? -eq 2 ] && [ "$(head -n 1 err.txt)" = "ferry: unknown command 'trian'; did you mean train?" ] ||
	fail "ferry trian: $(head -n 1 err.txt)"
finish
