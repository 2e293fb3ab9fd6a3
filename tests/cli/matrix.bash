# The placement matrix's runner (sourced after lib.bash): the rows of
# tests/cli/placements.matrix, a group at a time.  The table's head says
# what a row asserts; docs/testing.md why it is shaped so.
MATRIX_FILE=$here/placements.matrix # ($here: the entry script's folder)
# what every run has: the data, 6 steps; the shape's sequence and batch
M_TRAIN=(--data 'corpus_train_*.bin' --steps 6 --lr 1e-3 --sample 0 --threads 1)
M_SHAPE=(--vocab 257 --max-seq 32 --seq 16 --batch 2)

# m_expand TOKEN...: the tokens' flags into M_PLAN (ferry plan's and
# train's), M_RUN (train's alone) and M_ENV (mpirun -x NAME=VALUE pairs)
m_expand() {
	M_PLAN=() M_RUN=() M_ENV=()
	local t
	for t in "$@"; do
		case $t in
		gpt) M_PLAN+=(--layers 3 --channels 32 --heads 4) ;;
		gpt5) M_PLAN+=(--layers 5 --channels 32 --heads 4) ;;
		llama) M_PLAN+=(--model llama --layers 3 --channels 32 --heads 4 --kv-heads 2) ;;
		llama5) M_PLAN+=(--model llama --layers 5 --channels 32 --heads 4 --kv-heads 2) ;;
		span) M_PLAN+=(--model llama --layers 4 --channels 64 --heads 4 --kv-heads 2 --seq 32 --batch 32) ;;
		z[0-3]) M_PLAN+=(--zero "${t#z}") ;;
		cpu | stream) M_PLAN+=(--offload-optimizer "$t") ;;
		OP) M_PLAN+=(--offload-params --offload-optimizer cpu) ;;
		OS) M_PLAN+=(--offload-params --offload-optimizer stream) ;;
		E) M_PLAN+=(--offload-embeddings) ;;
		DG) M_PLAN+=(--device-grads) ;;
		spec) M_PLAN+=(--clip-order speculative) ;;
		pp[0-9]) M_PLAN+=(--param-prefetch "${t#pp}") ;;
		qkv) M_PLAN+=(--policy qkv_proj_offloaded) ;;
		minimal) M_PLAN+=(--policy minimal_offloaded) ;;
		nothing) M_PLAN+=(--policy nothing_saveable) ;;
		everything) M_PLAN+=(--policy everything_saveable) ;;
		v4096) M_PLAN+=(--vocab 4096) ;;
		ga[0-9]) M_RUN+=(--grad-accum "${t#ga}") ;;
		clip10) M_RUN+=(--grad-clip 10) ;;
		stage100) M_ENV+=(-x FERRY_COMM_STAGE=1 -x FERRY_COMM_STAGE_BYTES=100) ;;
		stage) M_ENV+=(-x FERRY_COMM_STAGE=1) ;;
		*) M_PLAN+=("$t") ;;
		esac
	done
}

# m_ranks FILE KEY: "rank device host" lines of a plan's "ranks" list (KEY
# device_bytes) or a run's rank_memory record (KEY device_peak_bytes)
m_ranks() {
	grep -o "\"rank\": [0-9]*, \"$2\": [0-9]*, \"host_bytes\": [0-9]*" "$1" | sed -E 's/[^0-9]+/ /g; s/^ //'
}

# m_kinds PLAN: rank 0's optimizer state, and its weights and their
# copies but the ring of gathered layers (ZeRO-3's transient whole
# layers), device and host bytes together
m_kinds() {
	python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["plan"]
k = p["by_kind"]
b = lambda n: k[n]["device_bytes"] + k[n]["host_bytes"] if n in k else 0
ring = sum(x["bytes"] for x in p["buffers"] if x["name"] == "weight ring (gathered)")
print(b("optimizer state"), b("weights") + b("weight copies") - ring)' "$1"
}

# m_plan OUT FLAGS...: ferry plan --ranks $M_N of FLAGS into OUT, with the
# row's staging variables (M_ENV) in its environment
m_plan() {
	local out=$1 e env=()
	shift
	for e in "${M_ENV[@]}"; do [ "$e" = -x ] || env+=("$e"); done
	env "${env[@]}" "$FERRY" plan "${M_SHAPE[@]}" "$@" --ranks "$M_N" --json "$out" >/dev/null 2>"$out.err"
}

