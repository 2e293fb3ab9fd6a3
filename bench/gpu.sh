#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds ferry with the CUDA backend, runs
# the GPU tests and the benchmarks, and writes everything to
# bench/results/<date>_<gpu>_<commit>.txt.  One command:
#   bash bench/gpu.sh
set -uo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/gpu.sh"
	echo
	echo "On a machine with an NVIDIA GPU: builds ferry with the CUDA backend, runs the"
	echo "GPU tests and the benchmarks (a GPT-2 124M step, policies side by side) and"
	echo "writes everything to bench/results/<date>_<gpu>_<commit>.txt.  No arguments."
	exit 0 ;;
"") ;;
*) echo "gpu.sh: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '_')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
out="bench/results/$(date -u +%Y-%m-%d)_${gpu:-nogpu}_${commit}.txt"
mkdir -p bench/results
exec > >(tee "$out") 2>&1

echo "# ferry GPU run: ${gpu:-no GPU found}, $(date -u +%FT%TZ), commit $commit"
nvidia-smi 2>/dev/null | head -15
cmake --preset default | grep "ferry:" || exit 1
cmake --preset default | grep -q "CUDA backend on" || { echo "no CUDA backend in this build"; exit 1; }
cmake --build --preset default -j "$(nproc)" || exit 1
./build/ferry info
rc=0
# the GPU tests fail instead of skipping when no GPU is usable
export FERRY_REQUIRE_GPU=1
echo; echo "## GPU tests"
ctest --test-dir build -L gpu --output-on-failure || rc=1
echo; echo "## GPT-2 124M step, batch 4 x 64 (issue 2's shape) and batch 16 x 1024"
./build/bench/bench_gpt2_step --backend cuda --steps 10 || rc=1
./build/bench/bench_gpt2_step --backend cuda --batch 16 --seq 1024 --steps 10 || rc=1
echo; echo "## policies side by side, GPT-2 124M, batch 16 x 1024"
./build/bench/bench_policies --backend cuda --layers 12 --channels 768 --heads 12 --batch 16 --seq 1024 \
	--steps 5 || rc=1
echo; echo "results: $out"
exit $rc
