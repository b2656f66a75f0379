# SPDX-License-Identifier: MIT
"""One vLLM engine side for the connector tests, in its own process: vLLM's
real Scheduler (with KVPoolConnector loaded by vLLM's connector factory
from kv_transfer_config, as `vllm serve --kv-transfer-config` does), and a
worker side the way vLLM's model runner drives it (KVConnectorModelRunnerMixin
binding the metadata, loading, saving and collecting the connector's output)
over CPU KV tensors that vLLM's own allocate_kv_cache() lays out.

The model is the test's: no model hub is reachable, so the test writes a
local model directory (a config.json) and the "forward" writes K/V that
depend on every token up to each position (a rolling hash), so two engines
that compute the same prefix hold the same bytes, and a block loaded from the
pool that was wrong would show.

Driven over stdin/stdout, one JSON command per line (see serve()). With
--worker-process the worker side runs in a child process of its own, as
with vLLM's multiprocessing executor: the scheduler's output crosses a pipe.
"""
import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback

import torch

from vllm import SamplingParams
from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                         SchedulerConfig, VllmConfig)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer import kv_transfer_state
from vllm.forward_context import set_forward_context
from vllm.v1.attention.backends.utils import _layout_from_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec,
                                        KVCacheTensor, MLAAttentionSpec, SlidingWindowSpec)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin
from vllm.v1.worker.utils import allocate_kv_cache
from vllm.utils.hashing import get_hash_fn_by_name

