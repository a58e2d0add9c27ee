"""Random ops with TF1's seed rules: the same graph and op seeds give the same numbers.

The numbers are counter-based (Philox4x32-10, below): element i of an op's output in its
r-th run of a Session is a function of (key, r, i), the key coming from (seed, seed2) or,
for an unseeded op, from OS entropy once per Session. The key and r live in the Session
state (graphc/framework/random_state.py), which the compiled backend reads and advances too, computing the
same function (kernels/philox.py), so both backends draw the same numbers.
"""
import numpy as np

from graphc import dtypes, errors
from graphc.framework.graph import get_default_graph, name_scope
from graphc.framework.op_def import register_op
from graphc.framework.random_state import random_state
from graphc.framework.static_value import shape_from_tensor
from graphc.ops.constant_ops import convert_to_tensor

DEFAULT_GRAPH_SEED = 87654321


def set_random_seed(seed):
    get_default_graph().seed = seed


def get_seed(op_seed):
    """(seed, seed2) for a new random op, as TF1's random_seed.get_seed."""
    g = get_default_graph()
    if g.seed is not None:
        return g.seed, (g._last_id if op_seed is None else op_seed)
    if op_seed is not None:
        return DEFAULT_GRAPH_SEED, op_seed
    return None, None


def _shape_infer(inputs, a):
    if not inputs[0].dtype.is_integer:
        raise TypeError(f"shape must be an integer tensor, got {inputs[0].dtype.name}")
    return shape_from_tensor(inputs[0]), a["dtype"]


def _shape_of(shape):
    shape = tuple(int(d) for d in np.reshape(shape, [-1]))
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    return shape


# ------------------------------------------------------------------ Philox4x32-10
# Counter-based generation (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"):
# element i of a random op's output in its r-th run is a pure function of
#   key = (k0, k1) from the op's (seed, seed2), or from OS entropy once per session op,
#   counter = (lo32(i), hi32(i), lo32(r), hi32(r) << 4 | draw).
# The compiled code (kernels/philox.py) computes the same function, operation by
# operation, so both backends draw the same numbers for the same seeds.
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
TRUNCATED_DRAWS = 4   # Box-Muller draws (2 candidates each) before the fallback
_M32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter, key):
    """Philox4x32-10 of counter words (4 uint32 arrays) and key (2 uint32 scalars)."""
    c = [np.asarray(w, np.uint64) for w in counter]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(PHILOX_W[0])) & _M32
            k1 = (k1 + np.uint64(PHILOX_W[1])) & _M32
        p0 = c[0] * np.uint64(PHILOX_M[0])
        p1 = c[2] * np.uint64(PHILOX_M[1])
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _M32,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _M32]
    return [w.astype(np.uint32) for w in c]


def _philox_words(state, op, shape, draws=1):
    """[draw][word] uint32 arrays of the op's elements for this run; counts the run."""
    arr = random_state(state, op.name, op.attrs.get("seed"), op.attrs.get("seed2"))
    key, run = (int(arr[0]), int(arr[1])), int(arr[2])
    arr[2] += 1
    index = np.arange(int(np.prod(shape)), dtype=np.uint64)
    lo, hi = index & _M32, index >> np.uint64(32)
    return [philox4x32([lo, hi, np.uint64(run & 0xFFFFFFFF),
                        np.uint64((((run >> 32) << 4) | d) & 0xFFFFFFFF)], key)
            for d in range(draws)]


def _u64(hi, lo):
    return (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)


def _unit53(hi, lo, open_at_zero=False):
    m = _u64(hi, lo) >> np.uint64(11)
    if open_at_zero:
        m = m + np.uint64(1)
    return m.astype(np.float64) * 2.0 ** -53


def _box_muller(w):
    r = np.sqrt(np.log(_unit53(w[0], w[1], open_at_zero=True)) * -2.0)
    theta = _unit53(w[2], w[3]) * (2.0 * np.pi)
    return r * np.cos(theta), r * np.sin(theta)


def _uniform_of(w, dtype):
    if dtype == np.float64:
        return _unit53(w[0], w[1])
    bits, scale = (21, 2.0 ** -11) if dtype == np.float16 else (8, 2.0 ** -24)
    return ((w[0] >> np.uint32(bits)).astype(np.float32) * np.float32(scale)).astype(dtype)


def _normal(state, op, shape):
    shape = _shape_of(shape)
    z, _ = _box_muller(_philox_words(state, op, shape)[0])
    return z.astype(op.attrs["dtype"].np).reshape(shape)


def _uniform(state, op, shape):
    shape = _shape_of(shape)
    w = _philox_words(state, op, shape)[0]
    return _uniform_of(w, op.attrs["dtype"].np).reshape(shape)


def _truncated(state, op, shape):
    """The first of 2 * TRUNCATED_DRAWS Box-Muller candidates within 2 standard deviations
    (TF redraws until one is); if none, 4 u - 2 (u of the last draw: deterministic)."""
    shape = _shape_of(shape)
    draws = _philox_words(state, op, shape, TRUNCATED_DRAWS)
    candidates = [z for w in draws for z in _box_muller(w)]
    out = _unit53(draws[-1][2], draws[-1][3]) * 4.0 - 2.0
    for z in reversed(candidates):
        out = np.where(np.abs(z) <= 2.0, z, out)
    return out.astype(op.attrs["dtype"].np).reshape(shape)


