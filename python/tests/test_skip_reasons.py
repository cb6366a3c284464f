"""Every skip in python/tests and python/engine_tests says why and what to do.

CI prints how many Python tests were skipped; a skip is only useful when its
reason says what is missing and how to get it ("torch is not installed:
apt-get install python3-torch"), or where the test runs instead ("run by
cmd/gpucached's TestRESPRedisPy"). This test reads the source with ast and
fails on a skip (unittest.skip, skipIf, skipUnless, TestCase.skipTest,
raise unittest.SkipTest) whose reason is missing, empty, or names no remedy.
Standard library only.
"""

import ast
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DIRS = [HERE, os.path.join(os.path.dirname(HERE), "engine_tests")]

# A remedy: what to install, what to run or set, or where the test runs.
REMEDY = re.compile(r"apt-get|pip install|scripts/|\bruns?\b|\bset\b|go build|go test|GPUCACHE_|CI=true")

# The index of the reason among a skip call's positional arguments.
REASON_ARG = {"skip": 0, "skipTest": 0, "SkipTest": 0, "skipIf": 1, "skipUnless": 1}


def call_name(node):
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def literal_text(node):
    """The string literal parts of a reason expression, or None when the
    expression is not a string."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        left, right = literal_text(node.left), literal_text(node.right)
        if left is None and right is None:
            return None
        return (left or "") + (right or "")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return literal_text(node.func.value)
    return None


def problems(path):
    """(line, problem) for each skip in the file at path that lacks a
    usable reason."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        if name not in REASON_ARG:
            continue
        reason = None
        for kw in node.keywords:
            if kw.arg in ("reason", "msg"):
                reason = kw.value
        if reason is None and len(node.args) > REASON_ARG[name]:
            reason = node.args[REASON_ARG[name]]
        if reason is None:
            out.append((node.lineno, "%s without a reason" % name))
            continue
        text = literal_text(reason)
        if text is None:
            # A variable: the reason is built elsewhere; it must at least
            # be a name a reader can follow.
            if not isinstance(reason, (ast.Name, ast.Attribute)):
                out.append((node.lineno, "%s: the reason is not a string" % name))
            continue
        if not text.strip():
            out.append((node.lineno, "%s: empty reason" % name))
        elif not REMEDY.search(text):
            out.append((node.lineno, "%s(%r): the reason names no remedy (what to install, run or set, "
                        "or where the test runs instead)" % (name, text)))
    return out


class SkipReasons(unittest.TestCase):
    def test_every_skip_says_what_to_do(self):
        found = []
        scanned = 0
        for d in DIRS:
            for name in sorted(os.listdir(d)):
                if name.endswith(".py"):
                    scanned += 1
                    path = os.path.join(d, name)
                    found += ["%s:%d: %s" % (os.path.relpath(path, os.path.dirname(HERE)), line, p)
                              for line, p in problems(path)]
        self.assertGreater(scanned, 10, "found too few test files under %s" % DIRS)
        self.assertEqual(found, [], "skips without a usable reason:\n" + "\n".join(found))

    def test_checker_catches_bare_skips(self):
        import tempfile
        src = (
            "import unittest\n"
            "@unittest.skipIf(True)\n"                                  # no reason
            "class A(unittest.TestCase):\n"
            "    def test_a(self):\n"
            "        self.skipTest('')\n"                               # empty
            "    def test_b(self):\n"
            "        raise unittest.SkipTest('torch missing')\n"        # no remedy
            "    @unittest.skip('needs a GPU: run on a GPU host')\n"    # fine
            "    def test_c(self):\n"
            "        self.skipTest('numpy is not installed: apt-get install python3-numpy')\n"  # fine
        )
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(src)
        try:
            got = [line for line, _ in problems(f.name)]
        finally:
            os.unlink(f.name)
        self.assertEqual(sorted(got), [2, 5, 7])


if __name__ == "__main__":
    unittest.main()
