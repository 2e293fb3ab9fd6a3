#!/usr/bin/env bash
# NCCL on a machine of one GPU (issue 22 items 2 and 11): NCCL refuses two
# ranks on one device, so one rank runs its collectives through NCCL where
# FERRY_COMM_ENGINE=nccl names it (tests/cli/one_rank_engine.sh is the
# same on the CPU through MPI): GPT-2 and Llama, 4 steps, the same bits as
# a plain process on the GPU (an average over one rank changes nothing),
# the start naming NCCL; then the time of a step with and without it.
# FERRY_COMM_ENGINE=mpi without a launcher: "this process alone", plain bits.
# GPT-2 with --offload-params --offload-optimizer cpu at every --zero
# stage through NCCL: a plain process's bits (--zero 2 and 3 within 1e-6).
# Skips (77) without a usable GPU, mpirun, or MPI and NCCL in ferry; fails
# instead of skipping for a missing GPU when FERRY_REQUIRE_GPU is set.
. "$(dirname "$0")/../cli/lib.bash"
if ! "$FERRY" info 2>/dev/null | grep -q "^  cuda  CUDA:"; then
	[ -n "${FERRY_REQUIRE_GPU:-}" ] && { echo "FAIL: a GPU is required and ferry sees none"; exit 1; }
	echo "skip: no usable GPU"; exit 77
fi
need_mpi
"$FERRY" info 2>/dev/null | grep -qi "nccl.*built in" || { echo "skip: ferry built without NCCL"; exit 77; }
make_corpus
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
RUN=(--backend cuda --data 'corpus_train_*.bin' --steps 4 --lr 3e-3 --warmup 1 --sample 0 --val-every 0
	--device-mem 4G --batch 4 --layers 2 --channels 128 --heads 4 --max-seq 64 --seq 64)
fields() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }
for model in gpt2 llama; do
	shape=(--model "$model")
	[ $model = llama ] && shape+=(--kv-heads 2)
	expect_ok "$model: plain" "$FERRY" train "${RUN[@]}" "${shape[@]}" --json plain.json || continue
	checks=$((checks + 1))
	mpi_run 1 env FERRY_COMM_ENGINE=nccl "$FERRY" train "${RUN[@]}" "${shape[@]}" --json nccl.json >nccl.out 2>&1 ||
		{ fail "$model through NCCL: $(tail -n 3 nccl.out)"; continue; }
	if ! grep -q "^collectives: NCCL" nccl.out; then
		fail "$model: the start does not name NCCL: $(grep collectives nccl.out)"
	elif [ -n "$(fields plain.json)" ] && [ "$(fields plain.json)" = "$(fields nccl.json)" ]; then
		echo "ok: $model, one rank through NCCL: a plain process's bits ($(grep '"loss"' nccl.json | tail -1 | grep -o '"step_ms": [0-9.]*') vs plain $(grep '"loss"' plain.json | tail -1 | grep -o '"step_ms": [0-9.]*'))"
	else
		fail "$model: NCCL [$(fields nccl.json | tr '\n' ' ')], plain [$(fields plain.json | tr '\n' ' ')]"
	fi
done

# FERRY_COMM_ENGINE=mpi in a process no launcher started: no MPI runs; the
# collectives over this one rank go through pinned host staging, and the
# start says so (it said "MPI through pinned host staging")
expect_ok "gpt2: plain" "$FERRY" train "${RUN[@]}" --json plain.json
checks=$((checks + 1))
if ! FERRY_COMM_ENGINE=mpi "$FERRY" train "${RUN[@]}" --json alone.json >alone.out 2>&1; then
	fail "FERRY_COMM_ENGINE=mpi, no launcher: $(tail -n 3 alone.out)"
elif ! grep -q "^collectives: this process alone (no MPI launcher started it): .*pinned host staging" alone.out; then
	fail "FERRY_COMM_ENGINE=mpi, no launcher: $(grep collectives alone.out || echo 'no collectives line')"
elif [ -n "$(fields alone.json)" ] && [ "$(fields alone.json)" = "$(fields plain.json)" ]; then
	echo "ok: FERRY_COMM_ENGINE=mpi, no launcher: this process alone, a plain process's bits"
else
	fail "FERRY_COMM_ENGINE=mpi, no launcher: [$(fields alone.json | tr '\n' ' ')], plain [$(fields plain.json | tr '\n' ' ')]"
fi

# --offload-params at every --zero stage through NCCL (exec/dp_reduce.c:
# the layers' gradients averaged by NCCL in the ring's slots before their
# copies; what stays in host memory through the MPI host communicator):
# a plain process's bits (--zero 2 and 3: their host norm's block sums,
# within 1e-6 if not the bits)
OFF=(--offload-params --offload-optimizer cpu)
if expect_ok "gpt2 --offload-params: plain" "$FERRY" train "${RUN[@]}" "${OFF[@]}" --json plain.json; then
	for z in 0 1 2 3; do
		checks=$((checks + 1))
		mpi_run 1 env FERRY_COMM_ENGINE=nccl "$FERRY" train "${RUN[@]}" "${OFF[@]}" --zero $z --json nccl.json \
			>nccl.out 2>&1 || { fail "--zero $z --offload-params through NCCL: $(tail -n 3 nccl.out)"; continue; }
		if ! grep -q "^collectives: NCCL" nccl.out; then
			fail "--zero $z --offload-params: the start does not name NCCL: $(grep collectives nccl.out)"
		elif [ -n "$(fields plain.json)" ] && [ "$(fields plain.json)" = "$(fields nccl.json)" ]; then
			echo "ok: --zero $z --offload-params, one rank through NCCL: a plain process's bits"
		elif [ $z -ge 2 ] && d=$(losses_agree plain.json nccl.json); then
			echo "ok: --zero $z --offload-params, one rank through NCCL: within 1e-6 of a plain process: $d"
		else
			fail "--zero $z --offload-params: NCCL [$(fields nccl.json | tr '\n' ' ')], plain [$(fields plain.json | tr '\n' ' ')]"
		fi
	done
fi
finish
