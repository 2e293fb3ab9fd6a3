#!/usr/bin/env bash
# The CMake flag that decides whether the default build has the CUDA backend
# (minutes of nvcc for two GPU generations): FERRY_CUDA=ON or OFF in the
# environment decides; else a machine without a GPU leaves it out of a new
# build folder, and a configured folder keeps its choice.  Prints the flag,
# or nothing when CMake should keep its own.
#   bash scripts/cuda_choice.sh BUILD_DIR
# FERRY_GPU_DEVICES (default /dev/nvidia[0-9]*) is where GPUs are looked for.
set -euo pipefail
case "${1:-}" in
-h | --help | "")
	echo "usage: bash scripts/cuda_choice.sh BUILD_DIR"
	echo
	echo "Prints -DFERRY_CUDA=ON|OFF for the default preset's build folder BUILD_DIR:"
	echo "FERRY_CUDA in the environment if set; OFF for a new folder on a machine"
	echo "without a GPU; nothing otherwise."
	exit 0 ;;
esac
if [ -n "${FERRY_CUDA:-}" ]; then
	echo "-DFERRY_CUDA=$FERRY_CUDA"
elif ! compgen -G "${FERRY_GPU_DEVICES:-/dev/nvidia[0-9]*}" >/dev/null && ! [ -f "$1/CMakeCache.txt" ]; then
	echo "-DFERRY_CUDA=OFF"
fi
