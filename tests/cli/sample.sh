#!/usr/bin/env bash
# ferry sample: text from a checkpoint after a prompt, without `train --steps
# 0`; the same seed gives the same text, temperature 0 the most probable
# tokens whatever the seed; prompts as text (byte-level models) or token ids
# (any model, printed through an llm.c tokenizer file); clear refusals of
# what cannot work.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 2 --channels 32 --heads 2 --max-seq 64 --batch 4 --seq 32 --threads 2)
expect_ok "a model to sample from" "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 300 --lr 3e-3 \
	--sample 0 --save model.bin
S=(--checkpoint model.bin --threads 2)

expect_ok "sample after a prompt" "$FERRY" sample "${S[@]}" --prompt "doc 3 line" --tokens 40 --seed 5
cp out.txt a.txt
head -c 10 a.txt | grep -qx "doc 3 line" || fail "the text starts with the prompt: $(head -c 40 a.txt)"
[ "$(wc -c <a.txt)" -ge 51 ] || fail "40 tokens (bytes) after the prompt: $(wc -c <a.txt) bytes"
grep -q "ferry sample: model.bin: gpt2, 2 layers, 32 channels, vocab 257; 40 tokens after a prompt of 11, temperature 1.00, top-k all, seed 5, context 32 (the sequence length it was trained at)" err.txt ||
	fail "says what it samples on stderr: $(cat err.txt)"
# the model saw 32 positions of its 64 in training: beyond them it has only
# its random initialisation, so the window is the training's (or --context)
expect_ok "--context" "$FERRY" sample "${S[@]}" --prompt "doc 3 line" --tokens 40 --seed 5 --context 16
grep -q ", context 16 (--context)" err.txt || fail "--context 16: $(cat err.txt)"
expect_ok "--context above the maximum" "$FERRY" sample "${S[@]}" --tokens 4 --context 1000
grep -q ", context 5 (what the prompt and tokens need; at most 64: --context)" err.txt ||
	fail "the window never exceeds what is needed: $(cat err.txt)"
# a short sample of a model trained at 32: the window it needs, and the limit
expect_ok "a short sample" "$FERRY" sample "${S[@]}" --prompt "doc" --tokens 5
grep -q ", context 9 (what the prompt and tokens need; at most 32: the sequence length it was trained at)" err.txt ||
	fail "the window and the training's length apart: $(cat err.txt)"
cp model.bin nostate.bin
expect_ok "no training state" "$FERRY" sample --checkpoint nostate.bin --threads 2 --tokens 80
grep -q ", context 64 (the model's maximum)" err.txt || fail "without a state, the maximum: $(cat err.txt)"
expect_ok "the same seed" "$FERRY" sample "${S[@]}" --prompt "doc 3 line" --tokens 40 --seed 5
cmp -s out.txt a.txt || fail "the same seed gave other text"
diff_seeds=0
for seed in 6 7 8; do
	"$FERRY" sample "${S[@]}" --prompt "doc 3 line" --tokens 40 --seed $seed >b.txt 2>/dev/null
	cmp -s a.txt b.txt || diff_seeds=1
done
[ $diff_seeds -eq 1 ] || fail "other seeds gave the same text"

expect_ok "temperature 0" "$FERRY" sample "${S[@]}" --prompt "doc 3 line 1" --tokens 30 --temperature 0 --seed 1
cp out.txt greedy.txt
expect_ok "temperature 0, another seed" "$FERRY" sample "${S[@]}" --prompt "doc 3 line 1" --tokens 30 --temperature=0 --seed 99
cmp -s out.txt greedy.txt || fail "temperature 0 depends on the seed"
expect_ok "top-k 1 is greedy too" "$FERRY" sample "${S[@]}" --prompt "doc 3 line 1" --tokens 30 --top-k 1 --seed 3
cmp -s out.txt greedy.txt || fail "top-k 1 differs from temperature 0"
grep -q "quick brown" greedy.txt ||
	fail "300 steps on 'doc N line M: the quick brown fox ...', and the most probable text is: $(cat greedy.txt)"
