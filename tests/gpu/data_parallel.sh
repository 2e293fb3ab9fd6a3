#!/usr/bin/env bash
# Data parallel on the CUDA backend through MPI's pinned host staging
# (issue 22 item 2; sched/comm_stage.c): 2 ranks on one GPU (NCCL refuses
# two ranks on one device, so FERRY_COMM_ENGINE's auto picks MPI, and the
# start says why), each in --device-mem 4G, GPT-2 and Llama, 4 steps:
# --zero 0, --zero 1 and --zero 3 (bf16 compute slices gathered; AdamW on
# the device, on host threads with --offload-optimizer cpu, and with
# --offload-params too, FSDP2's CPU offload: the bf16 slice the host
# AdamW writes staged up from host memory before each gather) against
# one process with the global batch (bf16: the batch split changes the
# sums, so the losses within 1e-3 relative; the worst difference printed),
# --zero 1 the same bits as --zero 0 (its update is elementwise on the
# same averaged gradients), and so --zero 1 and 2 with --offload-params
# --offload-optimizer stream against --zero 0 in that mode, --zero 3
# --offload-params the same bits as --zero 3 --offload-optimizer cpu (the
# same bf16 slices gathered, from the host instead of the device), and
# --zero 3 --offload-params --offload-optimizer stream (3pstream: the
# device AdamW's bf16 result copied down into the host's slice and staged
# up from there) the same bits as --zero 3 (the same AdamW on the device,
# the same bf16 slices gathered) and its plan = measured;
# --offload-params --offload-optimizer cpu at --zero 0, 1 and 2 too
# (exec/dp_reduce.c: each layer's gradients averaged on the device, in the
# weight ring's slot, before their copy to the host; ZeRO-2's
# reduce-scattered from host slots), --zero 1 the bits of --zero 0 there
# too; every rank's measured host bytes are `ferry plan --ranks 2`'s (the
# staging buffer, planned with FERRY_COMM_ENGINE=mpi), and with --zero 3
# (and --zero 0 with --offload-params) its device bytes too; an unknown
# FERRY_COMM_ENGINE stops every rank with one message; --zero 0-3 with
# --device-grads (the gradients averaged on the device, read through the
# host ring; speculative order) within 1e-3 of one process, --zero 1 the
# bits of --zero 0, plan = measured device and host bytes.  A --zero 3
# (or --device-grads on 2 ranks) that is refused (ZeRO-2 and 3 through staging, or on a GPU backend)
# fails the test.  Skips (77) without a usable GPU or without
# mpirun and a ferry built with MPI; fails instead of skipping for a
# missing GPU when FERRY_REQUIRE_GPU is set.
. "$(dirname "$0")/../cli/lib.bash"
if ! "$FERRY" info 2>/dev/null | grep -q "^  cuda  CUDA:"; then
	[ -n "${FERRY_REQUIRE_GPU:-}" ] && { echo "FAIL: a GPU is required and ferry sees none"; exit 1; }
	echo "skip: no usable GPU"; exit 77
fi
need_mpi
make_corpus
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES%%,*} # both ranks on one GPU
RUN=(--backend cuda --data 'corpus_train_*.bin' --steps 4 --lr 3e-3 --warmup 1 --sample 0 --val-every 0
	--device-mem 4G)
GPT2=(--layers 2 --channels 128 --heads 4 --max-seq 64 --seq 64)
LLAMA=(--model llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --max-seq 64 --seq 64)

# every step's loss and gradient norm, as printed
bits() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }

# zero_opt CASE: opt, the flags beside --zero of a case (3cpu: AdamW on
# host threads; Nparams: and the parameters on the host, at --zero N;
# 3pstream: the parameters on the host, AdamW streamed; Ndg: --device-grads)
zero_opt() {
	opt=()
	[ "$1" = 3cpu ] && opt=(--offload-optimizer cpu)
	[[ $1 == *params ]] && opt=(--offload-params --offload-optimizer cpu)
	[ "$1" = 3pstream ] && opt=(--offload-params --offload-optimizer stream)
	[ "${1%dg}" != "$1" ] && opt=(--device-grads --clip-order speculative)
	return 0
}

# same_bits A B WHAT: the same losses and gradient norms, every step
same_bits() {
	checks=$((checks + 1))
	if [ -n "$(bits "$1")" ] && [ "$(bits "$1")" = "$(bits "$2")" ]; then
		echo "ok: $3, the same bits"
	else
		fail "$3: [$(bits "$2" | tr '\n' ' ')] against [$(bits "$1" | tr '\n' ' ')]"
	fi
}

