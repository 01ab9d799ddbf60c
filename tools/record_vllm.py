#!/usr/bin/env python3
"""record_vllm: record a vLLM deployment's prefill attention inputs as a precgate capture.

What is captured, per attention layer and prompt: the query/key/value tensors
that vLLM's `Attention` layer receives, i.e. after the model applied RoPE (vLLM
models call `self.attn(q, k, v)` with rotated q/k), exactly as the backend
gets them; the layer's scales `_q_scale_float`, `_k_scale_float`,
`_v_scale_float` (when the KV cache is fp8, or --scales always); its sliding
window, softmax scale (`impl.scale`) and sinks (gpt-oss: `impl.sinks`); and,
with --outputs NAME, the layer's own output in the server's current mode
(stored as `layers.L.out.NAME`, swept as variant `ext:NAME`).

How: a forward hook (`register_forward_hook(..., with_kwargs=True)`) on every
`Attention` module. The hook reads the module's positional/keyword arguments
(query, key, value; 2-D [tokens, heads*head_dim] or 3-D) and its return value;
it never changes them. The hook logic (VllmAttentionHook) only uses
`.shape`, slicing along tokens and `.reshape`, so the tests drive it with a fake
Attention module and pure-Python tensors (tests/py/test_capture_format.py).

Written against vLLM's public Attention layer as found in
`vllm/attention/layer.py` (vLLM 0.8 - 0.13: forward(query, key, value,
output_shape=None), attributes num_heads, num_kv_heads, head_size,
layer_name, kv_cache_dtype, sliding_window, impl.scale, impl.sinks,
_q/_k/_v_scale_float) and its later home `vllm/model_executor/layers/
attention/attention.py` after the 2026 attention restructuring (vLLM PR
#31916; same forward signature and attributes). Version numbers are from the
source history, not from running vLLM here (it cannot run in this repository's
CI); every attribute is read defensively, with the fallbacks named below.

Running it (one GPU, tensor parallel 1, the engine in this process):
  * VLLM_ENABLE_V1_MULTIPROCESSING=0 is set before vLLM is imported, so the
    engine core, and the model the hooks sit on, live in this process;
  * enforce_eager=True: no torch.compile/CUDA graphs, so the Python hook runs
    on every forward (under compilation it would be traced away);
  * enable_prefix_caching=False: every prompt token passes through the layers,
    so the context's keys and values are seen (the recorder checks the count);
  * prompts are run one at a time with max_tokens=1, so each forward holds one
    sequence's chunk; with --chunk N the engine prefills in chunks of N tokens
    (max_num_batched_tokens=N) and the capture's queries are the last chunk's,
    its keys/values the whole prompt's (context = prompt - last chunk).
  * Calls outside a recorded prompt (profiling, warm-up) are ignored.

  python3 tools/record_vllm.py --model openai/gpt-oss-20b --traces evals/demo/aime-style-demo.jsonl \\
      --limit 4 --chunk 2048 --kv-cache-dtype fp8 --outputs vllm-fp8 --out captures/gpt-oss-fp8/
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import precgate_capture as pc  # noqa: E402

_INT_PART = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")
_ATTN_ATTRS = ("impl", "num_heads", "num_kv_heads", "head_size", "layer_name")


def layer_index(layer_name):
    """The layer number in a vLLM layer name ("model.layers.7.self_attn.attn" -> 7), or None."""
    m = _INT_PART.search(layer_name or "")
    return int(m.group(1)) if m else None


def _vllm_attention_classes():
    classes = []
    for mod, name in (("vllm.model_executor.layers.attention.attention", "Attention"),
                      ("vllm.model_executor.layers.attention", "Attention"),
                      ("vllm.attention.layer", "Attention")):
        try:
            cls = getattr(__import__(mod, fromlist=[name]), name)
        except Exception:  # noqa: BLE001 - vLLM absent or moved: fall back to duck typing
            continue
        if cls not in classes:
            classes.append(cls)
    return tuple(classes)


def is_vllm_attention(module, classes=None):
    """True for a vLLM decoder Attention layer (by class, or by name and attributes)."""
    classes = _vllm_attention_classes() if classes is None else classes
    if classes and isinstance(module, classes):
        return True
    return type(module).__name__ == "Attention" and all(hasattr(module, a) for a in _ATTN_ATTRS)


def _as_float(x):
    if x is None:
        return None
    if hasattr(x, "item"):
        x = x.item() if getattr(x, "numel", lambda: 1)() == 1 else None
    try:
        return float(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def layer_scales(layer):
    """(q, k, v) scales: _q/_k/_v_scale_float, else the _q/_k/_v_scale tensors, else 1.0."""
    out = []
    for t in ("q", "k", "v"):
        s = _as_float(getattr(layer, f"_{t}_scale_float", None))
        if s is None:
            s = _as_float(getattr(layer, f"_{t}_scale", None))
        out.append(1.0 if s is None else s)
    return tuple(out)


def layer_window(layer):
    """Keys a query sees incl. itself (0 = full): layer.sliding_window (an int), else the
    backend's impl.sliding_window ((left, right) with left = W - 1, or (-1, -1) for none)."""
    w = getattr(layer, "sliding_window", None)
    if w is None:
        w = getattr(getattr(layer, "impl", None), "sliding_window", None)
    if w is None:
        return 0
    if isinstance(w, (tuple, list)):
        return int(w[0]) + 1 if int(w[0]) >= 0 else 0
    return max(0, int(w))


