"""Builds small BPE tokenizers with Hugging Face's `tokenizers` and writes,
for each, its tokenizer.json and the ids `tokenizers` gives many strings:
the independent reference tests/test_tokenizer_ref.c checks ferry against.

usage: make_reference.py OUTDIR    (exit 77 when tokenizers is not installed)

OUTDIR/<name>/tokenizer.json and OUTDIR/<name>/cases.jsonl, one line per
string: {"text", "ids" (no special tokens), "ids_special" (with the
post-processor's), "decoded" (decode(ids), skipping special tokens)}.
"""
import json
import os
import random
import sys

try:
    from tokenizers import (Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers, AddedToken)
except ImportError:
    sys.exit(77)

WORDS = ("the of and to in is was he for it with as his on be at by I had "
         "don't it's we'll they're you've I'm she'd 2024 3.14159 1,000,000 "
         "naïve café résumé über straße Ελληνικά русский 日本語 中文字符 "
         "한국어 emoji 🙂 🚀 👩‍💻 e\u0301 n\u0303 tab\there new\nline  "
         "spaces   many \r\n <html> a+b=c x_y foo@bar.com").split(" ")


def corpus(rng, n):
    lines = []
    for _ in range(n):
        k = rng.randint(1, 20)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(k)))
    return lines


def strings(rng):
    fixed = ["", " ", "  ", "hello world", " hello", "Hello  World!!",
             "don't stop", "I'M FINE", "it's 12345678 o'clock",
             "a\n\nb\r\n c", "\t\tindented", "trailing   ", "日本語のテキスト",
             "🙂🙂🙂 🚀", "e\u0301te\u0301", "ﬁ ligature ①", "<s>inside</s> text",
             "x<|endoftext|>y", "<|endoftext|>", "ab<mask>cd", " <mask> ",
             "wordy<mask>words", "mix of 中文 and English 123"]
    out = list(fixed)
    for _ in range(300):
        out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 15))))
    for _ in range(100):
        out.append("".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0xa0, 0x2fff),
                                           rng.randint(0x4e00, 0x4fff), rng.randint(0x1f300, 0x1f64f)]))
                           for _ in range(rng.randint(1, 30))))
    return out


def byte_level(lines, regex, prefix_space=False):
    tok = Tokenizer(models.BPE(ignore_merges=regex))  # Llama 3 ignores merges
    if regex:  # Llama 3's way: a Split with the file's own pattern
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(pat),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.normalizer = normalizers.NFC()
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
        special = ["<|begin_of_text|>", "<|endoftext|>"]
    elif prefix_space:  # RoBERTa's
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        special = ["<s>", "</s>", "<|endoftext|>"]
    else:  # GPT-2's
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
        special = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_tokens([AddedToken("<mask>", lstrip=True, single_word=True)])
    if prefix_space:
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok


def qwen(lines):
    """Qwen 2's and 3's shape: NFC, Llama 3's split but one digit at a time,
    byte-level, merges always applied, a byte-level post-processor."""
    from tokenizers import Regex
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(pat), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def gemma(lines):
    """Gemma's shape: every space replaced by ▁ (none prepended), no
    pre-tokenizer, BPE with byte fallback, <bos> first."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
                                  show_progress=False, limit_alphabet=60)
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    base = max(vocab.values()) + 1
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, base + b)
    return Tokenizer.from_str(json.dumps(data))


def sentencepiece_like(lines, metaspace):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if metaspace:  # Mistral's newer files
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                     split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    else:  # Llama 2's
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    special = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=special, show_progress=False,
                                  limit_alphabet=60)
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    # Llama 2's byte tokens are ordinary vocab entries after the specials
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    base = max(vocab.values()) + 1
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, base + b)
    return Tokenizer.from_str(json.dumps(data))


def main():
    out = sys.argv[1]
    rng = random.Random(23)
    lines = corpus(rng, 3000)
    texts = strings(rng)
    builds = {"gpt2": lambda: byte_level(lines, False),
              "llama3": lambda: byte_level(lines, True),
              "roberta": lambda: byte_level(lines, False, prefix_space=True),
              "llama2": lambda: sentencepiece_like(lines, False),
              "mistral": lambda: sentencepiece_like(lines, True),
              "qwen": lambda: qwen(lines),
              "gemma": lambda: gemma(lines)}
    for name, build in builds.items():
        tok = build()
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "cases.jsonl"), "w") as f:
            for t in texts:
                ids = tok.encode(t, add_special_tokens=False).ids
                f.write(json.dumps({"text": t, "ids": ids,
                                    "ids_special": tok.encode(t).ids,
                                    "decoded": tok.decode(ids)}) + "\n")


main()
