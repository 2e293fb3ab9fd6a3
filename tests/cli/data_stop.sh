#!/usr/bin/env bash
# ferry data stopped by SIGINT or SIGTERM (issue 25 item 6): it removes its
# temporaries ("<name>.tmp.PID"), leaves the previous corpus of the prefix
# as it was and exits 128 + the signal.  Temporaries of a writer killed
# outright (SIGKILL: nothing could clean up) are removed by the next run of
# the same prefix; those of a writer still alive are left to it.
. "$(dirname "$0")/lib.bash"
mkdir W
for i in 1 2 3; do echo "old document $i"; done >old.txt
"$FERRY" data --out W/o --val-fraction 0 old.txt >/dev/null 2>&1 || { echo "cannot make the old corpus" >&2; exit 1; }
cp W/o_train_000000.bin old_train.bin

# Starts ferry data on an endless input, waits for its temporary to grow,
# sends the signal and waits; $rc is its exit status.
data_and_signal() {
	local sig=$1 pid i=0
	"$FERRY" data --out W/o /dev/zero >out.txt 2>err.txt &
	pid=$!
	while [ "$(cat W/o_train_*.tmp.$pid 2>/dev/null | head -c 65536 | wc -c)" -lt 65536 ] && [ $i -lt 600 ]; do
		sleep 0.05; i=$((i + 1))
	done
	kill -s "$sig" $pid
	wait $pid
	rc=$?
}

# SIGINT reaches a background job only with job control (see interrupt.sh).
set -m
for sig in INT TERM; do
	checks=$((checks + 1))
	want=$((128 + $(kill -l $sig)))
	data_and_signal $sig
	if [ $rc -ne $want ]; then
		fail "SIG$sig: exit $rc, not $want: $(cat err.txt)"
	elif ls W | grep -q '\.tmp\.'; then
		fail "SIG$sig: temporaries left: $(ls W)"
	elif ! cmp -s W/o_train_000000.bin old_train.bin; then
		fail "SIG$sig: the previous corpus changed"
	elif ! grep -q "^ferry data: stopped by SIG$sig" err.txt; then
		fail "SIG$sig: the message: $(cat err.txt)"
	else
		echo "ok: SIG$sig -> exit $rc, no temporaries, $(tail -n 1 err.txt)"
	fi
done

# SIGKILL leaves its temporary; a live writer's is not touched.
data_and_signal KILL
ls W | grep -q '\.tmp\.' || fail "SIGKILL left no temporary: the check below proves nothing"
sleep 1000 &
live=$!
: >W/o_val_000000.bin.tmp.$live
expect_ok "the next run" "$FERRY" data --out W/o --val-fraction 0 old.txt
leftover=$(ls W | grep '\.tmp\.' | grep -v "\.tmp\.$live\$")
[ -z "$leftover" ] || fail "the dead writer's temporaries were not removed: $leftover"
[ -f W/o_val_000000.bin.tmp.$live ] || fail "a live writer's temporary was removed"
kill $live
wait $live 2>/dev/null
finish
