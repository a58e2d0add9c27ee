"""Signature: what an executable spec says about its feeds, fetches, variables, guards,
constants and error sites, and what one tuple of feed shapes implies (ShapeBinding: symbol
values, fetch shapes, arena bytes, variable shapes).

The CPU Executable (runtime/executable.py) and the GPU one (runtime/gpu/executable.py) each
hold one, so feeds, guards, symbol values and error messages behave and read exactly the
same on both; what differs (one native call, or launches on a device) stays theirs.
"""
import ctypes

import numpy as np

from . import memory, shapes
from .errors import FeedError, GuardFailure, KernelFailure, ShapeError

__all__ = ["Signature", "ShapeBinding", "FORMAT_VERSION", "spec_dtype"]

FORMAT_VERSION = 1
_DTYPES = {name: np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}
_FETCH_SOURCES = ("kernel", "feed", "variable", "constant")
_MEMO_LIMIT = 4096  # distinct feed-shape tuples remembered per executable


def spec_dtype(name, what):
    """The numpy dtype a spec names; ValueError naming `what` for any other name."""
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"{what}: unsupported dtype {name!r}") from None


class ShapeBinding:
    """What one tuple of feed shapes implies: symbol values, fetch shapes, arena size."""
    __slots__ = ("syms", "env", "fetch_alloc", "arena_bytes", "var_shapes")


