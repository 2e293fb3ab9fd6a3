#!/usr/bin/env bash
# Each Llama-family model against Hugging Face transformers itself:
# tools/family_hf_check.py loads each checkpoint of lib.bash's
# family_checkpoints (ferry's) and of tools/family_hf_make.py
# (transformers', with what ferry's flags cannot make: head sizes other
# than C / heads, an untied Gemma 2, Gemma 3's rope_parameters per layer
# type, bf16 weights, config.json as
# transformers writes it)
# with transformers' own model class (eager attention, float64 but for
# what its code casts to float32).  Its mean loss over the first batches
# must equal `ferry eval`'s within 2e-6 relative (ferry computes in fp32:
# the difference is its rounding, about 1e-7 at these sizes, and the 6
# printed decimals).  Its gradient of the first batch's loss must equal,
# tensor by tensor, the gradient ferry's first training step on that batch
# took (--shuffle off; recovered from the AdamW step, the script says how),
# and its norm the grad_norm ferry reports, each as close as transformers'
# own float32 gradient is (times 4, plus 2e-6): Qwen 2's first layer in
# family_checkpoints is ill-conditioned enough that a correct fp32 gradient
# is 2e-5 off, where the others are 1e-6 off.  torch and transformers are
# looked for in $FERRY_TORCH_PYTHON (a venv's python, e.g.
# /work/venv-torch/bin/python), then python3; skipped (77) where none has
# them (pip install torch transformers safetensors).
TOOLS=$(cd "$(dirname "$0")/../.." && pwd)/tools
. "$(dirname "$0")/lib.bash"
PY=
for p in ${FERRY_TORCH_PYTHON:-} python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c "import numpy, torch, transformers" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || {
	echo "skipped: no python with torch and transformers (set FERRY_TORCH_PYTHON to a venv's python)"
	exit 77
}
make_corpus
family_checkpoints
# Gemma 3 from flags: seven layers, so that the sixth attends fully (not
# in FAMILIES: the numpy reference has no Gemma 3)
expect_ok "train gemma3" "$FERRY" train --model gemma3 --layers 7 --channels 32 --heads 4 --kv-heads 2 --max-seq 32 \
	--sliding-window 5 --batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin' --steps 30 --lr 3e-2 \
	--warmup 0 --save gemma3
"$PY" "$TOOLS/family_hf_make.py" . >made.txt 2>&1 || { fail "family_hf_make.py: $(cat made.txt)"; finish; exit; }
mapfile -t MADE < <(cut -d: -f1 made.txt)
ROWS=(--batch 2 --seq 16)
# one AdamW step whose move gives its gradient back (tools/family_hf_check.py)
LR=1e4 EPS=1
STEP=(--lr "$LR" --eps "$EPS" --warmup 0 --lr-schedule constant --weight-decay 0 --grad-clip 0)

# checkpoint $1: ferry's eval loss, first step's gradient and its norm
# against transformers'
same_as_transformers() {
	local d=$1 loss norm ref
	checks=$((checks + 2))
	"$FERRY" eval --checkpoint "$d" --data 'corpus_train_*.bin' "${ROWS[@]}" --batches 3 --threads 2 >out.txt \
		2>err.txt || { fail "$d: ferry eval: $(cat err.txt)"; return; }
	loss=$(tail -n 1 out.txt | awk '{print $2}')
	rm -rf "$d.json" "$d.step"
	"$FERRY" train --checkpoint "$d" --data 'corpus_train_*.bin' "${ROWS[@]}" --steps 1 --shuffle off "${STEP[@]}" \
		--save "$d.step" --save-dtype f32 --sample 0 --val-every 0 --threads 2 --json "$d.json" >out.txt 2>err.txt ||
		{ fail "$d: ferry train: $(cat err.txt)"; return; }
	norm=$(sed -n 's/.*"grad_norm": \([^,]*\),.*/\1/p' "$d.json")
	if "$PY" "$TOOLS/family_hf_check.py" "$d" corpus_train_000000.bin "${ROWS[@]}" --batches 3 --ferry-step "$d.step" --lr $LR --eps $EPS \
		--ferry-grad-norm "$norm" >hf.txt 2>&1; then
		echo "ok: $d: gradient: $(grep -c '|g| ' hf.txt) tensors and the norm as close as transformers' fp32"
	else
		fail "$d: $(cat hf.txt)"
	fi
	ref=$(grep ': loss ' hf.txt | awk '{print $NF}')
	if awk -v a="$loss" -v b="$ref" 'BEGIN { d = a - b; exit !(b > 0 && (d < 0 ? -d : d) / b < 2e-6) }'; then
		echo "ok: $d: loss: ferry $loss, $(grep ': loss ' hf.txt)"
	else
		fail "$d: loss: ferry $loss, transformers '$ref'"
	fi
}

