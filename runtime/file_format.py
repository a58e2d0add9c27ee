"""The compiled graph file: write it, check it, load it as a runnable Model.

Layout (all integers little-endian):

    0   8 bytes   magic b"\\x89GRAPHC\\n"
    8   u32       format version (FORMAT_VERSION)
    12  u32       flags: FLAG_SIGNED (1) when the file is signed, else 0
    16  u64       header size H in bytes
    24  H bytes   header: UTF-8 JSON (below)
    ...           blobs: raw little-endian array bytes, each at a 64-byte aligned offset
    end-96        (signed files) Ed25519 signature of every byte before it (runtime/signing.py)
    end-32        SHA-256 of every byte before it

The header holds plain data only:
    {"format": "graphc.compiled",
     "target": {"triple", "cpu", "features"} | {"kind": "gpu", "arch": "sm_80"},
     "signature": {"inputs": [{"name", "tensor", "dtype", "dims"}], "outputs": [...]},
     "executables": [spec, ...],   # runtime.Executable specs (GPU files: GPU specs with
                                   # "ptx", "emulation_ir", "launches", run by
                                   # runtime.gpu.GpuExecutable), first match wins; each
                                   # constant is {"dtype", "shape", "blob": k}; "debug" is
                                   # what graphc-dump shows (graphs, kernels, memory plan)
     "state": [{"name", "dtype", "shape", "blob": k}],  # values of updatable variables
     "blobs": [{"offset", "nbytes"}]}

Reading never runs anything from the file and never trusts it: the magic and version are
checked first (a newer version gets its own message), every size and offset is checked
against the file's length before it is read, the checksum before the JSON is parsed, then
the signature when the caller names trusted keys; the JSON size is capped.
runtime/verify.py then checks the header completely before anything runs: duplicate keys,
dtypes from a whitelist, dim expressions bounded in size and naming only the file's own
symbols, every cross reference, sizes by bounds over the symbolic dims, a GPU spec's
launches (runtime/gpu/spec.py), the code's calls and the interface the code was compiled
for. Every problem is a FileFormatError naming the file and the field. Blobs are read in
place from a memory map (np.frombuffer, read-only).

Running a file runs its native code. The verifier limits what that code may call, but it
cannot prove code harmless: only a signature (trusted_keys) says who wrote a file; load
files you trust as you would a library.
"""
import hashlib
import json
import mmap
import os
import struct
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import jit, shapes, signing, verify
from .errors import FeedError, NoVariantFits, RuntimeFailure, ShapeError
from .executable import Executable
from .gpu import DeviceVariables, GpuExecutable, open_device
from .gpu.spec import is_gpu_target
from .variants import Variants

MAGIC = b"\x89GRAPHC\n"
# 2: each spec's code declares the interface it was compiled for (runtime/verify.py)
FORMAT_VERSION = 2
PREFIX = struct.Struct("<8sIIQ")
CHECKSUM_BYTES = 32
ALIGN = 64
MAX_HEADER_BYTES = 256 << 20


class FileFormatError(RuntimeFailure, ValueError):
    """A compiled file that cannot be used: not a graphc file, a newer format, truncated,
    corrupted, or inconsistent."""


_ORT_TYPES = {"bool": "tensor(bool)", "float16": "tensor(float16)",
              "float32": "tensor(float)", "float64": "tensor(double)",
              "complex64": "tensor(complex64)", "complex128": "tensor(complex128)"}


class TensorInfo:
    """One input or output of a Model, as ONNX Runtime's NodeArg shows it: `name`,
    `dtype` (numpy), `type` (ONNX Runtime's spelling, e.g. 'tensor(float)'), `shape`
    (a tuple, None for a dim known only at run time) and `dims` (the dims as text, e.g.
    '[x.0, 784]': x.0 is dim 0 of input x)."""
    __slots__ = ("name", "dtype", "shape", "dims")

    def __init__(self, name, dtype, shape, dims):
        self.name, self.dtype, self.shape, self.dims = name, dtype, shape, dims

    @property
    def type(self):
        return _ORT_TYPES.get(self.dtype.name, f"tensor({self.dtype.name})")

    def __iter__(self):  # unpacks as the namedtuple it replaces did
        return iter((self.name, self.dtype, self.shape, self.dims))

    def __eq__(self, other):
        return isinstance(other, TensorInfo) and tuple(self) == tuple(other)

    __hash__ = None

    def __repr__(self):
        return (f"TensorInfo(name={self.name!r}, dtype={self.dtype.name}, "
                f"shape={list(self.shape)})")


