"""Executable: a compiled graph signature, run with ONE native call per run.

The spec (plain data, see the compiler design doc section 6) carries the LLVM IR of an entry

    int32 graphc_main(i8** feeds, i8** fetches, i8** variables, i8** constants,
                      i8* arena, i64* syms)

that returns 0, or 1 + the index of the error site that fired. Slot i of `fetches` is fetch i
of the spec (null for fetches whose source is not "kernel"); slot j of `variables` is
variable j; `syms` holds the values of spec["symbols"] in order.

Per-run Python work is kept small: everything derived from the feed shapes (symbol values,
guards, fetch shapes, arena size) is memoized per tuple of feed shapes, and the pointer
arrays are filled by a small generated wrapper that reads each array's data pointer from
the ndarray object itself, so Python only stores object ids.

Threads: large loops of the generated code run on a thread team (runtime/jit.py, kernels/
parallel.py) of at most `num_threads` threads, a global of the compiled module set here:
the constructor's `num_threads`, else runtime.jit.default_num_threads() (the cores this
process may use); `set_num_threads` changes it. Nothing about threads is in the spec.
"""
import ctypes
import sys
import threading
import weakref

import numpy as np

from . import jit, memory, shapes

_RECYCLE_BYTES = 1 << 20  # fetch arrays this big are reused once the caller drops them
from .errors import (FeedError, GuardFailure, KernelFailure, ShapeError,
                     UninitializedVariable, VariableMismatch)

FORMAT_VERSION = 1
_DTYPES = {name: np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}
_FETCH_SOURCES = ("kernel", "feed", "variable", "constant")
_MEMO_LIMIT = 4096  # distinct feed-shape tuples remembered per executable
_UNBOUND = object()
_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 6)


def _probe_data_offset():
    """Offset of the data pointer inside an ndarray object (numpy's PyArrayObject_fields:
    it follows the object header), verified on live arrays; None when it cannot be used."""
    if sys.implementation.name != "cpython":
        return None
    probes = [np.arange(5.0), np.empty((3, 4), np.int8), np.zeros(0, np.float32),
              np.ones((2, 3))[1:]]
    for offset in range(8, 64, 8):
        if all(ctypes.c_void_p.from_address(id(a) + offset).value == a.ctypes.data
               for a in probes):
            return offset
    return None


_DATA_OFFSET = _probe_data_offset()


def _aligned_empty(nbytes, align=64):
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


_WITH_TEAMS = weakref.WeakSet()  # executables whose code may start thread teams


def _serial_after_fork():
    for exe in list(_WITH_TEAMS):
        exe._threads.value = 1


jit.on_fork_in_child(_serial_after_fork)


def _dtype(name, what):
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"{what}: unsupported dtype {name!r}") from None


class _Plan:
    """What one tuple of feed shapes implies: symbol values, fetch shapes, arena size."""
    __slots__ = ("syms", "env", "fetch_alloc", "arena_bytes", "var_shapes")


