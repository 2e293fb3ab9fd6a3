#!/usr/bin/env bash
# The folders of src/ depend one way: a file includes headers of its own
# folder and of folders below it in LAYERS, never of one above (issue 21,
# docs/design.md).  Every #include "dir/..." of every C and CUDA file under
# src/ is checked; "ferry/..." is the public API (include/ferry/), open to
# all.  A folder missing from the table fails too, so a new one is placed
# on purpose.  The checker runs first on a small tree that breaks the
# order, so a checker that finds nothing cannot pass.  ($1, the ferry
# binary, is not used.)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"

# Lowest first: each folder may include those above it in this list.
LAYERS="
core     status, platform, the llm.c file header
comm     collectives: MPI, NCCL, one process; ranks agreeing on errors
data     token shards, tokenizers, safetensors, config.json
memory   arenas
ops      op kinds, CPU kernels
graph    named dimensions, declared layers and models
models   declarations only
optim    the CPU AdamW
tier     host tiers, the NVMe file: hand out memory (no backend, no plan)
backend  cpu, cuda: streams, events, copies, ops; registers host memory
plan     the tensor table, policies, the activation planner: placement
sched    the schedule: task kinds, emitters, replay, trace
cost     calibration, the cost model (prices and simulates tasks)
exec     a model compiled into programs and run; the offload engine
train    trainer, checkpoints
"

# check_layers DIR: prints each include that goes up (file:line: why) and
# a summary line; exit 1 when any does.
check_layers() {
	local dir=$1 files
	mapfile -t files < <(cd "$dir" && find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
	(cd "$dir" && awk -v layers="$LAYERS" '
		BEGIN {
			n = split(layers, line, "\n")
			for (i = 1; i <= n; i++)
				if (split(line[i], w, " ") > 0)
					rank[w[1]] = ++r
			bad = 0
		}
		FNR == 1 {
			files++
			split(FILENAME, p, "/")
			me = p[2]
			if (!(me in rank)) {
				print FILENAME ": folder src/" me " is not in the layer table"
				bad++
			}
		}
		/^[ \t]*#[ \t]*include[ \t]*"[a-z_]+\// {
			s = $0
			sub(/^[^"]*"/, "", s)
			sub(/\/.*/, "", s)
			if (s == "ferry" || !(me in rank))
				next
			if (!(s in rank)) {
				print FILENAME ":" FNR ": includes " s "/, a folder not in the layer table"
				bad++
			} else if (rank[s] > rank[me]) {
				print FILENAME ":" FNR ": " me "/ includes " s "/, a higher layer: " $0
				bad++
			}
		}
		END {
			print bad " upward includes in " files " files"
			exit bad > 0
		}' "${files[@]}")
}

# The checker on a tree that breaks the order: ops/ including optim/, an
# unknown folder, and one include that is allowed.
checks=$((checks + 1))
mkdir -p fake/src/ops/cpu fake/src/tier fake/src/widgets
printf '#include "ops/cpu/kernels.h"\n#include "optim/cpu_adamw.h"\n' >fake/src/ops/cpu/adamw.c
printf '#include "core/error.h"\n#include "ferry/tier.h"\n' >fake/src/tier/ok.c
printf '#include "core/error.h"\n' >fake/src/widgets/w.c
check_layers fake >fake.txt
rc=$?
if [ $rc -eq 1 ] && grep -q '^src/ops/cpu/adamw.c:2: ops/ includes optim/' fake.txt &&
	grep -q '^src/widgets/w.c: folder src/widgets is not in the layer table' fake.txt &&
	! grep -q 'ok.c' fake.txt && grep -q '^2 upward includes in 3 files' fake.txt; then
	echo "ok: the checker fails a tree that breaks the order: $(head -n 1 fake.txt)"
else
	fail "the checker on a bad tree: exit $rc, output: $(cat fake.txt)"
fi

checks=$((checks + 1))
check_layers "$ROOT" >out.txt
rc=$?
cat out.txt
n=$(sed -En 's/^[0-9]+ upward includes in ([0-9]+) files$/\1/p' out.txt)
if [ $rc -ne 0 ]; then
	fail "includes against the layer order (the lines above): move the code, or the call, to the layer it belongs to"
elif [ -z "$n" ] || [ "$n" -lt 100 ]; then
	# it must have seen the code base, not an empty directory
	fail "the checker saw ${n:-no} files"
else
	echo "ok: every include in src/ goes down the layer order"
fi
finish
