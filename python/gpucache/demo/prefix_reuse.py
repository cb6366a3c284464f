"""Prefix reuse on real attention KV, across engine processes.

    PYTHONPATH=python /usr/bin/python3 -m gpucache.demo.prefix_reuse            # local stand-in store
    PYTHONPATH=python /usr/bin/python3 -m gpucache.demo.prefix_reuse --store gpucache \\
        --extra-config '{"addrs":["127.0.0.1:9400"],"tenant":"tenant-a","secret_file":"/path/tenant-a.secret"}' \\
        --extra-config-b '{"addrs":["127.0.0.1:9400"],"tenant":"tenant-b","secret_file":"/path/tenant-b.secret"}'

The gpucache mode needs a gpucached with those two tenants:
examples/demo/two-tenants.yaml (python/README.md has the commands).

The scenario:
  1. Engine A prefills a PROMPT-token prompt and backs its pages up.
  2. Engine B gets the first SHARED tokens of it plus NEW new ones; it asks
     batch_exists, loads the hit pages with batch_get_v1, computes only the
     rest and greedy-decodes DECODE tokens. TTFT with and without the cache
     are medians of RUNS runs; the runs without the cache are the reference
     full recompute that B's tokens and logits are compared with.
  3. Engine C runs another model revision (another weight seed): 0 hits, and
     the same output as its own recompute.
  4. Engine D is the same model under tenant B: 0 hits.
  5. Single flight: engines E and F miss the same new prompt at the same
     moment; through get_or_fill each page is computed once.
Each engine is its own spawned OS process with its own host pool.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
from typing import Any, Dict, List, Optional

from gpucache.demo import exit_without_torch, require_torch

torch = exit_without_torch("python -m gpucache.demo.prefix_reuse") if __name__ == "__main__" else require_torch()

from gpucache.demo.engine import EngineProcess, EngineSpec, max_logit_diff
from gpucache.demo.model import ModelConfig

# B's logits may differ from a full recompute by at most this much.
LOGIT_TOLERANCE = 1e-4


@dataclasses.dataclass
class Options:
    prompt: int = 2048
    shared: int = 1920
    new: int = 128
    decode: int = 32
    runs: int = 5
    sf_prompt: int = 512
    token_seed: int = 7
    store: str = "local"
    extra_config: Optional[Dict[str, Any]] = None
    extra_config_b: Optional[Dict[str, Any]] = None
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)

    def validate(self) -> None:
        ps = self.model.page_size
        if not (0 < self.shared <= self.prompt) or self.new <= 0 or self.decode <= 0 or self.runs <= 0:
            raise ValueError("gpucache/demo: need 0 < shared <= prompt, new > 0, decode > 0, runs > 0")
        if self.shared % ps or self.sf_prompt < 2 * ps:
            raise ValueError("gpucache/demo: shared must be whole pages and sf_prompt at least 2 pages")


def _tokens(seed: int, n: int, vocab: int) -> List[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def _compare(ref: Dict[str, Any], got: Dict[str, Any]) -> Dict[str, Any]:
    return {"tokens_equal": ref["tokens"] == got["tokens"], "max_logit_diff": max_logit_diff(ref["logits"], got["logits"])}


def run(opts: Options, log=print) -> Dict[str, Any]:
    """Runs the whole scenario; returns the measured results and checks."""
    opts.validate()
    cfg = opts.model
    ctx = multiprocessing.get_context("spawn")
    extra_a = dict(opts.extra_config or {"tenant": "tenant-a"})
    extra_b = dict(opts.extra_config_b or {**extra_a, "tenant": "tenant-b"})
    pool_tokens = max(opts.prompt + opts.new, opts.sf_prompt) + cfg.page_size * 2
    store_mgr = None
    address, authkey = None, b""
    if opts.store == "local":
        from gpucache.demo.pagestore import PageStoreManager

        authkey = os.urandom(16)
        store_mgr = PageStoreManager(address=("127.0.0.1", 0), authkey=authkey, ctx=ctx)
        store_mgr.start()
        address = store_mgr.address
    sync = ctx.Manager()

    def spec(model: ModelConfig, extra: Dict[str, Any]) -> EngineSpec:
        return EngineSpec(model=model, extra_config=extra, store=opts.store, store_address=address, authkey=authkey, pool_tokens=pool_tokens)

    res: Dict[str, Any] = {"model": cfg.model_id, "page_size": cfg.page_size, "page_bytes": cfg.page_bytes()}
    engines: List[EngineProcess] = []
    try:
        prompt_a = _tokens(opts.token_seed, opts.prompt, cfg.vocab)
        prompt_b = prompt_a[: opts.shared] + _tokens(opts.token_seed + 1, opts.new, cfg.vocab)
        a, b = EngineProcess(spec(cfg, extra_a)), EngineProcess(spec(cfg, extra_a))
        engines += [a, b]
        other = dataclasses.replace(cfg, seed=cfg.seed + 1)
        c, d = EngineProcess(spec(other, extra_a)), EngineProcess(spec(cfg, extra_b))
        engines += [c, d]

        log(f"A: prefill {opts.prompt} tokens, back up pages")
        res["a"] = a.call("backup", prompt_a)
        log(f"   pages {res['a']['pages']}, stored {res['a']['stored']}")

        log(f"B: {opts.shared} shared + {opts.new} new tokens, {opts.runs} runs without and with gpucache")
        cold = [b.call("serve", prompt_b, opts.decode, False) for _ in range(opts.runs)]
        warm = [b.call("serve", prompt_b, opts.decode, True) for _ in range(opts.runs)]
        ref = cold[0]
        cmp = [_compare(ref, w) for w in warm]
        ttft_cold = statistics.median(r["ttft"] for r in cold)
        ttft_warm = statistics.median(r["ttft"] for r in warm)
        res["b"] = {
            "pages_hit": warm[0]["hits"],
            "prefill_tokens_saved": warm[0]["saved"],
            "prefill_tokens_computed": len(prompt_b) - warm[0]["saved"],
            "ttft_without_s": ttft_cold,
            "ttft_with_s": ttft_warm,
            "ttft_ratio": ttft_cold / ttft_warm if ttft_warm > 0 else float("inf"),
            "tokens_equal": all(x["tokens_equal"] for x in cmp),
            "max_logit_diff": max(x["max_logit_diff"] for x in cmp),
            "recompute_deterministic": all(r["tokens"] == ref["tokens"] for r in cold),
        }

        log("C: another model revision (weight seed + 1)")
        c_warm = c.call("serve", prompt_b, opts.decode, True)
        c_cold = c.call("serve", prompt_b, opts.decode, False)
        res["c"] = {"pages_hit": c_warm["hits"], **_compare(c_cold, c_warm), "differs_from_b": c_cold["tokens"] != ref["tokens"]}

        log("D: tenant B, same model")
        d_warm = d.call("serve", prompt_b, opts.decode, True)
        res["d"] = {"pages_hit": d_warm["hits"], **_compare(ref, d_warm)}

        log(f"E, F: the same new {opts.sf_prompt}-token prompt at the same moment, get_or_fill")
        prompt_n = _tokens(opts.token_seed + 2, opts.sf_prompt, cfg.vocab)
        e, f = EngineProcess(spec(cfg, extra_a)), EngineProcess(spec(cfg, extra_a))
        engines += [e, f]
        e.call("page_keys", [])  # both processes up before the race starts
        f.call("page_keys", [])
        barrier = sync.Barrier(2)
        fe = e.submit("serve_single_flight", prompt_n, opts.decode, "engine-e", barrier)
        ff = f.submit("serve_single_flight", prompt_n, opts.decode, "engine-f", barrier)
        re_, rf = fe.result(), ff.result()
        n_ref = b.call("serve", prompt_n, opts.decode, False)
        pages = (opts.sf_prompt - 1) // cfg.page_size
        filled = re_["filled"] + rf["filled"]
        res["single_flight"] = {
            "pages": pages,
            "filled_by_e": len(re_["filled"]),
            "filled_by_f": len(rf["filled"]),
            "each_page_once": sorted(filled) == list(range(pages)),
            "tokens_equal": re_["tokens"] == n_ref["tokens"] and rf["tokens"] == n_ref["tokens"],
            "max_logit_diff": max(max_logit_diff(n_ref["logits"], re_["logits"]), max_logit_diff(n_ref["logits"], rf["logits"])),
            "report_e": re_["report"],
            "report_f": rf["report"],
        }
    finally:
        for eng in engines:
            eng.close()
        sync.shutdown()
        if store_mgr is not None:
            store_mgr.shutdown()

    want_hits = opts.shared // cfg.page_size
    b_ = res["b"]
    res["checks"] = {
        "b_hits_shared_pages": b_["pages_hit"] == min(want_hits, (len(prompt_b) - 1) // cfg.page_size),
        "b_tokens_equal_recompute": b_["tokens_equal"],
        "b_logits_within_1e-4": b_["max_logit_diff"] <= LOGIT_TOLERANCE,
        "c_zero_hits": res["c"]["pages_hit"] == 0,
        "c_same_as_own_recompute": res["c"]["tokens_equal"] and res["c"]["max_logit_diff"] <= LOGIT_TOLERANCE,
        "d_zero_hits": res["d"]["pages_hit"] == 0,
        "single_flight_each_page_once": res["single_flight"]["each_page_once"],
        "single_flight_tokens_equal": res["single_flight"]["tokens_equal"],
    }
    res["ok"] = all(res["checks"].values())
    return res


def report(res: Dict[str, Any]) -> str:
    b = res["b"]
    lines = [
        f"model {res['model']}, page {res['page_size']} tokens = {res['page_bytes']} bytes",
        f"A: backed up {res['a']['stored']}/{res['a']['pages']} pages",
        f"B: pages hit {b['pages_hit']}, prefill tokens saved {b['prefill_tokens_saved']} (computed {b['prefill_tokens_computed']})",
        f"B: TTFT without gpucache {b['ttft_without_s'] * 1e3:.1f} ms, with {b['ttft_with_s'] * 1e3:.1f} ms (medians), ratio {b['ttft_ratio']:.2f}x",
        f"B: tokens equal to full recompute: {b['tokens_equal']}, max logit diff {b['max_logit_diff']:.3g} (limit {LOGIT_TOLERANCE:g})",
        f"C (other revision): pages hit {res['c']['pages_hit']}, same as own recompute: {res['c']['tokens_equal']}",
        f"D (tenant B): pages hit {res['d']['pages_hit']}",
        "single flight: {pages} pages, filled by E {filled_by_e}, by F {filled_by_f}, each page once: {each_page_once}, tokens equal: {tokens_equal}".format(**res["single_flight"]),
        "checks: " + ", ".join(f"{k}={'ok' if v else 'FAIL'}" for k, v in res["checks"].items()),
        "RESULT: " + ("PASS" if res["ok"] else "FAIL"),
    ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpucache.demo.prefix_reuse", description=__doc__.split("\n\n")[0])
    d = Options()
    p.add_argument("--prompt", type=int, default=d.prompt)
    p.add_argument("--shared", type=int, default=d.shared)
    p.add_argument("--new", type=int, default=d.new)
    p.add_argument("--decode", type=int, default=d.decode)
    p.add_argument("--runs", type=int, default=d.runs)
    p.add_argument("--sf-prompt", type=int, default=d.sf_prompt)
    p.add_argument("--store", choices=["local", "gpucache"], default=d.store)
    p.add_argument("--extra-config", type=json.loads, default=None, help="backend extra_config (JSON) of tenant A")
    p.add_argument("--extra-config-b", type=json.loads, default=None, help="backend extra_config (JSON) of tenant B")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    a = p.parse_args(argv)
    opts = Options(
        prompt=a.prompt, shared=a.shared, new=a.new, decode=a.decode, runs=a.runs, sf_prompt=a.sf_prompt,
        store=a.store, extra_config=a.extra_config, extra_config_b=a.extra_config_b,
    )
    res = run(opts, log=lambda s: print(s, file=sys.stderr, flush=True))
    if a.json:
        print(json.dumps(res, indent=2, sort_keys=True))
    else:
        print(report(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
