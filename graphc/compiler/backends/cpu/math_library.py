"""Costly float functions of loop kernels as functions the module shares.

Each loop kernel used to carry its own inline copy of every exp, tanh and sigmoid it
computes (25-40 instructions each), which LLVM then vectorized, optimized and emitted once
per copy: the 32-step LSTM's training step held about 45 copies in 10 loop kernels, and
their LLVM time fell by a third without them. Here such an op is a call of one function
per (op type, dtype, the attrs its emitter reads) in the module,
`graphc.math.<op>.<dtype>`, whose attribute `vector-function-abi-variant` (LLVM's vector
function ABI, as clang declares `#pragma omp declare simd` functions) names its vector
variants: LLVM's loop vectorizer widens the call in a vectorized loop to one call of the
variant as wide as the loop. The variants are the same emitters (kernels/math_approx.py)
on vector types, so every lane computes what the inline scalar code computed, bit for bit.

The functions are `noinline`: inlined, each kernel would hold its copy again. The call
costs run time: the caller spills its vector registers around it and the function loads
its constants on each call: 6% more time for a kernel that does little but exp or a
tanh-GELU on 8M floats. So only a kernel whose ops of SHARED_OPS compute at
most SHARED_MAX_ELEMENTS elements a run calls them (`shares_math`): the calls then cost a
few microseconds a run, and the compile time they save (several milliseconds a copy)
the run time of thousands of runs; a bigger kernel, or one whose size is known at run
time only, keeps the inline code.
"""
import math

from llvmlite import ir

from graphc.compiler.loops import EXP_OF_EACH_INPUT
from kernels.dtypes import llvm_type

# op type -> the attrs its scalar emitter (kernels/scalar_ops.py) reads: the shared
# function is emitted with these alone, and one function serves each combination of them
SHARED_OPS = {
    "Exp": ("nonpositive",),
    "Sigmoid": (),
    "Tanh": (),
    "Log": (),
    "Log1p": (),
    "Expm1": (),
    "Softplus": (),
}
# vector widths of the variants: a whole AVX-512 register and half of it, the width LLVM
# picks for AVX2 targets and where a loop's other values are twice as wide (an SSE-only
# target's loops call the scalar function: each variant is compiled whether used or not)
LANES = {"float32": (8, 16), "float64": (4, 8)}
# the most elements a run that a kernel's ops of SHARED_OPS may compute together and
# call the shared functions (a 32-step LSTM's step computes 5 x 32 x 256)
SHARED_MAX_ELEMENTS = 1 << 16
_VARIANT_ATTRIBUTE = "vector-function-abi-variant"


def shares_math(kernel):
    """Whether the kernel's ops of SHARED_OPS call the shared functions: together they
    compute at most SHARED_MAX_ELEMENTS elements a run, each of a static size (a
    softmax's exp counts its input's elements)."""
    total = 0
    for node in kernel.nodes:
        if node.type in SHARED_OPS:
            values = node.outputs
        elif node.type in EXP_OF_EACH_INPUT:
            values = node.value_inputs[:1]
        else:
            continue
        for value in values:
            if not all(isinstance(d, int) for d in value.dims):
                return False
            total += math.prod(value.dims)
    return total <= SHARED_MAX_ELEMENTS


class ScalarOpsWithSharedMath:
    """kernels.scalar_ops, with the ops of SHARED_OPS on float32/float64 emitted as calls
    of the module's shared functions (defined at their first use in a module)."""

    def __init__(self, scalar_ops):
        self._base = scalar_ops

    def __getattr__(self, name):
        return getattr(self._base, name)

    def emit_scalar(self, builder, op_type, args, in_dtypes, out_dtype, attrs=None,
                    on_error=None):
        dtype = getattr(out_dtype, "name", out_dtype)
        if op_type not in SHARED_OPS or dtype not in LANES or len(args) != 1 or \
                [getattr(d, "name", d) for d in in_dtypes] != [dtype]:
            return self._base.emit_scalar(builder, op_type, args, in_dtypes, out_dtype,
                                          attrs, on_error)
        read = {k: (attrs or {})[k] for k in SHARED_OPS[op_type] if k in (attrs or {})}
        fn = self._shared_function(builder.module, op_type, dtype, read)
        return builder.call(fn, args)

    def _shared_function(self, module, op_type, dtype, attrs):
        name = function_name(op_type, dtype, attrs)
        fn = module.globals.get(name)
        if fn is not None:
            return fn
        scalar = llvm_type(dtype)
        variants = [(lanes, self._define(module, f"{name}.v{lanes}", op_type, dtype,
                                         ir.VectorType(scalar, lanes), attrs))
                    for lanes in LANES[dtype]]
        return self._define(module, name, op_type, dtype, scalar, attrs, variants)

    def _define(self, module, name, op_type, dtype, ty, attrs, variants=()):
        fn = ir.Function(module, ir.FunctionType(ty, [ty]), name)
        # external: only the scalar function's attribute names a variant until the
        # vectorizer calls it, and an internal function nothing calls is deleted first
        fn.attributes = _SharedAttributes(name, variants)
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        builder.ret(self._base.emit_scalar(builder, op_type, [fn.args[0]], [dtype], dtype,
                                           attrs))
        return fn


def function_name(op_type, dtype, attrs):
    """The shared function's name: the op, the dtype, and the attrs its emitter reads."""
    read = "".join(f".{k}_{v}" for k, v in sorted(attrs.items()))
    return f"graphc.math.{op_type.lower()}.{dtype}{read}"


class _SharedAttributes(ir.values.FunctionAttributes):
    """A shared function's attributes: a pure function (the vectorizer widens calls of
    pure functions only, and a module part may only declare it: nothing to infer from),
    never inlined, and the string attribute naming its vector variants (llvmlite's
    attribute sets hold only LLVM's keyword attributes)."""

    def __init__(self, name, variants):
        super().__init__(("nounwind", "readnone", "noinline"))
        self._variants = ",".join(f"_ZGV_LLVM_N{lanes}v_{name}({variant.name})"
                                  for lanes, variant in variants)

    def _to_list(self, ret_type):
        words = super()._to_list(ret_type) + ["willreturn"]
        if self._variants:
            words.append(f'"{_VARIANT_ATTRIBUTE}"="{self._variants}"')
        return words
