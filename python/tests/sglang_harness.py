"""Test harness for gpucache.sglang: a HiCache host pool and a driver that
calls the backend the way SGLang's HiCacheController does.

The host pools keep SGLang's memory layouts (MHA page_first:
kv_buffer[2, size, layers, heads, dim], K and V one pointer each per page;
MLA page_first: kv_buffer[size, layers, 1, dim], one pointer per page) and its
four storage methods: get_page_buffer_meta, get_data_page,
get_dummy_flat_data_page and set_from_flat_data_page.
"""

import dataclasses
import hashlib
import struct
from typing import Optional

import torch

STORAGE_BATCH_SIZE = 128  # pages per backend call, as in SGLang


@dataclasses.dataclass
class StorageConfig:
    """Mirrors sglang's HiCacheStorageConfig fields."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = "acme/llama-test"
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclasses.dataclass
class OldStorageConfig:
    """An older HiCacheStorageConfig: no pp/cp/dp fields."""

    tp_rank: int
    tp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    extra_config: Optional[dict] = None


def _itemsize(dtype):
    return torch.empty(0, dtype=dtype).element_size()


class MHAHostPool:
    """SGLang MHATokenToKVPoolHost, page_first layout, on CPU."""

    layout = "page_first"

    def __init__(self, pages=16, page_size=4, layer_num=2, head_num=2, head_dim=8, dtype=torch.float16):
        self.page_size, self.layer_num, self.head_num, self.head_dim = page_size, layer_num, head_num, head_dim
        self.dtype = dtype
        self.size = pages * page_size
        self.kv_buffer = torch.zeros((2, self.size, layer_num, head_num, head_dim), dtype=dtype)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        idx = indices.tolist()
        isz = _itemsize(self.dtype)
        base = self.kv_buffer.data_ptr()
        v_offset = self.layer_num * self.size * self.head_num * self.head_dim * isz
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            k = base + idx[i] * self.layer_num * self.head_num * self.head_dim * isz
            ptrs += [k, k + v_offset]
        esz = self.layer_num * isz * self.page_size * self.head_num * self.head_dim
        return ptrs, [esz] * len(ptrs)

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[:, index:index + self.page_size]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros(2 * self.page_size * self.layer_num * self.head_num * self.head_dim, dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        self.kv_buffer[:, index:index + self.page_size] = data_page.reshape(
            2, self.page_size, self.layer_num, self.head_num, self.head_dim)

    # test helpers
    def fill_random(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.kv_buffer.copy_(torch.randn(self.kv_buffer.shape, generator=g).to(self.dtype))

    def wipe(self):
        self.kv_buffer.zero_()

    def page_bytes(self, slot_page):
        s = slot_page * self.page_size
        return self.kv_buffer[:, s:s + self.page_size].contiguous().view(torch.uint8).numpy().tobytes()


class MLAHostPool(MHAHostPool):
    """SGLang MLATokenToKVPoolHost, page_first layout, on CPU."""

    def __init__(self, pages=16, page_size=4, layer_num=2, kv_lora_rank=12, qk_rope_head_dim=4, dtype=torch.bfloat16):
        self.page_size, self.layer_num, self.dtype = page_size, layer_num, dtype
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        self.size = pages * page_size
        self.kv_buffer = torch.zeros((self.size, layer_num, 1, kv_lora_rank + qk_rope_head_dim), dtype=dtype)

    def _dim(self):
        return self.kv_lora_rank + self.qk_rope_head_dim

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        idx = indices.tolist()
        isz = _itemsize(self.dtype)
        base = self.kv_buffer.data_ptr()
        ptrs = [base + idx[i] * self.layer_num * self._dim() * isz for i in range(0, len(idx), self.page_size)]
        return ptrs, [self.layer_num * isz * self.page_size * self._dim()] * len(ptrs)

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[index:index + self.page_size]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.layer_num * self.page_size * self._dim(), dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        self.kv_buffer[index:index + self.page_size] = data_page.reshape(self.page_size, self.layer_num, 1, self._dim())

    def page_bytes(self, slot_page):
        s = slot_page * self.page_size
        return self.kv_buffer[s:s + self.page_size].contiguous().view(torch.uint8).numpy().tobytes()


def page_keys(token_ids, page_size, prior=None):
    """SGLang-style page keys: a SHA-256 hex chain over each page's token ids."""
    keys = []
    for s in range(0, len(token_ids) - len(token_ids) % page_size, page_size):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        h.update(b"".join(struct.pack("<I", t) for t in token_ids[s:s + page_size]))
        prior = h.hexdigest()
        keys.append(prior)
    return keys


def host_indices(pool, first_page, n_pages):
    s = first_page * pool.page_size
    return torch.arange(s, s + n_pages * pool.page_size, dtype=torch.int64)


class Controller:
    """The calls HiCacheController makes on a storage backend."""

    def __init__(self, backend, pool, zero_copy=True):
        self.backend, self.pool, self.zero_copy = backend, pool, zero_copy
        self.ps = pool.page_size

    def backup(self, hashes, indices):
        """_page_backup: batch by batch, stop at the first failed batch; pages written."""
        done = 0
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[i:i + STORAGE_BATCH_SIZE]
            idx = indices[i * self.ps:(i + len(batch)) * self.ps]
            if self.zero_copy:
                ok = all(self.backend.batch_set_v1(batch, idx, None))
            else:
                data = [self.pool.get_data_page(idx[j * self.ps]) for j in range(len(batch))]
                ok = self.backend.batch_set(batch, data)
            if not ok:
                break
            done += len(batch)
        return done

    def hit_query(self, hashes):
        """_storage_hit_query: leading pages found, batch by batch."""
        found = 0
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[i:i + STORAGE_BATCH_SIZE]
            n = self.backend.batch_exists(batch, None)
            found += n
            if n < len(batch):
                break
        return found

    def fetch(self, hashes, indices):
        """_page_transfer: leading pages loaded into the host pool."""
        done = 0
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[i:i + STORAGE_BATCH_SIZE]
            idx = indices[i * self.ps:(i + len(batch)) * self.ps]
            if self.zero_copy:
                res = self.backend.batch_get_v1(batch, idx, None)
                n = 0
                for r in res:
                    if not r:
                        break
                    n += 1
            else:
                dummies = [self.pool.get_dummy_flat_data_page() for _ in batch]
                data = self.backend.batch_get(batch, dummies)
                n = 0
                for j in range(len(batch)):
                    if data is None or data[j] is None:
                        break
                    self.pool.set_from_flat_data_page(int(idx[j * self.ps]), data[j])
                    n += 1
            done += n
            if n < len(batch):
                break
        return done
