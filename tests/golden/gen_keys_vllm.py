#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gen_keys_vllm.py - write tests/golden/keys_vllm_algos.txt: block keys of
vLLM's sha256, xxhash and xxhash_cbor prefix-caching algorithms (and
sha256_cbor again), computed with vLLM's own hash functions.

The functions come from vllm/utils/hashing.py of an installed or
downloaded vLLM, loaded from that file alone (the rest of vLLM needs
torch). Get it without installing anything system-wide:

    python3 -m venv /tmp/v && /tmp/v/bin/pip install xxhash cbor2
    /tmp/v/bin/pip download vllm --no-deps -d /tmp/v/dl
    /tmp/v/bin/python tests/golden/gen_keys_vllm.py /tmp/v/dl/vllm-*.whl \\
        > tests/golden/keys_vllm_algos.txt

A block's key is vLLM's hash_block_tokens() (vllm/v1/core/kv_cache_utils.py):
hash_fn((parent, tuple(token_ids), extra_keys)), where parent is NONE_HASH
= hash_fn(seed) for the first block and extra_keys None or a tuple. The
seed is PYTHONHASHSEED's value ("vllm-none-hash" when it is unset, for
the sha256 algorithms). These vectors cover the extra keys kvp_extra holds
today: text and unsigned integers, untagged (vLLM before its tagged
("lora", name, path) / ("mm", id, offset) tuples).

tests/check_keys.c reads the file. One vector a line, fields separated by
one space, "-" for an empty string or no extras:

    vroot  <algo> <seed hex> <key hex>
    vchain <algo> <seed hex> <block_tokens> <tokens> <extras> <key>:<key>:...
    vvchain <algo> <seed hex> <block_tokens> <tokens> <per-block extras> <keys>

vvchain lines carry vLLM 0.33's tagged extras, one value per block joined
by "|": - for None, i<int>, S<hex> a tag literal (the same object
wherever it appears), s<hex> a fresh str, b<hex> bytes, t(<v>,...) a tuple.

<tokens> is a comma-separated list of decimal token ids; <extras> a
comma-separated list of s:<hex of the text> or n:<decimal integer>. A key
is the digest as vLLM returns it (32 bytes for sha256, 16 for xxhash).
"""
import importlib.util
import io
import random
import sys
import zipfile


def load_hashing(path):
    """vllm/utils/hashing.py from a wheel, an installed tree, or the file."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            src = z.read("vllm/utils/hashing.py").decode()
            version = next((n.split(".dist-info")[0].split("-", 1)[1] for n in z.namelist()
                            if n.endswith(".dist-info/METADATA")), "?")
    else:
        if not path.endswith(".py"):
            path = path.rstrip("/") + "/vllm/utils/hashing.py"
        with open(path) as f:
            src = f.read()
        version = "?"
    spec = importlib.util.spec_from_loader("vllm_hashing", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, "vllm/utils/hashing.py", "exec"), mod.__dict__)
    return mod, version


def hexs(s):
    return s.encode().hex() if s else "-"


def extras_field(extras):
    if not extras:
        return "-"
    return ",".join("s:" + x.encode().hex() if isinstance(x, str) else "n:%d" % x
                    for x in extras)


TAGS = ("lora", "mm", "cache_salt", "prompt_embeds")


def fresh(text):
    """A new str object (not the interned literal): as vLLM's names and
    identifiers, computed at run time. Two or more characters: CPython
    keeps one object for each single character."""
    assert len(text) >= 2
    return "".join(list(text))


