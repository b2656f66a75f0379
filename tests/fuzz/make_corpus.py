#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make_corpus.py - write the seed corpus of the fuzz harnesses.

usage: /usr/bin/python3 tests/fuzz/make_corpus.py   (from the tree root)

Seeds are valid sessions and payloads built from the layouts in
include/kvpool_wire.h, so the fuzzers start from messages the daemon
accepts and mutate from there. The files are committed; run this again
after a wire change.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OP = dict(STATS=1, HELLO=2, MAP_SLAB=3, ALLOC=4, RELEASE=5, ACQUIRE=6,
          PUBLISH=7, PUBLISH_PARTIAL=8, COW=9, RETAIN=10, LIST_CLIENTS=11,
          LIST_PAGES=12, LIST_PREFIXES=13, EVICT=14, DISCONNECT=15, DROP_NS=16,
          HANDOFF=17)


def name(s, n):
    return s.encode().ljust(n, b"\0")


def hello(ns="fuzz", layers=1, heads=1, dim=64, bt=16, dtype=1, scheme=0):
    return (name(ns, 64) + name("fuzz/model", 128) + name("fuzzer", 32) +
            struct.pack("<8I", layers, heads, dim, bt, dtype, scheme, 0, 0))


def handle(index, slab=0, gen=1):
    """A page's handle; a slab of the fuzzer's pool holds 64 pages of 4 KiB."""
    return (gen << 32) | (slab << 20) | index


def pages(*hs):
    return struct.pack("<II", len(hs), 0) + b"".join(struct.pack("<Q", h) for h in hs)


def key(i):
    return bytes((i * 37 + j) & 0xff for j in range(32))


def acquire(keys, tokens=(), parent=b"\0" * 32, prefill_rate=0, remote_max_us=0, flags=0,
            wait_ms=0):
    return (struct.pack("<II", len(keys), len(tokens)) + parent +
            struct.pack("<IIII", prefill_rate, remote_max_us, flags, wait_ms) +
            b"".join(keys) + b"".join(struct.pack("<I", t) for t in tokens))


def publish(ents, prio=1, parent=b"\0" * 32):
    return (struct.pack("<II", len(ents), prio) + parent +
            b"".join(struct.pack("<Q", p) + k for p, k in ents))


def partial(page, tokens, prio=1, parent=b"\0" * 32):
    return (struct.pack("<QII", page, len(tokens), prio) + parent +
            b"".join(struct.pack("<I", t) for t in tokens))


def handoff(what, k, blocks=0, ttl_ms=0, ticket=b"\0" * 32):
    return struct.pack("<IIII", what, blocks, ttl_ms, 0) + k + ticket


def chunk(op, payload):
    """A request with a well-formed header (fuzz_session's kind 0)."""
    return struct.pack("<BHH", 0, OP[op], len(payload)) + payload


def raw(b):
    return struct.pack("<BH", 1, len(b)) + b


def use(conn, who):
    """Use connection conn, connecting it as root (0) or uid 1000 + who."""
    return struct.pack("<BBB", 2, conn, who)


CLOSE = b"\x03"        # close the connection in use
RESTART = b"\x06"      # restart the daemon on its tier files


def with_fd(op, payload):
    """A request with a descriptor attached (fuzz_session's kind 4)."""
    return struct.pack("<BHH", 4, OP[op], len(payload)) + payload


def rules(k):
    """Rule set k of fuzz_session.c, then SIGHUP."""
    return struct.pack("<BB", 5, k)


def alloc(n):
    return chunk("ALLOC", struct.pack("<II", n, 0))


def ns_name(s):
    return name(s, 64)


