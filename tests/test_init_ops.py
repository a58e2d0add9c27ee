"""Initializers: values, dtypes, shapes, distributions (moments, bounds), seeds, errors."""
import math

import numpy as np
import pytest

import graphc as gc


def _value(init, shape, dtype=None):
    t = init(shape, dtype=dtype) if dtype is not None else init(shape)
    with gc.Session() as sess:
        return t, sess.run(t)


@pytest.mark.parametrize("shape", [[], [1], [7], [3, 5], [2, 3, 11]])
@pytest.mark.parametrize("dtype", [gc.float32, gc.float64, gc.int32, gc.int64])
def test_zeros_and_ones(shape, dtype):
    for init, fill in [(gc.zeros_initializer(), 0), (gc.ones_initializer(), 1)]:
        t, v = _value(init, shape, dtype)
        assert t.dtype == dtype and t.shape.as_list() == shape
        np.testing.assert_array_equal(v, np.full(shape, fill, dtype.np))
        assert v.dtype == dtype.np


def test_default_dtype_from_constructor():
    t, v = _value(gc.ones_initializer(dtype=gc.int32), [2])
    assert t.dtype == gc.int32
    t, v = _value(gc.zeros_initializer(), [2])
    assert t.dtype == gc.float32


@pytest.mark.parametrize("value,shape,expected", [
    (3.5, [2, 3], np.full([2, 3], 3.5)),
    ([1, 2, 3, 4, 5, 6], [2, 3], np.arange(1, 7).reshape(2, 3)),
    ([1, 2], [5], [1, 2, 2, 2, 2]),  # TF1 repeats the last value
    (np.arange(7.0), [7], np.arange(7.0)),
])
def test_constant_initializer(value, shape, expected):
    t, v = _value(gc.constant_initializer(value), shape)
    assert t.dtype == gc.float32 and t.shape.as_list() == shape
    np.testing.assert_allclose(v, np.asarray(expected, np.float32))


def test_constant_initializer_errors():
    with pytest.raises(ValueError, match="Too many elements"):
        gc.constant_initializer([1, 2, 3])([2])
    with pytest.raises(TypeError, match="Expected Tensor's shape"):
        gc.constant_initializer([1, 2], verify_shape=True)([3])
    with pytest.raises(TypeError):
        gc.constant_initializer(object())
    with pytest.raises(ValueError, match="fully defined"):
        gc.constant_initializer(1.0)([None, 2])


def test_constant_initializer_int_dtype():
    t, v = _value(gc.constant_initializer(7, dtype=gc.int64), [3])
    assert t.dtype == gc.int64
    np.testing.assert_array_equal(v, [7, 7, 7])


N = 20001  # large odd sample for moment checks


def test_random_normal_moments_and_dtype():
    t, v = _value(gc.random_normal_initializer(mean=2.0, stddev=3.0, seed=1), [N], gc.float64)
    assert t.dtype == gc.float64 and v.dtype == np.float64
    assert abs(v.mean() - 2.0) < 0.1 and abs(v.std() - 3.0) < 0.1


def test_truncated_normal_bounds_and_moments():
    _, v = _value(gc.truncated_normal_initializer(mean=1.0, stddev=0.5, seed=2), [N])
    assert v.dtype == np.float32
    assert np.all(np.abs(v - 1.0) <= 2 * 0.5 + 1e-6)
    # a standard normal truncated to [-2, 2] has stddev 0.8796
    assert abs(v.std() - 0.5 * 0.87962566) < 0.02
    assert abs(v.mean() - 1.0) < 0.02


def test_random_uniform_bounds_and_int_dtype():
    _, v = _value(gc.random_uniform_initializer(-3.0, 5.0, seed=3), [N])
    assert v.min() >= -3.0 and v.max() < 5.0 and abs(v.mean() - 1.0) < 0.1
    _, default = _value(gc.random_uniform_initializer(seed=3), [7])
    assert default.min() >= 0.0 and default.max() < 1.0
    t, ints = _value(gc.random_uniform_initializer(0, 10, seed=4, dtype=gc.int32), [N])
    assert t.dtype == gc.int32 and ints.min() >= 0 and ints.max() <= 9
    assert set(np.unique(ints)) == set(range(10))


def test_seeded_initializers_repeat_across_graphs():
    def draw(init):
        with gc.Graph().as_default():
            _, v = _value(init, [7, 3])
        return v
    for make in [gc.random_normal_initializer, gc.truncated_normal_initializer,
                 gc.random_uniform_initializer, gc.glorot_uniform_initializer,
                 gc.glorot_normal_initializer]:
        a, b, c = draw(make(seed=5)), draw(make(seed=5)), draw(make(seed=6))
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


@pytest.mark.parametrize("shape,fans", [
    ([], (1, 1)), ([7], (7, 7)), ([30, 50], (30, 50)), ([3, 3, 4, 8], (36, 72)),
    ([5, 2, 6], (10, 30)),
])
def test_glorot_uniform_limit_and_variance(shape, fans):
    fan_in, fan_out = fans
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    _, v = _value(gc.glorot_uniform_initializer(seed=7), shape)
    assert v.shape == tuple(shape)
    assert np.all(np.abs(v) <= limit)
    if v.size > 1000:
        assert abs(v.var() - limit ** 2 / 3) < 0.1 * limit ** 2 / 3


