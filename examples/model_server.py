# SPDX-License-Identifier: MIT
"""model_server.py - the example model server (examples/model_server.c) in
PyTorch on the CPU: the same tiny transformer (the same weights from the
same seed), its KV cache in kvpool pages shared with every other process
of the namespace, C model servers included.

usage: model_server.py [--socket PATH] [--requests FILE] [--max-tokens N]
                       [--batch B] [--no-cache] [--quiet] [--json]

It reads and prints what kvpool-model-server does (prompts one per line,
bytes as token ids, backslash escapes decoded; per-request lines, a
summary, or --json), so the two are interchangeable: for the same prompts
they give the same answers, with the cache or without it.

The arithmetic is the C model's, step for step, so that the K and V a
Python process publishes are what a C process would compute: each dot
product is the sum of 8 partial sums in a fixed order (model.c's
mm_dot()), float32 throughout, the RoPE tables from the same libm calls
in double, and attention by kvpool's own kernel (the C reference of
kernels/, through the kvpool package), and SiLU's exponential by libm's
expf() itself (through ctypes): PyTorch's exp, or exp in double rounded
to float, differ from it in the last bit for about one input in 1,600,
and the K/V of the layers after would no longer be the C model's bytes.
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvpool  # noqa: E402
from kvpool import _kvpool  # noqa: E402

VOCAB, LAYERS, DIM, Q_HEADS, KV_HEADS, HEAD_DIM, FFN = 256, 4, 512, 8, 2, 64, 1024
KV_DIM = KV_HEADS * HEAD_DIM
BT = 16
MAX_ROWS = 256
MODEL_ID = "kvpool-demo/tiny-4L"
NAMESPACE = "demo"
WEIGHT_SEED = 0x6B76706F6F6C  # "kvpool"
GEOMETRY = kvpool.Geometry(layers=LAYERS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                           block_tokens=BT, dtype=kvpool.DType.F32, model=MODEL_ID)
F32 = np.float32

# --- Weights: model.c's xorshift64* stream -------------------------------------

M64 = (1 << 64) - 1


def _step(s):
    s ^= s >> 12
    s ^= (s << 25) & M64
    s ^= s >> 27
    return s


def _apply(cols, v):
    """The GF(2)-linear map of columns cols applied to the 64-bit v."""
    r, i = 0, 0
    while v:
        if v & 1:
            r ^= cols[i]
        v >>= 1
        i += 1
    return r


def _power(cols, n):
    out = [1 << i for i in range(64)]
    while n:
        if n & 1:
            out = [_apply(cols, c) for c in out]
        cols = [_apply(cols, c) for c in cols]
        n >>= 1
    return out


def xorshift_stream(seed, n, lanes=4096):
    """The first n outputs of model.c's rng_next() from seed: the stream
    split into lanes that start where a jump of the state's linear map puts
    them, and run side by side in NumPy."""
    per = -(-n // lanes)
    jump = _power([_step(1 << i) for i in range(64)], per)
    starts = [seed]
    for _ in range(lanes - 1):
        starts.append(_apply(jump, starts[-1]))
    s = np.array(starts, dtype=np.uint64)
    out = np.empty((per, lanes), dtype=np.uint64)
    mul = np.uint64(0x2545F4914F6CDD1D)
    with np.errstate(over="ignore"):
        for k in range(per):
            s ^= s >> np.uint64(12)
            s ^= s << np.uint64(25)
            s ^= s >> np.uint64(27)
            out[k] = s * mul
    return out.T.reshape(-1)[:n]


def weights():
    """model.c's model_weights(): every weight, in the order it draws them;
    the projections as lanes() lays them out."""
    in_dim = F32(1) / np.sqrt(F32(DIM))
    res = F32(1) / np.sqrt(F32(2) * F32(LAYERS))
    in_ffn = F32(1) / np.sqrt(F32(FFN))
    plan = [("embed", (VOCAB, DIM), F32(1)), ("head", (VOCAB, DIM), in_dim)]
    for layer in range(LAYERS):
        plan += [("wq%d" % layer, (DIM, DIM), in_dim), ("wk%d" % layer, (KV_DIM, DIM), in_dim),
                 ("wv%d" % layer, (KV_DIM, DIM), in_dim),
                 ("wo%d" % layer, (DIM, DIM), in_dim * res),
                 ("wg%d" % layer, (FFN, DIM), in_dim), ("wu%d" % layer, (FFN, DIM), in_dim),
                 ("wd%d" % layer, (DIM, FFN), in_ffn * res)]
    total = sum(a * b for _, (a, b), _ in plan)
    raw = xorshift_stream(WEIGHT_SEED, total)
    u = (raw >> np.uint64(40)).astype(F32) * F32(1.0 / 16777216.0)
    w, at = {}, 0
    for name, (a, b), std in plan:
        scale = F32(std) * F32(1.7320508)
        t = torch.from_numpy(((F32(2) * u[at:at + a * b] - F32(1)) * scale).reshape(a, b))
        w[name] = t if name == "embed" else lanes(t)
        at += a * b
    return w


# --- Row-wise operations, as model.c computes them ----------------------------

def combine8(p):
    """((p0 + p4) + (p1 + p5)) + ((p2 + p6) + (p3 + p7)) over the last axis."""
    return ((p[..., 0] + p[..., 4]) + (p[..., 1] + p[..., 5])) + \
        ((p[..., 2] + p[..., 6]) + (p[..., 3] + p[..., 7]))


def lanes(w):
    """A weight [out][in] as matmul() reads it: [in / 8][out][8]."""
    return w.reshape(w.shape[0], w.shape[1] // 8, 8).transpose(0, 1).contiguous()


def matmul(x, ws):
    """y[r][j] = mm_dot(x[r], w[j]) for ws = lanes(w): 8 partial sums over the
    inputs in order, for as many outputs at a time as keep the partial sums
    in cache (about 128 K of them)."""
    rows, n = x.shape
    out = ws.shape[1]
    tile = max(8, min(out, (1 << 17) // (rows * 8)))
    xs = x.reshape(rows, n // 8, 8).transpose(0, 1).contiguous()  # [n / 8][rows][8]
    y = torch.empty(rows, out)
    prod = torch.empty(rows, min(tile, out), 8)
    for j0 in range(0, out, tile):
        j1 = min(out, j0 + tile)
        part = torch.zeros(rows, j1 - j0, 8)
        p = prod[:, :j1 - j0]
        for c in range(n // 8):  # a product, then a sum: no fused multiply-add
            torch.mul(xs[c][:, None, :], ws[c, j0:j1][None, :, :], out=p)
            part += p
        y[:, j0:j1] = combine8(part)
    return y


def rmsnorm(x):
    """x / rms(x), the norm weights being ones (x * s * 1.0 is x * s)."""
    xs = x.reshape(x.shape[0], DIM // 8, 8)
    part = torch.zeros(x.shape[0], 8)
    for c in range(DIM // 8):
        part += xs[:, c] * xs[:, c]
    # sqrtf: torch.sqrt of float32 is not always the exactly rounded root,
    # the double one rounded to float is (53 bits > 2 x 24 + 2)
    s = 1.0 / torch.sqrt((combine8(part) / DIM + F32(1e-5)).double()).float()
    return x * s[:, None]


class Rope:
    """cos and sin of RoPE's angles, from libm in double as model.c's
    rope_grow(), rounded to float."""

    def __init__(self):
        self.cos = np.zeros((0, HEAD_DIM // 2), F32)
        self.sin = self.cos

    def grow(self, n):
        if n <= len(self.cos):
            return
        cap = max(256, len(self.cos))
        while cap < n:
            cap *= 2
        half = HEAD_DIM // 2
        ang = [[p * math.pow(10000.0, -2.0 * i / HEAD_DIM) for i in range(half)]
               for p in range(len(self.cos), cap)]
        self.cos = np.concatenate([self.cos, np.array([[math.cos(a) for a in r] for r in ang], F32)])
        self.sin = np.concatenate([self.sin, np.array([[math.sin(a) for a in r] for r in ang], F32)])

    def apply(self, x, heads, pos):
        """Rotate pairs (i, i + half) of each head: the "rotate half" form."""
        c = torch.from_numpy(self.cos[pos])[:, None, :]
        s = torch.from_numpy(self.sin[pos])[:, None, :]
        x = x.reshape(x.shape[0], heads, HEAD_DIM)
        a, b = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1).reshape(x.shape[0], -1)


_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]
_expf = np.frompyfunc(_libm.expf, 1, 1)


def silu_mul(g, up):
    """g / (1 + expf(-g)) * up, with libm's expf (see the docstring)."""
    e = torch.from_numpy(_expf((-g).numpy()).astype(F32))
    return g / (1.0 + e) * up


