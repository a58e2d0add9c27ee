"""The standalone runtime: loads and runs compiled graphc files without the compiler.

It imports only numpy and llvmlite (pycuda for GPU files), never graphc or kernels.
`Executable(spec)` JIT-compiles a spec's LLVM IR and runs it with one native call per run;
the Session executes through it, and `load(path)` runs a file written by gc.export.
"""
from .errors import (BlasUnavailable, FeedError, GuardFailure, KernelFailure,
                     RuntimeFailure, ShapeError, TargetMismatch, UninitializedVariable,
                     VariableMismatch)
from .executable import Executable
from .file_format import FileFormatError, Model, load  # noqa: F401
from .jit import blas_int_bits, blas_names, blas_symbol, host_target

__all__ = ["Executable", "RuntimeFailure", "GuardFailure", "FeedError", "ShapeError",
           "UninitializedVariable", "VariableMismatch", "KernelFailure", "TargetMismatch",
           "BlasUnavailable", "blas_names", "blas_symbol", "blas_int_bits", "host_target"]
