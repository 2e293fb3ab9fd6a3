#!/usr/bin/env bash
# The real multi-node check: boots a Linux kernel in QEMU (no KVM needed)
# with two NUMA nodes, node 1 without CPUs as CXL memory appears, and runs
# numa_guest.c as /init, which checks with move_pages that every page of
# each host tier sits on the node the tier names, and times copies of
# memory on node 1 against DRAM as ferry calibrate maps them.  Skips (77) without
# qemu-system-x86_64, a kernel or a static C library.
#   bash tests/qemu/run.sh SOURCE_DIR WORK_DIR
# The kernel: $FERRY_QEMU_KERNEL, else .qemu/boot/vmlinuz-* in the source
# tree (scripts/qemu_deps.sh puts Debian's there), else /boot/vmlinuz-*.
set -u
case "${1:-}" in
-h | --help)
	echo "usage: bash tests/qemu/run.sh SOURCE_DIR WORK_DIR"
	echo
	echo "Boots a two-node QEMU guest (node 1 CPU-less, like CXL memory) and checks that"
	echo "host-tier pages sit on their tier's node.  Exit 77 (skipped) without"
	echo "qemu-system-x86_64, a kernel (\$FERRY_QEMU_KERNEL, .qemu/boot/, /boot/) or libc.a."
	exit 0 ;;
esac
[ $# -eq 2 ] || { echo "usage: bash tests/qemu/run.sh SOURCE_DIR WORK_DIR" >&2; exit 2; }
SRC=$(cd "$1" && pwd) || exit 1
WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1

command -v qemu-system-x86_64 >/dev/null || { echo "skipped: qemu-system-x86_64 not installed"; exit 77; }
kernel=${FERRY_QEMU_KERNEL:-}
if [ -z "$kernel" ]; then
	for k in "$SRC"/.qemu/boot/vmlinuz-* /boot/vmlinuz-*; do
		[ -r "$k" ] && { kernel=$k; break; }
	done
fi
[ -n "$kernel" ] && [ -r "$kernel" ] || { echo "skipped: no kernel (bash scripts/qemu_deps.sh)"; exit 77; }

# static, without libnuma or liburing: the raw NUMA system calls
if ! ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -static -I"$SRC/include" -I"$SRC/src" "$SRC/tests/qemu/numa_guest.c" \
	"$SRC"/src/tier/*.c "$SRC/src/backend/host_tier_memory.c" "$SRC/src/core/error.c" "$SRC/src/core/size.c" \
	-lpthread -o numa_guest 2>cc.txt; then
	cat cc.txt
	grep -q "cannot find -lc" cc.txt && { echo "skipped: no static C library"; exit 77; }
	echo "FAIL: cannot build the guest's /init" >&2
	exit 1
fi
${CC:-cc} -O2 "$SRC/tests/qemu/mkinitramfs.c" -o mkinitramfs && ./mkinitramfs numa_guest initrd || exit 1

echo "kernel: $kernel"
timeout 500 qemu-system-x86_64 -machine pc -cpu qemu64 -m 512M -smp 2 \
	-object memory-backend-ram,size=256M,id=m0 -object memory-backend-ram,size=256M,id=m1 \
	-numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,memdev=m1 \
	-kernel "$kernel" -initrd initrd -append "console=ttyS0 panic=-1 quiet" \
	-display none -serial file:console.txt -monitor none -no-reboot
rc=$?
grep "NUMA-GUEST" console.txt
if [ $rc -ne 0 ]; then
	echo "FAIL: qemu exit $rc" >&2
	tail -20 console.txt >&2
	exit 1
fi
grep -q "^NUMA-GUEST PASS" console.txt || { echo "FAIL: the guest did not pass" >&2; tail -30 console.txt >&2; exit 1; }
