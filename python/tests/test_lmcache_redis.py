"""redis-py against gpucached's RESP endpoint, used the way LMCache uses it.

LMCache's in-process remote backend (lmcache/v1/storage_backend/connector/
redis_connector.py) opens a redis.asyncio pool from `remote_url:
"redis://USER:SECRET@HOST:PORT"` and stores each chunk as two keys:

    <key>kv_bytes   the payload (a full chunk: 32 MiB for Llama-3-8B, 256 tokens)
    <key>metadata   28 bytes: struct "iiiiiii" = length, memory format, dtype
                    code, shape[4] (lmcache/v1/protocol.py RemoteMetadata)

where <key> is `model@world_size@worker_id@chunk_hash_hex@dtype`. A put SETs
kv_bytes, then metadata; a lookup is EXISTS <key>metadata; a get reads
metadata, then kv_bytes, and DELs a metadata whose kv_bytes is gone.

Without GPUCACHE_RESP_ADDR, setUpModule starts a gpucached itself
(tests/gpucached.py) with examples/lmcache/llama3-8b.yaml, its two tenants'
secrets and a RESP listener, so the Python suite runs these tests instead of
skipping them. cmd/gpucached/resp_clients_test.go (TestRESPRedisPy) starts
gpucached its own way and passes:
    GPUCACHE_RESP_ADDR        host:port of the RESP listener
    GPUCACHE_RESP_TENANT_A/B  tenant names (AUTH user)
    GPUCACHE_RESP_SECRET_A/B  their secrets (AUTH password)
    GPUCACHE_RESP_MODEL       the model id of the tenants' profile
    GPUCACHE_RESP_CHUNK       the profile's chunk bytes

Standard library and redis-py only (Debian python3-redis, /usr/bin/python3).

A stand-in for LMCache itself, which this interpreter does not have: the
layout is replayed with redis-py. LMCache's own classes run against
gpucached in the engines environment, which CI always builds:
engine_tests/test_lmcache_inprocess.py (its RemoteBackend and redis://
connector) and engine_tests/test_lmcache.py (vLLM with its multiprocess
server and C++ RESP client, and the gpucache.lmcache plugin).
"""

import asyncio
import hashlib
import os
import secrets
import shutil
import struct
import sys
import unittest

import redis
import redis.asyncio as aioredis

ADDR = os.environ.get("GPUCACHE_RESP_ADDR", "")
TENANT_A = os.environ.get("GPUCACHE_RESP_TENANT_A", "")
SECRET_A = os.environ.get("GPUCACHE_RESP_SECRET_A", "")
TENANT_B = os.environ.get("GPUCACHE_RESP_TENANT_B", "")
SECRET_B = os.environ.get("GPUCACHE_RESP_SECRET_B", "")
MODEL = os.environ.get("GPUCACHE_RESP_MODEL", "meta-llama/Meta-Llama-3-8B")
CHUNK = int(os.environ.get("GPUCACHE_RESP_CHUNK", str(32 << 20)))

# lmcache/v1/protocol.py: DTYPE_TO_INT[torch.bfloat16] == 3; MemoryFormat
# KV_2LTD == 1. The shape of a Llama-3-8B chunk in that format is
# [2, layers, tokens, kv_heads * head_dim].
DTYPE_BF16 = 3
FMT_KV_2LTD = 1


HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "lmcache", "llama3-8b.yaml")
_daemon = None