EOS = 999
LAYERS, KV_HEADS, HEAD = 2, 2, 16
LAYER_NAMES = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]
# --kv-kind: the KV cache spec vLLM's model would ask for. mha: K and V of
# HEAD each; diffkv: V smaller than K (MiMo-V2 style, head_size_v; vLLM
# runs those on GPU backends only); mla: DeepSeek's one latent vector per
# token, no V (MLAAttentionSpec, one head); swa: layer 0 attends to a
# sliding window of SWA_WINDOW tokens, layer 1 to every token, each in a KV
# cache group of its own (vLLM's hybrid allocator, Gemma-3 style), the two
# overlaying one allocation
KINDS = {"mha": (KV_HEADS, HEAD, HEAD), "diffkv": (KV_HEADS, HEAD, HEAD // 2),
         "mla": (1, 24, 0), "swa": (KV_HEADS, HEAD, HEAD)}
SWA_WINDOW = 32


def write_model(path):
    """A Llama-shaped config.json: the model vLLM's config is built from."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": KV_HEADS * HEAD * 2, "intermediate_size": 128,
                   "num_attention_heads": KV_HEADS * 2, "num_key_value_heads": KV_HEADS,
                   "num_hidden_layers": LAYERS, "head_dim": HEAD, "vocab_size": 1000,
                   "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
                   "torch_dtype": "float16", "eos_token_id": EOS}, f)


def make_config(model, extra, block, algo, policy, kv_events=None, role="kv_both"):
    mc = ModelConfig(model=model, dtype="float16", seed=42, skip_tokenizer_init=True)
    sc = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024, max_model_len=8192,
                         enable_chunked_prefill=True, is_encoder_decoder=False)
    cc = CacheConfig(block_size=block, gpu_memory_utilization=0.9, cache_dtype="auto",
                     enable_prefix_caching=True, prefix_caching_hash_algo=algo)
    cc.kv_cache_layout = "LBNHC"
    kt = KVTransferConfig(kv_connector="KVPoolConnector", kv_connector_module_path="kvpool.vllm",
                          kv_role=role, kv_connector_extra_config=extra,
                          kv_load_failure_policy=policy)
    ev = None
    if kv_events:  # vLLM's own KV events: PUB at kv_events, replay at kv_events-replay
        from vllm.config.kv_events import KVEventsConfig
        ev = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=kv_events,
                            replay_endpoint=kv_events + "-replay", topic="vllm")
    return VllmConfig(scheduler_config=sc, model_config=mc, cache_config=cc,
                      kv_transfer_config=kt, device_config=DeviceConfig("cpu"),
                      kv_events_config=ev)


def make_kv_cache_config(block, num_blocks, kind="mha"):
    heads, k, v = KINDS[kind]
    if kind == "swa":
        full = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=k,
                                 dtype=torch.float16)
        window = SlidingWindowSpec(block_size=block, num_kv_heads=heads, head_size=k,
                                   dtype=torch.float16, sliding_window=SWA_WINDOW)
        page = full.page_size_bytes
        return KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[KVCacheTensor(size=page * num_blocks, layers=[n],
                                            layer_stride=page * num_blocks, block_stride=page)
                              for n in LAYER_NAMES],
            kv_cache_groups=[KVCacheGroupSpec(LAYER_NAMES[:1], window),
                             KVCacheGroupSpec(LAYER_NAMES[1:], full)])
    if kind == "mla":
        # max_tp_shards 1: the latent is whole on every tensor-parallel
        # rank, as vLLM's MLAAttention declares it
        spec = MLAAttentionSpec(block_size=block, num_kv_heads=heads, head_size=k,
                                dtype=torch.float16, max_tp_shards=1)
    else:
        spec = FullAttentionSpec(block_size=block, num_kv_heads=heads, head_size=k,
                                 head_size_v=v, dtype=torch.float16)
    page = spec.page_size_bytes
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=page * num_blocks * LAYERS, layers=LAYER_NAMES,
                                        layer_stride=page * num_blocks, block_stride=page)],
        kv_cache_groups=[KVCacheGroupSpec(LAYER_NAMES, spec)])


def _slow_saves(seconds):
    """Saves off the step start seconds late (a busy disk or pool): a test
    of what must wait for them."""
    from kvpool.vllm.mover import Saver
    from kvpool.vllm.worker import WorkerSide
    Saver.delay = seconds  # each batch of the saving thread without the GIL
    save = WorkerSide._save_off_step  # the Mover's (a hybrid model's)

    def slow(self, jobs):
        time.sleep(seconds)
        return save(self, jobs)
    WorkerSide._save_off_step = slow


def _failing_loads():
    """Every copy into vLLM's blocks fails (a device copy that cannot run):
    a test of what vLLM is told, and asks next."""
    from kvpool.vllm.copier import Copier
    copy = Copier.copy

    def failing(self, client, view, to_pool, pairs, *a, **kw):
        if not to_pool:
            raise ValueError("loads fail in this test")
        return copy(self, client, view, to_pool, pairs, *a, **kw)

    def failing_load(self, *a, **kw):  # the one-call load's copy
        raise ValueError("loads fail in this test")
    Copier.copy = failing
    Copier.load = failing_load


_RAISING = {}  # "Side.method" -> the method it replaced


def _raising(names):
    """Each of the connector's side methods names ("SchedulerSide.x",
    "WorkerSide.y") raises on every call from now on, and those raising
    before that names does not name work again: a bug, or input no check
    foresaw. A test of what the engine does then (KVPoolConnector's
    _hook())."""
    from kvpool.vllm.scheduler import SchedulerSide
    from kvpool.vllm.worker import WorkerSide
    sides = {"SchedulerSide": SchedulerSide, "WorkerSide": WorkerSide}
    for name in [n for n in _RAISING if n not in names]:
        cls, meth = name.split(".")
        setattr(sides[cls], meth, _RAISING.pop(name))
    for name in [n for n in names if n not in _RAISING]:
        cls, meth = name.split(".")

        def raises(self, *a, _name=name, **kw):
            raise RuntimeError("%s raises in this test" % _name)
        _RAISING[name] = getattr(sides[cls], meth)
        setattr(sides[cls], meth, raises)


class Worker(KVConnectorModelRunnerMixin):
    """The worker side: vLLM's connector lifecycle around a forward that
    writes each scheduled token's K/V."""

    def __init__(self, vc, kvc, block, kind="mha"):
        self.vc, self.block = vc, block
        heads, k, v = KINDS[kind]
        self.heads, self.cell = heads, k + v
        # a one-rank distributed setup, as vLLM's worker makes it on start;
        # its file store in the engine's directory, which the test removes
        from vllm.config import set_current_vllm_config
        from vllm.distributed.parallel_state import (ensure_model_parallel_initialized,
                                                     init_distributed_environment)
        init = os.path.join(os.path.dirname(os.path.abspath(vc.model_config.model)),
                            "dist-init")
        with set_current_vllm_config(vc):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method="file://" + init)
            ensure_model_parallel_initialized(1, 1, backend="gloo")
        if os.environ.get("KVPOOL_TEST_FAIL_LOADS"):
            _failing_loads()
        if os.environ.get("KVPOOL_TEST_SLOW_SAVE"):
            _slow_saves(float(os.environ["KVPOOL_TEST_SLOW_SAVE"]))
        kv_transfer_state.ensure_kv_transfer_initialized(vc, kvc)
        self.connector = kv_transfer_state.get_kv_transfer_group()
        assert self.connector.role == KVConnectorRole.WORKER
        self.kv = allocate_kv_cache(kvc, torch.device("cpu"), _layout_from_name("LBNHC"))
        self.connector.register_kv_caches(self.kv)
        self.hash = {}  # req id -> rolling hash of each position
        self.table = {}  # req id -> its vLLM block ids, per KV cache group
        self.group_of = [0, 1] if kind == "swa" else [0] * LAYERS  # each layer's group
        self.hook_steps = 0

    def _values(self, h, layer):
        # [positions, heads, K|V]: a function of the prefix hash and layer
        n = h.shape[0]
        j = torch.arange(self.heads * self.cell, dtype=torch.int64)
        v = (h[:, None] * (layer + 3) + j[None, :] * 7919) % 65521
        return (v.to(torch.float32) / 65521.0 - 0.5).to(torch.float16).view(
            n, self.heads, self.cell)

    def step(self, out, tokens_of):
        """Run one scheduler output; tokens_of(req_id) gives all its tokens."""
        # vLLM frees preempted requests' blocks in this step (gpu_model_runner)
        self.connector.handle_preemptions(out.kv_connector_metadata)
        hooked = False
        with set_forward_context(None, self.vc):
            with self._get_kv_connector_output(out) as kvo:
                sampled = {}
                reqs = [(r.req_id, r.num_computed_tokens, r.block_ids)
                        for r in out.scheduled_new_reqs]
                c = out.scheduled_cached_reqs
                for i, rid in enumerate(c.req_ids):
                    reqs.append((rid, c.num_computed_tokens[i], None))
                for rid, computed, ids in reqs:
                    if ids is not None:
                        self.table[rid] = [list(g) for g in ids]
                    else:
                        new = c.new_block_ids[c.req_ids.index(rid)]
                        if rid in c.resumed_req_ids:
                            self.table[rid] = [list(g) for g in new]
                        elif new is not None:
                            for g, more in enumerate(new):
                                self.table[rid][g] += more
                    n = out.num_scheduled_tokens[rid]
                    toks = tokens_of(rid)
                    hs = self.hash.setdefault(rid, [])
                    del hs[computed:]
                    h = hs[-1] if hs else 1469598103
                    for p in range(len(hs), computed + n):
                        h = (h * 1000003 + toks[p] + 1) % (1 << 61)
                        hs.append(h)
                    pos = torch.arange(computed, computed + n)
                    ht = torch.tensor(hs[computed:computed + n], dtype=torch.int64)
                    off = pos % self.block
                    for layer, name in enumerate(LAYER_NAMES):
                        table = self.table[rid][self.group_of[layer]]
                        ids_t = torch.tensor(table, dtype=torch.int64)[pos // self.block]
                        # as vLLM's attention layers do (maybe_transfer_kv_layer):
                        # the hooks only while the connector says it has metadata
                        if self.connector.has_connector_metadata():
                            hooked = True
                            self.connector.wait_for_layer_load(name)
                        self.kv[name][ids_t, :, off] = self._values(ht, layer)
                    total = len(toks)
                    sampled[rid] = [int(hs[-1] % 900) + 10] if computed + n >= total else []
        self.hook_steps += hooked
        return sampled, kvo

    def stats(self):
        """The connector's counters, and the steps whose attention layers
        ran the connector's hooks."""
        return dict(self.connector.stats(), layer_hook_steps=self.hook_steps)

    def block_bytes(self, rid, nblocks, layers=None):
        """The request's first nblocks blocks: the bytes of every layer (or
        of the layers given), each from its group's block."""
        names = [(i, n) for i, n in enumerate(LAYER_NAMES) if layers is None or i in layers]
        return [b"".join(self.kv[n][self.table[rid][self.group_of[i]][j]].contiguous()
                         .view(torch.uint8).numpy().tobytes() for i, n in names)
                for j in range(nblocks)]


def _worker_main(conn, args):
    """--worker-process: the worker side in its own process."""
    import threading
    vc = make_config(args.model, json.loads(args.extra), args.block, args.algo, args.policy,
                     role=args.role)
    w = Worker(vc, make_kv_cache_config(args.block, args.blocks, args.kv_kind), args.block,
               args.kv_kind)
    tokens = {}
    sending = threading.Lock()  # the connector's thread may send "hung"

    def send(*msg):
        with sending:
            conn.send(msg)
    while True:
        msg = conn.recv()
        if msg[0] == "step":
            out, toks = msg[1], msg[2]
            tokens.update(toks)
            if os.environ.get("KVPOOL_TEST_HANG_LOAD") and out.kv_connector_metadata.loads:
                import kvpool
                def hang(self, pages):  # the test kills this process here, leases held
                    send("hung", os.getpid())
                    time.sleep(3600)

                def hang_load(self, keys, parent, *a, **kw):  # the same in the one-call load
                    self.acquire(keys, parent=parent)
                    hang(self, None)
                kvpool.Client.release = hang
                kvpool.Client.load_blocks = hang_load
            if os.environ.get("KVPOOL_TEST_HANG_SAVE") and out.kv_connector_metadata.saves:
                import kvpool
                def hang_publish(self, *a, **kw):  # killed here, fresh pages held
                    send("hung", os.getpid())
                    time.sleep(3600)

                def hang_save(self, jobs, *a, **kw):  # the same in the one-call save
                    self.alloc(sum(len(j[1]) for j in jobs))
                    hang_publish(self)
                def hang_submit(saver, c, jobs, args):  # the saving thread without the GIL
                    c.alloc(sum(len(j[2]) for j in jobs))  # its batch's fresh pages
                    threading.Thread(target=hang_publish, args=(c,), daemon=True).start()
                from kvpool.vllm.mover import Saver
                kvpool.Client.publish = hang_publish
                kvpool.Client.save_blocks = hang_save
                Saver._submit = hang_submit
            sampled, kvo = w.step(out, lambda r: tokens[r])
            send("ok", sampled, kvo)
        elif msg[0] == "blocks":
            send("ok", w.block_bytes(msg[1], msg[2], msg[3]))
        elif msg[0] == "stats":
            send("ok", w.stats())


class Engine:
    def __init__(self, args):
        self.args = args
        extra = json.loads(args.extra)
        self.vc = make_config(args.model, extra, args.block, args.algo, args.policy,
                              args.kv_events, args.role)
        kvc = make_kv_cache_config(args.block, args.blocks, args.kv_kind)
        self.vc.cache_config.num_gpu_blocks = args.blocks
        self.hash_fn = get_hash_fn_by_name(args.algo)
        # the workers first, as vLLM's executor starts them: they never
        # call init_none_hash()
        self.child = None
        if args.worker_process:
            ctx = mp.get_context("fork")
            self.pipe, theirs = ctx.Pipe()
            self.child = ctx.Process(target=_worker_main, args=(theirs, args), daemon=True)
            self.child.start()
        else:
            self.worker = Worker(self.vc, kvc, args.block, args.kv_kind)
        # in vLLM's order (EngineCore.__init__): the scheduler, and with it
        # the connector, before init_none_hash() seeds the block hashes
        self.sched = Scheduler(vllm_config=self.vc, kv_cache_config=kvc, log_stats=True,
                               structured_output_manager=StructuredOutputManager(self.vc),
                               block_size=args.block)
        init_none_hash(self.hash_fn)
        self.reqs = {}
        self.params = {}  # request -> the kv_transfer_params of its answer
        self.hit_sources = {}  # vLLM's connector hits by source, summed
        self.n = 0

    def add(self, tokens, max_tokens, params=None):
        """A request; params: its kv_transfer_params (as vLLM's API server
        puts a request's into its sampling params)."""
        self.n += 1
        rid = "r%d" % self.n
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                            extra_args={"kv_transfer_params": params} if params else None)
        sp.update_from_generation_config({}, EOS)
        req = Request(request_id=rid, prompt_token_ids=list(tokens), sampling_params=sp,
                      pooling_params=None, mm_features=None,
                      block_hasher=get_request_block_hasher(self.args.block, self.hash_fn))
        self.reqs[rid] = req
        self.sched.add_request(req)
        return rid

    def _worker_step(self, out):
        if self.child is None:
            return self.worker.step(out, lambda r: self.reqs[r].all_token_ids)
        toks = {r: list(self.reqs[r].all_token_ids) for r in out.num_scheduled_tokens}
        self.pipe.send(("step", out, toks))
        while True:
            if not self.pipe.poll(120):
                raise RuntimeError("worker process did not answer")
            msg = self.pipe.recv()
            if msg[0] == "hung":
                return "hung", msg[1]
            return msg[1], msg[2]

    def step(self, out=None):
        out = self.sched.schedule() if out is None else out
        res = self._worker_step(out)
        if res[0] == "hung":
            return res
        sampled, kvo = res
        rids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)},
                                sampled_token_ids=[sampled.get(r, []) for r in rids],
                                logprobs=None, prompt_logprobs_dict={}, pooler_output=None,
                                kv_connector_output=kvo)
        for outs in self.sched.update_from_output(out, mro).values():
            st = getattr(getattr(outs, "scheduler_stats", None), "connector_prefix_cache_stats",
                         None)
            for k, v in (getattr(st, "hits_by_source", None) or {}).items():
                k = str(getattr(k, "value", k))  # vLLM's per-source hits, as its loggers get them
                self.hit_sources[k] = self.hit_sources.get(k, 0) + v
            for o in outs.outputs:  # what the API server's answer carries
                if o.kv_transfer_params is not None:
                    self.params[o.request_id] = o.kv_transfer_params
        return out

    def run(self, prompts, max_tokens, params=None, drain=True, params_each=None):
        """Serve prompts to completion: their outputs, and per request the
        tokens vLLM computed itself and the ones it loaded from kvpool, and
        the kv_transfer_params of its answer. drain False: return once
        they are answered, before the saves of their blocks end.
        params_each: each prompt's params instead of params for all."""
        try:
            rids = [self.add(p, max_tokens, params if params_each is None else params_each[i])
                    for i, p in enumerate(prompts)]
        except Exception as e:  # noqa: BLE001 - vLLM's own check (its API server: 400)
            if type(e).__name__ != "VLLMValidationError":
                raise
            return {"refused": str(e)}
        first = {}
        steps = 0
        while any(not self.reqs[r].is_finished() for r in rids):
            out = self.step()
            if isinstance(out, tuple):
                return {"hung": out[1], "rids": rids}
            for r in out.scheduled_new_reqs:
                first.setdefault(r.req_id, r.num_computed_tokens)
            if not out.total_num_scheduled_tokens:
                time.sleep(0.002)  # waiting for a load off the step
            steps += 1
            if steps > 10000:
                raise RuntimeError("requests did not finish")
        hung = self.drain() if drain else None
        if hung:
            return {"hung": hung[1], "rids": rids}
        return {"rids": rids, "outputs": [list(self.reqs[r].output_token_ids) for r in rids],
                "cached": [first.get(r, 0) for r in rids],
                "preempted": [self.reqs[r].num_preemptions for r in rids],
                "prompt": [len(p) for p in prompts],
                "params": [self.params.get(r) for r in rids]}

    def drain(self, timeout=60):
        """Step while vLLM's engine core would: finished requests whose
        blocks wait for the connector's saves keep it stepping."""
        end = time.monotonic() + timeout
        while self.sched.has_requests():
            out = self.step()
            if isinstance(out, tuple):
                return out
            if not out.total_num_scheduled_tokens:
                time.sleep(0.002)
            if time.monotonic() > end:
                raise RuntimeError("the scheduler still has requests after %d s" % timeout)
        return None

    def blocks(self, rid, n, layers=None):
        if self.child is None:
            return self.worker.block_bytes(rid, n, layers)
        self.pipe.send(("blocks", rid, n, layers))
        return self.pipe.recv()[1]

    def stats(self):
        s = {"scheduler": self.sched.connector.stats()}
        if self.child is None:
            s["worker"] = self.worker.stats()
        else:
            self.pipe.send(("stats",))
            s["worker"] = self.pipe.recv()[1]
        return s


