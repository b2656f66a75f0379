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

tests/check_keys.c and tests/check_keys_request.c read the file. One vector
a line, fields separated by one space, "-" for an empty string or no
extras:

    vroot  <algo> <seed hex> <key hex>
    vchain <algo> <seed hex> <block_tokens> <tokens> <extras> <key>:<key>:...
    vvchain <algo> <seed hex> <block_tokens> <tokens> <per-block extras> <keys>

    vreq   <algo> <seed hex> <block_tokens> <tokens> <lora name hex>:<lora path hex>
           <mm features: id hex:offset:length;...> <cache salt hex> <embedding
           digests per block, hex, ':'-separated> <keys>  (- for none)

vreq lines are whole requests, keyed by vLLM's own request block hasher
(get_request_block_hasher() and what it calls, run out of
vllm/v1/core/kv_cache_utils.py). vvchain lines carry vLLM 0.33's tagged extras, one value per block joined
by "|": - for None, i<int>, S<hex> a tag literal (the same object
wherever it appears), s<hex> a fresh str, b<hex> bytes, t(<v>,...) a tuple.

The pickle algorithms hash CPython's pickle, so the file is only as good
as the claim that every CPython vLLM runs on pickles these shapes the
same. Run this script under each (with its own xxhash and cbor2) and
compare all but the first line: CPython 3.10.4, 3.11.7, 3.12.3 and
3.13.5 give this file byte for byte (vLLM 0.33.0).

<tokens> is a comma-separated list of decimal token ids; <extras> a
comma-separated list of s:<hex of the text> or n:<decimal integer>. A key
is the digest as vLLM returns it (32 bytes for sha256, 16 for xxhash).
"""
import importlib.util
import io
import random
import sys
import zipfile


def load_request_hasher(path, hashing):
    """vLLM's get_request_block_hasher() and the functions it calls, taken
    out of vllm/v1/core/kv_cache_utils.py (the module itself imports torch)
    and run as they are, with the hash functions of hashing."""
    import ast
    import hashlib
    import typing
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            src = z.read("vllm/v1/core/kv_cache_utils.py").decode()
    else:
        with open(path.rstrip("/") + "/vllm/v1/core/kv_cache_utils.py") as f:
            src = f.read()
    want = {"get_request_block_hasher", "generate_block_hash_extra_keys",
            "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
            "_gen_prompt_embeds_extra_hash_keys", "hash_block_tokens"}
    tree = ast.parse(src)
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in want]
    assert {n.name for n in body} == want, "kv_cache_utils.py lacks one of %s" % want
    ns = {"Any": typing.Any, "Callable": typing.Callable, "Sequence": typing.Sequence,
          "Request": object, "BlockHash": bytes, "hashlib": hashlib,
          "xxhash": hashing.xxhash, "xxhash_cbor": hashing.xxhash_cbor}
    exec(compile(ast.Module(body=body, type_ignores=[]), "kv_cache_utils.py", "exec"), ns)
    return ns


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
        for seed in ["vllm-none-hash", "0", "42"]:  # PYTHONHASHSEED unset, 0, 42
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
                parent = fn(seed := ("vllm-none-hash", "0", "42")[case % 3])
                out_keys = []
                for b in range(nblocks):
                    parent = fn((parent, tuple(toks[b * bt:(b + 1) * bt]), per_block[b]))
                    out_keys.append(parent.hex())
                out.write("vvchain %s %s %d %s %s %s\n" % (
                    algo, hexs(seed), bt, ",".join(map(str, toks)),
                    "|".join(value_field(x) for x in per_block), ":".join(out_keys)))
    # whole requests, keyed by vLLM's own request block hasher
    from types import SimpleNamespace as NS
    kv = load_request_hasher(sys.argv[1], h)
    for algo in algos:
        fn = h.get_hash_fn_by_name(algo)
        for bt in (16, 128):
            for case in range(6):
                n = bt * 5 + rng.randrange(bt)
                toks = [rng.choice((rng.randrange(256), rng.randrange(2**32))) for _ in range(n)]
                lora = (NS(lora_name=fresh("sql-adapter"), lora_path=fresh("/srv/lora/sql"))
                        if case in (1, 5) else None)
                mm = []
                if case in (2, 5):
                    # three images: one across a block boundary, two in one block
                    for off, ln in ((bt // 2, bt + 3), (2 * bt + 1, 2), (2 * bt + 5, 3)):
                        mm.append(NS(identifier=fresh("img-%08x" % rng.randrange(2**32)),
                                     mm_position=NS(offset=off, length=ln)))
                salt = fresh("tenant-salt") if case in (3, 5) else None
                embeds = {}
                if case in (4, 5):
                    for b in range(n // bt):
                        embeds[(b * bt, (b + 1) * bt)] = bytes(rng.randrange(256) for _ in range(32))
                req = NS(block_hashes=[], num_tokens=n, mm_features=mm, lora_request=lora,
                         cache_salt=salt, prompt_embeds=object() if embeds else None,
                         _prompt_embeds_per_block_hashes=embeds, all_token_ids=toks)
                seed = ("vllm-none-hash", "0", "42")[case % 3]
                kv["NONE_HASH"] = fn(seed)
                keys = kv["get_request_block_hasher"](bt, fn)(req)
                out.write("vreq %s %s %d %s %s %s %s %s %s\n" % (
                    algo, hexs(seed), bt, ",".join(map(str, toks)),
                    (hexs(lora.lora_name) + ":" + hexs(lora.lora_path)) if lora else "-",
                    ";".join("%s:%d:%d" % (hexs(f.identifier), f.mm_position.offset,
                                            f.mm_position.length) for f in mm) or "-",
                    hexs(salt) if salt else "-",
                    ":".join(embeds[(b * bt, (b + 1) * bt)].hex() for b in range(n // bt))
                    if embeds else "-",
                    ":".join(k.hex() for k in keys)))
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
