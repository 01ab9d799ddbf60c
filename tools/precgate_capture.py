"""precgate_capture: writing precgate capture format v1 (the one shared module).

The contract is harness/capture.h (and README.md, "Captures (format v1)"); this
module writes exactly that, and checks everything the C reader checks before a
byte hits the disk, so a recorder fails at the layer and tensor that is wrong
instead of producing a file that `precgate run` refuses later.

Container (safetensors): an 8-byte little-endian header length N, N bytes of
JSON ({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets"}}),
padded with spaces so that the data buffer starts 8-byte aligned, then the
tensors' bytes back to back (contiguous data_offsets, no holes). Within a file
F32 tensors (sinks) come first, so every tensor is aligned to its element size.

Tensors per layer L (L in decimal, no leading zeros):
    layers.L.q           BF16 [Tq, Hq, D]    queries after RoPE, packed over sequences
    layers.L.k, .v       BF16 [Tkv, Hkv, D]  per sequence: its context, then its new tokens
    layers.L.sinks       F32  [Hq]           optional per-head sink logits (gpt-oss)
    layers.L.out.NAME    BF16 [Tq, Hq, D]    optional output of an implementation (ext:NAME)
Metadata (all values are strings; the arrays are JSON): format, model, seq_q,
seq_kv, sm_scale (one number for the whole capture), sliding_window / q_scale /
k_scale / v_scale (one entry per layer; the three scales all or none),
block_size (16, 32 or 64).

Shards: a capture may be a directory of `*.safetensors` files read in strcmp
order. CaptureWriter(dir) writes one shard per layer, `layer-0000.safetensors`,
`layer-0001.safetensors`, ... (names sort in layer order), each carrying the
identical metadata. Data given through CaptureWriter.append() is spooled to
raw files next to the output (a dot directory, which the reader ignores) and
each shard is assembled from the spool at close(), one layer at a time: a
36-layer x 8k-token recording never sits in host memory at once.

Accepted tensor inputs (for BF16 slots):
  * torch tensors: bfloat16 is stored bit-exactly (through a view as 16-bit
    integers); other float dtypes are rounded with torch's .to(bfloat16)
    (round to nearest even); tensors on a GPU are copied to the host.
  * numpy arrays: float32/float64/float16 are rounded to bf16 by
    f32_to_bf16_bits_np (float64 is first rounded to float32); uint16/int16
    arrays and ml_dtypes.bfloat16 arrays are taken as bf16 bit patterns.
  * Bf16 objects (pure Python: an array('H') of bf16 bit patterns and a shape),
    for tests and environments without numpy or torch.
For F32 slots (sinks): torch or numpy arrays of any float dtype (converted to
float32), F32 objects, or a plain sequence of numbers.

bf16 rounding (f32_to_bf16_bits and f32_to_bf16_bits_np agree bit for bit):
round to nearest, ties to even, on the float32 bit pattern u:
    bits = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
which also rounds values above the largest bf16 to +-Inf as IEEE does. NaN
stays NaN: its top 16 bits are kept (sign and payload) with the quiet bit
0x0040 set, so a NaN never rounds to Inf. Python floats and float64 arrays are
first rounded to float32 (double rounding; differs from a direct
float64->bf16 rounding only in rare ties, which recorders never produce since
models compute in bf16 or float32).

Pure standard library (struct, json, array); numpy and torch are used only
when the caller passes their arrays.
"""

from __future__ import annotations

import array
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile

FORMAT = "precgate.capture.v1"
BLOCK_SIZES = (16, 32, 64)          # capture_block_sizes in harness/capture.h
MAX_LAYERS = 4096                   # CAPTURE_MAX_LAYERS
EXT_NAME_MAX = 64                   # CAPTURE_EXT_NAME_MAX
INT32_MAX = 2**31 - 1
SHARD_SUFFIX = ".safetensors"
_EXT_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_COPY_CHUNK = 8 << 20               # bytes per read when assembling a shard from the spool
_F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]

__all__ = [
    "FORMAT", "BLOCK_SIZES", "CaptureError", "Bf16", "F32", "CaptureWriter", "PrefillRecorder",
    "f32_to_bf16_bits", "bf16_bits_to_f32", "f32_to_bf16_bits_np", "read_header", "shard_name",
    "require_packages",
]


def require_packages(tool, *packages):
    """Exits with status 1 and one line naming the first of packages (import names) that this
    Python cannot import, instead of a traceback from deep inside the tool."""
    import importlib.util
    for name in packages:
        if importlib.util.find_spec(name) is None:
            sys.stderr.write(f"{tool}: error: the Python package '{name}' is not installed for "
                             f"{sys.executable} (install it, e.g. pip install {name}, or run with the "
                             "Python that has it)\n")
            sys.exit(1)


class CaptureError(ValueError):
    """A capture that precgate would refuse: the message names the layer, tensor and field."""


# --------------------------------------------------------------------------
# bf16 rounding
# --------------------------------------------------------------------------

def _f32_bits(x: float) -> int:
    """The float32 bit pattern of x (rounded to float32 first; overflow gives +-Inf)."""
    try:
        return struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:  # |x| beyond float32: IEEE rounding gives +-Inf
        return 0xFF800000 if x < 0 else 0x7F800000


def f32_to_bf16_bits(x: float) -> int:
    """bf16 bit pattern of x: round to nearest even; NaN stays a (quiet) NaN."""
    u = _f32_bits(float(x))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return ((u >> 16) | 0x0040) & 0xFFFF
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_bits_to_f32(b: int) -> float:
    """The value of a bf16 bit pattern (exact: bf16 widens to float32 without rounding)."""
    return struct.unpack("<f", struct.pack("<I", (int(b) & 0xFFFF) << 16))[0]


