#!/usr/bin/env bash
# ferry calibrate and its cache: the measurements land in the cache of this
# machine ($XDG_CACHE_HOME/ferry), ferry info shows them, ferry bench
# predicts from them (column and --json); a cache made for another machine,
# by another version or too long ago is refused, saying why and what to run.
# Host tiers: with --nvme-dir the NVMe tier's rates are measured (the
# directory left empty) and info says so; the CXL figures stay the
# defaults without CPU-less nodes or on simulated ones; --policy auto
# judges the tiers at those figures and says which are measured.
# --policy auto calibrates what the cache lacks itself, and warns when the
# calibration was taken on a busy machine.
. "$(dirname "$0")/lib.bash"
export XDG_CACHE_HOME=$WORK/cache
SHAPE=(--backend cpu --layers 2 --channels 32 --heads 2 --max-seq 32 --batch 2 --seq 16 --threads 1)
# a cache's load figures set to a quiet machine's (this one may be busy)
quiet_cache() {
	python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c.update(op_spread=0.01, others_cpu=0); json.dump(c, open(sys.argv[1], "w"))' "$1"
}

expect_ok "calibrate --quick" "$FERRY" calibrate "${SHAPE[@]}" --quick
grep -q "saved to $XDG_CACHE_HOME/ferry/calibration-" out.txt || fail "calibrate says where it saved"
cache=$(ls "$XDG_CACHE_HOME"/ferry/calibration-*.json 2>/dev/null)
[ "$(echo "$cache" | wc -w)" -eq 1 ] || fail "one cache file, not: $cache"
grep -q '"fingerprint": "cpu=.*backend=cpu;device=CPU: 1 threads;ferry=[0-9.]*;kernels=[0-9]*"' "$cache" ||
	fail "the fingerprint names the machine and the kernels' revision"
grep -q '"op": "matmul"' "$cache" || fail "matrix products measured"
grep -q '"d2h_both_s"' "$cache" || fail "copies measured both ways at once"
grep -q "matrix products: [0-9.]* GFLOP/s" out.txt || fail "calibrate prints the figures"
grep -qE "device zeroing ([0-9.]+ GB/s|not measured), device copies ([0-9.]+ GB/s|not measured)," out.txt &&
	! grep -q " 0.00 GB/s" out.txt || fail "a figure not measured says so, not 0.00 GB/s: $(grep zeroing out.txt)"
grep -qE '"in_step_factor": (0\.[5-9]|[1-3]\.)' "$cache" || fail "the in-step factor fitted to untraced steps"
grep -q "inside whole steps the ops take [0-9.]*x their fastest traced call" out.txt ||
	fail "calibrate prints the in-step factor"

# a second run with another shape keeps the first one's ops
n1=$(grep -c '"op":' "$cache")
expect_ok "calibrate another batch" "$FERRY" calibrate "${SHAPE[@]}" --batch 4 --quick
# a device arena smaller than the copies' 2 x 128 MiB window: they copy through what fits
XDG_CACHE_HOME=$WORK/cache_small expect_ok "calibrate under --device-mem 8M" "$FERRY" calibrate "${SHAPE[@]}" \
	--device-mem 8M --quick
grep -q "copies of [0-9.]* KiB: device-to-host [0-9.]* GB/s" out.txt || fail "copies measured in a small arena"
n2=$(grep -c '"op":' "$cache")
[ "$n2" -gt "$n1" ] || fail "a second calibration adds shapes ($n1 -> $n2)"

# two calibrations at once, of other shapes: the cache's lock makes the
# second wait and build on the first, so both keep their shapes (each used
# to save over the other's).  They overlap for certain: the lock is held
# until both are waiting for it.
waiting="waiting for another ferry calibrate of this machine to finish"
flock "$cache.lock" bash -c 'touch held2; for i in $(seq 1 1200); do
	[ "$(grep -l "$1" c3.txt c5.txt 2>/dev/null | wc -l)" -eq 2 ] && exit 0; sleep 0.1; done; exit 1' _ "$waiting" &