def test_glorot_normal_is_corrected_truncated_normal():
    fan_in, fan_out = 60, 40
    stddev = math.sqrt(2.0 / (fan_in + fan_out))
    _, v = _value(gc.glorot_normal_initializer(seed=8), [fan_in, fan_out])
    assert np.all(np.abs(v) <= 2 * stddev / 0.87962566103423978 + 1e-6)
    assert abs(v.std() - stddev) < 0.05 * stddev


@pytest.mark.parametrize("mode,n", [("fan_in", 20), ("fan_out", 150), ("fan_avg", 85)])
@pytest.mark.parametrize("distribution", ["truncated_normal", "untruncated_normal", "uniform"])
def test_variance_scaling_modes(mode, n, distribution):
    init = gc.variance_scaling_initializer(scale=2.0, mode=mode, distribution=distribution,
                                           seed=9, dtype=gc.float64)
    t, v = _value(init, [20, 150])
    assert t.dtype == gc.float64
    assert abs(v.var() - 2.0 / n) < 0.08 * 2.0 / n
    if distribution == "uniform":
        assert np.all(np.abs(v) <= math.sqrt(3 * 2.0 / n))
    if distribution == "truncated_normal":
        assert np.all(np.abs(v) <= 2 * math.sqrt(2.0 / n) / 0.87962566103423978 + 1e-9)


def test_he_and_lecun_aliases():
    _, v = _value(gc.initializers.he_normal(seed=1), [50, 40])
    assert abs(v.std() - math.sqrt(2.0 / 50)) < 0.05 * math.sqrt(2.0 / 50)
    _, v = _value(gc.initializers.lecun_uniform(seed=1), [50, 40])
    assert np.all(np.abs(v) <= math.sqrt(3.0 / 50))


def test_identity_initializer():
    _, v = _value(gc.initializers.identity(gain=2.0), [3, 5])
    np.testing.assert_array_equal(v, 2.0 * np.eye(3, 5))
    with pytest.raises(ValueError, match="2D"):
        gc.initializers.identity()([2, 2, 2])


@pytest.mark.parametrize("make", [
    lambda: gc.variance_scaling_initializer(scale=0.0),
    lambda: gc.variance_scaling_initializer(mode="fan_sum"),
    lambda: gc.variance_scaling_initializer(distribution="cauchy"),
    lambda: gc.random_normal_initializer(dtype=gc.int32),
    lambda: gc.glorot_uniform_initializer()([2, 2], dtype=gc.int32),
    lambda: gc.truncated_normal_initializer()([3], dtype=gc.int64),
])
def test_bad_arguments_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_short_names_of_gc_initializers():
    ini = gc.initializers
    assert ini.zeros is gc.zeros_initializer and ini.ones is gc.ones_initializer
    assert ini.constant is gc.constant_initializer
    assert ini.glorot_uniform is gc.glorot_uniform_initializer
    assert ini.random_normal is gc.random_normal_initializer
    assert gc.zeros is not gc.zeros_initializer  # the op keeps its top-level name
    v = gc.Variable(1.0)
    with gc.Session() as sess:
        sess.run(ini.global_variables())
        assert sess.run(v) == 1.0


@pytest.mark.parametrize("init", [
    gc.zeros_initializer(dtype=gc.int64), gc.constant_initializer([1.0, 2.0]),
    gc.random_uniform_initializer(-1, 2, seed=3), gc.variance_scaling_initializer(3.0, "fan_out"),
    gc.glorot_uniform_initializer(seed=4),
])
def test_config_round_trip(init):
    clone = type(init).from_config(init.get_config())
    assert clone.get_config() == init.get_config()


def test_get_variable_defaults_glorot_for_floats_zeros_for_ints():
    w = gc.get_variable("w", [40, 60])
    k = gc.get_variable("k", [5], dtype=gc.int32)
    c = gc.get_variable("c", [2, 3], initializer=gc.constant_initializer(4.0))
    r = gc.get_variable("r", [7], initializer=gc.random_uniform_initializer)  # a class works
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        wv, kv, cv, rv = sess.run([w, k, c, r])
    assert np.all(np.abs(wv) <= math.sqrt(6.0 / 100)) and wv.std() > 0.05
    np.testing.assert_array_equal(kv, np.zeros(5, np.int32))
    np.testing.assert_array_equal(cv, np.full([2, 3], 4.0, np.float32))
    assert rv.shape == (7,) and rv.min() >= 0 and rv.max() < 1


def test_partition_info_full_shape_sets_fans():
    class Info:
        full_shape = [600, 400]
    t = gc.glorot_uniform_initializer(seed=1)([6, 4], partition_info=Info())
    with gc.Session() as sess:
        v = sess.run(t)
    assert np.all(np.abs(v) <= math.sqrt(6.0 / 1000))
