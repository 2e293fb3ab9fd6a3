#!/usr/bin/env bash
# docs/plan_70b.md stays true: every row of its table of settings is what
# `ferry plan --ranks 8` prints for Llama 3.3 70B (docs/llama33_70b); the
# rows of its two cases worked by hand add up to those plans' bytes; and
# ZeRO-3's host bytes a machine are 18 n + 8 A by hand (n the parameters,
# A a rank's offloaded activations) plus the bf16 slices' page rounding.
# The plans are the CUDA backend's (its kernels' workspace among them): a
# build without it (the sanitizer presets) skips (77).
DOC=$(cd "$(dirname "$0")/../../docs" && pwd)
. "$(dirname "$0")/lib.bash"
"$FERRY" info 2>/dev/null | grep -q '^  cuda ' || { echo "skipped: ferry built without the CUDA backend"; exit 77; }
BASE=(--checkpoint "$DOC/llama33_70b" --backend cuda --batch 1 --seq 8192 --pinned-limit 116G --device-mem 134468M
	--ranks 8)

digits() { tr -d ', '; }
# the first number of a "| ... |" cell, without its commas
cell_number() { grep -o '^ *[0-9][0-9,]*' <<<"$1" | digits; }

declare -A machine_of # "FLAGS POLICY" -> the plan's host bytes a machine
# | `FLAGS` | POLICY | device (GB) | fits | host | machine (TB) | fits |
while IFS='|' read -r _ flags policy device _ host machine _; do
	flags=$(tr -d '`' <<<"$flags")
	checks=$((checks + 1))
	# shellcheck disable=SC2086
	"$FERRY" plan "${BASE[@]}" $flags --policy $policy --json p.json >/dev/null 2>err.txt
	got=$(grep -o '"rank": 0, "device_bytes": [0-9]*, "host_bytes": [0-9]*' p.json | grep -o '[0-9]*' | tail -2 |
		tr '\n' ' ')
	got="$got$(grep -o '"machine": 0, "first_rank": 0, "ranks": 8, "host_bytes": [0-9]*' p.json | grep -o '[0-9]*$')"
	want="$(cell_number "$device") $(cell_number "$host") $(cell_number "$machine")"
	machine_of["$(echo $flags $policy)"]=${got##* }
	[ "$got" = "$want" ] && echo "ok: $flags $policy: $got" ||
		fail "docs/plan_70b.md, $flags$policy: the doc says [$want], ferry plan [$got] $(cat err.txt)"
done < <(grep '^| `--' "$DOC/plan_70b.md")

# a case by hand (the doc's lines from FROM to the next "## "): each table's
# rows add up to its bold total, which is the plan's host or device bytes
by_hand() {
	local from=$1; shift
	"$FERRY" plan "${BASE[@]}" "$@" --policy qkv_proj_offloaded --json worked.json >/dev/null
	plan_host=$(grep -o '"rank": 0, "device_bytes": [0-9]*, "host_bytes": [0-9]*' worked.json | grep -o '[0-9]*$')
	plan_device=$(grep -o '"rank": 0, "device_bytes": [0-9]*' worked.json | grep -o '[0-9]*$')
	awk -v from="$from" '/^## / { on = $0 == from } on' "$DOC/plan_70b.md" | awk -F'|' '
		/^\| \*\*/ { gsub(/[*, ]/, "", $3); printf "%.0f %s\n", sum, $3; sum = 0; next }
		/^\| [^-]/ && $3 ~ /^ *[0-9][0-9,]* *$/ { v = $3; gsub(/[, ]/, "", v); sum += v }' >sums.txt
	checks=$((checks + 1))
	[ "$(cat sums.txt)" = "$(printf '%s %s\n%s %s' "$plan_host" "$plan_host" "$plan_device" "$plan_device")" ] &&
		echo "ok: $from adds up to the plan's $plan_host host and $plan_device device bytes" ||
		fail "$from: rows and totals $(tr '\n' ';' <sums.txt), the plan's host $plan_host, device $plan_device"
}
by_hand "## One case by hand" --offload-params --offload-embeddings --offload-optimizer cpu
by_hand "## ZeRO-3 by hand" --zero 3 --offload-optimizer cpu

# ZeRO-3 on one host by hand: | POLICY | A | 18 n + 8 A | ferry plan, a machine | fits |, n the
# doc's parameter count; the plan 8 pages' halves more (each rank's bf16 slice, 2 S, rounded up to 4 KiB)
n=$(grep '^| n |' "$DOC/plan_70b.md" | tr -d '*' | cut -d'|' -f3 | digits)
while IFS='|' read -r _ policy a hand plan _; do
	policy=$(echo $policy) a=$(cell_number "$a") hand=$(cell_number "$hand") plan=$(cell_number "$plan")
	checks=$((checks + 1))
	want="$((18 * n + 8 * a)) $((18 * n + 8 * a + 8 * 2048)) ${machine_of["--zero 3 --offload-optimizer cpu $policy"]:-}"
	[ "$hand $plan $plan" = "$want" ] && echo "ok: ZeRO-3 on one host, $policy: 18 n + 8 A = $hand, planned $plan" ||
		fail "ZeRO-3 on one host, $policy: the doc says [$hand $plan], 18 n + 8 A and the plan [$want]"
done < <(grep -E '^ *\| (nothing_saveable|qkv_proj_offloaded|minimal_offloaded) \| [0-9]' "$DOC/plan_70b.md")
[ "$checks" -ge 25 ] || fail "only $checks checks: a table of docs/plan_70b.md was not found"
finish
