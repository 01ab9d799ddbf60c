#!/usr/bin/env python3
"""record_hf: record a Hugging Face transformers model's prefill as a precgate capture.

Families: gpt-oss, Llama, Qwen2/Qwen3 (any decoder whose attention modules call
the transformers attention interface, which is all of them since 4.48).

How q/k/v after RoPE are captured. In transformers 4.5x and 5.x every such
attention module's forward does: project, apply RoPE, update the KV cache, then
call ONE attention function

    attn_output, _ = attention_interface(self, query, key, value, attention_mask,
                                         scaling=self.scaling, sliding_window=..., s_aux=self.sinks, ...)

where attention_interface is the modeling module's global `eager_attention_forward`
(looked up at call time; in 5.x as the default of ALL_ATTENTION_FUNCTIONS.get_interface)
or ALL_ATTENTION_FUNCTIONS[config._attn_implementation] (sdpa, flash_attention_2,
flex_attention, hub kernels). For the duration of the recording this tool wraps
both: every entry of ALL_ATTENTION_FUNCTIONS and `eager_attention_forward` in
each modeling module that defines one of the model's attention classes (or a
parent class, whose forward it may inherit); all is restored on exit. The
wrapper calls the original unchanged and then records, for the module it was
called for (its layer is `module.layer_idx`):
  * query [1, Hq, T, D]: exactly what the kernel gets, after RoPE;
  * key/value [1, Hkv, Tkv, D] after the cache update: the LAST T positions are
    this call's new tokens (robust to sliding-window caches, which return only
    the last W-1 cached tokens plus the new ones); the context's keys/values were
    recorded by the earlier chunks' calls, so the capture's k/v are the whole
    prompt's in order, bit-identical to what the cache holds;
  * scaling (kwarg, else module.scaling) -> sm_scale; sliding_window (kwarg,
    else module.sliding_window, else the config's layer_types/sliding_window)
    -> the layer's window (HF's mask keeps q - k < W: W keys incl. itself, as
    precgate); sinks: module.sinks (gpt-oss, else the s_aux kwarg) as F32;
  * with --outputs NAME: the function's output [1, T, Hq, D] (before o_proj) as
    layers.L.out.NAME.
This needs no per-family code and sees the tensors after any family-specific
step (q/k norms of Qwen3, partial RoPE, ...), which a hook on the module's
inputs or on q_proj would not.

Prompts run one at a time (batch 1, no padding). --chunk N prefills each prompt
in chunks of N tokens with the KV cache (DynamicCache); the capture keeps the
last chunk's queries/outputs and all keys/values, so seq_q = last chunk,
seq_kv = prompt, context = prompt - last chunk.

Models: --model PATH (from_pretrained: weights, config and tokenizer from a
local directory or the hub cache) or, with --random-weights, built from a
config with random weights: --config-json FILE, a model directory's config, or
a built-in tiny config: `gpt-oss` (64 q heads, 8 kv heads, head_dim 64,
sinks, sliding window 128 on alternating layers, small MoE) or `llama`
(8 q heads, 2 kv heads, head_dim 64); --num-layers overrides the depth.
Without a tokenizer (random weights) prompts are tokenized as UTF-8 bytes
(precgate_capture.byte_tokenize).

  python3 tools/record_hf.py --random-weights --model gpt-oss --num-layers 3 \\
      --traces evals/demo/aime-style-demo.jsonl --limit 2 --chunk 64 --outputs eager \\
      --device cuda --out /tmp/cap-gptoss/
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import precgate_capture as pc  # noqa: E402

# Built-in tiny configs for --random-weights (the attention layout is the real one).
BUILTIN_CONFIGS = {
    "gpt-oss": {
        "model_type": "gpt_oss", "num_hidden_layers": 4, "hidden_size": 512,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "intermediate_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
        "vocab_size": 4096, "sliding_window": 128, "max_position_embeddings": 4096,
        "attention_bias": True, "tie_word_embeddings": False,
        # layer_types is filled in from num_hidden_layers: sliding, full, sliding, ...
    },
    "llama": {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 1024, "vocab_size": 4096, "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    },
}
# attn implementations --outputs NAME selects when --attn-implementation is not given
KNOWN_IMPLS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


# --------------------------------------------------------------------------
# the attention tap
# --------------------------------------------------------------------------

def attention_modules(model):
    """[(layer_idx, module)] of the model's attention modules (class name ending in
    "Attention" with a layer_idx), sorted by layer."""
    found = []
    for _, m in model.named_modules():
        if type(m).__name__.endswith("Attention") and isinstance(getattr(m, "layer_idx", None), int):
            found.append((m.layer_idx, m))
    found.sort(key=lambda x: x[0])
    idxs = [i for i, _ in found]
    if not found or idxs != list(range(len(found))):
        raise pc.CaptureError(f"attention modules with layer_idx 0..n-1 not found (got {idxs})")
    return found


def config_windows(config, n_layers):
    """Per-layer windows from the config: layer_types + sliding_window (0 = full)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    w = getattr(text, "sliding_window", None) or 0
    types = getattr(text, "layer_types", None)
    if types:
        return [w if t == "sliding_attention" else 0 for t in types[:n_layers]]
    if w and getattr(text, "use_sliding_window", True):
        return [w] * n_layers
    return [0] * n_layers


