#!/usr/bin/env bash
# Each Llama-family model against a reference written independently:
# tools/family_numpy_check.py computes the family's forward pass from
# config.json and model.safetensors in numpy float64, as transformers'
# modeling files do, and its loss must equal `ferry eval`'s on the same
# batches (within 2e-6, fp32 against float64), on each checkpoint of
# lib.bash's family_checkpoints.  Where transformers is
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

family_checkpoints
for d in "${FAMILIES[@]}"; do same_loss "$d"; done
finish
