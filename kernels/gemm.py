"""GEMM through CBLAS: declarations and calls of ?gemm from generated code.

The library is numpy's bundled OpenBLAS (ILP64: every integer argument is 64 bits); its
exported names (e.g. `scipy_cblas_sgemm64_`) and integer width are chosen by the
runtime's JIT, which loads the library; codegen passes them in. Matrices are row-major; a transposed
operand is a flag, never a copy. The library runs single-threaded inside our runs (the entry sets
it so): large products are split across our own thread team (backends/cpu/gemm_team.py).
"""
from llvmlite import ir

from kernels.loops import I32, I64, PTR

CBLAS_ROW_MAJOR = 101
CBLAS_NO_TRANS = 111
CBLAS_TRANS = 112

_SCALAR_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}


def declare_gemm(module, symbol, dtype, int_bits=64):
    """The external `cblas_?gemm` function named `symbol` for float32/float64; its size
    arguments are `int_bits` wide (64 for ILP64 builds)."""
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    s = _SCALAR_TYPES[dtype]
    n = ir.IntType(int_bits)
    # order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc (enums are C ints)
    fnty = ir.FunctionType(ir.VoidType(), [I32, I32, I32, n, n, n, s, PTR, n, PTR, n, s, PTR, n])
    return ir.Function(module, fnty, symbol)


def call_gemm(builder, gemm_fn, dtype, trans_a, trans_b, m, n, k, a, b, c, beta=0.0,
              lds=None):
    """C[m,n] = op(A) @ op(B) (+ beta*C), all row-major.

    m, n, k are i64 values; a, b, c pointers; trans_* Python bools. lds: (lda, ldb, ldc)
    as i64 values for blocks of larger matrices; default densely packed."""
    s = _SCALAR_TYPES[dtype]
    int_type = gemm_fn.function_type.args[3]
    lda = k if not trans_a else m
    ldb = n if not trans_b else k
    ldc = n
    if lds is not None:
        lda, ldb, ldc = lds

    def size(x):  # BLAS rejects a leading dimension of 0 even for an empty matrix
        return _narrow(builder, x, int_type)

    def lead(x):
        one = ir.Constant(I64, 1)
        return size(builder.select(builder.icmp_signed("<", x, one), one, x))

    def flag(t):
        return ir.Constant(I32, CBLAS_TRANS if t else CBLAS_NO_TRANS)

    builder.call(gemm_fn, [ir.Constant(I32, CBLAS_ROW_MAJOR), flag(trans_a), flag(trans_b),
                           size(m), size(n), size(k), ir.Constant(s, 1.0), a, lead(lda),
                           b, lead(ldb), ir.Constant(s, beta), c, lead(ldc)])


def _narrow(builder, x, int_type):
    return x if int_type.width == 64 else builder.trunc(x, int_type)
