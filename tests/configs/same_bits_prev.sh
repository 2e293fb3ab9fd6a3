#!/usr/bin/env bash
# tools/same_bits.sh in the suite (issue 36 item 7): this tree's ferry
# against the commit before it, over the tool's whole list (models x
# offload modes x policies: the saves, losses, plans and schedules).  The
# parent is built from `git archive` (no worktree or branch made) into a
# folder of its own, the CLI only, without CUDA; each commit checked
# against its parent keeps every configuration's bits from the first.
#   bash tests/configs/same_bits_prev.sh SOURCE_DIR NEW_FERRY WORK_DIR
# Passes at once when nothing built into ferry changed since the parent
# (src/, include/, tools/ferry/, CMakeLists.txt).  Skips (77): outside a
# git clone, without a parent (a shallow clone: fetch with --depth 2 or
# more), or when the commit says it changes bits on purpose with a line
# "Same-bits: changed (why)" in its message (printed).
set -u
src=$1 new=$(realpath "$2") work=$3
cd "$src" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "skip: $src is not a git clone"; exit 77; }
git rev-parse -q --verify HEAD~1 >/dev/null || { echo "skip: no parent commit here (a shallow clone?)"; exit 77; }
if why=$(git log -1 --format=%B HEAD | grep -m1 '^Same-bits: changed'); then
	echo "skip: $(git log -1 --format=%h HEAD) says it changes bits: $why"
	exit 77
fi
# uncommitted changes count as this tree's: compare the files, not HEAD
if git diff --quiet HEAD~1 -- src include tools/ferry CMakeLists.txt; then
	echo "ok: nothing built into ferry changed since $(git log -1 --format=%h HEAD~1): the same bits"
	exit 0
fi
rm -rf "$work" && mkdir -p "$work/parent" || exit 1
git archive HEAD~1 | tar -x -C "$work/parent" || { echo "cannot unpack HEAD~1"; exit 1; }
start=$SECONDS
cmake -S "$work/parent" -B "$work/parent/build" -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=OFF >"$work/build.log" 2>&1 &&
	cmake --build "$work/parent/build" --target ferry_cli -j "$(nproc)" >>"$work/build.log" 2>&1 ||
	{ tail -n 20 "$work/build.log"; echo "cannot build HEAD~1"; exit 1; }
echo "built $(git log -1 --format=%h HEAD~1)'s ferry in $((SECONDS - start)) s"
bash "$src/tools/same_bits.sh" "$work/parent/build/ferry" "$new" "$work/runs" || exit 1
rm -rf "$work"
