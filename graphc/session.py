"""Session: binds feeds, finds (or builds) the executable for a run signature, runs it.

The compile-and-run boundary is `_executable(feeds, fetches, targets)`: everything
before it is checking and binding, everything after it is the backend's business.

Backends (ConfigProto(backend=...) or GRAPHC_BACKEND): "compiled" (native CPU code, the
default), "reference" (the NumPy oracle), "gpu" (GPU kernels launched through pycuda;
GpuUnavailable at construction where pycuda or a CUDA driver is missing) and
"gpu_emulated" (the same GPU specs run by runtime.gpu.EmulatedDevice on the host: how
machines without a GPU check the GPU path). A "compiled" Session also runs a run
signature on the GPU when one of its ops is placed there (`with gc.device("/gpu:0")`)
and a GPU is present; without one, such placements behave as before (soft placement
with a warning, or TF1's "Cannot assign a device" error). A signature runs on one device
as a whole (host-side ops excepted), so explicit /cpu:0 placements inside a GPU
signature are soft. Once a Session uses a GPU, its variables live in a
runtime.gpu.DeviceVariables store: on the device between runs, copied to the host only
when host code reads them.
"""
import os
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Optional

import numpy as np

from graphc import dtypes, errors, profiling
from graphc.config import ConfigProto, RunMetadata, RunOptions
from graphc.framework.api_types import FeedDict, Fetches
from graphc.framework.default_session import DefaultSession
from graphc.framework.device_spec import device_type, parse_device
from graphc.framework.graph import Graph, Tensor, get_default_graph, warn_at_user
from graphc.framework.indexed_slices import IndexedSlices, IndexedSlicesValue
from graphc.framework.op_kernel import SessionState
from graphc.framework.sparse_tensor import SparseTensor, SparseTensorValue
from graphc.framework.subgraph import prune
from graphc.reference_executor import ReferenceExecutable

_GROWTH_RUNS = 5  # runs in a row that each add ops before the Session warns
_PROFILE = profiling.enabled()  # read once: run's fast path pays for one global load
_CPU_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
_GPU_DEVICE = "/job:localhost/replica:0/task:0/device:GPU:0"
GPU_BACKENDS = {"gpu": "cuda", "gpu_emulated": "emulated"}  # backend -> runtime device
BACKENDS = ("compiled", "reference") + tuple(GPU_BACKENDS)
_cuda_probe = []  # [device or None]: whether this process has a GPU, asked once


def _find_gpu():
    """The CUDA device when pycuda and a driver are present, else None (asked once: a
    "compiled" Session uses it for ops placed on /gpu:0)."""
    if not _cuda_probe:
        from runtime.gpu import GpuUnavailable, open_device
        try:
            _cuda_probe.append(open_device("cuda"))
        except GpuUnavailable:
            _cuda_probe.append(None)
    return _cuda_probe[0]


class DeviceAttributes(NamedTuple):
    """One entry of Session.list_devices(); memory_limit_bytes is 0 where the device
    does not say."""
    name: str
    device_type: str
    memory_limit_bytes: int
    incarnation: int


def local_devices(gpu=None):
    """The devices of this process: the CPU, and GPU 0 (`gpu`, or the one the process
    can open)."""
    devices = [DeviceAttributes(_CPU_DEVICE, "CPU", _host_memory_bytes(), 0)]
    gpu = gpu if gpu is not None else _find_gpu()
    if gpu is not None:
        devices.append(DeviceAttributes(_GPU_DEVICE, "GPU", getattr(gpu, "total_memory", 0),
                                        1))
    return devices


def _host_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


