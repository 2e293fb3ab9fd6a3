#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds ferry with the CUDA backend, runs
# the GPU tests and the benchmarks, and writes everything to
# bench/results/<date>_<gpu>_<commit>.txt.  One command:
#   bash bench/gpu.sh
# A machine without OpenBLAS or jansson and without a package network: run
# `bash scripts/gpu_deps.sh` on a Debian machine first and bring .gpu-deps/.
set -uo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/gpu.sh"
	echo
	echo "On a machine with an NVIDIA GPU: builds ferry with the CUDA backend, runs the"
	echo "GPU tests and the benchmarks (a GPT-2 124M step, policies side by side) and"
	echo "writes everything to bench/results/<date>_<gpu>_<commit>.txt.  No arguments."
	echo "Environment: FERRY_GPU_SKIP_BENCH=1 stops after the tests; FERRY_GPU_SECTIONS"
	echo "picks sections (default: \"tests gpt2 copy policies wide offload\"; the build"
	echo "always runs); FERRY_COMMIT=HASH names the commit when the tree has no (or a stale) git"
	echo "history; FERRY_GPU_TESTS=REGEX runs only the GPU tests it matches, printing their"
	echo "whole output; FERRY_GPU_BASELINE=DIR (another source tree) times its GPT-2 step beside"
	echo "this one's.  Sections also: \"llama8b\" (bench/llama8b.sh), \"sanitize\".  JSON rows and a"
	echo "Perfetto trace go next to the log (same name stem)."
	exit 0 ;;
