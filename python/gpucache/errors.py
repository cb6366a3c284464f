"""Errors of the gpucache package. Every message starts with "gpucache/<part>: "."""


class GpucacheError(Exception):
    """Base class of every error this package raises."""


class InvalidIdentity(GpucacheError, ValueError):
    """An identity or namespace that fails validation (gpucache/identity)."""


class MalformedError(GpucacheError):
    """A frame or body that does not decode (gpucache/wire: MALFORMED)."""


class FrameTooLarge(MalformedError):
    """A response longer than the client's own limit for it (gpucache/client).
    Nothing is allocated for it and its connection is closed unread."""


class ProtocolError(GpucacheError):
    """An error response from a server: code, message and its trailing fields."""

    def __init__(self, code, message, retry_after=0.0, epoch=0):
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.epoch = epoch
        name = getattr(code, "name", str(code))
        super().__init__("gpucache/wire: %s: %s" % (name, message))


class ConnectionFailed(GpucacheError):
    """Dialling, TLS, HELLO or the stream failed (gpucache/client)."""

    def __init__(self, reason, message):
        self.reason = reason
        super().__init__("gpucache/client: %s: %s" % (reason, message))
