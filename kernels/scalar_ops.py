"""Scalar LLVM IR for every elementwise op type: `emit_scalar(builder, op_type, args, ...)`.

Semantics are those of the NumPy reference kernels (graphc/ops/math_ops.py, nn_ops.py):
TF's floor division and modulo signs, round half to even, NaN-propagating Maximum/Minimum,
integer Abs/Neg/Add/Mul wrapping like numpy, Cast truncating floats toward zero (out of range
and nan give the integer minimum, as numpy on x86), nan -> True. float16 arrives as float
(kernels.dtypes.llvm_type) and is computed in float32; Cast to float16 rounds.

Run-time failures (integer division or modulo by zero, integer pow with a negative exponent,
CheckNumerics on nan/inf) call `on_error(i1 condition)` when given; the result is then a
defined value (0 for the integer ops), never undefined behaviour.
"""
import numpy as np
from llvmlite import ir

from kernels import math_approx as ma
from kernels.activation_constants import SELU_ALPHA, SELU_SCALE
from kernels.dtypes import (bits, dtype_name, is_bool, is_float, is_integer, is_unsigned,
                            llvm_type)

__all__ = ["emit_scalar", "register_scalar_op", "ScalarCall", "SCALAR_OPS",
           "ELEMENTWISE_OP_TYPES"]


class ScalarCall:
    """One emission, what an emitter gets: the builder `b`, the operand Values `args`
    (`x`, `y`), their dtype names `in_dtypes` (`dtype`: the operands'), the result's `out`,
    the op's `attrs`, and `error(cond)` for ops that can fail at run time."""

    def __init__(self, builder, args, in_dtypes, out_dtype, attrs, on_error):
        self.b = builder
        self.args = list(args)
        self.in_dtypes = [dtype_name(d) for d in in_dtypes]
        self.out = dtype_name(out_dtype)
        self.attrs = attrs or {}
        self.on_error = on_error
        self.dtype = self.in_dtypes[0] if self.in_dtypes else self.out  # operand dtype

    @property
    def x(self):
        return self.args[0]

    @property
    def y(self):
        return self.args[1]

    @property
    def is_float(self):
        return is_float(self.dtype)

    @property
    def unsigned(self):
        return is_unsigned(self.dtype)

    def const(self, value, like=None):
        ty = (like.type if like is not None else llvm_type(self.dtype))
        if isinstance(ty, ir.IntType) and not isinstance(value, bool):
            value = int(value)
        return ir.Constant(ty, value)

    def fops(self, like=None):
        return ma.FloatOps(self.b, (like or self.x).type)

    def error(self, cond):
        if self.on_error is not None:
            self.on_error(cond)


# ---------------------------------------------------------------------------- helpers
def _icmp(c, op, a, b):
    if c.unsigned:
        return c.b.icmp_unsigned(op, a, b)
    return c.b.icmp_signed(op, a, b)


_FLOAT_PREDICATES = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _compare(op):
    """Comparison op -> bool; float != is unordered (nan != anything), the rest ordered."""
    def emit(c):
        if c.is_float:
            if op == "!=":
                return c.b.fcmp_unordered("!=", c.x, c.y)
            return c.b.fcmp_ordered(op, c.x, c.y)
        if is_bool(c.dtype):
            return c.b.icmp_unsigned(op, c.x, c.y)
        return _icmp(c, op, c.x, c.y)
    return emit


def _arith(float_fn, int_fn):
    def emit(c):
        return getattr(c.b, float_fn if c.is_float else int_fn)(c.x, c.y)
    return emit


def _select_max(c, a, b, float_op, int_op):
    """numpy's maximum/minimum: a if (a op b or a is nan) else b, so nan propagates."""
    if is_float(c.dtype):
        pick_a = c.b.or_(c.b.fcmp_ordered(float_op, a, b), c.b.fcmp_unordered("uno", a, a))
    else:
        pick_a = _icmp(c, int_op, a, b)
    return c.b.select(pick_a, a, b)


def _maximum(c, a, b):
    return _select_max(c, a, b, ">=", ">=")


def _minimum(c, a, b):
    return _select_max(c, a, b, "<=", "<=")


def _safe_divisor(c):
    """(divisor with 0 and -1 replaced by 1, y == 0, y == -1): sdiv never traps."""
    zero = c.b.icmp_unsigned("==", c.y, c.const(0, c.y))
    if c.unsigned:
        return c.b.select(zero, c.const(1, c.y), c.y), zero, None
    minus_one = c.b.icmp_signed("==", c.y, c.const(-1, c.y))
    return c.b.select(c.b.or_(zero, minus_one), c.const(1, c.y), c.y), zero, minus_one


