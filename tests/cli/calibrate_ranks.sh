#!/usr/bin/env bash
# The cost model on several ranks (issue 22 item 8): a calibration of one
# process has no collectives, and --policy auto on 2 ranks says so and
# measures them; mpirun -np 2 ferry calibrate measures the collectives the
# step runs at the sizes of its gradients (the model's shapes give them: a
# layer's qkv weight is 3 C x C floats): all-reduces, and with --zero 2
# reduce-scatters; it stores them keyed by
# 2 ranks and the mpi engine, and prices them in the 2-rank prediction it
# prints (more than 0 on the comm stream; none for one process), with the
# ranks' skew measured in its traced steps; a
# calibration of one process afterwards keeps them.  Skips without mpirun
# or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
SHAPE=(--backend cpu --layers 2 --channels 32 --heads 4 --vocab 257 --max-seq 32 --batch 2 --seq 16 --threads 1)

# collectives CACHE: "kind ranks engine bytes" a line
collectives() {
	python3 -c 'import json, sys
for e in json.load(open(sys.argv[1])).get("collectives", []):
    assert e["seconds"] > 0, e
    print(e["collective"], e["ranks"], e["engine"], e["bytes"])' "$1"
}

expect_ok "calibrate one process" "$FERRY" calibrate "${SHAPE[@]}" --quick
cache=$(ls "$XDG_CACHE_HOME"/ferry/calibration-*.json)
[ -z "$(collectives "$cache")" ] || fail "one process measured collectives: $(collectives "$cache")"
grep -qE "^predicted step \(--policy nothing_saveable, 1 rank of 2 rows\): [0-9.]+ ms$" out.txt ||
	fail "one process: the predicted step, no collectives: $(grep predicted out.txt)"

checks=$((checks + 1))
if mpi_run 2 "$FERRY" train "${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 1 --sample 0 --val-every 0 \
	--policy auto >auto.out 2>auto.err; then
	grep -q "has not measured the collectives over 2 ranks; calibrating now" auto.err &&
		grep -q "^all_reduce 2 mpi " <(collectives "$cache") && echo "ok: --policy auto on 2 ranks measures them" ||
		fail "--policy auto on 2 ranks: $(cat auto.err)"
else
	fail "--policy auto on 2 ranks: $(tail -n 3 auto.err)"
fi

# the names of a trace's slices on one track, in order
track() {
	python3 -c 'import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tid = [e["tid"] for e in ev if e.get("name") == "thread_name" and e["args"]["name"] == sys.argv[2]]
print(" ".join(e["name"].replace(" ", "_") for e in sorted((e for e in ev if e.get("ph") == "X" and e["tid"] in tid), key=lambda e: e["ts"])))' "$@"
}

checks=$((checks + 1))
if mpi_run 2 "$FERRY" calibrate "${SHAPE[@]}" --quick --predict-trace pred.json >two.out 2>two.err; then
	qkv=$((3 * 32 * 32 * 4))
	list=$(collectives "$cache")
	grep -q "^all_reduce 2 mpi $qkv$" <<<"$list" || fail "no all_reduce of a layer's qkv weight gradient ($qkv bytes): $list"
	grep -q "^reduce_scatter " <<<"$list" && fail "reduce-scatters measured for a step that runs none: $list"
	grep -q "^  all_reduce over 2 ranks (mpi), [0-9]* sizes" two.out || fail "calibrate prints the collectives"
	grep -qE "^  inside data-parallel steps over 2 ranks \(mpi\): the collectives take [0-9.]+x their time alone beside compute \([0-9.]+x with the compute stream idle\), .*, the ranks ahead wait [0-9.]+ ms for the last$" two.out ||
		fail "calibrate prints the in-step ratios and the ranks' skew: $(grep inside two.out)"
	python3 -c 'import json, sys
s = [e for e in json.load(open(sys.argv[1]))["collective_steps"] if e["ranks"] == 2 and e["engine"] == "mpi"]
assert len(s) == 1 and 0 <= s[0]["skew_s"] < 60 and s[0]["in_step_idle"] > 0, s' "$cache" ||
		fail "the skew and the in-step ratio with compute idle of 2 ranks stored"
	comm=$(sed -n 's/^predicted step (--policy nothing_saveable, 2 ranks of 2 rows): [0-9.]* ms, .*(\([0-9.]*\) ms of them on the comm stream)$/\1/p' two.out)
	awk -v c="${comm:-0}" 'BEGIN { exit !(c > 0) }' &&
		echo "ok: 2 ranks: $(collectives "$cache" | wc -l) collectives stored; $comm ms of them a step predicted" ||
		fail "the 2-rank prediction prices no collectives: $(grep predicted two.out)"
else
	fail "calibrate on 2 ranks: $(tail -n 3 two.err)"
fi

# the simulated step against a traced one of the same flags: the same
# tasks on the compute and comm tracks, in the same order
checks=$((checks + 1))
if mpi_run 2 "$FERRY" train "${SHAPE[@]}" --policy nothing_saveable --data 'corpus_train_*.bin' --steps 1 --sample 0 \
	--val-every 0 --trace run.json >run.out 2>run.err && [ -s pred.json ]; then
	[ -n "$(track pred.json comm)" ] && [ "$(track pred.json comm)" = "$(track run.rank0.json comm)" ] &&
		[ "$(track pred.json compute)" = "$(track run.rank0.json compute)" ] &&
		echo "ok: --predict-trace: the simulated step's $(track pred.json compute | wc -w) compute and $(track pred.json comm | wc -w) comm slices are the traced step's" ||
		fail "--predict-trace: the simulated step's tracks differ from the traced step's: $(track pred.json comm | head -c 300) / $(track run.rank0.json comm | head -c 300)"
else
	fail "--predict-trace: no simulated step, or the traced step failed: $(tail -n 3 run.err)"
fi
expect_error "--predict-trace into a missing directory" "no/such/dir/p.json" "$FERRY" calibrate "${SHAPE[@]}" --quick \
	--predict-trace no/such/dir/p.json

checks=$((checks + 1))
if mpi_run 2 "$FERRY" calibrate "${SHAPE[@]}" --quick --zero 2 >zero2.out 2>zero2.err; then
	grep -q "^reduce_scatter 2 mpi $((3 * 32 * 32 * 4))$" <(collectives "$cache") &&
		echo "ok: --zero 2 on 2 ranks: the reduce-scatter of a layer's qkv weight gradient measured" ||
		fail "--zero 2: no reduce_scatter of a layer's qkv weight gradient: $(collectives "$cache")"
else
	fail "calibrate --zero 2 on 2 ranks: $(tail -n 3 zero2.err)"
fi

expect_ok "calibrate one process again" "$FERRY" calibrate "${SHAPE[@]}" --quick
grep -q "^all_reduce 2 mpi $((3 * 32 * 32 * 4))$" <(collectives "$cache") ||
	fail "one process's calibration dropped the 2 ranks' collectives"
finish
