#!/usr/bin/env bash
# Every file a run writes (--save and its state file, --trace, --json)
# against every other one and every input (--checkpoint/--resume and its
# state file, the shards): two that are one file (the same name, another
# spelling, a hard link) are refused before step 1, in one line, and
# nothing is written.  Saving over the checkpoint the run starts from, as
# a whole, stays allowed.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 32 --heads 2 --max-seq 32)
TINY=(--batch 4 --seq 32 --sample 0 --threads 2 --data 'corpus_train_*.bin' --steps 3)
"$FERRY" train "${SHAPE[@]}" "${TINY[@]}" --save ck.bin >/dev/null 2>&1 || { echo "cannot make ck.bin" >&2; exit 1; }
cp ck.bin keep.bin && cp ck.bin.state keep.bin.state
cp ck.bin cp.state && cp ck.bin.state cp.state.state # a checkpoint whose name ends in .state
ln ck.bin.state hard.link
mkdir sub

# what, needle, flags
refused() {
	local what=$1 needle=$2; shift 2
	# a run from a checkpoint takes its shape from it (shape flags draw a note)
	local shape=("${SHAPE[@]}")
	[[ " $* " == *" --checkpoint "* || " $* " == *" --resume "* || " $* " == *" llama "* ]] && shape=()
	expect_error "$what" "$needle" "$FERRY" train "${shape[@]}" "${TINY[@]}" "$@"
	cmp -s ck.bin keep.bin && cmp -s ck.bin.state keep.bin.state || fail "$what: ck.bin or its state changed"
	cmp -s cp.state keep.bin || fail "$what: cp.state changed"
	ls t.json t2.json m.bin m.bin.state out.bin out.bin.state 2>/dev/null && fail "$what: an output was written"
	rm -f t.json t2.json m.bin m.bin.state out.bin out.bin.state
}
# the issue's three
refused "--save onto the checkpoint's state" "saving to ck.bin.state would replace ck.bin.state, a training state of the checkpoint" \
	--checkpoint ck.bin --save ck.bin.state
refused "--trace and --save" "--trace m.bin and --save m.bin are one file" --trace m.bin --save m.bin
refused "--trace and --json" "--json t.json and --trace t.json are one file" --trace t.json --json t.json
# outputs against outputs
refused "--json and --save" "--json m.bin and --save m.bin are one file" --json m.bin --save m.bin
refused "--json and the save's state" "--json m.bin.state and the state file of --save m.bin.state" --json m.bin.state --save m.bin
refused "--trace and the save's state" "--trace m.bin.state and the state file of --save" --trace m.bin.state --save m.bin
refused "--trace and --json, spelt apart" "are one file" --trace sub/../t.json --json ./t.json
# outputs against inputs
refused "--resume, --save onto its state" "a training state of the checkpoint this run starts from" \
	--resume ck.bin --save ck.bin.state
refused "--save whose state is the checkpoint" "saving to cp would replace cp.state, a checkpoint this run starts from" \
	--checkpoint cp.state --save cp
refused "--save onto a hard link of the state" "would replace ck.bin.state" --checkpoint ck.bin --save hard.link
refused "--save onto a shard" "a training shard" --save corpus_train_000000.bin
refused "--save onto a validation shard" "a validation shard" --val-data 'corpus_val_*.bin' --save corpus_val_000000.bin
refused "--json onto the checkpoint's state" "is one of this run's inputs" --checkpoint ck.bin --json ck.bin.state
refused "--json onto the checkpoint" "is one of this run's inputs" --resume ck.bin --json ck.bin
refused "--json onto a shard" "is one of this run's inputs" --json corpus_train_000000.bin
refused "--trace onto the checkpoint's state" "is one of this run's inputs" --checkpoint ck.bin --trace ck.bin.state
refused "--trace onto a shard" "is one of this run's inputs" --trace corpus_train_000000.bin
# a Llama directory's files
refused "--json into a Llama save" "--json ll/config.json and a file of --save" --model llama --layers 2 --channels 16 \
	--heads 2 --kv-heads 1 --save ll --json ll/config.json

# saving over the starting checkpoint as a whole is how a run continues
expect_ok "--resume ck.bin --save ck.bin" "$FERRY" train "${TINY[@]}" --resume ck.bin --save ./ck.bin --steps 5
grep -q "resumed at step 3" out.txt || fail "resumed: $(grep resumed out.txt)"
expect_ok "--resume ck.bin --save ck.bin again" "$FERRY" train "${TINY[@]}" --resume ck.bin --steps 6
finish
