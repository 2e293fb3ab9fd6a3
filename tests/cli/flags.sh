#!/usr/bin/env bash
# Flags as people type them, in every command: --flag=value as well as
# --flag value; a mistyped flag answered with the nearest known ones; every
# flag a --help names is one the command knows; sizes with units (and
# refusals in MiB, not raw bytes); thread counts the machine can run; and
# output that cannot be written (--json, standard output) is a failure.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16 --threads 2)
TINY=("${SHAPE[@]}" --sample 0)
DATA=(--data 'corpus_train_*.bin')

# --flag=value is --flag value
expect_ok "--flag value" "$FERRY" train "${TINY[@]}" "${DATA[@]}" --steps 3 --lr 1e-3 --seed 7 --save spaced.bin
expect_ok "--flag=value" "$FERRY" train --layers=2 --channels=16 --heads=2 --max-seq=32 --batch=2 --seq=16 \
	--sample=0 --threads=2 --data='corpus_train_*.bin' --steps=3 --lr=1e-3 --seed=7 --save=equals.bin
cmp -s spaced.bin equals.bin || fail "--flag=value trained another model than --flag value"
expect_ok "eval --flag=value" "$FERRY" eval --checkpoint=spaced.bin --data='corpus_val_*.bin' --batch=2 --seq=16 --batches=2
grep -q '^loss ' out.txt || fail "eval --flag=value gives a loss"
expect_ok "data --out=PREFIX" "$FERRY" data --out=eq --val-fraction=0 text0.txt
[ -f eq_train_000000.bin ] || fail "data --out=eq wrote eq_train_000000.bin"
expect_ok "plan --json=FILE and a value holding '='" "$FERRY" plan "${SHAPE[@]}" --json=plan.json \
	--policy=custom:query_proj=offload,context=device
grep -q '"query_proj"' plan.json || fail "plan --json=plan.json wrote the plan"
expect_ok "--tied-head, a switch" "$FERRY" plan --model llama --tied-head "${SHAPE[@]}"

# A typo: the nearest flags of that command
expect_error "a typo" "unknown flag '--val-evry'; did you mean --val-every? (see ferry train --help)" \
	"$FERRY" train --val-evry 5
expect_error "one dash" "unknown flag '-steps'; did you mean --steps?" "$FERRY" train -steps 5
expect_error "a prefix" "did you mean --val-data, --val-every or --val-batches?" "$FERRY" train --val 5
expect_error "a word inside" "did you mean --warmup?" "$FERRY" train --lr-warmup 5
expect_error "a typo with =value" "unknown flag '--stesp=5'; did you mean --steps?" "$FERRY" train --stesp=5
expect_error "eval" "did you mean --batch or --batches?" "$FERRY" eval --batchs 3
expect_error "data" "did you mean --out?" "$FERRY" data --ouy x
expect_error "plan" "did you mean --schedule?" "$FERRY" plan --schedul
expect_error "sample" "did you mean --temperature?" "$FERRY" sample --temprature 1
expect_error "nothing near" "unknown flag '--bogus' (see ferry train --help)" "$FERRY" train --bogus
expect_error "a switch with a value" "--tied-head takes no value" "$FERRY" train --tied-head=yes
expect_error "info takes no flags" "unknown flag '--verbose'" "$FERRY" info --verbose

# Every flag a command's --help names (the flag column of its flag lines,
# and [--flag] in its usage) is one main() lets through to that command: the
# flag lists (tools/ferry/cli_flags.c) and the help agree.  One run per
# command, each flag followed by a "1" (a value, or a file after a switch);
# --help first, so nothing else runs.
for cmd in train plan eval sample data info example calibrate; do
	checks=$((checks + 1))
	"$FERRY" $cmd --help >help.txt 2>&1 || { fail "$cmd --help: exit $?"; continue; }
	flags=$({ grep -E '^ +--' help.txt | sed -E 's/^ +//; s/  .*//'; grep -oE '\[--[a-z][a-z-]*' help.txt; } |
		grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
	args=()
	for f in $flags; do args+=("$f" 1); done
	n=$((${#args[@]} / 2))
	if ! "$FERRY" $cmd --help "${args[@]}" >/dev/null 2>err.txt; then
		fail "$cmd refuses a flag its --help names: $(cat err.txt)"
	else
		echo "ok: $cmd knows the $n flags its --help names"
	fi
	case $cmd in train) min=30 ;; plan) min=20 ;; eval | sample) min=5 ;; data) min=4 ;; *) min=0 ;; esac
	[ $n -ge $min ] || fail "$cmd --help: only $n flags found (at least $min expected): is the help parsed?"
done

# Sizes have units; refusals are in MiB
expect_error "a size without a unit" "--device-mem 80: a size needs a unit; write e.g. 80M or 80G" \
	"$FERRY" train --device-mem 80
expect_error "a size below 1M" "--device-mem 512K: at least 1M" "$FERRY" train --device-mem 512K
expect_error "an unknown unit" "--device-mem 2X: unknown unit" "$FERRY" plan --device-mem 2X
expect_error "eval's sizes too" "a size needs a unit" "$FERRY" eval --checkpoint spaced.bin --data x --device-mem 100
for size in 2G 2g 2GiB 2GB 1.5T 4096K; do
	expect_ok "--device-mem $size" "$FERRY" plan "${SHAPE[@]}" --device-mem $size
