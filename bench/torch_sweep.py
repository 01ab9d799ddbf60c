#!/usr/bin/env python3
"""torch_sweep.py: the PyTorch baseline of bench/RESULTS.md's GPU benchmark.

The same sweep as `precgate run` on a one-sequence capture (no context):
bf16, fp8kv and fp8qkv through torch.nn.functional.scaled_dot_product_attention
and torch.float8_e4m3fn (quantize-dequantize around bf16 SDPA), an fp32 SDPA
reference, and the relative L2 error per layer. PyTorch's SDPA has no sink
term, so sinks are left out here (they are a per-row normalization, no matmul
work). Also measures the card's two ceilings: a bf16 matrix product and a
device-to-device copy.

usage: torch_sweep.py CAPTURE [reps]
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from safetensors import safe_open

FP8_MAX = 448.0  # largest finite e4m3fn value (OCP FP8 spec)
ACCURACY_HEADS = 8  # heads per layer in the fp32-against-fp64 accuracy check


def timed(fn, reps):
    """Median seconds of fn() over reps runs after one warm-up."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def ceilings():
    """bf16 matmul TFLOP/s and device copy GB/s (bytes read + written)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: a @ b, 10)
    x = torch.empty(2 * 1024**3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    tc = timed(lambda: y.copy_(x), 10)
    return 2 * n**3 / t / 1e12, 2 * x.numel() / tc / 1e9


def fp8_roundtrip(x, scale):
    """x / scale saturated to +-448, cast to e4m3fn, back to bf16 times scale."""
    y = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (y.float() * scale).to(torch.bfloat16)


def load_pinned(path):
    """The capture's tensors on the GPU by the fastest route PyTorch offers:
    the whole file read into one page-locked buffer, one copy to the GPU, the
    tensors as views of it (safetensors layout: an 8-byte little-endian
    header length, a JSON header of dtype / shape / data_offsets, the data).
    Page-locking a buffer the size of the capture is part of its time."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        size = os.fstat(f.fileno()).st_size - 8 - n
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        got = f.readinto(memoryview(host.numpy()))
        assert got == size, f"{path}: read {got} of {size} data bytes"
    dev = host.to("cuda", non_blocking=True)
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "I32": torch.int32}
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in dtypes:
            continue
        a, b = t["data_offsets"]
        out[name] = dev[a:b].view(dtypes[t["dtype"]]).view(t["shape"])
    torch.cuda.synchronize()
    return out


def load_mapped(path):
    """The capture mapped on the host (safetensors' CPU tensors share the
    file's pages), each tensor copied to the GPU from that mapping."""
    out = {}
    with safe_open(path, framework="pt", device="cpu") as f:
        for name in f.keys():
            out[name] = f.get_tensor(name).to("cuda")
    torch.cuda.synchronize()
    return out


def load_times(path):
    """Seconds of two more ways of loading the capture to the GPU (the file
    in the page cache, as for precgate's run) than the sweep's own
    (safetensors straight to the GPU): the host mapping then copies, and one
    page-locked read and copy."""
    times = {}
    for name, fn in (("mapped, then .to(cuda)", load_mapped),
                     ("page-locked read, one copy", load_pinned)):
        t0 = time.perf_counter()
        tensors = fn(path)
        times[name] = time.perf_counter() - t0
        del tensors
        torch.cuda.empty_cache()
    return times