class Model:
    def __init__(self, client):
        self.c = client
        self.w = weights()
        self.rope = Rope()

    def forward(self, rows):
        """rows: (token, pos, table, slot, want_next); table the block
        table of page handles, slot (page, offset) or None (K/V cached).
        Writes every row's K/V, attends, returns the greedy next token of
        each row that wants one (else None)."""
        n = len(rows)
        pos = np.array([r[1] for r in rows], dtype=np.int64)
        ctx = (pos + 1).astype(np.uint32)
        self.rope.grow(int(ctx.max()))
        max_blocks = int((int(ctx.max()) + BT - 1) // BT)
        tables = np.zeros((n, max_blocks), dtype=np.uint64)
        for i, r in enumerate(rows):
            used = (int(ctx[i]) + BT - 1) // BT
            tables[i, :used] = [self.c.page_address(p) for p in r[2][:used]]
        slots = [(self.c.page_array(r[3][0]), r[3][1]) if r[3] else None for r in rows]
        w = self.w
        x = w["embed"][torch.tensor([r[0] for r in rows])]
        for layer in range(LAYERS):
            h = rmsnorm(x)
            q = self.rope.apply(matmul(h, w["wq%d" % layer]), Q_HEADS, pos)
            k = self.rope.apply(matmul(h, w["wk%d" % layer]), KV_HEADS, pos)
            v = matmul(h, w["wv%d" % layer])
            kn, vn = k.numpy().reshape(n, KV_HEADS, HEAD_DIM), v.numpy().reshape(n, KV_HEADS, HEAD_DIM)
            for i, sl in enumerate(slots):  # every row's K/V first: later rows attend to them
                if sl:
                    sl[0][layer, 0, :, sl[1], :] = kn[i]
                    sl[0][layer, 1, :, sl[1], :] = vn[i]
            att = np.zeros((n, Q_HEADS, HEAD_DIM), F32)
            _kvpool.paged_attention_decode_ref(
                att, np.ascontiguousarray(q.numpy()), tables, ctx, layers=LAYERS,
                kv_heads=KV_HEADS, head_dim=HEAD_DIM, block_tokens=BT,
                dtype=int(kvpool.DType.F32), layer=layer, q_heads=Q_HEADS,
                scale=float(F32(1) / np.sqrt(F32(HEAD_DIM))))
            x = x + matmul(torch.from_numpy(att).reshape(n, DIM), w["wo%d" % layer])
            h = rmsnorm(x)
            gate = silu_mul(matmul(h, w["wg%d" % layer]), matmul(h, w["wu%d" % layer]))
            x = x + matmul(gate, w["wd%d" % layer])
        want = [i for i, r in enumerate(rows) if r[4]]
        out = [None] * n
        if want:
            logits = matmul(rmsnorm(x[want]), w["head"])
            for j, i in enumerate(want):  # the first largest printable byte
                out[i] = 0x20 + int(torch.argmax(logits[j, 0x20:0x7F]))
        return out


# --- A request's sequence and its pages (examples/model_seq.c) ------------------

class Seq:
    def __init__(self, index, prompt, max_tokens):
        self.index, self.tokens, self.n_prompt = index, list(prompt), len(prompt)
        self.cap = self.n_prompt + max_tokens
        self.n_kv = 0
        self.pages, self.keys = [], []
        self.n_frozen = 0
        self.cached = self.hits = self.published = self.computed = 0
        self.prefill_s = self.ttft_s = 0.0

    def parent(self, i):
        return self.keys[i - 1] if i else None

    def admit(self, c, cache):
        """Lease the cached prefix (full blocks, then a partial page, COW'd);
        the position the prefill starts at."""
        if not cache:
            return 0
        nb = self.n_prompt // BT
        self.keys = c.block_keys(self.tokens[:self.n_prompt])
        got = c.acquire(self.keys[:nb], self.tokens[:self.n_prompt])
        self.pages = list(got.pages)
        self.n_frozen = self.hits = len(got.pages)
        self.cached = self.hits * BT
        if got.partial:
            (copy,) = c.cow([got.partial[0]])
            c.release([got.partial[0]])
            self.pages.append(copy)
            self.cached += got.partial[1]
        self.n_kv = self.cached
        return min(self.cached, self.n_prompt - 1)

    def need(self):
        return -(-len(self.tokens) // BT) - len(self.pages)

    def slot(self, pos):
        return (self.pages[pos // BT], pos % BT) if pos >= self.n_kv else None

    def publish_full(self, c, upto):
        first = self.n_frozen
        if upto <= first:
            return
        canon = c.publish(self.pages[first:upto], self.keys[first:upto], parent=self.parent(first))
        for i, p in enumerate(canon):
            mine = self.pages[first + i]
            if p == mine:
                self.published += 1
            else:
                self.pages[first + i] = p
                c.release([mine])
        self.n_frozen = upto

    def publish_tail(self, c, i, ntok, keep):
        mine = self.pages[i]
        canon = c.publish_partial(mine, self.tokens[i * BT:i * BT + ntok], parent=self.parent(i))
        if canon != mine:
            c.release([canon])
            return
        self.published += 1
        if keep:
            (copy,) = c.cow([mine])
            self.pages[i] = copy
            c.release([mine])

    def publish_prompt(self, c, cache):
        if not cache:
            return
        nb, tail = divmod(self.n_prompt, BT)
        self.publish_full(c, nb)
        if tail and self.cached < self.n_prompt:
            self.publish_tail(c, nb, tail, True)

    def finish(self, c, cache):
        nfull, tail = divmod(self.n_kv, BT)
        first = self.n_frozen
        if cache and nfull > first:
            more = c.block_keys(self.tokens[first * BT:nfull * BT], parent=self.parent(first))
            self.keys = self.keys[:first] + more
            self.publish_full(c, nfull)
        if cache and tail and self.n_kv > self.n_prompt:
            self.publish_tail(c, nfull, tail, False)
        if self.pages:
            c.release(self.pages)
        self.pages = []


def grow(c, seqs):
    """Lease, in one alloc, the pages every sequence's next tokens need."""
    want = sum(max(0, s.need()) for s in seqs)
    if not want:
        return
    fresh = c.alloc(want)
    for s in seqs:
        while s.need() > 0:
            s.pages.append(fresh.pop(0))


# --- The server (examples/model_server.c) ---------------------------------------

def unescape(line):
    out, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch == 0x5C and i + 1 < len(line):
            e = chr(line[i + 1])
            if e in "ntr\\\"":
                out.append({"n": 10, "t": 9, "r": 13}.get(e, ord(e)))
                i += 2
                continue
            h = line[i + 2:i + 4].decode("latin-1")
            if e == "x" and len(h) == 2 and all(x in "0123456789abcdefABCDEF" for x in h):
                out.append(int(h, 16))
                i += 4
                continue
        out.append(ch)
        i += 1
    return out


def escaped(tokens):
    s = []
    for t in tokens:
        if t in (0x5C, 0x22):
            s.append("\\" + chr(t))
        elif t == 10:
            s.append("\\n")
        elif t == 9:
            s.append("\\t")
        elif 0x20 <= t < 0x7F:
            s.append(chr(t))
        else:
            s.append("\\x%02x" % t)
    return "".join(s)


def json_text(tokens):
    return "".join("\\" + chr(t) if t in (0x22, 0x5C) else chr(t) if 0x20 <= t < 0x7F
                   else "\\u%04x" % t for t in tokens)


class Server:
    def __init__(self, o, client):
        self.o, self.c = o, client
        self.m = Model(client)
        self.prefill_s = self.decode_s = 0.0
        self.decode_tokens = 0
        self.start_s = time.monotonic()

    def admit(self, s):
        t0 = time.monotonic()
        start = s.admit(self.c, self.o.cache)
        grow(self.c, [s])
        pos = start
        while pos < s.n_prompt:
            rows = []
            while pos < s.n_prompt and len(rows) < MAX_ROWS:
                rows.append((s.tokens[pos], pos, s.pages, s.slot(pos), pos == s.n_prompt - 1))
                pos += 1
            nxt = self.m.forward(rows)
            if pos == s.n_prompt:
                s.tokens.append(nxt[-1])
        s.ttft_s = time.monotonic() - self.start_s
        s.computed = s.n_prompt - start
        s.n_kv = s.n_prompt
        s.publish_prompt(self.c, self.o.cache)
        s.prefill_s = time.monotonic() - t0
        self.prefill_s += s.prefill_s

    def decode_step(self, act):
        t0 = time.monotonic()
        grow(self.c, act)
        rows = [(s.tokens[-1], len(s.tokens) - 1, s.pages, s.slot(len(s.tokens) - 1), True)
                for s in act]
        nxt = self.m.forward(rows)
        for s, t in zip(act, nxt):
            s.n_kv = len(s.tokens)
            s.tokens.append(t)
        self.decode_tokens += len(act)
        self.decode_s += time.monotonic() - t0

    def retire(self, s):
        s.finish(self.c, self.o.cache)
        if self.o.quiet or self.o.json:
            return
        gen = len(s.tokens) - s.n_prompt
        if s.cached == s.n_prompt:
            print("req %d: prompt %d tokens, all from the cache (the last one run again for "
                  "the first answer token); first token after %.1f ms; generated %d: \"%s\""
                  % (s.index, s.n_prompt, s.ttft_s * 1e3, gen, escaped(s.tokens[s.n_prompt:])))
        else:
            print("req %d: prompt %d tokens, %d from the cache, %d computed; first token after "
                  "%.1f ms; generated %d: \"%s\"" % (s.index, s.n_prompt, s.cached, s.computed,
                                                     s.ttft_s * 1e3, gen,
                                                     escaped(s.tokens[s.n_prompt:])))
        sys.stdout.flush()

    def serve(self, seqs):
        self.start_s = time.monotonic()
        act, nxt = [], 0
        while nxt < len(seqs) or act:
            while len(act) < self.o.batch and nxt < len(seqs):
                self.admit(seqs[nxt])
                act.append(seqs[nxt])
                nxt += 1
            kept = []
            for s in act:
                if len(s.tokens) == s.cap:
                    self.retire(s)
                else:
                    kept.append(s)
            act = kept
            if act:
                self.decode_step(act)


def report(srv, seqs, wall, o):
    n = len(seqs)
    prompt = sum(s.n_prompt for s in seqs)
    cached = sum(s.cached for s in seqs)
    computed = sum(s.computed for s in seqs)
    generated = sum(len(s.tokens) - s.n_prompt for s in seqs)
    saved = sum(s.hits for s in seqs)
    published = sum(s.published for s in seqs)
    ttft_mean = sum(s.ttft_s / n for s in seqs) if n else 0.0
    ttft_max = max((s.ttft_s for s in seqs), default=0.0)

    def rate(k, t):
        return k / t if t > 0 else 0.0

    if o.json:
        d = {"requests": n, "prompt_tokens": prompt, "cached_tokens": cached,
             "computed_tokens": computed, "generated_tokens": generated, "pages_saved": saved,
             "pages_published": published, "cache": o.cache, "device": "cpu",
             "batch": o.batch, "prefill_tokens_per_s": round(rate(computed, srv.prefill_s), 1),
             "decode_tokens": srv.decode_tokens, "decode_s": srv.decode_s,
             "decode_tokens_per_s": round(rate(srv.decode_tokens, srv.decode_s), 1),
             "wall_s": wall, "prefill_s": srv.prefill_s, "ttft_mean_s": ttft_mean,
             "ttft_max_s": ttft_max}
        if not o.quiet:
            d["results"] = [{"index": s.index, "prompt_tokens": s.n_prompt,
                             "cached_tokens": s.cached, "computed_tokens": s.computed,
                             "pages_saved": s.hits, "prefill_s": s.prefill_s,
                             "ttft_s": s.ttft_s, "generated": s.tokens[s.n_prompt:],
                             "text": "".join(chr(t) for t in s.tokens[s.n_prompt:])}
                            for s in seqs]
        print(json.dumps(d))
        return
    print("requests %d, prompt tokens %d: %d from the cache, %d computed; %d generated"
          % (n, prompt, cached, computed, generated))
    print("pages saved by sharing %d (leased from the pool, not computed); pages this process "
          "added to the pool %d (computed here and published; pages another process had "
          "published first are not counted)" % (saved, published))
    print("time to first token: mean %.1f ms, max %.1f ms; prefill %.3f s in all"
          % (ttft_mean * 1e3, ttft_max * 1e3, srv.prefill_s))
    print("prefill %.1f tokens/s; decode %d tokens in %.3f s: %.1f tokens/s (batch up to %d, "
          "%s, CPU, PyTorch); wall %.3f s" % (rate(computed, srv.prefill_s), srv.decode_tokens,
                                              srv.decode_s, rate(srv.decode_tokens, srv.decode_s),
                                              o.batch, "cache on" if o.cache else "no cache",
                                              wall))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="model_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="kvpoold's socket (default $KVPOOL_SOCKET or %s)"
                    % "/run/kvpool/kvpool.sock")
    ap.add_argument("--requests", help="prompts, one per line (default stdin)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per request (default 32)")
    ap.add_argument("--batch", type=int, default=4, help="requests decoded together (default 4)")
    ap.add_argument("--no-cache", dest="cache", action="store_false",
                    help="compute everything privately: no acquire, no publish")
    ap.add_argument("--quiet", action="store_true", help="no per-request lines")
    ap.add_argument("--json", action="store_true", help="the summary as one JSON object")
    o = ap.parse_args(argv)
    if not 1 <= o.max_tokens <= 1 << 20 or not 1 <= o.batch <= MAX_ROWS:
        ap.error("--max-tokens is 1 to 1048576, --batch 1 to %d" % MAX_ROWS)
    torch.set_num_threads(1)
    data = open(o.requests, "rb").read() if o.requests and o.requests != "-" \
        else sys.stdin.buffer.read()
    seqs = []
    for line in data.split(b"\n"):
        toks = unescape(line[:-1] if line.endswith(b"\r") else line)
        if toks:
            seqs.append(Seq(len(seqs), toks, o.max_tokens))
    try:
        client = kvpool.Client(o.socket, NAMESPACE, GEOMETRY)
    except kvpool.Error as e:
        print("model_server.py: cannot join namespace '%s': %s" % (NAMESPACE, e), file=sys.stderr)
        return 1
    if client.info()["backend"] != _kvpool.BACKEND_HOST:
        print("model_server.py: kvpoold's backend is cuda; this server runs on the CPU over "
              "host pages (use kvpool-model-server)", file=sys.stderr)
        return 1
    with client:
        srv = Server(o, client)
        t0 = time.monotonic()
        srv.serve(seqs)
        report(srv, seqs, time.monotonic() - t0, o)
    return 0


if __name__ == "__main__":
    sys.exit(main())
