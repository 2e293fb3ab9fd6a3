#!/usr/bin/env bash
# Data parallel on CPU ranks (issue 22 items 8 and 11): one process against
# two ranks (mpirun -np 2) at the same batch per rank, each rank on one
# thread; per model:
#   - ferry calibrate in one process and on 2 ranks (a cache of its own,
#     made here): the 2-rank one also measures the collectives, and both
#     print the step the cost model predicts for these flags;
#   - ferry train, interleaved: 1 process, 2 ranks, REPEATS times, STEPS
#     steps each; the median step time of each run after its first step;
#   - one 2-rank run with --trace: the collectives on rank 0's comm track
#     in its traced step, their time, and the part of it the compute
#     stream had nothing to do (exposed);
#   - the machine's load average before and after.
# Prints a Markdown table per model.
#
#   bash bench/data_parallel.sh [FERRY] [REPEATS] [STEPS]   (default: build/ferry 3 4)
set -u
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/data_parallel.sh [FERRY] [REPEATS] [STEPS]   (default: build/ferry 3 4)"
	exit 0 ;;
esac
ferry=$(realpath "${1:-build/ferry}")
repeats=${2:-3} steps=${3:-4}
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

# median step time (ms) of a --json file, after its first step
median_ms() {
	python3 -c 'import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]
print("%.1f" % statistics.median(r["step_ms"] for r in rs[1:]))' "$1"
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

predicted_ms() { sed -n 's/^predicted step ([^)]*): \([0-9.]*\) ms.*/\1/p' "$1"; }

run_model() {
	local name=$1; shift
	local flags=("$@" --data 'c_train_*.bin' --sample 0 --val-every 0 --threads 1)
	local one=() two=()
	echo "### $name"
	echo
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	"$ferry" calibrate "$@" --threads 1 >cal1.txt 2>&1 || { echo "calibrate failed: $(tail -n 3 cal1.txt)"; return; }
	"${mpi[@]}" "$ferry" calibrate "$@" --threads 1 >cal2.txt 2>&1 || { echo "calibrate on 2 ranks failed: $(tail -n 3 cal2.txt)"; return; }
	for r in $(seq 1 "$repeats"); do
		"$ferry" train "${flags[@]}" --steps "$steps" --json one.jsonl >/dev/null 2>&1 && one+=("$(median_ms one.jsonl)")
		"${mpi[@]}" "$ferry" train "${flags[@]}" --steps "$steps" --json two.jsonl >/dev/null 2>&1 && two+=("$(median_ms two.jsonl)")
	done
	"${mpi[@]}" "$ferry" train "${flags[@]}" --steps 2 --trace tr.json >/dev/null 2>&1
	read -r comm exposed < <(comm_in_trace tr.rank0.json)
	echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	grep -E "^  ((all_reduce|reduce_scatter|all_gather) over|inside data-parallel)" cal2.txt
	grep "^predicted step" cal1.txt cal2.txt | sed 's/^cal[12].txt:/    /'
	echo
	python3 - "$(predicted_ms cal1.txt)" "$(predicted_ms cal2.txt)" "$comm" "$exposed" "${one[*]}" "${two[*]}" <<'PY'
import statistics, sys
p1, p2, comm, exposed = (float(x) if x else float("nan") for x in sys.argv[1:5])
one = [float(x) for x in sys.argv[5].split()]
two = [float(x) for x in sys.argv[6].split()]
m1, m2 = statistics.median(one), statistics.median(two)
print("| ranks | measured step, median (runs) | predicted | error | collectives in the traced step | exposed |")
print("|---:|---|---:|---:|---:|---:|")
print(f"| 1 | {m1:.0f} ms ({', '.join(f'{x:.0f}' for x in one)}) | {p1:.0f} ms | {100 * (p1 / m1 - 1):+.1f}% | | |")
print(f"| 2 | {m2:.0f} ms ({', '.join(f'{x:.0f}' for x in two)}) | {p2:.0f} ms | {100 * (p2 / m2 - 1):+.1f}% | "
      f"{comm:.0f} ms | {exposed:.0f} ms |")
PY
	echo
}

echo "ferry $("$ferry" --version 2>/dev/null | head -n 1), $(nproc --all) cores, $repeats interleaved repeats of $steps steps"
echo
run_model "GPT-2 small shapes (12 layers, 768 channels, 12 heads, vocabulary 50257), 1 x 256 tokens a rank" \
	--layers 12 --channels 768 --heads 12 --seq 256 --max-seq 256 --batch 1
run_model "Llama (8 layers, 512 channels, 8 heads, 4 KV heads, vocabulary 32000), 1 x 256 tokens a rank" \
	--model llama --layers 8 --channels 512 --heads 8 --kv-heads 4 --vocab 32000 --seq 256 --max-seq 256 --batch 1
