"""Counter-based random numbers in LLVM IR: Philox4x32-10 and the samplers built on it.

Element i of a random op's output in run r is a pure function of (key, counter), so the
loop computing it vectorizes and any element can be computed in any order:

    words(d) = philox4x32_10(counter=(lo32(i), hi32(i), lo32(r), hi32(r) << 4 | d),
                             key=(k0, k1))            # d: the draw, 0..3

The samplers (identical, operation by operation, to the NumPy reference kernels in
graphc/ops/random_ops.py, which are the oracle):
- uniform float16: (w0 >> 21) * 2^-11; float32: (w0 >> 8) * 2^-24; float64:
  ((w0 << 32 | w1) >> 11) * 2^-53 (exact in the target type: bit-identical).
- normal: Box-Muller in float64 on u1 = ((w0<<32|w1) >> 11 + 1) * 2^-53 (in (0, 1]) and
  u2 = ((w2<<32|w3) >> 11) * 2^-53: r = sqrt(-2 log u1), z = r cos(2 pi u2) (and
  r sin(2 pi u2)), rounded to the output type. log/sin/cos are the inline polynomials of
  kernels.math_approx (the reference uses NumPy's): float32 outputs agree bit for bit
  except in ~1e-8 of cases, float64 outputs within a few ulp.
- truncated normal: the first of the 8 candidates (cos, sin of draws 0..3) with
  |z| <= 2; if none (probability ~2e-11) the deterministic fallback 4*u2(draw 3) - 2.
- uniform int in [lo, hi): lo + ((w0 << 32 | w1) mod (hi - lo)) in 64-bit unsigned
  arithmetic, cast to the output type.
This module never imports graphc.
"""
import math

from llvmlite import ir

from kernels import math_approx

I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
TRUNCATED_DRAWS = 4
TRUNCATED_LIMIT = 2.0


def _c32(v):
    return ir.Constant(I32, v & 0xFFFFFFFF)


def _c64(v):
    return ir.Constant(I64, v)


def philox(builder, counter, key):
    """Philox4x32-10 of four i32 counter words and two i32 key words -> four i32 words."""
    b = builder
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(ROUNDS):
        if r:
            k0 = b.add(k0, _c32(PHILOX_W[0]))
            k1 = b.add(k1, _c32(PHILOX_W[1]))
        p0 = b.mul(b.zext(c0, I64), _c64(PHILOX_M[0]))
        p1 = b.mul(b.zext(c2, I64), _c64(PHILOX_M[1]))
        hi0, lo0 = b.trunc(b.lshr(p0, _c64(32)), I32), b.trunc(p0, I32)
        hi1, lo1 = b.trunc(b.lshr(p1, _c64(32)), I32), b.trunc(p1, I32)
        c0, c1, c2, c3 = (b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0)
    return c0, c1, c2, c3


def words(builder, index, key0, key1, run, draw=0):
    """The four Philox words of element `index` (i64) in run `run` (i64), draw `draw`;
    key0/key1: i64 values holding the 32-bit key words."""
    b = builder
    counter = (b.trunc(index, I32), b.trunc(b.lshr(index, _c64(32)), I32), b.trunc(run, I32),
               b.trunc(b.or_(b.shl(b.lshr(run, _c64(32)), _c64(4)), _c64(draw)), I32))
    return philox(b, counter, (b.trunc(key0, I32), b.trunc(key1, I32)))


def _u64(builder, hi, lo):
    b = builder
    return b.or_(b.shl(b.zext(hi, I64), _c64(32)), b.zext(lo, I64))


def _unit53(builder, hi, lo, open_at_zero=False):
    """((hi<<32|lo) >> 11 (+1)) * 2^-53 as a double: in [0, 1), or (0, 1]."""
    b = builder
    m = b.lshr(_u64(b, hi, lo), _c64(11))
    if open_at_zero:
        m = b.add(m, _c64(1))
    return b.fmul(b.uitofp(m, F64), ir.Constant(F64, 2.0 ** -53))


