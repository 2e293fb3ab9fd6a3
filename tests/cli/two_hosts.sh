#!/usr/bin/env bash
# Two machines on one (issue 22 item 9): two network namespaces joined by a
# veth pair are the hosts, Open MPI runs one rank on each over TCP, started
# by tools/netns_agent.sh in place of ssh; GPT-2 trains 8 steps to the
# same losses and saved files as two ranks on this host.  Skips (77)
# without root, iproute2, network namespaces or veth, mpirun or a ferry
# built with MPI.  The namespaces are deleted on exit, also on failure.
AGENT=$(cd "$(dirname "$0")/../.." && pwd)/tools/netns_agent.sh
. "$(dirname "$0")/lib.bash"
need_mpi
[ "$(id -u)" -eq 0 ] || { echo "skip: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "skip: no ip (apt-get install iproute2)"; exit 77; }

# the namespaces are named after this shell's pid; those of runs killed
# before their cleanup (whose pid is gone) are deleted first
for old in $(ip netns list 2>/dev/null | sed -n 's/^ferry-h[01]-\([0-9]*\).*/\1/p' | sort -u); do
	kill -0 "$old" 2>/dev/null || for h in 0 1; do ip netns del "ferry-h$h-$old" 2>/dev/null; rm -rf "/etc/netns/ferry-h$h-$old"; done
done
hosts=(ferry-h0-$$ ferry-h1-$$)
addr=(10.231.0.1 10.231.0.2)
ends=("fy$$a" "fy$$b") # the veth pair's ends (names of 15 bytes at most)
cleanup() {
	for h in "${hosts[@]}"; do
		ip netns del "$h" 2>/dev/null
		rm -rf "/etc/netns/$h"
	done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# two hosts: a namespace each, one end of the pair in each, loopback up,
# each resolving both names
ip netns add "${hosts[0]}" 2>netns.err || { echo "skip: no network namespaces: $(cat netns.err)"; exit 77; }
ip netns add "${hosts[1]}" &&
	ip link add "${ends[0]}" type veth peer name "${ends[1]}" 2>netns.err || { echo "skip: no veth: $(cat netns.err)"; exit 77; }
for i in 0 1; do
	mkdir -p "/etc/netns/${hosts[i]}" 2>netns.err &&
		printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "${addr[0]}" "${hosts[0]}" "${addr[1]}" "${hosts[1]}" \
			>"/etc/netns/${hosts[i]}/hosts" || { echo "skip: cannot write /etc/netns: $(cat netns.err)"; exit 77; }
	ip link set "${ends[i]}" netns "${hosts[i]}" &&
		ip -n "${hosts[i]}" addr add "${addr[i]}/24" dev "${ends[i]}" &&
		ip -n "${hosts[i]}" link set "${ends[i]}" up &&
		ip -n "${hosts[i]}" link set lo up || { echo "FAIL: cannot set up host ${hosts[i]}" >&2; exit 1; }
done
printf '%s slots=1\n' "${hosts[@]}" >hostfile

# mpirun runs on the first host; the agent starts the second's daemon
make_corpus
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
net=(--hostfile hostfile --mca plm_rsh_agent "$AGENT" --mca btl "tcp,self"
	--mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24)
across() {
	timeout 300 ip netns exec "${hosts[0]}" "${MPIRUN[@]}" -np 2 "${net[@]}" "$@"
}

# each rank on its own host: it sees that host's address alone
checks=$((checks + 1))
# shellcheck disable=SC2016
across sh -c 'echo "rank $OMPI_COMM_WORLD_RANK: $(ip -o -4 addr show scope global | awk "{ print \$4 }")"' \
	>where.txt 2>where.err
if grep -qx "rank 0: ${addr[0]}/24" where.txt && grep -qx "rank 1: ${addr[1]}/24" where.txt; then
	echo "ok: rank 0 on ${hosts[0]} (${addr[0]}), rank 1 on ${hosts[1]} (${addr[1]})"
else
	fail "where the ranks ran: $(cat where.txt where.err)"
fi

common=(--data 'corpus_train_*.bin' --val-data 'corpus_val_*.bin' --vocab 257 --max-seq 32 --seq 16 --batch 2
	--steps 8 --lr 1e-3 --val-every 4 --val-batches 2 --sample 0 --threads 1 --layers 2 --channels 32 --heads 4)
checks=$((checks + 1))
if ! mpi_run 2 "$FERRY" train "${common[@]}" --json here.json --save here.bin >here.out 2>&1; then
	fail "two ranks on this host: $(tail -n 2 here.out)"
elif ! across "$FERRY" train "${common[@]}" --json two.json --save two.bin >two.out 2>two.err; then
	fail "one rank on each host: $(tail -n 5 two.err)"
else
	# the figures of each step, without its times
	figures() { sed -E 's/, "(step_ms|tokens_per_s|elapsed_s|mfu)": [-0-9.e+]+//g' "$1"; }
	if [ "$(grep -c '^{"step"' two.json)" -eq 8 ] && grep -q "(2 ranks of 2 rows, mpi)" two.out &&
		[ "$(figures here.json)" = "$(figures two.json)" ] && cmp -s here.bin two.bin &&
		same_state here.bin.state two.bin.state; then
		echo "ok: one rank on each host: 8 steps' losses and the saved files as two ranks on one host"
	else
		fail "one rank on each host against two on one: $(diff <(figures here.json) <(figures two.json) | head -4)"
	fi
fi
finish
