#!/usr/bin/env bash
# ferry calibrate and its cache: the measurements land in the cache of this
# machine ($XDG_CACHE_HOME/ferry), ferry info shows them, ferry bench
# predicts from them (column and --json); a cache made for another machine,
# by another version or too long ago is refused, saying why and what to run.
. "$(dirname "$0")/lib.bash"
export XDG_CACHE_HOME=$WORK/cache
SHAPE=(--backend cpu --layers 2 --channels 32 --heads 2 --max-seq 32 --batch 2 --seq 16 --threads 1)

expect_ok "calibrate --quick" "$FERRY" calibrate "${SHAPE[@]}" --quick
grep -q "saved to $XDG_CACHE_HOME/ferry/calibration-" out.txt || fail "calibrate says where it saved"
cache=$(ls "$XDG_CACHE_HOME"/ferry/calibration-*.json 2>/dev/null)
[ "$(echo "$cache" | wc -w)" -eq 1 ] || fail "one cache file, not: $cache"
grep -q '"fingerprint": "cpu=.*backend=cpu;device=CPU: 1 threads;ferry=' "$cache" || fail "the fingerprint names the machine"
grep -q '"op": "matmul"' "$cache" || fail "matrix products measured"
grep -q '"d2h_both_s"' "$cache" || fail "copies measured both ways at once"
grep -q "matrix products: [0-9.]* GFLOP/s" out.txt || fail "calibrate prints the figures"

# a second run with another shape keeps the first one's ops
n1=$(grep -c '"op":' "$cache")
expect_ok "calibrate another batch" "$FERRY" calibrate "${SHAPE[@]}" --batch 4 --quick
n2=$(grep -c '"op":' "$cache")
[ "$n2" -gt "$n1" ] || fail "a second calibration adds shapes ($n1 -> $n2)"

expect_ok "info" env FERRY_THREADS= "$FERRY" info
expect_ok "bench with predictions" "$FERRY" bench "${SHAPE[@]}" --steps 1 --json bench.json nothing_saveable \
	qkv_proj_offloaded
grep -qE '^qkv_proj_offloaded .* [0-9.]+ \([+-][0-9]+%\) +[0-9.]+ ms$' out.txt ||
	{ fail "bench prints a prediction per row"; cat out.txt >&2; }
grep -q '"predicted_ms": [0-9.]*' bench.json || fail "bench --json has predicted_ms"
python3 - bench.json <<'PY' || fail "bench --json: the predicted peak is the measured one"
import json, sys
rows = json.load(open(sys.argv[1]))
assert all(r["predicted_device_peak_bytes"] == r["device_peak_bytes"] for r in rows), rows
PY

cp "$cache" good.json
sed -i 's/"fingerprint": "cpu=/"fingerprint": "cpu=Another CPU /' "$cache"
expect_ok "bench with a foreign cache" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
grep -q "no predictions: calibration .* was made for another machine or backend" out.txt ||
	{ fail "a foreign cache is refused"; cat out.txt >&2; }
cp good.json "$cache"
sed -i 's/"version": "[^"]*"/"version": "0.0.1"/' "$cache"
expect_ok "bench with a cache of another version" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
grep -q "was made by ferry 0.0.1, this is .*: stale, run \`ferry calibrate\` again" out.txt ||
	{ fail "another version's cache is refused"; cat out.txt >&2; }
cp good.json "$cache"
sed -i 's/"created": [0-9]*/"created": 1000000000/' "$cache"
expect_ok "bench with an old cache" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
grep -q "days old (at most 30): stale" out.txt || { fail "an old cache is refused"; cat out.txt >&2; }
echo "not json" >"$cache"
expect_ok "bench with a broken cache" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
grep -q "no predictions: calibration .*: run \`ferry calibrate\` again" out.txt ||
	{ fail "a broken cache is refused"; cat out.txt >&2; }
cp good.json "$cache"

expect_error "calibrate --repeats 0" "--repeats must be 1..100" "$FERRY" calibrate --repeats 0
finish