class _FetchStructure:
    """Flattens nested fetches (lists, tuples, namedtuples, dicts) and rebuilds results."""

    def __init__(self, graph, fetches):
        self.graph = graph
        self.leaves = []
        self.template = self._flatten(fetches)

    def _flatten(self, f):
        if isinstance(f, SparseTensor):
            return ("namedtuple", SparseTensorValue, [self._flatten(p) for p in f])
        if isinstance(f, (list, tuple)) and not hasattr(f, "_as_graph_element"):
            items = [self._flatten(x) for x in f]
            if isinstance(f, tuple) and hasattr(f, "_fields"):
                return ("namedtuple", type(f), items)
            return (type(f).__name__, None, items)
        if isinstance(f, dict):
            return ("dict", type(f), {k: self._flatten(v) for k, v in f.items()})
        if isinstance(f, IndexedSlices):  # fetched as TF's IndexedSlicesValue
            parts = (f.values, f.indices, f.dense_shape)
            return ("namedtuple", IndexedSlicesValue,
                    [self._flatten(p) if p is not None else ("none", None, None)
                     for p in parts])
        self.leaves.append(self._element(f))
        return ("leaf", None, len(self.leaves) - 1)

    def _element(self, f):
        # the classes and texts of TF 2.21's session.py (_ElementFetchMapper): a missing
        # name's KeyError is a ValueError there
        if f is None:
            raise TypeError(f"Argument `fetch` = {f} has invalid type \"{type(f).__name__}\". "
                            "Cannot be None")
        try:
            return self.graph.as_graph_element(f)
        except TypeError as e:
            raise TypeError(f"Argument `fetch` = {f} has invalid type \"{type(f).__name__}\" "
                            f"must be a string or Tensor. ({e.args[0]})") from None
        except (ValueError, KeyError) as e:
            raise ValueError(f"Argument `fetch` = {f} cannot be interpreted as a Tensor. "
                             f"({e.args[0]})") from None

    def build(self, values):
        return self._build(self.template, values)

    def _build(self, node, values):
        kind, cls, items = node
        if kind == "leaf":
            return values[items]
        if kind == "none":
            return None
        if kind == "dict":
            out = {k: self._build(v, values) for k, v in items.items()}
            return cls(out) if cls is not dict else out
        built = [self._build(x, values) for x in items]
        if kind == "namedtuple":
            return cls(*built)
        return tuple(built) if kind == "tuple" else built


