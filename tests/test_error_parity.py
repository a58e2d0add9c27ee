"""The exception class (and the useful part of the message) of each common misuse is
TF1's (tensorflow/python/client/session.py, framework/ops.py, op shape functions, CPU
kernels' OP_REQUIRES). Run-time errors are checked on every backend."""
import numpy as np
import pytest

import graphc as tf
from tests.conftest import BACKENDS


def session(backend="compiled"):
    return tf.Session(config=tf.ConfigProto(backend=backend))


# ------------------------------------------------------------------ graph construction
@pytest.mark.parametrize("build, cls, message", [
    (lambda: tf.add(tf.zeros([2, 3]), tf.zeros([4, 3])), ValueError, "Dimensions must be equal"),
    (lambda: tf.matmul(tf.zeros([2, 3]), tf.zeros([4, 3])), ValueError,
     "Dimensions must be equal"),
    (lambda: tf.matmul(tf.zeros([3]), tf.zeros([3, 2])), ValueError, "Shape must be rank 2"),
    (lambda: tf.add(tf.constant(1), tf.constant(1.0)), TypeError, "does not match type int32"),
    (lambda: tf.reshape(tf.zeros([2, 3]), [4]), ValueError,
     "Cannot reshape a tensor with 6 elements to shape [4]"),
    (lambda: tf.concat([tf.zeros([2, 3]), tf.zeros([2, 4])], 0), ValueError,
     "Dimension 1 in both shapes must be equal"),
    (lambda: tf.squeeze(tf.zeros([2, 3]), [0]), ValueError, "Can not squeeze dim[0]"),
    (lambda: tf.transpose(tf.zeros([2, 3]), [0, 1, 2]), ValueError, "Dimension must be 2"),
    (lambda: tf.split(tf.zeros([5]), 2), ValueError, "evenly divisible by 2"),
    (lambda: tf.reduce_sum(tf.zeros([2, 3]), axis=2), ValueError,
     "Invalid reduction dimension 2"),
    (lambda: tf.one_hot(tf.constant([1.0]), 3), TypeError, "int32 or int64"),
    (lambda: tf.assign(tf.Variable(tf.zeros([2])), tf.zeros([3])), ValueError,
     "are incompatible"),
    (lambda: tf.nn.conv2d(tf.zeros([1, 4, 4, 3]), tf.zeros([2, 2, 2, 1]), [1, 1, 1, 1], "SAME"),
     ValueError, "must match the input depth of filter"),
    (lambda: tf.tile(tf.zeros([2, 3]), [2]), ValueError, "Shape must be rank"),
    (lambda: tf.pad(tf.zeros([2, 3]), [[2, 2], [0, 0]], mode="REFLECT"), ValueError,
     "paddings must be no greater than the dimension size"),
    (lambda: tf.placeholder("flaot32"), TypeError, "flaot32"),
    (lambda: tf.Variable(None), ValueError, "initial_value must be specified"),
])
def test_construction_errors(build, cls, message):
    with pytest.raises(cls) as info:
        build()
    assert message in str(info.value)


def test_get_variable_twice_and_missing_reuse():
    tf.get_variable("w", [2])
    with pytest.raises(ValueError, match="Variable w already exists, disallowed"):
        tf.get_variable("w", [2])
    with tf.variable_scope("s", reuse=True):
        with pytest.raises(ValueError, match="Variable s/nope does not exist"):
            tf.get_variable("nope", [2])


def test_finalized_graph_cannot_be_modified():
    tf.get_default_graph().finalize()
    with pytest.raises(RuntimeError, match="Graph is finalized and cannot be modified"):
        tf.constant(1.0)


# ------------------------------------------------------------------ gradients
def test_gradients_of_non_differentiable_or_unconnected_ops_are_none():
    x = tf.placeholder(tf.float32, [3])
    other = tf.placeholder(tf.float32, [3])
    assert tf.gradients(tf.cast(tf.argmax(x), tf.float32), x) == [None]   # NotDifferentiable
    assert tf.gradients(tf.cast(tf.equal(x, 1.0), tf.float32), x) == [None]
    assert tf.gradients(other * 2, x) == [None]                            # unconnected


def test_gradients_of_integer_ys_are_none_and_of_bool_ys_a_type_error():
    # TF's _DefaultGradYs seeds integer ys with ones; backprop passes only float tensors
    x = tf.placeholder(tf.int32, [3])
    xf = tf.placeholder(tf.float32, [3])
    assert tf.gradients(x * 2, x) == [None]
    assert tf.gradients(tf.cast(xf, tf.int32) * 3, xf) == [None]
    assert tf.gradients([tf.reduce_sum(xf * xf), tf.cast(xf, tf.int64)], xf)[0] is not None
    with pytest.raises(TypeError, match="must be numeric to obtain a default gradient"):
        tf.gradients(xf > 0, xf)


def test_gradient_of_an_op_without_a_gradient_function_is_a_lookup_error():
    # every registered type has a gradient or is marked not differentiable, as in TF: a
    # type registered here (and removed after) stands for a user's op without one
    from graphc.framework import op_def
    op_def.register_op("ParityNoGrad", infer=lambda ins, a: (ins[0].shape, ins[0].dtype),
                       kernel=lambda x: x, kind="elementwise")
    try:
        x = tf.placeholder(tf.float32, [3])
        y = tf.get_default_graph().create_op("ParityNoGrad", [x]).outputs[0]
        with pytest.raises(LookupError, match="No gradient defined for operation"):
            tf.gradients(tf.reduce_sum(y), x)
    finally:
        del op_def.OP_DEFS["ParityNoGrad"]


