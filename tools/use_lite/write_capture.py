"""tools/use_lite/write_capture.py SPEC.json OUT: writes the capture that
tools/record_use_lite.js dumped, through tools/precgate_capture.py.

SPEC.json: {"model", "mask", "seq_q", "seq_kv", "tmp", "layers": [{"layer", "hq", "hkv",
"d", "outs"}]}; next to it, per layer L, raw little-endian float32 files L.q.f32 /
L.k.f32 / L.v.f32 ([sum(seq_q) or sum(seq_kv), H, D]) and L.out.NAME.f32. float32 is
rounded to bf16 by the module (nearest even). Pure standard library (no numpy needed).
"""

import array
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import precgate_capture as pc  # noqa: E402


def _load(path, shape):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder == "big":
        a.byteswap()
    return pc.F32(a, shape)


def main(argv):
    if len(argv) != 3:
        print("usage: write_capture.py SPEC.json OUT", file=sys.stderr)
        return 2
    spec_path, out = argv[1], argv[2]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    d = os.path.dirname(os.path.abspath(spec_path))
    tq, tkv = sum(spec["seq_q"]), sum(spec["seq_kv"])
    try:
        with pc.CaptureWriter(out, model=spec["model"], seq_q=spec["seq_q"], seq_kv=spec["seq_kv"],
                              overwrite=True) as w:
            for L in spec["layers"]:
                l, hq, hkv, hd = L["layer"], L["hq"], L["hkv"], L["d"]
                q = _load(os.path.join(d, f"{l}.q.f32"), (tq, hq, hd))
                k = _load(os.path.join(d, f"{l}.k.f32"), (tkv, hkv, hd))
                v = _load(os.path.join(d, f"{l}.v.f32"), (tkv, hkv, hd))
                outs = {n: _load(os.path.join(d, f"{l}.out.{n}.f32"), (tq, hq, hd)) for n in L["outs"]}
                w.write_layer(l, q, k, v, outs=outs or None)
    except pc.CaptureError as e:
        print(f"write_capture: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
