# Helpers for the CLI tests: sourced, not run.  $FERRY is the binary, $WORK a
# fresh directory.
set -u
FERRY=$1
WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
# a calibration cache of the test's own: the user's (taken under another
# load, or by another build) must not change what a test sees
export XDG_CACHE_HOME=$WORK/cache
failures=0
checks=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# stderr_lines FILE: its non-empty lines but the note that a loaded
# machine adds to a run that trains: the sgemm measured at start-up (the
# MFU peak) reads slow, and the steps then pass it.
stderr_lines() {
	grep -v -e '^ferry train: warning: MFU above 100% against an sgemm measured now ' \
		-e '^ferry train: note: step [0-9]* ran at .* above the peak MFU was against ' "$1" | grep .
}

# expect_error "what" "needle" cmd...: non-zero exit below 128 (no crash),
# exactly one line on stderr (stderr_lines), containing needle.
expect_error() {
	local what=$1 needle=$2; shift 2
	checks=$((checks + 1))
	"$@" >out.txt 2>err.txt
	local rc=$?
	if [ $rc -eq 0 ]; then fail "$what: exit 0"; return; fi
	if [ $rc -ge 128 ]; then fail "$what: crashed (exit $rc)"; cat err.txt >&2; return; fi
	local lines
	lines=$(stderr_lines err.txt | grep -c .)
	if [ "$lines" -ne 1 ]; then fail "$what: $lines lines on stderr:"; cat err.txt >&2; return; fi
	grep -qF -- "$needle" err.txt || { fail "$what: stderr lacks '$needle':"; cat err.txt >&2; return; }
	echo "ok: $what -> $(cat err.txt)"
}

expect_ok() {
	local what=$1; shift
	checks=$((checks + 1))
	"$@" >out.txt 2>err.txt || { fail "$what: exit $?"; cat err.txt >&2; return 1; }
	echo "ok: $what"
}

# finish: the count; 1 when a check failed, else 77 (skipped) when a
# reference check could not run (ref_python), else 0.
finish() {
	echo "$checks checks, $failures failed"
	[ $failures -eq 0 ] || return 1
	# a passing test's files go (a failing one's stay, to look at): a CI
	# machine's disk may have only a few hundred MB free
	# (a process a test left running may still write there: not a failure)
	[ -n "${FERRY_KEEP_WORK:-}" ] || { cd / && rm -rf "$WORK" 2>/dev/null; }
	if [ -n "$ref_missing" ]; then
		echo "skipped: $ref_missing (bash scripts/torch_deps.sh makes .venv-torch; or set FERRY_TORCH_PYTHON)"
		return 77
	fi
	return 0
}

# ref_python MODULE...: the python of the reference checks into $REF_PY:
# $FERRY_TORCH_PYTHON, the repository's .venv-torch (scripts/torch_deps.sh
# makes it), then python3, the first that imports every MODULE.  None:
# returns 1 and finish ends the test skipped (77), never passed, once the
# checks without it have run.
ref_missing=
ref_python() {
	local root p mods
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	mods=$(IFS=,; echo "$*")
	REF_PY=
	for p in ${FERRY_TORCH_PYTHON:-} "$root/.venv-torch/bin/python" python3; do
		if command -v "$p" >/dev/null 2>&1 && "$p" -c "import $mods" 2>/dev/null; then
			REF_PY=$p
			return 0
		fi
	done
	ref_missing="${ref_missing:+$ref_missing; }no python with $mods"
	return 1
}

# A small byte-level corpus in shards: corpus_{train,val}_000000.bin
make_corpus() {
	for d in 0 1 2 3 4 5 6 7 8 9; do
		for i in $(seq 1 30); do echo "doc $d line $i: the quick brown fox jumps over the lazy dog"; done >"text$d.txt"
	done
	"$FERRY" data --out corpus --val-fraction 0.5 text?.txt >/dev/null 2>&1 ||
		{ echo "cannot make corpus" >&2; exit 1; }
}

