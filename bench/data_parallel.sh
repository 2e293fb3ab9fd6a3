#!/usr/bin/env bash
# Data parallel on CPU ranks (issue 22 items 8 and 11): one process against
# two ranks (mpirun -np 2) at the same batch per rank, each rank on one
# thread; per model:
#   - ferry calibrate in one process and on 2 ranks (a cache of its own,
#     made here): the 2-rank one also measures the collectives, and both
#     print the step the cost model predicts for these flags;
#   - the same on 2 ranks with --zero 2 (each layer's gradients
#     reduce-scattered during the backward, overlapped with the layers
#     below, in place of --zero 0's all-reduces);
#   - ferry train, interleaved: 1 process, 2 ranks at --zero 0, 2 ranks
#     at --zero 2, REPEATS times, STEPS steps each; the median step time
#     of each run after its first step (and the fastest step of all:
#     what ferry calibrate fits the prediction to);
#   - one 2-rank run of each --zero with --trace: the collectives on rank
#     0's comm track in its traced step, their time, and the part of it
#     the compute stream had nothing to do (exposed), beside the
#     prediction's;
#   - the machine's load average before and after.
# Every run, calibrations included, at one --policy (the prediction is of
# the calibration's policy: ferry train's default, everything_saveable,
# runs no recomputation, which nothing_saveable's prediction priced).
# Prints a Markdown table per model; with KEEP=DIR set, the calibrations'
# outputs, their simulated steps (--predict-trace) and the traces go to
# DIR/MODEL/.
#
#   [KEEP=DIR] bash bench/data_parallel.sh [FERRY] [REPEATS] [STEPS] [MODELS]
#   (default: build/ferry 3 4 "gpt2 llama")
set -u
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/data_parallel.sh [FERRY] [REPEATS] [STEPS] [MODELS]   (default: build/ferry 3 4 \"gpt2 llama\")"
	exit 0 ;;
esac
ferry=$(realpath "${1:-build/ferry}")
repeats=${2:-3} steps=${3:-4} models=${4:-gpt2 llama}
policy=nothing_saveable
keep=${KEEP:+$(realpath -m "$KEEP")}
command -v mpirun >/dev/null || { echo "no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
work=$(mktemp -d) && cd "$work" || exit 1
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME=$work/cache OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -np 2)
for d in 0 1 2 3; do
	for i in $(seq 1 3000); do echo "doc $d line $i: pack my box with five dozen liquor jugs and more words"; done >"t$d.txt"
done
"$ferry" data --out c --val-fraction 0.1 t?.txt >/dev/null 2>&1 || { echo "cannot make a corpus" >&2; exit 1; }

# median and fastest step time (ms) of a --json file, after its first step
median_ms() {
	python3 -c 'import json, statistics, sys
rs = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if "\"step\"" in l][1:]
print("%.1f/%.1f" % (statistics.median(rs), min(rs)))' "$1"
}

# the collectives of a trace: their time and the part with the compute stream idle (ms)
comm_in_trace() {
	python3 -c 'import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
names = {}
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    if e.get("name") == "thread_name": names[e["tid"]] = e["args"]["name"]
def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]: out[-1][1] = max(out[-1][1], b)
        else: out.append([a, b])
    return out
comm = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if names.get(e["tid"]) == "comm"])
comp = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if names.get(e["tid"]) == "compute"])
total = sum(b - a for a, b in comm)
covered = sum(max(0, min(b, d) - max(a, c)) for a, b in comm for c, d in comp)
print(f"{total / 1e3:.1f} {(total - covered) / 1e3:.1f}")' "$1"
}

# from a calibrate output: the predicted step, its exposed collectives, its collectives (ms)
predicted_ms() {
	sed -n 's/^predicted step ([^)]*): \([0-9.]*\) ms.*/\1/p' "$1"
}
predicted_comm_ms() {
	sed -n 's/^predicted step.* waits \([0-9.]*\) ms for the collectives (\([0-9.]*\) ms.*/\1 \2/p' "$1"
}