class Executable:
    def __init__(self, spec, use_wrapper=True, num_threads=None):
        version = spec.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"executable format version {version!r} is not supported "
                             f"(this runtime reads version {FORMAT_VERSION})")
        from .verify import verify_spec  # (verify imports runtime.gpu, which imports this)
        verify_spec(spec)  # structure and bounds: cheap, before anything is built
        self.spec = spec
        self.entry = spec.get("entry", "graphc_main")
        self._read_signature(spec)
        self._load_constants(spec.get("constants", []))
        self._use_wrapper = use_wrapper and _DATA_OFFSET is not None
        llvm_ir = spec["llvm_ir"]
        if self._use_wrapper:
            llvm_ir += self._wrapper_ir()
        self._compiled = jit.CompiledModule(llvm_ir, spec.get("target"))
        self.compile_seconds = self._compiled.compile_seconds
        self._entry = _ENTRY_TYPE(self._compiled.address(self.entry))
        if self._use_wrapper:
            # no argtypes: ctypes then passes the arrays' and c_void_p's pointers as they are,
            # which is several times faster than converting through argtypes
            self._call = ctypes.CFUNCTYPE(ctypes.c_int32)(
                self._compiled.address(self._wrapper_name))
            self._call.argtypes = None
        self._lock = threading.Lock()
        self._memo = {}
        n_slots = len(self.feeds) + len(self.fetches)
        self._objs = (ctypes.c_void_p * max(n_slots, 1))()  # ids of feeds, then fetches
        self._feed_ptrs = (ctypes.c_void_p * max(len(self.feeds), 1))()
        self._fetch_ptrs = (ctypes.c_void_p * max(len(self.fetches), 1))()
        self._var_ptrs = (ctypes.c_void_p * max(len(self.variables), 1))()
        self._var_bound = [_UNBOUND] * len(self.variables)  # arrays whose pointers are bound
        self._var_bound_shapes = None
        self._arena = _aligned_empty(64)
        self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
        self._threads = self._module_global(jit.THREADS_GLOBAL, ctypes.c_int32)
        self._tasks = self._module_global(jit.TASKS_GLOBAL, ctypes.c_int64)
        self.num_threads = None
        self.set_num_threads(num_threads)
        if self._threads is not None:
            _WITH_TEAMS.add(self)

    # ---------------------------------------------------------------- threads
    def _module_global(self, name, ctype):
        addr = self._compiled.global_address(name)
        return ctype.from_address(addr) if addr else None

    def set_num_threads(self, n=None):
        """At most `n` threads run each large loop (None or 0: the cores available)."""
        n = int(n) if n else jit.default_num_threads()
        if n < 1:
            raise ValueError(f"num_threads must be positive, got {n}")
        self.num_threads = n
        if self._threads is not None:
            self._threads.value = n if jit.teams_allowed() else 1

    def kernel_profile(self):
        """[(kernel description, cycles summed over runs)] when the spec was generated with
        GRAPHC_PROFILE=1 (the entry counts the time-stamp counter around each kernel call),
        else []."""
        names = self.spec.get("profile_kernels") or []
        addr = self._compiled.global_address("graphc_profile_cycles") if names else 0
        if not addr:
            return []
        cycles = (ctypes.c_int64 * len(names)).from_address(addr)
        return list(zip(names, cycles))

    @property
    def parallel_tasks(self):
        """Tasks run so far by the split loops: one per thread of each team, one per loop
        run serially (below the size that starts a team). 0 when there are none."""
        return self._tasks.value if self._tasks is not None else 0

    # ------------------------------------------------------------ construction
    def _read_signature(self, spec):
        self.feeds = spec.get("feeds", [])
        self.fetches = spec.get("fetches", [])
        self.variables = spec.get("variables", [])
        self.error_sites = spec.get("error_sites", [])
        self._guards = [tuple(g) for g in spec.get("guards", [])]
        # feeds whose VALUES the code was specialized on (shape-determining integers)
        self._value_guards = []
        for g in spec.get("value_guards", []):
            feed = g["feed"]
            if not 0 <= feed < len(spec.get("feeds", [])):
                raise ValueError(f"value guard on feed {feed}, which the spec does not have")
            self._value_guards.append((feed, tuple(g["shape"]), list(g["values"]),
                                       g.get("name", f"feed {feed}")))
        self._arena_expr = spec.get("arena_bytes", 0)
        self._detail_slots = int(spec.get("error_detail_slots", 0))
        self._feed_dtypes = [_dtype(f["dtype"], f"feed {f['name']}") for f in self.feeds]
        self._symbols = []
        for s in spec.get("symbols", []):
            feed, axis = s["feed"], s["axis"]
            if not (0 <= feed < len(self.feeds) and 0 <= axis < len(self.feeds[feed]["dims"])):
                raise ValueError(f"symbol {s['name']} reads dim {axis} of feed {feed}, "
                                 "which the spec does not have")
            self._symbols.append((s["name"], feed, axis))
        self._var_names = [v["name"] for v in self.variables]
        self._var_dtypes = [_dtype(v["dtype"], f"variable {v['name']}") for v in self.variables]
        self._var_symbolic = any(not isinstance(d, int) for v in self.variables for d in v["dims"])
        self._kernel_slots, self._kernel_dtypes, self._post = [], [], []
        for i, f in enumerate(self.fetches):
            source = f.get("source", "kernel")
            if source not in _FETCH_SOURCES:
                raise ValueError(f"fetch {f['name']}: unknown source {source!r}")
            if source == "kernel":
                self._kernel_slots.append(len(self.feeds) + i)
                self._kernel_dtypes.append(_dtype(f["dtype"], f"fetch {f['name']}"))
            else:
                limit = {"feed": self.feeds, "variable": self.variables,
                         "constant": spec.get("constants", [])}[source]
                if not 0 <= f["index"] < len(limit):
                    raise ValueError(f"fetch {f['name']}: no {source} {f['index']}")
                self._post.append((i, source, f["index"]))
        self._recent_fetches = [None] * len(self._kernel_slots)

    def _load_constants(self, constants):
        self._constants = []
        for k, c in enumerate(constants):
            dtype = _dtype(c["dtype"], f"constant {k}")
            shape = tuple(int(d) for d in c["shape"])
            data = c["data"]
            if any(d < 0 for d in shape) or len(data) != int(np.prod(shape)) * dtype.itemsize:
                raise ValueError(f"constant {k}: {len(data)} bytes do not hold a "
                                 f"{c['dtype']} array of shape {list(shape)}")
            arr = _aligned_empty(len(data)).view(dtype).reshape(shape)
            arr.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)
            arr.flags.writeable = False
            self._constants.append(arr)
        self._const_ptrs = (ctypes.c_void_p * max(len(self._constants), 1))(
            *[a.ctypes.data for a in self._constants])

    @property
    def _wrapper_name(self):
        return f"graphc_rt_call.{self.entry}"

    def _wrapper_ir(self):
        """An LLVM function (objs, variables, constants, arena, syms) that fills the feed and
        fetch pointer arrays from ndarray object addresses and calls the entry."""
        nf, nk = len(self.feeds), len(self.fetches)
        kernel_slots = set(self._kernel_slots)
        lines = [f'\ndefine i32 @"{self._wrapper_name}"(ptr %objs, ptr %vars, ptr %consts, '
                 'ptr %arena, ptr %syms) {',
                 f"  %feeds = alloca [{max(nf, 1)} x ptr], align 8",
                 f"  %fetches = alloca [{max(nk, 1)} x ptr], align 8"]
        for slot in range(nf + nk):
            table, i = ("%feeds", slot) if slot < nf else ("%fetches", slot - nf)
            dest = f"%dst{slot}"
            lines.append(f"  {dest} = getelementptr ptr, ptr {table}, i64 {i}")
            if slot < nf or slot in kernel_slots:
                lines += [f"  %o{slot} = getelementptr ptr, ptr %objs, i64 {slot}",
                          f"  %obj{slot} = load ptr, ptr %o{slot}, align 8",
                          f"  %f{slot} = getelementptr i8, ptr %obj{slot}, i64 {_DATA_OFFSET}",
                          f"  %d{slot} = load ptr, ptr %f{slot}, align 8",
                          f"  store ptr %d{slot}, ptr {dest}, align 8"]
            else:
                lines.append(f"  store ptr null, ptr {dest}, align 8")
        lines += [f'  %rc = call i32 @"{self.entry}"(ptr %feeds, ptr %fetches, ptr %vars, '
                  "ptr %consts, ptr %arena, ptr %syms)",
                  "  ret i32 %rc", "}", ""]
        return "\n".join(lines)

    # ------------------------------------------------------------- accessors
    def optimized_ir(self):
        return self._compiled.optimized_ir()

    def asm(self):
        return self._compiled.asm()

    # ------------------------------------------------------------------- run
    def _fetch_arrays(self, fetch_alloc):
        """New arrays for the kernel fetches, except that a big one whose previous result
        the caller has dropped (only this executable still refers to it) is reused: a
        fresh 32 MB array costs ~4 ms of page faults on every run."""
        recent = self._recent_fetches
        outs = []
        for k, (shape, dtype) in enumerate(fetch_alloc):
            old = recent[k]
            if (old is not None and old.shape == shape and old.dtype == dtype
                    and sys.getrefcount(old) == 3):  # recent[k], `old`, getrefcount's arg
                outs.append(old)
            else:
                out = np.empty(shape, dtype)
                recent[k] = out if out.nbytes >= _RECYCLE_BYTES else None
                outs.append(out)
        return outs

    def run(self, feed_arrays, variables=None):
        """Runs once; returns the fetches (a list of new arrays, in spec order)."""
        dtypes = self._feed_dtypes
        self._check_feed_count(feed_arrays)
        with self._lock:
            objs = self._objs
            feeds = feed_arrays
            key = []
            for i, a in enumerate(feed_arrays):
                if type(a) is not np.ndarray or a.dtype is not dtypes[i] \
                        or not a.flags.c_contiguous:
                    a = self._conform_feed(i, a)
                    if feeds is feed_arrays:
                        feeds = list(feed_arrays)
                    feeds[i] = a
                objs[i] = id(a)
                key.append(a.shape)
            key = tuple(key)
            if self._value_guards:
                self._check_values(feeds)
            plan = self._memo.get(key)
            if plan is None:
                plan = self._plan(key)
            outs = self._fetch_arrays(plan.fetch_alloc)
            for slot, out in zip(self._kernel_slots, outs):
                objs[slot] = id(out)
            if self._var_names:
                if variables is None:
                    variables = {}
                bound = self._var_bound
                for j, name in enumerate(self._var_names):
                    if variables.get(name) is not bound[j]:
                        self._bind_variables(variables, plan)
                        break
                else:
                    if self._var_symbolic and plan.var_shapes != self._var_bound_shapes:
                        self._bind_variables(variables, plan)
            if plan.arena_bytes > self._arena.nbytes:
                self._arena = _aligned_empty(plan.arena_bytes)
                self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
            if self._use_wrapper:
                rc = self._call(objs, self._var_ptrs, self._const_ptrs, self._arena_ptr,
                                plan.syms)
            else:
                rc = self._call_direct(feeds, outs, plan)
            if rc:
                raise self._failure(rc, plan)
            if self._post:
                return self._with_copied_fetches(outs, feeds)
            return outs

    def _check_feed_count(self, feed_arrays):
        if len(feed_arrays) != len(self._feed_dtypes):
            raise FeedError(f"expected {len(self._feed_dtypes)} feeds "
                            f"({', '.join(f['name'] for f in self.feeds)}), "
                            f"got {len(feed_arrays)}")

    def _check_values(self, feeds):
        for feed, shape, values, name in self._value_guards:
            a = feeds[feed]
            if a.shape != shape or a.reshape(-1).tolist() != values:
                raise GuardFailure(f"feed {name} has value {a.tolist()}, the code was "
                                   f"specialized on {np.reshape(values, shape).tolist()}")

    def _call_direct(self, feeds, outs, plan):
        """The entry called with pointer arrays filled in Python (no wrapper available)."""
        for i, a in enumerate(feeds):
            self._feed_ptrs[i] = a.ctypes.data
        for slot, out in zip(self._kernel_slots, outs):
            self._fetch_ptrs[slot - len(self.feeds)] = out.ctypes.data
        return self._entry(self._feed_ptrs, self._fetch_ptrs, self._var_ptrs,
                           self._const_ptrs, self._arena_ptr, plan.syms)

    def _conform_feed(self, i, a):
        feed = self.feeds[i]
        a = np.asarray(a)
        if a.dtype != self._feed_dtypes[i]:
            raise FeedError(f"feed {feed['name']} must be {feed['dtype']}, got {a.dtype}")
        return np.asarray(a, order="C")  # (np.ascontiguousarray makes a 0-d feed 1-d)

    def _plan(self, key):
        """Checks the feed shapes against the spec and evaluates every dim expression."""
        for feed, shape in zip(self.feeds, key):
            if len(shape) != len(feed["dims"]):
                raise GuardFailure(f"feed {feed['name']} has rank {len(shape)} "
                                   f"(shape {list(shape)}), the code was compiled for rank "
                                   f"{len(feed['dims'])} ({shapes.dims_text(feed['dims'])})")
        env = {name: key[feed][axis] for name, feed, axis in self._symbols}
        for feed, shape in zip(self.feeds, key):
            expected = shapes.evaluate_dims(feed["dims"], env)
            if expected != shape:
                raise GuardFailure(f"feed {feed['name']} has shape {list(shape)}, the code "
                                   f"was compiled for {shapes.dims_text(feed['dims'])}")
        for guard in self._guards:
            if not shapes.guard_holds(guard, env):
                raise GuardFailure("guard failed: " + shapes.guard_text(guard, env), guard)
        plan = _Plan()
        plan.env = env
        # the symbol values, then the slots where failing code leaves the values its
        # error message shows (spec "error_detail_slots")
        plan.syms = (ctypes.c_int64 * max(len(self._symbols) + self._detail_slots, 1))(
            *[env[name] for name, _, _ in self._symbols])
        plan.fetch_alloc = [(shapes.evaluate_dims(f["dims"], env), dtype)
                            for f, dtype in zip((f for f in self.fetches
                                                 if f.get("source", "kernel") == "kernel"),
                                                self._kernel_dtypes)]
        plan.arena_bytes = shapes.evaluate(self._arena_expr, env)
        if plan.arena_bytes < 0:
            raise ShapeError(f"the feed shapes {[list(k) for k in key]} give the negative "
                             f"arena size {plan.arena_bytes} ({shapes.to_text(self._arena_expr)})")
        plan.var_shapes = [shapes.evaluate_dims(v["dims"], env) for v in self.variables]
        self._check_memory(plan)
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = plan
        return plan

    def _check_memory(self, plan):
        """KernelFailure(ResourceExhaustedError) for an allocation of this plan that the
        machine cannot hold, before anything is allocated or run."""
        kernel_fetches = [f for f in self.fetches if f.get("source", "kernel") == "kernel"]
        wanted = [(f"fetch {f['name']}", shape, dtype)
                  for f, (shape, dtype) in zip(kernel_fetches, plan.fetch_alloc)]
        wanted += [(f"variable {v['name']}", shape, dtype) for v, dtype, shape in
                   zip(self.variables, self._var_dtypes, plan.var_shapes)
                   if not v.get("read", True)]
        wanted.append(("the intermediate buffers (arena)", (plan.arena_bytes,), np.uint8))
        for what, shape, dtype in wanted:
            message = memory.oom_message(shape, dtype)
            if message is not None:
                raise KernelFailure("ResourceExhaustedError", message, what)

    def _bind_variables(self, store, plan):
        """Points the variable slots at the store's arrays (allocating the ones only
        written); arrays are kept so their pointers stay valid."""
        for j, (var, dtype, shape) in enumerate(zip(self.variables, self._var_dtypes,
                                                     plan.var_shapes)):
            name = var["name"]
            arr = store.get(name)
            if arr is None:
                if var.get("read", True):
                    raise UninitializedVariable(name)
                arr = store[name] = np.empty(shape, dtype)
            elif arr.dtype != dtype or arr.shape != shape:
                if var.get("read", True) and var.get("shape_guard") and arr.dtype == dtype:
                    self._var_bound = [_UNBOUND] * len(self.variables)
                    raise GuardFailure(f"variable {name} has shape {list(arr.shape)}, the "
                                       f"code was compiled for {list(shape)}")
                if var.get("read", True):
                    raise VariableMismatch(
                        f"variable {name} holds a {arr.dtype} array of shape "
                        f"{list(arr.shape)}, the code was compiled for {dtype} "
                        f"{list(shape)}")
                arr = store[name] = np.empty(shape, dtype)
            elif not arr.flags.c_contiguous or (var.get("written") and not arr.flags.writeable):
                arr = store[name] = np.array(arr, dtype, order="C")
            self._var_ptrs[j] = arr.ctypes.data
            self._var_bound[j] = arr
        self._var_bound_shapes = plan.var_shapes

    def _failure(self, rc, plan=None):
        if 1 <= rc <= len(self.error_sites):
            site = self.error_sites[rc - 1]
            message = site["message"]
            if site.get("args") and plan is not None:
                message = self._format_details(message, site["args"], plan)
            return KernelFailure(site["class"], message, site.get("op", ""))
        return KernelFailure("InternalError", f"compiled code returned unknown status {rc}",
                             "")

    def _format_details(self, message, kinds, plan):
        """The site's message template filled with the values the failing code left in
        the syms slots after the symbols: ints, or linear positions shown as [i,j]."""
        base = len(self._symbols)
        values = []
        for k, kind in enumerate(kinds[:self._detail_slots]):
            v = int(plan.syms[base + k])
            if isinstance(kind, dict):
                dims = shapes.evaluate_dims(kind["index"], plan.env)
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

    def _with_copied_fetches(self, outs, feeds):
        result = [None] * len(self.fetches)
        for slot, out in zip(self._kernel_slots, outs):
            result[slot - len(self.feeds)] = out
        for i, source, index in self._post:
            if source == "feed":
                result[i] = np.array(feeds[index])
            elif source == "variable":
                result[i] = np.array(self._var_bound[index])
            else:
                result[i] = np.array(self._constants[index])
        return result