# need_mpi: skips the test (exit 77) without mpirun or a ferry built with MPI.
need_mpi() {
	command -v mpirun >/dev/null || { echo "skip: no mpirun (apt-get install openmpi-bin)"; exit 77; }
	"$FERRY" info 2>/dev/null | grep -q "MPI built in" ||
		{ echo "skip: ferry built without MPI (apt-get install libopenmpi-dev, rebuild)"; exit 77; }
}

# mpi_run N cmd...: N ranks on this machine, more ranks than cores allowed,
# as root too, each rank's BLAS and OpenMP on one thread (the ranks share
# the cores).  "${MPIRUN[@]}" -np N cmd... & starts mpirun itself ($!).
# Under the address sanitizer, Open MPI's own allocations kept until exit
# are not reported as leaks (tests/lsan_mpi.supp).  A rank waiting for
# another yields its core (mpi_yield_when_idle): ranks that spin while
# waiting starve the others when there are more of them than cores (3 ranks
# of one test and 2 of another on 2 cores: 2 to 3 times slower spinning).
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
	OMPI_MCA_mca_base_component_disable_dlclose=1 OMPI_MCA_mpi_yield_when_idle=1
	LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lsan_mpi.supp:fast_unwind_on_malloc=0"
	mpirun --oversubscribe --bind-to none)
mpi_run() {
	local n=$1; shift
	"${MPIRUN[@]}" -np "$n" "$@"
}

# trains NAME N FLAGS...: N ranks train with the script's common flags
# (its array `common`) and FLAGS, and save NAME (afresh).
trains() {
	local name=$1 n=$2; shift 2
	rm -rf "$name" "$name.state"
	mpi_run "$n" "$FERRY" train "${common[@]}" "$@" --save "$name" >"$name.out" 2>&1 ||
		{ fail "$name on $n ranks: $(tail -n 2 "$name.out")"; return 1; }
}

json_field() { # json_field FILE KEY: the first number after "KEY":
	grep -o "\"$2\": [0-9]*" "$1" | head -1 | grep -o '[0-9]*$'
}

# zero_setup LAYERS: the ZeRO tests' data (make_corpus) and flags: the
# runs' `common`, and the GPT-2 and Llama shapes `gpt` and `llama` of
# LAYERS layers; skips without MPI (need_mpi).
zero_setup() {
	need_mpi
	make_corpus
	common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --steps 6 --lr 1e-3 --sample 0 --threads 1)
	gpt=(--layers "$1" --channels 32 --heads 4)
	llama=(--model llama --layers "$1" --channels 32 --heads 4 --kv-heads 2)
}

# resume N SAVE FLAGS...: N ranks resume the save `half` to step 6 and
# save SAVE (and SAVE.json), with the script's common flags' shape.
resume() {
	local n=$1 name=$2; shift 2
	rm -rf "$name" "$name.state" "$name.json" # (a resumed run's --json appends)
	mpi_run "$n" "$FERRY" train --resume half --steps 6 --sample 0 --threads 1 "$@" --save "$name" \
		--json "$name.json" >"$name.out" 2>&1 || fail "resumed on $n ranks $*: $(tail -n 2 "$name.out")"
}

# json_plan FILE EXPR: EXPR of a plan's JSON as d (a plan --ranks N's:
# the rank's plan, under "plan"); its host total and placement.
json_plan() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d.get("plan", d); print(eval(sys.argv[2]))' "$@"; }
json_host_total() { json_plan "$1" 'd["host"]["total_bytes"]'; }
json_place() { json_plan "$1" 'd["place"]'; }