# median of the numbers given
median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# a table row: ranks, zero, predicted-file, measured medians, [trace]
row() {
	local ranks=$1 zero=$2 cal=$3 runs=$4 trace=${5:-} comm="" exposed="" pc="" pe=""
	[ -n "$trace" ] && read -r comm exposed < <(comm_in_trace "$trace")
	[ "$ranks" -gt 1 ] && read -r pe pc < <(predicted_comm_ms "$cal")
	python3 - "$ranks" "$zero" "$(predicted_ms "$cal")" "$runs" "$comm" "$exposed" "$pc" "$pe" <<'PY'
import statistics, sys
ranks, zero, p, runs, comm, exposed, pc, pe = sys.argv[1:]
fastest = min(float(x.split("/")[1]) for x in runs.split())
runs = [float(x.split("/")[0]) for x in runs.split()]
m, p = statistics.median(runs), float(p) if p else float("nan")
cell = lambda a, b: f"{float(a):.0f} ms (predicted {float(b):.0f})" if a else ""
print(f"| {ranks} | {zero} | {m:.0f} ms ({', '.join(f'{x:.0f}' for x in runs)}) | {p:.0f} ms | "
      f"{100 * (p / m - 1):+.1f}% | {fastest:.0f} ms | {100 * (p / fastest - 1):+.1f}% | {cell(comm, pc)} | {cell(exposed, pe)} |")
PY
}

# A model at --zero 0 and --zero 2: calibrations, then interleaved runs,
# then a traced 2-rank step of each.
run_model() {
	local name=$1 tag=$2; shift 2
	set -- "$@" --policy "$policy"
	local flags=("$@" --data 'c_train_*.bin' --sample 0 --val-every 0 --threads 1)
	local one=() two0=() two2=()
	echo "### $name"
	echo
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$ferry" calibrate "$@" --threads 1 >cal1.txt 2>&1 || { echo "calibrate failed: $(tail -n 3 cal1.txt)"; return; }
	for z in 0 2; do
		"${mpi[@]}" "$ferry" calibrate "$@" --threads 1 --zero $z ${keep:+--predict-trace "predz$z.json"} >"cal2z$z.txt" 2>&1 ||
			{ echo "calibrate --zero $z on 2 ranks failed: $(tail -n 3 "cal2z$z.txt")"; return; }
	done
	echo "load average after the calibrations: $(cut -d' ' -f1-3 /proc/loadavg)"
	for r in $(seq 1 "$repeats"); do
		"$ferry" train "${flags[@]}" --steps "$steps" --json one.jsonl >/dev/null 2>&1 && one+=("$(median_ms one.jsonl)")
		"${mpi[@]}" "$ferry" train "${flags[@]}" --zero 0 --steps "$steps" --json two.jsonl >/dev/null 2>&1 &&
			two0+=("$(median_ms two.jsonl)")
		"${mpi[@]}" "$ferry" train "${flags[@]}" --zero 2 --steps "$steps" --json two.jsonl >/dev/null 2>&1 &&
			two2+=("$(median_ms two.jsonl)")
	done
	for z in 0 2; do
		"${mpi[@]}" "$ferry" train "${flags[@]}" --zero $z --steps 2 --trace "trz$z.json" >/dev/null 2>&1
	done
	echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	grep -HE "^  ((all_reduce|reduce_scatter|all_gather) over|inside data-parallel)" cal2z0.txt cal2z2.txt | sed 's/^/    /'
	grep -H "^predicted step" cal1.txt cal2z0.txt cal2z2.txt | sed 's/^/    /'
	echo
	echo "| ranks | --zero | measured step, median (runs' medians) | predicted | error | fastest step | error | collectives in rank 0's traced step | exposed |"
	echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
	row 1 0 cal1.txt "${one[*]}"
	row 2 0 cal2z0.txt "${two0[*]}" trz0.rank0.json
	row 2 2 cal2z2.txt "${two2[*]}" trz2.rank0.json
	echo
	[ -n "$keep" ] && mkdir -p "$keep/$tag" && cp cal*.txt predz*.json trz*.json "$keep/$tag/"
	return 0
}

echo "ferry $("$ferry" --version 2>/dev/null | head -n 1), $(nproc --all) cores, $repeats interleaved repeats of $steps steps, --policy $policy"
echo
[[ " $models " == *" gpt2 "* ]] && run_model "GPT-2 small shapes (12 layers, 768 channels, 12 heads, vocabulary 50257), 1 x 256 tokens a rank" gpt2 \
	--layers 12 --channels 768 --heads 12 --seq 256 --max-seq 256 --batch 1
[[ " $models " == *" llama "* ]] && run_model "Llama (8 layers, 512 channels, 8 heads, 4 KV heads, vocabulary 32000), 1 x 256 tokens a rank" llama \
	--model llama --layers 8 --channels 512 --heads 8 --kv-heads 4 --vocab 32000 --seq 256 --max-seq 256 --batch 1
exit 0
