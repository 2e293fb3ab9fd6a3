#!/usr/bin/env bash
# ZeRO (--zero 1, 2, 3; adam=device:shard(N), shard(N,grads),
# shard(N,params); issue 22 items 4, 5): AdamW's moments split over the
# ranks, each updating its slice, the parameters gathered after; with
# --zero 2 the gradients too, each layer's reduce-scattered after its
# backward; with --zero 3 the parameters too, each layer's all-gathered
# ahead of use.  --zero 1 on 2, 3 and 4 ranks and --zero 2 and 3 on 2,
# GPT-2 and Llama (with --grad-accum, and --zero 2 and 3 with every
# activation policy), save the same files, bit for bit, as --zero 0 (AdamW
# is elementwise: who updates an element does not change it; a sum of two
# numbers is exact in either order); --zero 2 and 3 on 3 and 4 ranks train
# within 1e-6 of one process with the global batch; their plans' device
# peak is the one measured, smaller stage by stage; a split run resumed on
# another number of ranks goes on as an unsplit one does (with AdamW on
# the host: tests/cli/zero_host.sh, and the parameters too:
# zero_offload_params.sh, zero_params_stream.sh).  Skips without mpirun or
# a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus

common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --steps 6 --lr 1e-3 --sample 0 --threads 1)
gpt=(--layers 2 --channels 32 --heads 4)

runs=("gpt2|${gpt[*]}||2" "gpt2|${gpt[*]}||3" "gpt2|${gpt[*]}|--grad-accum 2|4"
	"llama|--model llama ${gpt[*]} --kv-heads 2||2" "llama|--model llama ${gpt[*]} --kv-heads 2||4")
for entry in "${runs[@]}"; do
	IFS='|' read -r name shape more n <<<"$entry"
	flags="$shape $more"
	checks=$((checks + 1))
	# shellcheck disable=SC2086
	mpi_run "$n" "$FERRY" train "${common[@]}" $flags --batch 2 --zero 0 --save z0 >z0.out 2>&1 &&
		mpi_run "$n" "$FERRY" train "${common[@]}" $flags --batch 2 --zero 1 --save z1 >z1.out 2>&1 ||
		{ fail "$name on $n ranks: $(tail -n 2 z0.out z1.out)"; continue; }
	# shellcheck disable=SC2086
	if same_save z0 z1 && grep -q "adam=device:shard($n)" <("$FERRY" plan $shape --place "adam=device:shard($n)" 2>&1); then
		echo "ok: $name ($flags) on $n ranks: --zero 1 saves the bits of --zero 0"
	else
		fail "$name ($flags) on $n ranks: --zero 1 and --zero 0 differ"
	fi
	rm -rf z0 z0.state z1 z1.state
done

# --zero 2 and 3: every activation policy (and --grad-accum) on 2 ranks,
# the bits of --zero 0; on 3 and 4 ranks the order of the sums changes:
# within 1e-6 of one process.
models=("gpt2|${gpt[*]} --layers 3" "llama|--model llama ${gpt[*]} --layers 3 --kv-heads 2")
for entry in "${models[@]}"; do
	IFS='|' read -r name shape <<<"$entry"
	for more in "${POLICIES[@]/#/--policy }" "--grad-accum 3"; do
		# shellcheck disable=SC2086
		mpi_run 2 "$FERRY" train "${common[@]}" $shape $more --batch 2 --zero 0 --save z0 >z0.out 2>&1 ||
			fail "$name $more: $(tail -n 2 z0.out)"
		for z in 2 3; do
			checks=$((checks + 1))
			# shellcheck disable=SC2086
			mpi_run 2 "$FERRY" train "${common[@]}" $shape $more --batch 2 --zero $z --save zk >zk.out 2>&1 ||
				{ fail "$name $more --zero $z: $(tail -n 2 zk.out)"; continue; }
			if same_save z0 zk; then
				echo "ok: $name ($more) on 2 ranks: --zero $z saves the bits of --zero 0"
			else
				fail "$name ($more) on 2 ranks: --zero $z and --zero 0 differ"
			fi
			rm -rf zk zk.state
		done
		rm -rf z0 z0.state
	done
	for n in 3 4; do
		# shellcheck disable=SC2086
		"$FERRY" train "${common[@]}" $shape --steps 8 --batch $((2 * n)) --json one.json >one.out 2>&1 ||
			fail "$name: one process: $(tail -n 2 one.out)"
		for z in 2 3; do
			checks=$((checks + 1))
			# shellcheck disable=SC2086
			mpi_run "$n" "$FERRY" train "${common[@]}" $shape --steps 8 --batch 2 --zero $z --json many.json \
				>many.out 2>&1 || { fail "$name on $n ranks: $(tail -n 2 many.out)"; continue; }
			if d=$(losses_agree one.json many.json); then
				echo "ok: $name, --zero $z on $n ranks against one process: $d"
			else
				fail "$name, --zero $z on $n ranks against one process: $d"
			fi
		done
	done
