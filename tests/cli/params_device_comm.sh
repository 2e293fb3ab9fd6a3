#!/usr/bin/env bash
# --offload-params on ranks whose collectives run on device memory (issue
# 22 items 2 and 4; exec/dp_reduce.c): NCCL cannot reach the host's
# gradient arrays, so each layer's gradients are averaged on the device,
# in the ring's slot, before the ring copies them out (and the unstacked
# ones before their copies), as FSDP2 and DeepSpeed order it; what stays
# in host memory (ZeRO-1's parameter gather, ZeRO-2's host slots and norm
# sums) goes through a host communicator of the same ranks on the same
# stream (ZeRO-3 gathers each layer from the host slice on the device and
# reduce-scatters its gradients there, as FSDP2's CPU offload does).
# FERRY_COMM_STAGE=1 runs that schedule on the CPU: MPI
# through pinned host staging (here cut into 100-byte pieces) for the
# device's collectives, a host communicator of its own for the host's.
# On 2 ranks, GPT-2 and Llama, --grad-accum 2, --offload-params with
# --offload-optimizer cpu at every --zero stage and with stream at --zero
# 0 (the others refuse it): the saved files of the unstaged MPI run (the
# same values averaged in the same order).  The staged run's trace shows
# each layer's average on the comm stream before its copy to the host.
# On 3 ranks: within 1e-6 of one process at the global batch (not the
# unstaged bits: Open MPI adds three ranks' values in an order that
# depends on the message's size, and 100-byte pieces are not the whole).  Every
# rank's measured bytes are `ferry plan --ranks 2`'s, staging buffer
# included.  Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 3
off=(--offload-params --offload-optimizer)
STAGE=(-x FERRY_COMM_STAGE=1 -x FERRY_COMM_STAGE_BYTES=100)

# staged NAME N FLAGS...: `trains`, through staging
staged() {
	local name=$1 n=$2; shift 2
	rm -rf "$name" "$name.state"
	"${MPIRUN[@]}" "${STAGE[@]}" -np "$n" "$FERRY" train "${common[@]}" "$@" --save "$name" >"$name.out" 2>&1 ||
		{ fail "$name staged on $n ranks: $(tail -n 2 "$name.out")"; return 1; }
	grep -q "^collectives: MPI through host staging (FERRY_COMM_STAGE=1)" "$name.out" ||
		{ fail "$name: the start does not say it stages"; return 1; }
}

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

for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	for mode in "0 cpu" "1 cpu" "2 cpu" "3 cpu" "0 stream"; do
		read -r z opt <<<"$mode"
		checks=$((checks + 1))
		trains plain 2 "${shape[@]}" --batch 2 --grad-accum 2 "${off[@]}" "$opt" --zero "$z" || continue
		staged dev 2 "${shape[@]}" --batch 2 --grad-accum 2 "${off[@]}" "$opt" --zero "$z" || continue
		if same_save plain dev; then
			echo "ok: $model --zero $z --offload-params --offload-optimizer $opt, --grad-accum 2, on 2 ranks:" \
				"staged (collectives on device memory) saves the unstaged run's bits"
		else
			fail "$model --zero $z --offload-params --offload-optimizer $opt: staged and unstaged differ"
		fi
	done
done

# The staged schedule averages on the device before the copies (ZeRO-0
# and 1; ZeRO-2 reduce-scatters from host slots, on the host, and ZeRO-3
# on the device, without the weight ring's copies).
for z in 0 1; do
	checks=$((checks + 1))
	rm -f st.rank*.json
	"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --steps 2 --batch 2 --grad-accum 2 \
		"${off[@]}" cpu --zero "$z" --trace st.json >st.out 2>&1 || { fail "trace --zero $z: $(tail -n 2 st.out)"; continue; }
	if d=$(averaged_first st.rank1.json); then
		echo "ok: --zero $z staged, rank 1's trace: $d"
	else
		fail "--zero $z staged, rank 1's trace: $d"
	fi
done

# 3 ranks (the last ZeRO slice padded) against one process at the global batch
for model in gpt llama; do
	unset -n shape
	declare -n shape=$model
	"$FERRY" train "${common[@]}" "${shape[@]}" --steps 8 --batch 6 "${off[@]}" cpu --json one.json >one.out 2>&1 ||
		{ fail "$model: one process: $(tail -n 2 one.out)"; continue; }
	for z in 0 1 2 3; do
		checks=$((checks + 1))
		rm -f many.json
		staged on3 3 "${shape[@]}" --steps 8 --batch 2 "${off[@]}" cpu --zero "$z" --json many.json || continue
		if d=$(losses_agree one.json many.json); then
			echo "ok: $model --zero $z --offload-params staged on 3 ranks against one process: $d"
		else
			fail "$model --zero $z --offload-params staged on 3 ranks against one process: $d"
		fi
	done
done

# plan = measured on every rank, the staging buffer's 100 bytes included
per_rank() { grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g'; }
SHAPE=(--layers 2 --channels 32 --heads 4 --vocab 257 --max-seq 32 --seq 16 --batch 2)
for z in 0 1 2 3; do
	checks=$((checks + 1))
	FERRY_COMM_STAGE=1 FERRY_COMM_STAGE_BYTES=100 "$FERRY" plan "${SHAPE[@]}" "${off[@]}" cpu --zero "$z" --ranks 2 \
		--json plan.json >/dev/null 2>&1
	"$FERRY" plan "${SHAPE[@]}" "${off[@]}" cpu --zero "$z" --ranks 2 --json plan0.json >/dev/null 2>&1
	"${MPIRUN[@]}" "${STAGE[@]}" -np 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 1 \
		--steps 2 "${off[@]}" cpu --zero "$z" --json run.jsonl >run.out 2>&1
	planned=$(per_rank plan.json device_bytes) measured=$(per_rank run.jsonl device_peak_bytes)
	more=$(paste <(per_rank plan0.json device_bytes) <(echo "$planned") | awk '{ print $6 - $3 }' | sort -u)
	if [ "$(echo "$planned" | grep -c .)" = 2 ] && [ "$planned" = "$measured" ] && [ "$more" = 100 ]; then
		echo "ok: --zero $z --offload-params staged on 2 ranks: every rank measures its plan, 100 host bytes of staging"
	else
		fail "--zero $z --offload-params staged: planned [$planned], measured [$measured], more [$more]"
	fi
done
finish