def serve():
    import logging
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # as vllm serve logs
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--extra", default="{}")
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--blocks", type=int, default=512)
    p.add_argument("--algo", default="sha256")
    p.add_argument("--policy", default="recompute")
    p.add_argument("--worker-process", action="store_true")
    p.add_argument("--kv-kind", choices=sorted(KINDS), default="mha")
    p.add_argument("--kv-events", help="vLLM publishes its own KV events on this endpoint")
    p.add_argument("--role", choices=("kv_both", "kv_producer", "kv_consumer"),
                   default="kv_both", help="kv_transfer_config's kv_role")
    args = p.parse_args()
    write_model(args.model)
    eng = Engine(args)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            op = cmd["op"]
            if op == "run":
                r = eng.run(cmd["prompts"], cmd.get("max_tokens", 4), cmd.get("params"),
                            cmd.get("drain", True), cmd.get("params_each"))
            elif op == "blocks":
                r = {"blocks": [b.hex() for b in eng.blocks(cmd["rid"], cmd["n"],
                                                            cmd.get("layers"))]}
            elif op == "stats":
                r = eng.stats()
            elif op == "hit_sources":  # vLLM's connector hits by source, so far
                r = eng.hit_sources
            elif op == "add":
                r = {"rid": eng.add(cmd["tokens"], cmd.get("max_tokens", 4))}
            elif op == "step":
                out = eng.step()
                r = {"hung": out[1]} if isinstance(out, tuple) else {
                    "scheduled": sorted(out.num_scheduled_tokens),
                    "loads": len(out.kv_connector_metadata.loads)}
            elif op == "schedule":  # schedule a step; finish_step runs it
                eng.pending = eng.sched.schedule()
                r = {"loads": len(eng.pending.kv_connector_metadata.loads)}
            elif op == "finish_step":
                eng.step(eng.pending)
                r = {}
            elif op == "abort":
                eng.sched.finish_requests(cmd["rid"], RequestStatus.FINISHED_ABORTED)
                r = {"aborted": cmd["rid"], "left": len(eng.sched.requests)}
            elif op == "drain":  # step until vLLM lets go of every request
                hung = eng.drain()
                r = {"hung": hung[1]} if hung else {}
            elif op == "left":
                bp = eng.sched.kv_cache_manager.block_pool
                r = {"left": len(eng.sched.requests), "free_blocks": bp.get_num_free_blocks(),
                     "blocks": len(bp.blocks) - 1}  # vLLM's null block is never free
            elif op == "raise":  # these connector methods raise from now on
                _raising(cmd["hooks"])
                r = {}
            elif op == "kill_worker":
                os.kill(eng.child.pid, signal.SIGKILL)
                eng.child.join()
                r = {"killed": True}
            elif op == "leases":
                r = {"scheduler": sum(len(l.pages) for l in eng.sched.connector._sched._leases.values())}
            else:
                r = {"error": "unknown op %r" % op}
        except Exception:  # the test shows it
            r = {"error": traceback.format_exc()}
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    serve()
