#!/usr/bin/env python3
"""Writes the text corpus bench/tokenize.sh encodes: documents separated by
NUL bytes, valid UTF-8, deterministic for a given machine's files.

Sources, in sorted path order: the fortunes, the man pages (roff source,
comments and font escapes dropped; the translated ones bring Cyrillic,
Japanese, Chinese and Korean text) and the text files of /usr/share/doc
(gzip'd or not; files holding NUL bytes skipped).  Documents are cut at
about 8 KiB (at a line end), shuffled with a fixed seed, and one in 16
gets a paragraph of generated text that GPT-2's pre-tokenizer finds hard:
CJK runs, emoji (ZWJ sequences, skin tones, flags) and letters under
stacks of combining marks.  Stops at --mb megabytes (10^6 bytes).

usage: tokenize_corpus.py --mb 200 OUT
"""
import argparse
import glob
import gzip
import hashlib
import os
import random
import re
import sys

DOC_BYTES = 8192
SEED = 23

ROFF_COMMENT = re.compile(r'^\.\\".*$|^\'\\".*$', re.M)
ROFF_FONT = re.compile(r'\\f(\[[A-Z]*\]|[BIRP])')


def read_text(path):
    """The file's text, or None for binaries and unreadable files."""
    try:
        opener = gzip.open if path.endswith('.gz') else open
        with opener(path, 'rb') as f:
            data = f.read(4 << 20)
    except (OSError, EOFError):
        return None
    if b'\0' in data:
        return None
    return data.decode('utf-8', errors='ignore')


def sources():
    """(kind, path) of every input file, in a fixed order."""
    out = [('fortune', p) for p in sorted(glob.glob('/usr/share/games/fortunes/*'))
           if not p.endswith('.dat') and os.path.isfile(p)]
    out += [('man', p) for p in sorted(glob.glob('/usr/share/man/**/*.gz', recursive=True))]
    for root, dirs, files in os.walk('/usr/share/doc'):
        dirs.sort()
        out += [('doc', os.path.join(root, f)) for f in sorted(files)
                if not re.search(r'\.(png|jpe?g|gif|pdf|svg|ico|bz2|xz|zst|woff2?|ttf)$', f)]
    return out


def docs_of(kind, text):
    """The text cut into documents of about DOC_BYTES."""
    if kind == 'fortune':
        yield from (d.strip('\n') for d in text.split('\n%\n') if d.strip())
        return
    if kind == 'man':
        text = ROFF_FONT.sub('', ROFF_COMMENT.sub('', text))
    at = 0
    while at < len(text):
        end = text.find('\n', at + DOC_BYTES)
        end = len(text) if end < 0 else end + 1
        d = text[at:end]
        if d.strip():
            yield d
        at = end


CJK = [chr(c) for c in range(0x4e00, 0x4e00 + 3000)] + \
      [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0xac00, 0xac00 + 400)]
EMOJI = ['\U0001F600', '\U0001F44D\U0001F3FD', '\U0001F468\u200d\U0001F469\u200d\U0001F467',
         '\U0001F1EB\U0001F1F7', '\u2764\ufe0f', '\U0001F680', '\U0001F9D1\U0001F3FB\u200d\U0001F4BB',
         '\U0001F602', '\U0001F30D', '\u2615']
MARKS = [chr(c) for c in range(0x300, 0x370)]


def hard_paragraph(rng):
    """Generated text: CJK runs, emoji, combining marks, among words."""
    parts = []
    for _ in range(rng.randint(8, 40)):
        k = rng.random()
        if k < 0.4:
            parts.append(''.join(rng.choice(CJK) for _ in range(rng.randint(2, 30))))
        elif k < 0.6:
            parts.append(''.join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        elif k < 0.8:
            parts.append(''.join(c + ''.join(rng.choice(MARKS) for _ in range(rng.randint(1, 3)))
                                 for c in rng.choice(['cafe', 'naive', 'zalgo', 'resume', 'Aa'])))
        else:
            parts.append(rng.choice(['the', 'and', "don't", '2024', '3.14', '...', 'x']))
    return ' '.join(parts) + '\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mb', type=float, default=200)
    ap.add_argument('out')
    a = ap.parse_args()
    docs = []
    for kind, path in sources():
        text = read_text(path)
        if text:
            docs.extend(docs_of(kind, text))
    rng = random.Random(SEED)
    rng.shuffle(docs)
    target, n, written, hard = int(a.mb * 1e6), 0, 0, 0
    h = hashlib.sha256()
    with open(a.out + '.tmp', 'wb') as f:
        while written < target:
            d = docs[n % len(docs)]
            if n % 16 == 15:
                lines = d.split('\n')
                lines.insert(rng.randrange(len(lines) + 1), hard_paragraph(rng))
                d = '\n'.join(lines)
                hard += 1
            b = d.encode('utf-8') + b'\0'
            f.write(b)
            h.update(b)
            written += len(b)
            n += 1
    os.replace(a.out + '.tmp', a.out)
    print(f'{a.out}: {written} bytes, {n} documents ({len(docs)} distinct before '
          f'repeating), {hard} with generated non-ASCII text, sha256 {h.hexdigest()[:16]}',
          file=sys.stderr)


if __name__ == '__main__':
    main()
