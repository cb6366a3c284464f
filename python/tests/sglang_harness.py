"""Test harness for gpucache.sglang: SGLang's storage config, host pools and
page keys, and a driver that calls the backend the way SGLang's
HiCacheController does.

Where sglang imports (the engines venv, sglang 0.5.23), the config, the host
pools and the page keys are SGLang's own: HiCacheStorageConfig,
MHATokenToKVPoolHost and MLATokenToKVPoolHost (page_first, pin_memory off)
built over SGLang's MHATokenToKVPool / MLATokenToKVPool on device "cpu", and
get_hash_str. REAL_SGLANG says which. Where it does not (Debian's
/usr/bin/python3), stand-ins with the same memory layouts (MHA page_first:
kv_buffer[2, size, layers, heads, dim], K and V one pointer each per page;
MLA page_first: kv_buffer[size, layers, 1, dim], one pointer per page) and
the same four storage methods (get_page_buffer_meta, get_data_page,
get_dummy_flat_data_page, set_from_flat_data_page) take their place.

Controller is a stand-in in both cases, for
sglang.srt.managers.cache_controller.HiCacheController: the real controller
needs a running scheduler (torch.distributed groups for its rank syncs, its
storage threads, the device pool's transfer kernels), so it runs only inside
SGLang's engine (engine_tests/test_sglang_engine.py).
"""

import dataclasses
import hashlib
import struct
from typing import Optional

try:
    import torch
except ImportError:  # the tests that need a host pool skip
    torch = None

REAL_SGLANG = False
WHY_STAND_INS = "torch is not installed"
if torch is not None:
    try:
        from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE, HiCacheStorageConfig
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
        from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
        from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
        from sglang.srt.mem_cache.utils import get_hash_str

        REAL_SGLANG = True
        WHY_STAND_INS = ""
    except Exception as e:  # sglang absent or broken: the stand-ins below
        WHY_STAND_INS = "sglang does not import: %r" % (e,)

if not REAL_SGLANG:
    STORAGE_BATCH_SIZE = 128  # pages per backend call, as in SGLang


@dataclasses.dataclass
class _StandInStorageConfig:
    """Stand-in for sglang's HiCacheStorageConfig (0.5.23's fields)."""

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
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    dp_rank: int = 0
    extra_config: Optional[dict] = None
    dcp_size: int = 1
    dcp_rank: int = 0
    logical_page_size: Optional[int] = None

    @property
    def is_storage_writer(self) -> bool:
        return not self.is_mla_model or self.tp_rank == self.dcp_rank


_CONFIG_DEFAULTS = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                        model_name="acme/llama-test")


def StorageConfig(**kw):
    """SGLang's HiCacheStorageConfig (or its stand-in) with test defaults."""
    args = dict(_CONFIG_DEFAULTS)
    args.update(kw)
    return (HiCacheStorageConfig if REAL_SGLANG else _StandInStorageConfig)(**args)


@dataclasses.dataclass
class OldStorageConfig:
    """An older HiCacheStorageConfig: no pp/cp/dp fields."""

    tp_rank: int
    tp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    extra_config: Optional[dict] = None


class _PoolHelpers:
    """Test helpers over a page_first host pool's kv_buffer (both kinds)."""

    def fill_random(self, seed):
        g = torch.Generator().manual_seed(seed)
        self.kv_buffer.copy_(torch.randn(self.kv_buffer.shape, generator=g).to(self.dtype))

    def wipe(self):
        self.kv_buffer.zero_()

    def page_bytes(self, slot_page):
        s = slot_page * self.page_size
        page = self.kv_buffer[s:s + self.page_size] if self._mla_layout else self.kv_buffer[:, s:s + self.page_size]
        return page.contiguous().view(torch.uint8).numpy().tobytes()


def _itemsize(dtype):
    return torch.empty(0, dtype=dtype).element_size()


class _StandInMHAHostPool(_PoolHelpers):
    """Stand-in for SGLang's MHATokenToKVPoolHost, page_first layout, on CPU."""

    layout = "page_first"
    _mla_layout = False

    def __init__(self, pages=16, page_size=4, layer_num=2, head_num=2, head_dim=8, dtype=None):
        dtype = torch.float16 if dtype is None else dtype
        self.page_size, self.layer_num, self.head_num, self.head_dim = page_size, layer_num, head_num, head_dim
        self.start_layer = 0
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


