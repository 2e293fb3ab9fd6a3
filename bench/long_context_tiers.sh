#!/usr/bin/env bash
# Checkpoints past a --host-mem budget, spilled to the NVMe tier, each
# tier loaded its own depth ahead: a Llama (12 layers, C 256, 1024 tokens:
# 1 MiB of checkpoint a layer, every other activation recomputed) with
# --host-mem 4M (layers 0-3 in DRAM, 4-11 in the NVMe file), trained 3
# steps all in DRAM and over dram+nvme at depths 1, 1+3 and auto (this
# machine's calibration).  For each: the median step, each tier's measured
# peak against the plan, and from step 2's trace every NVMe read of the
# backward: how long before its layer's backward it started (in time and
# in layers' backward), and the compute stream's exposed wait for it.
#
#   bash bench/long_context_tiers.sh [FERRY] [NVME_DIR]   (default: build/ferry, a temporary folder)
set -u
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/long_context_tiers.sh [FERRY] [NVME_DIR]   (default: build/ferry, a temporary folder)"
	exit 0 ;;
esac
ferry=$(realpath "${1:-build/ferry}")
work=$(mktemp -d) && cd "$work" || exit 1
trap 'rm -rf "$work"' EXIT
nvme=${2:-$work/nvme}
mkdir -p "$nvme"
for d in 0 1 2 3; do
	for i in $(seq 1 800); do echo "doc $d line $i: pack my box with five dozen liquor jugs and more words"; done >"t$d.txt"
done
"$ferry" data --out c --val-fraction 0.1 t?.txt >/dev/null 2>&1 || { echo "cannot make a corpus" >&2; exit 1; }
model=(--model llama --layers 12 --channels 256 --heads 4 --kv-heads 2 --max-seq 1024 --batch 1 --seq 1024
       --policy custom:decoder_layer_input=offload --threads 2)
run=(--data 'c_train_*.bin' --steps 3 --sample 0 --val-every 0)
span=(--host-tier activations=dram+nvme --nvme-dir "$nvme" --host-mem 4M)
echo "| run | placement's depths | step (median of 3) | host peaks, measured / planned (bytes) | NVMe reads: started ahead (ms; layers) | exposed wait |"
echo "|---|---|---:|---|---|---:|"
for name in dram depth1 depth1+3 auto; do
	case $name in
	dram) flags=(--host-tier activations=dram --prefetch-depth 1) ;;
	depth1) flags=("${span[@]}" --prefetch-depth 1) ;;
	depth1+3) flags=("${span[@]}" --prefetch-depth 1+3) ;;
	auto) flags=("${span[@]}" --prefetch-depth auto) ;;
	esac
	"$ferry" train "${model[@]}" "${run[@]}" "${flags[@]}" --json r.jsonl --trace t.json >out.txt 2>err.txt ||
		{ echo "| $name | failed: $(tail -1 err.txt) |"; continue; }
	[ $name = auto ] && grep "^prefetch (auto)" out.txt >&2
	"$ferry" plan "${model[@]}" "${flags[@]}" 2>/dev/null | grep -E "^(placement|prefetch per)" >>out.txt
	python3 - "$name" <<'PY'
import json, re, statistics, sys
out = open("out.txt").read()
rs = [json.loads(l) for l in open("r.jsonl") if '"step"' in l]
ev = [e for e in json.load(open("t.json"))["traceEvents"] if e.get("ph") == "X"]
depth = re.search(r"activations\.prefetch=(\S+?)(,|$|\s)", out)
peaks = re.search(r"host tier peaks \(bytes, measured / planned\): (.*)", out)
bwd = [e for e in ev if e["tid"] == 0 and e["args"]["program"] == "backward"]
start = {}  # each layer's first backward task on the compute stream
for e in bwd:
    l = e["args"]["layer"]
    if l >= 0 and l not in start:
        start[l] = e["ts"]
span = sorted(start[l] for l in start)
layer_s = statistics.median(b - a for a, b in zip(span, span[1:])) if len(span) > 1 else 0
reads, exposed = [], 0.0
for r in (e for e in ev if e["cat"] == "read from NVMe" and e["args"]["program"] == "backward"):
    l, end = r["args"]["layer"], r["ts"] + r["dur"]
    ahead = start[l] - r["ts"]
    prev = max((e["ts"] + e["dur"] for e in bwd if e["ts"] + e["dur"] <= start[l]), default=start[l])
    exposed += max(0.0, min(end, start[l]) - prev)
    reads.append(f"{l}: {ahead / 1e3:.0f} ({ahead / layer_s:.1f})" if layer_s else f"{l}")
print(f"| {sys.argv[1]} | {depth.group(1) if depth else '?'} | "
      f"{statistics.median(r['step_ms'] for r in rs) / 1e3:.2f} s | {peaks.group(1) if peaks else 'no tiers'} | "
      f"{', '.join(reads) or 'none'} | {exposed / 1e3:.1f} ms |")
PY
done
