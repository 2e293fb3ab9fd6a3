#!/usr/bin/env bash
# The README's first command builds the CUDA backend where a GPU is and
# leaves its minutes of nvcc out elsewhere (issue 40, item 15); the test
# command builds it everywhere (FERRY_CUDA=ON); a configured build folder
# keeps its choice.  scripts/cuda_choice.sh is what setup.sh asks.  ($1, the
# ferry binary, is not used.)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"
CHOICE=$ROOT/scripts/cuda_choice.sh

# choice WANT WHAT ENV...: the flag printed in a fresh folder, or in
# configured/ when WHAT says so
choice() {
	local want=$1 what=$2 got; shift 2
	checks=$((checks + 1))
	got=$(env "$@" bash "$CHOICE" "$dir" 2>&1)
	if [ "$got" = "$want" ]; then
		echo "ok: $what: '${got}'"
	else
		fail "$what: '$got', expected '$want'"
	fi
}
mkdir -p fresh configured && touch configured/CMakeCache.txt gpu0
dir=fresh
choice "-DFERRY_CUDA=OFF" "no GPU, a new build folder" -u FERRY_CUDA FERRY_GPU_DEVICES="$WORK/none[0-9]*"
choice "" "a GPU, a new build folder" -u FERRY_CUDA FERRY_GPU_DEVICES="$WORK/gpu[0-9]*"
choice "-DFERRY_CUDA=ON" "FERRY_CUDA=ON without a GPU" FERRY_CUDA=ON FERRY_GPU_DEVICES="$WORK/none[0-9]*"
choice "-DFERRY_CUDA=OFF" "FERRY_CUDA=OFF with a GPU" FERRY_CUDA=OFF FERRY_GPU_DEVICES="$WORK/gpu[0-9]*"
dir=configured
choice "" "no GPU, a configured folder keeps its choice" -u FERRY_CUDA FERRY_GPU_DEVICES="$WORK/none[0-9]*"

# setup.sh asks it, and the test command asks for the backend
checks=$((checks + 1))
if grep -q 'scripts/cuda_choice.sh build' "$ROOT/scripts/setup.sh" &&
	grep -q '^FERRY_CUDA=ON bash scripts/setup.sh default$' "$ROOT/scripts/test.sh"; then
	echo "ok: setup.sh takes the choice; test.sh builds the CUDA backend everywhere"
else
	fail "setup.sh does not ask scripts/cuda_choice.sh, or test.sh does not set FERRY_CUDA=ON"
fi
finish