def write(path, signature, executables, state=None, target=None, sign_with=None):
    """Writes a compiled file atomically.

    signature: {"inputs": [{"name", "tensor", "dtype", "dims"}], "outputs": [...]}, in
    the executables' feed and fetch order. executables: runtime specs whose constants carry
    their bytes in "data". state: {variable name: array} stored as blobs. sign_with: an
    Ed25519 private key (runtime/signing.py) to sign the file with. Returns path."""
    blobs = []

    def add_blob(array):
        blobs.append(np.ascontiguousarray(array).astype(
            np.asarray(array).dtype.newbyteorder("<"), copy=False))
        return len(blobs) - 1

    specs = []
    for spec in executables:
        spec = dict(spec)
        consts = []
        for c in spec.get("constants", []):
            dtype = np.dtype(c["dtype"]).newbyteorder("<")
            arr = np.frombuffer(bytes(c["data"]), dtype).reshape(c["shape"])
            consts.append({"dtype": c["dtype"], "shape": list(c["shape"]),
                           "blob": add_blob(arr)})
        spec["constants"] = consts
        code = "emulation_ir" if is_gpu_target(spec.get("target")) else "llvm_ir"
        spec[code] = verify.bind_interface(spec[code], spec)
        specs.append(spec)
    state_entries = []
    for name, value in (state or {}).items():
        arr = np.asarray(value)
        state_entries.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape),
                              "blob": add_blob(arr)})
    header = {"format": "graphc.compiled", "target": target or specs[0].get("target"),
              "signature": signature, "executables": specs, "state": state_entries,
              "blobs": []}
    # blob offsets are absolute, so they depend on the header's length: lay the blobs out
    # after a guessed header size and grow the guess until the header fits before them
    guess = 1024
    while True:
        offset = _align(PREFIX.size + guess)
        header["blobs"] = []
        for b in blobs:
            header["blobs"].append({"offset": offset, "nbytes": int(b.nbytes)})
            offset = _align(offset + b.nbytes)
        header_bytes = json.dumps(header, separators=(",", ":"), default=plain_data).encode()
        if len(header_bytes) <= guess:
            break
        guess = len(header_bytes) + 1024
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".graphc-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            digest = hashlib.sha256()

            flags = 0 if sign_with is None else signing.FLAG_SIGNED
            signed = []  # what the signature covers: the bytes the checksum covers

            def put(data):
                digest.update(data)
                f.write(data)
                if sign_with is not None:
                    signed.append(data)
            put(PREFIX.pack(MAGIC, FORMAT_VERSION, flags, len(header_bytes)))
            put(header_bytes)
            position = PREFIX.size + len(header_bytes)
            for entry, arr in zip(header["blobs"], blobs):
                put(b"\0" * (entry["offset"] - position))
                put(arr.tobytes())
                position = entry["offset"] + entry["nbytes"]
            put(b"\0" * (_align(position) - position))
            if sign_with is not None:
                put(signing.sign(b"".join(signed), sign_with))
            f.write(digest.digest())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plain_data(value):
    """json.dumps' `default`: NumPy scalars and tuples as JSON values, anything else an error."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not plain data")


# ------------------------------------------------------------------- reading
class CompiledFile:
    """A checked compiled file: its header (validated plain data) and its blobs, read in
    place from a memory map. Nothing is compiled; `load` does that.

    trusted_keys: Ed25519 public keys (runtime/signing.py); when given, the file must be
    signed by one of them. check_code=False skips verifying the code (tools that only
    show a file)."""

    def __init__(self, path, verify_checksum=True, trusted_keys=None, check_code=True):
        self.path = str(path)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < PREFIX.size:
                    self._fail(f"{size} bytes is too short for a graphc compiled file")
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise FileFormatError(f"cannot read {self.path}: {e.strerror or e}") from None
        self.size = size
        self.header = self._read_header(verify_checksum, trusted_keys)
        self.version = FORMAT_VERSION
        verify.HeaderVerifier(self.header, self._fail, self._data_start, self._data_end,
                              check_code).check()

    def _fail(self, problem):
        raise FileFormatError(f"{self.path}: {problem}")

    def _read_header(self, verify_checksum, trusted_keys):
        magic, version, flags, header_size = PREFIX.unpack_from(self._map, 0)
        if magic != MAGIC:
            self._fail("not a graphc compiled file (bad magic bytes)")
        if version > FORMAT_VERSION:
            self._fail(f"format version {version} is newer than this runtime reads "
                       f"(up to {FORMAT_VERSION}); upgrade graphc to load it")
        if version < 1:
            self._fail(f"unknown format version {version}")
        body_end = self.size - CHECKSUM_BYTES
        if header_size > MAX_HEADER_BYTES:
            self._fail(f"header size {header_size} exceeds the {MAX_HEADER_BYTES}-byte limit")
        if PREFIX.size + header_size > body_end:
            self._fail(f"truncated: the header needs {header_size} bytes but the file has "
                       f"{self.size} bytes in all")
        if verify_checksum:
            digest = hashlib.sha256(memoryview(self._map)[:body_end]).digest()
            if digest != self._map[body_end:]:
                self._fail("checksum mismatch: the file is truncated or corrupted")
        if flags & ~signing.FLAG_SIGNED:
            self._fail(f"unknown flags {flags:#x} in the prefix")
        self._data_start = PREFIX.size + header_size
        self._data_end = body_end
        if flags & signing.FLAG_SIGNED:
            self._data_end = body_end - signing.SIGNATURE_BYTES
            if self._data_end < self._data_start:
                self._fail("truncated: no room for the signature")
        if trusted_keys is not None:
            self._check_signature(flags, trusted_keys)
        raw = self._map[PREFIX.size:PREFIX.size + header_size]
        try:
            header = verify.load_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            self._fail(f"header is not valid JSON ({type(e).__name__}: {str(e)[:100]})")
        if not isinstance(header, dict) or header.get("format") != "graphc.compiled":
            self._fail("header does not describe a graphc compiled graph")
        return header

    def _check_signature(self, flags, trusted_keys):
        if isinstance(trusted_keys, (bytes, str)) or not hasattr(trusted_keys, "__iter__"):
            raise TypeError("trusted_keys must be a list of Ed25519 public keys")
        if not flags & signing.FLAG_SIGNED:
            self._fail("the file is not signed, and trusted_keys asks for a signed file")
        end = self._data_end
        signature = self._map[end:end + signing.SIGNATURE_BYTES]
        if not signing.signed_by(memoryview(self._map)[:end], signature, list(trusted_keys)):
            self._fail("its signature does not match any of the trusted keys")

    def blob(self, k):
        """The bytes of blob k (a read-only memoryview into the map)."""
        entry = self.header["blobs"][k]
        return memoryview(self._map)[entry["offset"]:entry["offset"] + entry["nbytes"]]

    def array(self, entry):
        """The read-only array an entry {"dtype", "shape", "blob"} describes."""
        dtype = np.dtype(entry["dtype"]).newbyteorder("<")
        return np.frombuffer(self.blob(entry["blob"]), dtype).reshape(entry["shape"])

    def spec(self, i):
        """Executable spec i as runtime.Executable takes it (constant bytes included)."""
        spec = {k: v for k, v in self.header["executables"][i].items() if k != "debug"}
        spec["constants"] = [{"dtype": c["dtype"], "shape": c["shape"],
                              "data": self.blob(c["blob"])} for c in spec["constants"]]
        return spec


# ------------------------------------------------------------------- the model
class Model:
    """A loaded compiled graph: `run({input name: array}) -> {output name: array}`, or as
    in ONNX Runtime `run(output_names or None, feeds) -> [array]`; `get_inputs()` and
    `get_outputs()` describe the signature (TensorInfo: name, dtype, type, shape).

    Variables the graph updates are kept in `state` ({name: array}, starting from the
    values stored in the file) and carried from run to run. A GPU file runs on `device`
    (a runtime.gpu device); its state is a runtime.gpu.DeviceVariables, a mapping whose
    values stay on the device between runs."""

    def __init__(self, file, device=None):
        self.path = file.path
        self.target = file.header["target"]
        sig = file.header["signature"]
        self.inputs = [_info(e) for e in sig["inputs"]]
        self.outputs = [_info(e) for e in sig["outputs"]]
        self.device = device
        state = {e["name"]: np.array(file.array(e)) for e in file.header["state"]}
        if device is not None:
            state = DeviceVariables(device, state)
        self.state = state
        self._file = file
        self._specs = [file.spec(i) for i in range(len(file.header["executables"]))]
        self._executables = [None] * len(self._specs)
        self._variants = Variants()
        for i in range(len(self._specs)):
            self._variants.add(_StoredVariant(self, i))
        if device is None:
            try:
                jit.check_target(self.target)
            except RuntimeFailure as e:
                raise type(e)(f"{self.path}: {e}") from None
        self._executable(0)  # compile the main variant now: a bad file fails at load

    def __repr__(self):
        sig = ", ".join(f"{i.name}: {i.dtype}{i.dims}" for i in self.inputs)
        out = ", ".join(f"{o.name}: {o.dtype}{o.dims}" for o in self.outputs)
        return f"<runtime.Model {os.path.basename(self.path)} ({sig}) -> ({out})>"

    def _executable(self, i):
        exe = self._executables[i]
        if exe is None:
            try:
                if self.device is not None:
                    exe = GpuExecutable(self._specs[i], self.device)
                else:
                    exe = Executable(self._specs[i])
            except RuntimeFailure:
                raise
            except (ValueError, TypeError, RuntimeError, LookupError) as e:
                raise FileFormatError(f"{self.path}: executable {i} cannot be built: "
                                      f"{str(e)[:300]}") from None
            self._executables[i] = exe
        return exe

    @property
    def compile_seconds(self):
        return sum(e.compile_seconds for e in self._executables if e is not None)

    def get_inputs(self) -> List["TensorInfo"]:
        """The inputs, in the file's order (ONNX Runtime's InferenceSession.get_inputs)."""
        return list(self.inputs)

    def get_outputs(self) -> List["TensorInfo"]:
        """The outputs, in the file's order (ONNX Runtime's get_outputs)."""
        return list(self.outputs)

    def run(self, output_names: Union[Mapping[str, np.ndarray], Sequence[str], None],
            feeds: Optional[Mapping[str, np.ndarray]] = None
            ) -> Union[Dict[str, np.ndarray], List[np.ndarray]]:
        """Runs the graph once. Two forms:

            run({input name: array})                 -> {output name: array}
            run(output_names, {input name: array})   -> [array, ...]

        The second is ONNX Runtime's: output_names is a list of output names (None: every
        output, in the file's order) and the arrays come back in that order. A feed must
        have its input's dtype, or one that converts to it without loss (int32 for int64);
        a float64 array for a float32 input is refused, not rounded."""
        if feeds is None:
            return dict(zip((o.name for o in self.outputs), self._run_all(output_names)))
        wanted = self._output_indices(output_names)
        values = self._run_all(feeds)
        return [values[k] for k in wanted]

    def _output_indices(self, output_names):
        names = [o.name for o in self.outputs]
        if output_names is None:
            return range(len(names))
        if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
            raise FeedError(f"output_names must be a list of output names or None, got "
                            f"{output_names!r}")
        unknown = [n for n in output_names if n not in names]
        if unknown:
            raise FeedError("unknown output(s) " + ", ".join(map(repr, unknown)) +
                            "; the model's outputs are " + ", ".join(map(repr, names)))
        return [names.index(n) for n in output_names]

    def _run_all(self, inputs):
        if not isinstance(inputs, dict):
            raise FeedError(f"run takes run(feeds) or run(output_names, feeds), feeds a "
                            f"dict {{input name: array}}; got {type(inputs).__name__} feeds")
        expected = [i.name for i in self.inputs]
        missing = [n for n in expected if n not in inputs]
        unexpected = [n for n in inputs if n not in expected]
        if missing or unexpected:
            parts = []
            if missing:
                parts.append("missing input(s) " + ", ".join(map(repr, missing)))
            if unexpected:
                parts.append("unknown input(s) " + ", ".join(map(repr, unexpected)))
            raise FeedError("; ".join(parts) + "; the model takes " + ", ".join(
                f"{i.name} ({i.dtype} {i.dims})" for i in self.inputs))
        arrays = [self._conform(info, inputs[info.name]) for info in self.inputs]
        try:
            return self._variants.run(arrays, self.state)
        except NoVariantFits as e:
            raise ShapeError("the inputs' shapes are outside what the file was compiled "
                             "for: " + "; ".join(e.failures)) from None

    @staticmethod
    def _conform(info, value):
        arr = _feed_array(info, value)
        if len(arr.shape) != len(info.shape) or any(
                d is not None and d != n for d, n in zip(info.shape, arr.shape)):
            raise ShapeError(f"input {info.name!r} has shape {list(arr.shape)}, the model "
                             f"takes {info.dims}")
        return arr


class _StoredVariant:
    """Executable i of a file as a variant: JIT-compiled when first run (the main one is
    compiled when the file is loaded)."""

    def __init__(self, model, i):
        self.model = model
        self.index = i
        self.feeds = model._specs[i]["feeds"]

    def run(self, feed_arrays, variables):
        return self.model._executable(self.index).run(feed_arrays, variables)


def _feed_array(info, value):
    """`value` as an array of the input's dtype. Arrays convert only where no value can
    change (np.can_cast 'safe'): a silent float64 -> float32 rounding would hand back
    numbers that differ from what the caller fed. Python numbers and lists have no dtype
    of their own and are converted as TF's feed_dict does, unless a value would change
    kind (1.5 fed to an int input)."""
    try:
        if isinstance(value, (np.ndarray, np.generic)):
            arr = np.asarray(value)
            if arr.dtype == info.dtype or np.can_cast(arr.dtype, info.dtype, "safe"):
                return np.asarray(arr, dtype=info.dtype)
        else:
            arr = np.asarray(value)
            converted = np.asarray(value, dtype=info.dtype)
            if arr.dtype == object or arr.dtype.kind == converted.dtype.kind or \
                    np.can_cast(arr.dtype, info.dtype, "safe") or \
                    np.array_equal(converted, arr):
                return converted
    except (TypeError, ValueError, OverflowError) as e:
        raise FeedError(f"input {info.name!r} must be {info.dtype}: {e}") from None
    raise FeedError(f"input {info.name!r} is {info.dtype} but was fed a {arr.dtype} array; "
                    f"converting it could change its values: cast it first "
                    f"(e.g. x.astype(np.{info.dtype.name}))")


def _info(entry):
    dims = entry["dims"]
    return TensorInfo(entry["name"], np.dtype(entry["dtype"]),
                      tuple(d if isinstance(d, int) else None for d in dims),
                      shapes.dims_text(dims))


def load(path: str, verify_checksum: bool = True, device=None,
         trusted_keys: Optional[Sequence] = None) -> "Model":
    """Loads a compiled graph file: `runtime.load(path).run({"x": array})`.

    trusted_keys: Ed25519 public keys (or their 32 raw bytes); when given, only a file
    signed by one of them (gc.export(..., sign_with=private key)) is loaded.

    device: for a GPU file, "cuda" (the default: GPU 0 through pycuda; GpuUnavailable
    where pycuda or a driver is missing) or "emulated" (its kernels' CPU emulation, on
    the host); a CPU file takes None or "cpu"."""
    file = CompiledFile(path, verify_checksum, trusted_keys)
    gpu_file = is_gpu_target(file.header["target"])
    if not gpu_file:
        if device not in (None, "cpu"):
            raise ValueError(f"{file.path} holds CPU code; it cannot run on device "
                             f"{device!r}")
        return Model(file)
    if device == "cpu":
        raise ValueError(f"{file.path} holds GPU code ({file.header['target']['arch']}); "
                         "load it with device='cuda' or device='emulated'")
    return Model(file, open_device(device or "cuda"))


def read(path, verify_checksum=True, check_code=False):
    """The checked file without compiling its code (for tools such as graphc-dump)."""
    return CompiledFile(path, verify_checksum, check_code=check_code)