holder=$!
for i in $(seq 1 100); do [ -e held2 ] && break; sleep 0.1; done
"$FERRY" calibrate "${SHAPE[@]}" --batch 3 --quick >c3.txt 2>&1 &
c3=$!
"$FERRY" calibrate "${SHAPE[@]}" --batch 5 --quick >c5.txt 2>&1 || fail "calibrate --batch 5 beside another: $(cat c5.txt)"
wait $c3 || fail "calibrate --batch 3 beside another: $(cat c3.txt)"
checks=$((checks + 1))
wait $holder || fail "the two calibrations did not both wait for the lock: $(cat c3.txt c5.txt)"
for b in 2 3 4 5; do
	grep -q "\"B\": $b," "$cache" || fail "concurrent calibrations: batch $b's ops lost"
done

expect_ok "info" "$FERRY" info
grep -q "calibration-.*\.lock" out.txt && fail "info lists the lock file as a calibration"
grep -q "^calibrations in $XDG_CACHE_HOME/ferry:" out.txt && grep -q "device=CPU: 1 threads" out.txt &&
	grep -q "matrix products: [0-9.]* GFLOP/s" out.txt || { fail "info lists the calibration"; cat out.txt >&2; }

# host tiers: without CPU-less nodes (this machine) the CXL figures are the
# defaults and info says so; --nvme-dir measures the NVMe tier there and
# leaves the directory empty; a later calibration without it keeps them;
# a simulated topology's nodes are not measured
cpuless=0
for n in /sys/devices/system/node/node[0-9]*; do
	[ -r "$n/cpulist" ] && [ -z "$(tr -d ' \n' <"$n/cpulist")" ] && cpuless=$((cpuless + 1))
done
if [ "$cpuless" -eq 0 ]; then
	grep -q "host tier cxl: copies at 0.50 (default), the CPU AdamW at 0.25 (default) of DRAM's speed; no CPU-less node measured" \
		out.txt || { fail "info: the CXL figures are the defaults"; cat out.txt >&2; }
fi
grep -q "host tier nvme: reads 2.00 GB/s (default), writes 1.00 GB/s (default); ferry calibrate --nvme-dir DIR measures them" \
	out.txt || { fail "info: the NVMe figures are the defaults"; cat out.txt >&2; }
mkdir nvme
expect_ok "calibrate --nvme-dir" "$FERRY" calibrate "${SHAPE[@]}" --quick --nvme-dir nvme
[ -z "$(ls -A nvme)" ] || fail "calibrate --nvme-dir leaves files behind: $(ls -A nvme)"
python3 - "$cache" <<'PY' || fail "the cache has the NVMe tier's rates"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["nvme_read_Bps"] > 0 and c["nvme_write_Bps"] > 0, c
assert c["nvme_dir"].endswith("/nvme") and c["nvme_mode"], (c["nvme_dir"], c["nvme_mode"])
PY
expect_ok "calibrate without --nvme-dir" "$FERRY" calibrate "${SHAPE[@]}" --quick
expect_ok "info after --nvme-dir" "$FERRY" info
grep -qE "host tier nvme: reads [0-9.]+ GB/s \(measured\), writes [0-9.]+ GB/s \(measured\) in $(cd nvme && pwd -P) \(" \
	out.txt || { fail "info: the NVMe rates measured, and where"; cat out.txt >&2; }
printf 'node 0 cpus 2 mem 64G\nnode 1 cpus 0 mem 64G\n' > cxl.txt
expect_ok "calibrate --topology" "$FERRY" calibrate "${SHAPE[@]}" --quick --topology cxl.txt
grep -q "host tiers: node 1 of cxl.txt is simulated (--topology): not measured" out.txt ||
	{ fail "calibrate says a simulated node is not measured"; cat out.txt >&2; }