def _restore(mapping, saved):
    mapping.clear()
    mapping.update(saved)


class HFAttentionTap:
    """Wraps the transformers attention functions while active (a context manager)."""

    def __init__(self, model, recorder: pc.PrefillRecorder):
        self.recorder = recorder
        mods = attention_modules(model)
        self.layer_of = {id(m): i for i, m in mods}
        self.fallback_windows = config_windows(model.config, len(mods))
        # the modules whose globals the attention forwards read (a forward inherited from a
        # parent class reads the parent's module)
        self.modeling_modules = {sys.modules[c.__module__] for _, m in mods for c in type(m).__mro__
                                 if c.__module__ in sys.modules and c.__module__ != "builtins"
                                 and not c.__module__.startswith("torch.")}
        self._undo = []
        self._inside = False

    def _wrap(self, fn):
        if getattr(fn, "__precgate_original__", None) is not None:
            return fn
        tap = self

        @functools.wraps(fn)
        def wrapped(module, query, key, value, attention_mask, *args, **kwargs):
            outer = not tap._inside                # one record per call, even if one wrapped
            tap._inside = True                     # function calls another
            try:
                result = fn(module, query, key, value, attention_mask, *args, **kwargs)
            finally:
                tap._inside = not outer
            if outer and tap.recorder.active and id(module) in tap.layer_of:
                tap.record(module, query, key, value, result, kwargs)
            return result

        wrapped.__precgate_original__ = fn
        return wrapped

    def record(self, module, query, key, value, result, kwargs):
        layer = self.layer_of[id(module)]
        if query.shape[0] != 1:
            raise pc.CaptureError(f"layer {layer}: batch {query.shape[0]}, the recorder runs batch 1")
        t = query.shape[2]
        if key.shape[2] < t or value.shape[2] < t:
            raise pc.CaptureError(f"layer {layer}: the cache returned {key.shape[2]} keys for {t} new tokens "
                                  "(a cache that crops within a call: use a smaller --chunk)")
        q = query[0].transpose(0, 1)                      # [T, Hq, D]
        k = key[0, :, -t:, :].transpose(0, 1)             # this call's new tokens [T, Hkv, D]
        v = value[0, :, -t:, :].transpose(0, 1)
        out = None
        if self.recorder.out_name is not None:
            o = result[0] if isinstance(result, (tuple, list)) else result
            out = o[0]                                    # [T, Hq, D]
            if tuple(out.shape) != tuple(q.shape):
                raise pc.CaptureError(f"layer {layer}: attention output {list(o.shape)}, "
                                      f"expected [1, {t}, {q.shape[1]}, {q.shape[2]}]")
        window = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
        if window is None:
            window = self.fallback_windows[layer]
        scaling = kwargs.get("scaling", getattr(module, "scaling", None))
        sinks = getattr(module, "sinks", None)
        if sinks is None:
            sinks = kwargs.get("s_aux")
        self.recorder.on_layer(layer, q, k, v, out=out, sinks=sinks, window=window, sm_scale=scaling)

    def _registries(self):
        """modeling_utils.ALL_ATTENTION_FUNCTIONS, plus any other instance a modeling module holds."""
        from transformers import modeling_utils
        if not hasattr(modeling_utils, "ALL_ATTENTION_FUNCTIONS"):
            raise pc.CaptureError("this transformers has no attention interface (ALL_ATTENTION_FUNCTIONS); "
                                  "record_hf needs transformers >= 4.48")
        regs = {id(modeling_utils.ALL_ATTENTION_FUNCTIONS): modeling_utils.ALL_ATTENTION_FUNCTIONS}
        for mod in self.modeling_modules:
            r = getattr(mod, "ALL_ATTENTION_FUNCTIONS", None)
            if r is not None:
                regs.setdefault(id(r), r)
        return list(regs.values())

    def __enter__(self):
        for registry in self._registries():
            local = getattr(registry, "_local_mapping", None)
            if local is not None:             # AttentionInterface (4.5x / 5.x): writes go to _local_mapping
                saved = dict(local)
                self._undo.append(functools.partial(_restore, local, saved))
            else:                             # a plain dict (older 4.4x)
                self._undo.append(functools.partial(_restore, registry, dict(registry)))
            for name in list(registry.keys()):
                registry[name] = self._wrap(registry[name])
        for mod in self.modeling_modules:
            fn = getattr(mod, "eager_attention_forward", None)
            if callable(fn):
                setattr(mod, "eager_attention_forward", self._wrap(fn))
                self._undo.append(functools.partial(setattr, mod, "eager_attention_forward", fn))
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()
        return False


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------

