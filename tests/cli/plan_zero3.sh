#!/usr/bin/env bash
# ZeRO-3's bytes a rank, worked out by hand from GPT-2's shape (issue 22
# items 4 and 7): `ferry plan --zero 3 --ranks 8` against `--zero 0`, with
# AdamW on the device and on host threads (--offload-optimizer cpu), for
# the CPU backend (fp32 kernels) and `--backend cuda` (bf16 kernels,
# planned without a GPU).  Only the parameters' buffers differ between the
# two plans (the activations, the batch and the workspace are the same),
# so the change of each rank's device and host bytes is the sum below;
# from fp32 to bf16 ZeRO-3 adds the compute slice (2 S bytes beside the
# fp32 master's 4 S with AdamW on the device; with AdamW on the host the
# device's only slice, 2 S instead of 4 S) and halves the gathered ring
# and the unstacked weights, while the gradients stay fp32.  With the
# parameters on the host too (--offload-params --offload-optimizer cpu,
# against --zero 0 in the same mode) the device keeps no slice of the
# weights, only ZeRO-2's gradient slice and a slot a layer's part of one
# parameter is staged through (the largest, 4 C^2 elements, in the
# kernels' type), the rings and unstacked buffers being the same; the host
# the same slices as with AdamW on the host, which are then all it holds:
# the fp32 master, m, v and gradients (4 S each) and in bf16 the slice of
# the compute copy the update writes and the layers are gathered from (2
# S).  With AdamW streamed instead (--offload-params --offload-optimizer
# stream, against --zero 0 in that mode) the device the same, and the
# optimizer ring's two slots of a chunk (the largest layer's part of a
# parameter, 4 C^2 elements) holding master, m and v (at --zero 0 the
# gradients too), and in bf16 the update's result to copy down; the host
# the master, m and v slices (no gradients: ZeRO-2's slice is on the
# device) and in bf16 the compute slice the ring copies down and the
# layers are gathered from.  The cuda half skips without the CUDA backend
# (the sanitizer presets).
. "$(dirname "$0")/lib.bash"

N=8 C=32 L=2 V=320 T=32 # the vocabulary 257 padded to 320
SHAPE=(--layers "$L" --channels "$C" --heads 4 --vocab 257 --max-seq "$T" --seq 16 --batch 2 --ranks "$N")

# n: the parameter array; S: a rank's slice, whole blocks of the norm's
# sum (n / 256 rounded up each); G: a layer's stacked parameters, each
# rounded up to 64 elements (a gathered or gradient slot); U: the
# unstacked ones (token and position embeddings, the final norm)
n=$((V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C))
per=$(((n + 255) / 256)) blocks=$(((n + per - 1) / per))
S=$(((blocks + N - 1) / N * per))
r64() { echo $((($1 + 63) / 64 * 64)); }
G=0
for k in $C $C $((3 * C * C)) $((3 * C)) $((C * C)) $C $C $C $((4 * C * C)) $((4 * C)) $((4 * C * C)) $C; do
	G=$((G + $(r64 $k)))
done
U=$((V * C + T * C + 2 * C))
# device buffers round up to 256 bytes, host buffers to a 4 KiB page
d() { echo $((($1 + 255) / 256 * 256)); }
h() { echo $((($1 + 4095) / 4096 * 4096)); }

