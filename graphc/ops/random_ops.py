"""Random ops with TF1's seed rules: the same graph and op seeds give the same numbers."""
import numpy as np

from graphc import dtypes
from graphc.framework.graph import get_default_graph, name_scope
from graphc.framework.op_def import register_op
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


def _normal(state, op, shape):
    return state.rng_for(op).standard_normal(_shape_of(shape))


def _uniform(state, op, shape):
    return state.rng_for(op).random(_shape_of(shape))


def _truncated(state, op, shape):
    rng = state.rng_for(op)
    out = rng.standard_normal(_shape_of(shape))
    bad = np.abs(out) > 2.0
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2.0
    return out


def _uniform_int(state, op, shape, minval, maxval):
    if not minval < maxval:
        raise ValueError(f"Need minval < maxval, got {minval} >= {maxval}")
    return state.rng_for(op).integers(minval, maxval, _shape_of(shape))


for _type, _kernel in [("RandomStandardNormal", _normal), ("RandomUniform", _uniform),
                       ("TruncatedNormal", _truncated)]:
    register_op(_type, infer=_shape_infer, kernel=_kernel, stateful=True, uses_context=True)
register_op("RandomUniformInt", infer=lambda inputs, a: (shape_from_tensor(inputs[0]),
                                                          inputs[1].dtype),
            kernel=_uniform_int, stateful=True, uses_context=True)


def _random(op_type, shape, dtype, seed, name):
    dtype = dtypes.as_dtype(dtype)
    shape_t = convert_to_tensor(shape, dtype_hint=dtypes.int32)
    seed1, seed2 = get_seed(seed)
    return shape_t.graph.create_op(op_type, [shape_t], {"dtype": dtype, "seed": seed1,
                                                        "seed2": seed2}, name).outputs[0]


def _scale_shift(x, scale, shift):
    from graphc.ops import math_ops
    scale = convert_to_tensor(scale, dtype=x.dtype)
    shift = convert_to_tensor(shift, dtype=x.dtype)
    return math_ops.add(math_ops.multiply(x, scale), shift)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    with name_scope(name, "random_normal"):
        x = _random("RandomStandardNormal", shape, dtype, seed, "RandomStandardNormal")
        return _scale_shift(x, stddev, mean)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None):
    with name_scope(name, "truncated_normal"):
        x = _random("TruncatedNormal", shape, dtype, seed, "TruncatedNormal")
        return _scale_shift(x, stddev, mean)


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None):
    dtype = dtypes.as_dtype(dtype)
    with name_scope(name, "random_uniform"):
        if dtype.is_integer:
            if maxval is None:
                raise ValueError("Must specify maxval for integer dtype %r" % dtype)
            lo = convert_to_tensor(minval, dtype=dtype)
            hi = convert_to_tensor(maxval, dtype=dtype)
            shape_t = convert_to_tensor(shape, dtype_hint=dtypes.int32)
            s1, s2 = get_seed(seed)
            return shape_t.graph.create_op("RandomUniformInt", [shape_t, lo, hi],
                                           {"seed": s1, "seed2": s2}, "RandomUniformInt").outputs[0]
        maxval = 1.0 if maxval is None else maxval
        x = _random("RandomUniform", shape, dtype, seed, "RandomUniform")
        from graphc.ops import math_ops
        lo = convert_to_tensor(minval, dtype=dtype)
        hi = convert_to_tensor(maxval, dtype=dtype)
        return _scale_shift(x, math_ops.subtract(hi, lo), lo)
