"""EmulatedDevice: the GPU device interface run on the host CPU, for machines without a GPU.

    device.alloc(nbytes) -> address          device.free(address)
    device.copy_in(address, array)           device.copy_out(array, address)
    device.copy(dst, src, nbytes)            device.zero(address, nbytes)   (on the device)
    device.load(spec) -> {kernel name: handle}
    device.launch(kernel, pointers, syms, status, grid, block, shared_bytes)
    device.synchronize()

(CudaDevice in runtime/gpu/cuda.py has the same methods.) "Device memory" is host memory
held in numpy buffers, but it is used only through this interface: the executable copies
feeds in and fetches out exactly as on a GPU, so the emulated runs exercise the same
marshalling, arena and variable residency as a real one. Copies are bounds-checked against
the allocation they land in (a stricter check than the CUDA driver makes).

Kernels are the spec's "emulation_ir": one `void @"<kernel>.emulate"(ptr args..., ptr
syms, ptr status, i64 grid, i64 block)` per kernel, which does what a launch does (the
codegen's blocks-and-threads loops), compiled for the host by runtime.jit (and so cached
on disk by runtime.compile_cache like CPU code). A launch is one native call.
"""
import bisect
import ctypes
import threading

import numpy as np

from .. import jit
from .spec import all_launches

__all__ = ["EmulatedDevice"]

_ALIGN = 256  # cudaMalloc's alignment; kernels may rely on it


class EmulatedDevice:
    """A GPU emulated on the host: memory in numpy buffers, kernels as host functions."""

    kind = "emulated"
    name = "emulated GPU (host CPU)"

    def __init__(self):
        self._buffers = {}   # address -> the numpy buffer that backs it
        self._starts = []    # sorted addresses, for bounds checks
        self._lock = threading.Lock()  # Sessions in several threads share the device
        self.launches = 0    # kernel launches so far (tests count them)
        self.copies_in = 0   # host -> device copies so far
        self.copies_out = 0  # device -> host copies so far
        self.copies_on_device = 0  # device -> device copies and fills so far

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes):
        nbytes = max(int(nbytes), 1)
        raw = np.empty(nbytes + _ALIGN, np.uint8)
        start = (-raw.ctypes.data) % _ALIGN
        buffer = raw[start:start + nbytes]
        address = buffer.ctypes.data
        with self._lock:
            self._buffers[address] = buffer
            bisect.insort(self._starts, address)
        return address

    def free(self, address):
        with self._lock:
            if self._buffers.pop(address, None) is not None:
                self._starts.remove(address)

    def _check_range(self, address, nbytes, what):
        with self._lock:
            i = bisect.bisect_right(self._starts, address) - 1
            if i >= 0:
                start = self._starts[i]
                if address + nbytes <= start + self._buffers[start].nbytes:
                    return
        raise RuntimeError(f"emulated GPU: {what} of {nbytes} bytes at {address:#x} is "
                           "outside every allocation")

    def copy_in(self, address, array):
        if array.nbytes:
            self._check_range(address, array.nbytes, "copy in")
            ctypes.memmove(address, np.ascontiguousarray(array).ctypes.data, array.nbytes)
            self.copies_in += 1

    def copy_out(self, array, address):
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("copy_out needs a writeable C-contiguous array")
        if array.nbytes:
            self._check_range(address, array.nbytes, "copy out")
            ctypes.memmove(array.ctypes.data, address, array.nbytes)
            self.copies_out += 1

    def copy(self, dst, src, nbytes):
        if nbytes:
            self._check_range(src, nbytes, "copy from")
            self._check_range(dst, nbytes, "copy to")
            ctypes.memmove(dst, src, nbytes)
            self.copies_on_device += 1

    def zero(self, address, nbytes):
        if nbytes:
            self._check_range(address, nbytes, "fill")
            ctypes.memset(address, 0, nbytes)
            self.copies_on_device += 1

    def synchronize(self):
        pass

    # --------------------------------------------------------------- kernels
    def load(self, spec):
        """{kernel name: callable} of the spec's emulation functions."""
        # O1: the emulation checks the kernels' logic; O3 took a third of a test's time
        compiled = jit.CompiledModule(spec["emulation_ir"], speed_level=1)
        kernels = _Kernels(compiled)
        for launch in all_launches(spec["launches"]):
            name = launch["kernel"]
            if name not in kernels:
                fn_type = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(launch["args"]) + 2),
                                           ctypes.c_int64, ctypes.c_int64)
                kernels[name] = fn_type(compiled.address(f"{name}.emulate"))
        return kernels

    def launch(self, kernel, pointers, syms, status, grid, block, shared_bytes):
        if grid < 1 or block < 1:  # CUDA refuses these (invalid configuration argument)
            raise RuntimeError(f"emulated GPU: launch of {grid} blocks of {block} threads")
        # shared memory is per block inside the emulation function (its own array)
        kernel(*pointers, syms, status, grid, block)
        self.launches += 1


class _Kernels(dict):
    """{name: ctypes function}, holding the compiled module (the code) alive."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled
        self.compile_seconds = compiled.compile_seconds
