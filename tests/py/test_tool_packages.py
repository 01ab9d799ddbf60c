"""The recorders without their heavy packages: one line naming the package, exit 1, no traceback.

torch, transformers and vllm may or may not be installed where the tests run, so each case hides
the package from the child Python (sys.modules[name] = None makes importlib.util.find_spec
report it missing and `import name` fail, as on a machine without it) and runs the tool's main.
"""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")

RUNNER = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
script = sys.argv[2]
sys.argv = [script] + sys.argv[3:]
sys.path.insert(0, {tools!r})
runpy.run_path(script, run_name="__main__")
""".format(tools=TOOLS)


def run_without(hidden, tool, *args):
    return subprocess.run([sys.executable, "-c", RUNNER, ",".join(hidden), os.path.join(TOOLS, tool), *args],
                          capture_output=True, text=True, timeout=60)


class MissingPackages(unittest.TestCase):
    def check(self, r, tool, package):
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(f"{tool}: error: the Python package '{package}' is not installed", lines[0])

    def test_record_hf_without_torch(self):
        self.check(run_without(["torch"], "record_hf.py", "--random-weights", "--model", "gpt-oss",
                               "--out", "/nonexistent/x.safetensors"), "record_hf.py", "torch")

    def test_record_hf_without_transformers(self):
        r = run_without(["transformers"], "record_hf.py", "--model", "m", "--out", "/nonexistent/x")
        # torch is checked first; where torch is missing too, that is the line
        try:
            import torch  # noqa: F401
            self.check(r, "record_hf.py", "transformers")
        except ImportError:
            self.check(r, "record_hf.py", "torch")

    def test_record_vllm_without_vllm(self):
        r = run_without(["vllm"], "record_vllm.py", "--model", "m", "--out", "/nonexistent/x")
        try:
            import torch  # noqa: F401
            self.check(r, "record_vllm.py", "vllm")
        except ImportError:
            self.check(r, "record_vllm.py", "torch")

    def test_help_needs_no_package(self):
        r = run_without(["torch", "transformers"], "record_hf.py", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--model", r.stdout)


if __name__ == "__main__":
    unittest.main()
