#!/usr/bin/env bash
# A save commits a model and its state together (include/ferry/checkpoint.h):
#  - kill -9 at random moments of `ferry train --save-every 1`, many times,
#    GPT-2 (FILE + FILE.state) and Llama (a directory): every survivor resumes
#    from its last complete save, which equals the unbroken run's save of that
#    step byte for byte, and no temporary is left once it has resumed;
#  - a full disk (a file-size limit; a small tmpfs where mounting is allowed)
#    and an over-long path leave the previous pair whole, with one clear line;
#  - a save onto a device (/dev/full), a symbolic link or a training shard
#    is refused;
#  - two runs saving to one path at once leave one whole pair;
#  - a Llama save into a directory whose other files it cannot keep (a
#    subtree deeper than 32) is refused before step 1, not after the run.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 2 --channels 16 --heads 2 --max-seq 32)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')
LLAMA=(--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32)
STEPS=50

# temporaries beside the checkpoints or inside a checkpoint directory
temporaries() { find . -maxdepth 2 | grep -E '\.(tmp|old)(\.[0-9]+)?$'; }

# The unbroken runs, saved at every step.
expect_ok "reference gpt2 run" "$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps $STEPS --save-every 1 --save 'ref_{step}.bin'
expect_ok "reference llama run" "$FERRY" train "${LLAMA[@]}" "${RUN[@]}" --steps $STEPS --save-every 1 --save 'lref_{step}'

