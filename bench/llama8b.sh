#!/usr/bin/env bash
# Llama 3.1 8B's shape trained on one 80 GB GPU by offloading, ferry against
# PyTorch on the same GPU in the same call (issue 24, item 3).  Random
# weights, random tokens, a few steps per run, each under `timeout`:
#   (i)   the bf16 8192^3 product's rate (PyTorch), ferry's --peak-flops;
#   (ii)  `ferry plan --json` per ferry mode; a mode whose device peak does
#         not fit --device-mem, or whose host total (and 2 GiB for the
#         process) exceeds MemAvailable, is skipped with the figures;
#   (iii) `ferry train` per mode that fits (its --json records, and a
#         traced step for the compute stream's idle time and the CPU
#         AdamW's exposed time);
#   (iv)  bench/llama8b_torch.py per PyTorch implementation;
#   (v)   one summary table.
# Everything goes into OUTDIR: llama8b.log, llama8b.jsonl (one line per run)
# and trace.json (the first ferry mode's traced step).
#   FERRY=build/ferry bash bench/llama8b.sh OUTDIR
set -uo pipefail
usage() {
	cat <<'EOF'
usage: bash bench/llama8b.sh OUTDIR

Trains Llama 3.1 8B's shape (32 layers, 4096 channels, 32/8 heads, FFN 14336,
vocabulary 128256, sequence 4096, batch 1) with ferry in each offload mode and
with PyTorch (bench/llama8b_torch.py), on one GPU capped at --device-mem, and
writes OUTDIR/llama8b.log, OUTDIR/llama8b.jsonl and OUTDIR/trace.json.
A mode whose plan does not fit --device-mem, or whose host total and 2 GiB
exceed MemAvailable, is skipped with the figures.  FERRY must be a CUDA build
(bench/gpu.sh makes build/ferry).  A dry run on the CPU:
  L8B_BACKEND=cpu L8B_LAYERS=2 L8B_CHANNELS=64 L8B_HEADS=4 L8B_KV_HEADS=2 \
  L8B_FFN=128 L8B_VOCAB=512 L8B_SEQ=64 L8B_BATCH=2 bash bench/llama8b.sh OUTDIR

environment (defaults in brackets):
  FERRY              ferry binary [build/ferry]
  PYTHON             python with torch and transformers [$FERRY_TORCH_PYTHON or python3]
  L8B_BACKEND        cuda or cpu (a dry run at a small shape) [cuda]
  L8B_DEVICE_MEM     device memory, ferry's units (GiB) [78G: an H100 80GB has
                     79.2 GiB, less the CUDA context; 80G could not be allocated]
  L8B_STEPS          steps per run; the median leaves the first out [3]
  L8B_POLICY         ferry's --policy [everything_saveable: it fits in 78G with
                     AdamW's state on the host, so --policy auto has nothing to
                     trade; auto calibrates first, too slow for this budget]
  L8B_MODES          ferry modes, flag sets separated by ';'
                     [--offload-optimizer stream;--device-grads;--offload-optimizer cpu --offload-params]
  L8B_EXTRA_MODES    more modes, appended (e.g. a flag being built)
  L8B_TORCH_IMPLS    PyTorch implementations [offload fsdp2 torchao]
  L8B_FERRY_TIMEOUT  seconds per ferry train run [150: its set-up pins and fills
                     about 100 GB of host state first]
  L8B_TORCH_TIMEOUT  seconds per PyTorch run [75; the offload run took 45 s on an H200]
  L8B_LAYERS L8B_CHANNELS L8B_HEADS L8B_KV_HEADS L8B_FFN L8B_VOCAB L8B_SEQ L8B_BATCH
                     the shape [32 4096 32 8 14336 128256 4096 1]
