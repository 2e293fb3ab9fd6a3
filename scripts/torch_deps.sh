#!/usr/bin/env bash
# For the check against Hugging Face transformers itself
# (tests/cli/families_hf.sh): a virtual environment in .venv-torch/ (ignored
# by git) with torch, transformers and safetensors from PyPI, about 6 GB
# and 2-3 minutes.  Prints the environment's python on success.
#   bash scripts/torch_deps.sh
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/torch_deps.sh"
	echo
	echo "Makes .venv-torch/ with torch, transformers, safetensors and numpy from PyPI"
	echo "(python3 -m venv; on Debian 12 as root it installs python3-venv first) and"
	echo "prints its python, for FERRY_TORCH_PYTHON (tests/cli/families_hf.sh)."
	exit 0 ;;
"") ;;
*) echo "torch_deps.sh: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
py=$PWD/.venv-torch/bin/python
want="import numpy, torch, transformers, safetensors"
if ! [ -x "$py" ] || ! "$py" -c "$want" 2>/dev/null; then
	if ! python3 -c "import venv, ensurepip" 2>/dev/null && [ "$(id -u)" = 0 ]; then
		export DEBIAN_FRONTEND=noninteractive
		{ apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv; } >&2
	fi
	rm -rf .venv-torch
	python3 -m venv .venv-torch >&2
	# --no-cache-dir: the wheels are large and the environment itself is kept
	timeout 1200 "$py" -m pip install -q --no-cache-dir torch transformers safetensors numpy >&2
	"$py" -c "$want"
fi
echo "$py"
