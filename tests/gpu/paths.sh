#!/usr/bin/env bash
# Every training path of the command line on the GPU: each model family
# against the CPU backend (fp32 reference; the GPU trains in bf16), and on
# the GPU each activation policy, tile, offload mode, host tier,
# gradient accumulation, save and resume against the plain GPU run of the
# same model.  Paths that run the same kernels in the same order must give
# the same losses to the last digit ("same"); the ones that change the
# arithmetic (AdamW on the CPU, tiles of tokens) within 1e-3 ("near").
# Each check prints its worst relative loss difference, so a run's log says
# which paths are exact.  Skips (77) without a usable GPU, fails instead
# when FERRY_REQUIRE_GPU is set (bench/gpu.sh).
. "$(dirname "$0")/../cli/lib.bash"
if ! "$FERRY" info 2>/dev/null | grep -q "^  cuda  CUDA:"; then
	[ -n "${FERRY_REQUIRE_GPU:-}" ] && { echo "FAIL: a GPU is required and ferry sees none"; exit 1; }
	echo "skip: no usable GPU"; exit 77
fi
make_corpus
mkdir -p nvme
RUN=(--data 'corpus_train_*.bin' --steps 4 --lr 3e-3 --warmup 1 --sample 0 --val-every 0 --device-mem 4G)
GPT2=(--layers 2 --channels 128 --heads 4 --max-seq 64 --batch 4 --seq 64)
LLAMA=(--model llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --max-seq 64 --batch 4 --seq 64)
QWEN2=(--model qwen2 --layers 2 --channels 128 --heads 4 --kv-heads 2 --max-seq 64 --batch 4 --seq 64
	--sliding-window 16)
MISTRAL=(--model mistral --layers 2 --channels 128 --heads 4 --kv-heads 2 --max-seq 64 --batch 4 --seq 64
	--sliding-window 16)
GEMMA2=(--model gemma2 --layers 2 --channels 128 --heads 4 --kv-heads 2 --max-seq 64 --batch 4 --seq 64
	--sliding-window 16)

# train NAME FLAGS...: one run, its JSON records in NAME.jsonl
train() {
	local name=$1; shift
	expect_ok "$name" "$FERRY" train "${RUN[@]}" "$@" --json "$name.jsonl" || return 1
	[ "$(grep -c '^{"step"' "$name.jsonl")" -gt 0 ] || fail "$name: no step records"
}

# compare KIND TOL A B: the losses of runs A and B, step by step; KIND is
# "same" (every digit) or "near" (relative difference at most TOL)
compare() {
	local kind=$1 tol=$2 a=$3 b=$4
	checks=$((checks + 1))
	python3 - "$kind" "$tol" "$a.jsonl" "$b.jsonl" <<'PY' || fail "$b against $a ($kind)"
import json, sys
kind, tol = sys.argv[1], float(sys.argv[2])
def losses(f):
    return [r["loss"] for r in map(json.loads, open(f)) if "step" in r and "loss" in r]
a, b = losses(sys.argv[3]), losses(sys.argv[4])
assert a and len(a) == len(b), (len(a), len(b))
worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
same = a == b
print(f"  {sys.argv[4][:-6]} vs {sys.argv[3][:-6]}: worst relative loss difference {worst:.3g}"
      f" ({'same bits' if same else 'differs'}), losses {' '.join(f'{x:.6f}' for x in b)}")
assert all(x == x for x in a + b), "NaN loss"
if kind == "same":
    assert same, f"expected the same losses: {a} vs {b}"
else:
    assert worst <= tol, f"relative difference {worst} > {tol}"
PY
}

