"""python_workload.py: an object-heavy Python program for the LD_PRELOAD test.

Run with PYTHONMALLOC=malloc (every object then comes from malloc) and
PYTHONHASHSEED=0, it prints the same lines on every run and with every correct
allocator: tests/scripts/preload_python.sh runs it with the C library's malloc
and with freeway's and compares the outputs. Nothing printed depends on
addresses, ids or timing. It takes a second or two.
"""
import collections
import gc
import hashlib
import json
import random
import sys
import weakref

rng = random.Random(20240611)
out = []


def emit(label, value):
    out.append(f"{label}: {value}")


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


# Dicts of lists of strings, grown and shrunk.
table = {}
for i in range(120_000):
    key = f"k{rng.randrange(40_000)}"
    table.setdefault(key, []).append("x" * rng.randrange(0, 80) + str(i))
for key in list(table)[::3]:
    del table[key]
emit("dict keys", len(table))
emit("dict values", sum(len(v) for v in table.values()))
emit("dict digest", digest(sorted((k, len(v), v[-1]) for k, v in table.items())))

# Strings: join, split, replace, format, encode.
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(1, 12))) for _ in range(60_000)]
text = " ".join(words)
emit("text length", len(text))
emit("upper digest", hashlib.sha256(text.upper().encode()).hexdigest()[:16])
emit("split count", len(text.replace("a", "  ").split()))
counts = collections.Counter(words)
emit("most common", counts.most_common(3))
emit("formatted", digest([f"{w:>12}|{len(w):04d}|{w[::-1]}" for w in words[:5000]]))


# Classes: many small instances, with and without __slots__, in linked lists.
class Node:
    def __init__(self, value, nxt):
        self.value = value
        self.next = nxt
        self.tags = {"v": value % 7}


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm2(self):
        return self.x * self.x + self.y * self.y


head = None
for i in range(100_000):
    head = Node(i, head)
total = 0
n = head
while n is not None:
    total += n.value * n.tags["v"]
    n = n.next
emit("linked list sum", total)
head = None

points = [Point(rng.randrange(-1000, 1000), rng.randrange(-1000, 1000)) for _ in range(150_000)]
emit("points norm sum", sum(p.norm2() for p in points))

# Sorting: by key, stable, reversed, of tuples and of strings.
points.sort(key=lambda p: (p.norm2(), p.x, p.y))
emit("closest", (points[0].x, points[0].y))
emit("farthest", (points[-1].x, points[-1].y))
records = [(rng.randrange(100), rng.random(), w) for w in words]
records.sort()
emit("sorted records", digest(records[:50] + records[-50:]))
emit("sorted words", digest(sorted(set(words), key=lambda w: (len(w), w))[:200]))
del points, records

# JSON round trip of a nested structure.
doc = {
    f"user{i}": {
        "id": i,
        "name": words[i % len(words)],
        "scores": [rng.randrange(100) for _ in range(rng.randrange(0, 20))],
        "meta": {"active": i % 3 == 0, "ratio": round(rng.random(), 6), "tags": words[i : i + 3]},
    }
    for i in range(20_000)
}
encoded = json.dumps(doc, sort_keys=True)
decoded = json.loads(encoded)
emit("json length", len(encoded))
emit("json round trip equal", decoded == doc)
emit("json digest", hashlib.sha256(encoded.encode()).hexdigest()[:16])
del doc, decoded, encoded

# Reference cycles only the collector can free, and weak references.
class Cyclic:
    pass


alive = weakref.WeakSet()
for i in range(30_000):
    a, b = Cyclic(), Cyclic()
    a.other, b.other = b, a
    a.payload = [i] * 10
    alive.add(a)
gc.collect()
emit("cycles left after gc", len(alive))

# Big integers, bytes and bytearrays, sets and deques.
fact = 1
for i in range(1, 3000):
    fact *= i
emit("3000! bits and residue", (fact.bit_length(), fact % 1_000_003, len(hex(fact))))
buf = bytearray()
for i in range(50_000):
    buf += i.to_bytes(4, "little")
emit("bytearray digest", hashlib.sha256(bytes(buf)).hexdigest()[:16])
s1 = set(range(0, 300_000, 3))
s2 = set(range(0, 300_000, 5))
emit("set ops", (len(s1 & s2), len(s1 | s2), len(s1 ^ s2)))
dq = collections.deque(maxlen=1000)
for i in range(200_000):
    dq.append((i, str(i)))
emit("deque", (len(dq), dq[0][0], dq[-1][1]))

# Generators, closures and exceptions in a loop.
def gen(n):
    for i in range(n):
        yield {"i": i, "sq": i * i}


def make_adder(k):
    return lambda v: v + k


adders = [make_adder(k) for k in range(1000)]
acc = 0
errors = 0
for d in gen(100_000):
    try:
        if d["i"] % 97 == 0:
            raise ValueError(d["i"])
        acc = adders[d["i"] % 1000](acc + d["sq"] % 13)
    except ValueError:
        errors += 1
emit("generator total", (acc, errors))

gc.collect()
emit("gc enabled", gc.isenabled())
sys.stdout.write("\n".join(out) + "\n")
