"""tools/record_hf.py: the attention tap, and real recordings of tiny random-weight models.

* TapMechanics (needs torch only): a stand-in for a transformers modeling module
  (an `eager_attention_forward` global, an ALL_ATTENTION_FUNCTIONS registry with
  transformers' local/global mapping, a sliding-window cache that crops) checks
  that the tap records q/k/v after RoPE as the attention function gets them, that
  chunked prefill yields the whole prompt's keys in order, and that everything is
  restored afterwards.
* RealModels (needs torch and transformers): records a 2-layer random-weight
  Llama and a 2-layer gpt-oss on the CPU with --chunk and --outputs eager, checks
  the metadata and that `precgate run` loads them, and that the model's own eager
  output agrees with precgate's fp64 reference on the recorded q/k/v (a wrong
  capture, e.g. before RoPE or misaligned keys, would not).

Skipped, saying why, where torch or transformers is missing (CI has neither).
"""

import importlib.util
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import types
import unittest
from collections.abc import MutableMapping
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import precgate_capture as pc  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_TRANSFORMERS = HAVE_TORCH and importlib.util.find_spec("transformers") is not None
TRACES = os.path.join(ROOT, "evals", "demo", "aime-style-demo.jsonl")


def precgate_bin():
    b = os.environ.get("PRECGATE_BIN") or os.path.join(ROOT, "build", "precgate")
    return b if os.path.isfile(b) and os.access(b, os.X_OK) else None