def value_field(v):
    """The vector syntax of a value: - None, i<int>, S<hex> a tag literal
    (one object), s<hex> a fresh str, b<hex> bytes, t(<v>,...) a tuple."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        raise TypeError(v)
    if isinstance(v, int):
        return "i%d" % v
    if isinstance(v, str):
        return ("S" if v in TAGS and any(v is t for t in TAGS) else "s") + v.encode().hex()
    if isinstance(v, bytes):
        return "b" + v.hex()
    return "t(" + ",".join(value_field(x) for x in v) + ")"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_keys_vllm.py VLLM-WHEEL-OR-DIR > keys_vllm_algos.txt")
    h, version = load_hashing(sys.argv[1])
    algos = ["sha256", "xxhash", "xxhash_cbor", "sha256_cbor"]
    out = io.StringIO()
    out.write("# vLLM %s (vllm/utils/hashing.py), CPython %d.%d.%d: gen_keys_vllm.py\n"
              % (version, *sys.version_info[:3]))
    seeds = ["vllm-none-hash", "0", "42", "kvpool", ""]
    for algo in algos:
        fn = h.get_hash_fn_by_name(algo)
        for seed in seeds:
            out.write("vroot %s %s %s\n" % (algo, hexs(seed), fn(seed).hex()))
    rng = random.Random(20261201)
    extras_sets = [None, ("lora-a",), ("sql-adapter", 7, "tenant-salt"),
                   (2**64 - 1, "x" * 300)]
    for algo in algos:
        fn = h.get_hash_fn_by_name(algo)
        for seed in ["vllm-none-hash", "42"]:
            for bt in (16, 128):
                for extras in extras_sets:
                    n = bt * 2 + rng.randrange(bt)  # two full blocks and a part
                    toks = [rng.choice((rng.randrange(256), rng.randrange(65536),
                                        rng.randrange(2**31), 2**31 + rng.randrange(2**31),
                                        2**32 - 1)) for _ in range(n)]
                    parent = fn(seed)
                    keys = []
                    for b in range(n // bt):
                        parent = fn((parent, tuple(toks[b * bt:(b + 1) * bt]), extras))
                        keys.append(parent.hex())
                    out.write("vchain %s %s %d %s %s %s\n" % (
                        algo, hexs(seed), bt, ",".join(map(str, toks)),
                        extras_field(extras), ":".join(keys)))
    # vLLM 0.33's tagged extra keys, one tuple (or None) per block, built as
    # vllm/v1/core/kv_cache_utils.py builds them: the tags are literals
    # (one object each: the pickle refers back to a repeated one), the
    # identifiers and names fresh strings.
    for algo in algos:
        fn = h.get_hash_fn_by_name(algo)
        for bt in (16, 128):
            for case in range(5):
                nblocks = 4
                toks = [rng.choice((rng.randrange(256), rng.randrange(2**32)))
                        for _ in range(bt * nblocks)]
                per_block = []
                for b in range(nblocks):
                    keys = []
                    if case in (1, 4):
                        keys.append(("lora", fresh("sql-adapter"), fresh("/srv/lora/sql-v2")))
                    if case in (2, 4):
                        # two images: one from before the block (negative offset)
                        # into it, one starting inside it
                        keys.append(("mm", fresh("img-%08x" % rng.randrange(2**32)),
                                     -rng.randrange(1, 3 * bt)))
                        keys.append(("mm", fresh("img-%08x" % rng.randrange(2**32)),
                                     rng.randrange(bt)))
                    if case in (3, 4) and b == 0:
                        keys.append(("cache_salt", fresh("tenant-7-salt")))
                    if case == 3:
                        keys.append(("prompt_embeds", bytes(rng.randrange(256)
                                                            for _ in range(32))))
                    per_block.append(tuple(keys) if keys else None)
                parent = fn(seed := ("vllm-none-hash" if case % 2 else "42"))
                out_keys = []
                for b in range(nblocks):
                    parent = fn((parent, tuple(toks[b * bt:(b + 1) * bt]), per_block[b]))
                    out_keys.append(parent.hex())
                out.write("vvchain %s %s %d %s %s %s\n" % (
                    algo, hexs(seed), bt, ",".join(map(str, toks)),
                    "|".join(value_field(x) for x in per_block), ":".join(out_keys)))
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
