#!/usr/bin/env bash
# Conversations end to end against transformers (issue 38 item 7): chat_ref's
# conversations rendered by apply_chat_template, tokenized and masked with
# `tokenizers`' offsets by the rule of docs/data.md (tests/chat/chat_hf.py),
# and a tiny random Llama saved by transformers; `ferry data --chat` then
# `ferry eval` (each conversation once, packed into rows) must give
# transformers' loss with labels -100 outside the assistant spans (each
# conversation alone, averaged over the counted targets) within 2e-6
# relative and the same count, at --seq the longest conversation (several
# to a row) and at a longer one.  Families: Llama 3 (byte-level BPE), Qwen 3
# (a first reply's span clipped where the whole conversation renders it
# otherwise) and Mistral with a SentencePiece-style tokenizer.  Skipped (77)
# without a python that has torch, transformers and tokenizers.
PYREF=$(cd "$(dirname "$0")/../chat" && pwd)/chat_hf.py
. "$(dirname "$0")/lib.bash"
ref_python numpy torch transformers tokenizers jinja2 || { finish; exit; }
fams="llama3 qwen3 mistral_sp"
# shellcheck disable=SC2086
"$REF_PY" "$PYREF" . $fams >ref.txt 2>err.txt || { fail "chat_hf.py: $(cat err.txt)"; finish; exit; }
for fam in $fams; do
	read -r _ ref count longest < <(grep "^$fam " ref.txt)
	expect_ok "$fam: data --chat" "$FERRY" data --chat --tokenizer "$fam" --val-fraction 0 --out "c_$fam" conv.jsonl ||
		continue
	for shape in "--batch 1 --seq $longest" "--batch 2 --seq 256"; do
		# shellcheck disable=SC2086
		expect_ok "$fam: eval $shape" "$FERRY" eval --checkpoint "model_$fam" --data "c_${fam}_train_*.bin" $shape \
			--threads 2 || continue
		checks=$((checks + 1))
		loss=$(sed -n 's/^loss //p' out.txt) n=$(sed -n 's/^targets //p' out.txt)
		if [ "$n" = "$count" ] &&
			awk -v a="$loss" -v b="$ref" 'BEGIN { d = a - b; exit !(b > 0 && (d < 0 ? -d : d) / b < 2e-6) }'; then
			echo "ok: $fam $shape: ferry $loss over $n targets, transformers $ref over $count"
		else
			fail "$fam $shape: ferry $loss over $n targets, transformers $ref over $count"
		fi
	done
done
finish