class Session:
    """tf.compat.v1.Session: runs parts of a graph, keeping variable values between runs."""

    def __init__(self, target: str = "", graph: Optional[Graph] = None,
                 config: Optional[ConfigProto] = None):
        self.graph = graph if graph is not None else get_default_graph()
        self.config = config if config is not None else ConfigProto()
        self.backend = (getattr(self.config, "backend", None)
                        or os.environ.get("GRAPHC_BACKEND") or "compiled")
        self.compile_count = 0  # native compiles so far (tests count recompiles)
        # threads of each large compiled loop (runtime.Executable.set_num_threads); TF1's
        # 0 means "the cores available", which the runtime picks when this is None
        self.num_threads = int(self.config.intra_op_parallelism_threads or 0) or None
        self._state = SessionState()
        # the longest a queue's enqueue/dequeue waits (graphc/ops/queue_ops.py); 0: no end
        self._state.operation_timeout_ms = int(self.config.operation_timeout_in_ms or 0)
        self._cache = {}
        self._closed = False
        self._last_version = None
        self._growth_streak = 0
        self._warned_growth = False
        self._run_recipes = {}
        self._devices = [_CPU_DEVICE]
        self._device_types = {"CPU"}
        self._gpu = None  # the runtime.gpu device this Session runs GPU code on
        if self.backend in GPU_BACKENDS:
            from runtime.gpu import open_device
            self._attach_gpu(open_device(GPU_BACKENDS[self.backend]))  # GpuUnavailable
        self._warned_placement = False
        self._logged_placement = set()
        if self.config.log_device_placement:
            print("Device mapping: " + ("\n" + "\n".join(
                f"{d} -> device: 0" for d in self._devices[1:]) if self._gpu is not None
                else "no known devices."), flush=True)
        self._warned_options = set()
        self._warn_unsupported(getattr(self.config, "unsupported", list)())
        self._default_ctx = []
        self._graph_ctx = []

    # ------------------------------------------------------------------- context
    def __enter__(self):
        ctx = self.as_default()
        ctx.__enter__()
        self._default_ctx.append(ctx)
        gctx = self.graph.as_default()
        gctx.__enter__()
        self._graph_ctx.append(gctx)
        return self

    def __exit__(self, *exc):
        self._graph_ctx.pop().__exit__(*exc)
        self._default_ctx.pop().__exit__(*exc)
        self.close()

    def as_default(self) -> DefaultSession:
        return DefaultSession(self)

    def close(self) -> None:
        self._closed = True
        self._cache.clear()
        self._run_recipes.clear()

    @property
    def sess_str(self):
        return ""

    @property
    def graph_def(self):
        return self.graph.as_graph_def()

    def list_devices(self):
        """The devices this Session can run on, as TF1's (name, device_type,
        memory_limit_bytes, incarnation): the CPU, and GPU 0 when the Session has one or
        the process can open one."""
        return local_devices(self._gpu)

    # -------------------------------------------------------------------- run
    def run(self, fetches: Fetches, feed_dict: FeedDict = None,
            options: Optional[RunOptions] = None, run_metadata: Optional[RunMetadata] = None
            ) -> Any:
        """Runs the ops needed for `fetches` given `feed_dict`; returns values in the shape
        of `fetches`. A repeated call with the same fetches and feed keys takes a fast path
        (a run recipe made by the first call) that only checks and binds the fed arrays."""
        start = time.perf_counter() if _PROFILE else None
        if options is not None:
            self._warn_unsupported(options.unsupported())
        if feed_dict is not None and not isinstance(feed_dict, Mapping):
            # TF's nest.flatten_dict_items says "input must be a dictionary"
            raise TypeError("input must be a dictionary: feed_dict maps tensors (or tensor "
                            f"names) to values, got a {type(feed_dict).__name__}")
        try:
            try:
                recipe = self._run_recipes.get((type(fetches), _hashable(fetches),
                                                tuple(feed_dict) if feed_dict else ()))
            except TypeError:  # unhashable fetches (a dict): no fast path
                recipe = None
            if recipe is not None:
                result = recipe(feed_dict)
                if result is not _SLOW:
                    return result
            return self._run(fetches, feed_dict)
        except errors.OpError as e:
            if os.environ.get("GRAPHC_TRACEBACK", "") in ("", "0"):
                # The message names the op and the line that created it; the executor's
                # and compiler's frames below this one only bury the user's call.
                raise e.with_traceback(None) from None
            raise
        finally:
            if start is not None:
                profiling.PROFILE.ran(_fetch_names(fetches), time.perf_counter() - start)

    def _run(self, fetches, feed_dict):
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        structure = _FetchStructure(self.graph, fetches)
        fetch_tensors, targets = [], []
        for leaf in structure.leaves:
            (fetch_tensors if isinstance(leaf, Tensor) else targets).append(leaf)
        feeds, feed_arrays = self._bind_feeds(feed_dict)
        self._note_graph_growth()
        exe = self._executable(tuple(feeds), tuple(dict.fromkeys(fetch_tensors)),
                               tuple(dict.fromkeys(targets)))
        values = exe.run(feed_arrays, self._state)
        positions = [exe.fetches.index(leaf) if isinstance(leaf, Tensor) else None
                     for leaf in structure.leaves]
        self._remember_run_recipe(fetches, feed_dict, feeds, exe, structure, positions)
        return structure.build([None if p is None else _as_result(values[p])
                                for p in positions])

    def _remember_run_recipe(self, fetches, feed_dict, feeds, exe, structure, positions):
        """Stores the fast path for this (fetches, feed keys): it converts each fed value
        to its tensor's dtype, checks a shape once per distinct shape, runs `exe`."""
        try:
            key = (type(fetches), _hashable(fetches), tuple(feed_dict) if feed_dict else ())
            hash(key)
        except TypeError:
            return
        checks = [(t.dtype.np, t) for t in feeds]
        seen_shapes = [set() for _ in feeds]
        state = self._state
        single = positions[0] if not isinstance(fetches, (list, tuple)) else None

        def recipe(feed_dict):
            arrays = []
            if feed_dict:
                for (dtype, t), seen, v in zip(checks, seen_shapes, feed_dict.values()):
                    if dtype == object:  # a string: its elements become bytes
                        a = _feed_array(t, v)
                    elif type(v) is np.ndarray and v.dtype == dtype:
                        a = v
                    elif isinstance(v, (int, float, np.generic)):
                        a = _feed_array(t, v)  # ints checked for overflow, as TF
                    else:
                        return _SLOW  # conversions and their errors: the general path
                    if a.shape not in seen:
                        if not t.shape.is_compatible_with(a.shape):
                            return _SLOW
                        seen.add(a.shape)
                    arrays.append(a)
            if self._closed:
                return _SLOW
            if self.graph.version != self._last_version:
                self._note_graph_growth()
            else:
                self._growth_streak = 0
            values = exe.run(arrays, state)
            if single is not None:
                return _as_result(values[single])
            return structure.build([None if p is None else _as_result(values[p])
                                    for p in positions])

        self._run_recipes[key] = recipe

    def _bind_feeds(self, feed_dict):
        """The fed tensors and their arrays, checked as TF 2.21's BaseSession._run does."""
        feeds, arrays = [], []
        for key, value in _flatten_feed_dict(feed_dict or {}):
            t = self._feed_tensor(key)
            if isinstance(value, Tensor):
                raise TypeError("The value of a feed cannot be a gc.Tensor object. Acceptable "
                                "feed values include Python scalars, strings, lists, and numpy "
                                f"ndarrays. For reference, the tensor object was {value!r} which "
                                f"was passed to the argument `feed_dict` with key {key!r}.")
            feeds.append(t)
            arrays.append(_feed_array(t, value))
        return feeds, arrays

    def _feed_tensor(self, key):
        key = getattr(key, "_as_graph_element", lambda: key)()
        try:
            return self.graph.as_graph_element(key, allow_operation=False)
        except (TypeError, ValueError, KeyError) as e:
            raise TypeError(f"Cannot interpret feed_dict key as Tensor: {e.args[0]}") from None

    def _warn_unsupported(self, notes):
        """One warning per setting that would change what a run does in TF and that graphc
        does not do (graphc/config.py lists them)."""
        for note in notes:
            if note not in self._warned_options:
                self._warned_options.add(note)
                warn_at_user(f"graphc ignores {note}.", RuntimeWarning)

    def _note_graph_growth(self):
        version = self.graph.version
        grew = self._last_version is not None and version > self._last_version
        self._growth_streak = self._growth_streak + 1 if grew else 0
        if self._growth_streak >= _GROWTH_RUNS and not self._warned_growth:
            self._warned_growth = True
            warn_at_user(
                f"The graph grew by {version - self._last_version} ops between each of the "
                f"last {_GROWTH_RUNS} Session.run calls: ops are probably being created inside "
                "the training loop, which makes every step slower and leaks memory. Build the "
                "graph once before the loop (call graph.finalize() to make this an error).",
                RuntimeWarning)
        self._last_version = version

    def _executable(self, feeds, fetches, targets):
        key = (feeds, fetches, targets)
        exe = self._cache.get(key)
        if exe is None:
            # the device is a function of the signature's ops and of the Session, so it
            # needs no place in the key
            pruned = prune(fetches, targets, feeds)  # once: the compiled stages reuse it
            device = self._device_for(pruned)
            if self.config.log_device_placement:
                self._log_placement()
            exe = self._build_executable(feeds, fetches, targets, device, pruned)
            self._cache[key] = exe
        return exe

    def _log_placement(self):
        """log_device_placement: every op's device, in TF1's format. TF1's placer places
        the whole graph when a run first needs it (and ops added later at the next run),
        printing `name: (Type): device` for each: so does this, once per op."""
        from graphc.compiled_executor import is_host_op
        for op in self.graph.get_operations():
            if op.name not in self._logged_placement:
                self._logged_placement.add(op.name)
                on_gpu = self._gpu is not None and not is_host_op(op, native_regions=False) and (
                    self.backend in GPU_BACKENDS or _is_gpu0(op.device))
                print(f"{op.name}: ({op.type}): {_GPU_DEVICE if on_gpu else _CPU_DEVICE}",
                      flush=True)

    def _attach_gpu(self, device):
        """From now on the Session has a GPU, and its variables a device store."""
        from runtime.gpu import DeviceVariables
        self._gpu = device
        self._devices = [_CPU_DEVICE, _GPU_DEVICE]
        self._device_types = {"CPU", "GPU"}
        if not isinstance(self._state.variables, DeviceVariables):
            self._state.variables = DeviceVariables(device, self._state.variables)

    def _device_for(self, ops):
        """The GPU device the signature of `ops` runs on, or None for the CPU."""
        if self.backend in GPU_BACKENDS:
            self._check_placement(ops)
            return self._gpu
        # ConfigProto(device_count={"GPU": 0}) hides the GPU: its placements are soft
        devices = _devices_of(ops)
        on_gpu = self.config.gpus_allowed() and any(map(_is_gpu0, devices))
        if on_gpu and self._gpu is None and self.backend == "compiled":
            device = _find_gpu()
            if device is not None:
                self._attach_gpu(device)
        self._check_placement(ops, devices)
        return self._gpu if on_gpu and self.backend == "compiled" else None

    def _check_placement(self, ops, devices=None):
        """Placements on devices this Session lacks (a GPU where there is none, a second
        GPU): soft placement runs them where the signature runs, with one warning per
        Session; allow_soft_placement=False makes them an error, as TF1's placer.
        devices: _devices_of(ops), when the caller has it."""
        for device in _devices_of(ops) if devices is None else devices:
            kind = device_type(device)
            if kind is None or (kind in self._device_types and
                                (kind != "GPU" or _is_gpu0(device))):
                continue
            op = next(op for op in ops if op.device == device)
            if not self.config.allow_soft_placement:
                raise errors.InvalidArgumentError(
                    None, op, f"Cannot assign a device for operation {op.name}: {{{{node "
                              f"{op.name}}}}} was explicitly assigned to {op.device} but "
                              f"available devices are [ {', '.join(self._devices)} ]. Make "
                              "sure the device specification refers to a valid device.\n\t "
                              f"[[node {op.describe()}]]")
            if not self._warned_placement:
                self._warned_placement = True
                where = "GPU:0" if self.backend in GPU_BACKENDS else "CPU"
                warn_at_user(f"Operation '{op.name}' is placed on {op.device}, which this "
                             f"Session does not have; it and any other such ops run on the "
                             f"{where} (soft placement). ConfigProto(allow_soft_placement="
                             "False) makes this an error.", RuntimeWarning)

    def _build_executable(self, feeds, fetches, targets, device=None, pruned=None):
        if self.backend == "reference":
            return ReferenceExecutable(feeds, fetches, targets)
        if self.backend in BACKENDS:
            from graphc.compiled_executor import CompiledExecutable
            return CompiledExecutable(feeds, fetches, targets, self, device, pruned)
        raise ValueError(f"Unknown backend {self.backend!r}: one of "
                         + ", ".join(repr(b) for b in BACKENDS) + ".")

    # ---------------------------------------------------------- variable state
    def _variable_value(self, var_op):
        try:
            return self._state.variables[var_op.name]
        except KeyError:
            from graphc.variables import uninitialized_error
            raise uninitialized_error(var_op) from None

    def _set_variable_value(self, var_op, value):
        self._state.variables[var_op.name] = value