def f32_to_bf16_bits_np(a):
    """numpy: bf16 bit patterns (uint16 array, same shape) of a float array, as f32_to_bf16_bits."""
    import numpy as np
    x = np.ascontiguousarray(a, dtype=np.float32)
    u = x.view(np.uint32)
    with np.errstate(over="ignore"):
        r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = r.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


# --------------------------------------------------------------------------
# pure-Python tensors
# --------------------------------------------------------------------------

def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _resolve_shape(shape, numel: int):
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise ValueError("reshape: at most one -1")
    if -1 in shape:
        rest = _numel([s for s in shape if s != -1])
        if rest == 0 or numel % rest:
            raise ValueError(f"reshape: cannot infer -1 for {numel} elements into {shape}")
        shape[shape.index(-1)] = numel // rest
    if _numel(shape) != numel:
        raise ValueError(f"reshape: {numel} elements do not fit shape {shape}")
    return tuple(shape)


class _PyTensor:
    """Row-major data in an array.array plus a shape; slicing along axis 0 and reshape."""

    typecode = "H"

    def __init__(self, data, shape):
        self.data = data if isinstance(data, array.array) and data.typecode == self.typecode \
            else array.array(self.typecode, data)
        self.shape = _resolve_shape(shape, len(self.data))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return type(self)(self.data, shape)

    def __getitem__(self, idx):
        if not isinstance(idx, slice):
            raise TypeError(f"{type(self).__name__} supports only slices along axis 0")
        row = _numel(self.shape[1:])
        start, stop, step = idx.indices(self.shape[0])
        if step != 1:
            raise ValueError(f"{type(self).__name__}: slice step must be 1")
        n = max(0, stop - start)
        return type(self)(self.data[start * row:(start + n) * row], (n,) + tuple(self.shape[1:]))

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"{type(self).__name__}(shape={list(self.shape)})"


class Bf16(_PyTensor):
    """A bf16 tensor without numpy/torch: bit patterns (array('H') or ints) and a shape."""

    typecode = "H"

    @classmethod
    def from_floats(cls, values, shape):
        """Rounds each value with f32_to_bf16_bits (nearest even, NaN kept)."""
        return cls(array.array("H", (f32_to_bf16_bits(v) for v in values)), shape)

    def tolist_f32(self):
        return [bf16_bits_to_f32(b) for b in self.data]


class F32(_PyTensor):
    """A float32 tensor without numpy/torch."""

    typecode = "f"


def concat(parts):
    """Concatenates Bf16 (or F32) tensors along axis 0."""
    parts = list(parts)
    if not parts:
        raise ValueError("concat: nothing to concatenate")
    cls, tail = type(parts[0]), tuple(parts[0].shape[1:])
    data = array.array(cls.typecode)
    for p in parts:
        if type(p) is not cls or tuple(p.shape[1:]) != tail:
            raise ValueError(f"concat: {p!r} does not match {cls.__name__}[*, {tail}]")
        data.extend(p.data)
    return cls(data, (sum(p.shape[0] for p in parts),) + tail)


# --------------------------------------------------------------------------
# normalising inputs into blobs (shape + little-endian bytes)
# --------------------------------------------------------------------------

class _Blob:
    """One tensor ready to be written: dtype name, shape, and its bytes."""

    __slots__ = ("dtype", "shape", "payload")

    def __init__(self, dtype, shape, payload):
        self.dtype = dtype               # "BF16" or "F32"
        self.shape = tuple(int(s) for s in shape)
        self.payload = payload           # numpy array (C-contiguous, little-endian) or array.array

    @property
    def nbytes(self):
        return _numel(self.shape) * (2 if self.dtype == "BF16" else 4)

    def tobytes(self) -> bytes:
        p = self.payload
        if isinstance(p, array.array):
            if sys.byteorder == "big":
                p = array.array(p.typecode, p)
                p.byteswap()
            return p.tobytes()
        return p.tobytes()

    def first_nonfinite(self):
        """(flat index, 'NaN'|'+Inf'|'-Inf') of the first Inf/NaN, or None."""
        p = self.payload
        if self.dtype == "BF16":
            exp, mant, sign = 0x7F80, 0x007F, 0x8000
        else:
            exp, mant, sign = 0x7F800000, 0x007FFFFF, 0x80000000
        if isinstance(p, array.array):
            if self.dtype == "F32":
                for i, x in enumerate(p):
                    if not math.isfinite(x):
                        return i, "NaN" if math.isnan(x) else ("-Inf" if x < 0 else "+Inf")
                return None
            for i, b in enumerate(p):
                if (b & exp) == exp:
                    return i, "NaN" if b & mant else ("-Inf" if b & sign else "+Inf")
            return None
        import numpy as np
        bits = p.view(np.uint16 if self.dtype == "BF16" else np.uint32).reshape(-1)
        hit = (bits & exp) == exp
        if not hit.any():
            return None
        i = int(np.argmax(hit))
        b = int(bits[i])
        return i, "NaN" if b & mant else ("-Inf" if b & sign else "+Inf")


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _is_numpy(x):
    return type(x).__module__ == "numpy" and hasattr(x, "dtype")