EOF
}
case "${1:-}" in
-h | --help) usage; exit 0 ;;
"") usage >&2; exit 2 ;;
esac
[ $# -eq 1 ] || { echo "llama8b.sh: one argument expected (OUTDIR), got $#" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$1
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
FERRY=${FERRY:-$ROOT/build/ferry}
PYTHON=${PYTHON:-${FERRY_TORCH_PYTHON:-python3}}
BACKEND=${L8B_BACKEND:-cuda}
DMEM=${L8B_DEVICE_MEM:-78G}
STEPS=${L8B_STEPS:-3}
POLICY=${L8B_POLICY:-everything_saveable}
MODES=${L8B_MODES:---offload-optimizer stream;--device-grads;--offload-optimizer cpu --offload-params}
[ -n "${L8B_EXTRA_MODES:-}" ] && MODES="$MODES;$L8B_EXTRA_MODES"
IMPLS=${L8B_TORCH_IMPLS:-offload fsdp2 torchao}
L=${L8B_LAYERS:-32} C=${L8B_CHANNELS:-4096} H=${L8B_HEADS:-32} KV=${L8B_KV_HEADS:-8}
F=${L8B_FFN:-14336} V=${L8B_VOCAB:-128256} T=${L8B_SEQ:-4096} B=${L8B_BATCH:-1}
SHAPE=(--layers "$L" --channels "$C" --heads "$H" --kv-heads "$KV" --ffn "$F" --vocab "$V")
FSHAPE=(--model llama "${SHAPE[@]}" --max-seq "$T" --seq "$T" --batch "$B" --backend "$BACKEND"
	--device-mem "$DMEM" --policy "$POLICY")
TSHAPE=("${SHAPE[@]}" --seq "$T" --batch "$B" --device "$BACKEND" --device-mem "$DMEM" --steps "$STEPS")
REPORT=("$PYTHON" "$ROOT/bench/llama8b_report.py")
JSONL=$OUT/llama8b.jsonl
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
: >"$JSONL"
exec > >(tee "$OUT/llama8b.log") 2>&1

# the host memory the kernel could give now
mem_available() { awk '/^MemAvailable:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo; }
# a command's output, its peak resident set size (RSS_FILE) and exit status
with_rss() {
	local rss_file=$1
	shift
	"$PYTHON" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(rc)' "$rss_file" "$@"
}

echo "# llama8b: $(date -u +%FT%TZ), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
	"backend $BACKEND, device memory $DMEM, $STEPS steps, policy $POLICY"
echo "# shape: ${SHAPE[*]} --seq $T --batch $B; host: $(nproc) cores," \
	"MemAvailable $(($(mem_available) >> 30)) GiB"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
"$FERRY" --version 2>&1 | head -1

echo; echo "## (i) bf16 product rate"
timeout 60 "$PYTHON" "$ROOT/bench/llama8b_torch.py" --impl matmul "${TSHAPE[@]}" --json "$JSONL" | grep -v '^{'
RATE=$(grep '"impl": "matmul"' "$JSONL" | sed -n 's/.*"matmul_flops_per_s": \([0-9.e+]*\).*/\1/p' | tail -1)
PEAK=()
[ -n "$RATE" ] && PEAK=(--peak-flops "$(printf '%.0f' "$RATE")")

# (ii) and (iii) for one mode: its plan, then its training run if it fits
ferry_mode() {
	local k=$1 mode=$2 plan=$TMP/plan$1.json name fits dpeak host avail rc why trace=$TMP/trace$1.json
	local -a flags
	read -r -a flags <<<"$mode"
	name="$POLICY ${mode:-(device)}"
	echo; echo "## ferry: $name"
	# (a plan that does not fit --device-mem exits 1, its --json written)
	timeout 60 "$FERRY" plan "${FSHAPE[@]}" "${flags[@]}" --json "$plan" >"$TMP/plan.txt" 2>&1
	if ! read -r fits dpeak host < <("${REPORT[@]}" plan "$plan" 2>/dev/null); then
		cat "$TMP/plan.txt"
		"${REPORT[@]}" note "ferry $name" failed "$(grep -v '^ *$' "$TMP/plan.txt" | tail -1)" >>"$JSONL"
		return
	fi
	avail=$(mem_available)
	echo "plan: device peak $((dpeak >> 20)) MiB of $DMEM, host $((host >> 20)) MiB; MemAvailable $((avail >> 20)) MiB"
	# 2 GiB more for the process itself (CUDA's context, libraries)
	if [ "$fits" != 1 ] || [ $((host + (2 << 30))) -gt "$avail" ]; then
		why="the plan's host total $((host >> 20)) MiB and 2 GiB for the process exceed MemAvailable $((avail >> 20)) MiB"
		[ "$fits" != 1 ] && why="the plan's device peak $((dpeak >> 20)) MiB does not fit $DMEM"
		echo "skipped: $why"
		"${REPORT[@]}" note "ferry $name" skipped "$why" "$plan" >>"$JSONL"
		return
	fi
	with_rss "$TMP/rss" timeout "${L8B_FERRY_TIMEOUT:-150}" "$FERRY" train "${FSHAPE[@]}" "${flags[@]}" \
		--steps "$STEPS" --data "$TMP/rand_train_*.bin" --val-every 0 --sample 0 --lr 3e-4 --warmup 0 \
		--lr-schedule constant --json "$TMP/train$k.json" --trace "$trace" "${PEAK[@]}" 2>&1 | tee "$TMP/train$k.log"
	rc=${PIPESTATUS[0]}
	[ "$rc" = 124 ] && echo "stopped at the time limit (${L8B_FERRY_TIMEOUT:-150} s)"
	"${REPORT[@]}" ferry "$name" "$rc" "$plan" "$TMP/train$k.json" "$trace" "$TMP/train$k.log" \
		"$(cat "$TMP/rss" 2>/dev/null)" "${RATE:-0}" >>"$JSONL"
	[ -e "$OUT/trace.json" ] || cp "$trace" "$OUT/trace.json" 2>/dev/null
}

# random tokens for every step (and the one token past the last row)
"${REPORT[@]}" shard "$TMP/rand_train_000000.bin" "$V" $(((STEPS + 1) * B * T + 1)) || exit 1
k=0
IFS=';' read -r -a MODE_LIST <<<"$MODES"
for mode in "${MODE_LIST[@]}"; do
	k=$((k + 1))
	ferry_mode "$k" "$mode"
done

for impl in $IMPLS; do
	echo; echo "## PyTorch: $impl"
	lines=$(wc -l <"$JSONL")
	timeout "${L8B_TORCH_TIMEOUT:-75}" "$PYTHON" "$ROOT/bench/llama8b_torch.py" --impl "$impl" "${TSHAPE[@]}" \
		--json "$JSONL" 2>&1 | grep -v '^{' | grep -v 'Warning\|warnings.warn'
	rc=${PIPESTATUS[0]}
	# a run killed (time limit, out of memory) wrote no line of its own
	if [ "$(wc -l <"$JSONL")" = "$lines" ]; then
		why="exit $rc"
		[ "$rc" = 124 ] && why="stopped at the time limit (${L8B_TORCH_TIMEOUT:-75} s)"
		echo "$impl: $why"
		"${REPORT[@]}" note "$impl" failed "$why" >>"$JSONL"
	fi
done

echo; echo "## summary: the median step after the first; device peak and host RSS peak, each against"
echo "## ferry's plan (PyTorch: the script's estimate of its host memory); the CPU AdamW's time the"
echo "## compute stream did not hide (PyTorch offload: its update after backward), and ferry's compute"
echo "## stream idle time, in the traced step"
"${REPORT[@]}" table "$JSONL"
echo "files: $OUT/llama8b.log $JSONL $([ -e "$OUT/trace.json" ] && echo "$OUT/trace.json")"
