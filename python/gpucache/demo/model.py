"""A small decoder-only transformer with a real KV cache, and a host pool.

The model is a Llama-shaped decoder (RMSNorm, RoPE, grouped-query attention,
SwiGLU) in plain torch on the CPU in fp32. Its weights are drawn from a fixed
seed, so nothing is downloaded; the seed is part of the model revision, and a
model with another seed is another model whose KV must never be reused.

The KV cache is a list, one entry per layer, of (K, V) tensors shaped
[kv_heads, tokens, head_dim]. K is stored after RoPE, as engines do, so a
cached page is only valid at the positions it was computed at; the SGLang page
key (a hash chain over the whole prefix) guarantees that.

HostPool mirrors SGLang's MHA host pool in the "page_first" layout:
kv_buffer is [2, size, layers, kv_heads, head_dim], so one page (page_size
consecutive token slots) holds the K of all layers in one contiguous run and
the V of all layers in another. get_page_buffer_meta gives the (K, V) pointer
pair per page that a zero-copy storage backend reads into and writes from.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import List, Optional, Sequence, Tuple

from gpucache.demo import require_torch

torch = require_torch()

KV = List[Tuple[torch.Tensor, torch.Tensor]]

# Query rows per attention block in prefill (bounds the score matrix to
# heads x QUERY_BLOCK x context floats).
QUERY_BLOCK = 256


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and revision of the demo model: a small GQA decoder with
    seeded weights that prefills on a CPU."""

    name: str = "gpucache-demo/tiny-gqa"
    seed: int = 20240614  # the weights' seed: part of the revision
    layers: int = 8
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    vocab: int = 1024
    ffn: int = 512
    rope_theta: float = 10000.0
    page_size: int = 16
    norm_eps: float = 1e-5

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim

    @property
    def revision(self) -> str:
        """The model revision: changes whenever the weights would change."""
        return (
            f"seed{self.seed}-l{self.layers}-h{self.heads}-kv{self.kv_heads}"
            f"-d{self.head_dim}-v{self.vocab}-f{self.ffn}-rope{self.rope_theta:g}"
        )

    @property
    def model_id(self) -> str:
        return f"{self.name}@{self.revision}"

    def page_bytes(self) -> int:
        """Bytes of one page in the host pool (K and V of all layers), fp32."""
        return 2 * self.page_size * self.layers * self.kv_heads * self.head_dim * 4


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class TinyDecoder:
    """The decoder. Not thread-safe; one instance per engine."""

    def __init__(self, cfg: ModelConfig):
        if cfg.heads % cfg.kv_heads != 0:
            raise ValueError("gpucache/demo: heads must be a multiple of kv_heads")
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        d, hd = cfg.d_model, cfg.head_dim

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / math.sqrt(shape[0])

        self.embed = torch.randn(cfg.vocab, d, generator=g)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append(
                {
                    "attn_norm": 1.0 + 0.1 * torch.randn(d, generator=g),
                    "wq": w(d, cfg.heads * hd),
                    "wk": w(d, cfg.kv_heads * hd),
                    "wv": w(d, cfg.kv_heads * hd),
                    "wo": w(cfg.heads * hd, d),
                    "ffn_norm": 1.0 + 0.1 * torch.randn(d, generator=g),
                    "w1": w(d, cfg.ffn),
                    "w3": w(d, cfg.ffn),
                    "w2": w(cfg.ffn, d),
                }
            )
        self.final_norm = 1.0 + 0.1 * torch.randn(d, generator=g)
        self.lm_head = w(d, cfg.vocab)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        self._inv_freq = inv

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Rotates x [heads, T, head_dim] for absolute positions start..start+T-1."""
        t = x.shape[1]
        pos = torch.arange(start, start + t, dtype=torch.float64)
        ang = torch.outer(pos, self._inv_freq)
        cos = ang.cos().to(x.dtype)
        sin = ang.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
        """Causal grouped-query attention of q [heads, T, D] over k, v [kv_heads, past+T, D].

        Queries go in blocks of QUERY_BLOCK rows, and a block only reads the
        keys it may see, so a long prefill skips the masked upper triangle.
        The query heads sharing one KV head are folded into the rows of one
        matmul instead of repeating K and V, and each KV head is one plain 2-D
        matmul (much faster than batched matmul on a reference BLAS).
        """
        cfg = self.cfg
        group = cfg.heads // cfg.kv_heads
        t = q.shape[1]
        scale = 1.0 / math.sqrt(cfg.head_dim)
        qg = q.view(cfg.kv_heads, group, t, cfg.head_dim)
        out = torch.empty(cfg.kv_heads, group, t, cfg.head_dim, dtype=q.dtype)
        for b in range(0, t, QUERY_BLOCK):
            e = min(t, b + QUERY_BLOCK)
            n = e - b
            seen = past + e
            mask = torch.ones(n, seen, dtype=torch.bool).triu(past + b + 1)
            for h in range(cfg.kv_heads):
                qb = qg[h, :, b:e].reshape(group * n, cfg.head_dim)
                scores = torch.mm(qb, k[h, :seen].t()).mul_(scale)
                scores = scores.view(group, n, seen).masked_fill_(mask, float("-inf"))
                probs = torch.softmax(scores, dim=-1).view(group * n, seen)
                out[h, :, b:e] = torch.mm(probs, v[h, :seen]).view(group, n, cfg.head_dim)
        return out.view(cfg.heads, t, cfg.head_dim)

    @torch.no_grad()
    def prefill(self, tokens: Sequence[int], past_kv: Optional[KV] = None) -> Tuple[torch.Tensor, KV]:
        """Runs tokens after past_kv; returns (logits [T, vocab], the new full KV).

        past_kv is not modified; the returned KV holds past + new tokens.
        """
        cfg = self.cfg
        if len(tokens) == 0:
            raise ValueError("gpucache/demo: prefill needs at least one token")
        past = 0 if past_kv is None else past_kv[0][0].shape[1]
        ids = torch.tensor(list(tokens), dtype=torch.long)
        if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab:
            raise ValueError("gpucache/demo: token id out of vocabulary")
        t = ids.shape[0]
        x = self.embed[ids]
        new_kv: KV = []
        for i, lw in enumerate(self.layers):
            h = _rms_norm(x, lw["attn_norm"], cfg.norm_eps)
            q = (h @ lw["wq"]).view(t, cfg.heads, cfg.head_dim).transpose(0, 1)
            k = (h @ lw["wk"]).view(t, cfg.kv_heads, cfg.head_dim).transpose(0, 1)
            v = (h @ lw["wv"]).view(t, cfg.kv_heads, cfg.head_dim).transpose(0, 1)
            q = self._rope(q, past)
            k = self._rope(k, past)
            if past_kv is not None:
                k = torch.cat([past_kv[i][0], k], dim=1)
                v = torch.cat([past_kv[i][1], v], dim=1)
            k = k.contiguous()
            v = v.contiguous()
            new_kv.append((k, v))
            attn = self._attention(q, k, v, past)
            x = x + attn.transpose(0, 1).reshape(t, cfg.d_model) @ lw["wo"]
            h = _rms_norm(x, lw["ffn_norm"], cfg.norm_eps)
            x = x + (torch.nn.functional.silu(h @ lw["w1"]) * (h @ lw["w3"])) @ lw["w2"]
        logits = _rms_norm(x, self.final_norm, cfg.norm_eps) @ self.lm_head
        return logits, new_kv

    @torch.no_grad()
    def greedy(self, first_logits: torch.Tensor, kv: KV, steps: int) -> Tuple[List[int], torch.Tensor]:
        """Greedy-decodes steps tokens starting from the prompt's last logits.

        Returns (tokens, logits [steps, vocab]): row i is the distribution
        token i was picked from.
        """
        out: List[int] = []
        rows = [first_logits]
        logits = first_logits
        for i in range(steps):
            tok = int(torch.argmax(logits))
            out.append(tok)
            if i + 1 == steps:
                break
            step_logits, kv = self.prefill([tok], kv)
            logits = step_logits[-1]
            rows.append(logits)
        return out, torch.stack(rows)


class HostPool:
    """SGLang-style MHA host KV pool, page_first layout, fp32, CPU.

    kv_buffer[0] holds K, kv_buffer[1] holds V, each [size, layers, kv_heads,
    head_dim]. Slots are handed out a page at a time by alloc/free (guarded by
    lock). The pool owns kv_buffer; pointers from get_page_buffer_meta stay
    valid for the pool's lifetime.
    """

    layout = "page_first"
    is_mla = False

    def __init__(self, cfg: ModelConfig, size_tokens: int):
        if size_tokens <= 0 or size_tokens % cfg.page_size:
            raise ValueError("gpucache/demo: pool size must be a positive multiple of the page size")
        self.cfg = cfg
        self.page_size = cfg.page_size
        self.size = size_tokens
        self.layer_num = cfg.layers
        self.head_num = cfg.kv_heads
        self.head_dim = cfg.head_dim
        self.dtype = torch.float32
        self.itemsize = torch.empty((), dtype=self.dtype).element_size()  # torch 1.13 has no dtype.itemsize
        self.device = "cpu"
        self.kv_buffer = torch.zeros((2, size_tokens, cfg.layers, cfg.kv_heads, cfg.head_dim), dtype=self.dtype)
        self.lock = threading.Lock()
        self._free_pages = list(range(size_tokens // cfg.page_size))  # guarded by lock

    # --- slot management -------------------------------------------------
    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        """Token slot indices for need_size tokens (whole pages), or None when full."""
        pages = -(-need_size // self.page_size)
        with self.lock:
            if pages > len(self._free_pages):
                return None
            got, self._free_pages = self._free_pages[:pages], self._free_pages[pages:]
        idx = [p * self.page_size + j for p in got for j in range(self.page_size)]
        return torch.tensor(idx, dtype=torch.int64)

    def free(self, indices: torch.Tensor) -> int:
        pages = sorted({int(i) // self.page_size for i in indices.tolist()})
        with self.lock:
            self._free_pages.extend(pages)
        return len(indices)

    def available_size(self) -> int:
        with self.lock:
            return len(self._free_pages) * self.page_size

    def wipe(self) -> None:
        """Zeroes all KV and frees all slots (a fresh engine's pool)."""
        self.kv_buffer.zero_()
        with self.lock:
            self._free_pages = list(range(self.size // self.page_size))

    # --- the SGLang host-pool surface a storage backend uses ------------
    def get_size_per_token(self) -> int:
        return 2 * self.layer_num * self.head_num * self.head_dim * self.itemsize

    def get_ksize_per_token(self) -> int:
        return self.layer_num * self.head_num * self.head_dim * self.itemsize

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        page = self.kv_buffer[:, index : index + self.page_size]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(
            (2, self.page_size, self.layer_num, self.head_num, self.head_dim), dtype=self.dtype
        ).flatten()

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        self.kv_buffer[:, index : index + self.page_size] = data_page.reshape(
            2, self.page_size, self.layer_num, self.head_num, self.head_dim
        )

    def get_page_buffer_meta(self, indices: torch.Tensor) -> Tuple[List[int], List[int]]:
        """Per page: the K pointer then the V pointer, and their byte sizes."""
        if len(indices) % self.page_size:
            raise ValueError("gpucache/demo: indices must cover whole pages")
        token_bytes = self.get_ksize_per_token()
        base = self.kv_buffer.data_ptr()
        v_offset = self.size * token_bytes
        ptrs: List[int] = []
        for first in indices.tolist()[:: self.page_size]:
            k = base + int(first) * token_bytes
            ptrs.extend((k, k + v_offset))
        return ptrs, [self.page_size * token_bytes] * len(ptrs)

    # --- moving KV between the model and the pool -----------------------
    def store_kv(self, host_indices: torch.Tensor, kv: KV, start: int) -> None:
        """Copies the model KV of tokens start..start+len(host_indices) into the slots."""
        n = len(host_indices)
        k = torch.stack([layer[0][:, start : start + n] for layer in kv])  # [L, H, n, D]
        v = torch.stack([layer[1][:, start : start + n] for layer in kv])
        self.kv_buffer[0, host_indices] = k.permute(2, 0, 1, 3)
        self.kv_buffer[1, host_indices] = v.permute(2, 0, 1, 3)

    def load_kv(self, host_indices: torch.Tensor) -> KV:
        """The model KV held in the slots, in slot order."""
        k = self.kv_buffer[0, host_indices].permute(1, 2, 0, 3)  # [L, H, n, D]
        v = self.kv_buffer[1, host_indices].permute(1, 2, 0, 3)
        return [(k[i].contiguous(), v[i].contiguous()) for i in range(self.layer_num)]