def main():
    path = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.zeros(1, device="cuda")  # the CUDA context first: not part of the load
    torch.cuda.synchronize()
    t_load = time.perf_counter()
    with safe_open(path, framework="pt", device="cuda") as f:
        meta = f.metadata()
        seq_q, seq_kv = json.loads(meta["seq_q"]), json.loads(meta["seq_kv"])
        assert len(seq_q) == 1 and seq_q == seq_kv, "one sequence, no context"
        windows = json.loads(meta.get("sliding_window", "[]"))
        layers = []
        for name in f.keys():
            if name.endswith(".q"):
                li = int(name.split(".")[1])
                layers.append((li, f.get_tensor(f"layers.{li}.q"), f.get_tensor(f"layers.{li}.k"),
                               f.get_tensor(f"layers.{li}.v")))
    torch.cuda.synchronize()
    t_load = time.perf_counter() - t_load  # the capture to the GPU (precgate's load + upload)
    layers.sort(key=lambda t: t[0])
    T = seq_q[0]
    d = layers[0][1].shape[2]
    sm = float(meta.get("sm_scale", d ** -0.5))
    band = {}

    def band_mask(w):
        """[nb, 1, w, 2w] bool: query i of block b sees local key j (global
        key (b-1)w + j) iff the key is in [query - w + 1, query] and exists."""
        if w not in band:
            nb = (T + w - 1) // w
            i = torch.arange(w, device="cuda")[:, None]
            j = torch.arange(2 * w, device="cuda")[None, :]
            m = ((j > i) & (j <= w + i)).expand(nb, w, 2 * w).clone()
            m[0, :, :w] = False  # block 0's first w keys are padding
            band[w] = m.unsqueeze(1)
        return band[w]

    def dense(q, k, v, w, dtype, gqa):
        q = q.to(dtype).permute(1, 0, 2).unsqueeze(0)
        k = k.to(dtype).permute(1, 0, 2).unsqueeze(0)
        v = v.to(dtype).permute(1, 0, 2).unsqueeze(0)
        if w:
            i = torch.arange(T, device="cuda")
            mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm,
                                                  enable_gqa=gqa)[0].permute(1, 0, 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=sm,
                                              enable_gqa=gqa)[0].permute(1, 0, 2)

    def banded(q, k, v, w, dtype):
        """Sliding-window attention as blocks of w queries against their 2w
        keys (the band), so the work is T * 2w per head, not T^2."""
        nb = (T + w - 1) // w
        tp = nb * w
        hq = q.shape[1]
        qb = F.pad(q.to(dtype), (0, 0, 0, 0, 0, tp - T)).view(nb, w, hq, q.shape[2])
        kp = F.pad(k.to(dtype), (0, 0, 0, 0, w, tp - T))  # w keys of padding in front
        vp = F.pad(v.to(dtype), (0, 0, 0, 0, w, tp - T))
        kb = kp.unfold(0, 2 * w, w).permute(0, 1, 3, 2)  # [nb, hkv, 2w, d]
        vb = vp.unfold(0, 2 * w, w).permute(0, 1, 3, 2)
        o = F.scaled_dot_product_attention(qb.permute(0, 2, 1, 3), kb, vb,
                                           attn_mask=band_mask(w), scale=sm)
        return o.permute(0, 2, 1, 3).reshape(tp, hq, q.shape[2])[:T]

    def attn(q, k, v, w, dtype, windows_dense=False):
        # fp32 has no flash kernel, and with enable_gqa SDPA sends it to the
        # math path (on the H200, 2026-12-02: 85 ms a causal layer against
        # 16.6 ms with the kv heads repeated, which reaches the memory-efficient
        # kernel); bf16's flash kernel takes GQA as is. Masked (windowed)
        # attention repeats them in every dtype.
        gqa = dtype != torch.float32 and not w
        if not gqa:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if w and not windows_dense:
            return banded(q, k, v, w, dtype)
        return dense(q, k, v, w, dtype, gqa)

    errors = []

    def sweep(record):
        for li, q, k, v in layers:
            w = windows[li] if li < len(windows) else 0
            ref = attn(q, k, v, w, torch.float32)
            qs, ks, vs = (x.abs().amax().float() / FP8_MAX for x in (q, k, v))
            outs = {
                "bf16": attn(q, k, v, w, torch.bfloat16),
                "fp8kv": attn(q, fp8_roundtrip(k, ks), fp8_roundtrip(v, vs), w, torch.bfloat16),
                "fp8qkv": attn(fp8_roundtrip(q, qs), fp8_roundtrip(k, ks), fp8_roundtrip(v, vs),
                               w, torch.bfloat16),
            }
            rel = {m: ((o.float() - ref).norm() / ref.norm()) for m, o in outs.items()}
            if record:
                errors.append((li, {m: float(r) for m, r in rel.items()}))

    # The band against the dense [T, T] mask, on the first windowed layer.
    for li, q, k, v in layers:
        w = windows[li] if li < len(windows) else 0
        if w:
            for dt in (torch.float32, torch.bfloat16):
                a, b = attn(q, k, v, w, dt), attn(q, k, v, w, dt, windows_dense=True)
                diff = float((a.float() - b.float()).norm() / b.float().norm())
                t_band = timed(lambda: attn(q, k, v, w, dt), reps)
                t_dense = timed(lambda: attn(q, k, v, w, dt, windows_dense=True), reps)
                print(f"windowed layer {li} {dt}: band against dense mask rel_l2 {diff:.2e}, "
                      f"{t_band * 1e3:.2f} ms against {t_dense * 1e3:.2f} ms")
                assert diff < (1e-6 if dt == torch.float32 else 1e-2), "band != dense"
            break

    # How accurate the fp32 reference is: against fp64 attention (plain
    # softmax(QK^T) V in float64) on a sample of heads of the first full and
    # the first windowed layer.
    def window_of(li):
        return windows[li] if li < len(windows) else 0
    firsts = [next((t for t in layers if bool(window_of(t[0])) == wd), None) for wd in (False, True)]
    for li, q, k, v in (t for t in firsts if t is not None):
        w = window_of(li)
        ref32 = attn(q, k, v, w, torch.float32)
        rep = q.shape[1] // k.shape[1]
        num = den = 0.0
        i = torch.arange(T, device="cuda")
        mask = (i[None, :] <= i[:, None]) & ((i[None, :] > i[:, None] - w) if w else True)
        for h in range(0, q.shape[1], max(1, q.shape[1] // ACCURACY_HEADS)):
            qh, kh, vh = (x[:, hh].double() for x, hh in ((q, h), (k, h // rep), (v, h // rep)))
            sc = (qh @ kh.T) * sm
            sc.masked_fill_(~mask, float("-inf"))
            o64 = torch.softmax(sc, dim=-1) @ vh
            num += float((ref32[:, h].double() - o64).norm() ** 2)
            den += float(o64.norm() ** 2)
            del sc
        print(f"fp32 SDPA reference against fp64, layer {li} (window {w}), "
              f"{ACCURACY_HEADS} heads: rel_l2 {(num / den) ** 0.5:.3e}")

    total = timed(lambda: sweep(False), reps)
    sweep(True)
    # Parts, for the comparison with precgate's kernels.
    full = [(q, k, v) for li, q, k, v in layers if not (li < len(windows) and windows[li])]
    t_bf16 = timed(lambda: [attn(q, k, v, 0, torch.bfloat16) for q, k, v in full], reps)
    t_ref = timed(lambda: [attn(q, k, v, 0, torch.float32) for q, k, v in full], reps)
    hq = layers[0][1].shape[1]
    flops_full = 4 * d * hq * (T * (T + 1) / 2) * len(full)
    mm, copy = ceilings()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"ceilings: bf16 matmul {mm:.0f} TFLOP/s, device copy {copy:.0f} GB/s")
    print(f"torch sweep ({len(layers)} layers x {T} tokens, 3 modes + fp32 reference + errors): "
          f"{total:.3f} s")
    print(f"torch load (safetensors to the GPU, once, before the sweep; not in the sweep's time): "
          f"{t_load:.3f} s")
    loads = load_times(path)
    loads["safetensors device=cuda"] = t_load
    for name, t in loads.items():
        print(f"torch load by {name}: {t:.3f} s")
    best = min(loads, key=loads.get)
    print(f"torch whole sweep (fastest load, {best}, + sweep): {loads[best] + total:.3f} s")
    print(f"torch bf16 SDPA on the {len(full)} full layers: {t_bf16 * 1e3:.1f} ms, "
          f"{flops_full / t_bf16 / 1e12:.0f} TFLOP/s")
    print(f"torch fp32 SDPA reference on the full layers: {t_ref * 1e3:.1f} ms")
    worst = max(errors, key=lambda e: e[1]["fp8qkv"])
    print(f"torch rel_l2 layer 0: {errors[0][1]}, worst fp8qkv layer {worst[0]}: {worst[1]}")


if __name__ == "__main__":
    main()