expect_ok "top-k and temperature" "$FERRY" sample "${S[@]}" --tokens 20 --top-k 5 --temperature 0.7
expect_ok "token ids as the prompt" "$FERRY" sample "${S[@]}" --prompt-tokens 256,100,111,99 --tokens 5
grep -q "<|endoftext|>" out.txt && grep -q "^doc" out.txt || fail "prints the ids' text: $(cat out.txt)"
expect_ok "a prompt that looks like a flag" "$FERRY" sample "${S[@]}" --prompt "--tokens=1" --tokens 3
head -c 10 out.txt | grep -qx -- "--tokens=1" || fail "the prompt is text, not a flag: $(cat out.txt)"
expect_ok "no prompt" "$FERRY" sample "${S[@]}" --tokens 10

expect_error "no checkpoint" "--checkpoint is required" "$FERRY" sample --prompt hi
expect_error "missing checkpoint" "nothing.bin" "$FERRY" sample --checkpoint nothing.bin
expect_error "both prompts" "exclusive" "$FERRY" sample "${S[@]}" --prompt a --prompt-tokens 1
expect_error "an id outside the vocabulary" "token 2 ('300') is not an id below the model's vocabulary of 257" \
	"$FERRY" sample "${S[@]}" --prompt-tokens 1,300
expect_error "a bad id list" "token 2 ('x')" "$FERRY" sample "${S[@]}" --prompt-tokens 1,x,3
expect_error "negative temperature" "--temperature must not be negative" "$FERRY" sample "${S[@]}" --temperature -1
expect_error "negative top-k" "--top-k must not be negative" "$FERRY" sample "${S[@]}" --top-k -1

# A BPE-like model (vocabulary 300) and an llm.c tokenizer file for it:
# tokens 0..255 are bytes, 256 the end of text, 257.. two-byte pieces.
expect_ok "a model of 300 tokens" "$FERRY" train "${SHAPE[@]}" --vocab 300 --data 'corpus_train_*.bin' --steps 2 \
	--sample 0 --save bpe.bin
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 24 & 255)))"; }
{
	le32 20240328; le32 2; le32 300; le32 256
	head -c $((252 * 4)) /dev/zero
	for i in $(seq 0 255); do printf "\\x01\\x$(printf %02x $i)"; done
	printf '\x0d<|endoftext|>'
	for i in $(seq 257 299); do printf '\x02z%c' "$(printf "\\x$(printf %02x $((65 + i % 26)))")"; done
} >tok.bin
expect_ok "ids through a tokenizer file" "$FERRY" sample --checkpoint bpe.bin --tokenizer tok.bin --prompt-tokens 257,258 \
	--tokens 5 --threads 2
head -c 4 out.txt | grep -qx "zXzY" || fail "prints tokens 257, 258 as zX zY: $(cat out.txt)"
expect_error "text with a BPE tokenizer" "--prompt needs a byte-level model: tok.bin (llm.c's tokenizer file) holds each token's bytes but not the merge rules" \
	"$FERRY" sample --checkpoint bpe.bin --tokenizer tok.bin --prompt "hello"
expect_error "a BPE model without a tokenizer" "the model's vocabulary has 300 tokens, not bytes (257): give --tokenizer PATH" \
	"$FERRY" sample --checkpoint bpe.bin --prompt-tokens 1,2

# Llama checkpoints too
expect_ok "a llama" "$FERRY" train --model llama "${SHAPE[@]}" --kv-heads 1 --data 'corpus_train_*.bin' --steps 2 --sample 0 \
	--save llama_dir
expect_ok "sample a llama directory" "$FERRY" sample --checkpoint llama_dir --prompt "doc" --tokens 8 --threads 2
grep -q "llama_dir: llama, 2 layers" err.txt || fail "names the llama: $(cat err.txt)"
finish