@unittest.skipUnless(HAVE_TORCH, "torch not installed: the HF attention tap is not tested")
class TapMechanics(unittest.TestCase):
    H, HKV, D, W = 4, 2, 8, 6

    def setUp(self):
        import torch
        self.torch = torch
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.calls = []

        class Registry(MutableMapping):   # transformers' GeneralInterface semantics
            _global_mapping = {}

            def __init__(self):
                self._local_mapping = {}

            def __getitem__(self, k):
                return self._local_mapping[k] if k in self._local_mapping else self._global_mapping[k]

            def __setitem__(self, k, v):
                self._local_mapping[k] = v

            def __delitem__(self, k):
                del self._local_mapping[k]

            def __iter__(self):
                return iter({**self._global_mapping, **self._local_mapping})

            def __len__(self):
                return len(set(self._global_mapping) | set(self._local_mapping))

        def attend(module, query, key, value, attention_mask, scaling=None, sliding_window=None, **kw):
            self.calls.append(module.layer_idx)
            g = query.shape[1] // key.shape[1]
            k = key.repeat_interleave(g, dim=1).float()
            v = value.repeat_interleave(g, dim=1).float()
            s = query.float() @ k.transpose(-1, -2) * scaling
            t, tk = query.shape[2], key.shape[2]
            qi = torch.arange(tk - t, tk)[:, None]
            ki = torch.arange(tk)[None, :]
            bad = ki > qi
            if sliding_window:
                bad |= ki <= qi - sliding_window
            s = s.masked_fill(bad, float("-inf"))
            if module.sinks is not None:    # gpt-oss: a per-head sink logit joins the softmax
                sink = module.sinks.float().view(1, -1, 1, 1).expand(1, query.shape[1], t, 1)
                p = torch.cat([s, sink], -1).softmax(-1)[..., :-1]
            else:
                p = s.softmax(-1)
            return (p @ v).to(query.dtype).transpose(1, 2).contiguous(), None

        Registry._global_mapping = {"sdpa": attend}
        self.registry = Registry()
        modeling = types.ModuleType("fake_modeling")
        modeling.eager_attention_forward = attend
        self.modeling = modeling
        mu = types.ModuleType("transformers.modeling_utils")
        mu.ALL_ATTENTION_FUNCTIONS = self.registry
        tf = types.ModuleType("transformers")
        tf.modeling_utils = mu
        patcher = mock.patch.dict(sys.modules, {"transformers": tf, "transformers.modeling_utils": mu,
                                                "fake_modeling": modeling})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.original = attend

    def make_model(self, impl):
        torch, H, HKV, D, W = self.torch, self.H, self.HKV, self.D, self.W
        registry, modeling = self.registry, self.modeling

        def rope(x, pos):   # rotate pairs by angle pos / 10^(i/D)
            half = x.shape[-1] // 2
            f = pos[:, None].float() / (10.0 ** (torch.arange(half).float() / half))
            c, s = f.cos()[:, None, :], f.sin()[:, None, :]   # [T, 1, half] over heads
            a, b = x[..., :half].float(), x[..., half:].float()
            return torch.cat([a * c - b * s, a * s + b * c], -1).to(x.dtype)

        class FakeAttention(torch.nn.Module):
            def __init__(self, layer_idx, window):
                super().__init__()
                self.layer_idx, self.scaling = layer_idx, D ** -0.5
                self.sliding_window = window or None
                self.qkv = torch.nn.Linear(16, (H + 2 * HKV) * D, bias=False, dtype=torch.bfloat16)
                self.sinks = torch.nn.Parameter(torch.randn(H)) if window else None
                self.recorded = []    # (q, k, v) after RoPE of each call, as the model made them

            def forward(self, x, pos, cache):
                qkv = self.qkv(x)
                q, k, v = qkv.split([H * D, HKV * D, HKV * D], -1)
                q = rope(q.view(1, -1, H, D), pos).transpose(1, 2)
                k = rope(k.view(1, -1, HKV, D), pos).transpose(1, 2)
                v = v.view(1, -1, HKV, D).transpose(1, 2)
                self.recorded.append((q, k, v))
                old_k, old_v = cache.get(self.layer_idx, (k[:, :, :0], v[:, :, :0]))
                full_k, full_v = torch.cat([old_k, k], 2), torch.cat([old_v, v], 2)
                keep = W - 1 if self.sliding_window else full_k.shape[2]   # crops like HF's sliding layer
                cache[self.layer_idx] = (full_k[:, :, -keep:], full_v[:, :, -keep:])
                fn = modeling.eager_attention_forward if impl == "eager" else registry[impl]
                return fn(self, q, full_k, full_v, None, scaling=self.scaling,
                          sliding_window=self.sliding_window)[0]

        FakeAttention.__module__ = "fake_modeling"

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.config = types.SimpleNamespace(sliding_window=W,
                                                    layer_types=["full_attention", "sliding_attention"])
                self.layers = torch.nn.ModuleList([FakeAttention(0, 0), FakeAttention(1, W)])

        torch.manual_seed(0)
        return Model()

    def run_prefill(self, model, tokens, chunk):
        torch = self.torch
        x = torch.randn(1, tokens, 16, dtype=torch.bfloat16)
        cache = {}
        for a, b in pc.chunk_bounds(tokens, chunk):
            for layer in model.layers:
                layer(x[:, a:b], torch.arange(a, b), cache)

    def test_records_after_rope_chunked(self):
        import record_hf
        torch = self.torch
        for impl in ("eager", "sdpa"):
            model = self.make_model(impl)
            path = os.path.join(self.tmp.name, impl)
            rec = pc.PrefillRecorder(pc.CaptureWriter(path, model="fake"), out_name="mine")
            with torch.inference_mode(), record_hf.HFAttentionTap(model, rec):
                self.assertIsNot(self.modeling.eager_attention_forward, self.original)
                for tokens, chunk in ((13, 5), (4, 0)):
                    rec.begin_sequence(tokens)
                    self.run_prefill(model, tokens, chunk)
                    rec.end_sequence()
            self.assertIs(self.modeling.eager_attention_forward, self.original, "tap must restore")
            self.assertEqual(dict(self.registry._local_mapping), {}, "tap must restore the registry")
            self.assertEqual((rec.seq_q, rec.seq_kv), ([3, 4], [13, 4]))
            self.assertEqual(rec.windows, {0: 0, 1: self.W})
            rec.close()
            for layer in model.layers:
                h, start = pc.read_header(os.path.join(path, pc.shard_name(layer.layer_idx)))
                with open(os.path.join(path, pc.shard_name(layer.layer_idx)), "rb") as f:
                    blob = f.read()

                def stored(name):
                    b, e = h[f"layers.{layer.layer_idx}.{name}"]["data_offsets"]
                    return blob[start + b:start + e]

                # keys: every call's new tokens, [T, Hkv, D], in order; queries: each sequence's last call
                calls = layer.recorded
                want_k = torch.cat([k[0].transpose(0, 1) for _, k, _ in calls])
                want_q = torch.cat([calls[2][0][0].transpose(0, 1), calls[3][0][0].transpose(0, 1)])
                self.assertEqual(stored("k"), want_k.contiguous().view(torch.int16).numpy().tobytes())
                self.assertEqual(stored("q"), want_q.contiguous().view(torch.int16).numpy().tobytes())
                self.assertEqual("layers.%d.sinks" % layer.layer_idx in h, layer.sinks is not None)
                self.assertEqual(json.loads(h["__metadata__"]["sm_scale"]), self.D ** -0.5)
                self.assertIn(f"layers.{layer.layer_idx}.out.mine", h)
            if precgate_bin():
                db = os.path.join(self.tmp.name, impl + ".db")
                r = subprocess.run([precgate_bin(), "run", "--capture", path, "--db", db, "--backend", "cpu",
                                    "--no-progress"], capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr)
                con = sqlite3.connect(db)
                worst = con.execute("SELECT MAX(rel_l2) FROM layer_metrics WHERE variant = 'ext:mine' "
                                    "AND head = -1").fetchone()[0]
                con.close()
                # the fake's own attention (fp32 math, one bf16 rounding) vs precgate's fp64
                # reference on the recorded q/k/v/sinks/window: agree to bf16 precision
                self.assertLess(worst, 0.01, worst)
                print(f"[{impl}: worst ext:mine rel_l2 {worst:.2e}]", end=" ", file=sys.stderr)


