"""Transcendental functions as inline LLVM IR: range reduction + polynomials, no libm calls.

Every function takes an IRBuilder and float or double scalar Values and returns a Value of
the same type. The code is straight-line (selects instead of branches) so that loops calling
it vectorize; only `fmod` is a loop (an internal function of the module: exact remainders
need a long division). Special values follow C99/numpy: exp(-inf)=0, exp(big)=inf,
log(0)=-inf, log(x<0)=nan, tanh saturates to +-1, nan in -> nan out.

Float32 exp/expm1/log/log1p (and tanh/sigmoid/softplus built on them) have float32
polynomials; float32 exp and tanh reduce with the magic-number trick (no rint, no
float-to-int conversion, about half the instructions of the generic path), and
`exp_nonpositive` (softmax's exp(x - max), sigmoid's exp(-|x|)) skips exp's overflow
side (minimax polynomials, tests/test_fast_math_paths.py checks them densely); float32
sin/cos/erf/erfc/pow run the float64 code and round (cheap enough, and correctly rounded in
practice). Float64 pow evaluates log|x| and y*log|x| in double-double
so that the result keeps ~1 ulp even when y*log|x| is large.

Sources of the algorithms: exp/expm1 Cody-Waite reduction with Taylor polynomials, log/log1p
from musl (fdlibm) with the log1p correction term (x - (u - 1)) / u, sin/cos kernels and erf
rational approximations from fdlibm, pow in double-double (Dekker products, no FMA needed),
fmod from musl's bitwise long division.
Accuracy: float32 and float64 within 3 ulps over wide ranges (the bound of each function
is BOUNDS in tools/transcendental_accuracy.py, measured against exact decimal references).
sin/cos reduce with a 3-part pi/2 (exact for |x| < 2^20 * pi/2 ~ 1.6e6); beyond that the
reduction slowly loses accuracy (no Payne-Hanek).
"""
import math

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)


# --------------------------------------------------------------------------- helpers
def _suffix(ty):
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.HalfType):
        return "f16"
    return f"i{ty.width}"


def intrinsic(builder, name, args, ret=None):
    """Calls llvm.<name>.<type of args[0]>, declaring it in the module once."""
    module = builder.module
    fname = f"llvm.{name}.{_suffix(args[0].type)}"
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret or args[0].type, [a.type for a in args]),
                         fname)
    return builder.call(fn, args)


class FloatOps:
    """Arithmetic on one float type with Python-number constants, to keep formulas short.
    The type may be a vector of floats (a shared function's vector variant:
    backends/cpu/math_library.py); constants are then splats and integers vectors too."""

    def __init__(self, builder, ty):
        self.b = builder
        self.ty = ty
        self.is64 = isinstance(_element(ty), ir.DoubleType)
        self.ity = _like(ty, I64 if self.is64 else I32)
        self.mant_bits = 52 if self.is64 else 23
        self.bias = 1023 if self.is64 else 127

    def c(self, v):
        return v if isinstance(v, ir.Value) else ir.Constant(self.ty, v)

    def ci(self, v):
        return v if isinstance(v, ir.Value) else ir.Constant(self.ity, v)

    def add(self, a, b):
        return self.b.fadd(self.c(a), self.c(b))

    def sub(self, a, b):
        return self.b.fsub(self.c(a), self.c(b))

    def mul(self, a, b):
        return self.b.fmul(self.c(a), self.c(b))

    def div(self, a, b):
        return self.b.fdiv(self.c(a), self.c(b))

    def neg(self, a):
        return self.b.fneg(a)

    def muladd(self, a, b, c):
        """a*b + c, fused where the CPU has FMA (llvm.fmuladd); for polynomials only."""
        return intrinsic(self.b, "fmuladd", [self.c(a), self.c(b), self.c(c)])

    def poly(self, x, coeffs):
        """coeffs[0] + x*(coeffs[1] + x*(...)) (Horner)."""
        acc = self.c(coeffs[-1])
        for coef in reversed(coeffs[:-1]):
            acc = self.muladd(acc, x, coef)
        return acc

    def cmp(self, op, a, b):
        """Ordered comparison: false when either side is nan."""
        return self.b.fcmp_ordered(op, self.c(a), self.c(b))

    def ucmp(self, op, a, b):
        """Unordered comparison: true when either side is nan."""
        return self.b.fcmp_unordered(op, self.c(a), self.c(b))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, cond, a, b):
        return self.b.select(cond, self.c(a), self.c(b))

    def fabs(self, a):
        return intrinsic(self.b, "fabs", [a])

    def floor(self, a):
        return intrinsic(self.b, "floor", [a])

    def rint(self, a):
        return intrinsic(self.b, "roundeven", [a])

    def copysign(self, mag, sign):
        return intrinsic(self.b, "copysign", [self.c(mag), self.c(sign)])

    def to_bits(self, a):
        return self.b.bitcast(a, self.ity)

    def from_bits(self, i):
        return self.b.bitcast(i, self.ty)

    def to_int(self, a):
        """fptosi of a value known to be finite and in range."""
        return self.b.fptosi(a, self.ity)

    def pow2(self, k):
        """2**k for an integer Value k with k + bias in [1, 2*bias] (a normal number)."""
        biased = self.b.add(k, self.ci(self.bias))
        return self.from_bits(self.b.shl(biased, self.ci(self.mant_bits)))

    def ldexp(self, v, n):
        """v * 2**n for |n| up to ~2*bias, in two exact power-of-two steps, so that results
        overflow to inf or round into subnormals once (n = 1024 and n = -1075 work)."""
        half = self.b.ashr(n, self.ci(1))
        rest = self.b.sub(n, half)
        return self.mul(self.mul(v, self.pow2(half)), self.pow2(rest))


