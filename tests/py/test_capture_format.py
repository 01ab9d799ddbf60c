"""Capture format v1 as written by tools/precgate_capture.py, read back by the real precgate.

Pure standard library (CI has neither numpy nor torch): tensors are built as
Bf16 bit patterns. Tests that need numpy or torch skip, saying so. The tests that
run `precgate run` need the binary: $PRECGATE_BIN, else build/precgate in the tree.

    PRECGATE_BIN=$PWD/build/precgate python3 -m unittest discover -s tests/py -v
"""

import array
import importlib.util
import json
import os
import random
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import precgate_capture as pc  # noqa: E402
import record_vllm  # noqa: E402  (imports without torch / vLLM)

HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def precgate_bin():
    b = os.environ.get("PRECGATE_BIN") or os.path.join(ROOT, "build", "precgate")
    return b if os.path.isfile(b) and os.access(b, os.X_OK) else None


NEED_BIN = "precgate binary not found: set PRECGATE_BIN (e.g. $PWD/build/precgate)"

# The small capture every test uses: 2 layers, 2 sequences (the first with 3
# tokens of context), GQA 4:2, head_dim 16, sinks on layer 1, one output.
N_LAYERS, HQ, HKV, D = 2, 4, 2, 16
SEQ_Q, SEQ_KV = [2, 3], [5, 3]
TQ, TKV = sum(SEQ_Q), sum(SEQ_KV)
MODES = 3  # bf16, fp8kv@fixed, fp8qkv@fa3: the default profiles


def rand_bf16(rng, shape, scale=1.0):
    n = 1
    for s in shape:
        n *= s
    return pc.Bf16.from_floats((rng.gauss(0.0, scale) for _ in range(n)), shape)


def layer_tensors(rng, layer):
    return dict(q=rand_bf16(rng, (TQ, HQ, D)), k=rand_bf16(rng, (TKV, HKV, D)),
                v=rand_bf16(rng, (TKV, HKV, D)),
                sinks=[rng.gauss(0.0, 1.0) for _ in range(HQ)] if layer == 1 else None,
                outs={"mine": rand_bf16(rng, (TQ, HQ, D), 0.1)})


def writer_kwargs(**over):
    kw = dict(model="unit-test", seq_q=SEQ_Q, seq_kv=SEQ_KV, sm_scale=0.25,
              sliding_window=[0, 4], block_size=16)
    kw.update(over)
    return kw


def write_capture(path, seed=1, **over):
    rng = random.Random(seed)
    kw = writer_kwargs(**over)
    with pc.CaptureWriter(path, **kw) as w:
        for layer in range(N_LAYERS):
            w.write_layer(layer, **layer_tensors(rng, layer))
    return w.paths


def run_precgate(test, capture, db):
    r = subprocess.run([precgate_bin(), "run", "--capture", capture, "--db", db, "--backend", "cpu",
                        "--no-progress", "--threads", "2"], capture_output=True, text=True, timeout=300)
    test.assertEqual(r.returncode, 0, f"precgate run failed:\n{r.stdout}\n{r.stderr}")
    con = sqlite3.connect(db)
    try:
        run_id = con.execute("SELECT MAX(id) FROM runs").fetchone()[0]
        rows = con.execute("SELECT COUNT(*) FROM layer_metrics WHERE run_id = ?", (run_id,)).fetchone()[0]
        variants = {v for (v,) in con.execute(
            "SELECT DISTINCT variant FROM layer_metrics WHERE run_id = ?", (run_id,))}
        sources = {s for (s,) in con.execute(
            "SELECT DISTINCT scale_source FROM quant_stats WHERE run_id = ?", (run_id,))}
        status = con.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    finally:
        con.close()
    return rows, variants, sources, status


