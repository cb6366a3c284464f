"""bench/local_pages.py: the SGLang backend's batch_get_v1 of PAGES pages of
256 KiB into a torch CPU tensor (the demo's MHA page_first host pool: K and
V of 16 tokens x 16 layers x 2 KV heads x 64 dims, fp32, 128 KiB each),
for bench/local-compare.sh.

--memory private keeps the pool in ordinary (private) memory: its pages
go through the socket, TCP or Unix. --memory shm puts the pool in a
memfd from gpucache.shm.allocate, so with a unix: address the backend
registers it and batch_get_v1 reads with GET_INTO (the server copies each
page once, slab to pool). The pages are written once with batch_set_v1,
then read back with batch_get_v1 for --duration seconds; every call is
timed. The first and the last read are checked byte for byte (after
zeroing the pool), outside the timing. Prints one JSON object:

    {"memory", "addr", "pages", "page_bytes", "calls", "seconds",
     "gb_per_s", "p50_ms", "p99_ms", "region_note", "region_stats"}

gb_per_s is the bytes of all timed calls over their summed time. With
--profile FILE the timed calls run under cProfile (slower: the figures of
such a run are not the benchmark's) and FILE gets the top 30 functions by
own time.
"""

import argparse
import cProfile
import io
import json
import logging
import pstats
import sys
import time

import torch

from gpucache.demo.bench_pages import store_pages
from gpucache.demo.engine import StorageConfig
from gpucache.demo.model import HostPool, ModelConfig
from gpucache.sglang import GpucacheStorage


def quantile(xs, q):
    """The q-quantile of xs (nearest rank)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * len(s) + 0.5) - 1))]


def run(addr, memory, pages, duration, tenant, profile=""):
    cfg = ModelConfig(layers=16)  # 16 tokens x 16 layers x 2 heads x 64 x 4 B = 128 KiB each of K, V
    pool = HostPool(cfg, pages * cfg.page_size)
    shm_buf = None
    if memory == "shm":
        import gpucache.shm

        kv = pool.kv_buffer
        shm_buf = gpucache.shm.allocate(kv.numel() * kv.element_size())
        pool.kv_buffer = shm_buf.tensor().view(kv.dtype).view(kv.shape)
        del kv
    extra = {"interface_v1": 1, "addrs": [addr], "tenant": tenant, "model_revision": cfg.revision, "timeout": 30.0}
    st = GpucacheStorage(StorageConfig(model_name=cfg.name, extra_config=extra), extra)
    st.register_mem_pool_host(pool)
    try:
        keys, indices, want, page_bytes = store_pages(st, pool, cfg, pages, "local_pages")

        def checked_read(what):
            pool.kv_buffer.zero_()
            ok = st.batch_get_v1(keys, indices)
            if not all(ok) or not torch.equal(pool.kv_buffer, want):
                raise SystemExit("local_pages: %s batch_get_v1 missed or returned other bytes" % what)

        checked_read("the first")
        prof = cProfile.Profile() if profile else None
        secs = []
        end = time.perf_counter() + duration
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            if prof is not None:
                prof.enable()
            ok = st.batch_get_v1(keys, indices)
            if prof is not None:
                prof.disable()
            secs.append(time.perf_counter() - t0)
            if not all(ok):
                raise SystemExit("local_pages: batch_get_v1 missed %d of %d pages" % (len(ok) - sum(ok), len(ok)))
        checked_read("the last")
        if prof is not None:
            out = io.StringIO()
            out.write("cProfile of %d batch_get_v1 calls (%d pages of %d bytes, %s memory, %s)\n" % (
                len(secs), pages, 2 * cfg.page_size * cfg.layers * cfg.kv_heads * cfg.head_dim * 4, memory, addr))
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
            with open(profile, "w") as f:
                f.write(out.getvalue())
        stats = {}
        rs = getattr(st._client, "region_stats", None)
        if rs is not None:
            stats = rs()
        total = sum(secs)
        return {"memory": memory, "addr": addr, "pages": pages, "page_bytes": page_bytes, "calls": len(secs),
                "seconds": total, "gb_per_s": len(secs) * pages * page_bytes / total / 1e9,
                "p50_ms": quantile(secs, 0.5) * 1e3, "p99_ms": quantile(secs, 0.99) * 1e3,
                "region_note": getattr(st, "region_note", ""), "region_stats": stats}
    finally:
        st.close()
        if shm_buf is not None:
            del pool
            try:
                shm_buf.close()
            except BufferError:  # a view is still alive; the process ends anyway
                pass


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/local_pages.py")
    ap.add_argument("--addr", required=True, help="host:port or unix:/path")
    ap.add_argument("--memory", choices=("private", "shm"), default="private")
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--tenant", default="default")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", default="", help="run the timed calls under cProfile; write its top 30 here")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    res = run(a.addr, a.memory, a.pages, a.duration, a.tenant, a.profile)
    out = json.dumps(res, indent=2, sort_keys=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(out + "\n")
    print(out)


if __name__ == "__main__":
    main()
