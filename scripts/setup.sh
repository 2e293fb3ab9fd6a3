#!/usr/bin/env bash
# Installs what ferry needs on Debian 12 (as root) and builds it into build/.
# Safe to run again: installs only what is missing, rebuilds incrementally.
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/setup.sh [PRESET]"
	echo
	echo "Installs what ferry needs on Debian 12 with apt-get (as root; only what is"
	echo "missing) and builds the CMake preset PRESET (default, asan or tsan; default:"
	echo "default) into its build directory.  The default preset includes the CUDA"
	echo "backend where a GPU is found or with FERRY_CUDA=ON in the environment"
	echo "(FERRY_CUDA=OFF: never)."
	exit 0 ;;
esac
cd "$(dirname "$0")/.."

# gcc/cmake/make build it; OpenBLAS (OpenMP build) runs its matrix products;
# jansson reads and writes Hugging Face checkpoints' JSON; PCRE2 and utf8proc
# run tokenizer.json's regexes and normalization forms; zlib and libzstd read
# .gz and .zst corpora; fortunes is the demo corpus; libnuma binds host
# memory tiers to NUMA nodes and liburing runs the NVMe tier's I/O;
# python3-numpy runs the model families' independent reference
# (tools/family_numpy_check.py, tests/cli/families_ref.sh); OpenMPI
# (libopenmpi-dev, and openmpi-bin's mpirun) runs training on many
# processes (mpirun -np N ferry train); iproute2's ip makes the two network
# namespaces of the two-host test (tests/cli/two_hosts.sh).
packages=(gcc make cmake libopenblas-openmp-dev libjansson-dev libpcre2-dev libutf8proc-dev
	zlib1g-dev libzstd-dev fortunes libnuma-dev liburing-dev python3-numpy libopenmpi-dev openmpi-bin
	iproute2)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	echo "setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

preset=${1:-default}
# The CUDA backend where a GPU is, or as FERRY_CUDA says (scripts/cuda_choice.sh)
cuda=()
if [ "$preset" = default ]; then
	read -r -a cuda < <(bash scripts/cuda_choice.sh build) || true
	if [ "${cuda[0]:-}" = -DFERRY_CUDA=OFF ] && [ -z "${FERRY_CUDA:-}" ]; then
		echo "setup: no GPU here: building without the CUDA backend (FERRY_CUDA=ON bash scripts/setup.sh builds it)"
	fi
fi
cmake --preset "$preset" "${cuda[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
