"""CudaDevice: the device interface (runtime/gpu/emulated.py has the other one) on a real
NVIDIA GPU through pycuda's driver API, imported lazily.

pycuda is an optional extra: importing this module, graphc, or anything CPU never needs
it. Opening a device needs both pycuda and a CUDA driver (libcuda.so.1, which
`import pycuda.driver` loads) and raises GpuUnavailable saying which one is missing.

This module is deliberately thin: everything else a GPU run does (marshalling, the arena,
variables, status) is shared with the emulated device and tested there. This file is the
one part of the GPU runtime that has never run on the machines the suite runs on.
"""
import atexit
import importlib.util

from ..errors import TargetMismatch
from .spec import all_launches

__all__ = ["GpuUnavailable", "CudaDevice", "load_gpu_module", "driver"]

_MAX_STATIC_SHARED = 48 * 1024  # more dynamic shared memory needs a per-function opt-in


class GpuUnavailable(RuntimeError):
    """The GPU target cannot run here: pycuda or the CUDA driver is missing."""


def driver():
    """pycuda.driver, initialized, with at least one GPU; GpuUnavailable otherwise."""
    if importlib.util.find_spec("pycuda") is None:
        raise GpuUnavailable("the GPU target needs pycuda, which is not installed "
                             "(pip install graphc[gpu]; it builds against the CUDA toolkit)")
    try:
        import pycuda.driver as cuda
    except ImportError as e:  # pycuda is there, its driver library is not
        raise GpuUnavailable(f"the GPU target needs a CUDA driver (libcuda.so.1), which "
                             f"pycuda could not load: {e}") from e
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            raise GpuUnavailable("the CUDA driver found no GPU")
    except cuda.Error as e:
        raise GpuUnavailable(f"the CUDA driver could not start: {e}") from e
    return cuda


def load_gpu_module(ptx, device=0):
    """A pycuda module of `ptx` (str or bytes) loaded on GPU `device` (its context is
    made current and returned with it): (module, context)."""
    cuda = driver()
    context = cuda.Device(device).make_context()
    return cuda.module_from_buffer(_ptx_bytes(ptx)), context


def _ptx_bytes(ptx):
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    # the driver reads PTX as a NUL-terminated string
    return data if data.endswith(b"\0") else data + b"\0"


def _arch_number(arch):
    """"sm_80" -> (8, 0)."""
    digits = arch.split("_", 1)[1]
    return int(digits[:-1]), int(digits[-1])


class CudaDevice:
    """GPU `ordinal` through pycuda: its primary context, made current once."""

    kind = "cuda"

    def __init__(self, ordinal=0):
        cuda = self._cuda = driver()
        self._device = cuda.Device(ordinal)
        self.name = f"{self._device.name()} (GPU {ordinal})"
        self._context = self._device.retain_primary_context()
        self._context.push()
        atexit.register(self._release_context)
        self._allocations = {}  # address -> DeviceAllocation (freed when dropped)

    def _release_context(self):
        try:
            self._context.pop()
        except Exception:  # noqa: BLE001 - at exit the driver may already be gone
            pass

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes):
        allocation = self._cuda.mem_alloc(max(int(nbytes), 1))
        address = int(allocation)
        self._allocations[address] = allocation
        return address

    def free(self, address):
        allocation = self._allocations.pop(address, None)
        if allocation is not None:
            allocation.free()

    def copy_in(self, address, array):
        if array.nbytes:
            self._cuda.memcpy_htod(address, array)

    def copy_out(self, array, address):
        if array.nbytes:
            self._cuda.memcpy_dtoh(array, address)

    def copy(self, dst, src, nbytes):
        """Device to device, in the stream's order (no host synchronization)."""
        if nbytes:
            self._cuda.memcpy_dtod(dst, src, nbytes)

    def zero(self, address, nbytes):
        if nbytes:
            self._cuda.memset_d8(address, 0, nbytes)

    def synchronize(self):
        self._cuda.Context.synchronize()

    # --------------------------------------------------------------- kernels
    def load(self, spec):
        """{kernel name: prepared pycuda Function} of the spec's PTX."""
        arch = spec["target"]["arch"]
        have = self._device.compute_capability()
        if tuple(have) < _arch_number(arch):
            raise TargetMismatch(f"the kernels were built for {arch}; {self.name} has "
                                 f"compute capability {have[0]}.{have[1]}")
        module = self._cuda.module_from_buffer(_ptx_bytes(spec["ptx"]))
        functions = {}
        for launch in all_launches(spec["launches"]):
            name = launch["kernel"]
            if name not in functions:
                fn = module.get_function(name)
                fn.prepare("P" * (len(launch["args"]) + 2))  # buffers, syms, status
                functions[name] = fn
        # the module must outlive its functions
        return _Kernels(functions, module)

    def launch(self, kernel, pointers, syms, status, grid, block, shared_bytes):
        if shared_bytes > _MAX_STATIC_SHARED:
            kernel.set_attribute(
                self._cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
        kernel.prepared_call((grid, 1, 1), (block, 1, 1), *pointers, syms, status,
                             shared_size=shared_bytes)


class _Kernels(dict):
    """{name: function}, holding the module the functions belong to."""

    def __init__(self, functions, module):
        super().__init__(functions)
        self.module = module