def _ops(builder, x):
    return FloatOps(builder, x.type)


def _element(ty):
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _like(ty, scalar):
    """`scalar` (a type), or a vector of it as long as `ty` when `ty` is a vector."""
    return ir.VectorType(scalar, ty.count) if isinstance(ty, ir.VectorType) else scalar


def _via_double(builder, fn, *args):
    """Runs a float64 implementation on float32 arguments and rounds the result."""
    wide = [builder.fpext(a, _like(a.type, F64)) for a in args]
    return builder.fptrunc(fn(builder, *wide), args[0].type)


def _is_f32(x):
    return isinstance(_element(x.type), ir.FloatType)


# ---------------------------------------------------------------------- exp and expm1
_INV_FACT = [1.0 / math.factorial(k) for k in range(2, 14)]  # 1/2!, ..., 1/13!

# precision: (log2(e), ln2 high part (n*hi exact), ln2 low part, Taylor degree,
#             exp clamp, expm1 clamp)
_EXP = {
    True: (1.4426950408889634, 6.93147180369123816490e-01, 1.90821492927058770002e-10, 13,
           (-746.0, 710.0), (-40.0, 710.0)),
    False: (1.44269504088896341, 0.693359375, -2.12194440e-4, 7,
            (-104.0, 89.0), (-20.0, 89.0)),
}


def _exp_reduce(o, x, bounds):
    """(n, p) with x = n*ln2 + r, |r| <= ln2/2 and p = expm1(r); x clamped to `bounds`
    and nan replaced by 0 (the callers select the special results)."""
    log2e, ln2_hi, ln2_lo, degree, _, _ = _EXP[o.is64]
    lo, hi = bounds
    xs = o.sel(o.isnan(x), 0.0, x)
    xs = o.sel(o.cmp("<", xs, lo), lo, xs)
    xs = o.sel(o.cmp(">", xs, hi), hi, xs)
    nf = o.rint(o.mul(xs, log2e))
    r = o.sub(o.sub(xs, o.mul(nf, ln2_hi)), o.mul(nf, ln2_lo))
    coeffs = _INV_FACT[:degree - 1]
    p = o.muladd(o.mul(r, r), o.poly(r, coeffs), r)  # r + r^2 (1/2 + r/6 + ...)
    return o.to_int(nf), p


def exp(builder, x):
    o = _ops(builder, x)
    if not o.is64:
        return _exp32(o, x)
    n, p = _exp_reduce(o, x, _EXP[o.is64][4])
    result = o.ldexp(o.add(1.0, p), n)
    return o.sel(o.isnan(x), x, result)


def exp_nonpositive(builder, x):
    """exp(x) for x <= 0 or nan (exact for any x < 43): a softmax's exp(x - max), a
    sigmoid's exp(-|x|). Float32 skips the overflow side of exp's range handling."""
    o = _ops(builder, x)
    if not o.is64:
        return _exp32(o, x, nonpositive=True)
    return exp(builder, x)


# ------------------------------------------------------- float32 exp, tanh (fast path)
# Float32 exp and tanh take n = round(x / ln2) from the "magic number" trick: adding
# 1.5 * 2^23 rounds to an integer kept in the low mantissa bits, so one fma gives n (as a
# float, after subtracting the constant back) and, shifted into the exponent field, the
# bits of 2^(n + offset) -- no rint, no float-to-int conversion, and nan needs no special
# case (its bits make some scale; nan times anything is nan).
_MAGIC = 12582912.0  # 1.5 * 2^23
_LOG2E_32 = 1.44269504088896341
_LN2_HI_32 = 0.693147182464599609375           # float32(ln 2)
_LN2_LO_32 = -1.904654299957768e-09            # ln 2 - _LN2_HI_32
# e^r - 1 = r + r^2 P(r) on |r| <= ln2/2: minimax P with float32 coefficients (relative
# error of e^r 1e-8 with 5 coefficients, of e^r - 1 2e-9 with 6: tanh needs the latter).
_EXPM1_P5 = [0.5, 0.16666577756404877, 0.04166685417294502, 0.008363170549273491,
             0.0013901296770200133]