SESSIONS = {
    "stats-only": chunk("STATS", b""),
    "alloc-release": chunk("HELLO", hello()) + chunk("ALLOC", struct.pack("<II", 4, 0)) +
                     chunk("MAP_SLAB", struct.pack("<II", 0, 0)) +
                     chunk("RELEASE", pages(handle(0), handle(1))),
    "publish-acquire": chunk("HELLO", hello()) +
                       chunk("ALLOC", struct.pack("<II", 3, 0)) +
                       chunk("PUBLISH", publish([(handle(0), key(0)), (handle(1), key(1))])) +
                       chunk("PUBLISH_PARTIAL", partial(handle(2), [1, 2, 3], parent=key(1))) +
                       chunk("RELEASE", pages(handle(0), handle(1), handle(2))) +
                       chunk("ACQUIRE", acquire([key(0), key(1)], [5] * 16 + [1, 2, 3])) +
                       chunk("COW", pages(handle(0))) +
                       chunk("RETAIN", pages(handle(1))) +
                       chunk("LIST_PAGES", name("", 64) + struct.pack("<IIQ", 0, 0, 0)) +
                       chunk("LIST_PREFIXES", name("", 64) + struct.pack("<II", 10, 0)) +
                       chunk("LIST_CLIENTS", b"") +
                       chunk("EVICT", name("fuzz", 64) + struct.pack("<Q", 0)) +
                       chunk("STATS", b""),
    "evict-drop": chunk("HELLO", hello("other", 2, 2, 128, 16, 2)) +
                  chunk("ALLOC", struct.pack("<II", 64, 0)) +
                  chunk("EVICT", name("", 64) + struct.pack("<Q", 5)) +
                  chunk("DROP_NS", name("fuzz", 64)) +
                  chunk("DISCONNECT", struct.pack("<Q", 1)),
    "bad-header": raw(b"hello, daemon") + chunk("STATS", b""),
    # a restored namespace (80 pages: the host tier takes 64, the NVMe
    # tier the rest), then HELLOs with geometries that cannot be; the
    # ALLOC makes slab 0, then slab 1, whose pages come first (LIFO)
    "warm-restart": chunk("HELLO", hello()) + alloc(80) +
                    chunk("PUBLISH", publish([(handle(i % 64, 1 - i // 64), key(i))
                                              for i in range(80)])) +
                    chunk("RELEASE", pages(*[handle(i % 64, 1 - i // 64) for i in range(80)])) +
                    chunk("EVICT", ns_name("fuzz") + struct.pack("<Q", 0)) +
                    RESTART + rules(2) + use(1, 0) + chunk("HELLO", hello(layers=0)) +
                    use(2, 1) + chunk("HELLO", hello(dim=128)) +
                    use(3, 0) + chunk("STATS", b"") + CLOSE + use(3, 0) +
                    chunk("HELLO", hello()) +
                    chunk("ACQUIRE", acquire([key(i) for i in range(80)])),
    # readers may not create or reshape; a writer may
    "rules-readers": rules(2) + use(1, 1) + chunk("HELLO", hello()) +
                     use(2, 2) + chunk("HELLO", hello("other")) + alloc(2) +
                     chunk("MAP_SLAB", struct.pack("<II", 0, 0)) +
                     use(0, 0) + chunk("HELLO", hello()) + alloc(1) +
                     use(3, 1) + chunk("HELLO", hello(dim=128)) + CLOSE +
                     use(3, 1) + chunk("HELLO", hello()) +
                     chunk("MAP_SLAB", struct.pack("<II", 0, 0)) +
                     chunk("LIST_PREFIXES", ns_name("other") + struct.pack("<II", 0, 0)) +
                     chunk("LIST_PAGES", ns_name("") + struct.pack("<IIQ", 0, 0, 0)),
    # rights taken away by SIGHUP while the clients are connected
    "sighup-revoke": rules(1) + use(1, 1) + chunk("HELLO", hello()) + alloc(2) +
                     chunk("MAP_SLAB", struct.pack("<II", 0, 0)) +
                     use(2, 2) + chunk("HELLO", hello()) +
                     chunk("ACQUIRE", acquire([key(0)])) + rules(3) +
                     use(1, 1) + chunk("STATS", b"") + use(2, 2) +
                     chunk("MAP_SLAB", struct.pack("<II", 0, 0)) + rules(0) +
                     use(3, 3) + chunk("HELLO", hello()) + alloc(1),
    # a drop disconnects the namespace's clients
    "drop-clients": use(1, 1) + chunk("HELLO", hello()) + alloc(4) +
                    use(2, 2) + chunk("HELLO", hello()) +
                    use(0, 0) + chunk("DROP_NS", ns_name("fuzz")) +
                    use(1, 1) + chunk("STATS", b"") +
                    use(3, 0) + chunk("HELLO", hello()) + alloc(1),
    # one uid may hold two of the four connections
    "per-uid": use(1, 1) + chunk("STATS", b"") + use(2, 1) + chunk("STATS", b"") +
               use(3, 1) + chunk("STATS", b"") + use(0, 2) + chunk("STATS", b""),
    # descriptors attached to requests are closed and refused
    "fd-attached": with_fd("STATS", b"") + chunk("HELLO", hello()) +
                   with_fd("ALLOC", struct.pack("<II", 1, 0)) + alloc(1),
    # namespaces made and dropped, one after another
    "ns-churn": b"".join(use(1, 1) + chunk("HELLO", hello("n%d" % i)) + CLOSE +
                         use(0, 0) + chunk("DROP_NS", ns_name("n%d" % i))
                         for i in range(6)),
    # an ACQUIRE that waits for a key (WAIT, 50 ms) and gets it after its
    # deadline; a LOAD; a PROBE
    "wait-keys": chunk("HELLO", hello()) + alloc(1) +
                 chunk("PUBLISH", publish([(handle(0), key(0))])) +
                 chunk("ACQUIRE", acquire([key(0), key(1)], flags=4, wait_ms=50)) +
                 chunk("ACQUIRE", acquire([key(0)], flags=1)) +
                 chunk("ACQUIRE", acquire([key(0), key(1)], flags=2)) +
                 chunk("RELEASE", pages(handle(0))),
    # a handoff: a ticket issued, a forged one checked, a block abandoned
    # under a wait, a reader's ISSUE refused
    "handoff": chunk("HELLO", hello()) + alloc(1) +
               chunk("PUBLISH", publish([(handle(0), key(0))])) +
               chunk("HANDOFF", handoff(1, key(1), blocks=2, ttl_ms=1000)) +
               chunk("HANDOFF", handoff(2, key(1), ticket=struct.pack("<QII", 1, 2, 0) +
                                        b"\1" * 16)) +
               chunk("ACQUIRE", acquire([key(0), key(1), key(2)], flags=4, wait_ms=50)) +
               chunk("HANDOFF", handoff(3, key(1))) +
               chunk("ACQUIRE", acquire([key(0), key(1)], flags=4, wait_ms=50)) +
               chunk("RELEASE", pages(handle(0))) + rules(2) + use(1, 1) +
               chunk("HELLO", hello()) + chunk("HANDOFF", handoff(1, key(3), 1, 10)),
    "many-pages": chunk("HELLO", hello()) +
                  chunk("ALLOC", struct.pack("<II", 200, 0)) +
                  chunk("PUBLISH", publish([(handle(i), key(i)) for i in range(40)], 3)) +
                  chunk("RELEASE", pages(*[handle(i) for i in range(200)])),
}

WIRE = {
    # the first byte picks the decoder (fuzz_wire.c): 0 hello, 1 pages,
    # 2 acquire, 3 publish, 4 partial, 5 stats
    "hello": b"\0" + hello(),
    "pages": b"\1" + pages(handle(0), handle(7)),
    "acquire": b"\2" + acquire([key(0), key(1)], [1, 2, 3]),
    "publish": b"\3" + publish([(handle(0), key(0))]),
    "partial": b"\4" + partial(handle(0), [4, 5, 6]),
    "stats": b"\5" + b"\0" * 472,
    "header": struct.pack("<IHHIIQII", 0x3150564b, 2, 1, 0, 0, 7, 0, 0),
}

for sub, seeds in (("fuzz_session", SESSIONS), ("fuzz_wire", WIRE)):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    for n, b in seeds.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(b)
print("wrote", sum(len(s) for s in (SESSIONS, WIRE)), "seeds under", os.path.join(HERE, "corpus"))
