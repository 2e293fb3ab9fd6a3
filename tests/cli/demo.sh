#!/usr/bin/env bash
# The demo corpus `ferry train` prepares on first use: Debian's fortune
# cookies, one document each, without the drawings, in a fixed shuffled order
# (the loader reads shards in order: unshuffled, a two-minute run saw only
# the first files, drawings and computer jokes, and validated on the rest).
. "$(dirname "$0")/lib.bash"
FORTUNES=/usr/share/games/fortunes
[ -f $FORTUNES/computers ] || { echo "skipped: no fortunes in $FORTUNES (apt-get install fortunes)"; exit 77; }

# The text of the first n tokens after the first end-of-text of a shard.
shard_text() {
	od -An -v -tu2 -j1026 -N$((2 * $2)) "$1" | tr -s ' ' '\n' | grep . |
		while read -r c; do [ "$c" -lt 256 ] && printf "\\$(printf %03o "$c")"; done
}

expect_ok "the demo corpus on first use" "$FERRY" train --steps 0 --sample 0 --threads 2
grep -q "^preparing the demo corpus (first run): the fortune cookies of $FORTUNES in a fixed shuffled order" out.txt ||
	fail "says what it prepares: $(head -3 out.txt)"
[ -f data/demo_train_000000.bin ] && [ -f data/demo_val_000000.bin ] || fail "train and val shards: $(ls data)"
[ -z "$(ls -A data | grep -v '^demo_\(train\|val\)_[0-9]*\.bin$')" ] || fail "nothing else in data/: $(ls -A data)"
grep -q "^validation: every 1 step and at the end, 8 batches of data/demo_val_\*.bin" out.txt ||
	fail "validates on the demo's split: $(grep validation out.txt)"
first=$(shard_text data/demo_train_000000.bin 40)
[ ${#first} -ge 20 ] || fail "the shard starts with text: '$first'"
[ "$first" != "$(head -c ${#first} $FORTUNES/art)" ] && [ "$first" != "$(head -c ${#first} $FORTUNES/computers)" ] ||
	fail "the corpus is shuffled: it starts with the first file's first cookie: '$first'"
cp data/demo_train_000000.bin first_build.bin
rm -rf data
expect_ok "again, elsewhere" "$FERRY" train --steps 0 --sample 0 --threads 2
cmp -s data/demo_train_000000.bin first_build.bin || fail "the shuffled order is fixed: two builds differ"
expect_ok "a second run reuses it" "$FERRY" train --steps 0 --sample 0 --threads 2
grep -q "preparing the demo corpus" out.txt && fail "prepared the corpus twice"

# ascii art is not in it: its most recognisable line is in the fortune file
# but in no shard
art_line=$(grep -m1 -F '(  /\__________/\  )' $FORTUNES/ascii-art || true)
if [ -n "$art_line" ]; then
	checks=$((checks + 1))
	for f in data/demo_*.bin; do
		od -An -v -tu2 -j1024 "$f" | tr -s ' ' '\n' | grep . | awk '$1 < 256 { printf "%c", $1 }' >"$f.txt"
	done
	if grep -qF '/\__________/\' data/*.bin.txt; then fail "the drawings of ascii-art are in the corpus"; else echo "ok: no drawings"; fi
fi
finish
