"""Writes version-3 shards (docs/data.md) of random documents for the packing
tests: pack_write.py OUT SEED DOCS MIN MAX [VOCAB]: token 0 of each document
VOCAB-1 (a BOS), the rest random ids below VOCAB-1, each after the first a
target with probability 0.7.  Prints the number of counted targets and the
longest document."""
import random
import struct
import sys

out, seed, docs, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
vocab = int(sys.argv[6]) if len(sys.argv) > 6 else 257
rng = random.Random(seed)
ids, flags, counted, longest = [], [], 0, 0
for _ in range(docs):
    n = rng.randint(lo, hi)
    longest = max(longest, n)
    for i in range(n):
        ids.append(vocab - 1 if i == 0 else rng.randrange(vocab - 1))
        target = i > 0 and rng.random() < 0.7
        counted += target
        flags.append((2 if i == 0 else 0) | (1 if target else 0))
with open(out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 3, len(ids), *([0] * 253)))
    f.write(struct.pack("<%dI" % len(ids), *ids))
    f.write(bytes(flags))
print(counted, longest)
