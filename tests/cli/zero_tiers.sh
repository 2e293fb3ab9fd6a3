#!/usr/bin/env bash
# ZeRO on host tiers (issue 22 item 4: every stage composes "with every
# activation policy and host tier"): on 2 ranks, each stage with an
# offload mode whose host state lives on a tier (a NUMA node's DRAM, the
# NVMe file, offloaded activations spanning DRAM and NVMe past
# --host-mem) saves the same files, bit for bit, as the same run without
# tiers: each rank's slice on its tier, the ranks' NVMe files apart (one
# --nvme-dir for both; one file shared would mix the ranks' slices) and
# removed at the end.  Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
zero_setup 2
mkdir -p nvme

# the Llama whose offloaded activations (2 MiB a rank) outgrow --host-mem 1M
span=(--model llama --layers 4 --channels 64 --heads 4 --kv-heads 2 --seq 32 --batch 32)

# NAME|MODEL|STAGE AND MODE|TIER FLAGS: the run with TIER FLAGS against the same without
RUNS=("zero 1 streamed, optimizer and activations on NVMe|gpt|--zero 1 --offload-optimizer stream --policy qkv_proj_offloaded|--host-tier optimizer=nvme,activations=nvme"
	"zero 2 on host threads, all on node 0|gpt|--zero 2 --offload-optimizer cpu --policy minimal_offloaded|--host-tier all=node:0"
	"zero 2 streamed, activations past --host-mem 1M on NVMe|span|--zero 2 --offload-optimizer stream --policy qkv_proj_offloaded|--host-mem 1M --host-tier optimizer=nvme,activations=dram+nvme"
	"zero 3 streamed, optimizer on NVMe|llama|--zero 3 --offload-optimizer stream --policy qkv_proj_offloaded|--host-tier optimizer=nvme,activations=node:0"
	"zero 3 parameters on the host, on node 0|llama|--zero 3 --offload-params --offload-optimizer cpu|--host-tier params=node:0,optimizer=node:0,activations=node:0"
	"zero 3 parameters on the host, AdamW streamed from NVMe|gpt|--zero 3 --offload-params --offload-optimizer stream|--host-tier optimizer=nvme")
for entry in "${RUNS[@]}"; do
	IFS='|' read -r name model mode tiers <<<"$entry"
	declare -n shape=$model
	read -r -a flags <<<"$mode"
	read -r -a tier <<<"$tiers"
	checks=$((checks + 1))
	if trains plain 2 --batch 2 "${shape[@]}" "${flags[@]}" &&
		trains tiered 2 --batch 2 "${shape[@]}" "${flags[@]}" "${tier[@]}" --nvme-dir nvme; then
		placed=$(grep -m1 "^host tiers:" tiered.out)
		if [ -z "$placed" ]; then
			fail "$name: the run names no host tiers"
		elif [ -n "$(ls -A nvme)" ]; then
			fail "$name: files left in the NVMe directory: $(ls -A nvme | tr '\n' ' ')"
		elif same_save plain tiered; then
			echo "ok: $name: the bits of the run without tiers ($placed)"
		else
			fail "$name: other bits than without tiers ($placed)"
		fi
	fi
	unset -n shape
done
finish
