"""python/README.md's client example runs as written against a real gpucached.

The block after the marker `<!-- test: python/tests/test_readme_example.py -->`
is run unchanged by a fresh python3 in a scratch directory holding
acme.secret, with GPUCACHE_ADDR naming a gpucached (tests/gpucached.py) that
has tenant acme with that secret. A wrong name or argument in the README
fails here. Standard library only.
"""

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import unittest

from gpucached import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")
MARKER = "<!-- test: python/tests/test_readme_example.py -->"


def example():
    """The python block right after the marker."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(re.escape(MARKER) + r"\n```python\n(.*?)\n```\n", text, re.S)
    if m is None:
        raise AssertionError("python/README.md has no ```python block right after " + MARKER)
    return m.group(1)


@unittest.skipUnless(shutil.which("go") or os.environ.get("GPUCACHE_BIN"),
                     "no Go toolchain to build gpucached: install Go 1.26, or set GPUCACHE_BIN to a built gpucached")
class ReadmeExample(unittest.TestCase):
    def test_runs_as_written(self):
        code = example()
        work = tempfile.mkdtemp(prefix="gpucache-readme-")
        self.addCleanup(shutil.rmtree, work, True)
        secret = os.path.join(work, "acme.secret")
        with open(secret, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        os.chmod(secret, 0o600)
        d = Daemon.start(config="tenants:\n  - name: acme\n    secrets: [{id: acme-1, file: %s}]\n"
                                "    rights: [\"meta-llama/Llama-3.1-8B-Instruct=rw\"]\n" % secret)
        self.addCleanup(d.stop)
        env = dict(os.environ, GPUCACHE_ADDR=d.addr,
                   PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, "the README example failed:\n%s\n--- daemon log ---\n%s" % (r.stderr, d.log()[-2000:]))
        # What its last comment promises: 4 blocks stored, 4 hits, the same bytes.
        self.assertIn("4 [True, True, True, True] True", r.stdout)
        self.assertEqual(r.stdout.count("Status.STORED"), 4, r.stdout)


if __name__ == "__main__":
    unittest.main()
