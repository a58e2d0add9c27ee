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

from . import jit
from .errors import GuardFailure, UninitializedVariable, VariableMismatch
from .memory import aligned_empty
from .signature import Signature
from .verify import verify_spec

_RECYCLE_BYTES = 1 << 20  # fetch arrays this big are reused once the caller drops them
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


_WITH_TEAMS = weakref.WeakSet()  # executables whose code may start thread teams


def _serial_after_fork():
    for exe in list(_WITH_TEAMS):
        exe._threads.value = 1


jit.on_fork_in_child(_serial_after_fork)


class Executable:
    """One compiled CPU spec made runnable: its LLVM IR JIT-compiled, its arena and
    constants bound; `run(feed_arrays, variables)` calls the native entry once."""

    def __init__(self, spec, use_wrapper=True, num_threads=None):
        verify_spec(spec)  # structure and bounds: cheap, before anything is built
        self.signature = sig = Signature(spec)
        self.spec = spec
        self.entry = spec.get("entry", "graphc_main")
        self.feeds, self.fetches = sig.feeds, sig.fetches
        self.variables, self.error_sites = sig.variables, sig.error_sites
        self._recent_fetches = [None] * len(sig.kernel_slots)
        self._const_ptrs = (ctypes.c_void_p * max(len(sig.constants), 1))(
            *[a.ctypes.data for a in sig.constants])
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
        n_slots = len(self.feeds) + len(self.fetches)
        self._objs = (ctypes.c_void_p * max(n_slots, 1))()  # ids of feeds, then fetches
        self._feed_ptrs = (ctypes.c_void_p * max(len(self.feeds), 1))()
        self._fetch_ptrs = (ctypes.c_void_p * max(len(self.fetches), 1))()
        self._var_ptrs = (ctypes.c_void_p * max(len(self.variables), 1))()
        self._var_bound = [_UNBOUND] * len(self.variables)  # arrays whose pointers are bound
        self._var_bound_shapes = None
        self._arena = aligned_empty(64)
        self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
        self._threads = self._module_global(jit.THREADS_GLOBAL, ctypes.c_int32)
        self._tasks = self._module_global(jit.TASKS_GLOBAL, ctypes.c_int64)
        self._alone = self._module_global(jit.TEAM_ALONE_GLOBAL, ctypes.c_int64)
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
            jit.ensure_team_workers(n)

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

    @property
    def team_regions_alone(self):
        """Regions run so far on the calling thread alone though a team was asked for:
        the runtime's fallback after a team lost to a serial run (runtime/jit.py). Each
        ran one task instead of one per thread."""
        return self._alone.value if self._alone is not None else 0

    # ------------------------------------------------------------ construction
    @property
    def _wrapper_name(self):
        return f"graphc_rt_call.{self.entry}"

    def _wrapper_ir(self):
        """An LLVM function (objs, variables, constants, arena, syms) that fills the feed and
        fetch pointer arrays from ndarray object addresses and calls the entry."""
        nf, nk = len(self.feeds), len(self.fetches)
        kernel_slots = set(self.signature.kernel_slots)
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
        sig = self.signature
        dtypes = sig.feed_dtypes
        sig.check_feed_count(feed_arrays)
        with self._lock:
            objs = self._objs
            feeds = feed_arrays
            key = []
            for i, a in enumerate(feed_arrays):
                if type(a) is not np.ndarray or a.dtype is not dtypes[i] \
                        or not a.flags.c_contiguous:
                    a = sig.conform_feed(i, a)
                    if feeds is feed_arrays:
                        feeds = list(feed_arrays)
                    feeds[i] = a
                objs[i] = id(a)
                key.append(a.shape)
            key = tuple(key)
            if sig.value_guards:
                sig.check_values(feeds)
            binding = sig.memo.get(key)
            if binding is None:
                binding = sig.bind(key)
            outs = self._fetch_arrays(binding.fetch_alloc)
            for slot, out in zip(sig.kernel_slots, outs):
                objs[slot] = id(out)
            if sig.var_names:
                if variables is None:
                    variables = {}
                bound = self._var_bound
                for j, name in enumerate(sig.var_names):
                    if variables.get(name) is not bound[j]:
                        self._bind_variables(variables, binding)
                        break
                else:
                    if sig.var_symbolic and binding.var_shapes != self._var_bound_shapes:
                        self._bind_variables(variables, binding)
            if binding.arena_bytes > self._arena.nbytes:
                self._arena = aligned_empty(binding.arena_bytes)
                self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
            if self._use_wrapper:
                rc = self._call(objs, self._var_ptrs, self._const_ptrs, self._arena_ptr,
                                binding.syms)
            else:
                rc = self._call_direct(feeds, outs, binding)
            if rc:
                raise sig.failure(rc, binding)
            if sig.post:
                return self._with_copied_fetches(outs, feeds)
            return outs

    def _call_direct(self, feeds, outs, binding):
        """The entry called with pointer arrays filled in Python (no wrapper available)."""
        for i, a in enumerate(feeds):
            self._feed_ptrs[i] = a.ctypes.data
        for slot, out in zip(self.signature.kernel_slots, outs):
            self._fetch_ptrs[slot - len(self.feeds)] = out.ctypes.data
        return self._entry(self._feed_ptrs, self._fetch_ptrs, self._var_ptrs,
                           self._const_ptrs, self._arena_ptr, binding.syms)

    def _bind_variables(self, store, binding):
        """Points the variable slots at the store's arrays (allocating the ones only
        written); arrays are kept so their pointers stay valid."""
        for j, (var, dtype, shape) in enumerate(zip(self.variables, self.signature.var_dtypes,
                                                     binding.var_shapes)):
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
        self._var_bound_shapes = binding.var_shapes

    def _with_copied_fetches(self, outs, feeds):
        sig = self.signature
        result = [None] * len(self.fetches)
        for slot, out in zip(sig.kernel_slots, outs):
            result[slot - len(self.feeds)] = out
        for i, source, index in sig.post:
            if source == "feed":
                result[i] = np.array(feeds[index])
            elif source == "variable":
                result[i] = np.array(self._var_bound[index])
            else:
                result[i] = np.array(sig.constants[index])
        return result