class _StandInMLAHostPool(_StandInMHAHostPool):
    """Stand-in for SGLang's MLATokenToKVPoolHost, page_first layout, on CPU."""

    _mla_layout = True

    def __init__(self, pages=16, page_size=4, layer_num=2, kv_lora_rank=12, qk_rope_head_dim=4, dtype=None):
        dtype = torch.bfloat16 if dtype is None else dtype
        self.page_size, self.layer_num, self.dtype = page_size, layer_num, dtype
        self.start_layer = 0
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


def _stand_in_page_keys(token_ids, page_size, prior=None):
    keys = []
    for s in range(0, len(token_ids) - len(token_ids) % page_size, page_size):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        h.update(b"".join(struct.pack("<I", t) for t in token_ids[s:s + page_size]))
        prior = h.hexdigest()
        keys.append(prior)
    return keys


if REAL_SGLANG:

    class MHAHostPool(_PoolHelpers, MHATokenToKVPoolHost):
        """SGLang's MHATokenToKVPoolHost (page_first, pin_memory off, host
        slots pages * page_size) over SGLang's MHATokenToKVPool on device
        "cpu"; the class adds the test helpers only."""

        _mla_layout = False

        def __init__(self, pages=16, page_size=4, layer_num=2, head_num=2, head_dim=8, dtype=None):
            dtype = torch.float16 if dtype is None else dtype
            dev = MHATokenToKVPool(size=2 * page_size, page_size=page_size, dtype=dtype, head_num=head_num,
                                   head_dim=head_dim, layer_num=layer_num, device="cpu", enable_memory_saver=False)
            super().__init__(dev.get_device_pool_infos()[0].buffer_info, 1.0, 0, page_size, "page_first",
                             pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
                             start_layer=dev.start_layer, end_layer=dev.end_layer,
                             host_token_capacity=pages * page_size)
            self.test_device_pool = dev

    class MLAHostPool(_PoolHelpers, MLATokenToKVPoolHost):
        """SGLang's MLATokenToKVPoolHost (page_first, pin_memory off) over
        SGLang's MLATokenToKVPool on device "cpu"; test helpers only."""

        _mla_layout = True

        def __init__(self, pages=16, page_size=4, layer_num=2, kv_lora_rank=12, qk_rope_head_dim=4, dtype=None):
            dtype = torch.bfloat16 if dtype is None else dtype
            dev = MLATokenToKVPool(size=2 * page_size, page_size=page_size, dtype=dtype, kv_lora_rank=kv_lora_rank,
                                   qk_rope_head_dim=qk_rope_head_dim, layer_num=layer_num, device="cpu",
                                   enable_memory_saver=False)
            super().__init__(dev.get_device_pool_infos()[0].buffer_info, 1.0, 0, page_size, "page_first",
                             pin_memory=False, device="cpu", override_kv_cache_dim=dev.kv_cache_dim,
                             device_capacity_tokens=dev.size, start_layer=dev.start_layer,
                             end_layer=dev.end_layer, target_layer_num=dev.layer_num,
                             host_token_capacity=pages * page_size)
            self.test_device_pool = dev

    def page_keys(token_ids, page_size, prior=None):
        """SGLang's own page keys (get_hash_str): a SHA-256 chain over each
        full page's token ids."""
        return list(get_hash_str(list(token_ids), prior, page_size=page_size))

else:
    MHAHostPool, MLAHostPool = _StandInMHAHostPool, _StandInMLAHostPool

    def page_keys(token_ids, page_size, prior=None):
        """SGLang-style page keys: a SHA-256 hex chain over each page's token ids."""
        return _stand_in_page_keys(token_ids, page_size, prior)


def host_indices(pool, first_page, n_pages):
    s = first_page * pool.page_size
    return torch.arange(s, s + n_pages * pool.page_size, dtype=torch.int64)


class Controller:
    """Stand-in for SGLang's HiCacheController (see the module docstring):
    the calls it makes on a storage backend, batch by batch."""

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
