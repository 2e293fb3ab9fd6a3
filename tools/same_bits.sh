#!/usr/bin/env bash
# Whether two builds of ferry train the same bits and make the same plans:
# for GPT-2 and Llama (its own head and a tied one) under every offload mode
# and several policies, the saved model and state files, the per-step
# losses, the plan JSON (without "place", which older builds lack) and the
# printed schedule.  For a refactoring that must change nothing:
#
#   git worktree add /tmp/base BASE && cmake -S /tmp/base -B /tmp/base/build \
#       -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/base/build -j
#   bash tools/same_bits.sh /tmp/base/build/ferry ./build/ferry
#
# Prints a line per configuration; exits 1 if any differs.
set -u
case "${1:-}" in
-h | --help | "")
	echo "usage: bash tools/same_bits.sh OLD_FERRY NEW_FERRY [WORKDIR]"
	exit 0 ;;
esac
old=$(realpath "$1") new=$(realpath "$2")
work=${3:-$(mktemp -d)}
mkdir -p "$work" && cd "$work" || exit 1
export FERRY_BACKEND=cpu OMP_WAIT_POLICY=passive

for d in 0 1 2 3 4 5 6 7; do
	for i in $(seq 1 20); do echo "doc $d line $i: pack my box with five dozen liquor jugs"; done >"text$d.txt"
done
"$new" data --out corpus --val-fraction 0.25 text?.txt >/dev/null 2>&1 || { echo "cannot make corpus" >&2; exit 1; }

models=("gpt2|--layers 3 --channels 32 --heads 4"
	"llama|--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2"
	"llama-tied|--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2 --tied-head")
modes=("device|"
	"opt-stream|--offload-optimizer stream"
	"opt-cpu|--offload-optimizer cpu"
	"speculative|--offload-optimizer cpu --clip-order speculative --grad-clip 0.05"
	"params-cpu|--offload-params --param-prefetch 2"
	"params-stream|--offload-params --offload-optimizer stream"
	"embeddings-cpu|--offload-params --offload-embeddings"
	"embeddings-stream|--offload-params --offload-embeddings --offload-optimizer stream")
policies=(everything_saveable minimal_offloaded nothing_saveable qkv_proj_offloaded)
common=(--max-seq 32 --batch 2 --seq 16 --vocab 257)
train=(--data 'corpus_train_*.bin' --steps 4 --sample 0 --threads 2 --lr 1e-2)

# Whether the only differences are within the first 1 KiB of state files
# (their header: the format version, its fields and checksum), every
# moment and weight the same.
header_only() {
	diff -rq old.out new.out | while read -r _ a _ b _; do
		case "$a" in *state*) ;; *) echo x; break ;; esac
		[ "$(cmp -l "$a" "$b" | awk '$1 > 1024' | head -1)" ] && { echo x; break; }
	done | grep -q x && return 1
	return 0
}

bad=0
for m in "${models[@]}"; do
	mname=${m%%|*}; read -r -a mflags <<<"${m#*|}"
	for md in "${modes[@]}"; do
		dname=${md%%|*}; read -r -a dflags <<<"${md#*|}"
		for pol in "${policies[@]}"; do
			tag="$mname $dname $pol"
			args=("${mflags[@]}" "${common[@]}" "${dflags[@]}" --policy "$pol")
			for b in old new; do
				bin=${!b}
				rm -rf "$b.out" && mkdir "$b.out"
				"$bin" plan "${args[@]}" --json "$b.out/plan.json" >/dev/null 2>&1
				python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("place",None); print(json.dumps(d,sort_keys=True))' \
					"$b.out/plan.json" >"$b.out/plan.norm" 2>/dev/null
				"$bin" plan "${args[@]}" --schedule 2>/dev/null | sed -n '/^schedule of one training step/,$p' >"$b.out/schedule.txt"
				"$bin" train "${args[@]}" "${train[@]}" --save "$b.out/model" --json "$b.out/steps.jsonl" \
					>"$b.out/log.txt" 2>&1
				grep -o '"loss": [^,]*' "$b.out/steps.jsonl" >"$b.out/losses" 2>/dev/null
				rm -f "$b.out/plan.json" "$b.out/steps.jsonl" "$b.out/log.txt"
			done
			if diff -r old.out new.out >/dev/null && [ -s new.out/losses ]; then
				echo "same: $tag"
			elif header_only && [ -s new.out/losses ]; then
				echo "same but the state files' headers (a format version): $tag"
			else
				echo "DIFFERENT: $tag"; diff -rq old.out new.out; bad=1
			fi
		done
	done
done
[ $bad -eq 0 ] && echo "all the same" || echo "some differ"
exit $bad
