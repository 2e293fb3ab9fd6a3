#!/usr/bin/env bash
# MPI through pinned host staging (issue 22 items 2, 11; sched/comm_stage.c,
# exec/dp_reduce.c), the path the CUDA backend's ranks take without NCCL,
# run on the CPU backend with FERRY_COMM_STAGE=1: what the placement matrix
# (placements.matrix, its stage100 and stage rows: the unstaged bits, each
# rank measuring its plan) does not check.  Each rank's plan counts the
# staging buffer: 100 host bytes more than unstaged, with AdamW on the
# device, at --zero 3 on the host and with the parameters on the host at
# every stage; a malformed FERRY_COMM_STAGE or FERRY_COMM_STAGE_BYTES is
# refused by name (plan, and every rank of a run with one message); sizes
# read as ferry writes them elsewhere.  With --offload-params the staged
# run's trace shows each layer's average on the comm stream before its
# copy to the host (FSDP2's and DeepSpeed's order: NCCL cannot reach the
# host's gradient arrays).  Skips without mpirun or MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
STAGE=(-x FERRY_COMM_STAGE=1 -x FERRY_COMM_STAGE_BYTES=100)
SHAPE=(--layers 2 --channels 32 --heads 4 --vocab 257 --max-seq 32 --seq 16 --batch 2)
OP=(--offload-params --offload-optimizer cpu)
ranks() { grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g'; }

# the plan on 2 ranks: 100 host bytes of staging a rank (AdamW on the
# device), 100 more than unstaged (AdamW or the parameters on the host)
checks=$((checks + 1))
FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=100 "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 --json plan.json >/dev/null
planned=$(ranks plan.json device_bytes)
[ "$(echo "$planned" | grep -c ' 100$')" -eq 2 ] && echo "ok: staged on 2 ranks: every rank plans 100 host bytes of staging" ||
	fail "staged plan: [$planned]"
for flags in "--zero 3 --offload-optimizer cpu" "--zero 0 ${OP[*]}" "--zero 1 ${OP[*]}" "--zero 2 ${OP[*]}" "--zero 3 ${OP[*]}"; do
	checks=$((checks + 1))
	# shellcheck disable=SC2086
	"$FERRY" plan "${SHAPE[@]}" $flags --ranks 2 --json plan0.json >/dev/null &&
		FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=100 "$FERRY" plan "${SHAPE[@]}" $flags --ranks 2 --json plan.json >/dev/null
	more=$(paste <(ranks plan0.json device_bytes) <(ranks plan.json device_bytes) | awk '{ print $6 - $3 }' | sort -u)
	[ "$(ranks plan.json device_bytes | grep -c .)" = 2 ] && [ "$more" = 100 ] &&
		echo "ok: $flags staged on 2 ranks: every rank plans 100 host bytes more" ||
		fail "$flags staged: [$more] host bytes more"
done

# malformed staging variables: refused by name, with the form they take
for bad in 8X abc -1 0 10 1.5Q; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=$bad "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 >bad.out 2>&1 &&
		fail "FERRY_COMM_STAGE_BYTES=$bad: planned"
	grep -q "FERRY_COMM_STAGE_BYTES=$bad: the staging buffer's size, at least 64 bytes" bad.out &&
		echo "ok: FERRY_COMM_STAGE_BYTES=$bad: refused" || fail "FERRY_COMM_STAGE_BYTES=$bad: $(tail -n 2 bad.out)"
done
for bad in yes 2; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=$bad "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 >bad.out 2>&1 && fail "FERRY_COMM_STAGE=$bad: planned"
	grep -q "FERRY_COMM_STAGE=$bad: 1 (stage" bad.out && echo "ok: FERRY_COMM_STAGE=$bad: refused" ||
		fail "FERRY_COMM_STAGE=$bad: $(tail -n 2 bad.out)"
done
# sizes as ferry writes them elsewhere: K, M (powers of 1024)
for good in 1K:1024 8M:8388608 4096:4096; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=${good%%:*} "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 2 \
		--json good.json >good.out 2>&1
	got=$(ranks good.json device_bytes | awk '{ print $3 }' | sort -u)
	[ "$got" = "${good#*:}" ] && echo "ok: FERRY_COMM_STAGE_BYTES=${good%%:*}: ${good#*:} host bytes a rank" ||
		fail "FERRY_COMM_STAGE_BYTES=${good%%:*}: host bytes [$got] ($(tail -n 1 good.out))"
done
# a run: every rank stops, one message
for var in FERRY_COMM_STAGE_BYTES=8X FERRY_COMM_STAGE=yes; do
	checks=$((checks + 1))
	"${MPIRUN[@]}" -x "$var" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' \
		--sample 0 --threads 1 --steps 1 >bad.out 2>&1 && fail "$var: trained"
	[ "$(grep -c "$var: " bad.out)" = 1 ] && echo "ok: $var on 2 ranks: refused, one message" ||
		fail "$var on 2 ranks: $(tail -n 3 bad.out)"
done

# averaged_first TRACE: every layer's gradient copied to the host (d2h)
# after its average on the comm stream ended, and at least one of each;
# else why not
averaged_first() {
	python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
tid = {e["args"]["name"]: e["tid"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
def spans(t, prefix):
    out = {}
    for e in sorted((e for e in ev if e.get("ph") == "X" and e.get("tid") == tid[t]), key=lambda e: e["ts"]):
        name = e.get("name", "")
        layer = e.get("args", {}).get("layer", -1)
        if name.startswith(prefix) and layer >= 0:
            out.setdefault((name[len(prefix):], layer), []).append(e)
    return out
avg, out = spans("comm", "average grad: "), spans("d2h", "grad: ")
def no(why):
    print(why)
    sys.exit(1)
if not avg or set(avg) != set(out):
    no(f"averages {sorted(avg)[:3]}, copies {sorted(out)[:3]}")
for k in avg:
    if len(avg[k]) != len(out[k]) or any(c["ts"] < a["ts"] + a["dur"] for a, c in zip(avg[k], out[k])):
        no(f"{k}: copied to the host before its average ended")
print(f"{len(avg)} layer gradients, each averaged before its copy")
PY
}

# The staged schedule averages on the device before the copies (ZeRO-0
# and 1; ZeRO-2 reduce-scatters from host slots, on the host, and ZeRO-3
# on the device, without the weight ring's copies).
for z in 0 1; do
	checks=$((checks + 1))
	rm -f st.rank*.json
	"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 1 \
		--steps 2 --grad-accum 2 "${OP[@]}" --zero "$z" --trace st.json >st.out 2>&1 ||
		{ fail "trace --zero $z: $(tail -n 2 st.out)"; continue; }
	if d=$(averaged_first st.rank1.json); then
		echo "ok: --zero $z staged, rank 1's trace: $d"
	else
		fail "--zero $z staged, rank 1's trace: $d"
	fi
done
finish
