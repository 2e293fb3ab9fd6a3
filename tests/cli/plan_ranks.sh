#!/usr/bin/env bash
# The memory plan per rank (issue 22 item 7): `ferry plan --ranks N` gives
# each rank's device peak and host bytes (that every rank of a run under
# mpirun measures them, for every placement, stage and policy: the
# placement matrix, placements.matrix).  The ZeRO-1 split is checked
# against the moments' sizes worked out from GPT-2's shape; machines' host
# bytes add their ranks'; `ferry train`'s check of --device-mem before
# step 1 plans the rank's share.  Skips without mpirun or a ferry built
# with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus

SHAPE=(--layers 2 --channels 32 --heads 4 --vocab 257 --max-seq 32 --seq 16 --batch 2)
RUN=(--data 'corpus_train_*.bin' --sample 0 --threads 1 --steps 2)

# per_rank FILE KEY: "rank device host" lines from a plan's "ranks" list
# (KEY device_bytes) or a run's rank_memory record (KEY device_peak_bytes).
per_rank() {
	grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | numbers
}

# the numbers of each line, one space apart
numbers() { sed -E 's/[^0-9]+/ /g; s/^ //; s/ $//'; }

# ZeRO-1 against GPT-2's parameter count: n = Vp*C + maxT*C + L*(12C^2 + 13C)
# + 2C (Vp: 257 padded to 320); a rank keeps S = ceil(n/N) of each moment,
# and the parameters pad to N*S; device buffers round up to 256 bytes.
r256() { echo $((($1 + 255) / 256 * 256)); }
C=32 L=2 P=$((320 * 32 + 32 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32))
"$FERRY" plan "${SHAPE[@]}" --json whole.json >/dev/null
whole=$(grep -o '"peak_bytes": [0-9]*' whole.json | grep -o '[0-9]*$')
for N in 2 3 4; do
	checks=$((checks + 1))
	S=$(((P + N - 1) / N))
	want=$((whole - 3 * $(r256 $((4 * P))) + 2 * $(r256 $((4 * S))) + $(r256 $((4 * N * S)))))
	"$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks $N --json z.json >/dev/null
	got=$(per_rank z.json device_bytes | cut -d' ' -f2 | sort -u)
	[ "$got" = "$want" ] && echo "ok: --zero 1 on $N ranks: every rank $want device bytes (n = $P, S = $S)" ||
		fail "--zero 1 on $N ranks: device bytes [$got], from the shape $want"
done

# --ranks-per-node: each machine's host bytes are its ranks'
checks=$((checks + 1))
"$FERRY" plan "${SHAPE[@]}" --offload-optimizer cpu --ranks 3 --ranks-per-node 2 --json m.json >/dev/null
h=$(per_rank m.json device_bytes | head -1 | cut -d' ' -f3)
machines=$(grep -o '"ranks": [0-9]*, "host_bytes": [0-9]*' m.json | numbers | tr '\n' ';')
[ "$h" -gt 0 ] && [ "$machines" = "2 $((2 * h));1 $h;" ] && echo "ok: 3 ranks, 2 a machine: host $machines" ||
	fail "machines' host bytes: [$machines], a rank's $h"
expect_ok "plan --ranks, text" "$FERRY" plan "${SHAPE[@]}" --zero 1 --ranks 3 --ranks-per-node 2
grep -q "^  0-2 " out.txt && grep -q "^every rank the same" out.txt && grep -q "^  machine 1    ranks 2-2: " out.txt ||
	fail "plan --ranks text: $(tail -n 8 out.txt)"

# the check before step 1: --device-mem between a rank's share and the
# whole plan trains with --zero 1 (it was refused against the whole);
# below the share it is refused, naming the rank's need
BIG=(--layers 4 --channels 128 --heads 4 --vocab 257 --max-seq 32 --seq 16 --batch 2)
"$FERRY" plan "${BIG[@]}" --json big.json >/dev/null
"$FERRY" plan "${BIG[@]}" --zero 1 --ranks 3 --json bigz.json >/dev/null
share=$(per_rank bigz.json device_bytes | head -1 | cut -d' ' -f2)
all=$(grep -o '"peak_bytes": [0-9]*' big.json | grep -o '[0-9]*$')
mem=$(((share + all) / 2 / 1024))K
checks=$((checks + 1))
if [ "$share" -lt "$all" ] && mpi_run 3 "$FERRY" train "${BIG[@]}" "${RUN[@]}" --zero 1 --device-mem "$mem" >dm.out 2>&1; then
	echo "ok: --zero 1 on 3 ranks trains in --device-mem $mem (a rank's $share bytes, the whole plan's $all)"
else
	fail "--device-mem $mem on 3 ranks with --zero 1: $(grep 'ferry train' dm.out)"
fi
checks=$((checks + 1))
mpi_run 3 "$FERRY" train "${BIG[@]}" "${RUN[@]}" --zero 1 --device-mem $((share / 1024 - 64))K >dm.out 2>&1 &&
	fail "--device-mem below a rank's share: trained"
grep -q "needs $(awk "BEGIN { printf \"%.1f\", $share / 1048576 }") MiB of device memory" dm.out &&
	echo "ok: below a rank's share: refused with its need" || fail "below a rank's share: $(grep 'ferry train' dm.out)"

expect_error "--ranks-per-node alone" "--ranks-per-node needs --ranks N" "$FERRY" plan --ranks-per-node 2
expect_error "--ranks 0" "--ranks 0" "$FERRY" plan --ranks 0
expect_error "--ranks against a split of another size" "adam=device:shard(2) splits AdamW's state over 2 ranks; this run has 3" \
	"$FERRY" plan --place 'adam=device:shard(2)' --ranks 3
expect_error "--ranks with the tutorial network" "--ranks is for gpt2 and llama" "$FERRY" plan --model tutorial --ranks 2

finish
