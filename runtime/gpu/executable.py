"""GpuExecutable: a GPU executable spec run on a device (CudaDevice or EmulatedDevice).

Same public run interface as runtime.executable.Executable, and the same signature logic
(runtime/signature.py: feeds, guards, symbol values, error sites), so feeds, guards and
errors behave and read exactly the same: `run(feed_arrays, variables) -> fetch arrays`.

What one run does on the device:
- ONE device arena per executable, laid out per tuple of feed shapes as
      [status i32 + pad | syms i64 x (symbols + error detail slots + run dims)] [planned buffers
      (spec arena_bytes)] [feeds] [kernel fetches]
  (each part 256-byte aligned), grown when a bigger batch needs more;
- constants are uploaded once, when the executable is built;
- variables are bound through a DeviceVariables store (runtime/gpu/variables.py): they
  stay on the device between runs; a plain dict store is copied in before and the
  written variables copied back after each run (the slow but simple path);
- per run: one copy in of the status+syms block, one per feed, the launches in schedule
  order, one copy out of the status (the only synchronization), then one per fetch;
  While and If steps (control_flow.py) add one copy out of their predicate per
  iteration or branch, and copies on the device. A
  nonzero status is 1 + the index of the error site a thread hit (its detail slots are
  copied out to format the message) and raises the same KernelFailure as the CPU code;
- the values whose rows are a loop's trip count live in buffers the run owns (grown.py),
  freed when it ends, failing or not; a loop sets its trip count's run dim when it
  leaves (one copy in), and launches whose grid reads one are resolved then.
"""
import threading

import numpy as np

from .. import shapes
from ..errors import ShapeError
from ..signature import Signature
from .control_flow import DeferredLaunch, Frame, Run, run_steps, resolve_steps
from .grown import GrownBuffers
from .spec import MAX_GRID, check_gpu_fields
from .variables import DeviceVariables

__all__ = ["GpuExecutable"]

_ALIGN = 256
_MEMO_LIMIT = 4096
_STATUS_BYTES = 8  # the i32 status, padded so that syms are 8-byte aligned


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _spec_error(where, problem):
    raise ValueError(f"GPU spec {where}: {problem}")


def _check_expr(expr, where):
    """Structure only (runtime/file_format.py checks files more strictly)."""
    if not isinstance(expr, (int, list)) or isinstance(expr, bool):
        _spec_error(where, f"{expr!r} is not a dim expression")


class _Layout:
    """What one tuple of feed shapes implies on the device."""
    __slots__ = ("control", "feed_offsets", "fetch_offsets", "total", "launches",
                 "run_dim_slots")


