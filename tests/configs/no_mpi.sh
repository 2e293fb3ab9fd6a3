#!/usr/bin/env bash
# Issue 22 item 1: "Without MPI installed the build still works and says
# so."  Builds ferry here with MPI hidden from CMake (as on a machine
# without libopenmpi-dev; the CUDA backend off, to keep it short), then:
# the configure step and `ferry info` say MPI is not built in; one process
# trains; FERRY_COMM_ENGINE=mpi is refused by name; and where mpirun
# exists, two ranks of this build refuse to train as two copies side by
# side, each with the message, within a bound.  Run by the optimised
# build's suite only (tests/CMakeLists.txt): one extra build.
#   bash tests/configs/no_mpi.sh SOURCE_DIR WORK_DIR
ROOT=$(cd "$1" && pwd)
. "$(dirname "$0")/../cli/lib.bash" "" "$2"

command -v cmake >/dev/null || { echo "skip: no cmake"; exit 77; }
checks=$((checks + 1))
if cmake -S "$ROOT" -B build -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
	>configure.txt 2>&1; then
	grep -q "ferry: MPI off" configure.txt && echo "ok: configured without MPI, and says so: $(grep 'MPI off' configure.txt)" ||
		fail "the configure step does not say MPI is off: $(grep 'ferry:' configure.txt)"
else
	fail "configure without MPI failed"; tail -20 configure.txt >&2; finish; exit
fi
checks=$((checks + 1))
if cmake --build build -j 2 --target ferry_cli >build.txt 2>&1; then
	echo "ok: built without MPI"
else
	fail "build without MPI failed"; grep -E "error|undefined" build.txt | head -20 >&2; finish; exit
fi
F=$PWD/build/ferry
checks=$((checks + 1))
"$F" info >info.txt 2>&1
grep -q "MPI not built in" info.txt && echo "ok: ferry info: $(grep '^collectives' info.txt)" ||
	fail "ferry info does not say MPI is not built in: $(grep '^collectives' info.txt)"

tiny=(--backend cpu --steps 2 --layers 2 --channels 64 --heads 2 --seq 32 --batch 2 --sample 0)
checks=$((checks + 1))
if "$F" train "${tiny[@]}" >train.txt 2>&1 && grep -q "^summary: 2 steps" train.txt; then
	echo "ok: one process trains: $(grep '^summary' train.txt)"
else
	fail "one process without MPI did not train"; tail -5 train.txt >&2
fi
FERRY_COMM_ENGINE=mpi expect_error "FERRY_COMM_ENGINE=mpi without MPI" "built without MPI" "$F" train "${tiny[@]}"

if command -v mpirun >/dev/null; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	checks=$((checks + 1))
	start=$(date +%s)
	timeout 120 mpirun --oversubscribe -np 2 "$F" train "${tiny[@]}" >ranks.txt 2>&1
	rc=$? took=$(($(date +%s) - start))
	n=$(grep -c "started as one of 2 ranks by an MPI launcher, but this ferry was built without MPI" ranks.txt)
	if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -ge 1 ] && ! grep -q "^summary" ranks.txt; then
		echo "ok: mpirun -np 2 refused in ${took} s (exit $rc, the message $n time(s))"
	else
		fail "mpirun -np 2 of a build without MPI: exit $rc, message $n time(s), ${took} s"; tail -20 ranks.txt >&2
	fi
else
	echo "note: no mpirun here; the launched case is not checked"
fi
finish