_EXPM1_P6 = [0.5, 0.1666666716337204, 0.04166646674275398, 0.008333360776305199,
             0.0013933642767369747, 0.00019857814186252654]


def _reduce32(o, x, magic):
    """(t, r): x = n ln2 + r with |r| <= ~ln2/2, where t = n + magic (bits of t shifted
    left by 23 are those of 2^(n + magic - _MAGIC - 127)). `magic` may be a Value."""
    t = o.muladd(x, _LOG2E_32, magic)
    nf = o.sub(t, magic)  # exact
    r = o.muladd(nf, -_LN2_HI_32, x)
    return t, o.muladd(nf, -_LN2_LO_32, r)


def _expm1_core32(o, r, coeffs):
    """e^r - 1 for |r| <= ~ln2/2."""
    return o.muladd(o.mul(r, r), o.poly(r, coeffs), r)


def _scale32(o, t):
    return o.from_bits(o.b.shl(o.to_bits(t), o.ci(23)))


def _exp32(o, x, nonpositive=False):
    """e^x = (1 + p(r)) 2^(n + k) 2^-k: the scale 2^(n + k) is normal over the whole range
    (k = 64 below zero, -64 above), so only the final multiply rounds, into a subnormal or
    inf where the result is one. x is clamped to [-104, 89] (beyond: 0 or inf); nan
    passes through the clamps (ordered compares) and comes out nan."""
    lo, hi = _EXP[False][4]
    xc = o.sel(o.cmp("<", x, lo), lo, x)
    if nonpositive:
        magic, post = _MAGIC + 127 + 64, 2.0 ** -64
    else:
        xc = o.sel(o.cmp(">", xc, hi), hi, xc)
        below = o.cmp("<", xc, 0.0)
        magic = o.sel(below, _MAGIC + 127 + 64, _MAGIC + 127 - 64)
        post = o.sel(below, 2.0 ** -64, 2.0 ** 64)
    t, r = _reduce32(o, xc, magic)
    mant = o.add(_expm1_core32(o, r, _EXPM1_P5), 1.0)
    return o.mul(o.mul(mant, _scale32(o, t)), post)


def _tanh32(o, x):
    """-copysign(e / (e + 2), x) with e = expm1(-2|x|) = 2^n (1 + p) - 1 computed as
    fma(2^n, p, 2^n - 1) (2^n - 1 is exact for n >= -24); -2|x| is clamped at -18.5,
    where tanh rounds to +-1, so 2^n stays normal. No cancellation anywhere; tiny x give
    e = -2x exactly (n = 0), signed zeros and nan pass through."""
    z = o.mul(-2.0, o.fabs(x))
    z = o.sel(o.cmp("<", z, -18.5), -18.5, z)
    t, r = _reduce32(o, z, _MAGIC + 127)
    p = _expm1_core32(o, r, _EXPM1_P6)
    scale = _scale32(o, t)
    e = o.muladd(scale, p, o.sub(scale, 1.0))
    return o.copysign(o.div(e, o.add(e, 2.0)), x)


def expm1(builder, x):
    """2^n (expm1(r) + 1 - 2^-n): no cancellation except n = 0, where it is expm1(r)."""
    o = _ops(builder, x)
    n, p = _exp_reduce(o, x, _EXP[o.is64][5])
    inv_scale = o.ldexp(o.c(1.0), builder.neg(n))  # 2^-n, exact even when subnormal
    result = o.ldexp(o.add(p, o.sub(1.0, inv_scale)), n)
    result = o.sel(o.cmp("==", x, 0.0), x, result)  # keeps the sign of -0
    return o.sel(o.isnan(x), x, result)


# ------------------------------------------------------------------------ log, log1p
_LOG64 = dict(ln2_hi=6.93147180369123816490e-01, ln2_lo=1.90821492927058770002e-10,
              lg=[6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
                  2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
                  1.479819860511658591e-01])
_LOG32 = dict(ln2_hi=6.9313812256e-01, ln2_lo=9.0580006145e-06,
              lg=[float.fromhex("0xaaaaaa.0p-24"), float.fromhex("0xccce13.0p-25"),
                  float.fromhex("0x91e9ee.0p-25"), float.fromhex("0xf89e26.0p-26")])


