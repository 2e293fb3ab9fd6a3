#!/usr/bin/env bash
# The placement matrix (placements.matrix, run by matrix.bash): Llama on 2 ranks, and activations spanning host tiers.
# Skips without mpirun or a ferry built with MPI.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.bash"
. "$here/matrix.bash"
matrix l l.clip10 l.v l.v.ga2 span
finish
