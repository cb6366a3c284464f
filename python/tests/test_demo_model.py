"""The demo model, its KV cache and its SGLang-style host pool (no daemon needed)."""

import ctypes
import hashlib
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import torch
except ImportError:  # scripts/test installs python3-torch; a bare machine skips
    torch = None

if torch is not None:
    from gpucache.demo import model as m
    from gpucache.demo.engine import page_hash


def _cfg(**kw):
    base = dict(layers=2, heads=4, kv_heads=2, head_dim=16, vocab=128, ffn=64, page_size=4)
    base.update(kw)
    return m.ModelConfig(**base)


@unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
class ModelTest(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)
        self.cfg = _cfg()
        self.model = m.TinyDecoder(self.cfg)
        self.tokens = torch.randint(0, self.cfg.vocab, (40,), generator=torch.Generator().manual_seed(3)).tolist()

    def test_weights_follow_the_seed(self):
        again = m.TinyDecoder(self.cfg)
        self.assertTrue(torch.equal(self.model.layers[0]["wq"], again.layers[0]["wq"]))
        other = m.TinyDecoder(_cfg(seed=self.cfg.seed + 1))
        self.assertFalse(torch.equal(self.model.layers[0]["wq"], other.layers[0]["wq"]))
        self.assertNotEqual(self.cfg.revision, other.cfg.revision)

    def test_kv_cache_continuation_equals_full_prefill(self):
        full, kv = self.model.prefill(self.tokens)
        _, head = self.model.prefill(self.tokens[:24])
        tail, kv2 = self.model.prefill(self.tokens[24:], head)
        self.assertLessEqual(float((full[24:] - tail).abs().max()), 1e-5)
        for (k1, v1), (k2, v2) in zip(kv, kv2):
            self.assertEqual(k1.shape, (self.cfg.kv_heads, 40, self.cfg.head_dim))
            self.assertLessEqual(float((k1 - k2).abs().max()), 1e-5)
            self.assertLessEqual(float((v1 - v2).abs().max()), 1e-5)

    def test_long_prefill_blocks_match_one_token_steps(self):
        n = m.QUERY_BLOCK + 9  # crosses a query block
        toks = (self.tokens * 10)[:n]
        full, _ = self.model.prefill(toks)
        logits, kv = self.model.prefill(toks[:1])
        for i in range(1, n):
            logits, kv = self.model.prefill(toks[i : i + 1], kv)
        self.assertLessEqual(float((full[-1] - logits[-1]).abs().max()), 1e-4)

    def test_kv_at_wrong_positions_changes_the_output(self):
        # RoPE makes cached K position-bound: the comparison in the demo is
        # sensitive to a page loaded at the wrong place.
        full, kv = self.model.prefill(self.tokens)
        shifted = [(torch.roll(k[:, :24], 1, dims=1), v[:, :24]) for k, v in kv]
        tail, _ = self.model.prefill(self.tokens[24:], shifted)
        self.assertGreater(float((full[24:] - tail).abs().max()), 1e-3)

    def test_greedy_rows_are_the_logits_each_token_came_from(self):
        logits, kv = self.model.prefill(self.tokens)
        toks, rows = self.model.greedy(logits[-1], kv, 5)
        self.assertEqual(rows.shape, (5, self.cfg.vocab))
        self.assertEqual(toks, [int(torch.argmax(r)) for r in rows])

    def test_bad_input_is_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "gpucache/demo"):
            self.model.prefill([])
        with self.assertRaisesRegex(ValueError, "gpucache/demo"):
            self.model.prefill([self.cfg.vocab])
        with self.assertRaisesRegex(ValueError, "gpucache/demo"):
            m.HostPool(self.cfg, 6)


@unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
class HostPoolTest(unittest.TestCase):
    def setUp(self):
        self.cfg = _cfg()
        self.pool = m.HostPool(self.cfg, 32)
        self.pool.kv_buffer.copy_(torch.arange(self.pool.kv_buffer.numel(), dtype=torch.float32).view_as(self.pool.kv_buffer))

    def test_page_buffer_meta_points_at_k_then_v_of_each_page(self):
        idx = torch.tensor([8, 9, 10, 11, 20, 21, 22, 23])
        ptrs, sizes = self.pool.get_page_buffer_meta(idx)
        self.assertEqual(len(ptrs), 4)
        per_page = self.cfg.page_size * self.cfg.layers * self.cfg.kv_heads * self.cfg.head_dim * 4
        self.assertEqual(sizes, [per_page] * 4)
        self.assertEqual(2 * per_page, self.cfg.page_bytes())
        for j, first in enumerate((8, 20)):
            for kv in (0, 1):
                want = self.pool.kv_buffer[kv, first : first + 4].contiguous().numpy().tobytes()
                self.assertEqual(ctypes.string_at(ptrs[2 * j + kv], sizes[2 * j + kv]), want)
        # The flat data page is the same bytes in the same order.
        flat = self.pool.get_data_page(20).contiguous().numpy().tobytes()
        self.assertEqual(flat, ctypes.string_at(ptrs[2], sizes[2]) + ctypes.string_at(ptrs[3], sizes[3]))

    def test_flat_page_round_trip(self):
        page = self.pool.get_data_page(4).clone()
        self.pool.set_from_flat_data_page(12, page)
        self.assertTrue(torch.equal(self.pool.get_data_page(12), page))
        self.assertEqual(self.pool.get_dummy_flat_data_page().shape, page.shape)

    def test_store_and_load_kv_are_exact(self):
        model = m.TinyDecoder(self.cfg)
        _, kv = model.prefill(list(range(12)))
        idx = self.pool.alloc(8)
        self.pool.store_kv(idx, kv, 4)
        back = self.pool.load_kv(idx)
        for (k, v), (k2, v2) in zip(kv, back):
            self.assertTrue(torch.equal(k[:, 4:12], k2))
            self.assertTrue(torch.equal(v[:, 4:12], v2))

    def test_alloc_is_bounded_and_free_returns_slots(self):
        a = self.pool.alloc(20)
        self.assertEqual(len(a), 20)  # rounded up to whole pages
        self.assertIsNone(self.pool.alloc(16))
        self.pool.free(a)
        self.assertEqual(self.pool.available_size(), 32)


class PageHashTest(unittest.TestCase):
    @unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
    def test_sglang_page_key_chain(self):
        first = hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in (1, 2, 3, 4))).hexdigest()
        self.assertEqual(page_hash([1, 2, 3, 4], None), first)
        second = hashlib.sha256(bytes.fromhex(first) + b"".join(t.to_bytes(4, "little") for t in (5, 6, 7, 8))).hexdigest()
        self.assertEqual(page_hash([5, 6, 7, 8], first), second)


if __name__ == "__main__":
    unittest.main()
