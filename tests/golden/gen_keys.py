#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""gen_keys.py - write tests/golden/keys_vllm.txt, the golden vectors of the
KVP_KEYS_VLLM_SHA256_CBOR prefix keys and of SHA-256, computed the way vLLM
computes its sha256_cbor prefix-caching hash:

    sha256_cbor(x)   = hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()
    NONE_HASH        = sha256_cbor(seed)            # seed: PYTHONHASHSEED
    block hash       = sha256_cbor((parent_hash, tuple(token_ids), extra_keys))
                       extra_keys: a tuple, or None when there are none

Run with Debian's interpreter, which has python3-cbor2:

    /usr/bin/python3 tests/golden/gen_keys.py > tests/golden/keys_vllm.txt

tests/check_keys.c and tests/check_keys_sha256.c read the file. One vector
a line, fields separated by one space; strings are written as the hex of
their UTF-8 bytes and "-" stands for an empty string, an empty list or
None:

    sha   <message length> <digest>        message byte i = (i * 31 + 7) & 0xff
    root  <seed> <key>
    block <parent> <tokens> <extras> <key>
    chain <parent> <block_tokens> <tokens> <extras> <key>:<key>:...

<tokens> is a comma-separated list of decimal token ids; <extras> a
comma-separated list of items s:<hex of the text>, r:<count>:<hex> (that
text repeated count times) or n:<decimal integer>.
A chain line's keys are those of every full block of its tokens, in order
(a partial last block has none).
"""
import hashlib
import importlib.metadata
import random
import sys

import cbor2


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def none_hash(seed):
    return sha256_cbor(seed)


def hash_block_tokens(parent, token_ids, extra_keys):
    return sha256_cbor((parent, tuple(token_ids), extra_keys))


def text(s):
    return s.encode("utf-8").hex() or "-"


def tokens_field(tokens):
    return ",".join(str(t) for t in tokens) or "-"


def extras_field(extras):
    if extras is None:
        return "-"
    items = []
    for e in extras:
        if isinstance(e, str) and len(e) >= 1024 and e == e[0] * len(e):
            items.append("r:%d:%s" % (len(e), e[0].encode("utf-8").hex()))
        elif isinstance(e, str):
            items.append("s:" + (e.encode("utf-8").hex()))
        else:
            items.append("n:%d" % e)
    return ",".join(items)


def message(n):
    return bytes((i * 31 + 7) & 0xFF for i in range(n))


def main():
    out = sys.stdout
    out.write("# Golden vectors of kvpool's vLLM-compatible prefix keys; written by\n")
    out.write("# tests/golden/gen_keys.py (cbor2 %s, hashlib); do not edit by hand.\n"
              % importlib.metadata.version("cbor2"))

    # SHA-256 alone, every length around the padding boundaries
    for n in list(range(0, 130)) + [191, 192, 255, 256, 1000, 4095, 4096, 65537]:
        out.write("sha %d %s\n" % (n, hashlib.sha256(message(n)).hexdigest()))

    seeds = ["", "0", "kvpool", "12345", "Grüße, 世界 🚀", "x" * 23, "y" * 24,
             "z" * 300]
    roots = {}
    for s in seeds:
        roots[s] = none_hash(s)
        out.write("root %s %s\n" % (text(s), roots[s].hex()))

    root = roots["0"]
    widths = [0, 1, 23, 24, 25, 255, 256, 65535, 65536, 2**32 - 1]
    extras_cases = [
        None,
        ("lora-a",),
        ("lora-a", 7),
        ("mm-3f2a", 0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32,
         2**64 - 1, "salt"),
        ("s" * 23,),
        ("s" * 24,),
        ("L" * 255,),
        ("L" * 256,),
        ("L" * 300, 1),
        ("L" * 65536,),
        ("",),
        ("ünïcode ✓",),
    ]
    blocks = []
    # token ids at every width boundary of a CBOR unsigned integer
    for t in widths:
        blocks.append((root, [t], None))
        blocks.append((root, [t] * 16, None))
    blocks.append((root, widths + widths[::-1], None))
    # empty block, with and without extras
    blocks.append((root, [], None))
    blocks.append((root, [], ("lora-a",)))
    # 16- and 128-token blocks (128 and more tokens: array heads 0x98 0x80)
    rng = random.Random(20240601)
    for n in (16, 23, 24, 128, 255, 256, 1000):
        blocks.append((root, [rng.randrange(0, 152064) for _ in range(n)], None))
    # every kind of extra keys
    toks16 = [rng.randrange(0, 152064) for _ in range(16)]
    for e in extras_cases:
        blocks.append((root, toks16, e))
    # other parents: other roots, all zeros, all 0xff
    for s in seeds[:4]:
        blocks.append((roots[s], toks16, None))
    blocks.append((bytes(32), toks16, None))
    blocks.append((b"\xff" * 32, toks16, ("lora-a", 7)))
    for parent, toks, extras in blocks:
        key = hash_block_tokens(parent, toks, extras)
        out.write("block %s %s %s %s\n" % (parent.hex(), tokens_field(toks),
                                          extras_field(extras), key.hex()))

    # chains from a root, as vLLM hashes a request's full blocks
    chains = [
        ("kvpool", 16, [rng.randrange(0, 152064) for _ in range(16 * 5)], None),
        ("kvpool", 16, [rng.randrange(0, 152064) for _ in range(16 * 4 + 9)], None),
        ("0", 16, [rng.randrange(0, 32000) for _ in range(16 * 300 + 15)], None),
        ("0", 128, [rng.randrange(0, 200000) for _ in range(128 * 20)],
         ("lora-a", "salt-1234", 99)),
        ("", 1, list(range(0, 70000, 997)), None),
        ("", 16, [rng.randrange(0, 10) for _ in range(15)], None),
    ]
    for seed, bt, toks, extras in chains:
        parent = roots[seed]
        keys = []
        p = parent
        for i in range(len(toks) // bt):
            p = hash_block_tokens(p, toks[i * bt:(i + 1) * bt], extras)
            keys.append(p.hex())
        out.write("chain %s %d %s %s %s\n" % (parent.hex(), bt, tokens_field(toks),
                                             extras_field(extras),
                                             ":".join(keys) or "-"))


if __name__ == "__main__":
    main()
