#!/usr/bin/env bash
# docs/plan_70b.md stays true: every row of its table of settings is what
# `ferry plan --ranks 8` prints for Llama 3.3 70B (docs/llama33_70b), and
# the rows of its case worked by hand add up to that plan's bytes.
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
	[ "$got" = "$want" ] && echo "ok: $flags $policy: $got" ||
		fail "docs/plan_70b.md, $flags$policy: the doc says [$want], ferry plan [$got] $(cat err.txt)"
done < <(grep '^| `--' "$DOC/plan_70b.md")

# the case by hand: each table's rows add up to its bold total, which is
# the plan's host or device bytes
"$FERRY" plan "${BASE[@]}" --offload-params --offload-embeddings --offload-optimizer cpu \
	--policy qkv_proj_offloaded --json worked.json >/dev/null
plan_host=$(grep -o '"rank": 0, "device_bytes": [0-9]*, "host_bytes": [0-9]*' worked.json | grep -o '[0-9]*$')
plan_device=$(grep -o '"rank": 0, "device_bytes": [0-9]*' worked.json | grep -o '[0-9]*$')
sed -n '/^## One case by hand/,$p' "$DOC/plan_70b.md" | awk -F'|' '
	/^\| \*\*/ { gsub(/[*, ]/, "", $3); printf "%.0f %s\n", sum, $3; sum = 0; next }
	/^\| [^-]/ && $3 ~ /^ *[0-9][0-9,]* *$/ { v = $3; gsub(/[, ]/, "", v); sum += v }' >sums.txt
checks=$((checks + 1))
[ "$(cat sums.txt)" = "$(printf '%s %s\n%s %s' "$plan_host" "$plan_host" "$plan_device" "$plan_device")" ] &&
	echo "ok: the case by hand adds up to the plan's $plan_host host and $plan_device device bytes" ||
	fail "the case by hand: rows and totals $(tr '\n' ';' <sums.txt), the plan's host $plan_host, device $plan_device"
finish
