#!/usr/bin/env bash
# Tiles of tokens from the command line: --mlp-tile and --loss-tile train
# GPT-2 and Llama to the losses the untiled run prints (every digit, on the
# same batches), sample as before, and `ferry plan` says the tiles (text
# and JSON) and counts one tile of logits; no tile flag leaves the plan's
# text and JSON without a word of tiles; bad tiles are refused.
. "$(dirname "$0")/lib.bash"
make_corpus
GPT2=(--layers 2 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
LLAMA=(--model llama --layers 2 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --batch 2 --seq 16)
TRAIN=(--data 'corpus_train_*.bin' --val-data 'corpus_val_*.bin' --steps 4 --threads 2 --sample 24 --lr 1e-2)

losses() { grep -o '"loss": [^,]*' "$1"; }

for shape in GPT2 LLAMA; do
	declare -n S=$shape
	expect_ok "$shape untiled" "$FERRY" train "${S[@]}" "${TRAIN[@]}" --json plain.jsonl
	sed -n '/--- sample/,$p' out.txt >plain_sample.txt
	expect_ok "$shape tiled" "$FERRY" train "${S[@]}" "${TRAIN[@]}" --mlp-tile 5 --loss-tile 7 --json tiled.jsonl
	sed -n '/--- sample/,$p' out.txt >tiled_sample.txt
	checks=$((checks + 1))
	[ "$(losses plain.jsonl)" = "$(losses tiled.jsonl)" ] && [ -n "$(losses plain.jsonl)" ] ||
		fail "$shape: tiled losses differ: $(losses tiled.jsonl | tr '\n' ' ') vs $(losses plain.jsonl | tr '\n' ' ')"
	checks=$((checks + 1))
	[ -s plain_sample.txt ] && cmp -s plain_sample.txt tiled_sample.txt || fail "$shape: the tiled run samples otherwise"
	unset -n S
done

# the plan: tiles said, one tile of logits (7 rows x 320 values, the vocabulary
# of 257 padded to a multiple of 64, x 4 bytes, 256-byte aligned)
expect_ok "plan, tiled" "$FERRY" plan "${GPT2[@]}" --mlp-tile 5 --loss-tile 7 --json a.json
checks=$((checks + 1))
python3 - a.json <<'EOF' || fail "tiled plan JSON"
import json, sys
p = json.load(open(sys.argv[1]))
logits = [b["bytes"] for b in p["buffers"] if b["name"] == "logits"]
assert p["mlp_tile"] == 5 and p["loss_tile"] == 7, (p.get("mlp_tile"), p.get("loss_tile"))
assert logits == [(7 * 320 * 4 + 255) // 256 * 256], logits
assert "activations.mlp_tile=5" in p["place"] and "activations.loss_tile=7" in p["place"], p["place"]
tiled = [t["name"] for t in p["tensors"] if t["lives"].startswith("tile of 5 rows")]
assert tiled == ["mlpwi", "mlp_activation"], tiled
EOF
expect_ok "text plan, tiled" "$FERRY" plan "${LLAMA[@]}" --mlp-tile auto --loss-tile auto
grep -q "^MLP tiled: " out.txt && grep -q "^loss tiled: " out.txt || fail "the text plan says the tiles"
expect_ok "plan, untiled" "$FERRY" plan "${GPT2[@]}" --json b.json
checks=$((checks + 1))
! grep -q "tile" b.json || fail "an untiled plan's JSON speaks of tiles"
"$FERRY" plan "${GPT2[@]}" >b.txt
checks=$((checks + 1))
! grep -qi "tile" b.txt || fail "an untiled plan's text speaks of tiles"

expect_error "zero tile" "--mlp-tile 0" "$FERRY" plan "${GPT2[@]}" --mlp-tile 0
expect_error "not a count" "--loss-tile" "$FERRY" plan "${GPT2[@]}" --loss-tile many
expect_error "bad --place tile" "activations.mlp_tile=-3" "$FERRY" plan "${GPT2[@]}" --place activations.mlp_tile=-3

# a plan that does not fit names the tiles that would make it fit, each
# planned: the loss's alone, else both; the flags advised fit, at the
# peak advised
LONG=(--model llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --ffn 512 --vocab 32000 --max-seq 4096
	--batch 1 --seq 4096 --policy custom:decoder_layer_input=offload)
peak_of() { grep -o '"peak_bytes": [0-9]*' "$1" | head -1 | grep -o '[0-9]*$'; }
"$FERRY" plan "${LONG[@]}" --loss-tile auto --json loss.json >/dev/null
"$FERRY" plan "${LONG[@]}" --loss-tile auto --mlp-tile auto --json both.json >/dev/null
loss=$(peak_of loss.json) both=$(peak_of both.json)
"$FERRY" plan "${LONG[@]}" --device-mem $((loss / 1024 + 1))K >out.txt && fail "the untiled plan fits?"
grep -q "^tiles of tokens that fit: --loss-tile auto (" out.txt || fail "the loss's tiles fit: $(tail -2 out.txt)"
"$FERRY" plan "${LONG[@]}" --device-mem $((loss / 1024 - 1))K >out.txt
grep -q "^tiles of tokens that fit: --mlp-tile auto --loss-tile auto (" out.txt ||
	fail "below the loss's tiles, both: $(tail -2 out.txt)"
expect_ok "the advice fits" "$FERRY" plan "${LONG[@]}" --device-mem $((loss / 1024 - 1))K --mlp-tile auto --loss-tile auto
grep -q "^fits: needs .* ($both of" out.txt || fail "the advised flags fit at $both bytes: $(tail -1 out.txt)"
# (after the best placement that moves state, which may tile too)
expect_error "train's refusal names the tiles" "; tiles of tokens that fit: --loss-tile auto (" \
	"$FERRY" train "${LONG[@]}" --device-mem $((loss / 1024 + 1))K --data 'corpus_train_*.bin'
grep -q "presets that fit: none; moving state, the largest plan that fits" err.txt ||
	fail "train's refusal names a placement too: $(cat err.txt)"
"$FERRY" plan "${LONG[@]}" --device-mem $((both / 1024 - 64))K >out.txt
grep -q "tiles of tokens" out.txt && fail "below both tiles' peak, no tiles advised: $(tail -2 out.txt)"
finish
