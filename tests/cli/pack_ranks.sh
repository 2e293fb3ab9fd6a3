#!/usr/bin/env bash
# Version-3 data on 2 ranks (MPI): the loss is the mean over the whole
# global batch's counted targets, so 2 ranks of 2 rows give the first
# step's loss of 1 rank of 4 rows bit for bit (the ranks' rows hold
# different counts: a mean of the ranks' means would differ), and the same
# losses, gradient norms and validation losses after within 1e-6 (the
# ranks' averaged gradients round otherwise, as for token streams).
W=$(cd "$(dirname "$0")" && pwd)/pack_write.py
. "$(dirname "$0")/lib.bash"
need_mpi
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
python3 "$W" docs_train_000000.bin 5 200 2 20 >/dev/null
python3 "$W" docs_val_000000.bin 6 40 2 20 >/dev/null
common=(--layers 2 --channels 32 --heads 2 --max-seq 32 --seq 24 --data 'docs_train_*.bin' --val-data 'docs_val_*.bin'
	--val-every 2 --val-batches 2 --steps 4 --lr 1e-2 --shuffle off --sample 0)
expect_ok "1 rank, 4 rows" "$FERRY" train "${common[@]}" --batch 4 --threads 2 --json one.jsonl
checks=$((checks + 1))
if mpi_run 2 "$FERRY" train "${common[@]}" --batch 2 --threads 1 --json two.jsonl >two.out 2>&1; then
	[ "$(head -n 1 one.jsonl | grep -o '"loss": [^,]*')" = "$(head -n 1 two.jsonl | grep -o '"loss": [^,]*')" ] ||
		fail "2 ranks: another first loss: $(head -n 1 one.jsonl) vs $(head -n 1 two.jsonl)"
	losses_agree one.jsonl two.jsonl >agree.txt || fail "2 ranks: $(cat agree.txt)"
	grep -q 'counted targets a step' two.out || fail "2 ranks: the summary's targets: $(grep summary two.out)"
else
	fail "2 ranks: $(tail -n 2 two.out)"
fi
finish
