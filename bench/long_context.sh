#!/usr/bin/env bash
# Device peak and step time against sequence length, tiled (--mlp-tile auto
# --loss-tile auto) and untiled, for a small Llama with a large vocabulary
# (2 layers, C 128, F 512, vocabulary 32000), one sequence, every activation
# recomputed from offloaded layer inputs; 3 steps each.  Prints a Markdown
# table (median step time, the peak --json reports, the plan's peak).
#
#   bash bench/long_context.sh [FERRY] [LENGTH...]     (default: build/ferry 1024 4096 16384)
set -u
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/long_context.sh [FERRY] [LENGTH...]   (default: build/ferry 1024 4096 16384)"
	exit 0 ;;
esac
ferry=$(realpath "${1:-build/ferry}"); shift || true
lengths=("$@"); [ ${#lengths[@]} -gt 0 ] || lengths=(1024 4096 16384)
max=0; for T in "${lengths[@]}"; do [ "$T" -gt "$max" ] && max=$T; done
work=$(mktemp -d) && cd "$work" || exit 1
trap 'rm -rf "$work"' EXIT
for d in 0 1 2 3; do
	for i in $(seq 1 3000); do echo "doc $d line $i: pack my box with five dozen liquor jugs and more words"; done >"t$d.txt"
done
"$ferry" data --out c --val-fraction 0.1 t?.txt >/dev/null 2>&1 || { echo "cannot make a corpus" >&2; exit 1; }
model=(--model llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --ffn 512 --vocab 32000 --max-seq "$max"
       --batch 1 --policy custom:decoder_layer_input=offload)
echo "| tokens | tiles | measured peak | plan's peak | step (median of 3) | losses |"
echo "|---:|---|---:|---:|---:|---|"
for T in "${lengths[@]}"; do
	for tiles in untiled tiled; do
		flags=(); [ $tiles = tiled ] && flags=(--mlp-tile auto --loss-tile auto)
		"$ferry" train "${model[@]}" --seq "$T" "${flags[@]}" --data 'c_train_*.bin' --steps 3 --sample 0 \
			--val-every 0 --json r.jsonl >/dev/null 2>&1 || { echo "| $T | $tiles | failed |"; continue; }
		"$ferry" plan "${model[@]}" --seq "$T" "${flags[@]}" --backend cpu --json p.json >/dev/null 2>&1
		python3 - "$T" "$tiles" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open("r.jsonl") if '"step"' in l]
p = json.load(open("p.json"))
mib = 2 ** 20
print(f"| {sys.argv[1]} | {sys.argv[2]} | {rs[-1]['device_peak_bytes'] / mib:.1f} MiB | "
      f"{p['device']['peak_bytes'] / mib:.1f} MiB | {statistics.median(r['step_ms'] for r in rs) / 1e3:.1f} s | "
      f"{' '.join(str(r['loss']) for r in rs)} |")
PY
	done
done
