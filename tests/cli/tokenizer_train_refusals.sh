#!/usr/bin/env bash
# ferry tokenizer train refuses, before it counts, what it could only end
# badly (issue 40 item 7), and writes nothing: an --out that is one of the
# FILEs (it replaced the corpus), a --special that cannot be in a
# tokenizer.json (not UTF-8, given twice, spelt as a byte's token); and
# after counting, a corpus with no text (a tokenizer of 0 merges) and a
# --special spelt as a learned token (named; it leaked before).
. "$(dirname "$0")/lib.bash"

for i in $(seq 1 50); do echo "the quick brown fox $i jumps over the lazy dog"; done >corpus.txt
cp corpus.txt corpus_before.txt
expect_error "--out is a FILE" "corpus.txt: the output is also an input FILE" \
	"$FERRY" tokenizer train --vocab 300 --out corpus.txt corpus.txt
cmp -s corpus.txt corpus_before.txt || fail "the corpus was replaced"
ln -s corpus.txt link.txt
expect_error "--out is a FILE by another name" "the output is also an input FILE" \
	"$FERRY" tokenizer train --vocab 300 --out ./link.txt corpus.txt
cmp -s corpus.txt corpus_before.txt || fail "the corpus was replaced through a link"
expect_error "--special not UTF-8" "special token 1 is not UTF-8" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json --special '<s>' --special $'\xff' corpus.txt
expect_error "--special twice" "special token 1 '<s>' is special token 0 again" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json --special '<s>' --special '<s>' corpus.txt
expect_error "--special spelt as a byte's token" "special token 0 'a' is the byte-level token of one byte" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json --special a corpus.txt
: >empty.txt
printf '\n' | gzip >empty.txt.gz
expect_error "an empty corpus" "no text to learn from in 2 input files (first: empty.txt)" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json empty.txt empty.txt.gz
# only training can tell: " t" is the first pair merged, ByteLevel's "Ġt"
for i in $(seq 1 50); do echo "t t t t t"; done >tt.txt
expect_error "--special spelt as a learned token" "tok.json: learned token 257 'Ġt' is spelt as a special token" \
	"$FERRY" tokenizer train --vocab 300 --out tok.json --special $'\xc4\xa0t' tt.txt
[ -e tok.json ] && fail "a refused run wrote tok.json"
expect_ok "the corpus trains" "$FERRY" tokenizer train --vocab 300 --out tok.json corpus.txt
finish
