#!/usr/bin/env bash
# Placements written down: `ferry plan` prints every group's placement
# ("place" in --json, "placement:" in text), and --place with that string
# alone reproduces the plan byte for byte (JSON, text and the schedule) for
# GPT-2 and Llama under every offload mode and several policies, and on
# host tiers (--host-tier is a shorthand of the placements' tiers; the
# machine's --topology and --nvme-dir are given on both sides); --place
# trains the same bits as the flags it stands for; bad specs and
# placements that do not go together are refused with one line.
. "$(dirname "$0")/lib.bash"
make_corpus
GPT2=(--layers 3 --channels 16 --heads 2 --max-seq 32 --batch 2 --seq 16)
LLAMA=(--model llama --layers 3 --channels 16 --heads 2 --kv-heads 1 --max-seq 32 --batch 2 --seq 16)

place_of() { # place_of FILE: the "place" string of a plan's JSON
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["place"])' "$1"
}

# A text plan without the free memory of host tiers (the disk's changes).
text_of() {
	sed -E 's/[0-9.]+ (bytes|[KMGT]iB) free/N free/g' "$1"
}

# round_trip NAME SHAPE... -- FLAGS...: the plan with the flags, and with
# --place of its printed placements instead, are the same bytes.
round_trip() {
	local name=$1; shift
	local shape=() flags=()
	while [ "$1" != "--" ]; do shape+=("$1"); shift; done
	shift
	flags=("$@")
	checks=$((checks + 1))
	"$FERRY" plan "${shape[@]}" "${flags[@]}" --json a.json >/dev/null 2>err.txt || { fail "$name: plan: $(cat err.txt)"; return; }
	local place
	place=$(place_of a.json)
	[ -n "$place" ] || { fail "$name: no place in the plan"; return; }
	"$FERRY" plan "${shape[@]}" --place "$place" --json b.json >/dev/null 2>err.txt ||
		{ fail "$name: plan --place '$place': $(cat err.txt)"; return; }
	cmp -s a.json b.json || { fail "$name: --place '$place' gives another plan"; diff a.json b.json | head -5 >&2; return; }
	"$FERRY" plan "${shape[@]}" "${flags[@]}" --schedule >a.txt 2>&1
	"$FERRY" plan "${shape[@]}" --place "$place" --schedule >b.txt 2>&1
	[ "$(text_of a.txt)" = "$(text_of b.txt)" ] ||
		{ fail "$name: --place gives another text plan or schedule"; diff a.txt b.txt | head -5 >&2; return; }
	echo "ok: $name: $place"
}

for shape in GPT2 LLAMA; do
	declare -n S=$shape
	round_trip "$shape defaults" "${S[@]}" --
	round_trip "$shape optimizer stream" "${S[@]}" -- --offload-optimizer stream --policy minimal_offloaded
	round_trip "$shape optimizer cpu" "${S[@]}" -- --offload-optimizer cpu --policy nothing_saveable
	round_trip "$shape speculative" "${S[@]}" -- --offload-optimizer cpu --clip-order speculative
	round_trip "$shape gradients on the device" "${S[@]}" -- --device-grads --clip-order speculative
	round_trip "$shape gradients on the device, 4 slots" "${S[@]}" -- --offload-optimizer cpu \
		--place 'adam.grads=device:stream(3)' --policy minimal_offloaded
	round_trip "$shape split on the host" "${S[@]}" -- --place 'adam=host:cpu:shard(2)' --policy minimal_offloaded
	round_trip "$shape split, streamed" "${S[@]}" -- --place 'adam=host:stream:shard(4)'
	round_trip "$shape split, speculative" "${S[@]}" -- --place 'adam=host(dram):cpu(speculative):shard(3)'
	round_trip "$shape params" "${S[@]}" -- --offload-params --policy qkv_proj_offloaded --prefetch-depth 3
	round_trip "$shape params, stream" "${S[@]}" -- --offload-params --offload-optimizer stream --param-prefetch 2
	round_trip "$shape params, embeddings" "${S[@]}" -- --offload-params --offload-embeddings --param-prefetch 3 \
		--policy 'save_and_offload_only_these_names([out_proj], [query_proj, key_proj])'
	round_trip "$shape custom policy" "${S[@]}" -- --policy custom:decoder_layer_input=offload,context=device
	round_trip "$shape tiles" "${S[@]}" -- --mlp-tile 5 --loss-tile 7 --policy nothing_saveable
	round_trip "$shape tiles auto, embeddings" "${S[@]}" -- --offload-params --offload-embeddings --mlp-tile auto \
		--loss-tile auto --policy custom:decoder_layer_input=offload
	unset -n S
done