def _log_reduce(o, x):
    """(k, m) with x = 2^k * m, m in [sqrt(2)/2, sqrt(2)), for finite x > 0 (musl's trick:
    add the bits of 1 - sqrt(2)/2 so the exponent field rounds at sqrt(2))."""
    b = o.b
    tiny = 2.0 ** -1022 if o.is64 else 2.0 ** -126
    boost = 54 if o.is64 else 25
    subnormal = o.cmp("<", x, tiny)
    x = o.sel(subnormal, o.mul(x, 2.0 ** boost), x)
    if o.is64:
        one_hi, sqrt_half_hi = 0x3ff00000 << 32, 0x3fe6a09e << 32
        mant_mask = 0x000fffffffffffff
    else:
        one_hi, sqrt_half_hi = 0x3f800000, 0x3f3504f3
        mant_mask = 0x007fffff
    bits = b.add(o.to_bits(x), o.ci(one_hi - sqrt_half_hi))
    k = b.sub(b.lshr(bits, o.ci(o.mant_bits)), o.ci(o.bias))
    k = b.sub(k, b.select(subnormal, o.ci(boost), o.ci(0)))
    m = o.from_bits(b.add(b.and_(bits, o.ci(mant_mask)), o.ci(sqrt_half_hi)))
    return k, m


def _log_positive(o, x):
    """log(x) for finite x > 0 (musl/fdlibm): log(1+f) = f - hfsq + s*(hfsq + R(s^2))."""
    consts = _LOG64 if o.is64 else _LOG32
    k, m = _log_reduce(o, x)
    f = o.sub(m, 1.0)
    hfsq = o.mul(o.mul(0.5, f), f)
    s = o.div(f, o.add(2.0, f))
    z = o.mul(s, s)
    w = o.mul(z, z)
    lg = consts["lg"]
    t1 = o.mul(w, o.poly(w, lg[1::2]))
    t2 = o.mul(z, o.poly(w, lg[0::2]))
    big_r = o.add(t2, t1)
    dk = o.b.sitofp(k, o.ty)
    acc = o.add(o.mul(s, o.add(hfsq, big_r)), o.mul(dk, consts["ln2_lo"]))
    return o.add(o.add(o.sub(acc, hfsq), f), o.mul(dk, consts["ln2_hi"]))


def _log_specials(o, x, result):
    """log's answers at 0 (-inf), negative or nan (nan) and +inf (inf)."""
    inf = float("inf")
    result = o.sel(o.cmp("==", x, 0.0), -inf, result)
    result = o.sel(o.ucmp("ult", x, 0.0), float("nan"), result)
    return o.sel(o.cmp("==", x, inf), inf, result)


def _finite_positive(o, x):
    """x where 0 < x < inf, else 1 (a harmless stand-in for bit tricks)."""
    ok = o.b.and_(o.cmp(">", x, 0.0), o.cmp("<", x, float("inf")))
    return o.sel(ok, x, 1.0)


def log(builder, x):
    o = _ops(builder, x)
    return _log_specials(o, x, _log_positive(o, _finite_positive(o, x)))


def log1p(builder, x):
    """log(u) + (x - (u - 1)) / u with u = 1 + x: the quotient restores what rounding 1 + x
    lost (exactly x when u == 1)."""
    o = _ops(builder, x)
    u = o.add(1.0, x)
    log_u = _log_specials(o, u, _log_positive(o, _finite_positive(o, u)))
    finite_u = o.b.and_(o.cmp(">", u, 0.0), o.cmp("<", u, float("inf")))
    correction = o.sel(finite_u, o.div(o.sub(x, o.sub(u, 1.0)), u), 0.0)
    return o.sel(o.cmp("==", x, 0.0), x, o.add(log_u, correction))  # keeps the sign of -0


# ------------------------------------------------------------- tanh, sigmoid, softplus
def tanh(builder, x):
    """sign(x) * -e / (e + 2) with e = expm1(-2|x|) in (-1, 0]: no cancellation, saturates."""
    o = _ops(builder, x)
    if not o.is64:
        return _tanh32(o, x)
    e = expm1(builder, o.mul(-2.0, o.fabs(x)))
    return o.copysign(o.div(o.neg(e), o.add(e, 2.0)), x)


def sigmoid(builder, x):
    """e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) below (as the reference)."""
    o = _ops(builder, x)
    e = exp_nonpositive(builder, o.neg(o.fabs(x)))
    denom = o.add(1.0, e)
    return o.sel(o.cmp(">=", x, 0.0), o.div(1.0, denom), o.div(e, denom))


def softplus(builder, x):
    """log(1 + e^x) = max(x, 0) + log1p(exp(-|x|)) (numpy's logaddexp(0, x))."""
    o = _ops(builder, x)
    positive_part = o.sel(o.cmp(">", x, 0.0), x, 0.0)
    return o.add(positive_part, log1p(builder, exp_nonpositive(builder, o.neg(o.fabs(x)))))


