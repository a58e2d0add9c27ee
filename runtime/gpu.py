"""Loading GPU kernels (PTX) through pycuda, imported lazily.

pycuda is an optional extra: importing this module, graphc, or anything CPU never needs
it. `load_gpu_module(ptx)` needs both pycuda and a CUDA driver (libcuda.so.1, which
`import pycuda.driver` loads) and raises GpuUnavailable saying which one is missing.
Not wired into Session yet (issue 5's later steps).
"""

__all__ = ["GpuUnavailable", "load_gpu_module"]


class GpuUnavailable(RuntimeError):
    """The GPU target cannot run here: pycuda or the CUDA driver is missing."""


def _driver():
    import importlib.util
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
    cuda = _driver()
    context = cuda.Device(device).make_context()
    data = ptx.encode() if isinstance(ptx, str) else ptx
    return cuda.module_from_buffer(data), context
