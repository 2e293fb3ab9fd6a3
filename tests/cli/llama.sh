#!/usr/bin/env bash
# Llama from the command line, with Hugging Face checkpoint directories:
# train from flags and save, eval, resume equal to an unbroken run bit for
# bit, start from a directory, plan from it, and the errors of bad ones.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32)
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin')
EVAL=(--data 'corpus_val_*.bin' --batch 2 --seq 16 --batches 3 --threads 2)

expect_ok "train a llama from flags" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 6 --save straight
grep -q "^model: llama, 2 layers, 16 channels, 2 heads (1 key/value)" out.txt || fail "a llama: $(grep model: out.txt)"
grep -q "saved straight/ (config.json, model.safetensors, ferry_state.bin)" out.txt || fail "says what it saved"
for f in config.json model.safetensors ferry_state.bin; do [ -f straight/$f ] || fail "straight/$f written"; done
[ "$(ls straight | wc -l)" -eq 3 ] || fail "nothing else in the directory: $(ls straight)"
grep -q '"model_type": "llama"' straight/config.json || fail "config.json says llama"
grep -q '"num_key_value_heads": 1' straight/config.json || fail "config.json has the kv heads"
grep -q '"tie_word_embeddings": false' straight/config.json || fail "untied by default"

expect_ok "eval the directory" "$FERRY" eval --checkpoint straight "${EVAL[@]}"
tail -n 1 out.txt | grep -Eq '^loss [0-9]+\.[0-9]+$' || fail "eval ends with 'loss <value>': $(tail -n 1 out.txt)"
grep -q "checkpoint straight: llama, 2 layers" out.txt || fail "eval names the model"
cp out.txt eval_dir.txt
expect_ok "eval by config.json" "$FERRY" eval --checkpoint straight/config.json "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" = "$(tail -n 1 eval_dir.txt)" ] || fail "config.json path gives another loss"
expect_ok "eval by model.safetensors" "$FERRY" eval --checkpoint straight/model.safetensors "${EVAL[@]}"
[ "$(tail -n 1 out.txt)" = "$(tail -n 1 eval_dir.txt)" ] || fail "model.safetensors path gives another loss"

# Resume from the step-3 save of a 6-step run == the unbroken run, bit for bit.
expect_ok "periodic saves" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 6 --save-every 3 --save 'run_{step}'
for f in run_3/model.safetensors run_3/ferry_state.bin run_6/model.safetensors run_6/ferry_state.bin; do
	[ -f $f ] || fail "$f written"
done
cmp -s run_6/model.safetensors straight/model.safetensors || fail "periodic saves changed the training result"
expect_ok "resume" "$FERRY" train --resume run_3 "${RUN[@]}" --steps 6 --save resumed
grep -q "resumed at step 3" out.txt || fail "says where it resumed"
grep -q "^model: llama" out.txt || fail "the model kind comes from the checkpoint"
cmp -s run_6/model.safetensors resumed/model.safetensors || fail "resumed weights differ from the unbroken run's"
cmp -s run_6/ferry_state.bin resumed/ferry_state.bin || fail "resumed optimizer state differs"
cmp -s run_6/config.json resumed/config.json || fail "resumed config.json differs"
expect_ok "resume with a matching --model" "$FERRY" train --model llama --resume run_3 "${RUN[@]}" --steps 4
grep -q "note: the model shape" err.txt && fail "--model alone is no shape flag: $(cat err.txt)"

# Starting from a directory keeps its shape; plan takes the shape from it.
expect_ok "from a checkpoint directory" "$FERRY" train --checkpoint straight "${RUN[@]}" --steps 1 --sample 8
grep -q "^model: llama, 2 layers, 16 channels" out.txt || fail "shape from the checkpoint"
grep -q -- "--- sample" out.txt || fail "prints a sample"
expect_ok "shape flags with a checkpoint" "$FERRY" train --checkpoint straight --layers 9 "${RUN[@]}" --steps 1
grep -q "note: the model shape comes from the checkpoint" err.txt || fail "notes the ignored shape flags"
expect_ok "plan from a checkpoint directory" "$FERRY" plan --checkpoint straight --batch 2 --seq 16
grep -q "^plan: llama, 2 layers" out.txt || fail "plan's shape from the checkpoint: $(head -1 out.txt)"
expect_ok "plan --json from a checkpoint directory" "$FERRY" plan --checkpoint straight --batch 2 --seq 16 --json plan.json
grep -q '"llama"' plan.json || fail "the JSON plan names the model"

# The model kind comes from the checkpoint; --model must agree.
expect_ok "a gpt2 checkpoint" "$FERRY" train --layers 1 --channels 16 --heads 2 --max-seq 32 "${RUN[@]}" --steps 1 --save gpt2.bin
expect_error "--model gpt2 with a llama directory" "--model gpt2, but straight is a Llama checkpoint (Hugging Face config.json)" \
	"$FERRY" train --model gpt2 --checkpoint straight "${RUN[@]}"
expect_error "--model llama with an llm.c file" "--model llama, but gpt2.bin is a GPT-2 checkpoint (llm.c format)" \
	"$FERRY" train --model llama --resume gpt2.bin "${RUN[@]}"
expect_error "plan: --model llama with an llm.c file" "is a GPT-2 checkpoint" "$FERRY" plan --model llama --checkpoint gpt2.bin
cp gpt2.bin gpt2_keep.bin
expect_error "a llama saved over a file" "gpt2.bin exists and is not a directory" \
	"$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 1 --save gpt2.bin
cmp -s gpt2.bin gpt2_keep.bin || fail "the file was damaged"
expect_error "a gpt2 saved over a directory" "straight is a directory" \
	"$FERRY" train --layers 1 --channels 16 --heads 2 --max-seq 32 "${RUN[@]}" --steps 1 --save straight

# Bad directories: one line naming the file (and tensor) and the problem.
mkdir -p other && cp straight/model.safetensors other/
printf '{"model_type": "gpt2", "n_layer": 2}\n' >other/config.json
expect_error "config.json of a gpt2" "other/config.json: model_type 'gpt2' is not a Llama" \
	"$FERRY" eval --checkpoint other "${EVAL[@]}"
mkdir -p noweights && cp straight/config.json noweights/
expect_error "no weights" "holds neither model.safetensors" "$FERRY" train --checkpoint noweights "${RUN[@]}"
mkdir -p trunc && cp straight/config.json trunc/
head -c 20000 straight/model.safetensors >trunc/model.safetensors
expect_error "truncated weights" "trunc/model.safetensors" "$FERRY" eval --checkpoint trunc "${EVAL[@]}"
cp -r straight nan
hl=$(od -An -tu8 -N8 nan/model.safetensors | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of=nan/model.safetensors bs=1 seek=$((8 + hl + 4 * 17)) conv=notrunc status=none
expect_error "a NaN weight" "model.embed_tokens.weight holds a non-finite value (nan) at [1, 1]" \
	"$FERRY" eval --checkpoint nan "${EVAL[@]}"
cp -r straight mixed && cp run_3/ferry_state.bin mixed/
expect_error "weights and state of different saves" "different saves" "$FERRY" train --resume mixed "${RUN[@]}" --steps 6
cp -r straight nostate && rm nostate/ferry_state.bin
expect_error "no state to resume" "nostate/ferry_state.bin: cannot open" "$FERRY" train --resume nostate "${RUN[@]}"

ls -a straight run_3 run_6 resumed | grep -q tmp && fail "a temporary file was left behind"
finish
