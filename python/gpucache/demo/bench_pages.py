"""python -m gpucache.demo.bench_pages: batch_get_v1 throughput of the SGLang
backend: N pages of 256 KiB (MHA page_first: K and V of
16 layers x 2 KV heads x 64 dims x 16 tokens, fp32, 128 KiB each) written
once with batch_set_v1, then read back into the host pool with batch_get_v1
REPS times; prints the median GB/s. Used by bench/py-vs-go.sh against the
same gpucached as the client comparison.
"""

import argparse
import json
import statistics
import sys
import time

from gpucache.demo import exit_without_torch, require_torch

torch = exit_without_torch("python -m gpucache.demo.bench_pages") if __name__ == "__main__" else require_torch()

from gpucache.demo.engine import StorageConfig, page_hash
from gpucache.demo.model import HostPool, ModelConfig
from gpucache.sglang import GpucacheStorage


def store_pages(st, pool, cfg, pages, who):
    """Fill pool with seeded random KV, store its first pages pages through
    st (batch_set_v1), and return (keys, indices, a copy of the pool,
    bytes per page); who names the caller in the error."""
    g = torch.Generator().manual_seed(7)
    pool.kv_buffer.copy_(torch.rand(pool.kv_buffer.shape, generator=g))
    want = pool.kv_buffer.clone()
    keys, prior = [], None
    for p in range(pages):
        prior = page_hash(range(p * cfg.page_size, (p + 1) * cfg.page_size), prior)
        keys.append(prior)
    indices = torch.arange(pages * cfg.page_size, dtype=torch.int64)
    if not all(st.batch_set_v1(keys, indices)):
        raise SystemExit(who + ": batch_set_v1 did not store every page (hot tier too small?)")
    page_bytes = 2 * cfg.page_size * cfg.layers * cfg.kv_heads * cfg.head_dim * 4
    return keys, indices, want, page_bytes


def run(addr, pages=128, reps=10, tenant="default"):
    cfg = ModelConfig(layers=16)  # 16 tokens x 16 layers x 2 heads x 64 x 4 B = 128 KiB each of K, V
    pool = HostPool(cfg, pages * cfg.page_size)
    extra = {"interface_v1": 1, "addrs": [addr], "tenant": tenant, "model_revision": cfg.revision}
    st = GpucacheStorage(StorageConfig(model_name=cfg.name, extra_config=extra), extra)
    st.register_mem_pool_host(pool)
    try:
        keys, indices, want, page_bytes = store_pages(st, pool, cfg, pages, "gpucache/demo")
        secs = []
        for _ in range(reps):
            pool.kv_buffer.zero_()
            t0 = time.perf_counter()
            ok = st.batch_get_v1(keys, indices)
            secs.append(time.perf_counter() - t0)
            if not all(ok) or not torch.equal(pool.kv_buffer, want):
                raise SystemExit("gpucache/demo: batch_get_v1 missed or returned other bytes")
        med = statistics.median(secs)
        return {"pages": pages, "page_bytes": page_bytes, "reps": reps, "median_ms": med * 1e3,
                "gb_per_s": pages * page_bytes / med / 1e9}
    finally:
        st.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gpucache.demo.bench_pages")
    ap.add_argument("--addr", default="127.0.0.1:9400")
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    r = run(a.addr, a.pages, a.reps)
    print("batch_get_v1: %d pages of %d KiB, median %.2f ms, %.2f GB/s" % (r["pages"], r["page_bytes"] >> 10, r["median_ms"], r["gb_per_s"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
