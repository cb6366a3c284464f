#!/usr/bin/env python3
"""Dump real attention KV from the demo model as fp16 and bf16 files.

Runs gpucache.demo.model.TinyDecoder (a Llama-shaped decoder in plain torch,
seeded weights, nothing downloaded) over a prompt, takes the KV cache it
computes (K after RoPE, V) and writes it in the SGLang "page_first" host
pool layout the cold tier stores: per page of PAGE tokens, the K of all
layers, then the V of all layers. One file per dtype:

    OUT/kv-fp16.bin   OUT/kv-bf16.bin   OUT/kv-meta.json

The Go benchmark in internal/cold/crypt (BenchmarkKV*) reads them through
GPUCACHE_KV_DIR=OUT. The data are not committed; this script is.

    python3 scripts/kv-dump.py --out /tmp/kv [--tokens 4096] [--layers 16]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

from gpucache.demo.model import ModelConfig, TinyDecoder  # noqa: E402


def pages(kv, page, dtype):
    """Returns the KV as page_first bytes: per page, K of all layers, then V."""
    k = torch.stack([layer[0] for layer in kv])  # [layers, kv_heads, T, D]
    v = torch.stack([layer[1] for layer in kv])
    t = k.shape[2]
    out = []
    for s in range(0, t - t % page, page):
        # [layers, kv_heads, page, D] -> [page, layers, kv_heads, D] as the host pool holds it
        for x in (k, v):
            out.append(x[:, :, s : s + page].permute(2, 0, 1, 3).contiguous().to(dtype))
    return torch.cat([o.reshape(-1) for o in out])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cfg = ModelConfig(layers=a.layers)
    model = TinyDecoder(cfg)
    g = torch.Generator().manual_seed(a.seed)
    # A prompt with the repetition real prompts have: a shared system
    # prompt, then turns drawn from a small working vocabulary.
    system = torch.randint(0, cfg.vocab, (256,), generator=g).tolist()
    words = torch.randint(0, cfg.vocab, (200,), generator=g)
    body = words[torch.randint(0, len(words), (a.tokens - len(system),), generator=g)].tolist()
    _, kv = model.prefill(system + body)
    os.makedirs(a.out, exist_ok=True)
    meta = {"model": cfg.model_id, "tokens": a.tokens, "layers": cfg.layers, "kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim, "page_tokens": cfg.page_size, "layout": "page_first K-then-V",
            "torch": torch.__version__}
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        flat = pages(kv, cfg.page_size, dt)
        raw = flat.view(torch.int16).numpy().tobytes() if hasattr(flat, "numpy") else bytes(flat.untyped_storage())
        with open(os.path.join(a.out, f"kv-{name}.bin"), "wb") as f:
            f.write(raw)
        meta[f"{name}_bytes"] = len(raw)
    meta["page_bytes_per_dtype"] = 2 * cfg.page_size * cfg.layers * cfg.kv_heads * cfg.head_dim * 2
    with open(os.path.join(a.out, "kv-meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
