"""Run client calls against a server in a fresh process and print, as one
JSON line, what each returned, how long it took and how far the process's
resident memory rose: test_core_untrusted.py measures the client this way,
so the figure is the client's alone, not the test runner's or its fake
server's.

    python3 untrusted_probe.py '{"addrs": [...], "timeout": 1.0, "calls": ["get"], ...}'

Spec keys: addrs, timeout, calls (each "get", "get_into", "stat" or
"put"), nkeys (1), buf (bytes per get_into buffer, 4096, or a list of
sizes, one a key), put_size, max_frame and cluster (passed to Client when
present). bufs in the report describes each get_into buffer after the calls
as runs of equal bytes: [[byte, count], ...].

Memory: rss_start_kib is VmRSS after imports, the client and every buffer
exist; hwm_end_kib is VmHWM (the peak) after the calls. Their difference
bounds from above what the calls added at their peak.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpucache import Client, ConnectionFailed, Layout, Namespace, ProtocolError, chain, identities  # noqa: E402

NS = Namespace("acme", "test", "m", "1", "1", layout=Layout("flat", block_tokens=4))
FILL = 0xAA  # what every get_into buffer holds before the calls


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/self/status" % field)


def runs(b: bytearray):
    """b as runs of equal bytes: [[byte, count], ...]."""
    out = []
    for x in bytes(b):
        if out and out[-1][0] == x:
            out[-1][1] += 1
        else:
            out.append([x, 1])
    return out


def main():
    spec = json.loads(sys.argv[1])
    n = spec.get("nkeys", 1)
    keys = chain(NS, list(range(4 * n)))
    kw = {k: spec[k] for k in ("max_frame", "cluster") if k in spec}
    c = Client(spec["addrs"], tenant="acme", timeout=spec["timeout"], pool_size=2, **kw)
    sizes = spec.get("buf", 4096)
    sizes = sizes if isinstance(sizes, list) else [sizes] * n
    bufs = [bytearray([FILL]) * size for size in sizes]
    payload = bytes(spec.get("put_size", 0))
    ids = identities(NS, list(range(4)))
    results, elapsed = [], []
    start = status_kib("VmRSS")
    for call in spec["calls"]:
        t0 = time.monotonic()
        if call == "get":
            r = [x is not None for x in c.get(NS, keys)]
        elif call == "get_into":
            r = [[x.hit, x.reason] for x in c.get_into(NS, keys, bufs)]
        elif call == "stat":
            try:
                c.stat()
                r = "ok"
            except ConnectionFailed as e:
                r = e.reason
            except ProtocolError as e:
                r = "protocol %s" % e.code
        elif call == "put":
            r = [int(s) for s in c.put(NS, [(ids[0], payload)])]
        else:
            raise ValueError("unknown call %r" % call)
        elapsed.append(time.monotonic() - t0)
        results.append(r)
    hwm = status_kib("VmHWM")
    c.close()
    print(json.dumps({"results": results, "elapsed": elapsed, "rss_start_kib": start, "hwm_end_kib": hwm,
                      "bufs": [runs(b) for b in bufs]}))


if __name__ == "__main__":
    main()
