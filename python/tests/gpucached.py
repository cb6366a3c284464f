"""Start a real gpucached for a test: built once per test run from the tree
(`go build ./cmd/gpucached`) unless GPUCACHE_BIN names a binary.

    d = Daemon.start(extra_args=[...], config="yaml text")
    d.addr            # "127.0.0.1:PORT", parsed from the "gpucached serving" line
    d.unix_addr       # "unix:/path" with Daemon.start(unix=True), else None
    d.stop()          # SIGTERM, then SIGKILL after a grace

The daemon listens on 127.0.0.1:0 with the admin listener off and the cold
tier off unless the caller asks otherwise.
"""

import os
import re
import shutil
import subprocess
import tempfile
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
_SERVING = re.compile(r'msg="gpucached serving" data=(\S+)')
_RESP = re.compile(r'msg="RESP2 endpoint listening" resp_listen=(\S+)')
_build_lock = threading.Lock()
_built = None


def binary() -> str:
    """The daemon to run: $GPUCACHE_BIN, or one built from the tree once."""
    global _built
    env = os.environ.get("GPUCACHE_BIN")
    if env:
        return env
    with _build_lock:
        if _built is None:
            out = os.path.join(tempfile.mkdtemp(prefix="gpucache-pytest-"), "gpucached")
            subprocess.run(["go", "build", "-o", out, "./cmd/gpucached"], cwd=ROOT, check=True)
            _built = out
        return _built


def stop_process(proc, grace=10.0):
    """SIGTERM, then SIGKILL if proc has not exited after grace seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Daemon:
    def __init__(self, proc, addr, workdir, log_path, pump=None):
        self.pump = pump
        self.proc = proc
        self.addr = addr
        self.workdir = workdir
        self.log_path = log_path
        self.resp_addr = None  # the RESP listener's address, when resp_listen is on
        self.unix_addr = None  # "unix:/path" when the Unix listener is on

    @classmethod
    def start(cls, extra_args=(), config=None, timeout=60.0, unix=False, workdir=None):
        """Start gpucached and wait (at most timeout s) for its serving line.
        With unix, it also listens on a Unix socket in its work directory
        (unix_listen; d.unix_addr is "unix:<path>"). workdir, when given, is
        that directory (files a config names by relative path go there; stop
        removes it); by default a new temporary one."""
        workdir = workdir or tempfile.mkdtemp(prefix="gpucached-")
        args = [binary(), "--listen", "127.0.0.1:0", "--admin-listen", "off", "--cold-store", "off",
                "--hot-capacity", "256MiB"]
        sock = os.path.join(workdir, "gpucached.sock") if unix else None
        if sock:
            args += ["--unix-listen", sock]
        if config is not None:
            path = os.path.join(workdir, "gpucached.yaml")
            with open(path, "w") as f:
                f.write(config)
            args += ["--config", path]
        args += list(extra_args)
        log_path = os.path.join(workdir, "gpucached.log")
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
        found = threading.Event()
        addr, resp = [], []
        log = open(log_path, "wb")

        def pump():  # read stderr to the end so the daemon never blocks on a full pipe
            for line in proc.stderr:
                log.write(line)
                log.flush()
                if not found.is_set():
                    r = _RESP.search(line.decode("utf-8", "replace"))
                    if r:
                        resp.append(r.group(1))
                    m = _SERVING.search(line.decode("utf-8", "replace"))
                    if m:
                        addr.append(m.group(1))
                        found.set()
            log.close()
            found.set()
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        if not found.wait(timeout) or not addr:
            proc.kill()
            proc.wait()
            with open(log_path, "rb") as f:
                raise RuntimeError("gpucached did not start:\n" + f.read().decode("utf-8", "replace")[-4000:])
        d = cls(proc, addr[0], workdir, log_path, t)
        d.resp_addr = resp[0] if resp else None
        d.unix_addr = "unix:" + sock if sock else None
        return d

    def stop(self, grace=10.0):
        stop_process(self.proc, grace)
        self._reap()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self):
        """Stop at once (SIGKILL): clients see dropped or refused connections."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reap()

    def _reap(self):
        if self.pump is not None:
            self.pump.join(10)  # the dead daemon's stderr ends: the pump exits
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.proc.stderr.close()

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

