"""gpucache: a stdlib-only Python client for the gpucache shared KV-cache store."""

from .errors import ConnectionFailed, GpucacheError, InvalidIdentity, MalformedError, ProtocolError
from .identity import CacheIdentity, Layout, Namespace, chain, identities, key_for, namespace_digest, opaque_key
from .wire import Status

__all__ = [
    "CacheIdentity", "Layout", "Namespace", "chain", "identities", "key_for", "namespace_digest", "opaque_key",
    "Status", "GpucacheError", "InvalidIdentity", "MalformedError", "ProtocolError", "ConnectionFailed",
]