# ------------------------------------------------------------------------- sin, cos
# pi/2 in 33-bit pieces (fdlibm): n * piece is exact for |n| < 2^20
_PIO2 = [1.57079632673412561417e+00, 6.07710050630396597660e-11,
         2.02226624871116645580e-21, 8.47842766036889956997e-32]
_SIN = [-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
        2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10]
_COS = [4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
        -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11]


def _sincos_reduce(o, x):
    """(q, r): x = (4k + q) * pi/2 + r, |r| <= pi/4, q in {0,1,2,3} as a double."""
    xs = o.sel(o.cmp("<", o.fabs(x), float("inf")), x, 0.0)
    n = o.rint(o.mul(xs, 2.0 / math.pi))
    r = xs
    for piece in _PIO2:
        r = o.sub(r, o.mul(n, piece))
    q = o.sub(n, o.mul(4.0, o.floor(o.mul(n, 0.25))))
    return q, r


def _kernel_sin(o, r):
    z = o.mul(r, r)
    tail = o.poly(z, _SIN[1:])
    return o.add(r, o.mul(o.mul(z, r), o.muladd(z, tail, _SIN[0])))


def _kernel_cos(o, r):
    z = o.mul(r, r)
    poly = o.mul(z, o.poly(z, _COS))
    hz = o.mul(0.5, z)
    w = o.sub(1.0, hz)
    # w + (((1 - w) - hz) + z*poly): recovers the bits 1 - hz rounded away
    return o.add(w, o.add(o.sub(o.sub(1.0, w), hz), o.mul(z, poly)))


def _sincos64(builder, x, cosine):
    o = FloatOps(builder, F64)
    q, r = _sincos_reduce(o, x)
    if cosine:
        q = o.add(q, 1.0)  # cos(x) = sin(x + pi/2): one quadrant on
        q = o.sel(o.cmp(">=", q, 4.0), o.sub(q, 4.0), q)
    odd = o.b.or_(o.cmp("==", q, 1.0), o.cmp("==", q, 3.0))
    value = o.sel(odd, _kernel_cos(o, r), _kernel_sin(o, r))
    value = o.sel(o.cmp(">=", q, 2.0), o.neg(value), value)
    if not cosine:
        value = o.sel(o.cmp("==", x, 0.0), x, value)  # sin(-0) = -0
    finite = o.cmp("<", o.fabs(x), float("inf"))
    return o.sel(finite, value, float("nan"))


def sin(builder, x):
    if _is_f32(x):
        return _via_double(builder, sin, x)
    return _sincos64(builder, x, cosine=False)


def cos(builder, x):
    if _is_f32(x):
        return _via_double(builder, cos, x)
    return _sincos64(builder, x, cosine=True)


# ------------------------------------------------------------------------------- erf
_ERX = 8.45062911510467529297e-01
_PP = [1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05]
_QQ = [1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06]
_PA = [-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03]
_QA = [1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02]
_RA = [-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00]
_SA = [1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02]
_RB = [-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02]
_SB = [1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01]


def _erfc_tail(builder, o, ax, limit):
    """fdlibm's erfc(|x|) for 1.25 <= |x| < limit: exp(-x^2 - 0.5625 + R/S) / |x|, with x^2
    split so the exp argument is exact (z has the low 32 bits of |x| cleared). |x| is
    clamped to limit so that lanes outside the interval stay finite."""
    axc = o.sel(o.cmp("<", ax, limit), ax, limit)
    t = o.div(1.0, o.mul(axc, axc))
    near = o.cmp("<", axc, 1.0 / 0.35)
    rs = o.sel(near, o.div(o.poly(t, _RA), o.poly(t, _SA)), o.div(o.poly(t, _RB), o.poly(t, _SB)))
    zc = o.from_bits(builder.and_(o.to_bits(axc), o.ci(0xffffffff00000000)))
    e1 = exp(builder, o.sub(o.mul(o.neg(zc), zc), 0.5625))
    e2 = exp(builder, o.add(o.mul(o.sub(zc, axc), o.add(zc, axc)), rs))
    return o.div(o.mul(e1, e2), axc)


def _erf64(builder, x):
    """fdlibm's erf, every interval computed and the right one selected (no branches)."""
    o = FloatOps(builder, F64)
    ax = o.fabs(x)
    # |x| < 0.84375: x + x * P(x^2)/Q(x^2)
    z = o.mul(x, x)
    small = o.add(x, o.mul(x, o.div(o.poly(z, _PP), o.poly(z, _QQ))))
    # 0.84375 <= |x| < 1.25: erx + P(|x|-1)/Q(|x|-1)
    s = o.sub(ax, 1.0)
    middle = o.add(_ERX, o.div(o.poly(s, _PA), o.poly(s, _QA)))
    large = o.sub(1.0, _erfc_tail(builder, o, ax, 6.0))
    magnitude = o.sel(o.cmp("<", ax, 1.25), middle, o.sel(o.cmp("<", ax, 6.0), large, 1.0))
    signed = o.copysign(magnitude, x)
    result = o.sel(o.cmp("<", ax, 0.84375), small, signed)
    return o.sel(o.isnan(x), x, result)


