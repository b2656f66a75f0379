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
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
