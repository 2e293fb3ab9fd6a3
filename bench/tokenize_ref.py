#!/usr/bin/env python3
"""The contenders bench_tokenize is set against, and what they need.

  tokenize_ref.py gpt2 VOCAB_JSON MERGES_TXT OUT
      GPT-2's tokenizer.json from its vocab.json and merges.txt, built as
      Hugging Face's `tokenizers` builds GPT-2's (ByteLevel pre-tokenizer
      without prefix space, ByteLevel decoder and post-processor,
      <|endoftext|> special).
  tokenize_ref.py run {hf,tiktoken} --tokenizer JSON --threads N CORPUS
                  [--check IDS]
      Encodes the NUL-separated documents of CORPUS once, in batches of
      1024 documents whose ids are dropped once counted, and prints one line
      "NAME threads=N bytes=B tokens=T seconds=S MBps=R cpu_seconds=C
      cpuMBps=Q" (C: the process's CPU time, all threads).  --check compares
      the ids, document by document, with bench_tokenize --ids-out's file
      (per document: an int32 count, then the ids) and exits 1 at the first
      difference.  tiktoken's Encoding is built from the tokenizer.json's
      vocabulary (byte-level strings back to bytes; the id is the rank) and
      GPT-2's regex, as tiktoken's own GPT-2 encoding is.
  tokenize_ref.py summary RUNS
      Medians, min-max and ratios of the lines tokenize.sh collected.

Hugging Face's thread count is RAYON_NUM_THREADS, read when `tokenizers`
starts: this script sets it from --threads before importing it.
"""
import argparse
import array
import json
import os
import statistics
import sys
import time

BATCH = 1024  # documents encoded at once
GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"""
                r"""|\s+(?!\S)|\s+""")


def byte_chars():
    """GPT-2's ByteLevel alphabet: character -> byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def make_gpt2(vocab, merges, out):
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    tok = Tokenizer(BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(['<|endoftext|>'])
    tok.save(out)


def tiktoken_encoding(path):
    import tiktoken
    with open(path, encoding='utf-8') as f:
        j = json.load(f)
    chars = byte_chars()
    specials = {a['content']: a['id'] for a in j.get('added_tokens', [])}
    ranks = {bytes(chars[c] for c in s): i for s, i in j['model']['vocab'].items()
             if s not in specials}
    return tiktoken.Encoding('bench', pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens=specials)


def encoder(lib, path, threads):
    """A function from a list of documents to their lists of ids."""
    if lib == 'tiktoken':
        enc = tiktoken_encoding(path)
        if threads == 1:
            return lambda docs: [enc.encode_ordinary(d) for d in docs]
        return lambda docs: enc.encode_ordinary_batch(docs, num_threads=threads)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    return lambda docs: [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)]


class Expected:
    """bench_tokenize --ids-out's file, compared document by document."""

    def __init__(self, path):
        self.want = array.array('i')
        with open(path, 'rb') as f:
            self.want.frombytes(f.read())
        self.at = self.doc = 0

    def same(self, ids):
        for got in ids:
            n = self.want[self.at] if self.at < len(self.want) else -1
            if n != len(got) or list(self.want[self.at + 1:self.at + 1 + n]) != got:
                print(f'document {self.doc}: ids differ from ferry\'s', file=sys.stderr)
                return False
            self.at += 1 + n
            self.doc += 1
        return True


def run(a):
    """Batches of BATCH documents, as a corpus too large to hold encoded is
    encoded: each batch's ids are counted (and checked) and dropped; only
    the encoding is timed."""
    os.environ['RAYON_NUM_THREADS'] = str(a.threads)
    os.environ['TOKENIZERS_PARALLELISM'] = 'true' if a.threads > 1 else 'false'
    enc = encoder(a.lib, a.tokenizer, a.threads)
    with open(a.corpus, 'rb') as f:
        raw = f.read()
    docs = [d.decode('utf-8') for d in raw.split(b'\0') if d]
    want = Expected(a.check) if a.check else None
    enc(docs[:64])  # warm up: thread pools, caches
    sec = cpu = 0.0
    tokens = 0
    for at in range(0, len(docs), BATCH):
        t0, c0 = time.perf_counter(), time.process_time()
        ids = enc(docs[at:at + BATCH])
        sec, cpu = sec + time.perf_counter() - t0, cpu + time.process_time() - c0
        tokens += sum(map(len, ids))
        if want and not want.same(ids):
            sys.exit(1)
    if want and want.at != len(want.want):
        sys.exit(f'{a.check} holds more documents than the corpus')
    nbytes = len(raw) - raw.count(b'\0')
    print(f'{a.lib} threads={a.threads} bytes={nbytes} tokens={tokens} '
          f'seconds={sec:.3f} MBps={nbytes / sec / 1e6:.2f} cpu_seconds={cpu:.3f} '
          f'cpuMBps={nbytes / cpu / 1e6:.2f}', flush=True)


def summary(path):
    lines = [dict(w.split('=', 1) if '=' in w else ('name', w) for w in line.split())
             for line in open(path)]
    for key, what in (('MBps', 'wall time'), ('cpuMBps', 'CPU time (all threads)')):
        table(lines, key, what)


def table(lines, key, what):
    runs = {}
    for f in lines:
        runs.setdefault((f['name'], int(f['threads'])), []).append(float(f[key]))
    med = {k: statistics.median(v) for k, v in runs.items()}
    names = sorted({n for n, _ in runs}, key=lambda n: (n != 'ferry', n))
    threads = sorted({t for _, t in runs})
    print(f'{key}: 10^6 bytes of text per second of {what}, median of rounds [min-max]')
    for n in names:
        print(f'  {n:10s}' + ''.join(
            f'  {t} thr: {med[n, t]:6.2f} [{min(runs[n, t]):.2f}-{max(runs[n, t]):.2f}]'
            for t in threads if (n, t) in med))
    for other in names[1:]:
        print(f'  ferry / {other:9s}' + ''.join(
            f'  {t} thr: {med["ferry", t] / med[other, t]:5.2f}x' for t in threads
            if ("ferry", t) in med and (other, t) in med))
    if len(threads) > 1:
        for n in names:
            lo, hi = threads[0], threads[-1]
            if (n, lo) in med and (n, hi) in med:
                print(f'  {n:10s} {hi} threads / {lo}: {med[n, hi] / med[n, lo]:.2f}x')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    g = sub.add_parser('gpt2')
    g.add_argument('vocab')
    g.add_argument('merges')
    g.add_argument('out')
    r = sub.add_parser('run')
    r.add_argument('lib', choices=['hf', 'tiktoken'])
    r.add_argument('--tokenizer', required=True)
    r.add_argument('--threads', type=int, default=1)
    r.add_argument('--check')
    r.add_argument('corpus')
    s = sub.add_parser('summary')
    s.add_argument('runs')
    a = ap.parse_args()
    if a.cmd == 'gpt2':
        make_gpt2(a.vocab, a.merges, a.out)
    elif a.cmd == 'summary':
        summary(a.runs)
    else:
        run(a)


if __name__ == '__main__':
    main()
