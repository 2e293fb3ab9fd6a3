#!/usr/bin/env bash
# Packed documents against Hugging Face transformers (issue 38): a tiny
# random Llama (save_pretrained) and GPT-2 (transformers' weights written as
# an llm.c file) by tests/cli/pack_hf.py, version-3 documents of random
# lengths with random target masks; `ferry eval` (every document once,
# packed into rows) must give transformers' loss, each document run alone
# with labels -100 outside its mask and averaged over the counted targets,
# within 2e-6 relative (as families_hf.sh: ferry's fp32 against float64 and
# the 6 printed decimals), and the same count, at --seq the longest
# document (several documents to a row) and at a longer one.  Skipped (77)
# without a python that has torch and transformers.
PYREF=$(cd "$(dirname "$0")" && pwd)/pack_hf.py
. "$(dirname "$0")/lib.bash"
ref_python numpy torch transformers || { finish; exit; }
"$REF_PY" "$PYREF" both . >ref.txt 2>err.txt || { fail "pack_hf.py: $(cat err.txt)"; finish; exit; }
longest=$(head -n 1 ref.txt)
for m in llama:llama gpt2:gpt2.bin; do
	name=${m%%:*} ckpt=${m#*:}
	read -r _ ref count < <(grep "^$name " ref.txt)
	for shape in "--batch 2 --seq $longest" "--batch 3 --seq 64"; do
		# shellcheck disable=SC2086
		expect_ok "$name: eval $shape" "$FERRY" eval --checkpoint "$ckpt" --data 'docs_*.bin' $shape --threads 2 ||
			continue
		checks=$((checks + 1))
		loss=$(sed -n 's/^loss //p' out.txt) n=$(sed -n 's/^targets //p' out.txt)
		if [ "$n" = "$count" ] &&
			awk -v a="$loss" -v b="$ref" 'BEGIN { d = a - b; exit !(b > 0 && (d < 0 ? -d : d) / b < 2e-6) }'; then
			echo "ok: $name $shape: ferry $loss over $n targets, transformers $ref over $count"
		else
			fail "$name $shape: ferry $loss over $n targets, transformers $ref over $count"
		fi
	done
done
finish