def _int_floor_div_mod(c):
    """Python's floor division and modulo (result of mod has the sign of y)."""
    b = c.b
    d, zero, minus_one = _safe_divisor(c)
    c.error(zero)
    if c.unsigned:
        q, r = b.udiv(c.x, d), b.urem(c.x, d)
    else:
        q, r = b.sdiv(c.x, d), b.srem(c.x, d)
        # truncation rounded toward zero: step down when the remainder's sign differs from y
        adjust = b.and_(b.icmp_signed("!=", r, c.const(0, r)),
                        b.icmp_signed("<", b.xor(r, c.y), c.const(0, r)))
        q = b.select(adjust, b.sub(q, c.const(1, q)), q)
        r = b.select(adjust, b.add(r, c.y), r)
        q = b.select(minus_one, b.neg(c.x), q)  # x // -1 = -x, wrapping at the minimum
    zero_value = c.const(0, q)
    return b.select(zero, zero_value, q), b.select(zero, zero_value, r)


def _floordiv(c):
    if c.is_float:
        return ma.intrinsic(c.b, "floor", [c.b.fdiv(c.x, c.y)])
    return _int_floor_div_mod(c)[0]


def _floormod(c):
    if not c.is_float:
        return _int_floor_div_mod(c)[1]
    # numpy's float mod: fmod, moved into y's sign; zero results take y's sign
    o = c.fops()
    r = ma.fmod(c.b, c.x, c.y)
    differs = c.b.icmp_unsigned("!=", o.cmp("<", c.y, 0.0), o.cmp("<", r, 0.0))
    r = o.sel(c.b.and_(o.ucmp("!=", r, 0.0), differs), o.add(r, c.y), r)
    return o.sel(o.cmp("==", r, 0.0), o.copysign(0.0, c.y), r)


def _int_pow(c):
    """Square and multiply over the exponent's bits (wrapping like numpy); y < 0 fails."""
    b = c.b
    result, base, exponent = c.const(1, c.x), c.x, c.y
    one = c.const(1, c.y)
    for _ in range(bits(c.dtype) - (0 if c.unsigned else 1)):
        odd = b.icmp_unsigned("!=", b.and_(exponent, one), c.const(0, c.y))
        result = b.select(odd, b.mul(result, base), result)
        base = b.mul(base, base)
        exponent = b.lshr(exponent, one)
    if c.unsigned:
        return result
    negative = b.icmp_signed("<", c.y, c.const(0, c.y))
    c.error(negative)
    return b.select(negative, c.const(0, c.x), result)


def _pow(c):
    if c.is_float:
        return ma.pow(c.b, c.x, c.y)
    return _int_pow(c)


# ---------------------------------------------------------------------- unary helpers
def _neg(c):
    return c.b.fneg(c.x) if c.is_float else c.b.neg(c.x)


def _abs(c):
    if c.is_float:
        return ma.intrinsic(c.b, "fabs", [c.x])
    if c.unsigned:
        return c.x
    negative = c.b.icmp_signed("<", c.x, c.const(0))
    return c.b.select(negative, c.b.neg(c.x), c.x)


def _sign(c):
    b = c.b
    if c.is_float:
        o = c.fops()
        # zeros give +0 and nan stays nan (numpy)
        value = o.sel(o.cmp("==", c.x, 0.0), 0.0, c.x)
        value = o.sel(o.cmp("<", c.x, 0.0), -1.0, value)
        return o.sel(o.cmp(">", c.x, 0.0), 1.0, value)
    if c.unsigned:
        return b.zext(b.icmp_unsigned("!=", c.x, c.const(0)), c.x.type)
    value = b.select(b.icmp_signed("<", c.x, c.const(0)), c.const(-1), c.const(0))
    return b.select(b.icmp_signed(">", c.x, c.const(0)), c.const(1), value)


def _square(c):
    return c.b.fmul(c.x, c.x) if c.is_float else c.b.mul(c.x, c.x)


def _exp(c):
    # attrs {"nonpositive": True}: codegen knows x <= 0 (softmax's x - max), which the
    # float32 code uses to skip the overflow half of exp's range handling
    if c.attrs.get("nonpositive"):
        return ma.exp_nonpositive(c.b, c.x)
    return ma.exp(c.b, c.x)


def _float_unary(fn):
    def emit(c):
        return fn(c.b, c.x)
    return emit


def _intrinsic_unary(name, int_identity=False):
    def emit(c):
        if not c.is_float and int_identity:
            return c.x
        return ma.intrinsic(c.b, name, [c.x])
    return emit


def _rsqrt(c):
    o = c.fops()
    return o.div(1.0, ma.intrinsic(c.b, "sqrt", [c.x]))