# host tiers: the machine's flags on both sides
printf 'node 0 cpus 2 mem 8G\nnode 1 cpus 0 mem 1G\nnode 2 cpus 0 mem 1G\n' >topology.txt
mkdir -p nvme
for shape in GPT2 LLAMA; do
	declare -n S=$shape
	round_trip "$shape tiers by kind" "${S[@]}" --topology topology.txt -- --offload-optimizer stream \
		--policy minimal_offloaded --host-tier activations=interleave:1*3+2,params=node:2,optimizer=dram
	round_trip "$shape all on DRAM" "${S[@]}" --topology topology.txt -- --offload-params --offload-optimizer cpu \
		--policy minimal_offloaded --host-tier all=dram
	round_trip "$shape on NVMe" "${S[@]}" --nvme-dir nvme -- --offload-optimizer stream --policy minimal_offloaded \
		--host-tier all=nvme
	round_trip "$shape CXL by default" "${S[@]}" --topology topology.txt -- --offload-params --offload-embeddings \
		--offload-optimizer stream --policy minimal_offloaded
	unset -n S
done
"$FERRY" plan "${GPT2[@]}" --topology topology.txt --offload-optimizer cpu --policy minimal_offloaded \
	--host-tier activations=cxl,params=dram,grads=dram,optimizer=dram --json a.json >/dev/null
[ "$(place_of a.json)" = "layers.weights=device,edges.weights=device,adam=host(dram):cpu,activations=minimal_offloaded,activations.host=cxl,activations.prefetch=2" ] ||
	fail "--host-tier's placements: $(place_of a.json)"
expect_ok "text plan names the tiers" "$FERRY" plan "${GPT2[@]}" --topology topology.txt --offload-optimizer stream \
	--host-tier optimizer=cxl,params=node:2
grep -qx "placement: layers.weights=device,edges.weights=device,adam=host(params=node:2,optimizer=cxl):stream,activations=everything_saveable,activations.prefetch=2" out.txt ||
	fail "plan prints the tiers in 'placement:': $(sed -n 2p out.txt)"
grep -qE "^  cxl \(nodes 1,2 interleaved\) .* optimizer" out.txt && grep -qE "^  node:2 .* params" out.txt ||
	fail "the tiers the placement names hold the state: $(cat out.txt)"