def layer_sm_scale(layer):
    s = _as_float(getattr(getattr(layer, "impl", None), "scale", None))
    return s if s is not None else 1.0 / math.sqrt(layer.head_size)


def layer_sinks(layer):
    s = getattr(getattr(layer, "impl", None), "sinks", None)
    return s if s is not None else getattr(layer, "sinks", None)


def _actual_tokens(module, query):
    """Tokens of this forward that are real (vLLM may pad the batch, e.g. for CUDA graphs):
    the layer's attn_metadata.num_actual_tokens when the forward context has it."""
    n = int(query.shape[0])
    try:
        from vllm.forward_context import get_forward_context
        md = get_forward_context().attn_metadata
        if isinstance(md, list):
            md = md[0]
        if isinstance(md, dict):
            md = md.get(module.layer_name)
        a = getattr(md, "num_actual_tokens", None)
        if a:
            n = min(n, int(a))
    except Exception:  # noqa: BLE001 - no vLLM / no context (tests, warm-up)
        pass
    return n


class VllmAttentionHook:
    """The forward hook of one Attention layer: hands its call to a PrefillRecorder."""

    def __init__(self, recorder: pc.PrefillRecorder, layer: int, scales="auto"):
        if scales not in ("auto", "always", "never"):
            raise ValueError(f"scales={scales!r}: expected auto, always or never")
        self.recorder, self.layer, self.scales = recorder, layer, scales

    def _scales(self, module):
        fp8 = str(getattr(module, "kv_cache_dtype", "auto")).startswith("fp8")
        if self.scales == "always" or (self.scales == "auto" and fp8):
            return layer_scales(module)
        return None

    def __call__(self, module, args, kwargs, output):
        rec = self.recorder
        if not rec.active:
            rec.ignored += 1
            return None
        names = ("query", "key", "value")
        q, k, v = (args[i] if len(args) > i else kwargs.get(n) for i, n in enumerate(names))
        if k is None or v is None:
            raise pc.CaptureError(f"{module.layer_name}: key/value are None (a KV-sharing layer); "
                                  "not supported by capture v1")
        h, hkv, d = int(module.num_heads), int(module.num_kv_heads), int(module.head_size)
        if int(getattr(module, "head_size_v", d)) != d:
            raise pc.CaptureError(f"{module.layer_name}: head_size_v {module.head_size_v} != head_size {d}")
        n = _actual_tokens(module, q)
        out = None
        if rec.out_name is not None:
            o = output[0] if isinstance(output, (tuple, list)) else output
            out = o[:n].reshape(n, h, d)
        rec.on_layer(self.layer, q[:n].reshape(n, h, d), k[:n].reshape(n, hkv, d),
                     v[:n].reshape(n, hkv, d), out=out, sinks=layer_sinks(module),
                     window=layer_window(module), sm_scale=layer_sm_scale(module),
                     scales=self._scales(module))
        return None


class VllmRecorder:
    """Hooks every Attention layer of a vLLM model (nn.Module) into one PrefillRecorder."""

    def __init__(self, recorder: pc.PrefillRecorder, scales="auto"):
        self.recorder, self.scales = recorder, scales
        self.handles, self.layer_names = [], []

    def attach(self, model):
        classes = _vllm_attention_classes()
        found = [(n, m) for n, m in model.named_modules() if is_vllm_attention(m, classes)]
        if not found:
            raise pc.CaptureError("no vLLM Attention layers found in the model")
        idxs = []
        for order, (name, m) in enumerate(found):
            idx = layer_index(getattr(m, "layer_name", "") or name)
            idxs.append(order if idx is None else idx)
            self.layer_names.append(getattr(m, "layer_name", name))
        if sorted(idxs) != list(range(len(idxs))):
            raise pc.CaptureError(f"attention layers are not numbered 0..n-1: {self.layer_names}")
        for idx, (_, m) in zip(idxs, found):
            self.handles.append(m.register_forward_hook(VllmAttentionHook(self.recorder, idx, self.scales),
                                                        with_kwargs=True))
        return len(found)

    def detach(self):
        for h in self.handles:
            h.remove()
        self.handles = []