def _reciprocal(c):
    return c.fops().div(1.0, c.x)


def _squared_difference(c):
    if c.is_float:
        d = c.b.fsub(c.x, c.y)
        return c.b.fmul(d, d)
    d = c.b.sub(c.x, c.y)
    return c.b.mul(d, d)


def _add_n(c):
    total = c.args[0]
    for a in c.args[1:]:
        total = c.b.fadd(total, a) if c.is_float else c.b.add(total, a)
    return total


# --------------------------------------------------------------------------- activations
def _relu(c):
    return _maximum(c, c.x, c.const(0))


def _relu6(c):
    return _minimum(c, _maximum(c, c.x, c.const(0)), c.const(6))


def _leaky_relu(c):
    o = c.fops()
    alpha = c.attrs.get("alpha", 0.2)
    if c.dtype == "float16":  # numpy multiplies by float16(alpha)
        alpha = float(np.float16(alpha))
    return o.sel(o.cmp(">", c.x, 0.0), c.x, o.mul(c.x, alpha))


def _elu(c):
    o = c.fops()
    return o.sel(o.cmp(">", c.x, 0.0), c.x, ma.expm1(c.b, c.x))


def _selu(c):
    o = c.fops()
    negative = o.mul(SELU_ALPHA, ma.expm1(c.b, c.x))
    return o.mul(SELU_SCALE, o.sel(o.cmp(">", c.x, 0.0), c.x, negative))


def _softsign(c):
    o = c.fops()
    return o.div(c.x, o.add(1.0, o.fabs(c.x)))


# ------------------------------------------------------------------ select, cast, misc
def _select(c):
    return c.b.select(c.args[0], c.args[1], c.args[2])


def _is_nan(c):
    return c.fops().isnan(c.x)


def _is_inf(c):
    o = c.fops()
    return o.cmp("==", o.fabs(c.x), float("inf"))  # ordered: nan is not inf


def _is_finite(c):
    o = c.fops()
    return o.cmp("<", o.fabs(c.x), float("inf"))  # ordered: false for nan


def _check_numerics(c):
    o = c.fops()
    c.error(o.ucmp("==", o.fabs(c.x), float("inf")))  # nan (unordered) or +-inf
    return c.x


def _float_to_int(c, value, dst):
    """C-style truncation; out of range or nan gives the integer minimum of the 32- or
    64-bit conversion, then narrow types keep the low bits (numpy's results on x86)."""
    b = c.b
    wide_bits = 64 if bits(dst) == 64 else 32
    wide = ir.IntType(wide_bits)
    o = ma.FloatOps(b, value.type)
    limit = float(2 ** (wide_bits - 1))
    ok = b.and_(o.cmp(">=", value, -limit), o.cmp("<", value, limit))
    converted = b.fptosi(o.sel(ok, value, 0.0), wide)
    result = b.select(ok, converted, ir.Constant(wide, -(2 ** (wide_bits - 1))))
    return b.trunc(result, llvm_type(dst)) if bits(dst) < wide_bits else result


def _round_to_half(b, value):
    return b.fpext(b.fptrunc(value, ir.HalfType()), ir.FloatType())


def _cast(c):
    src, dst = c.dtype, dtype_name(c.attrs.get("DstT", c.out))
    b, x = c.b, c.x
    dst_ty = llvm_type(dst)
    if is_bool(dst):
        if is_float(src):
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))  # nan -> True
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if is_float(dst):
        if is_float(src):
            if x.type != dst_ty:
                x = b.fpext(x, dst_ty) if bits(dst) > bits(src) else b.fptrunc(x, dst_ty)
            return _round_to_half(b, x) if dst == "float16" and src != "float16" else x
        signed = is_integer(src) and not is_unsigned(src)
        target = ir.HalfType() if dst == "float16" else dst_ty
        value = b.sitofp(x, target) if signed else b.uitofp(x, target)
        return b.fpext(value, dst_ty) if dst == "float16" else value
    if is_float(src):
        return _float_to_int(c, x, dst)
    # integer or bool to integer
    src_bits, dst_bits = x.type.width, dst_ty.width
    if src_bits == dst_bits:
        return x
    if src_bits > dst_bits:
        return b.trunc(x, dst_ty)
    if is_bool(src) or is_unsigned(src):
        return b.zext(x, dst_ty)
    return b.sext(x, dst_ty)


def _fill(value):
    def emit(c):
        ty = llvm_type(c.out)
        if is_bool(c.out):
            return ir.Constant(ty, int(bool(value)))
        return ir.Constant(ty, value if is_float(c.out) else int(value))
    return emit


def _identity(c):
    return c.x