def erf(builder, x):
    if _is_f32(x):
        return _via_double(builder, _erf64, x)
    return _erf64(builder, x)


def _erfc64(builder, x):
    """fdlibm's erfc, every interval computed and the right one selected. 1 - erf(x) would
    lose all relative accuracy for large x (and gelu's negative tail with it)."""
    o = FloatOps(builder, F64)
    ax = o.fabs(x)
    negative = o.cmp("<", x, 0.0)
    # |x| < 0.84375: 1 - (x + x*y), rearranged above 1/4 so the subtraction is exact
    z = o.mul(x, x)
    y = o.div(o.poly(z, _PP), o.poly(z, _QQ))
    below_quarter = o.sub(1.0, o.add(x, o.mul(x, y)))
    above_quarter = o.sub(0.5, o.add(o.mul(x, y), o.sub(x, 0.5)))
    small = o.sel(o.cmp("<", x, 0.25), below_quarter, above_quarter)
    # 0.84375 <= |x| < 1.25: 1 -+ (erx + P(|x|-1)/Q(|x|-1))
    s = o.sub(ax, 1.0)
    pq = o.div(o.poly(s, _PA), o.poly(s, _QA))
    middle = o.sel(negative, o.add(1.0, o.add(_ERX, pq)), o.sub(1.0 - _ERX, pq))
    # 1.25 <= |x| < 28: the tail, or 2 - tail for x < 0 (beyond 28 the tail underflows to 0)
    tail = _erfc_tail(builder, o, ax, 28.0)
    tail = o.sel(o.cmp("<", ax, 28.0), tail, 0.0)
    large = o.sel(negative, o.sub(2.0, tail), tail)
    result = o.sel(o.cmp("<", ax, 0.84375), small, o.sel(o.cmp("<", ax, 1.25), middle, large))
    return o.sel(o.isnan(x), x, result)


def erfc(builder, x):
    if _is_f32(x):
        return _via_double(builder, _erfc64, x)
    return _erfc64(builder, x)


# ------------------------------------------------------------------ double-double pow
_SPLIT = 134217729.0  # 2^27 + 1 (Dekker)
_LN2_DD = (0.6931471805599453, 2.3190468138462996e-17)
_TWO_THIRDS_DD = (2.0 / 3.0, 3.700743415417188e-17)
# 2/(2k+1) for k = 2..14: the atanh series of log beyond its s and s^3 terms
_ATANH_TAIL = [2.0 / (2 * k + 1) for k in range(2, 15)]


def _split(o, a):
    c = o.mul(_SPLIT, a)
    hi = o.sub(c, o.sub(c, a))
    return hi, o.sub(a, hi)


def _two_prod(o, a, b):
    """(p, e) with p + e == a*b exactly (Dekker; |a|, |b| < 2^996)."""
    p = o.mul(a, b)
    ah, al = _split(o, a)
    bh, bl = _split(o, b)
    err = o.add(o.add(o.add(o.sub(o.mul(ah, bh), p), o.mul(ah, bl)), o.mul(al, bh)),
                o.mul(al, bl))
    return p, err


def _two_sum(o, a, b):
    s = o.add(a, b)
    bb = o.sub(s, a)
    return s, o.add(o.sub(a, o.sub(s, bb)), o.sub(b, bb))


def _fast_two_sum(o, a, b):
    s = o.add(a, b)
    return s, o.sub(b, o.sub(s, a))


def _dd_add(o, x, y):
    s, e = _two_sum(o, x[0], y[0])
    return _fast_two_sum(o, s, o.add(e, o.add(x[1], y[1])))


def _log_dd(o, x):
    """log(x) as a double-double (~2^-100 relative) for finite x > 0:
    log(2^k m) = k ln2 + 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172."""
    k, m = _log_reduce(o, x)
    num = o.sub(m, 1.0)  # exact
    dh, dl = _two_sum(o, m, 1.0)
    sh = o.div(num, dh)
    p, pe = _two_prod(o, sh, dh)
    sl = o.div(o.sub(o.sub(o.sub(num, p), pe), o.mul(sh, dl)), dh)
    # s^2, s^3 and (2/3) s^3 in double-double; the rest of the series in double
    a, ae = _two_prod(o, sh, sh)
    ae = o.add(ae, o.mul(o.mul(2.0, sh), sl))
    c3, c3e = _two_prod(o, a, sh)
    c3e = o.add(c3e, o.add(o.mul(a, sl), o.mul(ae, sh)))
    t3, t3e = _two_prod(o, _TWO_THIRDS_DD[0], c3)
    t3e = o.add(t3e, o.add(o.mul(_TWO_THIRDS_DD[0], c3e), o.mul(_TWO_THIRDS_DD[1], c3)))
    tail = o.mul(o.mul(c3, a), o.poly(a, _ATANH_TAIL))
    dk = o.b.sitofp(k, o.ty)
    kh, ke = _two_prod(o, dk, _LN2_DD[0])
    ke = o.add(ke, o.mul(dk, _LN2_DD[1]))
    total = _dd_add(o, (kh, ke), (o.mul(2.0, sh), o.mul(2.0, sl)))
    total = _dd_add(o, total, (t3, t3e))
    return _fast_two_sum(o, total[0], o.add(total[1], tail))