@unittest.skipUnless(HAVE_TRANSFORMERS, "torch and transformers not both installed: no real HF recording")
class RealModels(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def record(self, model, out, *extra):
        cmd = [sys.executable, os.path.join(ROOT, "tools", "record_hf.py"), "--random-weights",
               "--model", model, "--num-layers", "2", "--traces", TRACES, "--limit", "2",
               "--with-completion", "--max-tokens", "200", "--chunk", "64", "--outputs", "eager",
               "--device", "cpu", "--out", out, *extra]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(r.returncode, 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
        return pc.read_header(os.path.join(out, pc.shard_name(1)))[0]

    def sweep(self, path, hq):
        if not precgate_bin():
            self.skipTest("precgate binary not found: set PRECGATE_BIN")
        db = os.path.join(self.tmp.name, os.path.basename(path) + ".db")
        r = subprocess.run([precgate_bin(), "run", "--capture", path, "--db", db, "--backend", "cpu",
                            "--no-progress"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        con = sqlite3.connect(db)
        rows = con.execute("SELECT COUNT(*) FROM layer_metrics").fetchone()[0]
        ext = con.execute("SELECT MAX(rel_l2) FROM layer_metrics WHERE variant = 'ext:eager' "
                          "AND head = -1").fetchone()[0]
        con.close()
        self.assertEqual(rows, 2 * (3 + 1) * (hq + 1))
        self.assertLess(ext, 0.05, "the model's eager output must match precgate's reference "
                                   "on the recorded q/k/v")

    def test_tiny_llama(self):
        out = os.path.join(self.tmp.name, "llama")
        h = self.record("llama", out)
        meta = h["__metadata__"]
        self.assertEqual(json.loads(meta["seq_kv"]), [200, 200])
        self.assertEqual(json.loads(meta["seq_q"]), [8, 8])            # 200 = 3 * 64 + 8
        self.assertNotIn("sliding_window", meta)
        self.assertNotIn("layers.1.sinks", h)
        self.assertAlmostEqual(json.loads(meta["sm_scale"]), 1 / math.sqrt(64), places=6)
        self.assertEqual(h["layers.1.q"]["shape"], [16, 8, 64])
        self.assertEqual(h["layers.1.k"]["shape"], [400, 2, 64])
        self.sweep(out, 8)

    def test_tiny_gpt_oss(self):
        out = os.path.join(self.tmp.name, "gpt-oss")
        h = self.record("gpt-oss", out)
        meta = h["__metadata__"]
        self.assertEqual(json.loads(meta["sliding_window"]), [128, 0])
        self.assertEqual((h["layers.1.sinks"]["dtype"], h["layers.1.sinks"]["shape"]), ("F32", [64]))
        self.assertEqual(h["layers.1.k"]["shape"], [400, 8, 64])
        self.sweep(out, 64)


if __name__ == "__main__":
    unittest.main()