# each family: the GPU against the CPU; every policy on the GPU the same bits
for fam in GPT2 LLAMA QWEN2 MISTRAL GEMMA2; do
	declare -n F=$fam
	train "${fam}_cpu" "${F[@]}" --backend cpu --threads 4 || { unset -n F; continue; }
	train "${fam}_gpu" "${F[@]}" --backend cuda || { unset -n F; continue; }
	compare near 2e-2 "${fam}_cpu" "${fam}_gpu"
	for pol in nothing_saveable dots_saveable qkv_proj_offloaded minimal_offloaded \
		custom:decoder_layer_input=offload; do
		tag=${pol%%:*}
		train "${fam}_$tag" "${F[@]}" --backend cuda --policy "$pol" && compare same 0 "${fam}_gpu" "${fam}_$tag"
	done
	train "${fam}_tiles" "${F[@]}" --backend cuda --mlp-tile 48 --loss-tile 96 &&
		compare near 1e-3 "${fam}_gpu" "${fam}_tiles"
	unset -n F
done

# offload modes, tiers, accumulation, save and resume: GPT-2 and Llama
for fam in GPT2 LLAMA; do
	declare -n F=$fam
	G=("${F[@]}" --backend cuda)
	train "${fam}_stream" "${G[@]}" --offload-optimizer stream && compare same 0 "${fam}_gpu" "${fam}_stream"
	train "${fam}_adamcpu" "${G[@]}" --offload-optimizer cpu && compare near 1e-3 "${fam}_gpu" "${fam}_adamcpu"
	train "${fam}_spec" "${G[@]}" --offload-optimizer cpu --clip-order speculative &&
		compare near 1e-3 "${fam}_gpu" "${fam}_spec"
	train "${fam}_params" "${G[@]}" --offload-optimizer cpu --offload-params &&
		compare same 0 "${fam}_adamcpu" "${fam}_params"
	train "${fam}_embed" "${G[@]}" --offload-optimizer cpu --offload-params --offload-embeddings &&
		compare same 0 "${fam}_adamcpu" "${fam}_embed"
	train "${fam}_params_stream" "${G[@]}" --offload-optimizer stream --offload-params &&
		compare same 0 "${fam}_gpu" "${fam}_params_stream"
	train "${fam}_nvme" "${G[@]}" --policy minimal_offloaded --host-tier all=nvme --nvme-dir nvme &&
		compare same 0 "${fam}_gpu" "${fam}_nvme"
	train "${fam}_dram" "${G[@]}" --policy minimal_offloaded --host-tier activations=dram,params=dram \
		--offload-optimizer cpu --offload-params && compare same 0 "${fam}_adamcpu" "${fam}_dram"
	# accumulation: 2 x 2 rows against 4 rows at once
	train "${fam}_accum" "${G[@]}" --batch 2 --grad-accum 2 && compare near 1e-3 "${fam}_gpu" "${fam}_accum"
	# saved at step 2 of 4 and resumed: the losses of the unbroken run
	train "${fam}_saving" "${G[@]}" --save-every 2 --save "${fam}_{step}.ckpt" &&
		compare same 0 "${fam}_gpu" "${fam}_saving" &&
		train "${fam}_rest" "${G[@]}" --resume "${fam}_2.ckpt" && {
		head -n 2 "${fam}_gpu.jsonl" | cat - "${fam}_rest.jsonl" >"${fam}_resumed.jsonl"
		compare same 0 "${fam}_gpu" "${fam}_resumed"
	}
	unset -n F
done

# sampling, a traced step and a bench on the GPU
expect_ok "sample" "$FERRY" train "${RUN[@]}" "${GPT2[@]}" --backend cuda --steps 2 --sample 32
expect_ok "trace" "$FERRY" train "${RUN[@]}" "${LLAMA[@]}" --backend cuda --steps 2 --trace trace.json
checks=$((checks + 1))
python3 -c 'import json,sys; t=json.load(open("trace.json")); assert t["traceEvents"]' || fail "trace JSON"
expect_ok "bench" "$FERRY" bench "${GPT2[@]}" --backend cuda --steps 2 everything_saveable minimal_offloaded
finish
