"""A stdlib-only PEP 517 build backend for the gpucache package.

It lets `pip install ./python` work with no network: pip's isolated build
environment needs no setuptools download, because this backend needs
nothing beyond the standard library. It builds a pure-Python wheel of the
gpucache package (every .py file under gpucache/, no __pycache__).
"""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "gpucache"
VERSION = "0.1.0"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TAG = "py3-none-any"


def _metadata() -> str:
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Python client for gpucache, the shared KV-cache store\n"
            "Requires-Python: >=3.9\nProvides-Extra: numpy\nProvides-Extra: torch\n" % (NAME, VERSION))


def _files():
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, NAME)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".py", ".json", ".txt")):
                full = os.path.join(dirpath, f)
                yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(arc, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _wheel(wheel_directory, editable=False):
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    path = os.path.join(wheel_directory, "%s-%s-%s.whl" % (NAME, VERSION, TAG))
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc, data):
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        if editable:
            add("%s.pth" % NAME, (ROOT + "\n").encode())
        else:
            for full, arc in _files():
                with open(full, "rb") as f:
                    add(arc, f.read())
        add(dist + "/METADATA", _metadata().encode())
        add(dist + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: gpucache_build\nRoot-Is-Purelib: true\nTag: %s\n"
                              % TAG).encode())
        records.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(records) + "\n")
    return os.path.basename(path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ("pyproject.toml", "README.md"):
            t.add(os.path.join(ROOT, rel), base + "/" + rel)
        t.add(os.path.join(ROOT, "_build", "gpucache_build.py"), base + "/_build/gpucache_build.py")
        for full, arc in _files():
            t.add(full, base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    return os.path.basename(path)