def _uniform_int(state, op, shape, minval, maxval):
    if not minval < maxval:
        raise errors.KernelError(f"Need minval < maxval, got {minval} >= {maxval}")
    shape = _shape_of(shape)
    w = _philox_words(state, op, shape)[0]
    span = np.uint64((int(maxval) - int(minval)) % 2 ** 64)
    value = (np.uint64(int(minval) % 2 ** 64) + _u64(w[0], w[1]) % span)
    return value.astype(minval.dtype).reshape(shape)


for _type, _kernel in [("RandomStandardNormal", _normal), ("RandomUniform", _uniform),
                       ("TruncatedNormal", _truncated)]:
    register_op(_type, infer=_shape_infer, kernel=_kernel, stateful=True, uses_context=True,
                kind="random", shape_inputs=(0,))
register_op("RandomUniformInt", infer=lambda inputs, a: (shape_from_tensor(inputs[0]),
                                                          inputs[1].dtype),
            kernel=_uniform_int, stateful=True, uses_context=True, kind="random",
            shape_inputs=(0,))


def _random(op_type, shape, dtype, seed, name):
    dtype = dtypes.as_dtype(dtype)
    shape_t = convert_to_tensor(shape, dtype_hint=dtypes.int32)
    seed1, seed2 = get_seed(seed)
    return shape_t.graph.create_op(op_type, [shape_t], {"dtype": dtype, "seed": seed1,
                                                        "seed2": seed2}, name).outputs[0]


def _scale_shift(x, scale, shift, name):
    """x * scale + shift; the add carries the function's name (TF's `math_ops.add(mul,
    mean_tensor, name=name)`), so `random_normal:0` is the result."""
    from graphc.ops import math_ops
    scale = convert_to_tensor(scale, dtype=x.dtype)
    shift = convert_to_tensor(shift, dtype=x.dtype)
    return math_ops.add(math_ops.multiply(x, scale), shift, name=name)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    with name_scope(name, "random_normal") as scope:
        x = _random("RandomStandardNormal", shape, dtype, seed, "RandomStandardNormal")
        return _scale_shift(x, stddev, mean, scope)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    with name_scope(name, "truncated_normal") as scope:
        x = _random("TruncatedNormal", shape, dtype, seed, "TruncatedNormal")
        return _scale_shift(x, stddev, mean, scope)


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    dtype = dtypes.as_dtype(dtype)
    with name_scope(name, "random_uniform") as scope:
        if dtype.is_integer:
            if maxval is None:
                raise ValueError("Must specify maxval for integer dtype %r" % dtype)
            lo = convert_to_tensor(minval, dtype=dtype)
            hi = convert_to_tensor(maxval, dtype=dtype)
            shape_t = convert_to_tensor(shape, dtype_hint=dtypes.int32)
            s1, s2 = get_seed(seed)
            return shape_t.graph.create_op("RandomUniformInt", [shape_t, lo, hi],
                                           {"seed": s1, "seed2": s2}, scope).outputs[0]
        maxval = 1.0 if maxval is None else maxval
        x = _random("RandomUniform", shape, dtype, seed, "RandomUniform")
        from graphc.ops import math_ops
        lo = convert_to_tensor(minval, dtype=dtype)
        hi = convert_to_tensor(maxval, dtype=dtype)
        return _scale_shift(x, math_ops.subtract(hi, lo), lo, scope)


def random_crop(value, size, seed=None, name=None):
    """A slice of `size` of `value` at a uniformly drawn offset (TF1's random_crop: an
    int32 draw in [0, 2**31 - 1) taken modulo shape - size + 1 on each axis)."""
    from graphc.ops import array_ops, math_ops, reduction_ops
    from graphc.ops.control_flow_ops import Assert
    from graphc.framework.graph import control_dependencies
    with name_scope(name, "random_crop", [value, size]) as scope:
        value = convert_to_tensor(value, name="value")
        size = convert_to_tensor(size, dtype=dtypes.int32, name="size")
        if value.shape.ndims is not None and size.shape.ndims == 1 \
                and size.shape[0].value not in (None, value.shape.ndims):
            raise ValueError(f"random_crop: size has {size.shape[0].value} elements but "
                             f"value has rank {value.shape.ndims}")
        _check_crop_fits(value, size)
        shape = array_ops.shape(value)
        fits = math_ops.greater_equal(shape, size)
        check = Assert(reduction_ops.reduce_all(fits),
                       ["Need value.shape >= size, got ", shape, size], summarize=1000)
        with control_dependencies([check]):
            limit = shape - size + 1
        offset = random_uniform(array_ops.shape(shape), dtype=size.dtype,
                                maxval=size.dtype.max, seed=seed) % limit
        return array_ops.slice(value, offset, size, name=scope)


def _check_crop_fits(value, size):
    """random_crop's size against the static dims of value, before anything runs."""
    from graphc.framework.static_value import constant_value
    wanted = constant_value(size)
    if wanted is None or value.shape.ndims is None:
        return
    wanted = [int(w) for w in np.reshape(wanted, [-1])]
    for axis, (have, want) in enumerate(zip(value.shape.as_list(), wanted)):
        if have is not None and have < want:
            raise ValueError(f"random_crop: Need value.shape >= size, got shape "
                             f"{value.shape} and size {wanted} "
                             f"(axis {axis})")


# tf.random.categorical / multinomial (defined over the ops above)
from graphc.ops.multinomial_ops import categorical, multinomial  # noqa: F401,E402
