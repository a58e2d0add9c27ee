"""The GPU runtime: GPU executable specs (docs/gpu_contract.md) run on a device.

    exe = GpuExecutable(spec, open_device("cuda"))      # or open_device("emulated")
    outputs = exe.run(feed_arrays, variables)           # as runtime.Executable.run

Two devices behind one small interface (alloc, free, copy_in, copy_out, load, launch,
synchronize): CudaDevice (pycuda, a real GPU; runtime/gpu/cuda.py) and EmulatedDevice
(host memory, the spec's emulation functions; runtime/gpu/emulated.py), which is how
machines without a GPU check the GPU path. pycuda is imported only when a CudaDevice is
opened: importing this package never needs it, and opening one without pycuda or without
a CUDA driver raises GpuUnavailable saying which is missing.
"""
from .cuda import CudaDevice, GpuUnavailable, load_gpu_module
from .emulated import EmulatedDevice
from .executable import GpuExecutable
from .spec import is_gpu_target
from .variables import DeviceVariables

__all__ = ["GpuUnavailable", "GpuExecutable", "CudaDevice", "EmulatedDevice",
           "DeviceVariables", "open_device", "load_gpu_module", "is_gpu_target", "DEVICES"]

DEVICES = ("cuda", "emulated")
_opened = {}


def open_device(kind="cuda"):
    """The process's device of `kind` ("cuda": GPU 0 through pycuda, GpuUnavailable when
    there is none; "emulated": the host), opened once and shared (one CUDA context)."""
    if kind not in DEVICES:
        raise ValueError(f"unknown GPU device {kind!r}: one of {', '.join(DEVICES)}")
    device = _opened.get(kind)
    if device is None:
        device = _opened[kind] = CudaDevice() if kind == "cuda" else EmulatedDevice()
    return device