done
BIG=(--layers 2 --channels 64 --heads 2 --max-seq 64 --batch 8 --seq 64 --sample 0 --threads 2)
expect_error "over the device, in MiB" \
	"policy everything_saveable needs 8.1 MiB of device memory, --device-mem gives 8.0 MiB; presets that fit: nothing_saveable (6.2 MiB)" \
	"$FERRY" train "${BIG[@]}" "${DATA[@]}" --device-mem 8M
grep -Eq '[0-9]{5}' err.txt && fail "a raw byte count in: $(cat err.txt)"
expect_error "nothing fits" "--device-mem gives 1.0 MiB; presets that fit: none: use a smaller batch or model" \
	"$FERRY" train "${BIG[@]}" "${DATA[@]}" --device-mem 1M
PLAN_BIG=("${BIG[@]:0:10}")
"$FERRY" plan "${PLAN_BIG[@]}" --device-mem 8M >out.txt
grep -q "^does not fit: needs 8.1 MiB of device memory, the device has 8.0 MiB (" out.txt ||
	fail "plan's refusal in MiB: $(grep 'fit' out.txt)"
grep -q "^fits: needs 8.1 MiB of the 2.00 GiB of device memory (" <("$FERRY" plan "${PLAN_BIG[@]}" --device-mem 2G) ||
	fail "plan's fit in MiB"

# Sizes that overflow 32 or 64 bits are refused, or sized right: a sequence
# of 2^28 (a layer input of 2^28 x 128 fp32 is 2^37 bytes) does not fit
# 80G; tensors adding up past 2^62 bytes are refused, not wrapped round
expect_error "2^31 layers" "layers (2147483647) must be at most 1048576" "$FERRY" plan --layers 2147483647
expect_error "a huge batch" "batch 2147483647 x 64 is too large" "$FERRY" plan --batch 2147483647
expect_error "huge channels" "channels (2147483647) is too large" "$FERRY" plan --channels 2147483647 --heads 1
expect_error "a vocabulary of 2^31" "vocab (2147483647) is too large" "$FERRY" plan --vocab 2147483647
"$FERRY" plan --batch 1 --seq 268435456 --max-seq 268435456 --device-mem 80G --json >seq28.json; rc=$?
[ $rc -eq 1 ] && grep -q '"fits": false' seq28.json || fail "a 2^28 sequence does not fit 80G (rc $rc)"
grep -q '"decoder_layer_input",[^}]*"layer_bytes": 137438953472' seq28.json || fail "a 2^28 sequence's layer input is 2^37 bytes"
expect_error "tensors past 2^62 bytes" "batch 1 x 268435456: its tensors add up to more than 4 EiB" \
	"$FERRY" plan --layers 32768 --channels 32768 --heads 16 --batch 1 --seq 268435456 --max-seq 268435456 --device-mem 80G

# Threads: at most 4 per core, refused at once
expect_error "100000 threads" "--threads 100000: this machine has" timeout 20 "$FERRY" train --threads 100000
grep -Eq "has [0-9]+ cores?; at most [0-9]+ threads \(4 per core" err.txt || fail "names the cores: $(cat err.txt)"
expect_error "eval: 100000 threads" "at most" timeout 20 "$FERRY" eval --checkpoint spaced.bin --data x --threads 100000
expect_error "negative threads" "--threads must not be negative" "$FERRY" plan --threads -1

# Output that cannot be written is an error, not exit 0
expect_error "--json to a full disk" "cannot write --json /dev/full: No space left on device; stopped after step 1 of 5, not saved" \
	"$FERRY" train "${TINY[@]}" "${DATA[@]}" --steps 5 --json /dev/full
expect_error "--json a directory" "cannot write --json .: Is a directory" "$FERRY" train "${TINY[@]}" "${DATA[@]}" --json .
cp corpus_train_000000.bin shard_before.bin
expect_error "--json over a training shard" "--json corpus_train_000000.bin is one of this run's inputs (data or checkpoint): refusing to overwrite it" \
	"$FERRY" train "${TINY[@]}" "${DATA[@]}" --json corpus_train_000000.bin
cmp -s corpus_train_000000.bin shard_before.bin || fail "the shard was damaged"
expect_error "--json over the checkpoint's state" "refusing to overwrite it" \
	"$FERRY" train --checkpoint spaced.bin --batch 2 --seq 16 "${DATA[@]}" --sample 0 --json spaced.bin.state
expect_ok "--json to standard output" "$FERRY" train "${TINY[@]}" "${DATA[@]}" --steps 3 --json /dev/stdout
[ "$(grep -c '^{"step": ' out.txt)" -eq 3 ] || fail "3 records on stdout"
if command -v mkfifo >/dev/null; then
	mkfifo steps.fifo
	cat steps.fifo >fifo.txt &
	expect_ok "--json to a FIFO" "$FERRY" train "${TINY[@]}" "${DATA[@]}" --steps 3 --json steps.fifo
	wait
	[ "$(grep -c '^{"step": ' fifo.txt)" -eq 3 ] || fail "3 records through the FIFO"
fi
expect_error "standard output on a full disk" "ferry: writing standard output: No space left on device" \
	sh -c "'$FERRY' info >/dev/full"
finish
