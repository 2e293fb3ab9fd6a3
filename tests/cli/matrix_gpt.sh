#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): GPT-2 on 2 ranks.
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix g g.clip10 g.ga2.clip10
finish
