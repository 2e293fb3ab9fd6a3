#!/usr/bin/env bash
# Each rank's own cores (issue 22 item 4; src/train/rank_cores.c), seen
# from outside: while 2 ranks train, every thread's Cpus_allowed_list in
# /proc.  Started with mpirun --bind-to none (one mask shared), ferry binds
# each rank's threads, all of them, to its own part of the mask; bound apart
# by mpirun (--bind-to core), each keeps the launcher's CPU; both ranks
# squeezed onto one CPU (taskset -c 0), and 3 ranks on 2 CPUs, nothing is
# bound.  The losses are the same bits either way.  Skips without mpirun,
# MPI in ferry or 2 CPUs.
. "$(dirname "$0")/lib.bash"
need_mpi
make_corpus
mask=$(taskset -pc $$ | sed 's/.*: //')
[ "$(nproc)" -ge 2 ] || { echo "skip: fewer than 2 CPUs ($mask)"; exit 77; }
# lib.bash's MPIRUN before mpirun (its environment; the binding flags differ
# per case), found by name: a fixed count cut off its sanitizer settings
# when a variable was added
LAUNCH=()
for word in "${MPIRUN[@]}"; do
	[ "$word" = mpirun ] && break
	LAUNCH+=("$word")
done
[ ${#LAUNCH[@]} -lt ${#MPIRUN[@]} ] || { echo "FAIL: no mpirun in lib.bash's MPIRUN" >&2; exit 1; }
common=(--data 'corpus_train_*.bin' --vocab 257 --max-seq 32 --seq 16 --lr 1e-3 --sample 0 --layers 2
	--channels 32 --heads 4 --batch 2 --threads 1)

# CPUs CPULIST: each CPU of a cpulist ("0-2,5" -> "0 1 2 5").
cpus() {
	local part out=""
	for part in ${1//,/ }; do
		if [[ $part == *-* ]]; then out+=" $(seq -s ' ' "${part%-*}" "${part#*-}")"; else out+=" $part"; fi
	done
	echo $out
}

# watch NAME PREFIX... -- LAUNCHER_FLAGS: runs 2+ ranks long enough to
# look at, and writes each rank's threads' masks, one line per rank (the
# distinct cpulists of its threads), to NAME.masks; the banner to NAME.out.
watch() {
	local name=$1 np=$2; shift 2
	"$@" -np "$np" "$FERRY" train "${common[@]}" --steps 3000 --json "$name.json" >"$name.out" 2>"$name.err" &
	local launcher=$! i ranks
	for i in $(seq 1 600); do
		grep -q "^step " "$name.out" 2>/dev/null && break
		sleep 0.05
	done
	ranks=$(pgrep -f -- "--json $name.json" | while read -r p; do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = ferry ] && echo "$p"; done)
	for p in $ranks; do
		grep -h Cpus_allowed_list /proc/"$p"/task/*/status 2>/dev/null | awk '{print $2}' | sort -u | paste -sd' '

	done >"$name.masks"
	wait "$launcher" || fail "$name: exit $? ($(tail -n 2 "$name.err"))"
}

# one_mask_each NAME: 2 ranks or more seen, each rank's threads on one cpulist.
one_mask_each() {
	local name=$1 n
	n=$(grep -c . "$name.masks")
	[ "$n" -ge 2 ] || { fail "$name: found $n ranks' threads in /proc"; return 1; }
	if grep -q ' [^ ]' "$name.masks"; then
		fail "$name: a rank's threads run on different masks: $(tr '\n' '|' <"$name.masks")"
		return 1
	fi
}

# 1. one mask shared: ferry splits it, every thread of a rank on its part
checks=$((checks + 1))
watch split 2 "${LAUNCH[@]}" mpirun --oversubscribe --bind-to none
if one_mask_each split; then
	a=$(sed -n 1p split.masks) b=$(sed -n 2p split.masks)
	all=$(echo $(cpus "$a") $(cpus "$b") | tr ' ' '\n' | sort -n | tr '\n' ' ')
	want=$(cpus "$mask" | tr ' ' '\n' | sort -n | tr '\n' ' ')
	common_cpus=$(comm -12 <(cpus "$a" | tr ' ' '\n' | sort) <(cpus "$b" | tr ' ' '\n' | sort))
	if [ -n "$common_cpus" ] || [ "$all" != "$want" ]; then
		fail "split: ranks on $a and $b; want disjoint parts of $mask"
	elif ! grep -q "ferry bound each to its part" split.out; then
		fail "split: the banner does not say so: $(grep cores: split.out)"
	else
		echo "ok: one mask $mask shared by 2 ranks: every thread of one on $a, of the other on $b ($(grep cores: split.out))"
	fi
fi

# 2. bound apart by the launcher: kept
checks=$((checks + 1))
watch apart 2 "${LAUNCH[@]}" mpirun --bind-to core
if one_mask_each apart; then
	a=$(sed -n 1p apart.masks) b=$(sed -n 2p apart.masks)
	if [ "$a" = "$b" ] || ! grep -q "keeps the CPUs its launcher bound it to" apart.out; then
		fail "apart: ranks on $a and $b: $(grep cores: apart.out)"
	else
		echo "ok: bound apart by mpirun --bind-to core, kept: $a and $b"
	fi
fi

# 3. fewer CPUs than ranks: nothing bound (all threads on CPU 0, as taskset left them)
checks=$((checks + 1))
first=$(cpus "$mask" | cut -d' ' -f1)
watch squeezed 2 taskset -c "$first" "${LAUNCH[@]}" mpirun --oversubscribe --bind-to none
if one_mask_each squeezed; then
	if [ "$(sort -u squeezed.masks | tr -d ' ')" != "$first" ] || ! grep -q "unbound" squeezed.out; then
		fail "squeezed: $(tr '\n' '|' <squeezed.masks): $(grep cores: squeezed.out)"
	else
		echo "ok: 2 ranks on CPU $first alone: unbound ($(grep cores: squeezed.out))"
	fi
fi
checks=$((checks + 1))
"${LAUNCH[@]}" mpirun --oversubscribe --bind-to none -np "$(($(nproc) + 1))" "$FERRY" train "${common[@]}" --steps 2 \
	>over.out 2>over.err || fail "$(($(nproc) + 1)) ranks: $(tail -n 2 over.err)"
listed=$(sed -n 's/^cores: rank 0 runs on CPUs \([0-9,-]*\).*unbound$/\1/p' over.out)
listed=${listed%,}
if [ -n "$listed" ] && [ "$(cpus "$listed")" = "$(cpus "$mask")" ]; then
	echo "ok: more ranks than CPUs: unbound, on all of $listed"
else
	fail "more ranks than CPUs: $(grep cores: over.out)"
fi

# 4. the same bits however the cores were bound
fields() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }
checks=$((checks + 1))
if [ -n "$(fields split.json)" ] && cmp -s <(fields split.json) <(fields apart.json) &&
	cmp -s <(fields split.json) <(fields squeezed.json); then
	echo "ok: the same losses and gradient norms, to the last digit, split, bound by mpirun and unbound"
else
	fail "losses differ with the binding: $(diff <(fields split.json) <(fields apart.json) | head -3)"
fi
finish
