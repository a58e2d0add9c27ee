"""The most memory one allocation of a run may ask for.

Dims are 64-bit, so a shape can ask for more bytes than the machine has (tf.zeros of
2**40 floats). Such a request is refused before any code runs, as TF's allocator
refuses it (ResourceExhaustedError): an allocation past physical memory could only be
served lazily, and the kernel writing it would push the machine into the OOM killer.
The compiler, the runtime and the reference executor all ask this module.
"""
import os

import numpy as np

_ENV = "GRAPHC_MEMORY_LIMIT"  # bytes; for machines whose cgroup allows less than RAM


def limit_bytes():
    """Physical memory (there is no swap to count on), or GRAPHC_MEMORY_LIMIT."""
    if os.environ.get(_ENV):
        return int(os.environ[_ENV])
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf: nothing to compare with
        return 1 << 62


def nbytes(shape, dtype):
    """Bytes of an array of `shape` (Python ints: no 64-bit overflow) and `dtype`."""
    n = np.dtype(dtype).itemsize
    for d in shape:
        n *= int(d)
    return n


def oom_message(shape, dtype, size=None):
    """TF's words for a refused allocation, with the sizes; None when it fits."""
    size = nbytes(shape, dtype) if size is None else size
    limit = limit_bytes()
    if size <= limit:
        return None
    dims = ",".join(str(int(d)) for d in shape)
    return (f"OOM when allocating tensor with shape[{dims}] and type {np.dtype(dtype).name}: "
            f"{size} bytes, more than the {limit} bytes of memory of this machine")


def aligned_empty(nbytes, align=64):
    """An uninitialized uint8 array of `nbytes` whose data starts on an `align`-byte
    boundary (generated code assumes aligned buffers)."""
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]
