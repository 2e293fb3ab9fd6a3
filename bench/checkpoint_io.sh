#!/usr/bin/env bash
# Checkpoints against the disk: a Qwen2.5-0.5B-shaped run (24 layers, 896
# channels, vocabulary 151936: 494M parameters; weights and AdamW's state on
# the host, 5.9 GB saved) is saved and resumed, and each is set against the
# disk's sequential rate measured in the same run: writing 2 GiB with dd
# (through the page cache with conv=fsync, and with oflag=direct: the better
# one), reading the checkpoint's files with cat from a cold page cache.
#
#   bash bench/checkpoint_io.sh [FERRY] [DIR]
#
# FERRY: the binary (default build/ferry); DIR: where the checkpoint and
# the dd file go (default a new directory under /var/tmp: on a disk, not
# tmpfs).  Cold reads need root (to drop the page cache); without it the
# reads are warm and the table says so.  Prints a Markdown table.
set -euo pipefail
case "${1:-}" in
-h | --help)
	echo "usage: bash bench/checkpoint_io.sh [FERRY] [DIR]"
	echo
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 0 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FERRY=$(realpath "${1:-$ROOT/build/ferry}")
DIR=${2:-$(mktemp -d /var/tmp/ferry_ckpt_io.XXXXXX)}
mkdir -p "$DIR"
cd "$DIR"
SHAPE=(--model qwen2 --layers 24 --channels 896 --heads 14 --kv-heads 2 --ffn 4864 --vocab 151936 --max-seq 512
	--tied-head --batch 1 --seq 32)

cold() { # drop the page cache where allowed; "cold" or "warm"
	sync
	if [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then echo cold; else echo warm; fi
}
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
secs() { awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $(i - 1) }'; }

rm -rf ck ck.tmp.* dd.bin
"$FERRY" train "${SHAPE[@]}" --steps 1 --val-every 0 --sample 0 --offload-params --offload-optimizer cpu \
	--save ck >train.txt 2>&1 || { cat train.txt >&2; exit 1; }
saved=$(grep '^saved ck/' train.txt)
save_s=$(sed -E 's/.* in ([0-9.]+) s, .*/\1/' <<<"$saved")
bytes=$(du -b --apparent-size -s ck | cut -f1)

# the disk, written: 2 GiB through the page cache and past it
dd_plain=$(dd if=/dev/zero of=dd.bin bs=16M count=128 conv=fsync 2>&1 | secs); rm -f dd.bin
dd_direct=$(dd if=/dev/zero of=dd.bin bs=16M count=128 oflag=direct conv=fsync 2>&1 | secs || echo 0); rm -f dd.bin
w_plain=$(rate $((128 << 24)) "$dd_plain")
w_direct=$([ "$dd_direct" != 0 ] && rate $((128 << 24)) "$dd_direct" || echo 0)
w_disk=$(awk -v a="$w_plain" -v b="$w_direct" 'BEGIN { print (a > b ? a : b) }')

# the disk, read: the checkpoint's files from a cold cache
state=$(cold)
t0=$(date +%s.%N); cat ck/* >/dev/null; t1=$(date +%s.%N)
r_disk=$(rate "$bytes" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")

# the resume's set-up (reading the directory, the model and its state made)
cold >/dev/null
"$FERRY" --help >/dev/null 2>&1 || true # its own code and libraries (CUDA's: hundreds of MB) back in the cache
"$FERRY" train --resume ck --steps 2 --val-every 0 --sample 0 >resume.txt 2>&1 || { cat resume.txt >&2; exit 1; }
setup_s=$(grep -o 'setting up the model, its state and the data\.\.\. [0-9.]* s' resume.txt | grep -o '[0-9.]* s$' |
	tr -d ' s')
# a fresh run's set-up, the same shape (no reading), to say what reading added
"$FERRY" train "${SHAPE[@]}" --steps 1 --val-every 0 --sample 0 --offload-params --offload-optimizer cpu \
	>fresh.txt 2>&1 || { cat fresh.txt >&2; exit 1; }
fresh_s=$(grep -o 'setting up the model, its state and the data\.\.\. [0-9.]* s' fresh.txt | grep -o '[0-9.]* s$' |
	tr -d ' s')
read_s=$(awk -v a="$setup_s" -v b="$fresh_s" 'BEGIN { d = a - b; print (d > 0.05 ? d : 0.05) }')

w_save=$(rate "$bytes" "$save_s")
r_resume=$(rate "$bytes" "$read_s")
echo "| what | seconds | GB/s | of the disk's rate |"
echo "| --- | ---: | ---: | ---: |"
echo "| dd write 2 GiB, page cache, conv=fsync | $dd_plain | $w_plain | |"
echo "| dd write 2 GiB, oflag=direct | $dd_direct | $w_direct | |"
echo "| ferry save, $bytes bytes | $save_s | $w_save | $(awk -v a="$w_save" -v b="$w_disk" 'BEGIN { printf "%.2f", a / b }') |"
echo "| cat the checkpoint ($state) | | $r_disk | |"
echo "| ferry resume: set-up $setup_s s less a fresh run's $fresh_s s ($state) | $read_s | $r_resume | $(awk -v a="$r_resume" -v b="$r_disk" 'BEGIN { printf "%.2f", a / b }') |"
echo
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); ferry $("$FERRY" --version 2>/dev/null | head -1 || true); dir $DIR ($(df -T . | awk 'NR == 2 { print $2 }'))"
rm -rf ck
