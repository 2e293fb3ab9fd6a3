#!/usr/bin/env bash
# Training knobs (issue 25 item 13): --grad-accum against the larger batch
# and, under every offload mode, against the run with nothing offloaded,
# the AdamW and schedule flags, their refusals, the warmup warning, the
# schedule's values in --json, and a resume that keeps them all.
. "$(dirname "$0")/lib.bash"
make_corpus
TINY=(--layers 2 --channels 16 --heads 2 --max-seq 32 --seq 16 --sample 0 --threads 2
	--data 'corpus_train_*.bin' --shuffle off)

expect_ok "train --help" "$FERRY" train --help
for flag in --grad-accum --beta1 --beta2 --eps --lr-schedule --min-lr --decay-frac; do
	grep -q -- "$flag" out.txt || fail "train --help lists $flag"
done
grep -q "not biases or norm gains" out.txt || fail "--help says which tensors weight decay applies to"

# N micro-batches of B rows: the loss and norm of one batch of N*B rows
# (within 1e-6 relative: their sums round apart; tests/test_knobs.c bounds
# the rest), and the same learning rates
expect_ok "batch 4" "$FERRY" train "${TINY[@]}" --batch 4 --steps 4 --json big.jsonl
expect_ok "batch 2 x 2 micro-batches" "$FERRY" train "${TINY[@]}" --batch 2 --grad-accum 2 --steps 4 --json acc.jsonl
grep -q "x 2 micro-batches a step (4 rows)" out.txt || fail "the banner names the micro-batches: $(grep batch out.txt)"
d=$(losses_agree big.jsonl acc.jsonl) || fail "accumulated steps differ from the larger batch: $d"
[ "$(grep -o '"lr": [^,]*' big.jsonl)" = "$(grep -o '"lr": [^,]*' acc.jsonl)" ] || fail "other learning rates"

# micro-batches under every offload mode: the bits of the run with nothing
# offloaded and the same micro-batches (2 and 3), on GPT-2 (tied head),
# Llama (its own head) and Llama with a tied head; clipping bites, so the
# speculative order has something to redo
ACCUM_MODELS=("gpt2|--layers 2 --channels 16 --heads 2|acc.bin|acc.bin acc.bin.state"
	"llama|--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1|acc|acc/model.safetensors acc/ferry_state.bin"
	"llama-tied|--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --tied-head|acc|acc/model.safetensors acc/ferry_state.bin")
ACCUM_MODES=("--offload-optimizer stream" "--offload-optimizer cpu" "--offload-optimizer cpu --clip-order speculative"
	"--offload-params --param-prefetch 2" "--offload-params --offload-optimizer stream"
	"--offload-params --offload-optimizer cpu --policy minimal_offloaded"
	"--offload-params --offload-embeddings" "--offload-params --offload-embeddings --offload-optimizer stream"
	"--offload-params --offload-embeddings --offload-optimizer cpu --policy qkv_proj_offloaded")
for m in "${ACCUM_MODELS[@]}"; do
	IFS='|' read -r mname mflags msave mfiles <<<"$m"
	for n in 2 3; do
		# shellcheck disable=SC2086
		expect_ok "$mname, $n micro-batches" "$FERRY" train "${TINY[@]}" $mflags --batch 2 --grad-accum $n --steps 3 \
			--grad-clip 0.05 --save $msave
		rm -rf dev_acc && mkdir dev_acc && cp $mfiles dev_acc/
		for md in "${ACCUM_MODES[@]}"; do
			# shellcheck disable=SC2086
			expect_ok "$mname, $n micro-batches, $md" "$FERRY" train "${TINY[@]}" $mflags --batch 2 --grad-accum $n \
				--steps 3 --grad-clip 0.05 --save $msave $md
			for f in $mfiles; do # the states but for their placements
				if [[ $f == *state* ]]; then same_state "dev_acc/${f##*/}" "$f"; else cmp -s "dev_acc/${f##*/}" "$f"; fi ||
					fail "$mname, $n micro-batches, $md: other bits in $f"
			done
		done
	done
done

expect_error "unknown schedule" "--lr-schedule step: one of cosine, linear, constant, wsd" \
	"$FERRY" train "${TINY[@]}" --batch 2 --lr-schedule step