class Bf16Rounding(unittest.TestCase):
    def test_known_values(self):
        f = pc.f32_to_bf16_bits
        self.assertEqual(f(1.0), 0x3F80)
        self.assertEqual(f(-2.0), 0xC000)
        self.assertEqual(f(-0.0), 0x8000)
        bits = lambda u: struct.unpack("<f", struct.pack("<I", u))[0]  # noqa: E731
        self.assertEqual(f(bits(0x3F808000)), 0x3F80)   # tie, even stays
        self.assertEqual(f(bits(0x3F818000)), 0x3F82)   # tie, odd rounds up
        self.assertEqual(f(bits(0x3F808001)), 0x3F81)   # above the tie
        self.assertEqual(f(bits(0x7F7FFFFF)), 0x7F80)   # max float32 rounds to +Inf
        self.assertEqual(f(float("inf")), 0x7F80)
        self.assertEqual(f(1e39), 0x7F80)               # beyond float32
        self.assertEqual(f(bits(0x00000001)), 0x0000)   # smallest subnormal rounds to 0
        for nan_bits in (0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFF0000):
            b = f(bits(nan_bits))
            self.assertEqual(b & 0x7F80, 0x7F80)
            self.assertNotEqual(b & 0x007F, 0, f"NaN {nan_bits:#x} must stay NaN, got {b:#x}")
        for v in (1.0, -3.5, 0.15625, 65280.0):
            self.assertEqual(pc.bf16_bits_to_f32(f(v)), v)

    @unittest.skipUnless(HAVE_NUMPY, "numpy not installed: the numpy rounding is not compared")
    def test_numpy_agrees_with_pure_python(self):
        import numpy as np
        rng = np.random.default_rng(0)
        u = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
        u = np.concatenate([u, np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
                                         0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0, 0x80000000], np.uint32)])
        x = u.view(np.float32)
        got = pc.f32_to_bf16_bits_np(x)
        want = [pc.f32_to_bf16_bits(float(v)) for v in x]
        # float(v) of a NaN keeps its payload through struct in CPython, so compare all
        self.assertEqual(got.tolist(), want)