# state_sans_place FILE: a training state's bytes but the placement it
# records (version 6: [44] its length, the padded text after the globs) and
# the checksum ([34..35]) over it: runs placed apart that train the same
# bits save the same state but for that.
state_sans_place() {
	local v glen plen at
	v=$(od -An -td4 -j4 -N4 "$1" | tr -d ' ')
	glen=$(od -An -td4 -j108 -N4 "$1" | tr -d ' ')
	plen=$(od -An -td4 -j176 -N4 "$1" | tr -d ' ')
	[ "$v" -ge 2 ] || glen=0
	[ "$v" -ge 6 ] || plen=0
	at=$((1024 + (glen + 3) / 4 * 4))
	head -c 136 "$1"
	head -c 176 "$1" | tail -c 32
	head -c "$at" "$1" | tail -c $((at - 180))
	tail -c +$((at + (plen + 3) / 4 * 4 + 1)) "$1"
}

# same_state A B: two training states alike but for their placements.
same_state() { cmp -s <(state_sans_place "$1") <(state_sans_place "$2"); }

# same_save A B: the same files (an llm.c file and its state, or a
# directory), the states but for their placements.
same_save() {
	if [ -d "$1" ]; then
		diff -r -x ferry_state.bin "$1" "$2" >/dev/null && same_state "$1/ferry_state.bin" "$2/ferry_state.bin"
	else
		cmp -s "$1" "$2" && same_state "$1.state" "$2.state"
	fi
}

# losses_agree A.json B.json [FIRST_STEP]: loss, grad_norm and val_loss of
# every step (from FIRST_STEP) within 1e-6 relative (--json writes every
# digit of the float), same steps; a value that is not finite never agrees.
losses_agree() {
	awk -v first="${3:-1}" '
		function val(line, key,   m) {
			if (match(line, "\"" key "\": [-0-9.e+naif]+")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m }
			return ""
		}
		FNR == NR { if (val($0, "step") + 0 >= first) a[n++] = $0; next }
		val($0, "step") + 0 >= first { b[m++] = $0 }
		END {
			if (n == 0 || n != m) { print "steps: " n " vs " m; exit 1 }
			worst = 0
			for (i = 0; i < n; i++) for (k = 1; k <= 3; k++) {
				key = k == 1 ? "loss" : k == 2 ? "grad_norm" : "val_loss"
				x = val(a[i], key); y = val(b[i], key)
				if (x == "" && y == "") continue
				if (x == "" || y == "") { print "step " i ": " key " missing"; exit 1 }
				if (x ~ /nan|inf/ || y ~ /nan|inf/) { print "step " i ": " key " " x " and " y ": not finite"; exit 1 }
				d = x - y; if (d < 0) d = -d; s = x < 0 ? -x : x
				if (d > worst * s) worst = d / (s > 0 ? s : 1)
			}
			printf "worst relative difference %.3g\n", worst
			exit worst > 1e-6
		}' "$1" "$2"
}

# A Hugging Face family's placements: with SHAPE (the model's flags) and RUN
# (data and batch), dev/ the plain run's 4 steps, each policy (POLICIES) and
# offload mode (MODES) plans and trains to dev/'s bits.
POLICIES=(everything_saveable qkv_proj_offloaded minimal_offloaded nothing_saveable)
MODES=("--offload-params" "--offload-params --offload-optimizer cpu --policy minimal_offloaded"
	"--offload-params --offload-embeddings --offload-optimizer stream")
placements_same_bits() {
	local policy mode
	for policy in "${POLICIES[@]}"; do
		expect_ok "plan $policy" "$FERRY" plan "${SHAPE[@]}" --batch 2 --seq 16 --policy "$policy"
		expect_ok "train $policy" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 --policy "$policy" \
			--save "p_$policy"
		same_save dev "p_$policy" || fail "--policy $policy: other bits saved"
	done
	for mode in "${MODES[@]}"; do
		# shellcheck disable=SC2086
		expect_ok "train $mode" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 4 $mode --save off
		same_save dev off || fail "$mode: other bits saved"
	done
}