expect_error "--min-lr with --final-lr-frac" "--min-lr and --final-lr-frac are exclusive" \
	"$FERRY" train "${TINY[@]}" --batch 2 --min-lr 1e-4 --final-lr-frac 0.1
expect_error "--min-lr above --lr" "--min-lr must be between 0 and --lr" \
	"$FERRY" train "${TINY[@]}" --batch 2 --lr 1e-3 --min-lr 1e-2
expect_error "--grad-accum 0" "--grad-accum 0: 1 or more" "$FERRY" train "${TINY[@]}" --batch 2 --grad-accum 0
expect_error "--beta1 1" "--beta1 and --beta2 must be in [0, 1)" "$FERRY" train "${TINY[@]}" --batch 2 --beta1 1
expect_error "--eps 0" "--eps positive" "$FERRY" train "${TINY[@]}" --batch 2 --eps 0
expect_error "--decay-frac 0" "--decay-frac must be above 0" "$FERRY" train "${TINY[@]}" --batch 2 --decay-frac 0

# a warmup as long as the run: a warning on stderr, the run goes on
expect_ok "warmup past the steps" "$FERRY" train "${TINY[@]}" --batch 2 --steps 3 --warmup 10
grep -q "warning: --warmup 10 exceeds --steps 3: the learning rate only rises" err.txt ||
	fail "the warmup warning: $(cat err.txt)"
expect_ok "warmup as long as the steps" "$FERRY" train "${TINY[@]}" --batch 2 --steps 3 --warmup 3
grep -q "warning" err.txt && fail "no warning for a warmup within the run: $(cat err.txt)"

# WSD over 10 steps, decay 0.2, floor 1e-4: lr 1e-3 to step 8, then 5.5e-4, 1e-4
expect_ok "wsd" "$FERRY" train "${TINY[@]}" --batch 2 --steps 10 --warmup 0 --lr 1e-3 --lr-schedule wsd \
	--decay-frac 0.2 --min-lr 1e-4 --json wsd.jsonl
grep -q "wsd over the last 0.2 to 1.00e-04" out.txt || fail "the banner names the schedule: $(grep lr out.txt)"
lrs=$(sed -E 's/.*"lr": ([^,]*),.*/\1/' wsd.jsonl | tr '\n' ' ')
[ "$lrs" = "1.000000e-03 1.000000e-03 1.000000e-03 1.000000e-03 1.000000e-03 1.000000e-03 1.000000e-03 1.000000e-03 5.500000e-04 1.000000e-04 " ] ||
	fail "wsd learning rates: $lrs"
expect_ok "constant" "$FERRY" train "${TINY[@]}" --batch 2 --steps 3 --warmup 0 --lr 1e-3 --lr-schedule constant --json c.jsonl
[ "$(grep -c '"lr": 1.000000e-03' c.jsonl)" -eq 3 ] || fail "constant learning rate: $(cat c.jsonl)"

# a resume keeps every knob: the same model as the unbroken run, bit for bit
KNOBS=(--batch 2 --grad-accum 3 --steps 6 --warmup 1 --lr-schedule linear --min-lr 1e-4 --beta1 0.8 --beta2 0.99
	--eps 1e-6 --weight-decay 0.05)
expect_ok "unbroken" "$FERRY" train "${TINY[@]}" "${KNOBS[@]}" --save straight.bin
expect_ok "broken at 3" "$FERRY" train "${TINY[@]}" "${KNOBS[@]}" --save-every 3 --save 'run_{step}.bin'
expect_ok "resumed with no knob given" "$FERRY" train --resume run_3.bin --sample 0 --threads 2 --save resumed.bin
grep -q "x 3 micro-batches a step" out.txt || fail "the resume keeps --grad-accum: $(grep batch out.txt)"
grep -q "linear to 1.00e-04" out.txt || fail "the resume keeps the schedule: $(grep lr out.txt)"
cmp -s resumed.bin straight.bin || fail "the resumed run differs from the unbroken one"
expect_ok "resumed with other knobs" "$FERRY" train --resume run_3.bin --sample 0 --threads 2 --grad-accum 2 \
	--lr-schedule cosine
grep -q "grad accum 2 (saved 3)" out.txt && grep -q "lr schedule cosine (saved linear)" out.txt ||
	fail "overrides named: $(grep resumed out.txt)"
finish
