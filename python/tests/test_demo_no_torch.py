"""The demo without torch, and the demo's shipped gpucached config.

torch is the demo's alone: without it, python -m gpucache.demo.prefix_reuse
(and bench_pages) exit 1 with one line that says what needs torch and how
to install it, not a bare ModuleNotFoundError; the package still imports.
examples/demo/two-tenants.yaml, the config the README's gpucache-mode
commands use, starts gpucached as the README says (DaemonTest in
test_demo_prefix_reuse.py runs the whole demo against it when torch is
installed). Standard library only.
"""

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)
sys.path.insert(0, HERE)

# Runs a demo module as __main__ with torch unimportable (None in
# sys.modules makes `import torch` raise ModuleNotFoundError, as in a venv
# without it).
NO_TORCH = 'import runpy, sys; sys.modules["torch"] = None; sys.argv = [sys.argv[1]]; runpy.run_module(sys.argv[0], run_name="__main__")'


class WithoutTorch(unittest.TestCase):
    def run_module(self, module):
        env = dict(os.environ, PYTHONPATH=PYROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.run([sys.executable, "-c", NO_TORCH, module], env=env, capture_output=True, text=True)

    def test_demo_says_how_to_get_torch(self):
        for module in ("gpucache.demo.prefix_reuse", "gpucache.demo.bench_pages"):
            r = self.run_module(module)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertNotIn("Traceback", r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            for want in ("python -m " + module + ": gpucache.demo needs torch", "pip install torch", "python3-torch"):
                self.assertIn(want, r.stderr)

    def test_library_import_names_torch(self):
        env = dict(os.environ, PYTHONPATH=PYROOT)
        code = ('import sys; sys.modules["torch"] = None\n'
                'import gpucache.demo\n'                     # the package imports without torch
                'try:\n    import gpucache.demo.model\n'
                'except ModuleNotFoundError as e:\n    print(e.name, "|", e)\n')
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("torch | gpucache.demo needs torch", r.stdout)


@unittest.skipUnless(shutil.which("go") or os.environ.get("GPUCACHE_BIN"),
                     "no Go toolchain to build gpucached: install Go 1.26, or set GPUCACHE_BIN to a built gpucached")
class ShippedConfig(unittest.TestCase):
    def test_two_tenant_config_starts(self):
        from gpucached import Daemon

        work = tempfile.mkdtemp(prefix="gpucache-democonf-")
        for t in ("a", "b"):
            path = os.path.join(work, "tenant-%s.secret" % t)
            with open(path, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.chmod(path, 0o600)
        d = Daemon.start(extra_args=["--config", os.path.join(REPO, "examples", "demo", "two-tenants.yaml")], workdir=work)
        try:
            self.assertIn('auth="2 tenants"', d.log())
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
