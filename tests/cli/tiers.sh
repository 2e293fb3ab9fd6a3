#!/usr/bin/env bash
# Host memory tiers through the CLI: `ferry plan` prints bytes per tier and
# kind on simulated nodes and refuses, before step 1, a tier too small
# (naming what would fit); `ferry train` on every kind of tier gives the
# losses of a run without tiers, byte for byte, and leaves no NVMe file
# behind; bad tier flags are refused with one clear line.
. "$(dirname "$0")/lib.bash"
make_corpus
SHAPE=(--layers 3 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
TRAIN=("${SHAPE[@]}" --data 'corpus_train_*.bin' --steps 3 --sample 0 --threads 2 --val-every 0
	--policy minimal_offloaded --prefetch-depth 1 --offload-optimizer stream)
mkdir nvme
cat >topology.txt <<'TOPO'
# a socket of DRAM and two CXL memory cards
node 0 cpus 2 mem 8G
node 1 cpus 0 mem 1G
node 2 cpus 0 mem 1G
TOPO
printf 'node 0 cpus 2 mem 8G\nnode 1 cpus 0 mem 16K\n' >tiny.txt

expect_ok "plan on simulated nodes" "$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded --offload-optimizer stream \
	--topology topology.txt
grep -q "host tiers (simulated, topology.txt)" out.txt || fail "plan names the topology"
grep -q "node 1: no CPUs (CXL), 1.00 GiB free" out.txt || fail "plan lists node 1 as CXL"
grep -qE "^  cxl \(nodes 1,2 interleaved\) .* activations .* params .* optimizer" out.txt ||
	fail "default: streamed state on CXL, striped over both cards"
expect_ok "plan, AdamW on host threads" "$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded \
	--offload-optimizer cpu --topology topology.txt
grep -qE "^  dram \(node 0\) .* params .* grads .* optimizer" out.txt || fail "cpu: what the CPU computes on in DRAM"
grep -qE "^  cxl .* activations" out.txt || fail "cpu: activations on CXL"

expect_ok "plan --host-tier off" "$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded --host-tier off
grep -q "host tiers" out.txt && fail "--host-tier off: no tiers"

checks=$((checks + 1))
"$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded --topology tiny.txt --host-tier activations=node:1 >out.txt 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a tier too small: exit $rc, not 1"
grep -q "does not fit: host tier too small: activations need .* on node:1, which has 16.0 KiB free (simulated topology); would fit: dram" out.txt ||
	{ fail "the refusal says what and what would fit:"; cat out.txt >&2; }
checks=$((checks + 1))
"$FERRY" plan --layers 48 --channels 4096 --heads 32 --max-seq 4096 --batch 64 --seq 4096 --policy minimal_offloaded \
	--host-tier activations=nvme --nvme-dir nvme >out.txt 2>&1
[ $? -eq 1 ] && grep -q "activations need .* on nvme, which has .* free" out.txt ||
	{ fail "an NVMe disk too small is refused"; cat out.txt >&2; }
printf 'node 0 cpus 2 mem 8G\nnvme free 16K\n' >tiny_nvme.txt # the room declared, whatever this disk has
checks=$((checks + 1))
"$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded --topology tiny_nvme.txt --host-tier activations=nvme \
	--nvme-dir nvme >out.txt 2>&1
[ $? -eq 1 ] && grep -q "nvme: 16.0 KiB free (declared" out.txt &&
	grep -q "activations need .* on nvme, which has 16.0 KiB free (simulated topology)" out.txt ||
	{ fail "a topology's 'nvme free' is the room the plan checks"; cat out.txt >&2; }

expect_error "plan --json: tier too small" "host tier too small: activations need" \
	"$FERRY" plan "${SHAPE[@]}" --policy minimal_offloaded --topology tiny.txt --host-tier activations=node:1 --json
expect_error "train: tier too small" "host tier too small: activations need" \
	"$FERRY" train "${TRAIN[@]}" --topology tiny.txt --host-tier activations=node:1
expect_error "a node that does not exist" "no NUMA node 9" "$FERRY" train "${TRAIN[@]}" --host-tier params=node:9
expect_error "nvme without a directory" "needs --nvme-dir" "$FERRY" plan --host-tier activations=nvme
mkdir -p nvme
for spec in params=nvme all=nvme; do # streamed weights are read from host memory, not a file (was a crash)
	expect_error "--offload-params with --host-tier $spec" "the NVMe tier cannot hold them" "$FERRY" train \
		"${TRAIN[@]}" --offload-params --offload-optimizer stream --host-tier $spec --nvme-dir nvme
done
expect_error "NVMe directory missing" "--nvme-dir nothere: No such file" "$FERRY" train "${TRAIN[@]}" \
	--host-tier activations=nvme --nvme-dir nothere
if [ "$(id -u)" -ne 0 ]; then
	mkdir ro && chmod 500 ro
	expect_error "NVMe directory not writable" "cannot create files there" "$FERRY" train "${TRAIN[@]}" \
		--host-tier activations=nvme --nvme-dir ro
fi
expect_error "NVMe directory is a file" "not a directory" "$FERRY" train "${TRAIN[@]}" \
	--host-tier activations=nvme --nvme-dir topology.txt
expect_error "bad topology file" "tiny_bad.txt:1: unknown key 'sockets'" \
	sh -c "echo 'node 0 sockets 1' >tiny_bad.txt; exec \"\$0\" plan --topology tiny_bad.txt" "$FERRY"
expect_error "unknown kind" "unknown kind 'weights'" "$FERRY" plan --host-tier weights=dram
expect_error "AdamW on host threads reads its state in place" "the NVMe tier holds offloaded activations, and" \
	"$FERRY" plan --offload-optimizer cpu --host-tier optimizer=nvme --nvme-dir nvme

losses() { grep -o '"loss": [0-9.]*' "$1"; }
expect_ok "train without tiers" "$FERRY" train "${TRAIN[@]}" --json ref.jsonl
i=0
for tiers in "--host-tier all=dram" "--host-tier all=node:0" "--topology topology.txt" \
	"--topology topology.txt --host-tier activations=interleave:1*3+2,params=node:2,optimizer=dram" \
	"--host-tier activations=nvme --nvme-dir nvme" \
	"--topology topology.txt --host-tier activations=nvme,params=cxl --nvme-dir nvme" \
	"--host-tier all=nvme --nvme-dir nvme"; do
	i=$((i + 1))
	# shellcheck disable=SC2086
	expect_ok "train $tiers" "$FERRY" train "${TRAIN[@]}" $tiers --json "run$i.jsonl"
	grep -q "^host tiers:" out.txt || fail "$tiers: the banner shows the placement"
	cmp -s <(losses ref.jsonl) <(losses "run$i.jsonl") || fail "$tiers: losses differ from no tiers"
	[ -z "$(ls nvme)" ] || fail "$tiers: the NVMe file is left behind"
done
grep -q "NVMe file: " out.txt || fail "the banner says how the NVMe file does I/O"
grep -q "params .* on nvme; optimizer .* on nvme" out.txt || fail "all=nvme: streamed AdamW state on NVMe too"

# the trace's host memory, tier by tier
expect_ok "trace on tiers" "$FERRY" train "${TRAIN[@]}" --topology topology.txt --nvme-dir nvme \
	--host-tier activations=nvme,params=cxl,optimizer=dram --trace tiers.json
python3 - tiers.json <<'PY' || fail "the trace has one host memory counter per tier"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
host = {e["name"]: e["args"]["bytes"] for e in ev if e.get("ph") == "C" and e["name"].startswith("host memory")}
names = sorted(host)
assert any(": nvme)" in n for n in names), names
assert any(": cxl (node" in n for n in names), names
assert any(": dram (node 0))" in n for n in names), names
assert all(v > 0 for v in host.values()), host
PY


# a checkpoint saved from the NVMe tier is the one saved without tiers
expect_ok "save without tiers" "$FERRY" train "${TRAIN[@]}" --save plain.bin
expect_ok "save from NVMe" "$FERRY" train "${TRAIN[@]}" --host-tier all=nvme --nvme-dir nvme --save nvme.bin
cmp -s plain.bin nvme.bin && same_state plain.bin.state nvme.bin.state || fail "checkpoints differ with state on NVMe"
expect_ok "resume onto NVMe" "$FERRY" train "${TRAIN[@]}" --resume nvme.bin --steps 5 --host-tier all=nvme \
	--nvme-dir nvme --save nvme5.bin
expect_ok "resume without tiers" "$FERRY" train "${TRAIN[@]}" --resume plain.bin --steps 5 --save plain5.bin
cmp -s plain5.bin nvme5.bin && same_state plain5.bin.state nvme5.bin.state || fail "resumed checkpoints differ"
[ -z "$(ls nvme)" ] || fail "an NVMe file is left behind"
finish
