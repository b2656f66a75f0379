# SPDX-License-Identifier: MIT
"""One kvpool client of whichever release's package Python imports (the
tree's, or the previous release's that test_upgrade.py builds and puts
first on PYTHONPATH), as an engine uses one: it joins a namespace, looks
up a prompt's blocks, computes (writes) those the pool lacks and
publishes them, or reads them back and checks every byte.

    python release_client.py SOCKET write SEED BLOCKS
    python release_client.py SOCKET read SEED BLOCKS
    python release_client.py SOCKET handoff SEED BLOCKS
    python release_client.py SOCKET hold SEED BLOCKS    # joined until stdin closes

Prints one JSON line: the package's version and file, the protocol its
connection speaks (None: a package older than Client.protocol), the
blocks the pool had (hits) and, for handoff, what the handoff calls
answered. Exit status 0, or 1 with what differed.
"""
import json
import random
import sys

import kvpool

GEOMETRY = dict(layers=2, kv_heads=2, head_dim=16, block_tokens=16, dtype=kvpool.DType.F16,
                model="release-test")


def block_bytes(seed, i, n):
    """Block i's K/V as the test's "model" computes them for prompt seed."""
    return random.Random("%d/%d" % (seed, i)).randbytes(n)


def main():
    sock, what, seed, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    g = kvpool.Geometry(**GEOMETRY)
    rng = random.Random(seed)
    tokens = [rng.randrange(1, 30000) for _ in range(blocks * GEOMETRY["block_tokens"])]
    out = {"version": kvpool.__version__, "file": kvpool.__file__}
    with kvpool.Client(sock, namespace="release", geometry=g, name="release-" + what) as c:
        out["protocol"] = getattr(c, "protocol", None)
        size = c.info()["page_bytes"]
        keys = c.block_keys(tokens)
        hit = c.acquire(keys)
        out["hits"] = len(hit.pages)
        bad = [i for i, p in enumerate(hit.pages)
               if bytes(memoryview(c.page(p))) != block_bytes(seed, i, size)]
        if what == "write" and len(hit.pages) < blocks:
            fresh = c.alloc(blocks - len(hit.pages))
            for j, p in enumerate(fresh):
                memoryview(c.page(p))[:] = block_bytes(seed, len(hit.pages) + j, size)
            c.publish(fresh, keys[len(hit.pages):],
                      parent=keys[len(hit.pages) - 1] if hit.pages else None)
            c.release(fresh)
        elif what == "hold":
            print(json.dumps(out), flush=True)
            sys.stdin.read()
            out = None
        elif what == "handoff" and not hasattr(c, "handoff_issue"):
            out["handoff"] = "none in this package"
        elif what == "handoff":
            try:
                c.handoff_issue(keys[-1], blocks, 10.0)
                out["handoff"] = "issued"
            except kvpool.Error as e:
                out["handoff"] = "%s: %s" % (type(e).__name__, e)
            try:
                got = c.acquire(keys, sources=True)
                c.release(got.pages)
                out["sources"] = got.sources
            except kvpool.Error as e:
                out["sources"] = "%s: %s" % (type(e).__name__, e)
        c.release(hit.pages)
    if out is not None:
        print(json.dumps(out), flush=True)
    if bad:
        print("blocks %s of prompt %d differ from what was written" % (bad, seed),
              file=sys.stderr)
        return 1
    if what == "read" and out["hits"] != blocks:
        print("the pool had %d of the %d blocks of prompt %d" % (out["hits"], blocks, seed),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