def build_config(name_or_path, config_json=None, num_layers=None):
    from transformers import AutoConfig
    if config_json:
        with open(config_json, encoding="utf-8") as f:
            d = json.load(f)
    elif name_or_path in BUILTIN_CONFIGS:
        d = dict(BUILTIN_CONFIGS[name_or_path])
    else:
        cfg = AutoConfig.from_pretrained(name_or_path)
        d = cfg.to_dict()
    if num_layers:
        d["num_hidden_layers"] = int(num_layers)
    n = d["num_hidden_layers"]
    if d.get("model_type") == "gpt_oss":
        if "layer_types" not in d or len(d["layer_types"]) != n:
            d["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    elif "layer_types" in d and len(d["layer_types"]) != n:
        d["layer_types"] = d["layer_types"][:n]
    model_type = d.pop("model_type")
    for k in ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype",
              "quantization_config"):
        d.pop(k, None)
    if hasattr(AutoConfig, "for_model"):
        return AutoConfig.for_model(model_type, **d)
    from transformers import CONFIG_MAPPING
    return CONFIG_MAPPING[model_type](**d)


def load_model(args, torch):
    from transformers import AutoModelForCausalLM
    dtype = getattr(torch, args.dtype)
    impl = args.attn_implementation
    kw = {"attn_implementation": impl} if impl else {}
    if args.random_weights:
        config = build_config(args.model, args.config_json, args.num_layers)
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_config(config, **kw)
        model.to(dtype)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **kw)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype, **kw)
    model.to(args.device)
    model.eval()
    return model


def make_tokenize(args, config):
    vocab = config.get_text_config().vocab_size if hasattr(config, "get_text_config") else config.vocab_size
    path = args.tokenizer or (None if args.random_weights else args.model)
    if path:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path)
        return lambda text: tok.encode(text, add_special_tokens=True)[:args.max_tokens or None]
    return lambda text: pc.byte_tokenize(text, vocab, args.max_tokens)


def prefill(model, ids, chunk, torch, device):
    """Runs the prompt ids through the model's decoder in chunks, with a KV cache."""
    from transformers import DynamicCache
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # older DynamicCache() takes no config
        cache = DynamicCache()
    takes_cache_position = "cache_position" in inspect.signature(base.forward).parameters
    for start, end in pc.chunk_bounds(len(ids), chunk):
        x = torch.tensor([ids[start:end]], device=device)
        pos = torch.arange(start, end, device=device)
        kw = {"cache_position": pos} if takes_cache_position else {}
        base(input_ids=x, past_key_values=cache, use_cache=True, position_ids=pos.unsqueeze(0), **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True,
                    help="model directory / hub id; with --random-weights also gpt-oss or llama (built-in)")
    ap.add_argument("--random-weights", action="store_true", help="build from the config with random weights")
    ap.add_argument("--config-json", default=None, help="config.json to build from (--random-weights)")
    ap.add_argument("--num-layers", type=int, default=None, help="override num_hidden_layers")
    ap.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --model's, "
                    "or UTF-8 bytes with --random-weights)")
    pc.add_prompt_arguments(ap)
    ap.add_argument("--chunk", type=int, default=0, help="prefill in chunks of N tokens; 0: one chunk")
    ap.add_argument("--outputs", default=None, metavar="NAME",
                    help="store the attention function's output as layers.L.out.NAME; NAME also selects "
                         "the implementation when it is one of " + ", ".join(KNOWN_IMPLS))
    ap.add_argument("--attn-implementation", default=None, help="eager, sdpa, ... (default: transformers')")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--block-size", type=int, default=None, choices=pc.BLOCK_SIZES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-name", default=None, help="metadata 'model' (default: derived from --model)")
    ap.add_argument("--out", required=True, help="*.safetensors file, or a directory for shards")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    if args.outputs and not args.attn_implementation and args.outputs in KNOWN_IMPLS:
        args.attn_implementation = args.outputs

    pc.require_packages("record_hf.py", "torch", "transformers")
    import torch

    prompts = pc.load_prompts(args.traces, args.prompt_file, args.field, args.limit, args.with_completion)
    model = load_model(args, torch)
    tokenize = make_tokenize(args, model.config)
    token_lists = [tokenize(p) for p in prompts]
    name = args.model_name or (f"{args.model}-random" if args.random_weights else args.model)

    writer = pc.CaptureWriter(args.out, model=name, block_size=args.block_size, overwrite=args.overwrite)
    rec = pc.PrefillRecorder(writer, out_name=args.outputs)
    try:
        with torch.inference_mode(), HFAttentionTap(model, rec):
            for i, ids in enumerate(token_lists):
                rec.begin_sequence(len(ids))
                prefill(model, ids, args.chunk, torch, args.device)
                rec.end_sequence()
                print(f"record_hf: prompt {i}: {len(ids)} tokens, last chunk {rec.seq_q[-1]}",
                      file=sys.stderr)
        paths = rec.close()
    except BaseException:
        writer.abort()
        raise
    impl = getattr(model.config, "_attn_implementation", None)
    print(f"record_hf: {name} ({impl}), {len(rec.layers)} layers, seq_q={rec.seq_q} seq_kv={rec.seq_kv}, "
          f"windows={[rec.windows[l] for l in sorted(rec.windows)]} -> {args.out} ({len(paths)} file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
