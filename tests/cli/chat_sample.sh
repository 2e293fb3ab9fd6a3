#!/usr/bin/env bash
# Conversations end to end without Python (issue 38 items 3, 5 and 6):
# `ferry data --chat` writes version-3 shards of 40 conversations ("hi" ->
# "fine thanks"), `ferry train` trains a tiny Llama on them packed (two
# conversations a row, the loss over the assistant's tokens alone, counted
# each step), `ferry eval` reads each conversation once and reports the
# counted targets, and `ferry sample --chat` answers a --prompt rendered by
# the tokenizer directory's template with its generation prompt, printing
# the reply alone and stopping at the end-of-turn token
# (tokenizer_config.json's eos_token; generation_config.json's eos_token_id
# list goes first).  --system and --messages FILE render too; refusals are
# clear.
. "$(dirname "$0")/lib.bash"

mkdir tok
turn() { printf '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nfine thanks<|im_end|>\n'; }
for i in $(seq 1 40); do turn >"doc$i.txt"; done
expect_ok "a tokenizer" "$FERRY" tokenizer train --vocab 280 --special '<|endoftext|>' --special '<|im_start|>' \
	--special '<|im_end|>' --out tok/tokenizer.json doc*.txt
cat >tok/tokenizer_config.json <<'JSON'
{"eos_token": "<|im_end|>", "chat_template": "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"}
JSON
for i in $(seq 1 40); do echo '{"prompt": "hi", "completion": "fine thanks"}'; done >conv.jsonl
expect_ok "shards of conversations" "$FERRY" data --chat --tokenizer tok --val-fraction 0 --out c conv.jsonl
# each conversation 13 tokens, its targets the 4 of "fine thanks<|im_end|>\n"
# ("fine", " thanks", "<|im_end|>", "\n" with this tokenizer): rows of 32
# hold two, a batch of 4 rows 8 conversations and 32 targets
grep -q "train: 520 tokens in 1 shard" out.txt || fail "40 conversations of 13 tokens: $(cat out.txt)"
expect_ok "a tiny Llama that answers hi" "$FERRY" train --model llama --layers 1 --channels 32 --heads 2 --vocab 280 \
	--max-seq 32 --batch 4 --seq 32 --threads 2 --sample 0 --data 'c_train_*.bin' --steps 150 --lr 1e-2 --save model
checks=$((checks + 1))
[ "$(grep -c '| 32 targets |' out.txt)" = 150 ] && grep -q "over 32.0 counted targets a step" out.txt &&
	echo "ok: train counts 32 targets a step (the assistant's tokens of 8 conversations)" ||
	fail "train's counted targets: $(tail -3 out.txt)"
expect_ok "eval on the conversations" "$FERRY" eval --checkpoint model --data 'c_train_*.bin' --seq 32 --threads 2
checks=$((checks + 1))
loss=$(sed -n 's/^loss //p' out.txt)
grep -qx "targets 160" out.txt && awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 0.05) }' &&
	echo "ok: eval reads each conversation once: 160 targets, loss $loss" ||
	fail "eval: 40 conversations x 4 targets, a low loss: $(cat out.txt)"
S=(--checkpoint model --tokenizer tok --threads 2 --temperature 0 --tokens 20)

expect_ok "sample --chat" "$FERRY" sample "${S[@]}" --chat --prompt hi
[ "$(cat out.txt)" = "fine thanks" ] || fail "the reply alone, up to the end of the turn: [$(cat out.txt)]"
grep -q "the reply ended at token 2 after [0-9]* tokens (the end of the turn: tokenizer_config.json's eos_token)" err.txt ||
	fail "says where it stopped: $(cat err.txt)"
printf '[{"role": "user", "content": "hi"}]' >m.json
expect_ok "--messages" "$FERRY" sample "${S[@]}" --chat --messages m.json
[ "$(cat out.txt)" = "fine thanks" ] || fail "--messages: [$(cat out.txt)]"
expect_ok "--system" "$FERRY" sample "${S[@]}" --chat --system "be kind" --prompt hi
grep -q "the reply ended" err.txt || fail "--system: $(cat err.txt)"
# generation_config.json's list goes first: <|endoftext|> (0) alone does not stop at <|im_end|>
echo '{"eos_token_id": [0]}' >tok/generation_config.json
expect_ok "generation_config.json" "$FERRY" sample "${S[@]}" --chat --prompt hi
[ "$(head -c 11 out.txt)" = "fine thanks" ] && [ "$(wc -c <out.txt)" -gt 12 ] ||
	fail "past <|im_end|> when generation_config.json names another: [$(cat out.txt)]"
rm tok/generation_config.json

expect_error "--system without --chat" "--system and --messages go with --chat" "$FERRY" sample "${S[@]}" --system x
expect_error "--chat with --prompt-tokens" "not --prompt-tokens" "$FERRY" sample "${S[@]}" --chat --prompt-tokens 1,2
mkdir bare && cp tok/tokenizer.json bare/
expect_error "no template" "no chat template" "$FERRY" sample --checkpoint model --tokenizer bare --chat --prompt hi
printf '[{"role": "user"' >bad.json
expect_error "bad --messages" "messages are not JSON" "$FERRY" sample "${S[@]}" --chat --messages bad.json
finish