# dev/ (a Hugging Face directory of `$1`, $2 layers) evaluates naming its
# model, plans, resumes 2 + 2 steps to the 4-step run's bits and samples;
# eval's output is left in dev_eval.txt.
hf_directory_works() {
	expect_ok "eval the directory" "$FERRY" eval --checkpoint dev "${EVAL[@]}"
	grep -q "checkpoint dev: $1, $2 layers" out.txt || fail "eval names the model: $(head -2 out.txt)"
	cp out.txt dev_eval.txt
	expect_ok "plan from the directory" "$FERRY" plan --checkpoint dev --batch 2 --seq 16 --policy qkv_proj_offloaded
	expect_ok "2 steps" "$FERRY" train "${SHAPE[@]}" "${RUN[@]}" --steps 2 --save half
	expect_ok "resume" "$FERRY" train --resume half "${RUN[@]}" --steps 4 --save resumed
	cmp -s dev/model.safetensors resumed/model.safetensors || fail "resumed $1 differs from the unbroken run"
	expect_ok "sample" "$FERRY" train --checkpoint dev "${RUN[@]}" --steps 1 --sample 8
	grep -q -- "--- sample" out.txt || fail "prints a sample"
}

# The Llama-family checkpoints the reference checks compare ferry with
# (families_ref.sh, families_hf.sh), one directory each, named in FAMILIES:
# ferry's own, trained 30 steps at a high rate so that every parameter has
# moved and the loss is far from log V, windows shorter than a 16-token
# row; then config.json edited for what a fresh model from flags does not
# have: Llama 3.1's rope scaling (its three frequency bands all used) and
# a linear one, Qwen 2's and Qwen 3's window from its second layer on,
# Gemma 2's caps small enough to bend every score, and Gemma 2 with no
# window or cap.
FAMILIES=(llama qwen2 mistral gemma2 qwen3 llama3 llamalin qwen2w gemma2c gemma2n qwen3w)
family_checkpoints() {
	local run=(--batch 2 --seq 16 --sample 0 --threads 2 --data 'corpus_train_*.bin' --steps 30 --lr 3e-2 --warmup 0)
	expect_ok "train llama" "$FERRY" train --model llama --layers 2 --channels 32 --heads 4 --kv-heads 2 \
		--max-seq 32 "${run[@]}" --save llama
	expect_ok "train qwen2" "$FERRY" train --model qwen2 --layers 3 --channels 32 --heads 4 --kv-heads 2 \
		--max-seq 32 --tied-head "${run[@]}" --save qwen2
	expect_ok "train mistral" "$FERRY" train --model mistral --layers 2 --channels 32 --heads 4 --kv-heads 1 \
		--max-seq 32 --sliding-window 5 "${run[@]}" --save mistral
	expect_ok "train gemma2" "$FERRY" train --model gemma2 --layers 3 --channels 32 --heads 4 --kv-heads 2 \
		--max-seq 32 --sliding-window 5 "${run[@]}" --save gemma2
	expect_ok "train qwen3" "$FERRY" train --model qwen3 --layers 3 --channels 32 --heads 4 --kv-heads 2 \
		--max-seq 32 "${run[@]}" --save qwen3
	cp -r llama llama3 && sed -i 's/"rope_theta": 10000.0,/"rope_theta": 500000.0,\n  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 256},/' llama3/config.json
	cp -r llama llamalin && sed -i 's/"rope_theta": 10000.0,/"rope_theta": 10000.0,\n  "rope_scaling": {"rope_type": "linear", "factor": 4.0},/' llamalin/config.json
	cp -r qwen2 qwen2w && sed -i 's/"use_sliding_window": false/"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 1/' qwen2w/config.json
	cp -r gemma2 gemma2c && sed -i 's/"attn_logit_softcapping": 50.0/"attn_logit_softcapping": 0.7/; s/"final_logit_softcapping": 30.0/"final_logit_softcapping": 3.0/' gemma2c/config.json
	cp -r qwen3 qwen3w && sed -i 's/"use_sliding_window": false/"use_sliding_window": true, "sliding_window": 4, "max_window_layers": 1/' qwen3w/config.json
	cp -r gemma2 gemma2n && sed -i 's/"sliding_window": 5/"sliding_window": null/; s/"attn_logit_softcapping": 50.0/"attn_logit_softcapping": null/' gemma2n/config.json
}
