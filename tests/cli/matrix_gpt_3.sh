#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): GPT-2 on 3 ranks (the last slice padded).
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix g@3 g.ga2@3 g.v@3 g5@3 g5.v@3
finish