# ------------------------------------------------------------------ Session.run misuse
def test_feed_of_the_wrong_shape_is_a_value_error():
    x = tf.placeholder(tf.float32, [None, 2])
    with session() as sess:
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(2,\) for Tensor"):
            sess.run(x, {x: np.ones(2)})
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(2, 3\)"):
            sess.run(x, {x: np.ones((2, 3))})


def test_feed_of_a_float_array_to_an_int_placeholder_truncates_as_tf():
    x = tf.placeholder(tf.int32, [2])
    with session() as sess:   # TF1 converts with np.asarray(value, dtype): no error
        np.testing.assert_array_equal(sess.run(x * 2, {x: np.array([1.5, 2.5])}), [2, 4])


def test_feed_values_and_keys_that_are_not_values():
    x = tf.placeholder(tf.float32, [2])
    with session() as sess:
        with pytest.raises(TypeError, match="The value of a feed cannot be a"):
            sess.run(x * 2, {x: tf.constant([1.0, 2.0])})
        with pytest.raises(TypeError, match="Cannot interpret feed_dict key"):
            sess.run(x * 2, {3: [1.0, 2.0]})


def test_feed_that_numpy_cannot_convert_is_a_value_error():
    x = tf.placeholder(tf.float32, [None, 2])
    with session() as sess:
        with pytest.raises(ValueError):
            sess.run(x, {x: [[1, 2], [3]]})


# TF 2.21's compat.v1 wording (TF 1.x said "Fetch argument 3 has invalid type")
@pytest.mark.parametrize("fetch, message", [
    (3, 'Argument `fetch` = 3 has invalid type "int" must be a string or Tensor'),
    (None, 'Argument `fetch` = None has invalid type "NoneType". Cannot be None')])
def test_fetch_of_a_non_tensor_is_a_type_error(fetch, message):
    with session() as sess:
        with pytest.raises(TypeError, match=message):
            sess.run(fetch)


def test_fetch_from_another_graph_is_a_value_error():
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(1.0)
    with session() as sess:
        with pytest.raises(ValueError, match="cannot be interpreted as a Tensor"):
            sess.run(c)


def test_fetch_of_an_unknown_name_is_a_value_error():
    with session() as sess:
        with pytest.raises(ValueError):
            sess.run("nope:0")


def test_running_a_closed_session_is_a_runtime_error():
    c = tf.constant(1.0)
    sess = session()
    sess.close()
    with pytest.raises(RuntimeError, match="Attempted to use a closed Session"):
        sess.run(c)


def test_eval_without_a_default_session_is_a_value_error():
    with pytest.raises(ValueError, match="No default session is registered"):
        tf.constant(1.0).eval()


# ------------------------------------------------------------------ run-time errors
def _run_error(backend, fetch, feeds=None):
    with session(backend) as sess:
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.OpError) as info:
            sess.run(fetch, feeds)
    return info.value


@pytest.mark.parametrize("backend", BACKENDS)
def test_uninitialized_variable_is_failed_precondition(backend):
    v = tf.Variable(1.0)
    with session(backend) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match="Attempting to use uninitialized value Variable"):
            sess.run(v + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_placeholder_not_fed_is_invalid_argument(backend):
    x = tf.placeholder(tf.float32, [2], name="needs_feed")
    e = _run_error(backend, x * 2)
    assert isinstance(e, tf.errors.InvalidArgumentError)
    assert "You must feed a value for placeholder tensor 'needs_feed'" in str(e)


RUNTIME_CASES = {
    "gather_out_of_range": (lambda i: tf.gather(tf.constant([1.0, 2.0, 3.0]), i),
                            (tf.int32, [2]), [0, 7], "indices[1] = 7 is not in [0, 3)"),
    "reshape_impossible": (lambda x: tf.reshape(x, [4]), (tf.float32, [None, 3]),
                           np.ones((2, 3)), "Input to reshape is a tensor with 6 values"),
    "integer_division_by_zero": (lambda a: a // tf.constant([1, 0]), (tf.int32, [2]), [3, 4],
                                 "Integer division by zero"),
    "check_numerics": (lambda a: tf.check_numerics(a, "boom"), (tf.float32, [2]),
                       [1.0, np.nan], "boom : Tensor had NaN"),
    "slice_out_of_range": (lambda x: tf.slice(x, [1], [5]), (tf.float32, [None]), np.ones(3),
                           "Expected size[0] in [0, 2], but got 5"),
    "broadcast_incompatible": (lambda a: a + tf.ones([3]), (tf.float32, [None]), np.ones(2),
                               "Incompatible shapes: [2] vs. [3]"),
    "matmul_incompatible": (lambda a: tf.matmul(a, tf.ones([4, 2])), (tf.float32, [None, None]),
                            np.ones((2, 3)), "Matrix size-incompatible: In[0]: [2,3], In[1]: [4,2]"),
    "argmax_over_an_empty_axis": (lambda x: tf.argmax(x, 1), (tf.float32, [None, None]),
                                  np.zeros((2, 0), np.float32),
                                  "Reduction axis 1 is empty in shape [2,0]"),
    "sparse_label_out_of_range": (
        lambda l: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=l, logits=tf.zeros([2, 3])),
        (tf.int32, [2]), [0, 5], "Received a label value of 5 which is outside the valid range"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(RUNTIME_CASES))
def test_run_time_errors_are_invalid_argument(case, backend):
    build, (dtype, shape), value, message = RUNTIME_CASES[case]
    p = tf.placeholder(dtype, shape)
    e = _run_error(backend, build(p), {p: value})
    assert isinstance(e, tf.errors.InvalidArgumentError), type(e)
    assert message in str(e)
    assert __file__.rsplit("/", 1)[-1] in str(e), "the error names the user's line"
