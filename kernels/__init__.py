"""How each op computes natively, in LLVM IR: scalar emitters (scalar_ops), vectorizable
transcendentals, loop, GEMM, thread-team and Philox templates, for the backends.

The package keeps its historical name, but in the compiler a "kernel" is a fused group of
IR nodes (graphc/compiler/schedule/kernel.py), and an op's NumPy function is its
reference implementation (graphc/ops/); nothing here is either. Imports only llvmlite and
numpy, never graphc or runtime.
"""
