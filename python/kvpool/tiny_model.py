# SPDX-License-Identifier: MIT
"""A small model made on this machine, for trying an engine with kvpool
where no model hub is reachable: random weights (seeded), a word-level
tokenizer, written as a Hugging Face model directory (config.json,
model.safetensors, tokenizer.json) that `vllm serve DIR` loads.

    python -m kvpool.tiny_model tiny-llama                 # a Llama
    python -m kvpool.tiny_model tiny-mla --arch deepseek_v2

The default is a Llama of 4 layers, 4 query heads and 2 KV heads of 64,
bf16: K and V of one token take 2 KiB, a page of 32 tokens 64 KiB. Its
vocabulary is 4,096 tokens: four special ones and the words "w0" ..
"w4091", one token each, so a prompt of N words is N tokens (and the
beginning-of-sequence token). It answers noise, deterministically: what
it shows is the engine and the cache, not the model.

It runs in the engine's environment: it needs torch, transformers and
tokenizers, which vLLM brings; importing this module needs only the
standard library.
"""
import argparse
import importlib.util
import json
import os
import sys
from typing import List, Optional

# The Llama's shape.
MODEL_SHAPE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=4096)
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
WORDS = MODEL_SHAPE["vocab_size"] - len(SPECIAL)

# DeepSeek-V2-Lite's attention, small: MLA with a latent of 512 and a
# rotary part of 64 (one 576-element vector per token and layer, no V), no
# query compression, every layer dense (no experts).
MLA_SHAPE = dict(kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=32,
                 qk_rope_head_dim=64, v_head_dim=32, num_key_value_heads=4,
                 first_k_dense_replace=MODEL_SHAPE["num_hidden_layers"], n_routed_experts=4,
                 n_shared_experts=1, moe_intermediate_size=128, num_experts_per_tok=2)

# Qwen3-Next's layers, small: three of Gated DeltaNet (linear attention, a
# recurrent state per request: vLLM's MambaSpec) to one of full attention,
# a few experts. vLLM's CPU kernel for the state takes heads of 128.
GDN_SHAPE = dict(layer_types=["linear_attention"] * 3 + ["full_attention"], head_dim=64,
                 linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=2,
                 linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=128, shared_expert_intermediate_size=128)

ARCHS = ("llama", "deepseek_v2", "qwen3_next")


def make_model(path: str, seed: int = 0, arch: str = "llama", **shape) -> str:
    """A Llama (arch "llama"), a DeepSeek-V2 (arch "deepseek_v2", MLA) or a
    Qwen3-Next (arch "qwen3_next", linear attention beside full attention)
    with random weights drawn from seed, in path; shape: config fields to
    change (such as sliding_window). Returns path."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, LlamaConfig,
                              LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3NextConfig,
                              Qwen3NextForCausalLM)

    if arch not in ARCHS:
        raise ValueError("tiny_model: no architecture %r: take one of %s"
                         % (arch, ", ".join(ARCHS)))
    config, model, extra = {
        "llama": (LlamaConfig, LlamaForCausalLM, {}),
        "deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM, MLA_SHAPE),
        "qwen3_next": (Qwen3NextConfig, Qwen3NextForCausalLM, GDN_SHAPE)}[arch]
    s = dict(MODEL_SHAPE, **extra, **shape)
    os.makedirs(path, exist_ok=True)
    torch.manual_seed(seed)
    cfg = config(max_position_embeddings=8192, bos_token_id=1, eos_token_id=2,
                 pad_token_id=0, tie_word_embeddings=False, torch_dtype="bfloat16", **s)
    model(cfg).to(torch.bfloat16).save_pretrained(path)
    vocab = {w: i for i, w in enumerate(SPECIAL)}
    vocab.update(("w%d" % i, len(SPECIAL) + i) for i in range(s["vocab_size"] - len(SPECIAL)))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>", pad_token="<pad>").save_pretrained(path)
    return path


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvpool.tiny_model",
                                 description="Write a small model with random weights into DIR.")
    ap.add_argument("dir", help="the model directory to write (vllm serve DIR)")
    ap.add_argument("--arch", default="llama", choices=ARCHS,
                    help="llama (default), deepseek_v2 (MLA) or qwen3_next (linear attention)")
    ap.add_argument("--seed", type=int, default=0, help="of the weights (default 0)")
    ap.add_argument("--shape", default="{}", metavar="JSON",
                    help='config fields to change, such as \'{"sliding_window": 256}\'')
    a = ap.parse_args(argv)
    try:
        shape = json.loads(a.shape)
        if not isinstance(shape, dict):
            raise ValueError("not an object")
    except ValueError as e:
        ap.error("--shape %r is not a JSON object of config fields (%s)" % (a.shape, e))
    missing = [m for m in ("torch", "transformers", "tokenizers")
               if importlib.util.find_spec(m) is None]
    if missing:
        print("tiny_model: this Python (%s) has no %s: run it in the engine's environment "
              "(vLLM brings them)" % (sys.executable, ", ".join(missing)), file=sys.stderr)
        return 1
    make_model(a.dir, a.seed, a.arch, **shape)
    print(os.path.abspath(a.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
