"""The identity parts of gpucache.vllm_connector that need no engine run:
the model files' fingerprint and the per-request adapter field."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

try:
    from gpucache import vllm_connector as vc
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class IdentityTest(unittest.TestCase):
    def test_fingerprint_follows_the_weights(self):
        with tempfile.TemporaryDirectory() as d:
            def write(name, data):
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
            write("config.json", b"{}")
            write("model.safetensors", b"weights-a")
            write("notes.txt", b"ignored")
            a = vc.files_fingerprint(d, ("config.json", ".safetensors"))
            vc._FINGERPRINTS.clear()
            write("notes.txt", b"still ignored")
            self.assertEqual(vc.files_fingerprint(d, ("config.json", ".safetensors")), a)
            vc._FINGERPRINTS.clear()
            write("model.safetensors", b"weights-b")  # same size, other bytes
            self.assertNotEqual(vc.files_fingerprint(d, ("config.json", ".safetensors")), a)
            vc._FINGERPRINTS.clear()

    def test_adapter_binds_lora_and_salt(self):
        class Lora:
            lora_name, lora_int_id, lora_path = "sql", 3, "/adapters/sql"
        self.assertEqual(vc._adapter_of(None, None), "")
        plain, salted = vc._adapter_of(None, "s1"), vc._adapter_of(None, "s2")
        self.assertNotEqual(plain, salted)
        self.assertTrue(plain.startswith("salt:"))
        self.assertEqual(vc._adapter_of(Lora(), None), "lora:sql#3@/adapters/sql")
        self.assertNotEqual(vc._adapter_of(Lora(), "s1"), vc._adapter_of(Lora(), None))


if __name__ == "__main__":
    unittest.main()
