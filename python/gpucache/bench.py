"""GET/PUT throughput of the Python client against one gpucached.

    /usr/bin/python3 -m gpucache.bench --addr 127.0.0.1:9400 --size 1MiB --threads 1,8 --duration 5

Each thread has its own connection (pool_size = threads) and reads one
block per GET into its own preallocated buffer (get_into, zero-copy), like
`gpucache-bench bench --op get --batch 1`, which bench/py-vs-go.sh runs beside it.
"""

import argparse
import json
import os
import sys
import threading
import time

from .client import Client
from .identity import Layout, Namespace, identities

_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}


def parse_size(s: str) -> int:
    for u, m in _UNITS.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * m)
    return int(s)


def run(addr, size, threads, duration, keys=64, tenant="default", secret=b"", batch=1):
    ns = Namespace(tenant=tenant, trust_domain="local", model_id="pybench", config_revision="main",
                   tokenizer_revision="main", rope="default", dtype="bytes",
                   layout=Layout("raw", block_tokens=1))
    c = Client([addr], tenant=tenant, secret=secret, timeout=10.0, pool_size=max(threads, 1))
    ids = identities(ns, list(range(size % 100000, size % 100000 + keys)))
    blob = os.urandom(size)
    st = c.put(ns, [(i, blob) for i in ids])
    if sum(1 for s in st if s in (2, 3)) != keys:
        raise SystemExit("gpucache/bench: could not store the working set: %s" % st)
    kk = [i.key() for i in ids]
    stop = threading.Event()
    counts = [0] * threads
    misses = [0] * threads
    go = threading.Barrier(threads + 1)

    def worker(t):
        bufs = [bytearray(size) for _ in range(batch)]
        j = t
        go.wait()
        while not stop.is_set():
            sel = [kk[(j + b) % keys] for b in range(batch)]
            j += batch
            for r in c.get_into(ns, sel, bufs):
                if r.hit:
                    counts[t] += 1
                else:
                    misses[t] += 1
    ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ths:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    stop.wait(duration)
    stop.set()
    for t in ths:
        t.join()
    el = time.perf_counter() - t0
    c.close()
    n = sum(counts)
    return {"op": "get", "size": size, "threads": threads, "batch": batch, "seconds": el, "blocks": n,
            "misses": sum(misses), "gb_per_s": n * size / el / 1e9, "ops_per_s": n / el}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gpucache.bench")
    ap.add_argument("--addr", default=os.environ.get("GPUCACHE_ADDR", "127.0.0.1:9400"))
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--threads", default="1,8")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--keys", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tenant", default="default")
    ap.add_argument("--secret-file", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    secret = b""
    if a.secret_file:
        with open(a.secret_file, "rb") as f:
            secret = f.read().strip()
    out = []
    for th in [int(x) for x in a.threads.split(",")]:
        r = run(a.addr, parse_size(a.size), th, a.duration, a.keys, a.tenant, secret, a.batch)
        out.append(r)
        print("python get size=%s threads=%d: %.3f GB/s, %.0f ops/s, %d misses" % (
            a.size, th, r["gb_per_s"], r["ops_per_s"], r["misses"]))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