def _exp_dd(o, th, tl):
    """exp(th + tl) for |th| <= 746 (clamped by the caller): Cody-Waite with the product
    n*ln2_lo kept exact, exp(r_hi + r_lo) = (1 + p(r_hi)) (1 + r_lo)."""
    log2e, ln2_hi, ln2_lo, degree, _, _ = _EXP[True]
    nf = o.rint(o.mul(th, log2e))
    a = o.sub(th, o.mul(nf, ln2_hi))  # exact
    bh, bl = _two_prod(o, nf, ln2_lo)
    rh, re = _two_sum(o, a, o.neg(bh))
    rh, rl = _fast_two_sum(o, rh, o.add(o.sub(re, bl), tl))
    # 1 + rh exactly as a double-double, then the small rest of the series: the only
    # rounding that matters is the last addition (results within ~0.5 ulp)
    higher = o.mul(o.mul(rh, rh), o.poly(rh, _INV_FACT[:degree - 1]))
    one_hi, one_lo = _fast_two_sum(o, 1.0, rh)
    p = o.add(rh, higher)
    value = o.add(one_hi, o.add(one_lo, o.add(higher, o.mul(rl, o.add(1.0, p)))))
    return o.ldexp(value, o.to_int(nf))


def _is_integer(o, y):
    return o.cmp("==", o.floor(y), y)


def _is_odd_integer(o, y):
    half = o.mul(y, 0.5)
    return o.b.and_(_is_integer(o, y), o.cmp("!=", o.floor(half), half))


def _pow64(builder, x, y):
    o = FloatOps(builder, F64)
    b = builder
    inf, nan = float("inf"), float("nan")
    ax = o.fabs(x)
    ay = o.fabs(y)
    log_hi, log_lo = _log_dd(o, _finite_positive(o, ax))
    t_raw = o.mul(y, log_hi)  # decides overflow / underflow
    ys = o.sel(o.cmp("<", ay, 2.0 ** 900), y, 0.0)
    th, te = _two_prod(o, ys, log_hi)
    th, tl = _fast_two_sum(o, th, o.add(te, o.mul(ys, log_lo)))
    in_range = b.and_(o.cmp("<", t_raw, 709.8), o.cmp(">", t_raw, -745.2))
    th = o.sel(in_range, th, 0.0)
    tl = o.sel(in_range, tl, 0.0)
    result = _exp_dd(o, th, tl)
    result = o.sel(o.cmp(">=", t_raw, 709.8), inf, result)
    result = o.sel(o.cmp("<=", t_raw, -745.2), 0.0, result)
    # |x| is 0 or inf: log|x| = -inf or inf, y's sign decides
    result = o.sel(o.cmp("==", ax, 0.0), o.sel(o.cmp("<", y, 0.0), inf, 0.0), result)
    result = o.sel(o.cmp("==", ax, inf), o.sel(o.cmp("<", y, 0.0), 0.0, inf), result)
    # y = +-inf: 1 when |x| == 1, else 0 or inf
    grows = b.icmp_unsigned("==", o.cmp(">", ax, 1.0), o.cmp(">", y, 0.0))
    at_inf = o.sel(o.cmp("==", ax, 1.0), 1.0, o.sel(grows, inf, 0.0))
    result = o.sel(o.cmp("==", ay, inf), at_inf, result)
    # negative x: odd integer y flips the sign, non-integer y has no real answer
    negative = o.cmp("<", x, 0.0)
    result = o.sel(b.and_(negative, _is_odd_integer(o, y)), o.neg(result), result)
    finite_negative = b.and_(negative, o.cmp("!=", ax, inf))
    result = o.sel(b.and_(finite_negative, b.not_(_is_integer(o, y))), nan, result)
    # 0 * log(0) style cases: the sign of a zero x with an odd y
    zero_odd = b.and_(o.cmp("==", x, 0.0), _is_odd_integer(o, y))
    result = o.sel(zero_odd, o.copysign(result, x), result)
    result = o.sel(b.or_(o.isnan(x), o.isnan(y)), nan, result)
    return o.sel(b.or_(o.cmp("==", y, 0.0), o.cmp("==", x, 1.0)), 1.0, result)