# near A B: the steps' losses of A and B within 1e-3 relative; prints the worst
near() {
	python3 - "$1" "$2" <<'PY'
import json, sys
def losses(f):
    return [r["loss"] for r in map(json.loads, open(f)) if "step" in r and "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 4 and len(a) == len(b), f"steps: {len(a)} vs {len(b)}"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"worst relative loss difference {worst:.3g}, losses {' '.join(f'{x:.6f}' for x in b)}")
sys.exit(not worst <= 1e-3)
PY
}

# ranks NAME ZERO: 2 ranks of 2 rows, NAME.json; checks the start's line
ranks() {
	local name=$1 zero=$2; shift 2
	checks=$((checks + 1))
	mpi_run 2 "$FERRY" train "${RUN[@]}" "$@" --batch 2 --zero "$zero" --json "$name.json" >"$name.out" 2>&1 ||
		{ fail "$name: $(tail -n 3 "$name.out")"; return 1; }
	grep -q "^collectives: MPI through pinned host staging: 2 ranks on this machine share 1 GPU" "$name.out" &&
		echo "ok: $name: $(grep '^collectives' "$name.out")" || fail "$name: start says $(grep '^collectives' "$name.out")"
}

for family in gpt2 llama; do
	if [ $family = gpt2 ]; then shape=("${GPT2[@]}"); else shape=("${LLAMA[@]}"); fi
	expect_ok "$family: one process of 4 rows" "$FERRY" train "${RUN[@]}" "${shape[@]}" --batch 4 --json one.json ||
		continue
	for z in 0 1 3 3cpu 0params 1params 2params 3params 3pstream 0dg 1dg 2dg 3dg; do
		zero_opt $z
		ranks "${family}_z$z" "${z:0:1}" "${shape[@]}" "${opt[@]}" || continue
		checks=$((checks + 1))
		d=$(near one.json "${family}_z$z.json") && echo "ok: $family --zero $z on 2 ranks = one process: $d" ||
			fail "$family --zero $z on 2 ranks against one process: $d"
	done
	same_bits "${family}_z0.json" "${family}_z1.json" "$family --zero 1 = --zero 0"
	same_bits "${family}_z3cpu.json" "${family}_z3params.json" \
		"$family --zero 3 --offload-params --offload-optimizer cpu = --zero 3 --offload-optimizer cpu"
	same_bits "${family}_z3.json" "${family}_z3pstream.json" \
		"$family --zero 3 --offload-params --offload-optimizer stream = --zero 3"
	same_bits "${family}_z0params.json" "${family}_z1params.json" "$family --offload-params: --zero 1 = --zero 0"
	# --device-grads: the gradients averaged (ZeRO-2/3: reduce-scattered) on
	# the device, the rank's pieces through the host ring; --zero 1 the bits
	# of --zero 0 (2 and 3: the norm's block sums a kernel's, within 1e-3)
	same_bits "${family}_z0dg.json" "${family}_z1dg.json" "$family --device-grads: --zero 1 = --zero 0"
done

# plan = measured host bytes on each rank (the staging buffer)
checks=$((checks + 1))
per_rank() { grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/.*"rank": ([0-9]*).*"host_bytes": ([0-9]*)/\1 \2/'; }
FERRY_COMM_ENGINE=mpi "$FERRY" plan --backend cuda --device-mem 4G "${GPT2[@]}" --batch 2 --zero 1 --ranks 2 --json plan.json >plan.out 2>&1
planned=$(per_rank plan.json device_bytes) measured=$(per_rank gpt2_z1.json device_peak_bytes)
[ -n "$planned" ] && [ "$planned" = "$measured" ] && echo "ok: every rank's host bytes as planned: $(echo "$planned" | tr '\n' ';')" ||
	fail "host bytes per rank: planned [$planned], measured [$measured] ($(tail -n 1 plan.out))"

# ZeRO-3's bf16 slices, ring and unstacked weights (3params: the bf16
# slice on the host, the staging slot on the device; 3pstream: that slice
# written by the optimizer ring; 0params: the weights' ring, the gradients
# averaged in its slots), and --device-grads at every stage: plan =
# measured, device and host, on each rank
for z in 3 3cpu 3params 3pstream 0params 0dg 1dg 2dg 3dg; do
	checks=$((checks + 1))
	zero_opt $z
	both() { grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g'; }
	FERRY_COMM_ENGINE=mpi "$FERRY" plan --backend cuda --device-mem 4G "${GPT2[@]}" --batch 2 --zero "${z:0:1}" "${opt[@]}" \
		--ranks 2 --json plan.json >plan.out 2>&1
	planned=$(both plan.json device_bytes) measured=$(both "gpt2_z$z.json" device_peak_bytes)
	[ -n "$planned" ] && [ "$planned" = "$measured" ] &&
		echo "ok: --zero $z: every rank's device and host bytes as planned: $(echo "$planned" | tr '\n' ';')" ||
		fail "--zero $z: (rank device host) planned [$planned], measured [$measured] ($(tail -n 1 plan.out))"
done

checks=$((checks + 1))
"${MPIRUN[@]}" -x FERRY_COMM_ENGINE=bogus -np 2 "$FERRY" train "${RUN[@]}" "${GPT2[@]}" --batch 2 >bad.out 2>&1 &&
	fail "FERRY_COMM_ENGINE=bogus: trained"
[ "$(grep -c 'FERRY_COMM_ENGINE=bogus: nccl, mpi or auto' bad.out)" = 1 ] &&
	echo "ok: FERRY_COMM_ENGINE=bogus: refused, one message" || fail "FERRY_COMM_ENGINE=bogus: $(tail -n 3 bad.out)"

# --zero 2 and 3 through staging (each layer's gradients reduce-scattered
# and ZeRO-3's layers gathered piece by piece on the comm stream): within
# 1e-3 of --zero 0 on the same 2 ranks (the norm's block sums a kernel's)
for family in gpt2 llama; do
	if [ $family = gpt2 ]; then shape=("${GPT2[@]}"); else shape=("${LLAMA[@]}"); fi
	for z in 2 3; do
		ranks "${family}_z${z}_staged" $z "${shape[@]}" || continue
		checks=$((checks + 1))
		d=$(near "${family}_z0.json" "${family}_z${z}_staged.json") &&
			echo "ok: $family --zero $z staged on 2 ranks = --zero 0: $d" ||
			fail "$family --zero $z staged on 2 ranks against --zero 0: $d"
	done
done

# --zero 1 and 2 with the parameters on the host and AdamW streamed (not
# yet run on a GPU when written): in bf16 the ring writes the unstacked
# parameters' bf16 copy back too, the host gathers it and uploads it; the
# bits of --zero 0 in the same mode on the same 2 ranks (AdamW is
# elementwise, two ranks' sums exact, the host norm's blocks the same)
off=(--offload-params --offload-optimizer stream)
if ranks gpt2_p0 0 "${GPT2[@]}" "${off[@]}"; then
	for z in 1 2; do
		ranks "gpt2_p$z" $z "${GPT2[@]}" "${off[@]}" &&
			same_bits gpt2_p0.json "gpt2_p$z.json" "gpt2 --zero $z ${off[*]} = --zero 0"
	done
fi

# --zero 3 with the parameters on the host, AdamW streamed and the ring of
# gathered layers 3 deep (--param-prefetch 2; 5 layers, the slots reused;
# not yet run on a GPU when written): within 1e-3 of one process, every
# rank's device and host bytes as planned.
deep=("${GPT2[@]}" --layers 5 "${off[@]}" --param-prefetch 2)
FERRY_COMM_ENGINE=mpi "$FERRY" plan --backend cuda --device-mem 4G "${deep[@]}" --batch 2 --zero 3 --ranks 2 \
	--json plan.json >plan.out 2>&1
if expect_ok "gpt2 5 layers: one process of 4 rows" "$FERRY" train "${RUN[@]}" "${deep[@]}" --batch 4 --json one5.json &&
	ranks gpt2_p3deep 3 "${deep[@]}"; then
	checks=$((checks + 2))
	d=$(near one5.json gpt2_p3deep.json) && echo "ok: gpt2 --zero 3 ${off[*]} --param-prefetch 2 = one process: $d" ||
		fail "gpt2 --zero 3 ${off[*]} --param-prefetch 2 against one process: $d"
	planned=$(both plan.json device_bytes) measured=$(both gpt2_p3deep.json device_peak_bytes) # (both: above)
	[ -n "$planned" ] && [ "$planned" = "$measured" ] &&
		echo "ok: --zero 3 streamed --param-prefetch 2: every rank's device and host bytes as planned" ||
		fail "--zero 3 streamed --param-prefetch 2: (rank device host) planned [$planned], measured [$measured]"
fi

# --zero 3 with the parameters and the edges on the host, AdamW streamed
# (not run on a GPU when written; zero3_stream_edges.sh on the CPU): the
# edges gathered from the host slices into the edge region, their slice
# through the optimizer ring; within 1e-3 of --zero 0 in the same mode on
# the same 2 ranks (the norm's sums differ: the device's slice, the
# host's whole array), every rank's device and host bytes as planned.
edges=("${off[@]}" --offload-embeddings --vocab 4096)
if ranks llama_e0 0 "${LLAMA[@]}" "${edges[@]}" && ranks llama_e3 3 "${LLAMA[@]}" "${edges[@]}"; then
	checks=$((checks + 2))
	d=$(near llama_e0.json llama_e3.json) && echo "ok: llama --zero 3 ${edges[*]} = --zero 0: $d" ||
		fail "llama --zero 3 ${edges[*]} against --zero 0: $d"
	FERRY_COMM_ENGINE=mpi "$FERRY" plan --backend cuda --device-mem 4G "${LLAMA[@]}" "${edges[@]}" --batch 2 \
		--zero 3 --ranks 2 --json plan.json >plan.out 2>&1
	planned=$(both plan.json device_bytes) measured=$(both llama_e3.json device_peak_bytes)
	[ -n "$planned" ] && [ "$planned" = "$measured" ] &&
		echo "ok: --zero 3 ${edges[*]}: every rank's device and host bytes as planned" ||
		fail "--zero 3 ${edges[*]}: (rank device host) planned [$planned], measured [$measured] ($(tail -n 1 plan.out))"
fi

finish