"") ;;
*) echo "gpu.sh: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9_.\n-' '_')
# FERRY_COMMIT names the commit where the tree was copied without its git history
commit=${FERRY_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
out="bench/results/$(date -u +%Y-%m-%d)_${gpu:-nogpu}_${commit}.txt"
mkdir -p bench/results
exec > >(tee "$out") 2>&1

echo "# ferry GPU run: ${gpu:-no GPU found}, $(date -u +%FT%TZ), commit $commit"
nvidia-smi 2>/dev/null | head -15

cmake_args=()
# Debian packages brought along (scripts/gpu_deps.sh), unpacked into a
# folder of their own when the system lacks them
if [ -d .gpu-deps/debs ] && [ ! -e /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h ]; then
	root="$PWD/.gpu-deps/root"
	mkdir -p "$root"
	for deb in .gpu-deps/debs/*.deb; do dpkg -x "$deb" "$root" || exit 1; done
	cmake_args+=("-DFERRY_DEPS_ROOT=$root")
	export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	echo "dependencies: unpacked from .gpu-deps/debs into $root"
fi
# whichever build tool is present
if ! command -v make >/dev/null && command -v ninja >/dev/null; then cmake_args+=(-G Ninja); fi

# (the configure log is read whole: grep -q would end cmake with SIGPIPE)
conf=$(cmake --preset default "${cmake_args[@]}" 2>&1)
conf_rc=$?
printf '%s\n' "$conf" | grep -E "ferry:|Error|error" || true
[ $conf_rc -eq 0 ] || { printf '%s\n' "$conf"; exit 1; }
case "$conf" in
*"CUDA backend on"*) ;;
*) echo "no CUDA backend in this build (nvcc not found)"; exit 1 ;;
esac
cmake --build --preset default -j "$(nproc)" || exit 1
# FERRY_GPU_BASELINE=DIR: another source tree (e.g. `git archive OLD | tar
# -x -C DIR`), whose GPT-2 step the gpt2 section times beside this one's
base=${FERRY_GPU_BASELINE:-}
if [ -n "$base" ]; then
	(cd "$base" && cmake --preset default "${cmake_args[@]}" >/dev/null &&
		cmake --build --preset default -j "$(nproc)" --target bench_gpt2_step >/dev/null) ||
		{ echo "the baseline in $base does not build"; exit 1; }
fi
./build/ferry info
rc=0
sections=${FERRY_GPU_SECTIONS:-tests gpt2 copy policies wide offload}
[ -n "${FERRY_GPU_SKIP_BENCH:-}" ] && sections=tests
has() { case " $sections " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
stem=${out%.txt}
# the GPU tests fail instead of skipping when no GPU is usable
export FERRY_REQUIRE_GPU=1
if has tests; then
	echo; echo "## GPU tests"
	if [ -n "${FERRY_GPU_TESTS:-}" ]; then # a subset, each test's whole output
		ctest --test-dir build -L gpu -R "$FERRY_GPU_TESTS" -V || rc=1
	else
		ctest --test-dir build -L gpu --output-on-failure || rc=1
	fi
fi
if has gpt2; then
	echo; echo "## GPT-2 124M step (bf16, everything kept): batch 16 x 1024 and 48 x 1024"
	./build/bench/bench_gpt2_step --backend cuda --vocab 50257 --batch 16 --seq 1024 --steps 5 || rc=1
	./build/bench/bench_gpt2_step --backend cuda --vocab 50257 --batch 48 --seq 1024 --steps 3 || rc=1
	if [ -n "$base" ]; then # baseline, this tree, baseline: the same card, minutes apart
		for b in "$base/build" build "$base/build"; do
			echo; echo "### $b, batch 48 x 1024"
			"$b/bench/bench_gpt2_step" --backend cuda --vocab 50257 --batch 48 --seq 1024 --steps 3 || rc=1
		done
	fi
fi
if has llama8b; then
	echo; echo "## Llama 3.1 8B's shape on one GPU capped at 78 GiB: ferry's offload modes against PyTorch"
	FERRY=build/ferry bash bench/llama8b.sh "${stem}_llama8b" || rc=1
fi
if has copy; then
	echo; echo "## copy bandwidth: ferry's copies against plain cudaMemcpyAsync"
	./build/bench/bench_copy --backend cuda || rc=1
fi
if has policies; then
	echo; echo "## policies side by side, GPT-2 124M, batch 16 x 1024"
	./build/ferry bench --backend cuda --layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 \
		--batch 16 --seq 1024 --steps 3 --json "${stem}_gpt2_policies.json" nothing_saveable \
		everything_saveable dots_saveable qkv_proj_offloaded minimal_offloaded || rc=1
fi
if has wide; then
	# attention's output and statistics cost the most to recompute per byte
	# (a T^2 product); the projections next; the MLP's 2 x 11008-wide
	# outputs the least
	attn="context=offload,attention_lse=offload,query_unrotated=offload,key_unrotated=offload"
	attn="$attn,value_proj=offload,out_proj=offload"
	wide=(--backend cuda --model llama --layers 4 --channels 4096 --heads 32 --kv-heads 8 --ffn 11008
	      --vocab 32000 --max-seq 4096 --batch 24 --seq 4096)
	echo; echo "## a wide Llama (4 layers, 4096 channels, sequence 4096) at a batch where keeping everything"
	echo "## does not fit in 80 GB (ferry plan says so) but recomputation does"
	./build/ferry bench "${wide[@]}" --steps 3 --json "${stem}_wide.json" nothing_saveable \
		qkv_proj_offloaded minimal_offloaded "custom:$attn" \
		"custom:$attn,mlpwi_0=offload,mlpwi_1=offload" || rc=1
	echo; echo "## the same, AdamW's state on the host (streamed; CPU AdamW)"
	for mode in stream cpu; do
		./build/ferry bench "${wide[@]}" --steps 2 --offload-optimizer $mode \
			--json "${stem}_wide_optimizer_$mode.json" nothing_saveable "custom:$attn" || rc=1
	done
	echo; echo "## one traced step (Perfetto): ${stem}_wide_trace.json"
	./build/ferry train "${wide[@]}" --policy "custom:$attn" --steps 2 --trace "${stem}_wide_trace.json" \
		--sample 0 || rc=1
fi
if has offload; then
	echo; echo "## GPT-2 124M, batch 8 x 1024: step time per optimizer and parameter placement"
	./build/bench/bench_offload_modes --backend cuda --layers 12 --channels 768 --heads 12 --batch 8 --seq 1024 \
		--steps 5 || rc=1
	echo; echo "## a Llama with its own head (TinyLlama's shape): parameters offloaded, embeddings too"
	llama=(--backend cuda --model llama --layers 22 --channels 2048 --heads 32 --kv-heads 4 --ffn 5632
	       --vocab 32000 --max-seq 2048 --batch 8 --seq 2048)
	for flags in "" "--offload-optimizer stream" "--offload-optimizer cpu --offload-params" \
		"--offload-optimizer cpu --offload-params --offload-embeddings"; do
		# shellcheck disable=SC2086 # the flags are words
		./build/ferry bench "${llama[@]}" $flags --steps 3 nothing_saveable || rc=1
	done
fi
if has sanitize; then
	# cuBLAS's own kernels are left out (racecheck reports hazards inside
	# them, and they are not ferry's to fix): every kernel of ferry's ends
	# in _kernel, and cuBLAS's sm90 kernels' names can hold "_kernel" too
	# (on 2026-11-26 racecheck crashed at the first product with a cuBLASLt
	# bias epilogue; the exclusion is the first guess, not yet run)
	echo; echo "## compute-sanitizer memcheck and racecheck on ferry's kernels (names *_kernel)"
	for tool in memcheck racecheck; do
		for t in test_gpu_ops test_gpu_llama_ops test_gpu_train; do
			log="${stem}_sanitize_${tool}_$t.txt"
			timeout "${FERRY_SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --kernel-name kns=_kernel \
				--kernel-name-exclude kns=cublas \
				--error-exitcode 9 "./build/tests/$t" >"$log" 2>&1
			src=$?
			echo "$tool $t: exit $src ($([ $src -eq 124 ] && echo "stopped at the time limit" ||
				grep -m1 -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log"))"
			[ $src -eq 0 ] || [ $src -eq 124 ] || { rc=1; tail -20 "$log"; }
		done
	done
fi
echo; echo "results: $out"
exit $rc