def _logical(name):
    def emit(c):
        if name == "not":
            return c.b.not_(c.x)
        return getattr(c.b, name + "_")(c.x, c.y)
    return emit


# op type -> emitter(ScalarCall) -> Value
SCALAR_OPS = {
    # arithmetic
    "Add": _arith("fadd", "add"),
    "Sub": _arith("fsub", "sub"),
    "Mul": _arith("fmul", "mul"),
    "RealDiv": _arith("fdiv", "sdiv"),  # float only (TF's truediv casts ints first)
    "FloorDiv": _floordiv,
    "FloorMod": _floormod,
    "Pow": _pow,
    "Maximum": lambda c: _maximum(c, c.x, c.y),
    "Minimum": lambda c: _minimum(c, c.x, c.y),
    "SquaredDifference": _squared_difference,
    "AddN": _add_n,
    # unary
    "Neg": _neg,
    "Abs": _abs,
    "Sign": _sign,
    "Square": _square,
    "Sqrt": _intrinsic_unary("sqrt"),
    "Rsqrt": _rsqrt,
    "Reciprocal": _reciprocal,
    "Exp": _exp,
    "Log": _float_unary(ma.log),
    "Log1p": _float_unary(ma.log1p),
    "Expm1": _float_unary(ma.expm1),
    "Tanh": _float_unary(ma.tanh),
    "Sigmoid": _float_unary(ma.sigmoid),
    "Sin": _float_unary(ma.sin),
    "Cos": _float_unary(ma.cos),
    "Erf": _float_unary(ma.erf),
    "Erfc": _float_unary(ma.erfc),
    "Floor": _intrinsic_unary("floor", int_identity=True),
    "Ceil": _intrinsic_unary("ceil", int_identity=True),
    "Round": _intrinsic_unary("roundeven", int_identity=True),
    # comparisons and logic
    "Equal": _compare("=="),
    "NotEqual": _compare("!="),
    "Less": _compare("<"),
    "LessEqual": _compare("<="),
    "Greater": _compare(">"),
    "GreaterEqual": _compare(">="),
    "LogicalAnd": _logical("and"),
    "LogicalOr": _logical("or"),
    "LogicalNot": _logical("not"),
    "Select": _select,
    "Cast": _cast,
    # nn activations
    "Relu": _relu,
    "Relu6": _relu6,
    "LeakyRelu": _leaky_relu,
    "Elu": _elu,
    "Selu": _selu,
    "Softplus": _float_unary(ma.softplus),
    "Softsign": _softsign,
    # pass-through and constant-valued elementwise ops
    "Identity": _identity,
    "StopGradient": _identity,
    "CheckNumerics": _check_numerics,
    "IsNan": _is_nan,
    "IsInf": _is_inf,
    "IsFinite": _is_finite,
    "ZerosLike": _fill(0),
    "OnesLike": _fill(1),
}

# a live view: an op type added by register_scalar_op is elementwise from then on
ELEMENTWISE_OP_TYPES = SCALAR_OPS.keys()

# ops that may call on_error
FALLIBLE_OP_TYPES = frozenset({"FloorDiv", "FloorMod", "Pow", "CheckNumerics"})


def register_scalar_op(op_type, emitter):
    """Adds the emitter (emitter(call: ScalarCall) -> llvmlite Value) of an elementwise op
    type: with it, codegen lowers the op in loop kernels and gemm/conv epilogues on every
    target; nothing else in kernels/ or the compiler names the op."""
    if op_type in SCALAR_OPS:
        raise KeyError(f"op type {op_type!r} already has a scalar emitter")
    SCALAR_OPS[op_type] = emitter


def emit_scalar(builder, op_type, args, in_dtypes, out_dtype, attrs=None, on_error=None):
    """The LLVM Value of `op_type` applied to scalar register values `args`.

    in_dtypes/out_dtype: numpy dtype names (or objects with .name). For Select, args are
    (cond i1, x, y) and in_dtypes (bool, T, T). For Cast, out_dtype (or attrs["DstT"]) is
    the target. on_error(cond: i1) is called by ops that can fail at run time (integer
    division/modulo by zero, integer pow with a negative exponent, CheckNumerics).
    """
    try:
        emitter = SCALAR_OPS[op_type]
    except KeyError:
        raise NotImplementedError(f"no scalar emitter for op type {op_type!r}") from None
    in_dtypes = list(in_dtypes)
    if op_type == "Select":
        in_dtypes = in_dtypes[1:]  # the operand dtype is that of x/y
        call = ScalarCall(builder, args, in_dtypes, out_dtype, attrs, on_error)
        call.args = list(args)
    else:
        call = ScalarCall(builder, args, in_dtypes, out_dtype, attrs, on_error)
    return emitter(call)
