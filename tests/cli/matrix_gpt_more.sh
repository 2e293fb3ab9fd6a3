#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): GPT-2 on 2 ranks with micro-batches, a vocabulary across the slices and 5 layers.
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix g.ga2 g.v g.v.ga2 g5 g5.ga2 g5.v g5.v.ga2
finish
