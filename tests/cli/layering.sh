#!/usr/bin/env bash
# The layers depend one way (docs/design.md's layer table, which
# tools/check_layering.py reads): every include of src/, include/ferry/ and
# tools/ goes down the order, public headers counted in the layer that owns
# them; the CLI includes only public headers; no two source files share a
# name; none is over 1,000 lines but those on the checker's shrinking list.
# The checker's self-test runs first, and then an upward include planted in a
# copy of the real tree must fail, so a checker that finds nothing cannot
# pass.  ($1, the ferry binary, is not used.)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"

command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
CHECK=$ROOT/tools/check_layering.py

expect_ok "the checker's self-test" python3 "$CHECK" --self-test && cat out.txt

# A copy of the real tree with one upward include planted in a public
# header: the tier layer's header reaching up to the plan's.
checks=$((checks + 1))
mkdir -p copy && cp -r "$ROOT/src" "$ROOT/include" "$ROOT/tools" "$ROOT/docs" copy/
sed -i '0,/#include "ferry\/ferry.h"/s//#include "ferry\/ferry.h"\n#include "ferry\/plan.h"/' copy/include/ferry/tier.h
python3 "$CHECK" --root copy >planted.txt
rc=$?
if [ $rc -eq 1 ] && grep -q '^include/ferry/tier.h:[0-9]*: tier includes plan, a higher layer' planted.txt &&
	grep -q '^1 problems in ' planted.txt; then
	echo "ok: a planted upward include fails: $(head -n 1 planted.txt)"
else
	fail "the planted include: exit $rc, output: $(cat planted.txt)"
fi

checks=$((checks + 1))
python3 "$CHECK" --root "$ROOT" >out.txt
rc=$?
cat out.txt
n=$(sed -En 's/^[0-9]+ problems in ([0-9]+) files$/\1/p' out.txt)
if [ $rc -ne 0 ]; then
	fail "the layering (the lines above): move the code, or the call, to the layer it belongs to"
elif [ -z "$n" ] || [ "$n" -lt 200 ]; then
	# it must have seen the code base, not an empty directory
	fail "the checker saw ${n:-no} files"
else
	echo "ok: every include goes down the layer order, names are unique, sizes within bounds"
fi
finish