python3 - "$cache" <<'PY' || fail "a simulated node gives no CXL figure"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["cxl_copy_factor"] == 0 and c["cxl_adamw_factor"] == 0 and c["cxl_nodes"] == [], c["cxl_nodes"]
assert c["nvme_read_Bps"] > 0, "the NVMe rates are kept"
PY
# an NVMe directory that fills up (a file-size limit) costs the NVMe
# figures only: the rest is measured and saved, with a warning
cp "$cache" before_full.json
checks=$((checks + 1))
bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' full "$FERRY" calibrate "${SHAPE[@]}" --batch 6 --quick --nvme-dir nvme \
	>out.txt 2>err.txt
rc=$?
if [ $rc -ne 0 ] || ! grep -q "^ferry calibrate: warning: the NVMe tier was not measured (.*File too large" err.txt; then
	fail "calibrate --nvme-dir on a full directory: exit $rc: $(cat err.txt)"
elif ! grep -q '"B": 6,' "$cache" || ! grep -q "^saved to " out.txt; then
	fail "calibrate --nvme-dir on a full directory: the other figures are saved"
else
	echo "ok: calibrate --nvme-dir on a full directory -> $(cat err.txt)"
fi
python3 - "$cache" before_full.json <<'PY' || fail "the NVMe rates measured before are kept"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["nvme_read_Bps"] == b["nvme_read_Bps"] > 0 and a["nvme_write_Bps"] == b["nvme_write_Bps"] > 0, a
PY
[ -z "$(ls -A nvme)" ] || fail "calibrate --nvme-dir leaves files behind: $(ls -A nvme)"
expect_error "calibrate --nvme-dir missing" "--nvme-dir nothere: No such file" \
	"$FERRY" calibrate "${SHAPE[@]}" --quick --nvme-dir nothere
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
# every figure is checked, finite and in its range: a value out of it
# is refused naming it (bench predicts nothing, --policy auto calibrates
# again, saying why) and calibrate starts afresh (it predicted -998 ms,
# inf ms, and read a string of ops as none)
for bad in 'c["step_host_s"] = -1' 'c["task_gap_s"] = 1e308' 'c["ops"] = "x"' 'c["in_step_factor"] = 1e308' \
	'c["d2d_Bps"] = -5' 'c["copies"][0]["d2h_s"] = 1e308' 'c["ops"][0]["seconds"] = -1' 'c["ops"][0]["B"] = -3' \
	'c["cxl_copy_factor"] = 1e300' 'c["others_cpu"] = 1.5'; do
	python3 -c 'import json, sys; c = json.load(open("good.json")); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))' \
		"$cache" "$bad"
	expect_ok "bench with $bad" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
	grep -q "^no predictions: calibration .*: run \`ferry calibrate\` again" out.txt ||
		{ fail "$bad: bench predicts nothing"; cat out.txt >&2; }
	expect_ok "--policy auto with $bad" "$FERRY" plan "${SHAPE[@]}" --policy auto
	grep -q "^ferry plan: --policy auto: this machine's calibration cannot be used; calibrating now" err.txt &&
		grep -q "^ferry plan: starting a new calibration: calibration .*: run \`ferry calibrate\` again" err.txt &&
		grep -q "^ferry plan: calibrated; saved to $cache" err.txt ||
		fail "$bad: --policy auto calibrates again, saying why: $(cat err.txt)"
done
python3 -c 'import json, sys; c = json.load(open("good.json")); c["cxl_copy_factor"] = 1e300; json.dump(c, open(sys.argv[1], "w"))' \
	"$cache"
expect_ok "calibrate over a bad figure" "$FERRY" calibrate "${SHAPE[@]}" --quick
grep -q "^starting a new calibration: .*cxl_copy_factor is 1e+300, not 0 or 0.001..1000" out.txt ||
	fail "calibrate says why it starts afresh: $(head -n 2 out.txt)"