# kill_trials NAME TRIALS CKPT REF_PREFIX SAME_CMD SHAPE...: trains with
# --save-every 1 into CKPT (resuming it when there), kills it at a random
# moment, then resumes it and compares it with the reference of its step.
kill_trials() {
	local name=$1 trials=$2 ck=$3 ref=$4 same=$5; shift 5
	local shape=("$@") t k last pid windows=0 left=0 resumed=0 fresh=0
	RANDOM=$((4242 + ${#name}))
	for t in $(seq 1 "$trials"); do
		local args=("${RUN[@]}" --steps $STEPS --save-every 1 --save "$ck")
		if [ -e "$ck" ]; then args+=(--resume "$ck"); else args+=("${shape[@]}"); fresh=$((fresh + 1)); fi
		"$FERRY" train "${args[@]}" >run.txt 2>&1 &
		pid=$!
		# once it trains (start-up time varies with the machine's load),
		# a random moment within its next ~25 steps and saves
		while ! grep -q '^step' run.txt 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.005; done
		sleep "0.$(printf '%03d' $((RANDOM % 500)))"
		kill -9 $pid 2>/dev/null
		wait $pid 2>/dev/null
		# the step of the last save the run reported (it was committed then)
		last=$(awk '/^step /{split($2, a, "/"); s = a[1]} /^saved /{print s}' run.txt | tail -n 1)
		temporaries >/dev/null && left=$((left + 1))
		# the window between the model's and the state's rename
		if ls "$ck".state.tmp.* >/dev/null 2>&1 && ! ls "$ck".tmp.* >/dev/null 2>&1; then windows=$((windows + 1)); fi
		[ -e "$ck" ] || { [ -z "$last" ] || fail "$name trial $t: saved step $last, nothing there"; continue; }
		checks=$((checks + 1))
		if ! "$FERRY" train --resume "$ck" "${RUN[@]}" --steps 1 >res.txt 2>&1; then
			fail "$name trial $t: the survivor does not resume: $(grep '^ferry train: [^n]' res.txt)"
			rm -rf "$ck" "$ck".state "$ck".*tmp* # the next trial starts afresh
			continue
		fi
		resumed=$((resumed + 1))
		k=$(sed -n 's/^resumed at step \([0-9]*\).*/\1/p' res.txt)
		[ -n "$k" ] || { fail "$name trial $t: no step in: $(cat res.txt)"; continue; }
		[ -z "$last" ] || [ "$k" -ge "$last" ] || fail "$name trial $t: resumed at step $k, but step $last was saved"
		$same "$ck" "${ref}_$k" || fail "$name trial $t: the checkpoint of step $k differs from the unbroken run's"
		temporaries >/dev/null && fail "$name trial $t: temporaries left after the resume: $(temporaries | tr '\n' ' ')"
		[ "$k" -ge "$STEPS" ] && rm -rf "$ck" "$ck".state
	done
	echo "ok: $name: $trials kills, $fresh from scratch; $left left temporaries, $windows between the two renames;" \
		"all $resumed survivors resumed from the unbroken run's save of their step, no temporary left"
}

same_llmc() { cmp -s "$1" "$2.bin" && cmp -s "$1.state" "$2.bin.state"; }
same_hf() {
	local f
	for f in config.json model.safetensors ferry_state.bin; do cmp -s "$1/$f" "$2/$f" || return 1; done
	[ "$(ls -A "$1" | wc -l)" -eq 3 ]
}
kill_trials gpt2 30 ck.bin ref same_llmc "${TINY[@]}"
kill_trials llama 10 lck lref same_hf "${LLAMA[@]}"

# A following successful save completes the run: the unbroken run's result.
[ -e ck.bin ] || { cp ref_10.bin ck.bin && cp ref_10.bin.state ck.bin.state; }
expect_ok "the killed run completes" "$FERRY" train --resume ck.bin "${RUN[@]}" --steps $STEPS --save-every 1 --save ck.bin
cmp -s ck.bin ref_$STEPS.bin || fail "the completed run differs from the unbroken one"
temporaries && fail "temporaries left after a successful save"

# A full disk: the state cannot be written (a file-size limit lets the
# 49 KB model through and stops the 98 KB state).
cp ref_5.bin keep.bin && cp ref_5.bin.state keep.bin.state
cp keep.bin full.bin && cp keep.bin.state full.bin.state
expect_error "a full disk" "full.bin.state.tmp." bash -c "trap '' XFSZ; ulimit -f 64; exec \"\$0\" \"\$@\"" \
	"$FERRY" train --resume full.bin "${RUN[@]}" --steps $STEPS --save full.bin
grep -q "File too large" err.txt || fail "says why: $(cat err.txt)"
cmp -s full.bin keep.bin && cmp -s full.bin.state keep.bin.state || fail "the previous pair changed"
temporaries && fail "a temporary was left by the failed save"
expect_ok "the pair still resumes" "$FERRY" train --resume full.bin "${RUN[@]}" --steps $STEPS --save full.bin
cmp -s full.bin ref_$STEPS.bin || fail "and continues the run"

# A real full file system, where this user may mount one: 232 KiB, 152 of
# them the pair, so that a new model (52 KiB) fits but not the state too.
mkdir -p mnt
if mount -t tmpfs -o size=232k tmpfs mnt 2>/dev/null; then
	trap 'umount '"$PWD"'/mnt 2>/dev/null' EXIT
	cp keep.bin keep.bin.state mnt/
	expect_error "a full tmpfs" "No space left on device" "$FERRY" train --resume mnt/keep.bin "${RUN[@]}" --steps $STEPS --save mnt/keep.bin
	cmp -s mnt/keep.bin keep.bin && cmp -s mnt/keep.bin.state keep.bin.state || fail "the previous pair changed"
	[ "$(ls -a mnt | grep -c tmp)" -eq 0 ] || fail "temporaries left on the full disk: $(ls -a mnt)"
	umount mnt
	trap - EXIT
else
	echo "skipped: a full tmpfs (mount not permitted here)"
fi

# An over-long path (4088 bytes): refused before training with one uncut
# line; the pair already there stays.
deep=$PWD
while [ $((${#deep} + 201)) -lt 4040 ]; do deep=$deep/$(printf 'd%.0s' $(seq 200)); mkdir -p "$deep"; done
name=$(printf 'm%.0s' $(seq $((4088 - ${#deep} - 1))))
cp keep.bin "$deep/$name" && cp keep.bin.state "$deep/$name.state"
long=$deep/$name
[ ${#long} -eq 4088 ] || fail "the path is ${#long} bytes"
expect_error "an over-long path" "over the system's limit of 4095 bytes for a path" \
	"$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 1 --save "$long"
[ "$(wc -c <err.txt)" -lt 500 ] || fail "the message is $(wc -c <err.txt) bytes"
cmp -s "$long" keep.bin && cmp -s "$long.state" keep.bin.state || fail "the pair at the long path changed"

# Destinations that must not be replaced: a device (a private node like
# /dev/full where this user may make one, so that a broken build cannot
# replace the system's), ...
dev=/dev/full
mknod dev_full c 1 7 2>/dev/null && dev=dev_full
if [ -c $dev ]; then
	expect_error "--save onto a device ($dev)" "$dev is not a regular file" \
		"$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 1 --save $dev
	[ -c $dev ] || fail "$dev is no longer a device"
fi
ln -s keep.bin link.bin
expect_error "--save onto a symbolic link" "link.bin is a symbolic link" "$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 1 --save link.bin
[ -L link.bin ] || fail "the link was replaced"
cp corpus_train_000000.bin shard_copy.bin
expect_error "--save onto the training shard" "a training shard" \
	"$FERRY" train "${TINY[@]}" --batch 2 --seq 16 --sample 0 --threads 2 --data corpus_train_000000.bin --steps 1 \
	--save corpus_train_000000.bin
cmp -s corpus_train_000000.bin shard_copy.bin || { fail "the shard was replaced"; cp shard_copy.bin corpus_train_000000.bin; }
[ -e corpus_train_000000.bin.state ] && { fail "a state was written beside the shard"; rm corpus_train_000000.bin.state; }

# Two runs saving to one path at once: one whole pair, nothing left over.
"$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 20 --save-every 1 --save both.bin >a.txt 2>&1 &
a=$!
"$FERRY" train "${TINY[@]}" "${RUN[@]}" --steps 20 --save-every 1 --seed 7 --save both.bin >b.txt 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
checks=$((checks + 1))
if [ $ra -ne 0 ] || [ $rb -ne 0 ]; then
	fail "concurrent saves: exits $ra and $rb: $(grep '^ferry train: [^n]' a.txt b.txt)"
else
	echo "ok: two runs saved to one path at once"
fi
expect_ok "their pair resumes" "$FERRY" train --resume both.bin "${RUN[@]}" --steps 20
temporaries && fail "temporaries left by the concurrent saves"

# the directory's other files are kept by hard links, 32 levels deep at most
mkdir -p "deep/$(printf 'd/%.0s' $(seq 1 40))"
expect_error "a Llama save over a subtree deeper than 32" "deep: directories nested deeper than 32: a save could not keep d" \
	"$FERRY" train "${LLAMA[@]}" "${RUN[@]}" --steps 20 --json deep.jsonl --save deep
[ -s deep.jsonl ] && fail "the deep save trained before it was refused: $(wc -l <deep.jsonl) steps"
mkdir -p "deep32/$(printf 'd/%.0s' $(seq 1 32))"
expect_ok "a Llama save over a subtree 32 deep" "$FERRY" train "${LLAMA[@]}" "${RUN[@]}" --steps 2 --save deep32
[ -d "deep32/$(printf 'd/%.0s' $(seq 1 32))" ] || fail "the 32-deep subtree is kept"
finish
