#!/usr/bin/env bash
# Each Llama-family model against a reference written independently:
# tools/family_numpy_check.py computes the family's forward pass from
# config.json and model.safetensors in numpy float64, as transformers'
# modeling files do, and its loss must equal `ferry eval`'s on the same
# batches (within 2e-6, fp32 against float64).  The checkpoints are ferry's
# own, trained some steps at a high rate so that every parameter has moved
# and the loss is far from log V; then config.json is edited for what a
# fresh model from flags does not have (Qwen 2's window from a later layer,
# Gemma 2's caps small enough to bend every score).  Where transformers is
# installed (it needs no torch for its configurations), it reads each
# config.json as the script does and its own rewrite of the file gives
# ferry the same loss.  Skipped (77) without numpy.
TOOL=$(cd "$(dirname "$0")/../.." && pwd)/tools/family_numpy_check.py
. "$(dirname "$0")/lib.bash"
PY=
for p in python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c "import numpy" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "skipped: no python3 with numpy (apt-get install python3-numpy)"; exit 77; }
TF=
"$PY" -c "import transformers" 2>/dev/null && TF=1
[ -n "$TF" ] || echo "transformers is not installed: its reading of config.json is not checked"
make_corpus
RUN=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin' --steps 30 --lr 3e-2 --warmup 0)
EVAL=(--batch 2 --seq 16 --batches 3)

# ferry's loss and the script's on checkpoint $1 agree (and transformers'
# config.json, where it is installed, gives ferry the same loss)
same_loss() {
	local d=$1 ours ref
	checks=$((checks + 1))
	"$FERRY" eval --checkpoint "$d" --data 'corpus_val_*.bin' "${EVAL[@]}" --threads 2 >out.txt 2>err.txt ||
		{ fail "$d: ferry eval: $(cat err.txt)"; return; }
	ours=$(tail -n 1 out.txt | awk '{print $2}')
	ref=$("$PY" "$TOOL" "$d" corpus_val_000000.bin "${EVAL[@]}" 2>&1 | tail -n 1 | awk '{print $NF}')
	if awk -v a="$ours" -v b="$ref" 'BEGIN { d = a - b; exit !(b > 0 && (d < 0 ? -d : d) / b < 2e-6) }'; then
		echo "ok: $d: ferry $ours, numpy float64 $ref"
	else
		fail "$d: ferry $ours, numpy float64 '$ref'"
	fi
	[ -n "$TF" ] || return
	checks=$((checks + 1))
	rm -rf "$d.tf" && mkdir "$d.tf" && cp "$d/model.safetensors" "$d.tf/"
	"$PY" "$TOOL" "$d" --transformers-config "$d.tf" >tf.txt 2>&1 || { fail "$d: $(cat tf.txt)"; return; }
	"$FERRY" eval --checkpoint "$d.tf" --data 'corpus_val_*.bin' "${EVAL[@]}" --threads 2 >out.txt 2>err.txt
	[ "$(tail -n 1 out.txt | awk '{print $2}')" = "$ours" ] &&
		echo "ok: $d: transformers reads its config.json alike, and its rewrite gives ferry $ours" ||
		fail "$d: transformers' config.json: $(cat err.txt) $(tail -n 1 out.txt), not $ours"
}

train() { # name flags...
	local d=$1; shift
	expect_ok "train $d" "$FERRY" train "$@" "${RUN[@]}" --save "$d"
}

train llama --model llama --layers 2 --channels 32 --heads 4 --kv-heads 2 --max-seq 32
train qwen2 --model qwen2 --layers 3 --channels 32 --heads 4 --kv-heads 2 --max-seq 32 --tied-head
train mistral --model mistral --layers 2 --channels 32 --heads 4 --kv-heads 1 --max-seq 32 --sliding-window 5
train gemma2 --model gemma2 --layers 3 --channels 32 --heads 4 --kv-heads 2 --max-seq 32 --sliding-window 5
for d in llama qwen2 mistral gemma2; do same_loss $d; done

# Llama 3.1's rope scaling, Qwen 2's window from its second layer on, Gemma
# 2's caps bending the scores and the logits, and no window at all
cp -r llama llama3 && sed -i 's/"rope_theta": 10000.0,/"rope_theta": 500000.0,\n  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},/' llama3/config.json
cp -r qwen2 qwen2w && sed -i 's/"use_sliding_window": false/"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 1/' qwen2w/config.json
cp -r gemma2 gemma2c && sed -i 's/"attn_logit_softcapping": 50.0/"attn_logit_softcapping": 0.7/; s/"final_logit_softcapping": 30.0/"final_logit_softcapping": 3.0/' gemma2c/config.json
cp -r gemma2 gemma2n && sed -i 's/"sliding_window": 5/"sliding_window": null/; s/"attn_logit_softcapping": 50.0/"attn_logit_softcapping": null/' gemma2n/config.json
for d in llama3 qwen2w gemma2c gemma2n; do same_loss $d; done
finish