def uniform(builder, w, dtype):
    """A uniform [0, 1) value of `dtype` (register type: float for float16) from words w."""
    b = builder
    if dtype == "float64":
        return _unit53(b, w[0], w[1])
    if dtype == "float16":
        bits, scale = 21, 2.0 ** -11
    else:
        bits, scale = 8, 2.0 ** -24
    return b.fmul(b.uitofp(b.lshr(w[0], _c32(bits)), F32), ir.Constant(F32, scale))


def box_muller(builder, w):
    """(r cos(2 pi u2), r sin(2 pi u2)) in float64, r = sqrt(-2 log u1)."""
    b = builder
    u1 = _unit53(b, w[0], w[1], open_at_zero=True)
    u2 = _unit53(b, w[2], w[3])
    log_u1 = math_approx.log(b, u1)
    r = math_approx.intrinsic(b, "sqrt", [b.fmul(log_u1, ir.Constant(F64, -2.0))])
    theta = b.fmul(u2, ir.Constant(F64, 2.0 * math.pi))
    return (b.fmul(r, math_approx.cos(b, theta)), b.fmul(r, math_approx.sin(b, theta)))


def _to_register(builder, x64, dtype):
    """A float64 value rounded to dtype's register type (float16: rounded to half, held
    in a float, as a float16 store of it gives the same half)."""
    b = builder
    if dtype == "float64":
        return x64
    if dtype == "float16":
        return b.fpext(b.fptrunc(x64, ir.HalfType()), F32)
    return b.fptrunc(x64, F32)


def normal(builder, index, key0, key1, run, dtype):
    z, _ = box_muller(builder, words(builder, index, key0, key1, run))
    return _to_register(builder, z, dtype)


def truncated_normal(builder, index, key0, key1, run, dtype):
    b = builder
    candidates = []
    last = None
    for d in range(TRUNCATED_DRAWS):
        w = words(b, index, key0, key1, run, d)
        candidates += list(box_muller(b, w))
        last = w
    result = b.fsub(b.fmul(_unit53(b, last[2], last[3]), ir.Constant(F64, 4.0)),
                    ir.Constant(F64, 2.0))
    limit = ir.Constant(F64, TRUNCATED_LIMIT)
    for z in reversed(candidates):  # the first acceptable candidate wins
        fabs = math_approx.intrinsic(b, "fabs", [z])
        result = b.select(b.fcmp_ordered("<=", fabs, limit), z, result)
    return _to_register(b, result, dtype)


def uniform_int(builder, index, key0, key1, run, lo, hi, out_type):
    """lo + (u64 mod (hi - lo)) as `out_type` (lo, hi: i64; the caller checks lo < hi)."""
    b = builder
    w = words(b, index, key0, key1, run)
    # hi - lo wraps to the right unsigned span; a failed lo < hi check stays safe
    span = b.select(b.icmp_signed("<", lo, hi), b.sub(hi, lo), _c64(1))
    value = b.add(lo, b.urem(_u64(b, w[0], w[1]), span))
    return value if out_type.width == 64 else b.trunc(value, out_type)


def sample(builder, op_type, index, key0, key1, run, dtype, lo=None, hi=None):
    """The value of element `index` of random op `op_type` (register type of dtype)."""
    if op_type == "RandomUniform":
        return uniform(builder, words(builder, index, key0, key1, run), dtype)
    if op_type == "RandomStandardNormal":
        return normal(builder, index, key0, key1, run, dtype)
    if op_type == "TruncatedNormal":
        return truncated_normal(builder, index, key0, key1, run, dtype)
    if op_type == "RandomUniformInt":
        bits = int(dtype[3:]) if dtype.startswith("int") else int(dtype[4:])
        return uniform_int(builder, index, key0, key1, run, lo, hi, ir.IntType(bits))
    raise NotImplementedError(f"no Philox sampler for {op_type}")