class Signature:
    def __init__(self, spec):
        version = spec.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"executable format version {version!r} is not supported "
                             f"(this runtime reads version {FORMAT_VERSION})")
        self._read(spec)
        self.constants = _load_constants(spec.get("constants", []))
        self.memo = {}  # feed shapes -> ShapeBinding

    # ------------------------------------------------------------ construction
    def _read(self, spec):
        self.feeds = spec.get("feeds", [])
        self.fetches = spec.get("fetches", [])
        self.variables = spec.get("variables", [])
        self.error_sites = spec.get("error_sites", [])
        self.guards = [tuple(g) for g in spec.get("guards", [])]
        # feeds whose VALUES the code was specialized on (shape-determining integers)
        self.value_guards = []
        for g in spec.get("value_guards", []):
            feed = g["feed"]
            if not 0 <= feed < len(spec.get("feeds", [])):
                raise ValueError(f"value guard on feed {feed}, which the spec does not have")
            self.value_guards.append((feed, tuple(g["shape"]), list(g["values"]),
                                      g.get("name", f"feed {feed}")))
        self.arena_expr = spec.get("arena_bytes", 0)
        self.detail_slots = int(spec.get("error_detail_slots", 0))
        # dims the code sets during the run (a loop's trip count), in slots after those
        self.run_dims = int(spec.get("run_dims", 0))
        self.feed_dtypes = [spec_dtype(f["dtype"], f"feed {f['name']}") for f in self.feeds]
        self.symbols = []
        for s in spec.get("symbols", []):
            feed, axis = s["feed"], s["axis"]
            if not (0 <= feed < len(self.feeds) and 0 <= axis < len(self.feeds[feed]["dims"])):
                raise ValueError(f"symbol {s['name']} reads dim {axis} of feed {feed}, "
                                 "which the spec does not have")
            self.symbols.append((s["name"], feed, axis))
        self.var_names = [v["name"] for v in self.variables]
        self.var_dtypes = [spec_dtype(v["dtype"], f"variable {v['name']}")
                           for v in self.variables]
        self.var_symbolic = any(not isinstance(d, int) for v in self.variables
                                for d in v["dims"])
        # kernel_slots: the pointer slots (feeds first, then fetches) of the fetches the
        # code writes; post: (fetch, source, index) of those copied after the run
        self.kernel_slots, self.kernel_dtypes, self.post = [], [], []
        for i, f in enumerate(self.fetches):
            source = f.get("source", "kernel")
            if source not in _FETCH_SOURCES:
                raise ValueError(f"fetch {f['name']}: unknown source {source!r}")
            if source == "kernel":
                self.kernel_slots.append(len(self.feeds) + i)
                self.kernel_dtypes.append(spec_dtype(f["dtype"], f"fetch {f['name']}"))
            else:
                limit = {"feed": self.feeds, "variable": self.variables,
                         "constant": spec.get("constants", [])}[source]
                if not 0 <= f["index"] < len(limit):
                    raise ValueError(f"fetch {f['name']}: no {source} {f['index']}")
                self.post.append((i, source, f["index"]))

    # ------------------------------------------------------------------ feeds
    def check_feed_count(self, feed_arrays):
        if len(feed_arrays) != len(self.feed_dtypes):
            raise FeedError(f"expected {len(self.feed_dtypes)} feeds "
                            f"({', '.join(f['name'] for f in self.feeds)}), "
                            f"got {len(feed_arrays)}")

    def check_values(self, feeds):
        for feed, shape, values, name in self.value_guards:
            a = feeds[feed]
            if a.shape != shape or a.reshape(-1).tolist() != values:
                raise GuardFailure(f"feed {name} has value {a.tolist()}, the code was "
                                   f"specialized on {np.reshape(values, shape).tolist()}")

    def conform_feed(self, i, a):
        feed = self.feeds[i]
        a = np.asarray(a)
        if a.dtype != self.feed_dtypes[i]:
            raise FeedError(f"feed {feed['name']} must be {feed['dtype']}, got {a.dtype}")
        return np.asarray(a, order="C")  # (np.ascontiguousarray makes a 0-d feed 1-d)

    # ----------------------------------------------------------------- shapes
    def bind(self, key):
        """The ShapeBinding of the feed shapes `key` (memoized): checks them against the
        spec (GuardFailure) and evaluates every dim expression."""
        for feed, shape in zip(self.feeds, key):
            if len(shape) != len(feed["dims"]):
                raise GuardFailure(f"feed {feed['name']} has rank {len(shape)} "
                                   f"(shape {list(shape)}), the code was compiled for rank "
                                   f"{len(feed['dims'])} ({shapes.dims_text(feed['dims'])})")
        env = {name: key[feed][axis] for name, feed, axis in self.symbols}
        for feed, shape in zip(self.feeds, key):
            expected = shapes.evaluate_dims(feed["dims"], env)
            if expected != shape:
                raise GuardFailure(f"feed {feed['name']} has shape {list(shape)}, the code "
                                   f"was compiled for {shapes.dims_text(feed['dims'])}")
        for guard in self.guards:
            if not shapes.guard_holds(guard, env):
                raise GuardFailure("guard failed: " + shapes.guard_text(guard, env), guard)
        binding = ShapeBinding()
        binding.env = env
        # the symbol values, then the slots where failing code leaves the values its
        # error message shows (spec "error_detail_slots"), then the dims set during the run
        slots = len(self.symbols) + self.detail_slots + self.run_dims
        binding.syms = (ctypes.c_int64 * max(slots, 1))(
            *[env[name] for name, _, _ in self.symbols])
        binding.fetch_alloc = [(shapes.evaluate_dims(f["dims"], env), dtype)
                               for f, dtype in zip((f for f in self.fetches
                                                    if f.get("source", "kernel") == "kernel"),
                                                   self.kernel_dtypes)]
        binding.arena_bytes = shapes.evaluate(self.arena_expr, env)
        if binding.arena_bytes < 0:  # a VALID window over an input smaller than itself
            raise ShapeError(f"the feed shapes {[list(k) for k in key]} give the negative "
                             f"arena size {binding.arena_bytes} "
                             f"({shapes.to_text(self.arena_expr)})")
        binding.var_shapes = [shapes.evaluate_dims(v["dims"], env) for v in self.variables]
        self._check_memory(binding)
        if len(self.memo) >= _MEMO_LIMIT:
            self.memo.clear()
        self.memo[key] = binding
        return binding

    def _check_memory(self, binding):
        """KernelFailure(ResourceExhaustedError) for an allocation of this binding that
        the machine cannot hold, before anything is allocated or run."""
        kernel_fetches = [f for f in self.fetches if f.get("source", "kernel") == "kernel"]
        wanted = [(f"fetch {f['name']}", shape, dtype)
                  for f, (shape, dtype) in zip(kernel_fetches, binding.fetch_alloc)]
        wanted += [(f"variable {v['name']}", shape, dtype) for v, dtype, shape in
                   zip(self.variables, self.var_dtypes, binding.var_shapes)
                   if not v.get("read", True)]
        wanted.append(("the intermediate buffers (arena)", (binding.arena_bytes,), np.uint8))
        for what, shape, dtype in wanted:
            message = memory.oom_message(shape, dtype)
            if message is not None:
                raise KernelFailure("ResourceExhaustedError", message, what)

    # ----------------------------------------------------------------- errors
    def failure(self, rc, binding=None):
        """The KernelFailure of a nonzero status: 1 + the index of the error site."""
        if 1 <= rc <= len(self.error_sites):
            site = self.error_sites[rc - 1]
            message = site["message"]
            if site.get("args") and binding is not None:
                message = self._format_details(message, site["args"], binding)
            return KernelFailure(site["class"], message, site.get("op", ""))
        return KernelFailure("InternalError", f"compiled code returned unknown status {rc}",
                             "")

    def _format_details(self, message, kinds, binding):
        """The site's message template filled with the values the failing code left in
        the syms slots after the symbols: ints, or linear positions shown as [i,j]."""
        base = len(self.symbols)
        values = []
        for k, kind in enumerate(kinds[:self.detail_slots]):
            v = int(binding.syms[base + k])
            if isinstance(kind, dict):
                dims = shapes.evaluate_dims(kind["index"], binding.env)
                index = []
                for d in reversed(dims):
                    index.append(v % d if d else 0)
                    v = v // d if d else 0
                v = "[" + ",".join(str(i) for i in reversed(index)) + "]" if dims else ""
            values.append(v)
        try:
            return message.format(*values)
        except (IndexError, KeyError, ValueError):
            return message


def _load_constants(constants):
    """The spec's constants as read-only, 64-byte aligned arrays."""
    arrays = []
    for k, c in enumerate(constants):
        dtype = spec_dtype(c["dtype"], f"constant {k}")
        shape = tuple(int(d) for d in c["shape"])
        data = c["data"]
        if any(d < 0 for d in shape) or len(data) != int(np.prod(shape)) * dtype.itemsize:
            raise ValueError(f"constant {k}: {len(data)} bytes do not hold a "
                             f"{c['dtype']} array of shape {list(shape)}")
        arr = memory.aligned_empty(len(data)).view(dtype).reshape(shape)
        arr.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)
        arr.flags.writeable = False
        arrays.append(arr)
    return arrays