# m_row NAME WHAT TOKEN...: the row's run and its checks (the table's head)
m_row() {
	local name=$1 what=$2 planned measured z opt w opt0 w0 split= zero=() i
	shift 2
	m_expand "${M_GROUP_TOKENS[@]}" "$@"
	rm -rf "$name" "$name.state"
	checks=$((checks + 1))
	if ! "${MPIRUN[@]}" "${M_ENV[@]}" -np "$M_N" "$FERRY" train "${M_SHAPE[@]}" "${M_PLAN[@]}" "${M_TRAIN[@]}" \
		"${M_RUN[@]}" --save "$name" --json "$name.json" </dev/null >"$name.out" 2>&1; then
		fail "$what: $(tail -n 2 "$name.out")"
		return 1
	fi
	if [ ${#M_ENV[@]} -gt 0 ] && ! grep -q "^collectives: MPI through host staging (FERRY_COMM_STAGE=1)" "$name.out"; then
		fail "$what: the start does not say it stages"
		return 1
	fi
	if [[ " $* " == *" --host-tier "* ]]; then
		grep -q "^host tiers:" "$name.out" || { fail "$what: the run names no host tiers"; return 1; }
		[ -z "$(ls -A nvme 2>/dev/null)" ] || { fail "$what: files left in the NVMe directory"; return 1; }
	fi
	# the measured peaks of every rank: the plan's
	m_plan "$name.plan.json" "${M_PLAN[@]}" || { fail "$what: plan: $(cat "$name.plan.json.err")"; return 1; }
	planned=$(m_ranks "$name.plan.json" device_bytes) measured=$(m_ranks "$name.json" device_peak_bytes)
	if [ "$(grep -c . <<<"$planned")" != "$M_N" ] || [ "$planned" != "$measured" ]; then
		fail "$what: planned (rank device host) [$planned], measured [$measured]"
		return 1
	fi
	# sharding happened: at --zero K (or a --place of :shard(N...)) rank 0
	# plans less optimizer state than unsplit, and at ZeRO-3 fewer weights
	for ((i = 0; i < ${#M_PLAN[@]}; i++)); do
		if [ "${M_PLAN[i]}" = --zero ] && [ "${M_PLAN[i + 1]}" != 0 ]; then
			z=${M_PLAN[i + 1]}
			zero=("${M_PLAN[@]:0:i}" --zero 0 "${M_PLAN[@]:i+2}")
		elif [ "${M_PLAN[i]}" = --place ] && [[ ${M_PLAN[i + 1]} == *:shard\(* ]]; then
			z=1
			[[ ${M_PLAN[i + 1]} != *:shard\([0-9]*,params\)* ]] || z=3
			zero=("${M_PLAN[@]:0:i}" --place "$(sed -E 's/:shard\([^)]*\)//' <<<"${M_PLAN[i + 1]}")" "${M_PLAN[@]:i+2}")
		fi
	done
	if [ ${#zero[@]} -gt 0 ]; then
		m_plan "$name.plan0.json" "${zero[@]}" || { fail "$what: plan unsplit: $(cat "$name.plan0.json.err")"; return 1; }
		read -r opt w < <(m_kinds "$name.plan.json")
		read -r opt0 w0 < <(m_kinds "$name.plan0.json")
		if [ "$opt" -ge "$opt0" ] || { [ "$z" = 3 ] && [ "$w" -ge "$w0" ]; }; then
			fail "$what: rank 0 plans optimizer state $opt bytes and weights $w, unsplit $opt0 and $w0"
			return 1
		fi
		split=", rank 0's optimizer state $opt bytes (unsplit $opt0)"
		[ "$z" != 3 ] || split+=", weights $w ($w0)"
	fi
	M_NOTE="plan = measured ($(head -1 <<<"$planned" | cut -d' ' -f2-))$split"
}

# m_group NAME: the group's rows (in the sanitizer builds, FERRY_SANITIZED
# set, those marked a): the one-process run, then each row against its
# class's first and the one process
m_group() {
	local g=$1 n one tokens line row class asan words d start=$SECONDS ran=0
	local -A first=()
	line=$(grep -m1 "^group $g " "$MATRIX_FILE") || { fail "no group $g in the matrix"; return; }
	read -r _ _ n one tokens <<<"$line"
	read -r -a M_GROUP_TOKENS <<<"$tokens"
	M_N=$n
	mkdir -p nvme
	local i=0
	while read -r row class asan words; do
		[ "$row" = "$g" ] || continue
		i=$((i + 1))
		[ -z "${FERRY_SANITIZED:-}" ] || [ "$asan" = a ] || continue
		local -a toks
		read -r -a toks <<<"$words"
		if [ "$one" = one ] && [ ! -f "$g.one.json" ]; then
			m_expand "${M_GROUP_TOKENS[@]}"
			"$FERRY" train "${M_SHAPE[@]}" "${M_PLAN[@]}" "${M_TRAIN[@]}" "${M_RUN[@]}" --batch $((2 * n)) \
				--json "$g.one.json" </dev/null >one.out 2>&1 || fail "$g: one process: $(tail -n 2 one.out)"
		fi
		local name="$g.$i" what="$g ($n ranks: ${M_GROUP_TOKENS[*]}) row $i [$words]"
		ran=$((ran + 1))
		M_NOTE=
		m_row "$name" "$what" "${toks[@]}" || continue
		local note=$M_NOTE
		if [ "$class" != - ] && [ -n "${first[$class]:-}" ]; then
			same_save "${first[$class]}" "$name" || { fail "$what: other bits than ${first[$class]}"; continue; }
			note+=", the bits of ${first[$class]}"
		fi
		if [ "$one" = one ]; then
			d=$(losses_agree "$g.one.json" "$name.json") || { fail "$what: against one process: $d"; continue; }
			note+=", one process: $d"
		fi
		if [ "$class" != - ] && [ -z "${first[$class]:-}" ]; then
			first[$class]=$name
		else
			rm -rf "$name" "$name.state"
		fi
		echo "ok: $what: $note"
	done < <(grep -v '^#' "$MATRIX_FILE" | grep -v '^group ')
	echo "group $g: $ran rows in $((SECONDS - start)) s"
}

# matrix GROUP...: the groups' rows (zero_setup's corpus; skips without MPI,
# and in the sanitizer builds when none of the groups' rows is marked a)
matrix() {
	need_mpi
	local g
	if [ -n "${FERRY_SANITIZED:-}" ] && ! for g in "$@"; do grep -q "^$g [^ ]* a " "$MATRIX_FILE" && break; done; then
		echo "skip: no row of $* runs in the sanitizer builds (placements.matrix marks them a)"
		exit 77
	fi
	make_corpus
	for g in "$@"; do m_group "$g"; done
}