# want_device A (kernels' bytes an element) OPT (device, cpu, params or stream): zero3 - zero0 on the device
want_device() {
	local a=$1 copy0=0 copy3=0 stage=$((4 * C * C)) chunk=$((4 * C * C)) out=0
	if [ "$2" = stream ]; then # as params, and the ring's slots: 3 (zero0: 4) fp32 arrays (+ the bf16 result)
		[ "$a" = 2 ] && out=2
		echo $(($(want_device "$a" params) + $(d $((2 * chunk * (12 + out)))) - $(d $((2 * chunk * (16 + out))))))
	elif [ "$2" = params ]; then # the gradient slice and the staging slot
		[ $stage -gt "$S" ] && stage=$S
		echo $(($(d $((4 * S))) + $(d $((a * stage)))))
	elif [ "$2" = device ]; then # zero0: params, grads, m, v whole (+ the bf16 copy)
		[ "$a" = 2 ] && copy0=$(d $((2 * n))) copy3=$(d $((2 * S)))
		echo $(($(d $((4 * S))) * 4 + copy3 + $(d $((8 * G))) + $(d $((4 * U))) + $(d $((a * U))) +
			$(d $((2 * G * a))) - 4 * $(d $((4 * n))) - copy0))
	else # zero0: grads and the compute copy whole; zero3: the compute slice
		echo $(($(d $((4 * S))) + $(d $((a * S))) + $(d $((8 * G))) + $(d $((4 * U))) + $(d $((a * U))) +
			$(d $((2 * G * a))) - $(d $((4 * n))) - $(d $((a * n)))))
	fi
}

# want_host A OPT: zero3 - zero0 on the host (master, m, v, gradients; bf16 the update's copy)
want_host() {
	[ "$2" = device ] && { echo 0; return; }
	local copy=0 slices=4
	[ "$1" = 2 ] && copy=$(($(h $((2 * S))) - $(h $((2 * n)))))
	[ "$2" = stream ] && slices=3 # no gradients' slice
	local slice whole
	slice=$(h $((4 * S))) whole=$(h $((4 * n)))
	echo $((slices * slice - 4 * whole + copy))
}

# rank 0's "device host" bytes
rank0() { grep -o '"rank": 0, "device_bytes": [0-9]*, "host_bytes": [0-9]*' "$1" | grep -o '[0-9][0-9]*' | tail -2 | tr '\n' ' '; }

check() {
	local backend=$1 a=$2 opt=$3 flags=() what="AdamW on $3"
	[ "$opt" = cpu ] && flags=(--offload-optimizer cpu)
	[ "$opt" = params ] && flags=(--offload-params --offload-optimizer cpu) what="the parameters on the host"
	[ "$opt" = stream ] && flags=(--offload-params --offload-optimizer stream) what="the parameters on the host, streamed"
	checks=$((checks + 1))
	"$FERRY" plan "${SHAPE[@]}" --backend "$backend" "${flags[@]}" --zero 0 --json z0.json >/dev/null 2>err.txt &&
		"$FERRY" plan "${SHAPE[@]}" --backend "$backend" "${flags[@]}" --zero 3 --json z3.json >/dev/null 2>>err.txt ||
		{ fail "$backend, $what: $(cat err.txt)"; return; }
	read -r d0 h0 <<<"$(rank0 z0.json)"
	read -r d3 h3 <<<"$(rank0 z3.json)"
	local want got="$((d3 - d0)) $((h3 - h0))"
	want="$(want_device "$a" "$opt") $(want_host "$a" "$opt")"
	[ "$got" = "$want" ] &&
		echo "ok: $backend, $what: --zero 3 - --zero 0 = $got bytes (device host), n $n S $S G $G U $U" ||
		fail "$backend, $what: --zero 3 - --zero 0 (device host) is [$got], by hand [$want]"
	[ "$opt" = params ] || [ "$opt" = stream ] || return
	# the host's whole: the four fp32 slices (streamed: three) and in bf16 the compute slice
	checks=$((checks + 1))
	want=$((4 * $(h $((4 * S)))))
	[ "$opt" = stream ] && want=$((3 * $(h $((4 * S)))))
	[ "$a" = 2 ] && want=$((want + $(h $((2 * S)))))
	[ "$h3" = "$want" ] &&
		echo "ok: $backend, $what, --zero 3: the host holds $h3 bytes, the slices by hand" ||
		fail "$backend, $what, --zero 3: the host holds $h3 bytes, by hand $want"
}

for opt in device cpu params stream; do
	check cpu 4 $opt
	if "$FERRY" info 2>/dev/null | grep -q '^  cuda '; then
		check cuda 2 $opt
	else
		echo "skipped: --backend cuda (ferry built without the CUDA backend)"
	fi
done
finish
