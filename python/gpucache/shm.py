"""Shared memory a co-located gpucached copies into and out of directly.

On a Unix-domain connection (an address "unix:/path") with a version-5
session, the client can pass the server a descriptor of shareable memory
(REGISTER, SCM_RIGHTS); GET_INTO, PUT_FROM and PUT_OPAQUE_FROM then name
(region, offset, length) instead of carrying payload bytes, and the server
copies once between its slab and that memory::

    c = gpucache.Client(addrs=["unix:/run/gpucache/gpucached.sock"], tenant="acme")
    buf = c.allocate(64 << 20)          # memfd, sealed, mapped, registered
    t = buf.tensor(torch.bfloat16)      # or buf.numpy("uint8"), memoryview(buf)
    c.get_into(ns, keys, [t[i * n:(i + 1) * n] for i in range(len(keys))])

    r = c.register("/dev/shm/vllm_offload_x.mmap")   # an existing file
    r = c.register(buffer=view)         # the file behind a mapping of this process

Client.get_into, Client.put and Client.put_opaque use a region by
themselves whenever a buffer lies inside one and the connection allows it;
otherwise, and after any failure of the region path, they use the socket
path (one log line per cause). Registration is per connection on the
server: the client registers a region on each pooled connection the first
time that connection needs it, and again on the connection that replaces a
broken one.

Everything here is the standard library (os.memfd_create, fcntl, mmap,
ctypes); numpy and torch are imported only by SharedBuffer.numpy and
SharedBuffer.tensor.
"""

import ctypes
import fcntl
import logging
import mmap
import os
import stat
import threading
from typing import Dict, Optional, Tuple

log = logging.getLogger("gpucache.shm")

MFD_CLOEXEC = getattr(os, "MFD_CLOEXEC", 0x0001)
MFD_ALLOW_SEALING = getattr(os, "MFD_ALLOW_SEALING", 0x0002)
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1024 + 9)
F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1024 + 10)
F_SEAL_SEAL = getattr(fcntl, "F_SEAL_SEAL", 0x0001)
F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 0x0002)
F_SEAL_GROW = getattr(fcntl, "F_SEAL_GROW", 0x0004)

__all__ = ["SharedBuffer", "Region", "allocate", "register", "address_of", "RegionError"]


class RegionError(OSError):
    """Memory that cannot be registered: no file behind it, not shared,
    or a descriptor that does not match the buffer (gpucache/shm)."""


# ---- the address of a buffer ----

class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def address_of(buf) -> int:
    """The address of the first byte of a buffer-protocol object (read-only
    ones too), without keeping an export of it."""
    pb = _PyBuffer()
    if _get_buffer(buf, ctypes.byref(pb), 0) != 0:  # PyBUF_SIMPLE; raises on failure
        raise TypeError("gpucache/shm: no buffer")
    try:
        return pb.buf or 0
    finally:
        _release_buffer(ctypes.byref(pb))


def _span_of(buf) -> Tuple[int, int, object]:
    """(address, nbytes, keepalive) of a buffer, tensor or (address, nbytes)."""
    if isinstance(buf, tuple) and len(buf) == 2 and all(isinstance(x, int) for x in buf):
        return buf[0], buf[1], None
    if hasattr(buf, "data_ptr") and hasattr(buf, "element_size") and hasattr(buf, "is_contiguous"):
        if getattr(buf.device, "type", "cpu") != "cpu" or not buf.is_contiguous():
            raise RegionError("gpucache/shm: only contiguous CPU tensors can be registered")
        return buf.data_ptr(), buf.numel() * buf.element_size(), buf
    m = memoryview(buf)
    if not m.c_contiguous:
        raise RegionError("gpucache/shm: buffer is not C-contiguous")
    return address_of(m), m.nbytes, m


# ---- what maps a range of this process ----