def _torch_to_bf16_blob(t):
    import torch
    t = t.detach()
    if t.dtype != torch.bfloat16:
        if not t.is_floating_point():
            raise TypeError(f"expected a floating tensor, got {t.dtype}")
        t = t.to(torch.bfloat16)
    t = t.to("cpu").contiguous()
    shape = tuple(t.shape)
    bits = t.view(torch.int16)
    try:
        import numpy as np
        return _Blob("BF16", shape, np.ascontiguousarray(bits.numpy().view(np.uint16), dtype="<u2"))
    except ImportError:  # torch without numpy: slow but correct
        return _Blob("BF16", shape, array.array("H", (b & 0xFFFF for b in bits.reshape(-1).tolist())))


def _torch_to_f32_blob(t):
    import torch
    t = t.detach().to("cpu", torch.float32).contiguous()
    try:
        import numpy as np
        return _Blob("F32", tuple(t.shape), np.ascontiguousarray(t.numpy(), dtype="<f4"))
    except ImportError:
        return _Blob("F32", tuple(t.shape), array.array("f", t.reshape(-1).tolist()))


def _checked_blob(x, dtype, what):
    """x, a blob already, when it holds dtype; CaptureError naming what otherwise."""
    if x.dtype != dtype:
        raise CaptureError(f"{what}: dtype {x.dtype}, expected {dtype}")
    return x


def to_bf16_blob(x, what="tensor"):
    """Normalises x (torch / numpy / Bf16) into a BF16 blob; see the module docstring."""
    if isinstance(x, _Blob):
        return _checked_blob(x, "BF16", what)
    if isinstance(x, Bf16):
        return _Blob("BF16", x.shape, x.data)
    if isinstance(x, F32):
        return _Blob("BF16", x.shape, array.array("H", (f32_to_bf16_bits(v) for v in x.data)))
    if _is_torch(x):
        return _torch_to_bf16_blob(x)
    if _is_numpy(x):
        import numpy as np
        if x.dtype.name == "bfloat16" or x.dtype in (np.uint16, np.int16):
            bits = np.ascontiguousarray(x).view(np.uint16)
            return _Blob("BF16", x.shape, np.ascontiguousarray(bits, dtype="<u2"))
        if x.dtype.kind == "f":
            return _Blob("BF16", x.shape, np.ascontiguousarray(f32_to_bf16_bits_np(x), dtype="<u2"))
        raise CaptureError(f"{what}: numpy dtype {x.dtype} is not a float or bf16 bit pattern")
    raise CaptureError(f"{what}: cannot store a {type(x).__name__} as BF16 "
                       "(give a torch tensor, a numpy array or precgate_capture.Bf16)")


def to_f32_blob(x, what="tensor"):
    """Normalises x (torch / numpy / F32 / sequence of numbers) into an F32 blob."""
    if isinstance(x, _Blob):
        return _checked_blob(x, "F32", what)
    if isinstance(x, F32):
        return _Blob("F32", x.shape, x.data)
    if isinstance(x, Bf16):
        return _Blob("F32", x.shape, array.array("f", x.tolist_f32()))
    if _is_torch(x):
        return _torch_to_f32_blob(x)
    if _is_numpy(x):
        import numpy as np
        if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
            raise CaptureError(f"{what}: numpy dtype {x.dtype} is not a float")
        return _Blob("F32", x.shape, np.ascontiguousarray(x, dtype="<f4"))
    try:
        vals = [float(v) for v in x]
    except TypeError:
        raise CaptureError(f"{what}: cannot store a {type(x).__name__} as F32") from None
    return _Blob("F32", (len(vals),), array.array("f", vals))


# --------------------------------------------------------------------------
# safetensors container
# --------------------------------------------------------------------------

def _header_bytes(meta, entries):
    """Header JSON padded with spaces to a multiple of 8 (entries: [(name, dtype, shape, nbytes)])."""
    header = {"__metadata__": dict(meta)}
    off = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                        "data_offsets": [off, off + nbytes]}
        off += nbytes
    js = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js


def _write_safetensors(path, meta, items):
    """Writes path through path's dot-tmp sibling and a rename. items: [(name, source)] where
    source is a _Blob or a (spool file path, dtype, shape) triple, in data order."""
    entries = []
    for name, src in items:
        if isinstance(src, _Blob):
            entries.append((name, src.dtype, src.shape, src.nbytes))
        else:
            fpath, dtype, shape = src
            entries.append((name, dtype, shape, _numel(shape) * (2 if dtype == "BF16" else 4)))
    d, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, f".{base}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(_header_bytes(meta, entries))
            for (name, src), (_, _, _, nbytes) in zip(items, entries):
                start = f.tell()
                if isinstance(src, _Blob):
                    f.write(src.tobytes())
                else:
                    with open(src[0], "rb") as g:
                        shutil.copyfileobj(g, f, _COPY_CHUNK)
                if f.tell() - start != nbytes:
                    raise CaptureError(f"{path}: tensor '{name}': wrote {f.tell() - start} bytes, "
                                       f"expected {nbytes} (spool damaged?)")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_header(path):
    """(header dict, data start offset) of a safetensors file; for checks and tools."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n).decode("utf-8")), 8 + n


def shard_name(layer: int) -> str:
    """File name of layer's shard: sorts in layer order (strcmp) for every layer < 10000."""
    return f"layer-{layer:04d}{SHARD_SUFFIX}"


# --------------------------------------------------------------------------
# metadata checks
# --------------------------------------------------------------------------