expect_ok "plan --policy auto after it" "$FERRY" plan "${SHAPE[@]}" --policy auto
cp good.json "$cache"
echo "not json" >"$cache"
expect_ok "bench with a broken cache" "$FERRY" bench "${SHAPE[@]}" --steps 1 nothing_saveable
grep -q "no predictions: calibration .*: run \`ferry calibrate\` again" out.txt ||
	{ fail "a broken cache is refused"; cat out.txt >&2; }
cp good.json "$cache"

# --policy auto: the choice, in words and JSON, and a plan that fits
expect_ok "plan --policy auto" "$FERRY" plan "${SHAPE[@]}" --policy auto --device-mem 2M
grep -q "^--policy auto: " out.txt && grep -q "^presets, as the calibration predicts them:" out.txt &&
	grep -qE "^  [a-z_]+ +(kept on the device|offloaded|recomputed in the backward pass)" out.txt &&
	grep -q "^fits: needs" out.txt || { fail "plan --policy auto says what it chose and why"; cat out.txt >&2; }
expect_ok "plan --policy auto --json" "$FERRY" plan "${SHAPE[@]}" --policy auto --device-mem 2M --json auto.json
python3 - auto.json <<'PY' || fail "plan --policy auto --json: the choice and its plan"
import json, sys
d = json.load(open(sys.argv[1]))
a, p = d["auto"], d["plan"]
assert a["fits"] and a["device_peak_bytes"] <= 2 << 20, a
assert p["policy"] == a["policy"][:len(p["policy"])], (p["policy"], a["policy"])
assert a["choices"] and all(c["placement"] in ("device", "offload", "remat") for c in a["choices"]), a
best = min(x["predicted_ms"] for x in a["presets"] if x["valid"] and x["fits"])
assert a["predicted_ms"] <= best * 1.03, (a["predicted_ms"], best)
PY
make_corpus
expect_ok "train --policy auto" "$FERRY" train "${SHAPE[@]}" --policy auto --device-mem 2M --data 'corpus_train_*.bin' \
	--steps 2 --sample 0
grep -q "^--policy auto: custom:" out.txt || { fail "train --policy auto prints its choice"; cat out.txt >&2; }
# with host tiers (a simulated node without CPUs: CXL), auto also chooses
# each kind's tier: ample DRAM keeps the streamed state there (the default:
# CXL), says why, and trains with it
printf 'node 0 cpus 2 mem 64G\nnode 1 cpus 0 mem 64G\n' > cxl.txt
expect_ok "plan --policy auto on tiers" "$FERRY" plan "${SHAPE[@]}" --policy auto --offload-optimizer stream \
	--topology cxl.txt
grep -q "^host tiers: params=dram,optimizer=dram (searched [0-9]* placements" out.txt &&
	grep -q "^  optimizer .* on dram, not cxl where the default puts it; cxl would add .* of DRAM's speed, defaults)" out.txt &&
	grep -qE "^  dram \(node 0\) .* optimizer" out.txt || { fail "auto chooses the tiers and says why"; cat out.txt >&2; }
expect_ok "plan --policy auto on tiers --json" "$FERRY" plan "${SHAPE[@]}" --policy auto --offload-optimizer stream \
	--topology cxl.txt --json tiers.json
python3 - tiers.json <<'PY' || fail "plan --policy auto --json: the tiers' choice"
import json, sys
t = json.load(open(sys.argv[1]))["auto"]["host_tiers"]
assert t["spec"] == "params=dram,optimizer=dram" and t["default_fits"], t
k = {x["kind"]: x for x in t["kinds"]}
assert k["optimizer"]["tier"] == "dram" and k["optimizer"]["default"] == "cxl", k
assert all(o["predicted_ms"] >= 0 for o in k["optimizer"]["options"]), k
cxl = [o for o in k["optimizer"]["options"] if o["tier"] == "cxl"][0]
assert cxl["copy_speed"] == 0.5 and not cxl["speed_measured"], cxl
PY
# tiles given: auto's JSON names them beside its choices, and stays JSON
expect_ok "plan --policy auto --json, tiled" "$FERRY" plan "${SHAPE[@]}" --policy auto --mlp-tile 8 --loss-tile 8 \
	--json tiled_auto.json