class GpuExecutable:
    """A GPU spec made runnable on `device`; see the module docstring."""

    def __init__(self, spec, device):
        self.signature = sig = Signature(spec)
        # the emulation runs no PTX: specs made for it alone have none (ptx: None)
        check_gpu_fields(spec, _spec_error, _check_expr,
                         need_ptx=getattr(device, "kind", None) != "emulated")
        self.spec = spec
        self.device = device
        self.entry = None
        self.feeds, self.fetches = sig.feeds, sig.fetches
        self.variables, self.error_sites = sig.variables, sig.error_sites
        self._kernels = device.load(spec)
        self.compile_seconds = getattr(self._kernels, "compile_seconds", 0.0)
        self._upload_constants()
        self._lock = threading.Lock()
        self._layouts = {}
        self._arena, self._arena_bytes = None, 0
        self._private_store = None
        self._written = [v["name"] for v in self.variables if v.get("written")]
        self._run_dim_names = list(spec.get("run_dim_names", ()))
        self._grown = list(spec.get("grown", ()))
        self.num_threads = 1

    def __del__(self):
        device = getattr(self, "device", None)
        for address in (getattr(self, "_arena", None), getattr(self, "_const_block", None)):
            if address is not None and device is not None:
                try:
                    device.free(address)
                except Exception:  # noqa: BLE001 - at exit the device may be gone
                    pass

    # ------------------------------------------------------------ interface
    def set_num_threads(self, n=None):
        """Accepted for the CPU interface; a GPU run's threads come from its launches."""
        self.num_threads = 1

    @property
    def parallel_tasks(self):
        return 0

    def kernel_profile(self):
        """The CPU executable's per-kernel cycle counts have no GPU counterpart yet."""
        return []

    @property
    def ptx(self):
        return self.spec["ptx"]

    def optimized_ir(self):
        return self.spec["emulation_ir"]

    def asm(self):
        return self.spec["ptx"]

    # ---------------------------------------------------------- construction
    def _upload_constants(self):
        """All constants in one device block, each 256-byte aligned, uploaded once."""
        constants = self.signature.constants
        offsets, total = [], 0
        for arr in constants:
            offsets.append(total)
            total = _align(total + arr.nbytes)
        self._const_block = self.device.alloc(total) if constants else None
        self._const_addresses = []
        for arr, offset in zip(constants, offsets):
            self.device.copy_in(self._const_block + offset, arr)
            self._const_addresses.append(self._const_block + offset)

    def _layout(self, binding):
        """The arena layout and the resolved launches of one binding."""
        sig = self.signature
        layout = _Layout()
        n_syms = len(sig.symbols)
        n_run = len(self._run_dim_names)
        # the run dims' slots start at 0 each run: a loop sets its own when it leaves
        layout.control = np.zeros(1 + n_syms + sig.detail_slots + n_run, np.int64)
        layout.control[1:1 + n_syms] = [binding.env[name] for name, _, _ in sig.symbols]
        layout.run_dim_slots = [(name, _STATUS_BYTES + 8 * (n_syms + sig.detail_slots + j))
                                for j, name in enumerate(self._run_dim_names)]
        planned = _align(_STATUS_BYTES + 8 * (n_syms + sig.detail_slots + n_run))
        position = _align(planned + binding.arena_bytes)
        layout.feed_offsets = []
        for feed, dtype in zip(self.feeds, sig.feed_dtypes):
            layout.feed_offsets.append(position)
            count = int(np.prod(shapes.evaluate_dims(feed["dims"], binding.env), dtype=np.int64))
            position = _align(position + count * dtype.itemsize)
        layout.fetch_offsets = []
        kernel_fetches = [j for j, f in enumerate(self.fetches)
                          if f.get("source", "kernel") == "kernel"]
        for j, (shape, dtype) in zip(kernel_fetches, binding.fetch_alloc):
            layout.fetch_offsets.append((j, position, shape, dtype))
            position = _align(position + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        layout.total = position
        fetch_at = {j: offset for j, offset, _, _ in layout.fetch_offsets}

        def arg_of(kind, what, where):
            """(frame kind, value) of a storage key (control_flow.Frame): all but
            variables and constants are offsets into the device arena."""
            if kind == "arena":
                offset = shapes.evaluate(what, binding.env)
                if not 0 <= offset <= binding.arena_bytes:
                    raise ShapeError(f"{where}: arena offset {offset} is outside the "
                                     f"{binding.arena_bytes}-byte arena")
                return 0, planned + offset
            if kind == "feed":
                return 0, layout.feed_offsets[what]
            if kind == "fetch":
                return 0, fetch_at[what]
            if kind == "var":
                return 1, what
            if kind == "grown":
                return 6, what
            return 2, self._const_addresses[what]
        layout.launches = resolve_steps(self.spec["launches"], binding.env, arg_of,
                                        self._resolve_launch)
        return layout

    def _resolve_launch(self, launch, env, arg_of):
        """(kernel, [(frame kind, value)], grid, block, shared) of one launch; arg_of:
        the storage keys' meaning in the frame it runs in."""
        where = f"kernel {launch['kernel']}"
        args = [arg_of(kind, what, where) for kind, what in launch["args"]]
        try:
            grid = shapes.evaluate(launch["grid"], env)
        except KeyError as e:
            if e.args[0] not in self._run_dim_names:
                raise ShapeError(f"{where}: its grid names the unknown dim {e.args[0]!r}") \
                    from None
            return DeferredLaunch(self._kernels[launch["kernel"]], args, launch["grid"],
                                  launch["block"], launch.get("shared_bytes", 0),
                                  launch["kernel"])
        if not 0 <= grid <= MAX_GRID:
            raise ShapeError(f"kernel {launch['kernel']}: grid of {grid} blocks is outside "
                             f"[0, {MAX_GRID}]")
        return (self._kernels[launch["kernel"]], args, grid, launch["block"],
                launch.get("shared_bytes", 0))

    # ------------------------------------------------------------------- run
    def run(self, feed_arrays, variables=None):
        """Runs once; returns the fetches (a list of new arrays, in spec order)."""
        sig = self.signature
        dtypes = sig.feed_dtypes
        sig.check_feed_count(feed_arrays)
        with self._lock:
            feeds = [a if type(a) is np.ndarray and a.dtype is dtypes[i]
                     and a.flags.c_contiguous else sig.conform_feed(i, a)
                     for i, a in enumerate(feed_arrays)]
            key = tuple(a.shape for a in feeds)
            if sig.value_guards:
                sig.check_values(feeds)
            binding, layout = self._bound(key)
            store, copy_back = self._store_for(variables)
            var_addresses = self._bind_variables_on_device(store, binding)
            try:
                status = self._launch_all(feeds, binding, layout, var_addresses)
            finally:
                for name in self._written:
                    store.written_on_device(name)
                if copy_back is not None:
                    copy_back()
            if status:
                raise sig.failure(status, self._with_details(binding, layout))
            return self._fetch_results(feeds, layout, store)

    def _bound(self, key):
        entry = self._layouts.get(key)
        if entry is None:
            binding = self.signature.memo.get(key) or self.signature.bind(key)
            if len(self._layouts) >= _MEMO_LIMIT:
                self._layouts.clear()
            entry = self._layouts[key] = (binding, self._layout(binding))
        return entry

    def _arena_for(self, nbytes):
        if self._arena is None or nbytes > self._arena_bytes:
            if self._arena is not None:
                self.device.free(self._arena)
                self._arena = None
            self._arena = self.device.alloc(nbytes)
            self._arena_bytes = nbytes
        return self._arena

    def _launch_all(self, feeds, binding, layout, var_addresses):
        """Copies in, launches the schedule, copies the status out; returns it."""
        device = self.device
        base = self._arena_for(layout.total)
        device.copy_in(base, layout.control)
        for offset, a in zip(layout.feed_offsets, feeds):
            device.copy_in(base + offset, a)
        env = dict(binding.env)
        run = Run(device, base, base + _STATUS_BYTES, env,
                  [(name, base + offset) for name, offset in layout.run_dim_slots])
        grown = GrownBuffers(device, self._grown, env)
        try:
            stopped = run_steps(run, layout.launches, Frame(base, var_addresses, grown=grown))
            if stopped:  # a loop read the failed status already
                return stopped
            out = np.zeros(1, np.int32)
            device.copy_out(out, base)  # waits for the launches reading the grown buffers
            return int(out[0])
        finally:
            grown.free()

    def _with_details(self, binding, layout):
        """The binding with the error detail slots the failing thread wrote."""
        sig = self.signature
        if sig.detail_slots:
            n_syms = len(sig.symbols)
            details = np.zeros(sig.detail_slots, np.int64)
            self.device.copy_out(details, self._arena + _STATUS_BYTES + 8 * n_syms)
            for k, v in enumerate(details):
                binding.syms[n_syms + k] = int(v)
        return binding

    def _fetch_results(self, feeds, layout, store):
        result = [None] * len(self.fetches)
        for j, offset, shape, dtype in layout.fetch_offsets:
            out = np.empty(shape, dtype)
            self.device.copy_out(out, self._arena + offset)
            result[j] = out
        sig = self.signature
        for i, source, index in sig.post:
            if source == "feed":
                result[i] = np.array(feeds[index])
            elif source == "variable":
                result[i] = store.read_copy(sig.var_names[index])
            else:
                result[i] = np.array(sig.constants[index])
        return result

    # -------------------------------------------------------------- variables
    def _store_for(self, variables):
        """(the DeviceVariables to bind, a function that copies written variables back
        to a plain store, or None)."""
        if isinstance(variables, DeviceVariables) and variables.device is self.device:
            return variables, None
        if variables is None:
            variables = {}
        if self._private_store is None:
            self._private_store = DeviceVariables(self.device)
        store = self._private_store
        for name in self.signature.var_names:
            if name in variables:
                store[name] = variables[name]
            elif name in store:
                del store[name]

        def copy_back():
            for name in self._written:
                if name in store:
                    variables[name] = store[name]
        return store, copy_back

    def _bind_variables_on_device(self, store, binding):
        return [store.device_address(v["name"], dtype, shape, v.get("read", True),
                                     v.get("shape_guard", False))
                for v, dtype, shape in zip(self.variables, self.signature.var_dtypes,
                                           binding.var_shapes)]
