#!/usr/bin/env bash
# One rank through a named collectives engine (issue 22 item 11: how NCCL
# runs on a machine of one GPU, tests/gpu/nccl_one_rank.sh): with
# FERRY_COMM_ENGINE=mpi, `mpirun -np 1` runs the data-parallel step (each
# gradient averaged over the one rank, on the comm stream; --zero has
# nothing to split over one rank) and gives a plain process's bits, GPT-2
# and Llama; without it the same launch takes the plain path; named in
# a process no launcher started, or wrongly, below.  Skips without mpirun or MPI in
# ferry.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --steps 4 --lr 1e-3 --sample 0 --batch 2
	--threads 1 --layers 2 --channels 32 --heads 4)
fields() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }
for model in gpt2 llama; do
	shape=(--model "$model")
	[ $model = llama ] && shape+=(--kv-heads 2)
	expect_ok "$model: one plain process" "$FERRY" train "${common[@]}" "${shape[@]}" --json plain.json || continue
	for z in 0; do
		checks=$((checks + 1))
		mpi_run 1 env FERRY_COMM_ENGINE=mpi "$FERRY" train "${common[@]}" "${shape[@]}" --zero $z \
			--json one.json --trace one_trace.json >one.out 2>&1 || { fail "$model --zero $z: $(tail -n 2 one.out)"; continue; }
		n=$(grep -o '"name": *"\(average grad\|scatter\|gather\)[^"]*"' one_trace.json | wc -l)
		if ! grep -q "^collectives: MPI" one.out || [ "$n" -eq 0 ]; then
			fail "$model --zero $z: no collectives ran ($(grep collectives one.out))"
		elif [ -n "$(fields plain.json)" ] && [ "$(fields one.json)" = "$(fields plain.json)" ]; then
			echo "ok: $model --zero $z, one rank through MPI ($n collectives in its traced step): a plain process's bits"
		else
			fail "$model --zero $z: losses $(fields one.json | tr '\n' ' ') against $(fields plain.json | tr '\n' ' ')"
		fi
	done
done
checks=$((checks + 1))
mpi_run 1 "$FERRY" train "${common[@]}" --json auto.json >auto.out 2>&1 || fail "no engine named: $(tail -n 2 auto.out)"
grep -q "^collectives:" auto.out && fail "no engine named: one rank ran collectives: $(grep collectives auto.out)" ||
	echo "ok: one rank without FERRY_COMM_ENGINE: the plain path"

# Named in a process no launcher started: the collectives' schedule over
# this process alone (no MPI behind it, and the run says so), a plain
# process's bits.
checks=$((checks + 1))
FERRY_COMM_ENGINE=mpi "$FERRY" train "${common[@]}" --json alone.json >alone.out 2>&1 ||
	fail "FERRY_COMM_ENGINE=mpi, no launcher: $(tail -n 2 alone.out)"
if ! grep -q "^collectives: this process alone (no MPI launcher started it)" alone.out; then
	fail "FERRY_COMM_ENGINE=mpi, no launcher: $(grep collectives alone.out || echo 'no collectives line')"
elif [ -n "$(fields auto.json)" ] && [ "$(fields alone.json)" = "$(fields auto.json)" ]; then
	echo "ok: FERRY_COMM_ENGINE=mpi, no launcher: says it runs alone, a plain process's bits"
else
	fail "FERRY_COMM_ENGINE=mpi, no launcher: other bits than a plain process"
fi
# Values the CPU backend cannot take, refused by name before step 1:
# in one process, in a plan, and on every rank with one message.
FERRY_COMM_ENGINE=bogus expect_error "FERRY_COMM_ENGINE=bogus, one process" "FERRY_COMM_ENGINE=bogus: nccl, mpi or auto" \
	"$FERRY" train "${common[@]}"
FERRY_COMM_ENGINE=nccl expect_error "FERRY_COMM_ENGINE=nccl on the cpu backend" "NCCL runs on GPU buffers" \
	"$FERRY" train "${common[@]}"
FERRY_COMM_ENGINE=bogus expect_error "FERRY_COMM_ENGINE=bogus, ferry plan --ranks 2" "FERRY_COMM_ENGINE=bogus:" \
	"$FERRY" plan --vocab 257 --seq 16 --batch 2 --layers 2 --channels 32 --heads 4 --ranks 2
checks=$((checks + 1))
mpi_run 2 -x FERRY_COMM_ENGINE=bogus "$FERRY" train "${common[@]}" >bogus.out 2>&1 && fail "FERRY_COMM_ENGINE=bogus: 2 ranks trained"
[ "$(grep -c "FERRY_COMM_ENGINE=bogus: nccl, mpi or auto" bogus.out)" = 1 ] &&
	echo "ok: FERRY_COMM_ENGINE=bogus on 2 ranks: refused, one message" || fail "FERRY_COMM_ENGINE=bogus on 2 ranks: $(tail -n 3 bogus.out)"
finish
