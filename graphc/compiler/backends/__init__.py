"""Code generators, one package per target: cpu/ (x86 loop kernels, BLAS GEMM and
convolutions, the thread team, the entry function) and gpu/ (PTX and its CPU emulation).
Each lowers through the target-neutral loop layer (graphc/compiler/loops/); backends never
import each other."""
