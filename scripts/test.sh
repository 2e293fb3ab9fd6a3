#!/usr/bin/env bash
# Builds ferry and runs the test suite: the address+undefined sanitizer build,
# the thread-sanitizer build on the stream/offload engine's tests (OpenMP and
# BLAS single-threaded there, since libgomp is not instrumented), then the
# optimised build.  Tests that need a GPU skip (exit 77).  Where the time
# goes, and which tests the sanitizer builds run fewer of: docs/testing.md.
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/test.sh"
	echo
	echo "Builds the default, asan and tsan presets (scripts/setup.sh), installs what the"
	echo "two-node QEMU test needs (scripts/qemu_deps.sh; it skips without), torch and"
	echo "transformers for the check against transformers (scripts/torch_deps.sh, in the"
	echo "default build only; it skips without) and runs the test suite on each (ctest)."
	echo "No arguments."
	exit 0 ;;
esac
cd "$(dirname "$0")/.."

# the CUDA backend compiles here too, GPU or not (its tests skip without one)
FERRY_CUDA=ON bash scripts/setup.sh default
bash scripts/setup.sh asan
bash scripts/setup.sh tsan
# the two-NUMA-node QEMU guest test (ctest -L qemu, about 20 s) needs
# qemu-system-x86 and a Debian kernel; where they cannot be had (no root,
# no package network) it skips, and the rest still runs
bash scripts/qemu_deps.sh >/dev/null || echo "test: qemu or a kernel could not be installed; the QEMU test skips"
# torch and transformers (about 6 GB from PyPI) for the check against
# transformers itself, run in the optimised build only; without them it skips
torch_python=$(bash scripts/torch_deps.sh) || echo "test: torch or transformers could not be installed; cli_families_hf skips"
ctest --preset asan -j 2
ctest --preset tsan -j 2
FERRY_TORCH_PYTHON=${torch_python:-} ctest --preset default -j 2
