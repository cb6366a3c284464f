"""gpucache: a stdlib-only Python client for the gpucache shared KV-cache store.

    from gpucache import Client, Namespace, Layout, chain
    c = Client(addrs=["127.0.0.1:9400"], tenant="acme", secret=b"...")
    hits, lease = c.lookup(ns, chain(ns, tokens))

On the daemon's host, Client(addrs=["unix:/run/gpucache/gpucached.sock"])
and c.allocate(nbytes) / c.register(...) make get_into and put copy once
through shared memory (gpucache.shm).
"""

from . import shm
from .client import FAILED, Client, GetResult, byte_view
from .errors import ConnectionFailed, FrameTooLarge, GpucacheError, InvalidIdentity, MalformedError, ProtocolError
from .identity import CacheIdentity, Layout, Namespace, chain, identities, key_for, namespace_digest, opaque_key
from .placement import Member, View
from .wire import Status

__version__ = "0.1.0"

__all__ = [
    "Client", "GetResult", "FAILED", "byte_view", "shm",
    "CacheIdentity", "Layout", "Namespace", "chain", "identities", "key_for", "namespace_digest", "opaque_key",
    "Member", "View", "Status",
    "GpucacheError", "InvalidIdentity", "MalformedError", "ProtocolError", "ConnectionFailed", "FrameTooLarge",
]
