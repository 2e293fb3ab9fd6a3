#!/usr/bin/env bash
# Chat templates against transformers (issue 38 items 1-3): templates in the
# shape of Llama 3, Qwen 2.5, Qwen 3 (think-stripping, a namespace, the
# chat_template.jinja form), Mistral, Gemma and Phi-3, written in
# tests/chat/chat_ref.py, render four conversations (with and without a
# system message, several turns, non-ASCII text, prompt/completion) through
# `ferry data --chat --render` and through apply_chat_template(tokenize=
# False), with and without add_generation_prompt: the same bytes.  Then
# `ferry data --chat` writes version-3 shards whose ids and target flags are
# those the same rule gives with `tokenizers`' offsets (byte-level, and for
# mistral_sp a SentencePiece-style tokenizer: Prepend/Replace to '▁', byte
# fallback).  Skipped (77)
# without a python that imports transformers.
. "$(dirname "$0")/lib.bash"
REF=$(cd "$(dirname "$0")/../chat" && pwd)/chat_ref.py

if ref_python transformers tokenizers jinja2; then
	"$REF_PY" "$REF" setup . && "$REF_PY" "$REF" all . 2>ref_err.txt || { fail "the reference"; cat ref_err.txt >&2; }
	for fam in llama3 qwen25 qwen3 mistral gemma phi3 mistral_sp; do
		for g in 0 1; do
			checks=$((checks + 1))
			flag=; [ $g = 1 ] && flag=--generation-prompt
			if "$FERRY" data --chat --render $flag --tokenizer "$fam" conv.jsonl >got_${fam}_$g.bin 2>err.txt &&
			   cmp -s ref_${fam}_$g.bin got_${fam}_$g.bin; then
				echo "ok: $fam add_generation_prompt=$g: $(tr -cd '\0' <got_${fam}_$g.bin | wc -c) renderings, $(wc -c <got_${fam}_$g.bin) bytes as transformers'"
			else
				fail "$fam add_generation_prompt=$g differs from transformers'"; cat err.txt >&2
				cmp ref_${fam}_$g.bin got_${fam}_$g.bin >&2
			fi
		done
		checks=$((checks + 1))
		if "$FERRY" data --chat --tokenizer "$fam" --val-fraction 0 --out "sh_$fam" conv.jsonl >out.txt 2>err.txt &&
		   "$REF_PY" "$REF" compare "masks_$fam.json" sh_${fam}_train_*.bin >cmp.txt 2>&1; then
			echo "ok: $fam masks: $(tail -1 cmp.txt)"
		else
			fail "$fam masks"; cat err.txt cmp.txt >&2
		fi
	done
fi
finish