python3 - tiled_auto.json <<'PY' || fail "plan --policy auto --json with tiles"
import json, sys
a = json.load(open(sys.argv[1]))["auto"]
assert (a["mlp_tile"], a["loss_tile"]) == (8, 8), a
assert isinstance(a["choices"], list) and all("name" in c for c in a["choices"]), a["choices"]
PY
# the choice, its tiers included, is a placement: fed back with the same
# machine it is the same plan
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["plan"]["place"])' tiers.json >auto_place.txt
grep -q "adam=host(params=dram,optimizer=dram):stream" auto_place.txt ||
	fail "the plan's placements name auto's tiers: $(cat auto_place.txt)"
expect_ok "auto's placements fed back" "$FERRY" plan "${SHAPE[@]}" --topology cxl.txt --place "$(cat auto_place.txt)" \
	--json fed.json
python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["plan"] != json.load(open(sys.argv[2])))' \
	tiers.json fed.json || fail "auto's placements fed back give another plan"
# the NVMe tier as a candidate, at the rates calibrate measured
expect_ok "plan --policy auto on tiers with NVMe" "$FERRY" plan "${SHAPE[@]}" --policy auto --offload-optimizer stream \
	--topology cxl.txt --nvme-dir nvme
grep -qE "^  optimizer .*; nvme would add [0-9.]+ ms \(file reads at [0-9.]+, writes at [0-9.]+ GB/s, measured\)" out.txt ||
	{ fail "auto judges the NVMe tier at the measured rates"; cat out.txt >&2; }
expect_ok "train --policy auto on tiers" "$FERRY" train "${SHAPE[@]}" --policy auto --offload-optimizer stream \
	--topology cxl.txt --data 'corpus_train_*.bin' --steps 2 --sample 0
grep -q "^host tiers: params .* on dram (node 0); optimizer .* on dram (node 0);" out.txt ||
	{ fail "train --policy auto places the state where auto chose"; cat out.txt >&2; }
quiet_cache "$cache" # (one line on stderr: no warning that it was busy)
expect_error "auto on tiers too small" "no placement fits the host memory or the host tiers" \
	"$FERRY" plan "${SHAPE[@]}" --policy auto --offload-optimizer cpu --topology <(printf 'node 0 cpus 2 mem 1M free 4K\nnode 1 cpus 0 mem 1M free 4K\n')

# --policy auto on a new machine: it calibrates what the model needs itself
# (as ferry calibrate --quick would, into the cache, saying so with each
# part's progress), then trains; a second run finds the shapes there; a
# run at another batch measures that batch's, keeping the first's
fresh=(env XDG_CACHE_HOME="$WORK/fresh" "$FERRY" train "${SHAPE[@]}" --policy auto --data 'corpus_train_*.bin' --sample 0)
expect_ok "train --policy auto without a calibration" "${fresh[@]}" --steps 2
grep -q "^ferry train: --policy auto: no calibration of this machine yet ($WORK/fresh/ferry/calibration-.*json); calibrating now, as \`ferry calibrate --quick\` with this model and batch would$" err.txt &&
	grep -q "^ferry train: measuring 1/4 (.* s): the model's ops: a warm-up step, then 1 traced step" err.txt &&
	grep -q "^ferry train: measuring 4/4 (.* s): the CPU AdamW" err.txt &&
	grep -q "^ferry train: calibrated; saved to $WORK/fresh/ferry/calibration-" err.txt ||
	{ fail "auto on a new machine says it calibrates, with progress"; cat err.txt >&2; }
grep -q "^--policy auto: custom:" out.txt && grep -q "^step *2/2 | loss" out.txt ||
	{ fail "auto on a new machine trains"; cat out.txt >&2; }
