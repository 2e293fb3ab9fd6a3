#!/usr/bin/env bash
# No function over 80 lines in src/ and tools/ (C and CUDA files), counted
# from its opening to its closing brace; tools/check_function_length.py does
# the counting and keeps the allowlist of known exceptions.  The checker's own
# self-test runs first, so that a checker that finds nothing cannot pass.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"

command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
CHECK=$ROOT/tools/check_function_length.py

expect_ok "the checker's self-test" python3 "$CHECK" --self-test && cat out.txt

# A function one line over the limit fails the check, and is named.
checks=$((checks + 1))
{
	echo 'static int long_one(int x)'
	echo '{'
	for i in $(seq 1 79); do echo "	x += $i; /* } */"; done
	echo '}'
} >long.c
python3 "$CHECK" --root . long.c >long.txt 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q '^long.c:1: long_one is 81 lines' long.txt; then
	echo "ok: an 81-line function fails the check: $(head -n 1 long.txt)"
else
	fail "an 81-line function: exit $rc, output: $(cat long.txt)"
fi

checks=$((checks + 1))
python3 "$CHECK" >out.txt 2>err.txt
rc=$?
cat out.txt
if [ $rc -ne 0 ]; then
	fail "functions over 80 lines (exit $rc); split them (see the lines above)"
	cat err.txt >&2
elif ! grep -Eq '^[0-9]+ functions in [0-9]+ files' out.txt; then
	fail "the checker printed no summary"
else
	n=$(sed -En 's/^([0-9]+) functions in .*/\1/p' out.txt)
	# it must have seen the code base, not an empty directory
	if [ "$n" -lt 300 ]; then fail "the checker saw only $n functions"; else echo "ok: no function over 80 lines outside the allowlist"; fi
fi
finish