def pow(builder, x, y):  # noqa: A001 - the function's name
    if _is_f32(x):
        return _via_double(builder, _pow64, x, y)
    return _pow64(builder, x, y)


# ------------------------------------------------------------------------------- fmod
def _fmod_function(module, ty):
    """An internal function computing C's fmod exactly (musl's bitwise long division)."""
    name = f"graphc.fmod.{_suffix(ty)}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
    fn.linkage = "internal"
    x, y = fn.args
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    o = FloatOps(b, ty)
    width = o.ity.width
    mant, emax = o.mant_bits, 2 * o.bias + 1
    implicit = 1 << mant
    ci = o.ci

    ux, uy = o.to_bits(x), o.to_bits(y)
    ex = b.and_(b.lshr(ux, ci(mant)), ci(emax))
    ey = b.and_(b.lshr(uy, ci(mant)), ci(emax))
    sign = b.and_(ux, ci(1 << (width - 1)))
    ax2, ay2 = b.shl(ux, ci(1)), b.shl(uy, ci(1))
    bad = b.or_(b.or_(b.icmp_unsigned("==", ay2, ci(0)), o.isnan(y)),
                b.icmp_unsigned("==", ex, ci(emax)))
    nan_block, check_block = fn.append_basic_block("nan"), fn.append_basic_block("check")
    b.cbranch(bad, nan_block, check_block)
    b.position_at_end(nan_block)
    b.ret(o.c(float("nan")))

    zero_block = fn.append_basic_block("zero")
    b.position_at_end(zero_block)
    b.ret(o.mul(0.0, x))

    b.position_at_end(check_block)
    small_block, main_block = fn.append_basic_block("small"), fn.append_basic_block("main")
    b.cbranch(b.icmp_unsigned("<=", ax2, ay2), small_block, main_block)
    b.position_at_end(small_block)
    b.ret(b.select(b.icmp_unsigned("==", ax2, ay2), o.mul(0.0, x), x))

    b.position_at_end(main_block)

    def normalize(u, e):
        """(mantissa with the implicit bit at position `mant`, exponent), subnormals too."""
        lz = intrinsic(b, "ctlz", [b.shl(u, ci(width - mant)), ir.Constant(I1, 0)])
        sub = b.icmp_unsigned("==", e, ci(0))
        m = b.select(sub, b.shl(u, b.add(lz, ci(1))),
                     b.or_(b.and_(u, ci(implicit - 1)), ci(implicit)))
        return m, b.select(sub, b.sub(ci(0), lz), e)

    mx0, ex0 = normalize(ux, ex)
    my, ey = normalize(uy, ey)
    loop, body, done = (fn.append_basic_block(n) for n in ("loop", "body", "done"))
    b.branch(loop)
    b.position_at_end(loop)
    mx = b.phi(o.ity)
    exv = b.phi(o.ity)
    mx.add_incoming(mx0, main_block)
    exv.add_incoming(ex0, main_block)
    b.cbranch(b.icmp_signed(">", exv, ey), body, done)

    b.position_at_end(body)
    diff = b.sub(mx, my)
    keep = b.icmp_signed(">=", diff, ci(0))
    cont = fn.append_basic_block("cont")
    b.cbranch(b.and_(keep, b.icmp_unsigned("==", diff, ci(0))), zero_block, cont)
    b.position_at_end(cont)
    next_mx = b.shl(b.select(keep, diff, mx), ci(1))
    mx.add_incoming(next_mx, cont)
    exv.add_incoming(b.sub(exv, ci(1)), cont)
    b.branch(loop)

    b.position_at_end(done)
    diff = b.sub(mx, my)
    keep = b.icmp_signed(">=", diff, ci(0))
    finish = fn.append_basic_block("finish")
    b.cbranch(b.and_(keep, b.icmp_unsigned("==", diff, ci(0))), zero_block, finish)
    b.position_at_end(finish)
    m = b.select(keep, diff, mx)
    shift = b.sub(intrinsic(b, "ctlz", [m, ir.Constant(I1, 1)]), ci(width - 1 - mant))
    m = b.shl(m, shift)
    e = b.sub(exv, shift)
    normal = b.or_(b.sub(m, ci(implicit)), b.shl(e, ci(mant)))
    subnormal = b.lshr(m, b.sub(ci(1), e))
    m = b.select(b.icmp_signed(">", e, ci(0)), normal, subnormal)
    b.ret(o.from_bits(b.or_(m, sign)))
    return fn


def fmod(builder, x, y):
    """C's fmod(x, y) (sign of x, exact), by a call to an internal looping function."""
    return builder.call(_fmod_function(builder.module, x.type), [x, y])