def _check_int_list(name, v, lo, hi, length=None):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise CaptureError(f"metadata '{name}': {v!r} is not a list of integers")
    out = []
    for i, x in enumerate(v):
        try:
            integral = not isinstance(x, bool) and float(x).is_integer()
        except (TypeError, ValueError, OverflowError):
            integral = False
        if not integral:
            raise CaptureError(f"metadata '{name}'[{i}] is {x!r}, expected an integer")
        x = int(x)
        if not lo <= x <= hi:
            raise CaptureError(f"metadata '{name}'[{i}] is {x}, expected an integer in [{lo}, {hi}]")
        out.append(x)
    if length is not None and len(out) != length:
        raise CaptureError(f"metadata '{name}' has {len(out)} entries, expected {length} (one per layer)")
    if length is None and not out:
        raise CaptureError(f"metadata '{name}' is empty, expected one entry per sequence")
    return out


def _positive_float(name, x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise CaptureError(f"metadata '{name}' is {x!r}, expected a finite number > 0") from None
    if not (math.isfinite(x) and x > 0 and x <= _F32_MAX and struct.unpack("<f", struct.pack("<f", x))[0] > 0):
        raise CaptureError(f"metadata '{name}' is {x!r}, expected a finite number > 0 (as a float32)")
    return x


def _check_layer(layer):
    if isinstance(layer, bool) or not isinstance(layer, int) and not hasattr(layer, "__index__"):
        raise CaptureError(f"layer {layer!r} is not an integer")
    layer = int(layer)
    if not 0 <= layer < MAX_LAYERS:
        raise CaptureError(f"layer {layer} is outside 0..{MAX_LAYERS - 1}")
    return layer


def _check_ext_name(name):
    if not isinstance(name, str) or not name or len(name) > EXT_NAME_MAX or not _EXT_NAME_RE.match(name):
        raise CaptureError(f"output name {name!r}: expected 1..{EXT_NAME_MAX} characters of A-Za-z0-9_.-")
    return name


# --------------------------------------------------------------------------
# the writer
# --------------------------------------------------------------------------

class _Spooled:
    """A tensor being assembled along axis 0 in a raw spool file."""

    __slots__ = ("path", "dtype", "tail", "rows")

    def __init__(self, path, dtype, tail):
        self.path, self.dtype, self.tail, self.rows = path, dtype, tuple(tail), 0

    @property
    def shape(self):
        return (self.rows,) + self.tail


class CaptureWriter:
    """Writes one capture (format v1): a single file or a directory of per-layer shards.

        w = CaptureWriter("cap/", model="gpt-oss-20b", seq_q=[...], seq_kv=[...])
        w.write_layer(0, q, k, v, sinks=s, outs={"vllm": o})   # a whole layer, or:
        w.append(1, q=q_part, k=k_part, v=v_part)               # pieces along the token axis
        w.close()                                              # validates, writes, returns paths

    path ending in ".safetensors" (or sharded=False) is one file; anything else
    (or sharded=True) is a directory of shards `layer-NNNN.safetensors`.
    Metadata (the keyword arguments, also settable as attributes until the
    first shard is written) is validated against the tensors: q/out are
    [sum(seq_q), Hq, D], k/v are [sum(seq_kv), Hkv, D] with Hkv dividing Hq,
    sinks are [Hq], per-layer lists have one entry per layer, layers run 0..n-1.
    q/k/v/sinks must be finite (precgate refuses Inf/NaN there); outputs may
    hold NaN/Inf (the sweep counts them). Any violation raises CaptureError.

    write_layer() in shard mode writes the shard immediately, so the metadata
    must be complete then (n_layers: given, or the length of a per-layer list).
    Everything else is spooled and written by close(). Use it as a context
    manager to have the spool removed when recording fails.
    """

    def __init__(self, path, *, model="", seq_q=None, seq_kv=None, sm_scale=None,
                 sliding_window=None, q_scale=None, k_scale=None, v_scale=None,
                 block_size=None, n_layers=None, sharded=None, overwrite=False,
                 check_finite=True):
        self.path = os.fspath(path)
        self.sharded = (not self.path.endswith(SHARD_SUFFIX)) if sharded is None else bool(sharded)
        self.model = model
        self.seq_q, self.seq_kv = seq_q, seq_kv
        self.sm_scale = sm_scale
        self.sliding_window = sliding_window
        self.q_scale, self.k_scale, self.v_scale = q_scale, k_scale, v_scale
        self.block_size = block_size
        self.n_layers = n_layers
        self.check_finite = check_finite
        self._frozen_meta = None           # metadata of the shards already written
        self._written = {}                 # layer -> shard path (immediate shards)
        self._spool = {}                   # layer -> {"q"|"k"|"v"|"out.NAME": _Spooled}
        self._sinks = {}                   # layer -> _Blob
        self._spool_dir = None
        self._closed = False
        self.paths = []
        self._prepare_target(overwrite)

    # -- target ------------------------------------------------------------

    def _prepare_target(self, overwrite):
        if self.sharded:
            os.makedirs(self.path, exist_ok=True)
            old = sorted(n for n in os.listdir(self.path)
                         if n.endswith(SHARD_SUFFIX) and not n.startswith("."))
            if old and not overwrite:
                raise CaptureError(f"{self.path}: directory already holds {len(old)} shard(s) "
                                   f"({old[0]}, ...); precgate would read them together with the "
                                   "new ones (pass overwrite=True to delete them)")
            for n in old:
                os.unlink(os.path.join(self.path, n))
            self._parent = self.path
        else:
            if os.path.exists(self.path) and not overwrite:
                raise CaptureError(f"{self.path}: exists (pass overwrite=True to replace it)")
            self._parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(self._parent, exist_ok=True)

    def _spool_path(self, layer, key):
        if self._spool_dir is None:
            self._spool_dir = tempfile.mkdtemp(prefix=".precgate-spool-", dir=self._parent)
        return os.path.join(self._spool_dir, f"{layer}.{key}.raw")

    # -- metadata ----------------------------------------------------------

    def _per_layer_lengths(self):
        lens = {}
        for key in ("sliding_window", "q_scale", "k_scale", "v_scale"):
            v = getattr(self, key)
            if v is not None:
                lens[key] = len(list(v))
        return lens

    def _layer_count_hint(self):
        if self.n_layers is not None:
            return int(self.n_layers)
        lens = set(self._per_layer_lengths().values())
        return lens.pop() if len(lens) == 1 else None

    def metadata(self, n_layers):
        """The validated __metadata__ map (all strings) for a capture of n_layers layers."""
        if self.seq_q is None or self.seq_kv is None:
            raise CaptureError("metadata 'seq_q' and 'seq_kv' are required (tokens per sequence)")
        sq = _check_int_list("seq_q", self.seq_q, 1, INT32_MAX)
        skv = _check_int_list("seq_kv", self.seq_kv, 1, INT32_MAX)
        if len(sq) != len(skv):
            raise CaptureError(f"metadata 'seq_kv' has {len(skv)} entries, expected {len(sq)} (as 'seq_q')")
        for i, (a, b) in enumerate(zip(sq, skv)):
            if b < a:
                raise CaptureError(f"metadata 'seq_kv'[{i}] is {b}, expected at least seq_q[{i}] = {a} "
                                   "(context plus new tokens)")
        if not isinstance(self.model, str):
            raise CaptureError(f"metadata 'model' is {self.model!r}, expected a string")
        meta = {"format": FORMAT, "model": self.model,
                "seq_q": json.dumps(sq, separators=(",", ":")),
                "seq_kv": json.dumps(skv, separators=(",", ":"))}
        if self.sm_scale is not None:
            meta["sm_scale"] = json.dumps(_positive_float("sm_scale", self.sm_scale))
        if self.sliding_window is not None:
            w = _check_int_list("sliding_window", self.sliding_window, 0, INT32_MAX, n_layers)
            meta["sliding_window"] = json.dumps(w, separators=(",", ":"))
        scales = [getattr(self, k) for k in ("q_scale", "k_scale", "v_scale")]
        present = [s is not None for s in scales]
        if any(present) and not all(present):
            missing = [k for k, p in zip(("q_scale", "k_scale", "v_scale"), present) if not p]
            raise CaptureError(f"metadata has some of q_scale/k_scale/v_scale but not {' and '.join(missing)} "
                               "(give all three, or none)")
        if all(present):
            for key, vals in zip(("q_scale", "k_scale", "v_scale"), scales):
                vals = list(vals)
                if len(vals) != n_layers:
                    raise CaptureError(f"metadata '{key}' has {len(vals)} entries, expected {n_layers} (one per layer)")
                meta[key] = json.dumps([_positive_float(f"{key}[{i}]", x) for i, x in enumerate(vals)],
                                       separators=(",", ":"))
        if self.block_size is not None:
            if isinstance(self.block_size, bool) or int(self.block_size) not in BLOCK_SIZES \
                    or int(self.block_size) != self.block_size:
                raise CaptureError(f"metadata 'block_size' is {self.block_size!r}, expected one of {BLOCK_SIZES}")
            meta["block_size"] = str(int(self.block_size))
        return meta

    def _tokens(self):
        return sum(int(x) for x in self.seq_q), sum(int(x) for x in self.seq_kv)

    # -- shape checks ------------------------------------------------------

    def _check_layer_shapes(self, layer, shapes, sinks_shape):
        """shapes: {"q"|"k"|"v"|"out.NAME": shape}; raises CaptureError naming the tensor."""
        tq, tkv = self._tokens()
        for key in ("q", "k", "v"):
            if key not in shapes:
                raise CaptureError(f"layers.{layer}.{key} is missing (every layer needs q, k and v)")
        for key, shape in shapes.items():
            if len(shape) != 3:
                layout = "[tokens, kv_heads, head_dim]" if key in ("k", "v") else "[tokens, heads, head_dim]"
                raise CaptureError(f"layers.{layer}.{key}: shape {list(shape)} has {len(shape)} dimensions, "
                                   f"expected 3 {layout}")
            if any(s < 1 for s in shape[1:]):
                raise CaptureError(f"layers.{layer}.{key}: shape {list(shape)} has an empty dimension")
        q = shapes["q"]
        hq, d = q[1], q[2]
        if q[0] != tq:
            raise CaptureError(f"layers.{layer}.q: dimension 0 (tokens) is {q[0]}, expected {tq} (sum of seq_q)")
        for key in ("k", "v"):
            s = shapes[key]
            if s[0] != tkv:
                raise CaptureError(f"layers.{layer}.{key}: dimension 0 (tokens) is {s[0]}, "
                                   f"expected {tkv} (sum of seq_kv)")
            if s[2] != d:
                raise CaptureError(f"layers.{layer}.{key}: dimension 2 (head_dim) is {s[2]}, "
                                   f"expected {d} (head_dim of layers.{layer}.q)")
        hkv = shapes["k"][1]
        if hq % hkv:
            raise CaptureError(f"layers.{layer}.k: dimension 1 (kv_heads) is {hkv}, which does not divide "
                               f"the {hq} query heads of layers.{layer}.q")
        if shapes["v"][1] != hkv:
            raise CaptureError(f"layers.{layer}.v: dimension 1 (kv_heads) is {shapes['v'][1]}, "
                               f"expected {hkv} (kv heads of layers.{layer}.k)")
        for key, s in shapes.items():
            if key.startswith("out.") and tuple(s) != (tq, hq, d):
                raise CaptureError(f"layers.{layer}.{key}: shape {list(s)}, expected [{tq}, {hq}, {d}] "
                                   f"(like layers.{layer}.q)")
        if sinks_shape is not None and tuple(sinks_shape) != (hq,):
            raise CaptureError(f"layers.{layer}.sinks: shape {list(sinks_shape)}, expected [{hq}] "
                               f"(query heads of layers.{layer}.q)")

    def _check_finite(self, layer, key, blob):
        if not self.check_finite or key.startswith("out."):
            return
        bad = blob.first_nonfinite()
        if bad is not None:
            i, kind = bad
            where = f"element {i}"
            if len(blob.shape) == 3:
                h, d = blob.shape[1], blob.shape[2]
                where = f"token {i // (h * d)}, head {i // d % h}, dim {i % d} (element {i})"
            raise CaptureError(f"layers.{layer}.{key}: {kind} at {where}; precgate refuses non-finite "
                               "q/k/v/sinks")

    # -- writing -----------------------------------------------------------

    def _normalise(self, layer, q=None, k=None, v=None, outs=None):
        layer = _check_layer(layer)
        blobs = {}
        for key, x in (("q", q), ("k", k), ("v", v)):
            if x is not None:
                blobs[key] = to_bf16_blob(x, f"layers.{layer}.{key}")
        for name, x in (outs or {}).items():
            key = "out." + _check_ext_name(name)
            blobs[key] = to_bf16_blob(x, f"layers.{layer}.{key}")
        for key, b in blobs.items():
            self._check_finite(layer, key, b)
        return layer, blobs

    def write_layer(self, layer, q, k, v, sinks=None, outs=None):
        """Adds a whole layer. In shard mode its shard is written now (metadata must be final)."""
        self._check_open()
        layer, blobs = self._normalise(layer, q, k, v, outs)
        if layer in self._written or layer in self._spool or layer in self._sinks:
            raise CaptureError(f"layers.{layer}: added twice")
        sinks_blob = None
        if sinks is not None:
            sinks_blob = to_f32_blob(sinks, f"layers.{layer}.sinks")
            self._check_finite(layer, "sinks", sinks_blob)
        self._check_layer_shapes(layer, {k_: b.shape for k_, b in blobs.items()},
                                 sinks_blob.shape if sinks_blob else None)
        if not self.sharded:
            for key, b in blobs.items():
                self._spool_append(layer, key, b)
            if sinks_blob is not None:
                self._sinks[layer] = sinks_blob
            return None
        n = self._layer_count_hint()
        if n is None:
            raise CaptureError("write_layer in shard mode needs the layer count up front (n_layers=, "
                               "or a per-layer metadata list); use append() + close() otherwise")
        if layer >= n:
            raise CaptureError(f"layers.{layer}: beyond n_layers = {n}")
        meta = self._freeze(n)
        items = ([("layers.%d.sinks" % layer, sinks_blob)] if sinks_blob is not None else []) + \
            [(f"layers.{layer}.{key}", blobs[key]) for key in _data_order(blobs)]
        path = os.path.join(self.path, shard_name(layer))
        _write_safetensors(path, meta, items)
        self._written[layer] = path
        return path

    def append(self, layer, q=None, k=None, v=None, outs=None):
        """Appends tokens (axis 0) to layer's q / k / v / outs; shapes are checked at close()."""
        self._check_open()
        layer, blobs = self._normalise(layer, q, k, v, outs)
        if layer in self._written:
            raise CaptureError(f"layers.{layer}: its shard is already written")
        for key, b in blobs.items():
            self._spool_append(layer, key, b)

    def set_sinks(self, layer, sinks):
        """Sets layer's sink logits ([Hq], stored as F32); setting them again must agree."""
        self._check_open()
        layer = _check_layer(layer)
        blob = to_f32_blob(sinks, f"layers.{layer}.sinks")
        self._check_finite(layer, "sinks", blob)
        old = self._sinks.get(layer)
        if old is not None and (old.shape != blob.shape or old.tobytes() != blob.tobytes()):
            raise CaptureError(f"layers.{layer}.sinks: set twice with different values")
        self._sinks[layer] = blob

    def _spool_append(self, layer, key, blob):
        if len(blob.shape) < 1:
            raise CaptureError(f"layers.{layer}.{key}: a scalar, expected [tokens, heads, head_dim]")
        per_layer = self._spool.setdefault(layer, {})
        sp = per_layer.get(key)
        if sp is None:
            sp = per_layer[key] = _Spooled(self._spool_path(layer, key), blob.dtype, blob.shape[1:])
        elif sp.tail != tuple(blob.shape[1:]):
            raise CaptureError(f"layers.{layer}.{key}: appending shape {list(blob.shape)} to "
                               f"[*, {', '.join(map(str, sp.tail))}] (heads and head_dim must not change)")
        with open(sp.path, "ab") as f:
            f.write(blob.tobytes())
        sp.rows += blob.shape[0]

    def _freeze(self, n_layers):
        meta = self.metadata(n_layers)
        if self._frozen_meta is None:
            self._frozen_meta = meta
        elif meta != self._frozen_meta:
            changed = sorted(k for k in set(meta) | set(self._frozen_meta)
                             if meta.get(k) != self._frozen_meta.get(k))
            raise CaptureError(f"metadata {changed} changed after shards were written "
                               "(every shard must carry the same metadata)")
        return meta

    def _check_open(self):
        if self._closed:
            raise CaptureError(f"{self.path}: writer already closed")

    def close(self):
        """Validates everything, writes the remaining shards (or the file); returns the paths."""
        self._check_open()
        try:
            layers = sorted(set(self._written) | set(self._spool) | set(self._sinks))
            if not layers:
                raise CaptureError(f"{self.path}: no layers were added (an empty capture)")
            n = layers[-1] + 1
            missing = [l for l in range(n) if l not in layers]
            if missing:
                raise CaptureError(f"layer {missing[0]} has no tensors, but layers.{n - 1}.* exist "
                                   "(layers must run 0..n-1 without gaps)")
            if self.n_layers is not None and int(self.n_layers) != n:
                raise CaptureError(f"n_layers is {self.n_layers}, but layers 0..{n - 1} were added")
            for l in layers:
                if l in self._written:
                    continue
                if l in self._sinks and l not in self._spool:
                    raise CaptureError(f"layers.{l}.q is missing (every layer needs q, k and v)")
                self._check_layer_shapes(l, {k: sp.shape for k, sp in self._spool[l].items()},
                                         self._sinks[l].shape if l in self._sinks else None)
            meta = self._freeze(n)
            if self.sharded:
                for l in layers:
                    if l in self._written:
                        continue
                    path = os.path.join(self.path, shard_name(l))
                    _write_safetensors(path, meta, self._layer_items(l))
                    self._written[l] = path
                    self._drop_spool(l)
                self.paths = [self._written[l] for l in layers]
            else:
                items = [(f"layers.{l}.sinks", self._sinks[l]) for l in layers if l in self._sinks]
                for l in layers:
                    items += [it for it in self._layer_items(l) if not it[0].endswith(".sinks")]
                _write_safetensors(self.path, meta, items)
                self.paths = [self.path]
            self._closed = True
            return list(self.paths)
        finally:
            if self._closed:
                self._remove_spool()

    def _layer_items(self, layer):
        items = [(f"layers.{layer}.sinks", self._sinks[layer])] if layer in self._sinks else []
        spooled = self._spool[layer]
        for key in _data_order(spooled):
            sp = spooled[key]
            items.append((f"layers.{layer}.{key}", (sp.path, sp.dtype, sp.shape)))
        return items

    def _drop_spool(self, layer):
        for sp in self._spool.pop(layer, {}).values():
            if os.path.exists(sp.path):
                os.unlink(sp.path)

    def _remove_spool(self):
        if self._spool_dir is not None:
            shutil.rmtree(self._spool_dir, ignore_errors=True)
            self._spool_dir = None

    def abort(self):
        """Drops the spool (shards already written stay; nothing else is written)."""
        self._closed = True
        self._remove_spool()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            if not self._closed:
                self.close()
        else:
            self.abort()
        return False


def _data_order(keys):
    """q, k, v, then the outputs by name."""
    fixed = [k for k in ("q", "k", "v") if k in keys]
    return fixed + sorted(k for k in keys if k.startswith("out."))


# --------------------------------------------------------------------------
# prefill recording shared by the recorders (HF, vLLM)
# --------------------------------------------------------------------------

class PrefillRecorder:
    """Turns per-layer attention calls of a (possibly chunked) prefill into a capture.

    Sequences are recorded one at a time: begin_sequence(n_tokens), then every
    forward pass calls on_layer() once per attention layer with that chunk's
    queries [T, Hq, D] and the chunk's NEW keys/values [T, Hkv, D] (after RoPE,
    exactly as the attention kernel sees them), then end_sequence(). Keys and
    values of every chunk are appended (the context, then the last chunk's new
    tokens: the packed k/v layout); the queries and outputs only of the chunk
    that completes the sequence. So seq_kv = n_tokens, seq_q = the last chunk's
    length, and the context is seq_kv - seq_q.

    Calls outside a sequence (warm-up, profiling) and calls after a layer has
    seen all n_tokens (a decode step) are ignored and counted in `ignored`.
    Per-layer constants (window, sinks, scales) and the global sm_scale are
    taken from the calls; sm_scale must be the same in every layer (format v1
    carries one). Tensors may be torch tensors on any device, numpy arrays or
    Bf16; they go to the host and into the writer's spool right away.
    """

    def __init__(self, writer: CaptureWriter, out_name=None):
        self.writer = writer
        self.out_name = _check_ext_name(out_name) if out_name else None
        self.seq_q, self.seq_kv = [], []
        self.windows = {}      # layer -> int
        self.scales = {}       # layer -> (q, k, v)
        self.sm_scale = None
        self.layers = set()
        self.ignored = 0
        self._total = None     # tokens of the current sequence
        self._seen = {}        # layer -> kv tokens seen in the current sequence
        self._last_q = {}      # layer -> query tokens recorded in the current sequence

    @property
    def active(self):
        return self._total is not None

    def begin_sequence(self, n_tokens):
        if self._total is not None:
            raise CaptureError("begin_sequence: the previous sequence was not ended")
        if int(n_tokens) < 1:
            raise CaptureError(f"begin_sequence: {n_tokens} tokens")
        self._total, self._seen, self._last_q = int(n_tokens), {}, {}

    def on_layer(self, layer, q, k, v, out=None, sinks=None, window=None, sm_scale=None, scales=None):
        """Records one layer's call; returns False when it was ignored (see the class doc)."""
        if self._total is None:
            self.ignored += 1
            return False
        layer = _check_layer(layer)
        seen = self._seen.get(layer, 0)
        t = int(q.shape[0])
        if seen >= self._total:
            self.ignored += 1
            return False
        if seen + t > self._total or int(k.shape[0]) != t or int(v.shape[0]) != t:
            raise CaptureError(f"layer {layer}: a chunk of {t} queries / {k.shape[0]} keys after {seen} "
                               f"tokens overruns the sequence's {self._total} tokens (padding or batching?)")
        last = seen + t == self._total
        outs = None
        if last and self.out_name is not None:
            if out is None:
                raise CaptureError(f"layer {layer}: an output named {self.out_name!r} was requested, "
                                   "but the call gave none")
            outs = {self.out_name: out}
        self.writer.append(layer, q=q if last else None, k=k, v=v, outs=outs)
        self._seen[layer] = seen + t
        if last:
            self._last_q[layer] = t
        self.layers.add(layer)
        if sinks is not None:
            self.writer.set_sinks(layer, sinks)
        w = int(window or 0)
        if self.windows.setdefault(layer, w) != w:
            raise CaptureError(f"layer {layer}: sliding window changed from {self.windows[layer]} to {w}")
        if sm_scale is not None:
            s = float(sm_scale)
            if self.sm_scale is None:
                self.sm_scale = s
            elif abs(s - self.sm_scale) > 1e-7 * self.sm_scale:
                raise CaptureError(f"layer {layer}: sm_scale {s} differs from {self.sm_scale} "
                                   "(capture v1 carries one sm_scale)")
        if scales is not None:
            self.scales[layer] = tuple(float(x) for x in scales)
        return True

    def end_sequence(self):
        if self._total is None:
            raise CaptureError("end_sequence without begin_sequence")
        total, seen, last_q = self._total, self._seen, self._last_q
        self._total = None
        if not seen:
            raise CaptureError("end_sequence: no attention layer was called (hooks not installed?)")
        expected = set(range(max(seen) + 1)) | self.layers
        for layer in sorted(expected):
            if seen.get(layer, 0) != total:
                raise CaptureError(f"layer {layer}: saw {seen.get(layer, 0)} of the sequence's {total} tokens")
        qs = set(last_q.values())
        if len(qs) != 1:
            raise CaptureError(f"layers disagree on the last chunk's length: {sorted(qs)}")
        self.seq_q.append(qs.pop())
        self.seq_kv.append(total)

    def close(self, **extra_meta):
        """Fills the writer's metadata from what was seen (extra_meta overrides) and closes it."""
        if self._total is not None:
            raise CaptureError("close: a sequence is still open")
        if not self.seq_q:
            raise CaptureError("close: no sequence was recorded")
        n = max(self.layers) + 1
        w = self.writer
        w.seq_q, w.seq_kv = list(self.seq_q), list(self.seq_kv)
        if self.sm_scale is not None:
            w.sm_scale = self.sm_scale
        if any(self.windows.get(l, 0) for l in range(n)):
            w.sliding_window = [self.windows.get(l, 0) for l in range(n)]
        if self.scales:
            if set(self.scales) != set(range(n)):
                raise CaptureError("scales were given for some layers only")
            w.q_scale = [self.scales[l][0] for l in range(n)]
            w.k_scale = [self.scales[l][1] for l in range(n)]
            w.v_scale = [self.scales[l][2] for l in range(n)]
        for key, val in extra_meta.items():
            setattr(w, key, val)
        return w.close()


# --------------------------------------------------------------------------
# prompts (shared by the recorders)
# --------------------------------------------------------------------------

def add_prompt_arguments(ap):
    """Adds the recorders' prompt options to the argparse parser ap: --traces, --field,
    --with-completion, --prompt-file and --limit (load_prompts' arguments) and --max-tokens."""
    ap.add_argument("--traces", help="AIME-style traces JSONL (prompt = --field)")
    ap.add_argument("--field", default="problem")
    ap.add_argument("--with-completion", action="store_true",
                    help="append each trace's first completion (reasoning + content) to its prompt")
    ap.add_argument("--prompt-file", action="append", default=[], help="a text file holding one prompt")
    ap.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    ap.add_argument("--max-tokens", type=int, default=None, help="truncate prompts to this many tokens")


def load_prompts(traces=None, texts=(), field="problem", limit=None, with_completion=False):
    """Prompts from an AIME-style traces JSONL (one object per line, text in `field`) and/or
    text files (one prompt per file); at most `limit` in all. with_completion appends the
    record's first completion (its reasoning, then its content), so the prefill reads a whole
    recorded trace: long contexts from short problems."""
    prompts = []
    if traces:
        with open(traces, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                rec = json.loads(line)
                if not isinstance(rec.get(field), str):
                    raise CaptureError(f"{traces}:{n}: no string field {field!r}")
                text = rec[field]
                comps = rec.get("completions") or []
                if with_completion and comps:
                    c = comps[0]
                    text += "".join("\n\n" + c[k] for k in ("reasoning", "content") if isinstance(c.get(k), str))
                prompts.append(text)
    for path in texts:
        with open(path, encoding="utf-8") as f:
            prompts.append(f.read())
    if limit is not None:
        prompts = prompts[:limit]
    if not prompts:
        raise CaptureError("no prompts (give --traces and/or --prompt-file)")
    return prompts


def byte_tokenize(text, vocab_size, max_tokens=None):
    """A tokenizer-free stand-in for random-weight models: UTF-8 bytes, offset past ids 0..2
    (reserved for special tokens) and wrapped into the vocabulary."""
    ids = [3 + (b % max(1, vocab_size - 3)) for b in text.encode("utf-8")]
    return ids[:max_tokens] if max_tokens else ids


def chunk_bounds(n_tokens, chunk):
    """[(start, end)] of a prefill of n_tokens in chunks of `chunk` tokens (0: one chunk)."""
    if not chunk or chunk >= n_tokens:
        return [(0, n_tokens)]
    return [(s, min(s + chunk, n_tokens)) for s in range(0, n_tokens, chunk)]