_SLOW = object()  # a run recipe's answer when the general path must handle the call


def _flatten_feed_dict(feed_dict):
    """(key, value) pairs, a tuple/list key feeding its tensors from the matching value
    structure, as TF's nest.flatten_dict_items."""
    seen = set()
    for key, value in feed_dict.items():
        if isinstance(key, (tuple, list)):
            values = list(value) if isinstance(value, (tuple, list)) else None
            if values is None or len(values) != len(key):
                raise ValueError(f"Could not flatten dictionary. Key had {len(key)} elements, "
                                 f"but value had {len(values) if values else 1} elements. "
                                 f"Key: {key}, value: {value}.")
            yield from _flatten_feed_dict(dict(zip(key, values)))
            continue
        if key in seen:
            raise ValueError(f"Could not flatten dictionary: key {key} is not unique.")
        seen.add(key)
        yield key, value


def _feed_array(t, value):
    """The fed value as an array of t's dtype and a shape t accepts."""
    dtype = t.dtype.np
    if t.dtype.name == "string":
        return _checked_feed_shape(t, _string_feed(t, value))
    if isinstance(value, int) and not isinstance(value, bool) and dtype.kind in "iu" and \
            not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        raise TypeError(f"Type of feed value {value} with type {type(value)} is not compatible "
                        f"with Tensor type {dtype}. Try explicitly setting the type of the feed "
                        "tensor to a larger type (e.g. int64).")
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:  # NumPy's own class, as in TF
        raise type(e)(f"Cannot feed value {value!r} for Tensor '{t.name}' of dtype "
                      f"{t.dtype.name}: {e}") from None
    return _checked_feed_shape(t, arr)


