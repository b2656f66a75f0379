# SPDX-License-Identifier: MIT
"""bench/python.py - the Python side of bench/run-python.sh: what
bench/pyref does in C, through the kvpool package, plus page views.

    python.py SOCKET pair N      N x (alloc of 1 page + release)
    python.py SOCKET acquire N   N x acquire of 256 published keys
                                 (the release after each is not timed)
    python.py SOCKET view N      N x (page(p) + memoryview of it)
    python.py SOCKET array N     N x page_array(p) (a NumPy view)

Prints "py mode=MODE n=N ns=NS" (nanoseconds per operation, the mean
over N after N / 10 untimed ones) and, for view and array, whether the
view's address is the page's (copy=no)."""
import sys
import time

import kvpool

NKEYS, BT = 256, 16
GEO = kvpool.Geometry(layers=2, kv_heads=2, head_dim=64, block_tokens=BT,
                      dtype=kvpool.DType.F16, model="bench/python")


def main():
    sock, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    warm = n // 10
    extra = ""
    with kvpool.Client(sock, "bench-python", GEO) as c:
        clock = time.perf_counter_ns
        if mode == "pair":
            alloc, release = c.alloc, c.release
            for _ in range(warm):
                release(alloc(1))
            t0 = clock()
            for _ in range(n):
                release(alloc(1))
            spent = clock() - t0
        elif mode == "acquire":
            import array
            toks = array.array("I", ((i * 7 + 11) & 0xFFFFFFFF for i in range(NKEYS * BT)))
            keys = c.block_keys(toks)
            pages = c.alloc(NKEYS)
            c.publish(pages, keys)
            c.release(pages)
            blob = b"".join(keys)
            spent = 0
            for i in range(-warm, n):
                t0 = clock()
                got = c.acquire(blob)
                if i >= 0:
                    spent += clock() - t0
                assert len(got.pages) == NKEYS
                c.release(got.pages)
        else:
            (p,) = c.alloc(1)
            if mode == "view":
                page = c.page

                def make():
                    return memoryview(page(p))
            else:
                make = lambda: c.page_array(p)  # noqa: E731
            for _ in range(warm):
                make()
            t0 = clock()
            for _ in range(n):
                make()
            spent = clock() - t0
            v = make()
            import numpy as np
            addr = np.frombuffer(v, dtype=np.uint8).ctypes.data if mode == "view" \
                else v.ctypes.data
            extra = " copy=%s" % ("no" if addr == c.page(p).address else "yes")
            del v
            c.release([p])
    print("py mode=%s n=%d ns=%.0f%s" % (mode, n, spent / n, extra))


if __name__ == "__main__":
    main()
