"""TF1's check_ops: assertions on tensors (tf.assert_equal, assert_less_equal, assert_rank,
...). Each returns an Assert op that fails the run with InvalidArgumentError (its message,
then the tensors' values) when the condition is false; make other ops depend on it with
control_dependencies. As TF 1.15 does in graph mode, a condition whose inputs are known
when the graph is built is checked then, raising InvalidArgumentError at once; a rank
known statically is checked at once with ValueError."""
import numpy as np

from graphc import errors
from graphc.framework.graph import name_scope
from graphc.framework.static_value import constant_value
from graphc.ops import array_ops, math_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import Assert, no_op

__all__ = ["assert_equal", "assert_none_equal", "assert_less", "assert_less_equal",
           "assert_greater", "assert_greater_equal", "assert_positive", "assert_negative",
           "assert_non_negative", "assert_non_positive", "assert_rank",
           "assert_rank_at_least"]

# name -> (the test op, its NumPy twin, the relation's symbol)
_BINARY = {
    "assert_equal": (math_ops.equal, np.equal, "=="),
    "assert_none_equal": (math_ops.not_equal, np.not_equal, "!="),
    "assert_less": (math_ops.less, np.less, "<"),
    "assert_less_equal": (math_ops.less_equal, np.less_equal, "<="),
    "assert_greater": (math_ops.greater, np.greater, ">"),
    "assert_greater_equal": (math_ops.greater_equal, np.greater_equal, ">="),
}


def _binary_assert(opname, x, y, data, summarize, message, name):
    test, static_test, symbol = _BINARY[opname]
    with name_scope(name, opname, [x, y]):
        x = convert_to_tensor(x, name="x")
        y = convert_to_tensor(y, name="y", dtype_hint=x.dtype)
        if data is None:
            data = [message or "", f"Condition x {symbol} y did not hold element-wise:",
                    f"x ({x.name}) = ", x, f"y ({y.name}) = ", y]
        x_static, y_static = constant_value(x), constant_value(y)
        if x_static is not None and y_static is not None and \
                not np.all(static_test(x_static, y_static)):
            raise errors.InvalidArgumentError(
                None, None, " ".join(str(d) if isinstance(d, str) else
                                     str(constant_value(d) if hasattr(d, "op") else d)
                                     for d in data))
        condition = reduction_ops.reduce_all(test(x, y))
        return Assert(condition, data, summarize=summarize)


def assert_equal(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_equal", x, y, data, summarize, message, name)


def assert_none_equal(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_none_equal", x, y, data, summarize, message, name)


def assert_less(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_less", x, y, data, summarize, message, name)


def assert_less_equal(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_less_equal", x, y, data, summarize, message, name)


def assert_greater(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_greater", x, y, data, summarize, message, name)


def assert_greater_equal(x, y, data=None, summarize=None, message=None, name=None):
    return _binary_assert("assert_greater_equal", x, y, data, summarize, message, name)


def _sign_assert(opname, relation, x, data, summarize, message, name):
    with name_scope(name, opname, [x]):
        x = convert_to_tensor(x, name="x")
        if data is None:
            data = [message or "", f"Condition x {relation} did not hold element-wise:",
                    f"x ({x.name}) = ", x]
        zero = array_ops.zeros([], x.dtype)
        binary = {"> 0": "assert_less", "< 0": "assert_greater",
                  ">= 0": "assert_less_equal", "<= 0": "assert_greater_equal"}[relation]
        return _binary_assert(binary, zero, x, data, summarize, message, None)


def assert_positive(x, data=None, summarize=None, message=None, name=None):
    return _sign_assert("assert_positive", "> 0", x, data, summarize, message, name)


def assert_negative(x, data=None, summarize=None, message=None, name=None):
    return _sign_assert("assert_negative", "< 0", x, data, summarize, message, name)


def assert_non_negative(x, data=None, summarize=None, message=None, name=None):
    return _sign_assert("assert_non_negative", ">= 0", x, data, summarize, message, name)


def assert_non_positive(x, data=None, summarize=None, message=None, name=None):
    return _sign_assert("assert_non_positive", "<= 0", x, data, summarize, message, name)


def _rank_assert(opname, x, rank, at_least, data, summarize, message, name):
    with name_scope(name, opname, [x, rank]):
        x = convert_to_tensor(x, name="x")
        rank_t = convert_to_tensor(rank, name="rank")
        if rank_t.shape.ndims not in (0, None) or not rank_t.dtype.is_integer:
            raise ValueError(f"{opname}: rank must be an integer scalar, got {rank!r}")
        static_rank = constant_value(rank_t)
        relation = "at least" if at_least else ""
        if static_rank is not None and x.shape.ndims is not None:
            actual, wanted = x.shape.ndims, int(static_rank)
            if (actual < wanted) if at_least else (actual != wanted):
                raise ValueError(f"{message or ''}  Tensor {x.name} must have rank "
                                 f"{relation + ' ' if at_least else ''}{wanted}.  Received "
                                 f"rank {actual}, shape {x.shape}".strip())
            return no_op()  # checked: a no-op to depend on, as TF1 returns
        if data is None:
            data = [message or "", f"Tensor {x.name} must have rank {relation}",
                    rank_t, "Received shape: ", array_ops.shape(x)]
        actual = array_ops.rank(x)
        condition = math_ops.greater_equal(actual, math_ops.cast(rank_t, actual.dtype)) \
            if at_least else math_ops.equal(actual, math_ops.cast(rank_t, actual.dtype))
        return Assert(condition, data, summarize=summarize)


def assert_rank(x, rank, data=None, summarize=None, message=None, name=None):
    """A rank known when the graph is built is checked now (and a no_op returned);
    an unknown one at run time."""
    return _rank_assert("assert_rank", x, rank, False, data, summarize, message, name)


def assert_rank_at_least(x, rank, data=None, summarize=None, message=None, name=None):
    return _rank_assert("assert_rank_at_least", x, rank, True, data, summarize, message,
                        name)
