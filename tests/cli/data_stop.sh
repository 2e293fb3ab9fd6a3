#!/usr/bin/env bash
# ferry data stopped by SIGINT or SIGTERM (issue 25 item 6): it removes its
# temporaries ("<name>.tmp.PID"), leaves the previous corpus of the prefix
# as it was and exits 128 + the signal.  Temporaries of a writer killed
# outright (SIGKILL: nothing could clean up) are removed by the next run of
# the same prefix, also while it is a zombie (killed, not yet waited for)
# or after its pid went to a later process; those of a writer still alive
# are left to it.
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

# a dead writer's pid taken by a later process (the temporary was written
# before it started) is no writer; nor is one killed but not yet waited for
# by its parent (a zombie: kill -0 still finds it) (issue 40 item 9)
: >W/o_val_000000.bin.tmp.$live
touch -d '-1 hour' W/o_val_000000.bin.tmp.$live
expect_ok "a run after the pid was taken" "$FERRY" data --out W/o --val-fraction 0 old.txt
[ -f W/o_val_000000.bin.tmp.$live ] && fail "a temporary older than the process of its pid was kept"
kill $live
wait $live 2>/dev/null
checks=$((checks + 1))
if python3 - "$FERRY" <<'PY'; then echo "ok: a killed writer not yet waited for"; else fail "a zombie writer's temporaries were kept"; fi
import glob, os, signal, subprocess, sys, time
ferry = sys.argv[1]
w = subprocess.Popen([ferry, "data", "--out", "W/o", "/dev/zero"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
mine = "W/o_train_000000.bin.tmp.%d" % w.pid
for _ in range(600):
    if os.path.exists(mine) and os.path.getsize(mine) >= 65536:
        break
    time.sleep(0.05)
os.kill(w.pid, signal.SIGKILL)
time.sleep(0.3)  # dead; not waited for, so a zombie
state = open("/proc/%d/stat" % w.pid).read().rsplit(")", 1)[1].split()[0]
if state != "Z" or not glob.glob("W/*.tmp.%d" % w.pid):
    print("  not a zombie with temporaries (state %s): the check proves nothing" % state)
    sys.exit(1)
subprocess.run([ferry, "data", "--out", "W/o", "--val-fraction", "0", "old.txt"], check=True, stdout=subprocess.DEVNULL)
left = glob.glob("W/*.tmp.%d" % w.pid)
w.wait()
if left:
    print("  left: %s" % left)
sys.exit(1 if left else 0)
PY
finish