def setUpModule():
    """Without GPUCACHE_RESP_ADDR: start gpucached with the LMCache example
    config (tenants team-a and team-b, 32 MiB chunks of Llama-3-8B) and a
    RESP listener on a free port."""
    global ADDR, TENANT_A, SECRET_A, TENANT_B, SECRET_B, _daemon
    if ADDR:
        return
    if not (shutil.which("go") or os.environ.get("GPUCACHE_BIN")):
        raise unittest.SkipTest("GPUCACHE_RESP_ADDR is not set and there is no Go toolchain to build gpucached: "
                                "install Go 1.26, set GPUCACHE_BIN to a built gpucached, "
                                "or run go test -run TestRESPRedisPy ./cmd/gpucached")
    sys.path.insert(0, HERE)
    from gpucached import Daemon

    env = {"GPUCACHE_TEAM_A_SECRET": secrets.token_hex(32), "GPUCACHE_TEAM_B_SECRET": secrets.token_hex(32)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the config reads the secrets from the environment
    try:
        _daemon = Daemon.start(extra_args=["--config", EXAMPLE, "--resp-listen", "127.0.0.1:0",
                                           "--hot-capacity", "1GiB", "--audit-log", "off"])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if not _daemon.resp_addr:
        _daemon.stop()
        raise AssertionError("gpucached logged no RESP2 listener:\n" + _daemon.log()[-2000:])
    ADDR = _daemon.resp_addr
    TENANT_A, SECRET_A = "team-a", env["GPUCACHE_TEAM_A_SECRET"]
    TENANT_B, SECRET_B = "team-b", env["GPUCACHE_TEAM_B_SECRET"]


def tearDownModule():
    if _daemon is not None:
        _daemon.stop()


def url(tenant, secret):
    return f"redis://{tenant}:{secret}@{ADDR}"


def lmcache_key(chunk_hash):
    """CacheEngineKey.to_string(): model@world_size@worker_id@hash@dtype."""
    return f"{MODEL}@1@0@{chunk_hash:x}@bfloat16"


def metadata(length):
    """RemoteMetadata(...).serialize(): 7 native int32, 28 bytes."""
    return struct.pack("iiiiiii", length, FMT_KV_2LTD, DTYPE_BF16, 2, 32, 256, 1024)


def payload(seed, n):
    """n deterministic bytes; distinct for distinct seeds."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest() * 2048  # 64 KiB
    while len(out) < n:
        out += block
        block = hashlib.sha256(block[:32]).digest() * 2048
    return bytes(out[:n])


def unique(name):
    """A chunk hash no other test or run uses."""
    return int.from_bytes(hashlib.sha256(f"{name}/{os.getpid()}".encode()).digest()[:16], "big")


class Connector:
    """The calls of LMCache's RedisConnector, one to one."""

    def __init__(self, tenant, secret):
        self.pool = aioredis.ConnectionPool.from_url(url(tenant, secret), max_connections=150)
        self.conn = aioredis.Redis(connection_pool=self.pool)

    async def put(self, key, kv_bytes):
        # "kv bytes needs to be set first to avoid race condition"
        await self.conn.set(key + "kv_bytes", kv_bytes)
        await self.conn.set(key + "metadata", metadata(len(kv_bytes)))

    async def exists(self, key):
        return bool(await self.conn.exists(key + "metadata"))

    async def get(self, key):
        meta = await self.conn.get(key + "metadata")
        if meta is None:
            return None
        length = struct.unpack_from("iiiiiii", meta)[0]
        kv_bytes = await self.conn.get(key + "kv_bytes")
        if kv_bytes is None:
            await self.conn.delete(key + "metadata")
            return None
        return kv_bytes[:length]

    async def close(self):
        await self.pool.disconnect()


class LMCacheInProcessLayout(unittest.TestCase):
    def test_two_key_chunk_round_trip(self):
        async def run():
            c = Connector(TENANT_A, SECRET_A)
            try:
                key = lmcache_key(unique("round-trip"))
                data = payload(key, CHUNK)
                self.assertFalse(await c.exists(key), "EXISTS before the put")
                self.assertIsNone(await c.get(key), "GET before the put")
                await c.put(key, data)
                self.assertTrue(await c.exists(key), "EXISTS <key>metadata after the put")
                got = await c.get(key)
                self.assertIsNotNone(got, "GET after the put")
                self.assertEqual(len(got), len(data))
                self.assertTrue(got == data, "kv_bytes came back different")
                raw = await c.conn.get(key + "metadata")
                self.assertEqual(raw, metadata(CHUNK), "metadata is not the 28 bytes stored")
                # Chunks are immutable: a second SET answers OK and keeps the first bytes.
                self.assertTrue(await c.conn.set(key + "kv_bytes", payload("other", CHUNK)))
                self.assertTrue(await c.conn.get(key + "kv_bytes") == data, "a second SET replaced the chunk")
                self.assertEqual(await c.conn.delete(key + "kv_bytes", key + "metadata"), 2)
                self.assertFalse(await c.exists(key), "EXISTS after DEL")
                self.assertIsNone(await c.get(key), "GET after DEL")
                self.assertEqual(await c.conn.delete(key + "metadata"), 0, "DEL of an absent key")
            finally:
                await c.close()

        asyncio.run(run())

    def test_orphaned_metadata_is_deleted(self):
        async def run():
            c = Connector(TENANT_A, SECRET_A)
            try:
                key = lmcache_key(unique("orphan"))
                self.assertTrue(await c.conn.set(key + "metadata", metadata(CHUNK)))
                self.assertTrue(await c.exists(key))
                self.assertIsNone(await c.get(key), "GET with no kv_bytes")
                self.assertFalse(await c.exists(key), "the connector's DEL of the orphaned metadata")
            finally:
                await c.close()

        asyncio.run(run())

    def test_concurrent_puts_and_gets(self):
        # LMCache's batched_put / batched_get_non_blocking: asyncio.gather
        # over the pool, so several connections at once.
        async def run():
            c = Connector(TENANT_A, SECRET_A)
            try:
                keys = [lmcache_key(unique(f"batch-{i}")) for i in range(4)]
                datas = [payload(k, CHUNK) for k in keys]
                await asyncio.gather(*(c.put(k, d) for k, d in zip(keys, datas)))
                got = await asyncio.gather(*(c.get(k) for k in keys))
                for k, d, g in zip(keys, datas, got):
                    self.assertTrue(g == d, f"{k}: wrong or missing bytes")
                await c.conn.delete(*[k + s for k in keys for s in ("kv_bytes", "metadata")])
            finally:
                await c.close()

        asyncio.run(run())


class RedisPyProtocol(unittest.TestCase):
    def test_pipelining(self):
        r = redis.Redis.from_url(url(TENANT_A, SECRET_A))
        try:
            key = lmcache_key(unique("pipeline"))
            data = payload(key, CHUNK)
            p = r.pipeline(transaction=False)
            p.set(key + "kv_bytes", data)
            p.set(key + "metadata", metadata(CHUNK))
            p.exists(key + "metadata")
            p.get(key + "metadata")
            p.get(key + "kv_bytes")
            p.get(lmcache_key(unique("pipeline-absent")) + "kv_bytes")
            p.delete(key + "kv_bytes", key + "metadata")
            p.exists(key + "metadata")
            res = p.execute()
            self.assertEqual(res[:3], [True, True, 1])
            self.assertEqual(res[3], metadata(CHUNK))
            self.assertTrue(res[4] == data, "pipelined GET returned other bytes")
            self.assertEqual(res[5:], [None, 2, 0])
        finally:
            r.close()

    def test_transactional_pipeline_names_the_alternative(self):
        # redis-py's default pipeline() sends MULTI ... EXEC; gpucache has
        # no transactions (docs/RESP.md, Known limits). The error that
        # execute() raises says what works instead.
        r = redis.Redis.from_url(url(TENANT_A, SECRET_A))
        try:
            key = lmcache_key(unique("transaction"))
            p = r.pipeline()
            p.set(key + "metadata", metadata(CHUNK))
            p.exists(key + "metadata")
            with self.assertRaises(redis.ResponseError) as cm:
                p.execute()
            self.assertIn("has no transactions", str(cm.exception))
            self.assertIn("pipeline(transaction=False)", str(cm.exception))
            self.assertTrue(r.ping())  # the connection stays usable
        finally:
            r.close()

    def test_ping_and_select(self):
        r = redis.Redis.from_url(url(TENANT_A, SECRET_A) + "/0")
        try:
            self.assertTrue(r.ping())
            self.assertTrue(r.execute_command("SELECT", 0))
        finally:
            r.close()

    def test_ping_echoes_a_long_message(self):
        # Longer than the server's 4096-byte argument limit: echoed whole,
        # as Redis does. redis-py's ping() turns the reply into a bool, so
        # the command goes over a pool connection.
        r = redis.Redis.from_url(url(TENANT_A, SECRET_A))
        try:
            msg = bytes(range(256)) * 400
            conn = r.connection_pool.get_connection("PING")
            try:
                conn.send_command("PING", msg)
                self.assertTrue(conn.read_response() == msg, "PING did not echo a 100 KiB message")
                conn.send_command("PING")
                self.assertEqual(conn.read_response(), b"PONG")
            finally:
                r.connection_pool.release(conn)
        finally:
            r.close()

    def test_tenant_b_cannot_see_a(self):
        a = redis.Redis.from_url(url(TENANT_A, SECRET_A))
        b = redis.Redis.from_url(url(TENANT_B, SECRET_B))
        try:
            key = lmcache_key(unique("isolation"))
            data = payload(key, CHUNK)
            self.assertTrue(a.set(key + "kv_bytes", data))
            self.assertTrue(a.set(key + "metadata", metadata(CHUNK)))
            self.assertEqual(b.exists(key + "metadata"), 0, "B sees A's key")
            self.assertIsNone(b.get(key + "kv_bytes"), "B reads A's chunk")
            self.assertEqual(b.delete(key + "kv_bytes"), 0, "B deletes A's chunk")
            self.assertTrue(a.get(key + "kv_bytes") == data, "A lost its chunk to B")
            a.delete(key + "kv_bytes", key + "metadata")
        finally:
            a.close()
            b.close()

    def test_wrong_secret_is_refused(self):
        r = redis.Redis.from_url(url(TENANT_A, SECRET_A + "x"))
        try:
            with self.assertRaises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
                r.ping()
        finally:
            r.close()

    def test_nothing_before_auth(self):
        r = redis.Redis.from_url(f"redis://{ADDR}")
        try:
            with self.assertRaises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
                r.get(lmcache_key(unique("noauth")) + "metadata")
        finally:
            r.close()


if __name__ == "__main__":
    unittest.main()
