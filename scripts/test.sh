#!/usr/bin/env bash
# Builds ferry and runs the test suite: the address+undefined sanitizer build,
# the thread-sanitizer build on the stream/offload engine's tests (OpenMP and
# BLAS single-threaded there, since libgomp is not instrumented), then the
# optimised build.  Tests that need a GPU skip (exit 77).
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/test.sh"
	echo
	echo "Builds the default, asan and tsan presets (scripts/setup.sh) and runs the test"
	echo "suite on each (ctest).  No arguments."
	exit 0 ;;
esac
cd "$(dirname "$0")/.."

bash scripts/setup.sh default
bash scripts/setup.sh asan
bash scripts/setup.sh tsan
ctest --preset asan -j 2
ctest --preset tsan -j 2
ctest --preset default -j 2