def _maps():
    """(start, end, perms, offset, (major, minor), inode, path) per line of /proc/self/maps."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 5:
                continue
            lo, hi = parts[0].split("-")
            major, minor = parts[3].split(":")
            out.append((int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), (int(major, 16), int(minor, 16)),
                        int(parts[4]), parts[5].strip() if len(parts) > 5 else ""))
    return out


def mapping_of(addr: int, nbytes: int):
    """The file that [addr, addr + nbytes) of this process maps, shared:
    (dev, inode, file offset of addr, path, first line's start and end).
    RegionError when the range is not one shared file mapping throughout."""
    if nbytes <= 0:
        raise RegionError("gpucache/shm: an empty buffer")
    end, at, found = addr + nbytes, addr, None
    for lo, hi, perms, off, dev, ino, path in _maps():
        if hi <= at or lo > at:
            continue
        if ino == 0 or len(perms) < 4 or perms[3] != "s":
            raise RegionError("gpucache/shm: memory at %#x is not a shared file mapping (%s %s)" % (at, perms, path))
        foff = off + (at - lo)
        if found is None:
            found = (dev, ino, foff, path, lo, hi)
        elif (dev, ino) != found[:2] or foff != found[2] + (at - addr):
            raise RegionError("gpucache/shm: memory at %#x..%#x maps more than one file range" % (addr, end))
        at = hi
        if at >= end:
            return found
    raise RegionError("gpucache/shm: memory at %#x..%#x is not mapped" % (addr, end))


def _same_file(st, dev, ino) -> bool:
    return st.st_ino == ino and (os.major(st.st_dev), os.minor(st.st_dev)) == dev


def _open_mapped(dev, ino, path: str, lo: int, hi: int) -> int:
    """A new read-write descriptor of the file a mapping maps: its path when
    it still names that file, else /proc/self/map_files, else a descriptor
    this process holds of it (through /proc/self/fd), for a file unlinked
    after it was mapped (vLLM's offload file, once every worker mapped it)."""
    flags = os.O_RDWR | os.O_CLOEXEC
    tries = []
    if path.startswith("/") and not path.endswith(" (deleted)"):
        tries.append(path)
    tries.append("/proc/self/map_files/%x-%x" % (lo, hi))
    try:
        for name in os.listdir("/proc/self/fd"):
            tries.append("/proc/self/fd/" + name)
    except OSError:
        pass
    for p in tries:
        try:
            if not _same_file(os.stat(p), dev, ino):
                continue
            fd = os.open(p, flags)
        except OSError:
            continue
        if _same_file(os.fstat(fd), dev, ino):
            return fd
        os.close(fd)
    raise RegionError("gpucache/shm: no descriptor of the file mapped at %#x (%s)" % (lo, path))


# ---- sealing ----

def seal_shrink(fd: int) -> bool:
    """Add F_SEAL_SHRINK to a memfd that allows sealing (the server requires
    it of a memfd); whether the descriptor now carries it."""
    try:
        seals = fcntl.fcntl(fd, F_GET_SEALS)
    except OSError:
        return False  # not a memfd: a /dev/shm file, which the server guards instead
    if seals & F_SEAL_SHRINK:
        return True
    try:
        fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)
    except OSError:
        return False
    return True


# ---- regions ----

class Region:
    """A descriptor registered with a client: the server maps bytes
    [0, length) of the file; this process reaches bytes [file_offset,
    file_offset + span) of it at address start. Get one from
    Client.register or Client.allocate; close() (or Client.unregister)
    ends it on every connection."""

    def __init__(self, fd: int, length: int, start: int, span: int, file_offset: int, name: str,
                 keepalive=None, owned_map=None):
        self.id = 0
        self.fd = fd
        self.length = length
        self.start = start
        self.span = span
        self.file_offset = file_offset
        self.name = name
        self.mode = None  # the RegionMode the server last answered
        self.fd_lock = threading.Lock()  # held while fd is sent and while it is closed
        self._keep = keepalive
        self._map = owned_map
        self._client = None

    @property
    def buffer(self):
        """The memory this process reaches the region by (the mapping the
        client made, or the buffer it was registered with)."""
        return self._map if self._map is not None else self._keep

    def locate(self, addr: int, nbytes: int) -> Optional[int]:
        """The region offset of [addr, addr + nbytes), or None outside it."""
        if self.start <= addr and addr + nbytes <= self.start + self.span:
            return self.file_offset + (addr - self.start)
        return None

    def close(self):
        """Unregister (from the client and, lazily, from every connection)
        and close the descriptor and the client's own mapping."""
        c, self._client = self._client, None
        if c is not None:
            c.unregister(self)
        keep, self._keep = self._keep, None
        if isinstance(keep, memoryview):
            try:
                keep.release()
            except (BufferError, ValueError):
                pass
        if self._map is not None:
            m, self._map = self._map, None
            m.close()
        with self.fd_lock:
            if self.fd >= 0:
                fd, self.fd = self.fd, -1
                os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Region(id=%d, %s, %d bytes)" % (self.id, self.name, self.length)


def region_of(fd_or_path=None, buffer=None) -> Region:
    """A Region (not yet registered) for a descriptor, a path, or the
    memory buffer maps (see Client.register)."""
    if fd_or_path is None and buffer is None:
        raise ValueError("gpucache/shm: register needs a descriptor, a path or a buffer")
    fd = -1
    try:
        if isinstance(fd_or_path, (str, bytes, os.PathLike)):
            name = os.fsdecode(fd_or_path)
            fd = os.open(fd_or_path, os.O_RDWR | os.O_CLOEXEC)
        elif fd_or_path is not None:
            fd = os.dup(int(fd_or_path))
            os.set_inheritable(fd, False)
            name = _fd_name(fd)
        st = os.fstat(fd) if fd >= 0 else None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise RegionError("gpucache/shm: %s is not a regular file" % name)
        if buffer is None:
            if st.st_size <= 0:
                raise RegionError("gpucache/shm: %s is empty" % name)
            seal_shrink(fd)
            m = mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            return Region(fd, st.st_size, address_of(m), st.st_size, 0, name, owned_map=m)
        addr, n, keep = _span_of(buffer)
        dev, ino, foff, path, lo, hi = mapping_of(addr, n)
        if fd < 0:
            fd = _open_mapped(dev, ino, path, lo, hi)
            name = path
        elif not _same_file(st, dev, ino):
            raise RegionError("gpucache/shm: the buffer does not map %s" % name)
        if os.fstat(fd).st_size < foff + n:
            raise RegionError("gpucache/shm: %s is shorter than the buffer's part of it" % name)
        seal_shrink(fd)
        if keep is None:
            keep = buffer
        return Region(fd, foff + n, addr, n, foff, name, keepalive=keep)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def _fd_name(fd: int) -> str:
    try:
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return "fd %d" % fd


class Registry:
    """A client's regions: ids, and the address spans that find a buffer's
    region. locate reads an immutable snapshot, so it takes no lock."""

    def __init__(self):
        self._mu = threading.Lock()
        self._by_id: Dict[int, Region] = {}
        self._spans: Tuple[Region, ...] = ()
        self._next = 1
        self.gen = 0

    def add(self, r: Region) -> Region:
        with self._mu:
            if len(self._by_id) >= 64:  # MaxRegions: what one connection can hold
                raise RegionError("gpucache/shm: a client holds at most 64 regions")
            for o in self._spans:
                if r.start < o.start + o.span and o.start < r.start + r.span:
                    raise RegionError("gpucache/shm: %s overlaps %r in this process" % (r.name, o))
            r.id = self._next
            self._next += 1
            self._by_id[r.id] = r
            self._spans = tuple(self._by_id.values())
            self.gen += 1
        return r

    def remove(self, r: Region) -> bool:
        with self._mu:
            if self._by_id.get(r.id) is not r:
                return False
            del self._by_id[r.id]
            self._spans = tuple(self._by_id.values())
            self.gen += 1
            return True

    def has(self, rid: int) -> bool:
        return rid in self._by_id

    def all(self) -> Tuple[Region, ...]:
        return self._spans

    def __len__(self):
        return len(self._spans)

    def locate(self, addr: int, nbytes: int):
        """(region, offset) of the region holding [addr, addr + nbytes), or None."""
        for r in self._spans:
            off = r.locate(addr, nbytes)
            if off is not None:
                return r, off
        return None


# ---- allocated memory ----

class SharedBuffer(mmap.mmap):
    """nbytes of memfd-backed memory, sealed against shrinking and growing,
    mapped MAP_SHARED: a writable buffer (memoryview(buf), buf[a:b]),
    viewable as numpy (buf.numpy()) or torch (buf.tensor()) without a copy.
    region is its registration with a client, or None. close() unregisters
    it and unmaps it (BufferError while views of it are alive)."""

    fd: int
    region: Optional[Region]

    def numpy(self, dtype="uint8", shape=None):
        """A numpy array over this memory (no copy)."""
        import numpy

        a = numpy.frombuffer(self, dtype=dtype)
        return a.reshape(shape) if shape is not None else a

    def tensor(self, dtype=None, shape=None):
        """A torch CPU tensor over this memory (torch.frombuffer, no copy)."""
        import torch

        t = torch.frombuffer(self, dtype=dtype if dtype is not None else torch.uint8)
        return t.reshape(shape) if shape is not None else t

    @property
    def nbytes(self) -> int:
        return len(self)

    def close(self):
        r, self.region = getattr(self, "region", None), None
        if r is not None:
            r.close()
        mmap.mmap.close(self)
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __exit__(self, *exc):
        self.close()


def allocate(nbytes: int, client=None, name: str = "gpucache") -> SharedBuffer:
    """nbytes of shared memory (os.memfd_create with MFD_ALLOW_SEALING and
    MFD_CLOEXEC, sized, sealed with F_SEAL_SHRINK | F_SEAL_GROW, mapped
    MAP_SHARED), registered with client when one is given."""
    nbytes = int(nbytes)
    if nbytes <= 0:
        raise ValueError("gpucache/shm: allocate %d bytes: want > 0" % nbytes)
    fd = os.memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)
        buf = SharedBuffer(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
    buf.fd = fd
    buf.region = None
    if client is not None:
        try:
            rfd = os.dup(fd)
            os.set_inheritable(rfd, False)
            r = Region(rfd, nbytes, address_of(buf), nbytes, 0, "memfd:%s" % name, keepalive=buf)
            client._add_region(r)
        except BaseException:
            try:
                os.close(rfd)
            except (OSError, UnboundLocalError):
                pass
            buf.close()
            raise
        buf.region = r
    return buf


def register(fd_or_path=None, client=None, buffer=None) -> Region:
    """Register an existing region with client (Client.register)."""
    if client is None:
        raise ValueError("gpucache/shm: register needs a client")
    return client.register(fd_or_path, buffer=buffer)