done

# The plan of one rank of 2 is what a rank measures, and smaller stage by stage.
deep=("${gpt[@]}" --layers 6 --batch 2)
plan_zero() { # plan_zero K SHARD: ferry plan's JSON of --place adam=device:shard(SHARD) into planK.json
	"$FERRY" plan --vocab 257 --max-seq 32 --seq 16 "${deep[@]}" --place "adam=device:shard($2)" --json "plan$1.json" \
		>/dev/null 2>&1
}
plan_zero 1 2 && plan_zero 2 2,grads && plan_zero 3 2,params || fail "planning --zero 1, 2, 3"
for z in 2 3; do
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${common[@]}" "${deep[@]}" --steps 2 --zero $z --json "run$z.json" >run.out 2>&1 ||
		fail "--zero $z: $(tail -n 2 run.out)"
	if [ "$(json_field "plan$z.json" peak_bytes)" = "$(json_field "run$z.json" device_peak_bytes)" ] &&
		[ "$(json_field "plan$z.json" peak_bytes)" -lt "$(json_field "plan$((z - 1)).json" peak_bytes)" ]; then
		echo "ok: --zero $z planned $(json_field "plan$z.json" peak_bytes) bytes a rank, measured the same" \
			"(--zero $((z - 1)): $(json_field "plan$((z - 1)).json" peak_bytes))"
	else
		fail "--zero $z's plan: $(json_field "plan$z.json" peak_bytes), measured" \
			"$(json_field "run$z.json" device_peak_bytes), --zero $((z - 1))'s $(json_field "plan$((z - 1)).json" peak_bytes)"
	fi
done
checks=$((checks + 1))
if grep -q '"place": "[^"]*adam=device:shard(2,grads)' plan2.json && grep -q '"gradient slots"' plan2.json &&
	grep -q '"place": "[^"]*adam=device:shard(2,params)' plan3.json && grep -q '"weight ring (gathered)"' plan3.json
then
	echo "ok: the plans name the placements, the gradient slots and the gathered weight ring"
else
	fail "the plans of --zero 2 and 3 lack their placement or slots"
fi

# Runs saved on 2 ranks at step 3 with --zero 2 and 3: resumed on 2 they go
# on as the unbroken --zero 0 run, bit for bit; on 4, within 1e-6 of it.
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero 0 --save unbroken >/dev/null 2>&1
mpi_run 4 "$FERRY" train --resume unbroken --zero 0 --steps 8 --sample 0 --threads 1 --json on4_0.json \
	>/dev/null 2>&1
for z in 2 3; do
	mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero $z --steps 3 --save half >/dev/null 2>&1
	mpi_run 2 "$FERRY" train --resume half --zero $z --steps 6 --sample 0 --threads 1 --save again >/dev/null 2>&1
	mpi_run 4 "$FERRY" train --resume again --zero $z --steps 8 --sample 0 --threads 1 --json "on4_$z.json" \
		>/dev/null 2>&1
	checks=$((checks + 1))
	if [ -f again ] && same_save unbroken again && d=$(losses_agree on4_0.json "on4_$z.json"); then
		echo "ok: --zero $z saved on 2 ranks at step 3, resumed on 2: the unbroken run's bits; then on 4: $d"
	else
		fail "resuming a --zero $z run: $(ls again 2>&1) ${d:-}"
	fi
	rm -rf half half.state again again.state
done

# A split run saved on 2 ranks, resumed on 4, split and not.
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 4 --zero 1 --steps 3 --save half >/dev/null 2>&1
for z in 0 1; do
	mpi_run 4 "$FERRY" train --resume half --zero $z --steps 6 --sample 0 --threads 1 --save "on4_$z" >/dev/null 2>&1
done
checks=$((checks + 1))
if [ -f on4_1 ] && same_save on4_0 on4_1; then
	echo "ok: split over 2 ranks at step 3, resumed on 4 split as unsplit: the same bits"
else
	fail "resuming a split run on 4 ranks: --zero 1 and --zero 0 differ"
fi

expect_error "--zero 4" "--zero 4: 0, 1, 2 or 3" "$FERRY" train "${common[@]}" --zero 4
checks=$((checks + 1))
mpi_run 2 "$FERRY" train "${common[@]}" "${gpt[@]}" --batch 2 --zero 3 --steps 1 --sample 20 >sample.out 2>&1
if [ $? -eq 0 ] && grep -q "no sample: the parameters are split" sample.out; then
	echo "ok: --zero 3 prints no sample (a forward on rank 0 alone would wait for the others)"
else
	fail "--zero 3 --sample: $(tail -n 2 sample.out)"
fi
expect_error "a split over 2 ranks in one process" "over 2 ranks; this run has 1" \
	"$FERRY" train "${common[@]}" "${gpt[@]}" --place 'adam=device:shard(2)'
finish