# --place's tiers train the bits --host-tier's do, on those tiers
TTRAIN=("${GPT2[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 2 --steps 3 --topology topology.txt)
expect_ok "train with --host-tier" "$FERRY" train "${TTRAIN[@]}" --offload-optimizer stream \
	--host-tier params=node:1,grads=node:1,optimizer=node:1 --save tflags.bin
grep -q "^host tiers: params .* on node:1; optimizer .* on node:1;" out.txt || fail "--host-tier: $(grep "^host tiers" out.txt)"
expect_ok "train with tiers in --place" "$FERRY" train "${TTRAIN[@]}" --place 'adam=host(node:1):stream' --save tplace.bin
grep -q "^host tiers: params .* on node:1; optimizer .* on node:1;" out.txt || fail "--place: $(grep "^host tiers" out.txt)"
cmp -s tflags.bin tplace.bin && same_state tflags.bin.state tplace.bin.state || fail "tiers in --place train other bits"

# the written placements are what the flags set
"$FERRY" plan "${GPT2[@]}" --offload-params --offload-embeddings --param-prefetch 2 --clip-order speculative \
	--json a.json >/dev/null
[ "$(place_of a.json)" = "layers.weights=host:stream(2),edges.weights=host:stream,adam=host:cpu(speculative),activations=everything_saveable,activations.prefetch=2" ] ||
	fail "the flags' placements: $(place_of a.json)"
expect_ok "text plan names the placements" "$FERRY" plan "${GPT2[@]}" --offload-optimizer stream
grep -qx "placement: layers.weights=device,edges.weights=device,adam=host:stream,activations=everything_saveable,activations.prefetch=2" out.txt ||
	fail "plan prints 'placement:': $(sed -n 2p out.txt)"
# --place over the flags: the item given wins, the others stay
"$FERRY" plan "${GPT2[@]}" --offload-optimizer cpu --place 'activations.context=offload' --json a.json >/dev/null
[ "$(place_of a.json)" = "layers.weights=device,edges.weights=device,adam=host:cpu,activations.context=offload,activations.prefetch=2" ] ||
	fail "--place over flags: $(place_of a.json)"

# per-name items replace a --policy given as a flag (within one spec the two
# forms do not mix: refused below)
"$FERRY" plan "${GPT2[@]}" --policy minimal_offloaded --place 'activations.context=offload' --json a.json >/dev/null
[ "$(place_of a.json)" = "layers.weights=device,edges.weights=device,adam=device,activations.context=offload,activations.prefetch=2" ] ||
	fail "per-name items over --policy: $(place_of a.json)"

# --place trains the bits its flags train
TRAIN=("${GPT2[@]}" --data 'corpus_train_*.bin' --sample 0 --threads 2 --steps 3)
expect_ok "train with flags" "$FERRY" train "${TRAIN[@]}" --offload-params --offload-embeddings --policy minimal_offloaded \
	--save flags.bin --json flags.jsonl
expect_ok "train with --place" "$FERRY" train "${TRAIN[@]}" \
	--place 'layers.weights=host:stream(1),edges.weights=host:stream,adam=host:cpu,activations=minimal_offloaded' \
	--save place.bin --json place.jsonl
cmp -s flags.bin place.bin && same_state flags.bin.state place.bin.state || fail "--place trains other bits than its flags"
[ "$(grep -o '"loss": [^,]*' flags.jsonl)" = "$(grep -o '"loss": [^,]*' place.jsonl)" ] || fail "--place: other losses"

# a plan no preset fits names the best placement ferry can make (issue 40,
# item 12): over where the weights and AdamW's state live, tiles of tokens,
# ZeRO's stages on several ranks and every preset, the one that keeps the
# most on the device; and that placement fits
WIDE=(--layers 4 --channels 128 --heads 4 --vocab 2000 --max-seq 128 --batch 8 --seq 128)
ADVICE="^moving state, the largest plan that fits (.*): --place '.*'"
# advised WHAT ARGS...: the placement the plan advises fits when given back
advised() {
	local what=$1; shift
	checks=$((checks + 1))
	"$FERRY" plan "$@" >out.txt 2>&1 && { fail "$what: the plan fits as it is?"; return; }
	advice=$(grep -o "$ADVICE" out.txt | sed "s/.*--place '\(.*\)'/\1/")
	[ -n "$advice" ] || { fail "$what: no placement advised: $(tail -2 out.txt)"; return; }
	"$FERRY" plan "$@" --place "$advice" >fit.txt 2>&1
	if grep -q "^fits: needs" fit.txt; then echo "ok: $what: $advice"; else fail "$what: $advice: $(tail -1 fit.txt)"; fi
}
advised "32M" "${WIDE[@]}" --device-mem 32M
# tiles with offloading: neither alone fits at 28M
advised "28M" "${WIDE[@]}" --device-mem 28M
grep -q "activations.mlp_tile=auto" <<<"$advice" || fail "28M: the advice tiles the MLP: $advice"
"$FERRY" plan "${WIDE[@]}" --device-mem 12M >out.txt 2>&1
grep -q "^nothing fits, however placed" out.txt || fail "12M: nothing fits: $(tail -1 out.txt)"
# the issue's GPT-2 at vocabulary 50257 in 100M: 'nothing fits' before
advised "GPT-2 50257 in 100M" --vocab 50257 --device-mem 100M
# on 8 ranks ZeRO-3 alone fits 455M: it was never advised
LL=(--ranks 8 --model llama --layers 8 --channels 512 --heads 8 --kv-heads 4 --vocab 32000 --batch 2 --seq 64)
advised "8 ranks, 455M" "${LL[@]}" --device-mem 455M
grep -q "adam=device:shard(8,params)" <<<"$advice" || fail "8 ranks: ZeRO-3 advised: $advice"
expect_error "train names the placement" "presets that fit: none; moving state, the largest plan that fits" \
	"$FERRY" train "${WIDE[@]}" --data 'corpus_train_*.bin' --device-mem 32M --sample 0

# refusals, one line each
expect_error "unknown group" "unknown group 'weights'" "$FERRY" plan --place weights=device
expect_error "no value" "GROUP=PLACEMENT expected" "$FERRY" plan --place adam
expect_error "bad adam" "--place adam=host: device, host:stream" "$FERRY" plan --place adam=host
expect_error "bad depth" "host:stream(D), D layers loaded ahead (1 to 64)" "$FERRY" plan \
	--place 'adam=host:cpu,layers.weights=host:stream(0)'
expect_error "edges depth" "--place edges.weights=host:stream(2): device or host:stream" "$FERRY" plan \
	--place 'edges.weights=host:stream(2)'
expect_error "weights without the optimizer" "adam=host:stream or host:cpu in --place" "$FERRY" plan \
	--place layers.weights=host:stream
expect_error "edges without layers" "it needs --offload-params" "$FERRY" plan --place adam=host:cpu,edges.weights=host:stream
expect_error "speculative on the device" "needs --offload-optimizer cpu" "$FERRY" plan --clip-order speculative
# an item replaces its group's whole placement: adam=device drops the speculative order
expect_ok "adam=device over speculative" "$FERRY" plan --offload-optimizer cpu --clip-order speculative --place adam=device
grep -q "adam=device," out.txt || fail "adam=device replaces the speculative placement"
expect_error "two activation forms" "use one form" "$FERRY" plan --place activations=full,activations.context=offload
expect_error "unknown activation name" "context2" "$FERRY" plan --place activations.context2=offload
expect_error "bad prefetch" "activations.prefetch=0" "$FERRY" plan --place activations.prefetch=0
expect_error "tiers with tiers off" "--host-tier off: the placements name host tiers" "$FERRY" plan \
	--place 'adam=host(dram):stream' --host-tier off
expect_error "a tier on the weights" "their tier is adam's" "$FERRY" plan \
	--place 'adam=host:cpu,layers.weights=host(dram):stream(2)'
expect_error "nvme for the CPU's state" "holds no state the host threads compute on" "$FERRY" plan \
	--place 'adam=host(nvme):cpu' --nvme-dir nvme
expect_error "an unknown tier" "unknown host tier 'tape'" "$FERRY" plan --place 'activations.host=tape'
expect_error "adam's kinds" "the activations' tier is activations.host" "$FERRY" plan \
	--place 'adam=host(activations=dram):stream'
finish
