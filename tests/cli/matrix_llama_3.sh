#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): Llama on 3 ranks (the last slice padded).
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix l@3 l.ga2@3 l.v.ga2@3 l5@3 l5.ga2@3 l5.v@3 l5.v.ga2@3
finish
