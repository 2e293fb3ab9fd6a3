#!/usr/bin/env bash
# Builds ferry and runs the whole test suite twice: the optimised build, then
# the address+undefined sanitizer build.  Tests that need a GPU skip (77).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh default
bash scripts/setup.sh asan
ctest --preset asan -j 2
ctest --preset default -j 2
