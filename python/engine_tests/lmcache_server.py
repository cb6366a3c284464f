"""Start LMCache's multiprocess server (`lmcache server`, from the engines
environment) for a test, with one L2 adapter, and read its status.

    s = MPServer.start(l2_adapter={...})
    s.port           # the ZMQ port vLLM's LMCacheMPConnector connects to
    s.status()       # GET /status: LMCache's own view (L1, L2 adapters, counters)
    s.stop()

The server runs on the CPU with the engine-driven transfer mode (the mode
LMCache uses for CPU workers) and a DRAM L1 (256 MiB by default). Readiness is its
"Application startup complete" line (its HTTP server, which starts
after the ZMQ server), read from its output: no sleeps.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request

from engine_tests.common import PYROOT

READY = "Application startup complete"  # uvicorn's line: the HTTP status API is up, after the ZMQ server
# LMCache's prefetch controller logs each request's hits at DEBUG level.
PREFETCH = re.compile(r"Prefetch request \d+ completed: (\d+) hit cells \((\d+) from L1, (\d+) from L2\)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lmcache_cli():
    return os.path.join(os.path.dirname(sys.executable), "lmcache")


def transfer_config(port):
    """vLLM's kv_transfer_config for LMCache's multiprocess connector."""
    return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": port,
                                          "lmcache.mp.mq_timeout": 60}}


class MPServer:
    def __init__(self, proc, port, http_port, workdir, log_path, pump):
        self.proc, self.port, self.http_port = proc, port, http_port
        self.workdir, self.log_path, self.pump = workdir, log_path, pump

    @classmethod
    def start(cls, l2_adapter, chunk_size=256, l1_gb=0.25, timeout=300.0):
        workdir = tempfile.mkdtemp(prefix="lmcache-mp-")
        port, http_port = free_port(), free_port()
        args = [lmcache_cli(), "server", "--host", "127.0.0.1", "--port", str(port), "--http-host", "127.0.0.1",
                "--http-port", str(http_port), "--l1-size-gb", str(l1_gb), "--eviction-policy", "LRU",
                "--chunk-size", str(chunk_size), "--disable-observability",
                "--supported-transfer-mode", "engine_driven", "--l2-adapter", json.dumps(l2_adapter)]
        env = dict(os.environ, PYTHONPATH=PYROOT, LMCACHE_TRACK_USAGE="false", LMCACHE_DISABLE_BANNER="1",
                   HF_HUB_OFFLINE="1", LMCACHE_LOG_LEVEL="DEBUG")
        log_path = os.path.join(workdir, "lmcache.log")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        ready = threading.Event()
        log = open(log_path, "wb")

        def pump():  # read to the end so the server never blocks on a full pipe
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if READY.encode() in line:
                    ready.set()
            log.close()
            ready.set()
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        s = cls(proc, port, http_port, workdir, log_path, t)
        if not ready.wait(timeout) or proc.poll() is not None:
            s.stop()
            raise RuntimeError("lmcache server did not start:\n" + s.log()[-4000:])
        return s

    def status(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % self.http_port, timeout=30) as r:
            return json.load(r)

    def l2_status(self):
        """The status of the server's one L2 adapter."""
        return self.status()["storage_manager"]["l2_adapters"][0]

    def prefetch_hits(self):
        """LMCache's own count of chunk hits, summed over its prefetch
        requests: {"hits", "l1", "l2"} (from its DEBUG log)."""
        out = {"hits": 0, "l1": 0, "l2": 0}
        for m in PREFETCH.finditer(self.log()):
            out["hits"] += int(m.group(1))
            out["l1"] += int(m.group(2))
            out["l2"] += int(m.group(3))
        return out

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        from gpucached import stop_process
        stop_process(self.proc, 30)
        self.pump.join(10)
        self.proc.stdout.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
