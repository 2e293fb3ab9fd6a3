#!/usr/bin/env bash
# For the two-node QEMU test (ctest -L qemu, tests/qemu/run.sh): installs
# qemu-system-x86 and unpacks Debian's kernel (linux-image-amd64) into
# .qemu/ (ignored by git) without installing it on this machine.
#   bash scripts/qemu_deps.sh
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash scripts/qemu_deps.sh"
	echo
	echo "On Debian 12 (as root): installs qemu-system-x86 and unpacks the Debian kernel"
	echo "into .qemu/boot/ for tests/qemu/run.sh (the two-NUMA-node guest test)."
	exit 0 ;;
"") ;;
*) echo "qemu_deps.sh: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
dpkg-query -W -f='${Status}' qemu-system-x86 2>/dev/null | grep -q "ok installed" ||
	{ apt-get update -q && apt-get install -y -q --no-install-recommends qemu-system-x86; }
mkdir -p .qemu/debs
cd .qemu/debs
chmod 777 . 2>/dev/null || true # apt-get download runs as _apt
image=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$image" ] || { echo "qemu_deps.sh: no linux-image-amd64 in apt's lists (apt-get update?)" >&2; exit 1; }
ls "$image"_*.deb >/dev/null 2>&1 || apt-get download "$image"
dpkg -x "$image"_*.deb ..
ls ../boot/vmlinuz-*
