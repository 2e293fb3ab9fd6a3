#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): Llama on 2 ranks with micro-batches and 5 layers; both models on 4 ranks.
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix l.ga2 l5 l5.ga2 l5.v l5.v.clip10 l5.v.ga2.clip10 g.ga2@4 l@4
finish