fcache=$(ls "$WORK"/fresh/ferry/calibration-*.json)
grep -q '"B": 2,' "$fcache" || fail "the new calibration is in the cache"
expect_ok "train --policy auto again" "${fresh[@]}" --steps 1
grep -q "calibrating now" err.txt && fail "auto calibrates again although the cache has the shapes: $(cat err.txt)"
expect_ok "train --policy auto at another batch" "${fresh[@]}" --steps 1 --batch 3
grep -q "^ferry train: --policy auto: this machine's calibration (.*) has not measured [0-9]* of a step's ops at their shapes; calibrating now" err.txt ||
	{ fail "auto measures the shapes the cache lacks"; cat err.txt >&2; }
grep -q '"B": 2,' "$fcache" && grep -q '"B": 3,' "$fcache" || fail "both batches' shapes in the cache"
# while another calibration holds the cache's lock, auto waits for it
checks=$((checks + 1))
flock "$fcache.lock" sh -c 'touch held; sleep 2' &
for i in $(seq 1 100); do [ -e held ] && break; sleep 0.1; done
"${fresh[@]}" --steps 1 --batch 5 >lock_out.txt 2>lock_err.txt || fail "auto after the lock: $(cat lock_err.txt)"
wait
grep -q "^ferry train: waiting for another ferry calibrate of this machine to finish" lock_err.txt ||
	fail "auto waits for the cache's lock: $(cat lock_err.txt)"
grep -q '"B": 5,' "$fcache" || fail "auto after the lock saves its shapes"

# a calibration taken on a busy machine (the op calls' spread, or the share
# of the CPUs other processes took) is used with a warning; a quiet one
# without
quiet_cache "$fcache"
expect_ok "auto on a quiet calibration" "${fresh[@]}" --steps 1
grep -q "was taken while it was busy" err.txt && fail "no warning on a quiet calibration: $(cat err.txt)"
for busy in 'c["op_spread"] = 0.6:calls of one op varied by 60%' \
	'c["others_cpu"] = 0.7:other processes took 70% of the CPUs'"'"' time'; do
	python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))' \
		"$fcache" "${busy%%:*}"
	expect_ok "auto on a calibration with ${busy%%:*}" "${fresh[@]}" --steps 1
	grep -q "^ferry train: warning: this machine's calibration ($fcache) was taken while it was busy (${busy#*:}): its predictions may be too slow; run \`ferry calibrate\` when the machine is quiet$" err.txt ||
		{ fail "auto warns that the calibration was taken under load (${busy#*:})"; cat err.txt >&2; }
	quiet_cache "$fcache"
done
# the load is measured: other processes keeping the CPUs busy while it
# calibrates (three spinning shells beside its one thread) show in the
# figure, and calibrate says the machine looked busy
checks=$((checks + 1))
hogs=()
for i in 1 2 3; do timeout 60 sh -c 'while :; do :; done' & hogs+=($!); done
XDG_CACHE_HOME="$WORK/busy" "$FERRY" calibrate "${SHAPE[@]}" --channels 64 --batch 8 --seq 32 --repeats 2 >out.txt 2>err.txt
rc=$?
for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
wait "${hogs[@]}" 2>/dev/null
python3 - "$WORK"/busy/ferry/calibration-*.json <<'PY' || fail "a calibration beside busy processes: exit $rc: $(cat err.txt)"
import json, sys
c = json.load(open(sys.argv[1]))
assert 0.25 < c["others_cpu"] <= 1, c["others_cpu"]
PY
grep -q "^  the machine looked busy (.*other processes took [0-9]*% of the CPUs' time): calibrate again when it is quiet" out.txt ||
	fail "calibrate says the machine looked busy: $(grep -i busy out.txt)"

expect_error "calibrate --repeats 0" "--repeats must be 1..100" "$FERRY" calibrate --repeats 0
finish
