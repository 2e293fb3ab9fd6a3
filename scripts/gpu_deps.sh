#!/usr/bin/env bash
# Run here, on Debian 12 with apt: downloads the Debian packages that a bare
# GPU machine lacks (OpenBLAS, jansson and the Fortran runtime OpenBLAS needs;
# PCRE2, utf8proc, zlib and libzstd for tokenizers and compressed corpora;
# libnuma and liburing for host memory tiers, optional: ferry builds without)
# into .gpu-deps/debs/, which git ignores.  bench/gpu.sh unpacks them there
# into .gpu-deps/root/ (never into /) when the system has no OpenBLAS.
#   bash scripts/gpu_deps.sh
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/gpu_deps.sh"
	echo
	echo "On Debian 12 with apt: downloads OpenBLAS, jansson, the Fortran runtime, PCRE2, utf8proc, zlib,"
	echo "libzstd, libnuma and liburing as"
	echo "Debian packages into .gpu-deps/debs/ (ignored by git), for a GPU machine"
	echo "without them or a package network; bench/gpu.sh unpacks them there."
	exit 0 ;;
"") ;;
*) echo "gpu_deps.sh: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps/debs
cd .gpu-deps/debs
# apt-get download drops privileges to _apt, which cannot write here
chmod 777 . 2>/dev/null || true
apt-get download libopenblas0-openmp libopenblas-openmp-dev libjansson4 libjansson-dev libgfortran5 \
	libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev zlib1g zlib1g-dev libzstd1 libzstd-dev \
	libnuma1 libnuma-dev liburing2 liburing-dev
ls -l