class Container(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def check_file(self, path):
        header, start = pc.read_header(path)
        self.assertEqual(start % 8, 0, "data buffer must start 8-byte aligned")
        entries = sorted((v["data_offsets"], k, v) for k, v in header.items() if k != "__metadata__")
        off = 0
        for (b, e), name, v in entries:
            self.assertEqual(b, off, f"{name}: hole or overlap")
            size = {"BF16": 2, "F32": 4}[v["dtype"]]
            n = 1
            for s in v["shape"]:
                n *= s
            self.assertEqual(e - b, n * size, name)
            self.assertEqual((start + b) % size, 0, f"{name}: not aligned to its element size")
            off = e
        self.assertEqual(os.path.getsize(path), start + off)
        return header

    def test_single_file(self):
        path = os.path.join(self.tmp.name, "cap.safetensors")
        self.assertEqual(write_capture(path), [path])
        header = self.check_file(path)
        meta = header["__metadata__"]
        self.assertEqual(meta["format"], "precgate.capture.v1")
        self.assertEqual(json.loads(meta["seq_q"]), SEQ_Q)
        self.assertEqual(json.loads(meta["seq_kv"]), SEQ_KV)
        self.assertEqual(json.loads(meta["sliding_window"]), [0, 4])
        self.assertEqual(json.loads(meta["sm_scale"]), 0.25)
        self.assertEqual(meta["block_size"], "16")
        self.assertTrue(all(isinstance(v, str) for v in meta.values()))
        self.assertEqual(header["layers.1.sinks"]["dtype"], "F32")
        self.assertEqual(header["layers.0.q"]["shape"], [TQ, HQ, D])
        self.assertEqual(header["layers.1.k"]["shape"], [TKV, HKV, D])
        self.assertIn("layers.0.out.mine", header)
        self.assertFalse([n for n in os.listdir(self.tmp.name) if n != "cap.safetensors"],
                         "spool / tmp files must be gone")

    def test_shards(self):
        d = os.path.join(self.tmp.name, "cap")
        paths = write_capture(d)
        self.assertEqual([os.path.basename(p) for p in paths],
                         ["layer-0000.safetensors", "layer-0001.safetensors"])
        self.assertEqual(sorted(os.listdir(d)), ["layer-0000.safetensors", "layer-0001.safetensors"])
        metas = []
        for layer, p in enumerate(paths):
            h = self.check_file(p)
            metas.append(h.pop("__metadata__"))
            self.assertTrue(all(k.startswith(f"layers.{layer}.") for k in h), sorted(h))
        self.assertEqual(metas[0], metas[1])

    def test_append_equals_write_layer(self):
        """Spooled token pieces (layers in any order) give the same bytes as whole tensors."""
        rng = random.Random(7)
        layers = [layer_tensors(rng, l) for l in range(N_LAYERS)]

        def files(p):
            return [p] if os.path.isfile(p) else [os.path.join(p, n) for n in sorted(os.listdir(p))]

        for a_name, b_name in (("a.safetensors", "b.safetensors"), ("dir_a", "dir_b")):
            pa, pb = os.path.join(self.tmp.name, a_name), os.path.join(self.tmp.name, b_name)
            with pc.CaptureWriter(pa, **writer_kwargs()) as w:
                for l, t in enumerate(layers):
                    w.write_layer(l, **t)
            w = pc.CaptureWriter(pb, **writer_kwargs())
            for l, t in reversed(list(enumerate(layers))):
                for lo, hi in ((0, 1), (1, TQ)):
                    w.append(l, q=t["q"][lo:hi], outs={"mine": t["outs"]["mine"][lo:hi]})
                for lo, hi in ((0, 5), (5, 6), (6, TKV)):
                    w.append(l, k=t["k"][lo:hi], v=t["v"][lo:hi])
                if t["sinks"] is not None:
                    w.set_sinks(l, t["sinks"])
            self.assertEqual(w.close(), files(pb))
            self.assertEqual(len(files(pa)), 1 if a_name.endswith(".safetensors") else N_LAYERS)
            for x, y in zip(files(pa), files(pb)):
                with open(x, "rb") as f1, open(y, "rb") as f2:
                    self.assertEqual(f1.read(), f2.read(), f"{x} differs from {y}")

    @unittest.skipUnless(precgate_bin(), NEED_BIN)
    def test_precgate_reads_single_and_sharded(self):
        want_rows = N_LAYERS * (MODES + 1) * (HQ + 1)
        for target in ("cap.safetensors", "shards"):
            path = os.path.join(self.tmp.name, target)
            write_capture(path)
            rows, variants, sources, status = run_precgate(self, path, os.path.join(self.tmp.name, target + ".db"))
            self.assertEqual(rows, want_rows, target)
            self.assertEqual(variants, {"bf16", "fp8kv@fixed", "fp8qkv@fa3", "ext:mine"})
            self.assertEqual(sources, {"amax"})
            self.assertEqual(status, "complete")

    @unittest.skipUnless(precgate_bin(), NEED_BIN)
    def test_precgate_reads_scales(self):
        path = os.path.join(self.tmp.name, "scaled")
        write_capture(path, q_scale=[0.01, 0.02], k_scale=[0.01, 0.02], v_scale=[0.01, 0.02])
        _, _, sources, _ = run_precgate(self, path, os.path.join(self.tmp.name, "s.db"))
        self.assertEqual(sources, {"capture"})


class Malformed(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.rng = random.Random(3)
        self.n = 0

    def path(self):
        self.n += 1
        return os.path.join(self.tmp.name, f"bad{self.n}.safetensors")

    def expect(self, pattern, layer_over=None, **meta):
        t = layer_tensors(self.rng, 1)
        t.update(layer_over or {})
        w = pc.CaptureWriter(self.path(), **writer_kwargs(**meta))
        with self.assertRaisesRegex(pc.CaptureError, pattern):
            w.write_layer(0, **layer_tensors(self.rng, 0))
            w.write_layer(1, **t)
            w.close()
        w.abort()

    def test_shapes(self):
        self.expect(r"layers\.1\.q: dimension 0 \(tokens\) is 4, expected 5 \(sum of seq_q\)",
                    {"q": rand_bf16(self.rng, (4, HQ, D))})
        self.expect(r"layers\.1\.k: dimension 0 \(tokens\) is 7, expected 8",
                    {"k": rand_bf16(self.rng, (7, HKV, D))})
        self.expect(r"kv_heads\) is 3, which does not divide the 4 query heads",
                    {"k": rand_bf16(self.rng, (TKV, 3, D)), "v": rand_bf16(self.rng, (TKV, 3, D))})
        self.expect(r"layers\.1\.v: dimension 1 \(kv_heads\) is 1, expected 2",
                    {"v": rand_bf16(self.rng, (TKV, 1, D))})
        self.expect(r"layers\.1\.k: dimension 2 \(head_dim\) is 8, expected 16",
                    {"k": rand_bf16(self.rng, (TKV, HKV, 8))})
        self.expect(r"layers\.1\.q: shape \[5, 64\] has 2 dimensions, expected 3",
                    {"q": rand_bf16(self.rng, (TQ, HQ * D))})
        self.expect(r"layers\.1\.sinks: shape \[3\], expected \[4\]", {"sinks": [0.0, 0.0, 0.0]})
        self.expect(r"layers\.1\.out\.mine: shape \[5, 2, 16\], expected \[5, 4, 16\]",
                    {"outs": {"mine": rand_bf16(self.rng, (TQ, 2, D))}})

    def test_values_and_names(self):
        k = rand_bf16(self.rng, (TKV, HKV, D))
        k.data[HKV * D + 3] = 0x7FC0
        self.expect(r"layers\.1\.k: NaN at token 1, head 0, dim 3", {"k": k})
        self.expect(r"layers\.1\.sinks: \+Inf at element 2", {"sinks": [0.0, 1.0, float("inf"), 0.0]})
        self.expect(r"output name 'my out'", {"outs": {"my out": rand_bf16(self.rng, (TQ, HQ, D))}})
        nan_out = rand_bf16(self.rng, (TQ, HQ, D))
        nan_out.data[0] = 0x7FC0   # an implementation's NaN output is data, not a malformed file
        w = pc.CaptureWriter(self.path(), **writer_kwargs())
        w.write_layer(0, **dict(layer_tensors(self.rng, 0), outs={"x": nan_out}))
        w.write_layer(1, **dict(layer_tensors(self.rng, 1), outs={"x": nan_out}))
        w.close()

    def test_metadata(self):
        self.expect(r"'seq_kv'\[0\] is 1, expected at least seq_q\[0\] = 2", seq_kv=[1, 7])
        self.expect(r"'seq_kv' has 1 entries, expected 2", seq_kv=[8])
        self.expect(r"'sliding_window' has 3 entries, expected 2", sliding_window=[0, 0, 0])
        self.expect(r"not k_scale and v_scale", q_scale=[1.0, 1.0])
        self.expect(r"'k_scale\[1\]' is 0.0", q_scale=[1, 1], k_scale=[1, 0.0], v_scale=[1, 1])
        self.expect(r"'block_size' is 48", block_size=48)
        self.expect(r"'sm_scale' is -1", sm_scale=-1)

    def test_layers_and_target(self):
        w = pc.CaptureWriter(self.path(), **writer_kwargs())
        w.write_layer(1, **layer_tensors(self.rng, 1))
        with self.assertRaisesRegex(pc.CaptureError, r"layer 0 has no tensors, but layers\.1\.\* exist"):
            w.close()
        w.abort()
        with self.assertRaisesRegex(pc.CaptureError, r"layer 4096 is outside"):
            pc.CaptureWriter(self.path(), **writer_kwargs()).append(4096, q=rand_bf16(self.rng, (1, 1, 1)))
        d = os.path.join(self.tmp.name, "old")
        write_capture(d)
        with self.assertRaisesRegex(pc.CaptureError, r"already holds 2 shard"):
            pc.CaptureWriter(d, **writer_kwargs())
        write_capture(d, overwrite=True)
        self.assertEqual(len(os.listdir(d)), 2)
        # a shard written immediately freezes the metadata
        d2 = os.path.join(self.tmp.name, "frozen")
        w = pc.CaptureWriter(d2, **writer_kwargs())
        w.write_layer(0, **layer_tensors(self.rng, 0))
        w.sm_scale = 0.5
        with self.assertRaisesRegex(pc.CaptureError, r"\['sm_scale'\] changed after shards were written"):
            w.write_layer(1, **layer_tensors(self.rng, 1))
        w.abort()


class ReaderAgrees(unittest.TestCase):
    """What the writer refuses, precgate refuses too (written here with the check off)."""

    @unittest.skipUnless(precgate_bin(), NEED_BIN)
    def test_nan_in_k_refused_by_precgate(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        rng = random.Random(5)
        path = os.path.join(tmp.name, "nan")
        with pc.CaptureWriter(path, check_finite=False, **writer_kwargs()) as w:
            for l in range(N_LAYERS):
                t = layer_tensors(rng, l)
                if l == 1:
                    t["k"].data[HKV * D * 2 + D + 1] = 0x7FC0
                w.write_layer(l, **t)
        r = subprocess.run([precgate_bin(), "run", "--capture", path, "--db", os.path.join(tmp.name, "n.db"),
                            "--backend", "cpu", "--no-progress"], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("layer-0001.safetensors: tensor 'layers.1.k': NaN at token 2, head 1, dim 1", r.stderr)


class FakeImpl:
    def __init__(self, window, sinks):
        self.scale = 0.25
        self.sliding_window = (window - 1, 0) if window else (-1, -1)   # FlashAttentionImpl's form
        self.sinks = sinks


class Attention:
    """A stand-in for vllm's Attention layer: same attributes, forward hooks with kwargs,
    and a forward over 2-D [tokens, heads * head_dim] Bf16 tensors."""

    def __init__(self, layer, window, sinks, q_len_pad=0):
        self.layer_name = f"model.layers.{layer}.self_attn.attn"
        self.num_heads, self.num_kv_heads, self.head_size = HQ, HKV, D
        self.kv_cache_dtype = "fp8_e4m3"
        self.impl = FakeImpl(window, sinks)
        self._q_scale_float, self._k_scale_float, self._v_scale_float = 0.02, 0.03 + layer, 0.04
        self._hooks = []

    def register_forward_hook(self, hook, with_kwargs=False):
        assert with_kwargs
        self._hooks.append(hook)

        class Handle:
            def remove(h):
                self._hooks.remove(hook)
        return Handle()

    def __call__(self, query, key, value, output_shape=None):
        out = pc.Bf16([(b ^ 0x0001) for b in query.data], query.shape)  # "attention": q with the last bit flipped
        for h in self._hooks:
            h(self, (query, key), {"value": value}, out)
        return out


class FakeModel:
    def __init__(self):
        self.layers = [Attention(0, 0, None), Attention(1, 4, [0.5, -0.5, 1.0, 0.0])]

    def named_modules(self):
        yield "", self
        for i, m in enumerate(self.layers):
            yield f"model.layers.{i}.self_attn.attn", m


class VllmHook(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_hook_with_fake_attention(self):
        rng = random.Random(11)
        path = os.path.join(self.tmp.name, "vllm-cap")
        rec = pc.PrefillRecorder(pc.CaptureWriter(path, model="fake-vllm", block_size=16), out_name="vllm-fp8")
        model = FakeModel()
        vrec = record_vllm.VllmRecorder(rec)
        self.assertEqual(vrec.attach(model), 2)
        expect_k = {0: [], 1: []}
        expect_q = {0: [], 1: []}
        # a warm-up forward outside any sequence is ignored
        for m in model.layers:
            m(rand_bf16(rng, (4, HQ * D)), rand_bf16(rng, (4, HKV * D)), rand_bf16(rng, (4, HKV * D)))
        for total, chunks in ((5, (3, 2)), (3, (3,))):
            rec.begin_sequence(total)
            for i, t in enumerate(chunks):
                for l, m in enumerate(model.layers):
                    q, k, v = (rand_bf16(rng, (t, HQ * D)), rand_bf16(rng, (t, HKV * D)),
                               rand_bf16(rng, (t, HKV * D)))
                    m(q, k, v)
                    expect_k[l].extend(k.data)
                    if i == len(chunks) - 1:
                        expect_q[l].extend(q.data)
            # a decode step after the prompt is ignored
            for m in model.layers:
                m(rand_bf16(rng, (1, HQ * D)), rand_bf16(rng, (1, HKV * D)), rand_bf16(rng, (1, HKV * D)))
            rec.end_sequence()
        vrec.detach()
        self.assertEqual((rec.seq_q, rec.seq_kv), ([2, 3], [5, 3]))
        self.assertEqual(rec.ignored, 2 + 2 * 2)
        paths = rec.close()
        self.assertEqual(len(paths), 2)
        h1, start = pc.read_header(paths[1])
        meta = h1["__metadata__"]
        self.assertEqual(json.loads(meta["sliding_window"]), [0, 4])
        self.assertEqual(json.loads(meta["k_scale"]), [0.03, 1.03])
        self.assertEqual(json.loads(meta["sm_scale"]), 0.25)
        self.assertEqual(h1["layers.1.k"]["shape"], [8, HKV, D])
        self.assertEqual(h1["layers.1.q"]["shape"], [5, HQ, D])
        self.assertEqual(h1["layers.1.sinks"]["shape"], [HQ])
        with open(paths[1], "rb") as f:
            blob = f.read()
        for name, want in (("layers.1.k", expect_k[1]), ("layers.1.q", expect_q[1])):
            b, e = h1[name]["data_offsets"]
            self.assertEqual(array.array("H", blob[start + b:start + e]).tolist(), want, name)
        if precgate_bin():
            rows, variants, sources, _ = run_precgate(self, path, os.path.join(self.tmp.name, "v.db"))
            self.assertEqual(rows, N_LAYERS * (MODES + 1) * (HQ + 1))
            self.assertEqual(variants, {"bf16", "fp8kv@fixed", "fp8qkv@fa3", "ext:vllm-fp8"})
            self.assertEqual(sources, {"capture"})

    def test_overrun_is_an_error(self):
        rec = pc.PrefillRecorder(pc.CaptureWriter(os.path.join(self.tmp.name, "x"), model="m"))
        m = Attention(0, 0, None)
        record_vllm.VllmRecorder(rec).attach(type("M", (), {"named_modules": lambda s: iter([("a", m)])})())
        rec.begin_sequence(3)
        rng = random.Random(0)
        with self.assertRaisesRegex(pc.CaptureError, r"overruns the sequence's 3 tokens"):
            m(rand_bf16(rng, (4, HQ * D)), rand_bf16(rng, (4, HKV * D)), rand_bf16(rng, (4, HKV * D)))
        rec.writer.abort()

    def test_helpers(self):
        self.assertEqual(record_vllm.layer_index("model.layers.17.self_attn.attn"), 17)
        self.assertIsNone(record_vllm.layer_index("lm_head"))
        self.assertEqual(record_vllm.layer_window(Attention(0, 128, None)), 128)
        self.assertEqual(record_vllm.layer_window(Attention(0, 0, None)), 0)


@unittest.skipUnless(HAVE_TORCH, "torch not installed: torch tensor inputs are not tested")
class TorchInputs(unittest.TestCase):
    def test_bf16_bits_exact_and_float_rounding(self):
        import torch
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        g = torch.Generator().manual_seed(0)
        q = torch.randn(TQ, HQ, D, generator=g).to(torch.bfloat16)
        k32 = torch.randn(TKV, HKV, D, generator=g)
        path = os.path.join(tmp.name, "t.safetensors")
        with pc.CaptureWriter(path, **writer_kwargs()) as w:
            for l in range(N_LAYERS):
                w.write_layer(l, q=q, k=k32, v=k32.to(torch.bfloat16), sinks=torch.zeros(HQ))
        h, start = pc.read_header(path)
        with open(path, "rb") as f:
            blob = f.read()
        b, e = h["layers.0.q"]["data_offsets"]
        self.assertEqual(blob[start + b:start + e], q.view(torch.int16).numpy().tobytes())
        b, e = h["layers.0.k"]["data_offsets"]
        b2, e2 = h["layers.0.v"]["data_offsets"]
        self.assertEqual(blob[start + b:start + e], blob[start + b2:start + e2],
                         "torch's bf16 rounding of float32 must match the stored bits")


if __name__ == "__main__":
    unittest.main()
