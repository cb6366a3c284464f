"""TTFT of the real vLLM engine with and without gpucache (bench/engine-ttft.sh).

    python -m gpucache.bench_engine run --model DIR --addr HOST:PORT \
        --lengths 512,2048,8192 --reps 5 --dir RUNDIR
    python -m gpucache.bench_engine report --dir RUNDIR --out-md REPORT.md --out-csv RUNS.csv

``run`` starts three vLLM engines (each ``serve``: one process with the
offline ``LLM`` class, vLLM's own prefix caching off) and has each serve, for
each prompt length, one warm-up prompt and then ``reps`` measured prompts,
one request at a time with ``max_tokens=1``. Prompts are seeded random
token ids, the same in every mode. Modes:

- ``recompute``: no connector; every prompt is computed.
- ``save``: the connector against an empty gpucached; every prompt is a
  miss, computed and saved (its TTFT includes the lookup and the save).
- ``reuse``: the connector in a fresh engine process after ``save``; every
  prompt's full blocks are loaded from gpucached (asserted: the connector's
  ``tokens_loaded`` for the request must be every full block but the one
  holding the last token, with no load failure).

``save`` runs first, alone; then ``recompute`` and ``reuse`` are started
and kept alive together, and their requests alternate (ABBA, a pause before
each so the idle engine stops polling): the pair of each repetition ran
under the same machine load, which on a shared VM moves more than the
difference between repetitions.

TTFT is vLLM's own ``RequestOutput.metrics.first_token_latency`` (from the
request's arrival at the engine's front end to its first token); the wall
time of ``generate`` is kept beside it. The connector's counters are read
from its stats file before and after each request, so bytes and load time
are per request.

``report`` reads the three runs, checks them, and writes the medians per
length and mode, the ratio recompute / reuse and the load rate
(``bytes_loaded / load_ns``), plus every repetition as CSV.

Runs only in the engines environment (vLLM, torch); the gpucache package's
``__init__`` never imports it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

BLOCK = 32  # vLLM's CPU attention takes block sizes that are multiples of 32
MODES = ("recompute", "save", "reuse")
# LMCache (multiprocess mode, one LMCache server per engine) with gpucache as
# its L2, through LMCache's own RESP client or through gpucache.lmcache.
LMC_MODES = ("lmc-resp-save", "lmc-resp", "lmc-plugin-save", "lmc-plugin")
LMC_CHUNK = 256


def prompt_ids(seed: int, length: int, index: int) -> List[int]:
    """The index-th prompt of `length` seeded random byte token ids (0 is the
    warm-up prompt); the same in every mode and every run with this seed."""
    rng = random.Random("%d/%d/%d" % (seed, length, index))
    return [rng.randrange(0, 256) for _ in range(length)]


def read_stats(path: str) -> Dict[str, int]:
    """The sum of the counters of every process of one engine (the
    connector's <stats_file>.scheduler0 and .worker<rank> files)."""
    total: Dict[str, int] = {}
    d, base = os.path.dirname(path) or ".", os.path.basename(path)
    for name in sorted(os.listdir(d)):
        if name.startswith(base + ".") and not name.endswith(".tmp"):
            try:
                with open(os.path.join(d, name)) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            for k, v in data.items():
                total[k] = total.get(k, 0) + int(v)
    return total


def serve(a: argparse.Namespace) -> int:
    """One engine: print READY, then serve one request per stdin line
    ({"length": L, "index": i}), answering each with a ROW line (JSON)."""
    from vllm import LLM, SamplingParams  # type: ignore

    lengths = [int(x) for x in a.lengths.split(",")]
    max_len = (max(lengths) // BLOCK + 2) * BLOCK  # the longest prompt, its first token, and room
    kw: Dict[str, Any] = dict(model=a.model, enforce_eager=True, dtype="bfloat16", seed=0, block_size=BLOCK,
                              max_model_len=max_len, max_num_batched_tokens=max_len, max_num_seqs=1,
                              enable_prefix_caching=False, kv_cache_memory_bytes=a.kv_cache_bytes,
                              disable_log_stats=False)
    if a.mode.startswith("lmc-"):
        kw["kv_transfer_config"] = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                                    "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                                                  "lmcache.mp.port": a.lmcache_port}}
    elif a.mode != "recompute":
        extra = {"addrs": a.addr, "tenant": "default", "timeout": a.timeout, "stats_file": a.stats}
        kw["kv_transfer_config"] = {"kv_connector": "GpucacheConnector",
                                    "kv_connector_module_path": "gpucache.vllm_connector",
                                    "kv_role": "kv_both", "kv_connector_extra_config": extra}
    t0 = time.perf_counter()
    llm = LLM(**kw)
    print("READY " + json.dumps({"engine_start_s": time.perf_counter() - t0}), flush=True)
    sp = SamplingParams(temperature=0, max_tokens=1)
    for line in sys.stdin:
        req = json.loads(line)
        length, i = int(req["length"]), int(req["index"])
        connector = a.mode in ("save", "reuse")
        before = read_stats(a.stats) if connector else {}
        t = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": prompt_ids(a.seed, length, i)}], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        after = read_stats(a.stats) if connector else {}
        m = getattr(out[0], "metrics", None)
        ftl = float(getattr(m, "first_token_latency", 0.0) or 0.0)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
        row = {"mode": a.mode, "length": length, "rep": i, "warmup": i == 0,
               "ttft_s": ftl if ftl > 0 else wall, "ttft_source": "vllm" if ftl > 0 else "wall",
               "generate_wall_s": wall, "first_token": list(out[0].outputs[0].token_ids)[:1],
               "cached_tokens": int(getattr(out[0], "num_cached_tokens", 0) or 0),
               "loadavg": _loadavg(), "counters": {k: v for k, v in sorted(delta.items()) if v}}
        print("ROW " + json.dumps(row), flush=True)
    return 0


class _Engine:
    """An engine process in `serve` mode, driven over its stdin and stdout."""

    def __init__(self, a: argparse.Namespace, mode: str, lmcache_port: int = 0) -> None:
        self.mode = mode
        args = [sys.executable, "-m", "gpucache.bench_engine", "serve", "--mode", mode, "--model", a.model,
                "--lengths", a.lengths, "--seed", str(a.seed), "--kv-cache-bytes", str(a.kv_cache_bytes),
                "--timeout", str(a.timeout)]
        if mode.startswith("lmc-"):
            args += ["--lmcache-port", str(lmcache_port)]
        elif mode != "recompute":
            args += ["--addr", a.addr, "--stats", os.path.join(a.dir, "stats-%s" % mode)]
        self.log = open(os.path.join(a.dir, "logs", "%s.log" % mode), "w")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1)
        self.rows: List[Dict[str, Any]] = []
        ready = self._expect("READY ")
        self.start_s = ready["engine_start_s"]
        _say("%s: engine started in %.0f s (load average %s)" % (mode, self.start_s, _loadavg()))

    def _expect(self, prefix: str) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
            self.log.write(line)
            self.log.flush()
        raise RuntimeError("%s engine exited (rc %s) before %s: see %s" % (
            self.mode, self.proc.wait(), prefix.strip(), self.log.name))

    def ask(self, length: int, index: int) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"length": length, "index": index}) + "\n")
        self.proc.stdin.flush()
        row = self._expect("ROW ")
        self.rows.append(row)
        _say("%-9s len %5d rep %d%s: TTFT %.3f s (%s), wall %.3f s %s" % (
            self.mode, length, index, " (warm-up)" if index == 0 else "", row["ttft_s"], row["ttft_source"],
            row["generate_wall_s"], json.dumps(row["counters"], sort_keys=True) if row["counters"] else ""))
        return row

    def close(self, out_dir: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        with open(os.path.join(out_dir, "%s.json" % self.mode), "w") as f:
            json.dump({"mode": self.mode, "engine_start_s": self.start_s, "loadavg": _loadavg(),
                       "rows": self.rows}, f, indent=1)


def _say(msg: str) -> None:
    print("[engine-ttft %s] %s" % (time.strftime("%H:%M:%S", time.gmtime()), msg), flush=True)


def _lmcache_adapters(a: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    """The L2 adapter of each LMCache path: LMCache's RESP client to
    gpucached's RESP endpoint, and gpucache.lmcache's native adapter."""
    host, port = a.lmcache_resp.rsplit(":", 1)
    return {"resp": {"type": "resp", "host": host, "port": int(port)},
            "plugin": {"type": "plugin", "module_path": "gpucache.lmcache", "class_name": "GpucacheL2Adapter",
                       "adapter_params": {"addrs": a.addr, "tenant": "default", "dtype": "bfloat16",
                                          "chunk_tokens": LMC_CHUNK, "timeout": a.timeout}}}


def _mp_server(adapter: Dict[str, Any]):
    """A fresh LMCache multiprocess server (engine_tests/lmcache_server.py)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if here not in sys.path:
        sys.path.insert(0, here)
    from engine_tests.lmcache_server import MPServer  # type: ignore
    return MPServer.start(adapter, chunk_size=LMC_CHUNK, l1_gb=1.0)


def run(a: argparse.Namespace) -> int:
    """The engines: the saving ones first, each alone (gpucache's connector,
    then LMCache through each adapter, each LMCache engine with its own
    LMCache server); then recompute, reuse and the LMCache reuse engines
    (each with a fresh LMCache server: an empty L1, so every hit comes from
    gpucache) alive together, their requests taking turns."""
    os.makedirs(os.path.join(a.dir, "logs"), exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that finally stops the engines
    lengths = [int(x) for x in a.lengths.split(",")]
    engines: List[_Engine] = []
    servers: List[Any] = []
    adapters = _lmcache_adapters(a) if a.lmcache_resp else {}
    try:
        saves = [("save", 0)]
        for name, adapter in adapters.items():
            servers.append(_mp_server(adapter))
            saves.append(("lmc-%s-save" % name, servers[-1].port))
        for mode, port in saves:
            save = _Engine(a, mode, port)
            engines.append(save)
            for length in lengths:
                for i in range(a.reps + 1):
                    save.ask(length, i)
            save.close(a.dir)
            engines.remove(save)
        measured = [_Engine(a, "recompute")]
        engines.extend(measured)
        measured.append(_Engine(a, "reuse"))
        engines.append(measured[-1])
        for name, adapter in adapters.items():
            servers.append(_mp_server(adapter))
            measured.append(_Engine(a, "lmc-%s" % name, servers[-1].port))
            engines.append(measured[-1])
        for length in lengths:
            for i in range(a.reps + 1):
                # Which engine goes first rotates with the repetition; the
                # pause lets the others' workers stop busy-polling (vLLM
                # polls 1 s after its last message before it sleeps).
                k = i % len(measured)
                for e in measured[k:] + measured[:k]:
                    time.sleep(a.pause)
                    e.ask(length, i)
        for e in measured:
            e.close(a.dir)
        engines.clear()
    finally:
        for e in engines:
            if e.proc.poll() is None:
                e.proc.kill()
                e.proc.wait()
        for srv in servers:
            srv.stop()
    return 0


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def _check(runs: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """What makes the run invalid (empty when sound), and notes: a first
    token that differs from recompute's (greedy, bf16) is noted, not fatal."""
    bad, notes = [], []
    first = {}
    for r in runs["recompute"]["rows"]:
        first[(r["length"], r["rep"])] = r["first_token"]
    for mode in runs:
        for r in runs[mode]["rows"] if mode != "recompute" else ():
            want = first.get((r["length"], r["rep"]))
            if r["first_token"] != want:
                notes.append("%s len %d rep %d: first token %s, recompute's %s" % (
                    mode, r["length"], r["rep"], r["first_token"], want))
    for mode in ("save", "reuse"):
        for r in runs[mode]["rows"]:
            c, full = r["counters"], (r["length"] - 1) // BLOCK
            where = "%s len %d rep %d" % (mode, r["length"], r["rep"])
            if c.get("blocks_load_failed", 0) or c.get("lookup_errors", 0) or c.get("load_errors", 0):
                bad.append("%s: failures %s" % (where, c))
            if mode == "save":
                if c.get("tokens_hit", 0):
                    bad.append("%s: hit %d tokens in an empty gpucached" % (where, c["tokens_hit"]))
                if c.get("tokens_saved", 0) < full * BLOCK:
                    bad.append("%s: saved %d tokens, want >= %d" % (where, c.get("tokens_saved", 0), full * BLOCK))
            else:
                if c.get("tokens_loaded", 0) != full * BLOCK:
                    bad.append("%s: loaded %d tokens, want every full block but the last token's: %d" % (
                        where, c.get("tokens_loaded", 0), full * BLOCK))
                if c.get("tokens_hit", 0) != full * BLOCK:
                    bad.append("%s: hit %d tokens, want %d" % (where, c.get("tokens_hit", 0), full * BLOCK))
                if not c.get("load_ns", 0):
                    bad.append("%s: no load time counted" % where)
    for mode in LMC_MODES:
        for r in runs.get(mode, {}).get("rows", []):
            where = "%s len %d rep %d" % (mode, r["length"], r["rep"])
            got = r.get("cached_tokens", 0)
            if mode.endswith("-save") and got:
                bad.append("%s: %d tokens cached in an empty gpucached" % (where, got))
            if not mode.endswith("-save") and got < r["length"] - LMC_CHUNK:
                bad.append("%s: %d tokens loaded from LMCache, want >= %d (every full chunk)" % (
                    where, got, r["length"] - LMC_CHUNK))
    return bad, notes


def _lmcache_table(runs: Dict[str, Any], lengths: List[int]) -> List[str]:
    """TTFT of the four ways for engine B to get its prompt's KV, one run."""
    def med(mode: str, length: int) -> float:
        return statistics.median(r["ttft_s"] for r in runs[mode]["rows"] if r["length"] == length and not r["warmup"])

    def cached(mode: str, length: int) -> str:
        got = sorted({r.get("cached_tokens", 0) for r in runs[mode]["rows"] if r["length"] == length and not r["warmup"]})
        return "/".join(format(x, ",") for x in got)
    out = ["", "Engine B's four ways to its prompt's KV, in the same run, the same prompts, the engines alive "
           "together and their requests taking turns: TTFT medians (s), and recompute / path.", "",
           "| prompt tokens | recompute | gpucache native connector | LMCache over RESP (gpucached's RESP) | "
           "LMCache through gpucache.lmcache (native) | native: x | RESP: x | plugin: x | "
           "tokens from cache (native / RESP / plugin) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for length in lengths:
        rc, nv, rs, pl = (med(m, length) for m in ("recompute", "reuse", "lmc-resp", "lmc-plugin"))
        nat = sorted({r["counters"].get("tokens_loaded", 0) for r in runs["reuse"]["rows"]
                      if r["length"] == length and not r["warmup"]})
        out.append("| %s | %.3f | %.3f | %.3f | %.3f | %.2f× | %.2f× | %.2f× | %s / %s / %s |" % (
            format(length, ","), rc, nv, rs, pl, rc / nv, rc / rs, rc / pl,
            "/".join(format(x, ",") for x in nat), cached("lmc-resp", length), cached("lmc-plugin", length)))
    return out


def report(a: argparse.Namespace) -> int:
    runs = {}
    for mode in MODES + LMC_MODES:
        path = os.path.join(a.dir, "%s.json" % mode)
        if mode in MODES or os.path.exists(path):
            with open(path) as f:
                runs[mode] = json.load(f)
    bad, notes = _check(runs)
    lengths = sorted({r["length"] for r in runs["recompute"]["rows"]})
    with open(a.out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "length", "rep", "warmup", "ttft_s", "ttft_source", "generate_wall_s", "tokens_hit",
                    "tokens_loaded", "bytes_loaded", "load_ns", "tokens_saved", "bytes_saved", "save_ns", "loadavg_1min"])
        for mode in MODES:
            for r in runs[mode]["rows"]:
                c = r["counters"]
                w.writerow([mode, r["length"], r["rep"], int(r["warmup"]), "%.4f" % r["ttft_s"], r["ttft_source"],
                            "%.4f" % r["generate_wall_s"], c.get("tokens_hit", 0), c.get("tokens_loaded", 0),
                            c.get("bytes_loaded", 0), c.get("load_ns", 0), c.get("tokens_saved", 0),
                            c.get("bytes_saved", 0), c.get("save_ns", 0), r.get("loadavg", "unknown").split()[0]])

    def reps(mode: str, length: int) -> List[Dict[str, Any]]:
        return [r for r in runs[mode]["rows"] if r["length"] == length and not r["warmup"]]

    def med(mode: str, length: int) -> float:
        return statistics.median(r["ttft_s"] for r in reps(mode, length))

    def by_rep(mode: str, length: int) -> Dict[int, float]:
        return {r["rep"]: r["ttft_s"] for r in reps(mode, length)}

    def cmed(mode: str, length: int, key: str) -> float:
        return statistics.median(r["counters"].get(key, 0) for r in reps(mode, length))

    n = len(reps("reuse", lengths[0]))
    lines = [
        "| prompt tokens | recompute TTFT (s) | reuse from gpucache TTFT (s) | recompute / reuse (of medians) | "
        "paired ratio, median (min-max) | tokens loaded per request | MiB loaded per request | load time (ms) | "
        "load rate (MB/s) | 1-min load average |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    costs = [
        "| prompt tokens | miss + save TTFT (s) | MiB saved per request | save time (ms) | save rate (MB/s) | "
        "reuse: load + save time (ms) | reuse: share of its TTFT in the connector |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary = []
    for length in lengths:
        rc, sv, ru = med("recompute", length), med("save", length), med("reuse", length)
        a_, b_ = by_rep("recompute", length), by_rep("reuse", length)
        pairs = [a_[i] / b_[i] for i in sorted(a_) if i in b_ and b_[i] > 0]
        rr = reps("reuse", length)
        loaded = sorted({r["counters"].get("tokens_loaded", 0) for r in rr})
        mib = cmed("reuse", length, "bytes_loaded") / (1 << 20)
        rates = [r["counters"].get("bytes_loaded", 0) / r["counters"]["load_ns"] * 1e3
                 for r in rr if r["counters"].get("load_ns")]
        rate = statistics.median(rates) if rates else float("nan")
        load_ms = cmed("reuse", length, "load_ns") / 1e6
        loads = [float(r["loadavg"].split()[0]) for m in ("recompute", "reuse") for r in reps(m, length)
                 if r.get("loadavg", "unknown") != "unknown"]
        lines.append("| %s | %.3f | %.3f | %.2f× | %.2f× (%.2f-%.2f) | %s of %s | %.2f | %.1f | %.0f | %s |" % (
            format(length, ","), rc, ru, rc / ru, statistics.median(pairs), min(pairs), max(pairs),
            "/".join(format(x, ",") for x in loaded), format(length, ","), mib, load_ms, rate,
            "%.1f-%.1f" % (min(loads), max(loads)) if loads else "unknown"))
        srows = reps("save", length)
        saved_mib = cmed("save", length, "bytes_saved") / (1 << 20)
        save_ms = cmed("save", length, "save_ns") / 1e6
        srates = [r["counters"].get("bytes_saved", 0) / r["counters"]["save_ns"] * 1e3
                  for r in srows if r["counters"].get("save_ns")]
        conn = [(r["counters"].get("load_ns", 0) + r["counters"].get("save_ns", 0)) / 1e9 for r in rr]
        share = statistics.median(c / r["ttft_s"] for c, r in zip(conn, rr))
        costs.append("| %s | %.3f | %.2f | %.1f | %.0f | %.1f | %.0f%% |" % (
            format(length, ","), sv, saved_mib, save_ms, statistics.median(srates) if srates else float("nan"),
            statistics.median(conn) * 1e3, 100 * share))
        summary.append({"length": length, "recompute_s": rc, "save_s": sv, "reuse_s": ru, "ratio": rc / ru,
                        "paired_ratios": pairs, "tokens_loaded": loaded, "mib_loaded": mib, "load_mb_s": rate,
                        "load_ms": load_ms, "save_ms": save_ms, "loadavg_1min": loads})
    src = sorted({r["ttft_source"] for m in MODES for r in runs[m]["rows"]})
    head = ["Medians of %d repetitions per length and mode, after one warm-up request per length and engine; "
            "TTFT from %s. Recompute and reuse ran in two engines alive together, their requests alternating "
            "(paired ratio: recompute / reuse of the same repetition)." % (
                n, " and ".join("vLLM's first_token_latency" if s == "vllm" else "the wall time of generate"
                                for s in src)),
            "Engine starts (s): " + ", ".join("%s %.0f" % (m, runs[m]["engine_start_s"]) for m in runs) + ".",
            ""]
    lines += ["", "The connector's own time per request (its counters; medians). The save engines ran before the "
              "others, each alone, under another load: their TTFT is not comparable with the recompute column.", ""]
    lines += costs
    if all(m in runs for m in LMC_MODES):
        lines += _lmcache_table(runs, lengths)
        summary.append({"lmcache": {m: {str(n): statistics.median(
            r["ttft_s"] for r in runs[m]["rows"] if r["length"] == n and not r["warmup"]) for n in lengths}
            for m in ("recompute", "reuse", "lmc-resp", "lmc-plugin")}})
    text = "\n".join(head + lines) + "\n"
    same = sum(1 for m in runs if m != "recompute" for r in runs[m]["rows"]) - len(notes)
    text += "\nFirst tokens equal to recompute's: %d of %d requests of the other engines.\n" % (
        same, same + len(notes))
    for x in notes:
        text += "- " + x + "\n"
    if bad:
        text += "\nINVALID RUN:\n" + "\n".join("- " + b for b in bad) + "\n"
    with open(a.out_md, "w") as f:
        f.write(text)
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump({"rows": summary, "invalid": bad, "notes": notes}, f, indent=1)
    sys.stdout.write(text)
    if bad:
        print("engine-ttft: INVALID: %d check(s) failed" % len(bad), file=sys.stderr)
        return 1
    return 0


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpucache.bench_engine", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def engine_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", required=True)
        p.add_argument("--lengths", default="512,2048,8192")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--addr", default="")
        p.add_argument("--timeout", type=float, default=10.0)
        p.add_argument("--kv-cache-bytes", type=int, default=256 << 20)

    r = sub.add_parser("run", help="run the three engines and write DIR/<mode>.json")
    engine_args(r)
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--pause", type=float, default=2.0, help="seconds of idle before each request")
    r.add_argument("--dir", required=True)
    r.add_argument("--lmcache-resp", default="", help="gpucached's RESP address: also run the LMCache paths")
    e = sub.add_parser("serve", help="one engine, driven by run over stdin and stdout")
    engine_args(e)
    e.add_argument("--mode", choices=MODES + LMC_MODES, required=True)
    e.add_argument("--lmcache-port", type=int, default=0)
    e.add_argument("--stats", default="")
    p = sub.add_parser("report", help="check the three runs and write the tables")
    p.add_argument("--dir", required=True)
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-csv", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "run" and not a.addr:
        ap.error("run needs --addr (gpucached)")
    if a.cmd == "serve":
        if a.mode in ("save", "reuse") and not (a.addr and a.stats):
            ap.error("--mode %s needs --addr and --stats" % a.mode)
        return serve(a)
    if a.cmd == "run":
        return run(a)
    return report(a)


if __name__ == "__main__":
    sys.exit(main())
