#!/usr/bin/env bash
# ferry plan for the machine the user names (--target), from this one:
# a GPU's plan (bf16, its device memory) and --policy auto priced with the
# target's committed calibration, never this machine's; this machine's
# calibration refused up front where the model cannot run here, and not
# capped by --device-mem.  The built-in targets are what
# tools/make_targets.py makes from the committed measurements.  The CUDA
# plans need the CUDA backend compiled in (the default build); the
# sanitizer builds run the rest.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"
L8=(--model llama --layers 32 --channels 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --max-seq 4096
	--rope-theta 500000 --batch 1 --seq 4096)
calibrations() { ls "$XDG_CACHE_HOME"/ferry/calibration-*.json 2>/dev/null | grep -c .; }

# the committed targets: nothing but the committed measurements, as the script derives them
checks=$((checks + 1))
mkdir made
if (cd "$ROOT" && python3 tools/make_targets.py "$WORK/made") 2>err.txt; then
	for t in "$ROOT"/src/cost/targets/*.json; do
		cmp -s "$t" "made/$(basename "$t")" || fail "$(basename "$t") is not what tools/make_targets.py makes"
	done
	echo "ok: src/cost/targets/ is tools/make_targets.py's output from bench/results/"
else
	fail "tools/make_targets.py: $(cat err.txt)"
fi

# an 8B model cannot run here: --policy auto says so before calibrating, naming --target
checks=$((checks + 1))
"$FERRY" plan "${L8[@]}" --policy auto --device-mem 80G >out.txt 2>err.txt && fail "8B auto on this machine: exit 0"
if grep -q "plan for the machine you will run on with --target (h100, h200" err.txt && ! grep -qi "arena full" err.txt &&
	[ "$(calibrations)" = 0 ]; then
	echo "ok: 8B --policy auto here: $(tail -1 err.txt | cut -c1-150)..."
else
	fail "8B --policy auto on this machine: $(cat err.txt) ($(calibrations) calibrations written)"
fi

# --device-mem caps the run planned, not the calibration's steps
checks=$((checks + 1))
"$FERRY" plan --policy auto --device-mem 2M >out.txt 2>err.txt && fail "--device-mem 2M: exit 0"
grep -q "no placement fits: the least device memory any needs is" err.txt && ! grep -qi "arena full" err.txt &&
	echo "ok: --device-mem 2M: $(tail -1 err.txt)" || fail "--device-mem 2M: $(cat err.txt)"

expect_error "an unknown target" "the built-in ones are h100, h200" "$FERRY" plan --target h300
expect_error "--target and --backend" "--target plans for that machine's backend" \
	"$FERRY" plan --target h100 --backend cuda

# a calibration file made on a machine is a target: this machine's, saved by the run above
calib=$(ls "$XDG_CACHE_HOME"/ferry/calibration-*.json | head -1)
cp "$calib" mine.json
expect_error "a calibration file without --device-mem" "give --device-mem" "$FERRY" plan --target mine.json
rm -rf "$XDG_CACHE_HOME"
checks=$((checks + 1))
if "$FERRY" plan --target mine.json --device-mem 64M --policy auto >out.txt 2>err.txt &&
	grep -q "^target: mine.json, .* (the cpu backend), device memory 64.0 MiB" out.txt &&
	grep -q "^--policy auto: " out.txt && [ "$(calibrations)" = 0 ]; then
	echo "ok: --target a calibration file: priced with it, nothing measured here"
else
	fail "--target mine.json: $(cat err.txt) $(head -3 out.txt)"
fi

if ! "$FERRY" info 2>/dev/null | grep -q '^  cuda '; then
	echo "skipped here: the GPU targets' plans (ferry built without the CUDA backend)"
	finish
	exit
fi

# a target's plan is the CUDA backend's at its device memory
checks=$((checks + 1))
"$FERRY" plan --target h100 --json t.json >/dev/null 2>err.txt || fail "--target h100: $(cat err.txt)"
"$FERRY" plan --backend cuda --device-mem 79974M --json c.json >/dev/null 2>err.txt || fail "cuda: $(cat err.txt)"
cmp -s t.json c.json && grep -q "\"activation_dtype\": \"bf16\"" t.json && echo "ok: --target h100 plans as --backend cuda --device-mem 79974M" ||
	fail "--target h100's plan differs from the CUDA backend's at 79974M"
for t in "h100:78.10 GiB" "h200:138.72 GiB"; do
	checks=$((checks + 1))
	"$FERRY" plan --target "${t%%:*}" >out.txt 2>err.txt &&
		grep -q "^target: ${t%%:*}, NVIDIA .* (the cuda backend), device memory ${t#*:}; its figures: " out.txt &&
		grep -q "^plan: gpt2, 2 layers, batch 16 x 64, bf16 activations" out.txt &&
		echo "ok: --target $t" || fail "--target $t: $(cat err.txt) $(head -2 out.txt)"
done

# Llama 3.1 8B's shape on an H100, from here: a placement that fits its
# 78.10 GiB and its host, priced with the H100's figures, nothing measured here
checks=$((checks + 1))
if "$FERRY" plan "${L8[@]}" --target h100 --policy auto --json p.json >out.txt 2>err.txt; then
	peak=$(grep -o '"peak_bytes": [0-9]*' p.json | head -1 | grep -o '[0-9]*$')
	host=$(grep -o '"host": {"activations_bytes": [0-9]*, "total_bytes": [0-9]*' p.json | head -1 | grep -o '[0-9]*$')
	if [ "${peak:-0}" -gt 0 ] && [ "$peak" -le $((79974 << 20)) ] && [ "${host:-0}" -gt 0 ] &&
		[ "$host" -le $((128891 << 20)) ] &&
		[ "$(calibrations)" = 0 ]; then
		echo "ok: 8B on the h100 target: device $peak, host $host bytes"
	else
		fail "8B on h100: peak ${peak:-?} host ${host:-?} ($(calibrations) calibrations written)"
	fi
else
	fail "8B --target h100 --policy auto: $(cat err.txt)"
fi
finish