# --------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------

_MODEL_PATHS = (
    ("llm_engine", "engine_core", "engine_core", "model_executor", "driver_worker", "worker",
     "model_runner", "model"),                                          # V1, engine in process
    ("llm_engine", "model_executor", "driver_worker", "worker", "model_runner", "model"),  # V0
    ("llm_engine", "model_executor", "driver_worker", "model_runner", "model"),
)


def _install(llm, vrec):
    """Attaches the hooks to the engine's model (LLM.apply_model when present, else by path)."""
    if hasattr(llm, "apply_model"):
        res = llm.apply_model(vrec.attach)
        return res[0] if isinstance(res, list) else res
    for path in _MODEL_PATHS:
        obj = llm
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None:
            return vrec.attach(obj)
    raise pc.CaptureError("cannot reach the model inside vllm.LLM (is the engine in this process? "
                          "VLLM_ENABLE_V1_MULTIPROCESSING=0, tensor_parallel_size=1)")


def _engine_block_size(llm):
    for path in (("llm_engine", "vllm_config", "cache_config", "block_size"),
                 ("llm_engine", "cache_config", "block_size")):
        obj = llm
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, int) and obj in pc.BLOCK_SIZES:
            return obj
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model path or name as vLLM takes it")
    ap.add_argument("--tokenizer", default=None)
    pc.add_prompt_arguments(ap)
    ap.add_argument("--chunk", type=int, default=0, help="prefill chunk (max_num_batched_tokens); 0: whole prompt")
    ap.add_argument("--outputs", default=None, metavar="NAME", help="store each layer's output as out.NAME")
    ap.add_argument("--scales", choices=("auto", "always", "never"), default="auto",
                    help="store q/k/v scales: auto = when the KV cache is fp8")
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--calculate-kv-scales", action="store_true",
                    help="let vLLM calibrate q/k/v scales on the first forward (its "
                         "calculate_kv_scales engine argument: amax / 200 for q and k, / 100 for v); "
                         "without it a checkpoint without kv scales runs at 1.0, where every scale "
                         "bug is silent")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--block-size", type=int, default=None, choices=pc.BLOCK_SIZES)
    ap.add_argument("--load-format", default=None, help="e.g. dummy for random weights")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--model-name", default=None, help="metadata 'model' (default: --model)")
    ap.add_argument("--out", required=True, help="*.safetensors file, or a directory for shards")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)

    pc.require_packages("record_vllm.py", "torch", "vllm")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    prompts = pc.load_prompts(args.traces, args.prompt_file, args.field, args.limit, args.with_completion)
    kw = dict(model=args.model, tokenizer=args.tokenizer, dtype=args.dtype, enforce_eager=True,
              enable_prefix_caching=False, kv_cache_dtype=args.kv_cache_dtype, max_num_seqs=1,
              tensor_parallel_size=1, gpu_memory_utilization=args.gpu_memory_utilization, seed=0)
    if args.block_size:
        kw["block_size"] = args.block_size
    if args.load_format:
        kw["load_format"] = args.load_format
    if args.max_model_len:
        kw["max_model_len"] = args.max_model_len
    if args.chunk:
        kw.update(enable_chunked_prefill=True, max_num_batched_tokens=args.chunk)
    if args.calculate_kv_scales:
        kw["calculate_kv_scales"] = True
    llm = LLM(**kw)
    tok = llm.get_tokenizer()
    token_lists = [tok.encode(p)[:args.max_tokens] if args.max_tokens else tok.encode(p) for p in prompts]

    writer = pc.CaptureWriter(args.out, model=args.model_name or args.model, overwrite=args.overwrite,
                              block_size=args.block_size or _engine_block_size(llm))
    rec = pc.PrefillRecorder(writer, out_name=args.outputs)
    vrec = VllmRecorder(rec, scales=args.scales)
    try:
        n_layers = _install(llm, vrec)
        params = SamplingParams(max_tokens=1, temperature=0.0)
        for i, ids in enumerate(token_lists):
            rec.begin_sequence(len(ids))
            llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
            rec.end_sequence()
            print(f"record_vllm: prompt {i}: {len(ids)} tokens, last chunk {rec.seq_q[-1]}", file=sys.stderr)
        paths = rec.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        vrec.detach()
    print(f"record_vllm: {n_layers} layers, seq_q={rec.seq_q} seq_kv={rec.seq_kv} -> {args.out} "
          f"({len(paths)} file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
