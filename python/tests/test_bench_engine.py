"""gpucache.bench_engine's report: the checks that make an engine-ttft run
fail, and the figures it derives, on made-up runs (no vLLM needed)."""

import argparse
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpucache import bench_engine as be  # noqa: E402

KIB256 = 256 << 10  # one 32-token block of the bench model's KV


def _runs(length=512, reps=3, loaded_tokens=None, first_token=7):
    full = (length - 1) // be.BLOCK
    loaded = full * be.BLOCK if loaded_tokens is None else loaded_tokens
    runs = {}
    for mode, ttft in (("recompute", 2.0), ("save", 2.1), ("reuse", 0.5)):
        rows = []
        for i in range(reps + 1):
            c = {}
            if mode == "save":
                c = {"tokens_saved": length, "bytes_saved": (length // be.BLOCK) * KIB256, "save_ns": 4_000_000}
            elif mode == "reuse":
                c = {"tokens_hit": full * be.BLOCK, "tokens_loaded": loaded,
                     "bytes_loaded": loaded // be.BLOCK * KIB256, "load_ns": 2_000_000, "save_ns": 1_000_000}
            rows.append({"mode": mode, "length": length, "rep": i, "warmup": i == 0, "ttft_s": ttft + 0.01 * i,
                         "ttft_source": "vllm", "generate_wall_s": ttft, "loadavg": "1.5 1.0 0.5",
                         "first_token": [first_token if mode != "recompute" else 7], "counters": c})
        runs[mode] = {"mode": mode, "engine_start_s": 30.0, "loadavg": "1.5 1.0 0.5", "rows": rows}
    return runs


class ReportTest(unittest.TestCase):
    def report(self, runs):
        with tempfile.TemporaryDirectory() as d:
            for mode, r in runs.items():
                with open(os.path.join(d, "%s.json" % mode), "w") as f:
                    json.dump(r, f)
            a = argparse.Namespace(dir=d, out_md=os.path.join(d, "r.md"), out_csv=os.path.join(d, "r.csv"))
            with open(os.devnull, "w") as null:
                old, sys.stdout = sys.stdout, null
                old_err, sys.stderr = sys.stderr, null
                try:
                    rc = be.report(a)
                finally:
                    sys.stdout, sys.stderr = old, old_err
            with open(a.out_md) as f:
                md = f.read()
            with open(os.path.join(d, "summary.json")) as f:
                summary = json.load(f)
            with open(a.out_csv) as f:
                csv_lines = f.read().splitlines()
        return rc, md, summary, csv_lines

    def test_sound_run(self):
        rc, md, summary, csv_lines = self.report(_runs())
        self.assertEqual(rc, 0, md)
        self.assertNotIn("INVALID", md)
        row = summary["rows"][0]
        self.assertAlmostEqual(row["recompute_s"], 2.02)  # median of reps 1..3, the warm-up left out
        self.assertAlmostEqual(row["reuse_s"], 0.52)
        self.assertEqual(row["tokens_loaded"], [480])
        self.assertAlmostEqual(row["load_mb_s"], 15 * KIB256 / 2_000_000 * 1e3)
        self.assertEqual(len(csv_lines), 1 + 3 * 4)
        self.assertIn("480 of 512", md)

    def test_short_load_fails_the_run(self):
        rc, md, summary, _ = self.report(_runs(loaded_tokens=448))
        self.assertEqual(rc, 1)
        self.assertIn("INVALID", md)
        self.assertTrue(any("loaded 448 tokens" in b for b in summary["invalid"]))

    def test_other_first_token_is_noted_not_fatal(self):
        rc, md, summary, _ = self.report(_runs(first_token=9))
        self.assertEqual(rc, 0)
        self.assertEqual(len(summary["notes"]), 8)  # 4 save + 4 reuse requests
        self.assertIn("0 of 8", md)

    def test_prompts_are_seeded(self):
        self.assertEqual(be.prompt_ids(0, 64, 1), be.prompt_ids(0, 64, 1))
        self.assertNotEqual(be.prompt_ids(0, 64, 1), be.prompt_ids(0, 64, 2))
        self.assertNotEqual(be.prompt_ids(0, 64, 1), be.prompt_ids(1, 64, 1))
        self.assertTrue(all(0 <= t < 256 for t in be.prompt_ids(3, 512, 0)))


if __name__ == "__main__":
    unittest.main()
