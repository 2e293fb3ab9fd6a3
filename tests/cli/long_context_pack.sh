#!/usr/bin/env bash
# docs/long_context.md's "A 32K-token packed row over host tiers" stays
# true (issue 38 item 7): its topology and command, run as the doc gives
# them (with a --nvme-dir here), print the host tiers it quotes, and each
# row of its table (a layer's forward and backward, the NVMe tier's depth,
# the ring, the device peak) for each --doc-tokens; the token stream's and
# the packed row's peaks differ by the positions tensor.  The plans are the
# CUDA backend's (--target h100): a build without it skips (77).
DOC=$(cd "$(dirname "$0")/../../docs" && pwd)/long_context.md
. "$(dirname "$0")/lib.bash"
"$FERRY" info 2>/dev/null | grep -q '^  cuda ' || { echo "skipped: ferry built without the CUDA backend"; exit 77; }
section() { awk '/^### A 32K-token packed row over host tiers/ { on = 1; next } /^##/ { on = 0 } on' "$DOC"; }
section >sec.md
# the doc's topology file and command (its L8 and flags, /nvme -> here)
sed -n "/^cat >box.txt <<'TOPO'/,/^TOPO/p" sec.md | sed '1d;$d' >box.txt
L8=$(sed -n "/^L8='/,/'$/p" sec.md | tr -d "'\n\\\\" | sed 's/^L8=//')
CMD=$(sed -n '/^ferry plan \$L8/,/\[--doc-tokens N\]$/p' sec.md | tr -d '\\\n' |
	sed -e 's/^ferry plan \$L8//' -e 's/\[--doc-tokens N\]$//' -e 's|--nvme-dir /nvme|--nvme-dir nvme|')
mkdir nvme
checks=$((checks + 1))
[ "$(grep -c . box.txt)" = 3 ] && [ -n "$L8" ] && grep -q -- '--target h100 --packed' <<<"$CMD" &&
	echo "ok: the doc's topology and command: ferry plan \$L8$CMD" || fail "the doc's command: [$L8] [$CMD]"
plan() { # shellcheck disable=SC2086
	"$FERRY" plan $L8 $CMD "$@" >out.txt 2>err.txt || fail "ferry plan $*: $(cat err.txt out.txt | tail -3)"; }
space() { sed 's/\([0-9]\)\([0-9]\{3\}\)$/\1 \2/;:a;s/\([0-9]\)\([0-9]\{3\}\) /\1 \2 /;ta' <<<"$1"; }

plan
checks=$((checks + 1))
tiers=$(grep -E '^  (dram \(node 0\)|nvme|cxl \(node 1\)) ' out.txt)
[ "$tiers" = "$(grep -E '^  (dram|nvme|cxl)' sec.md)" ] && echo "ok: the host tiers as the doc quotes them" ||
	fail "host tiers: ferry prints [$tiers]"

# | `--doc-tokens` | forward | backward | NVMe ahead | ring | device peak |
while IFS='|' read -r _ doc fwd bwd ahead ring peak _; do
	doc=$(echo $doc) want="$(echo $fwd) $(echo $bwd) $(echo $ahead) $(echo $ring) $(echo $peak)"
	flag=; [[ $doc = [0-9]* ]] && flag="--doc-tokens $doc"
	# shellcheck disable=SC2086
	plan $flag
	checks=$((checks + 1))
	read -r f b < <(sed -n 's/^prefetch (auto): one layer computes \([0-9.]*\) ms forward and \([0-9.]*\) ms backward.*/\1 \2/p' out.txt)
	a=$(sed -n 's/^prefetch (auto): .*nvme (16 layers): .* -> \([0-9]*\) ahead$/\1/p' out.txt)
	r=$(sed -n 's/^prefetch per host tier .*; ring of \([0-9]*\) slots$/\1/p' out.txt)
	p=$(sed -n 's/^fits: .*(\([0-9]*\) of [0-9]* bytes)$/\1/p' out.txt)
	got="$f $b $a $r $(space "$p")"
	[ "$got" = "$want" ] && echo "ok: --doc-tokens ${doc}: $got" ||
		fail "docs/long_context.md, --doc-tokens $doc: the doc says [$want], ferry plan [$got]"
	[ -z "$flag" ] && packed=$p
done < <(grep -E '^\| (\(none|[0-9])' sec.md)

# the token stream: the same plan less the positions tensor
plan_stream=$(sed 's/--packed //' <<<"$CMD")
# shellcheck disable=SC2086
"$FERRY" plan $L8 $plan_stream >out.txt 2>err.txt
stream=$(sed -n 's/^fits: .*(\([0-9]*\) of [0-9]* bytes)$/\1/p' out.txt)
checks=$((checks + 1))
tr '\n' ' ' <sec.md | grep -q "$(space "$stream") bytes as a token stream, $(space "${packed:-0}") packed" &&
	[ $((packed - stream)) = 131072 ] && echo "ok: stream $stream, packed $packed: the positions' 131072 bytes" ||
	fail "stream $stream, packed ${packed:-?}: the doc says $(tr '\n' ' ' <sec.md | grep -o '[0-9 ]* bytes as a token stream, [0-9 ]* packed')"
finish