# The families added since (Qwen 3, Gemma 3): from transformers' checkpoint $1 (fp32
# or bf16), every policy, offload mode and an NVMe tier save the bits of its
# plain run, and so does every ZeRO stage on 2 ranks (where MPI is) those
# of --zero 0; --mlp-tile and --loss-tile give its first step's loss and
# gradient norm within 1e-6 (a tile's weight gradients are summed tile by
# tile, so the bits differ, on Llama too, and AdamW's later steps drift
# further); the plain run's save (ferry's directory, after training) is run
# by transformers as $1 was.
PLACES=("${POLICIES[@]/#/--policy }" "${MODES[@]}"
	"--policy minimal_offloaded --offload-optimizer stream --host-tier activations=nvme --nvme-dir $WORK")
placements_from() {
	local d=$1 more z run=(train --checkpoint "$1" --data 'corpus_train_*.bin' "${ROWS[@]}" --sample 0 --lr 1e-2)
	run+=(--steps 3)
	expect_ok "$d: 3 steps" "$FERRY" "${run[@]}" --threads 2 --json "$d.plain.json" --save "$d.saved" || return
	for more in "${PLACES[@]}"; do
		rm -rf "$d.p"
		# shellcheck disable=SC2086
		expect_ok "$d: $more" "$FERRY" "${run[@]}" --threads 2 $more --save "$d.p" || continue
		checks=$((checks + 1))
		same_save "$d.saved" "$d.p" || fail "$d: $more: other bits than the plain run's saved"
	done
	head -n 1 "$d.plain.json" >"$d.first.json"
	if expect_ok "$d: tiles" "$FERRY" "${run[@]:0:${#run[@]}-2}" --steps 1 --threads 2 --mlp-tile 5 --loss-tile 7 \
		--json "$d.tiled.json"; then
		checks=$((checks + 1))
		losses_agree "$d.first.json" "$d.tiled.json" >/dev/null ||
			fail "$d: tiled: $(losses_agree "$d.first.json" "$d.tiled.json")"
	fi
	if command -v mpirun >/dev/null && "$FERRY" info 2>/dev/null | grep -q "MPI built in"; then
		for z in 0 1 2 3; do
			checks=$((checks + 1))
			rm -rf "$d.z$z"
			mpi_run 2 "$FERRY" "${run[@]}" --threads 1 --zero "$z" --save "$d.z$z" >z.out 2>&1 ||
				{ fail "$d: 2 ranks, --zero $z: $(tail -n 2 z.out)"; continue; }
			[ "$z" = 0 ] || { same_save "$d.z0" "$d.z$z" && echo "ok: $d: 2 ranks, --zero $z: the bits of --zero 0"; } ||
				fail "$d: 2 ranks, --zero $z: other bits than --zero 0's"
		done
	fi
	same_as_transformers "$d.saved"
}

for d in "${FAMILIES[@]}" gemma3 "${MADE[@]}"; do same_as_transformers "$d"; done
for d in tf_qwen3 tf_qwen3w tf_qwen3b tf_gemma3 tf_gemma3b; do placements_from "$d"; done
finish
