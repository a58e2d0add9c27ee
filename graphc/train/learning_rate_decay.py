"""Learning-rate schedules: tensors computed from the global step at each run."""
import math

from graphc.framework.graph import name_scope
from graphc.ops import math_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import identity

__all__ = ["exponential_decay", "inverse_time_decay", "natural_exp_decay", "polynomial_decay",
           "piecewise_constant", "cosine_decay"]


def _decay_progress(learning_rate, global_step, decay_steps, staircase):
    """(learning_rate tensor, global_step / decay_steps in its dtype, floored if staircase)."""
    if global_step is None:
        raise ValueError("global_step is required for learning rate decay.")
    learning_rate = convert_to_tensor(learning_rate, name="learning_rate")
    dtype = learning_rate.dtype
    p = _in_dtype(global_step, dtype) / _in_dtype(decay_steps, dtype)
    return learning_rate, (math_ops.floor(p) if staircase else p)


def _in_dtype(value, dtype):
    """A number or tensor as a tensor of `dtype` (Python numbers converted directly, so a
    float64 schedule keeps its decay rate exact)."""
    return math_ops.cast(convert_to_tensor(value, dtype_hint=dtype), dtype)


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """learning_rate * decay_rate ^ (global_step / decay_steps)."""
    with name_scope(name, "ExponentialDecay") as scope:
        lr, p = _decay_progress(learning_rate, global_step, decay_steps, staircase)
        return math_ops.multiply(lr, math_ops.pow(_in_dtype(decay_rate, lr.dtype), p),
                                 name=scope)


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                       name=None):
    """learning_rate / (1 + decay_rate * global_step / decay_steps)."""
    with name_scope(name, "InverseTimeDecay") as scope:
        lr, p = _decay_progress(learning_rate, global_step, decay_steps, staircase)
        denom = 1 + _in_dtype(decay_rate, lr.dtype) * p
        return math_ops.divide(lr, denom, name=scope)


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None):
    """learning_rate * exp(-decay_rate * global_step / decay_steps)."""
    with name_scope(name, "NaturalExpDecay") as scope:
        lr, p = _decay_progress(learning_rate, global_step, decay_steps, staircase)
        return math_ops.multiply(lr, math_ops.exp(-_in_dtype(decay_rate, lr.dtype) * p),
                                 name=scope)


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001,
                     power=1.0, cycle=False, name=None):
    """(lr - end) * (1 - step / decay_steps) ^ power + end, with step clipped to
    decay_steps, or (cycle) decay_steps stretched to the next multiple past the step."""
    if global_step is None:
        raise ValueError("global_step is required for polynomial_decay.")
    with name_scope(name, "PolynomialDecay") as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        step = _in_dtype(global_step, dtype)
        steps = _in_dtype(decay_steps, dtype)
        if cycle:
            # at step 0 the multiplier is 1, not 0
            multiplier = math_ops.where(math_ops.equal(step, 0), _in_dtype(1, dtype),
                                        math_ops.ceil(step / steps))
            steps = steps * multiplier
        else:
            step = math_ops.minimum(step, steps)
        end = _in_dtype(end_learning_rate, dtype)
        fraction = math_ops.pow(1 - step / steps, _in_dtype(power, dtype))
        return math_ops.add((lr - end) * fraction, end, name=scope)


def piecewise_constant(x, boundaries, values, name=None):
    """values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <=
    boundaries[i], values[-1] after the last boundary."""
    if len(values) != len(boundaries) + 1:
        raise ValueError("The length of boundaries should be 1 less than the length of values")
    with name_scope(name, "PiecewiseConstant") as scope:
        x = convert_to_tensor(x)
        values = [convert_to_tensor(v) for v in values]
        if any(v.dtype != values[0].dtype for v in values):
            raise ValueError(f"Values must have elements all with the same dtype "
                             f"({[v.dtype.name for v in values]}).")
        result = values[0]
        for boundary, value in zip(boundaries, values[1:]):
            b = convert_to_tensor(boundary, dtype_hint=x.dtype)
            if b.dtype != x.dtype:
                raise ValueError(f"Boundaries ({b.dtype.name}) must have the same dtype as x "
                                 f"({x.dtype.name}).")
            result = math_ops.where(math_ops.greater(x, b), value, result)
        return identity(result, name=scope)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) /
    decay_steps)) + alpha)."""
    if global_step is None:
        raise ValueError("cosine decay requires global_step")
    with name_scope(name, "CosineDecay") as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        steps = _in_dtype(decay_steps, dtype)
        step = math_ops.minimum(_in_dtype(global_step, dtype), steps)
        cosine = 0.5 * (1.0 + math_ops.cos(_in_dtype(math.pi, dtype) * step / steps))
        alpha = _in_dtype(alpha, dtype)
        return math_ops.multiply(lr, (1 - alpha) * cosine + alpha, name=scope)
