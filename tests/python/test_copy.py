# SPDX-License-Identifier: MIT
"""kvpool._kvpool.copy_blocks(), the connectors' block copy, against torch
indexing of the same layouts: vLLM's per-layer [block, head, token, K|V]
views and kvpool pages (layers, 2, heads, tokens, head_dim), both ways,
small and large enough for its streaming stores, on several threads; and
every address checked before a byte is copied."""
import pytest

from kvpool import _kvpool

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")


def vllm_side(layers):
    t = layers[0]
    es = t.element_size()
    d = t.shape[3] // 2
    lay = []
    for x in layers:
        st = x.untyped_storage()
        lay.append((x.data_ptr(), st.data_ptr(), st.data_ptr() + st.nbytes()))
    return lay, (t.stride(0) * es, d * es, t.stride(1) * es, t.stride(2) * es)


def pool_side(pool):
    es = pool.element_size()
    lo = pool.data_ptr()
    hi = lo + pool.numel() * es
    lay = [(lo + l * pool.stride(1) * es, lo, hi) for l in range(pool.shape[1])]
    return lay, tuple(pool.stride(i) * es for i in (0, 2, 3, 4))


def make(blocks, pages, layers, heads, tokens, dim, dtype=torch.float16):
    # vLLM 0.33's views: one backing buffer, a layer after another (LBNHC)
    raw = torch.empty(layers, blocks, heads, tokens, 2 * dim, dtype=dtype)
    raw.view(torch.int16 if dtype.itemsize == 2 else torch.int32).random_()
    kv = [raw[l] for l in range(layers)]
    pool = torch.zeros(pages, layers, 2, heads, tokens, dim, dtype=dtype)
    return kv, pool


def bits(t):
    return t.contiguous().view(torch.int16)  # random bits hold NaNs: compare bytes


def as_page(kv, b):
    """Block b of every layer as a pool page (layers, 2, heads, tokens, dim)."""
    return torch.stack([t[b].unflatten(-1, (2, -1)).permute(2, 0, 1, 3) for t in kv])


@pytest.mark.parametrize("shape,threads", [((12, 10, 3, 2, 16, 8), 1),
                                           ((12, 10, 3, 2, 16, 8), 3),
                                           # 44 pairs x 1 MiB, past 32 MiB: streamed
                                           ((52, 48, 16, 8, 16, 128), 2)])
def test_blocks_go_both_ways_as_torch_moves_them(shape, threads):
    blocks, pages, layers, heads, tokens, dim = shape
    kv, pool = make(blocks, pages, layers, heads, tokens, dim)
    n = min(blocks, pages) - 4
    pairs = torch.tensor([[(7 * i + 3) % pages, (5 * i + 1) % blocks] for i in range(n)],
                         dtype=torch.int64)
    vl, vs = vllm_side(kv)
    pl, ps = pool_side(pool)
    run = dim * pool.element_size()
    assert _kvpool.copy_blocks(pl, ps, vl, vs, pairs.numpy(), heads, tokens, run,
                               threads) == n
    for p, b in pairs.tolist():
        assert torch.equal(bits(pool[p]), bits(as_page(kv, b)))
    untouched = set(range(pages)) - {p for p, _ in pairs.tolist()}
    assert all(not pool[p].any() for p in untouched)

    back, _ = make(blocks, pages, layers, heads, tokens, dim)
    for t in back:
        t.zero_()
    bl, bs = vllm_side(back)
    swapped = pairs.flip(1).contiguous()
    _kvpool.copy_blocks(bl, bs, pl, ps, swapped.numpy(), heads, tokens, run, threads)
    for p, b in pairs.tolist():
        for l in range(layers):
            assert torch.equal(bits(back[l][b]), bits(kv[l][b]))


def test_an_address_outside_either_side_copies_nothing():
    kv, pool = make(6, 4, 2, 2, 16, 8)
    vl, vs = vllm_side(kv)
    pl, ps = pool_side(pool)
    run = 8 * 2
    for bad in ([[4, 0]], [[0, 6]], [[-1, 0]], [[1, 1], [0, 99]]):
        with pytest.raises(ValueError, match="outside"):
            _kvpool.copy_blocks(pl, ps, vl, vs, torch.tensor(bad).numpy(), 2, 16, run)
        assert not pool.any()
    with pytest.raises(ValueError, match="negative"):
        _kvpool.copy_blocks(pl, (-1, 0, 0, 0), vl, vs, torch.tensor([[0, 0]]).numpy(), 2, 16,
                            run)
    with pytest.raises(ValueError, match="layers"):
        _kvpool.copy_blocks(pl[:1], ps, vl, vs, torch.tensor([[0, 0]]).numpy(), 2, 16, run)
    with pytest.raises(ValueError, match="pairs"):
        _kvpool.copy_blocks(pl, ps, vl, vs, torch.tensor([0, 0, 0]).numpy(), 2, 16, run)
    with pytest.raises(ValueError, match="positive"):
        _kvpool.copy_blocks(pl, ps, vl, vs, torch.tensor([[0, 0]]).numpy(), 0, 16, run)
    assert not pool.any()


WRAP = r"""
import sys, torch
sys.path[:0] = {path!r}
from kvpool import _kvpool
from test_copy import make, vllm_side, pool_side
kv, pool = make(6, 4, 2, 2, 16, 8)
vl, vs = vllm_side(kv)
pl, ps = pool_side(pool)
pairs = torch.tensor([[{db}, 0]]).numpy()
try:
    _kvpool.copy_blocks(pl, {strides}, vl, vs, pairs, {heads}, 16, 16)
except ValueError as e:
    print("refused:", e)
    sys.exit(0 if not pool.any() else 3)
sys.exit(2)
"""


@pytest.mark.parametrize("strides,heads,db", [
    # (heads - 1) x head stride wraps to 0: the span looks tiny
    ("(ps[0], ps[1], 1 << 62, ps[3])", 5, 0),
    # block x block stride wraps to 0: block 4 looks like block 0
    ("(1 << 62, ps[1], ps[2], ps[3])", 2, 4),
    # K|V stride plus the rest wraps past the end of the address space
    ("(ps[0], (1 << 63) - 1, (1 << 63) - 1, ps[3])", 3, 0),
])
def test_strides_that_wrap_are_refused_not_written(strides, heads, db):
    """Sums and products of strides and counts that overflow a size_t
    once beat the bounds check: a wild write (SIGSEGV). Run in a child, so
    that a crash is this test's failure, not pytest's end."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = WRAP.format(path=[here] + sys.path, strides=strides, heads=heads, db=db)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "refused" in r.stdout and "nothing was copied" in r.stdout
