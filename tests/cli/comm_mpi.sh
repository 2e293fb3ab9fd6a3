#!/usr/bin/env bash
# The collectives interface under mpirun (tests/test_comm.c's checks, each
# rank against values it computes alone): 2 and 4 ranks on this machine.
# Skips without mpirun or a ferry built with MPI.
. "$(dirname "$0")/lib.bash"
need_mpi
TEST_COMM=$(dirname "$FERRY")/tests/test_comm
[ -x "$TEST_COMM" ] || { echo "skip: $TEST_COMM not built"; exit 77; }

for n in 2 4; do
	checks=$((checks + 1))
	if mpi_run "$n" "$TEST_COMM" >out.txt 2>err.txt && [ "$(grep -c '^all [0-9]* checks passed' out.txt)" -eq "$n" ] &&
		[ "$(grep -c "(mpi), local" out.txt)" -eq "$n" ]; then
		echo "ok: test_comm on $n ranks: $(grep -m1 'checks passed' out.txt)"
	else
		fail "test_comm on $n ranks:"; cat out.txt err.txt >&2
	fi
done
finish