def _string_feed(t, value):
    """A fed string value as TF holds it: bytes (str fed are encoded as UTF-8)."""
    try:
        return dtypes.bytes_array(value)
    except TypeError as e:
        raise TypeError(f"Cannot feed value {value!r} for Tensor '{t.name}' of dtype "
                        f"string: {e}") from None


def _checked_feed_shape(t, arr):
    if not t.shape.is_compatible_with(arr.shape):
        raise ValueError(f"Cannot feed value of shape {arr.shape} for Tensor '{t.name}', "
                         f"which has shape '{t.shape}'")
    return arr


def _devices_of(ops):
    """The distinct device strings of `ops`, in the order they first appear: a graph has
    a few (most ops none), so each is parsed once, not once per op."""
    return list(dict.fromkeys(op.device for op in ops))


def _is_gpu0(device):
    """Whether a canonical device string names GPU 0 (the one GPU graphc drives)."""
    fields = parse_device(device)
    return fields.get("device_type") == "GPU" and fields.get("device_index", "*") in ("0", "*")


def _hashable(fetches):
    return tuple(fetches) if type(fetches) is list else fetches


def _as_result(value):
    """Fetched arrays are the caller's own: never views of session state."""
    if value is None:
        return None
    if value.ndim == 0:
        return value[()]
    return np.array(value, copy=True) if not value.flags.writeable or value.base is not None \
        else value


class InteractiveSession(Session):
    """A Session that installs itself as the default session on construction."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        self._interactive_ctx = self.as_default()
        self._interactive_ctx.__enter__()

    def close(self):
        super().close()
        if self._interactive_ctx is not None:
            ctx, self._interactive_ctx = self._interactive_ctx, None
            try:
                ctx.__exit__(None, None, None)
            except IndexError:
                pass


def _fetch_names(fetches, limit=4):
    """The first fetches' names, for GRAPHC_PROFILE's table of runs."""
    names = []

    def walk(f):
        if len(names) > limit:
            return
        if isinstance(f, Mapping):
            for v in f.values():
                walk(v)
        elif isinstance(f, (list, tuple)):
            for v in f:
                walk(v)
        else:
            names.append(getattr(f, "name", str(f)))
    walk(fetches)
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")
