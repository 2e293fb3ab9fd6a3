#!/usr/bin/env bash
# Every program answers --help (and -h): usage on stdout, exit 0, at once,
# and nothing else done (no file written, no benchmark run, no build, no
# apt-get): ferry and each of its commands, the benchmarks built next to it,
# and the scripts in bench/, scripts/ and tools/.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"
BENCH_DIR=$(dirname "$FERRY")/bench

# expect_help NAME CMD...: exit 0 within 10 s, "usage" on stdout, no file
# left in the (empty) work directory.
expect_help() {
	local what=$1; shift
	checks=$((checks + 1))
	mkdir -p run && cd run || exit 1
	timeout 10 "$@" >../out.txt 2>../err.txt
	local rc=$?
	local left
	left=$(ls -A)
	cd .. && rm -rf run
	if [ $rc -ne 0 ]; then fail "$what: exit $rc$([ $rc -eq 124 ] && echo ' (still running after 10 s)')"; cat err.txt >&2; return; fi
	grep -qi "usage" out.txt || { fail "$what: no usage on stdout: $(head -3 out.txt)"; return; }
	[ -z "$left" ] || { fail "$what: left files behind: $left"; return; }
	echo "ok: $what"
}

for flag in --help -h; do
	expect_help "ferry $flag" "$FERRY" $flag
done
commands=$("$FERRY" --help | sed -En 's/^  ([a-z]+) .*/\1/p')
[ "$(echo "$commands" | wc -w)" -ge 7 ] || fail "ferry --help lists its commands: $commands"
for cmd in $commands; do
	for flag in --help -h; do
		expect_help "ferry $cmd $flag" "$FERRY" "$cmd" $flag
	done
done
grep -qx sample <(echo "$commands" | tr ' ' '\n') || fail "ferry --help lists sample"

n=0
for bench in "$BENCH_DIR"/bench_*; do
	[ -x "$bench" ] || continue
	n=$((n + 1))
	for flag in --help -h; do
		expect_help "$(basename "$bench") $flag" "$bench" $flag
	done
done
[ $n -ge 3 ] || fail "found $n benchmarks in $BENCH_DIR"

for script in "$ROOT"/bench/*.sh "$ROOT"/scripts/*.sh; do
	expect_help "${script#"$ROOT"/} --help" bash "$script" --help
done
if command -v python3 >/dev/null; then
	for tool in "$ROOT"/tools/*.py; do
		expect_help "${tool#"$ROOT"/} --help" python3 "$tool" --help
	done
fi
finish
