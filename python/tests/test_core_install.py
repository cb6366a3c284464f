"""`pip install ./python` works with no network (the in-tree stdlib build
backend needs no download) and the installed package imports."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PY = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


class OfflineInstall(unittest.TestCase):
    def test_pip_install_no_index(self):
        r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
        if r.returncode != 0:
            self.skipTest("pip is not installed for %s: apt-get install python3-pip" % sys.executable)
        target = tempfile.mkdtemp(prefix="gpucache-pip-")
        try:
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--target", target, PY],
                               capture_output=True, env=env, cwd=target)
            self.assertEqual(r.returncode, 0, r.stdout.decode() + r.stderr.decode())
            r = subprocess.run([sys.executable, "-c", "import gpucache, sys; sys.stdout.write(gpucache.__file__)"],
                               capture_output=True, env=dict(os.environ, PYTHONPATH=target), cwd=target)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            self.assertTrue(r.stdout.decode().startswith(target), r.stdout)
        finally:
            shutil.rmtree(target, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
