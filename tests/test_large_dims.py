"""Dims past 2**31 are int64 everywhere, as TF's: shape inference, shape tensors, codegen's
index arithmetic and the runtime. No test allocates more than a few MB: a shape the
machine cannot hold must be refused (ResourceExhaustedError naming the op) before any
code runs, and a huge logical size that fusion keeps out of memory must compute exactly.
"""
import re

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.compiler import lower
from graphc.compiler.backends.cpu import generate
from graphc.compiler.backends.gpu import generate_gpu
from graphc.compiler.driver import gpu_target, schedule_module
from tests.conftest import BACKENDS

BIG = 2 ** 32 + 5           # low 32 bits: 5
HUGE = 2 ** 40              # more bytes than any test machine has
# The reference executor computes a Shape's input to take its shape (16 GiB here); the
# compiled backends fold the Shape of a static shape and never compute it.
FOLDING_BACKENDS = [b for b in BACKENDS if b != "reference"]


# ------------------------------------------------------------------- static shapes
def test_static_shapes_keep_dims_past_32_bits():
    assert gc.zeros([BIG]).shape.as_list() == [BIG]
    assert gc.ones([2, BIG], gc.int8).shape.as_list() == [2, BIG]
    assert gc.fill([BIG, 3], 1.5).shape.as_list() == [BIG, 3]
    assert gc.one_hot(gc.constant([1, 2]), 2 ** 32 + 3).shape.as_list() == [2, 2 ** 32 + 3]
    assert gc.range(gc.constant(BIG, gc.int64)).shape.as_list() == [BIG]
    assert gc.range(2 ** 62 - 3, 2 ** 62, 2).shape.as_list() == [2]  # exact, past 2**53


def test_shape_values_past_32_bits_become_int64_tensors():
    t = gc.constant([BIG, 2])
    assert t.dtype == gc.int64
    assert gc.convert_to_tensor([BIG], dtype_hint=gc.int32).dtype == gc.int64
    with pytest.raises(TypeError, match="out of range"):
        gc.constant(BIG, dtype=gc.int32)  # never its low 32 bits
    with pytest.raises(TypeError, match="out of range"):
        gc.constant([-1], dtype=gc.uint8)


def test_reshape_to_an_impossible_64_bit_shape_raises_naming_the_op():
    x = gc.zeros([2, 4])
    with pytest.raises(ValueError, match=r"Cannot reshape .* 8 elements to shape "
                                         r"\[4294967298,4\].*'to_big'"):
        gc.reshape(x, [2 ** 32 + 2, 4], name="to_big")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fed_reshape_whose_size_overflows_int64_is_an_error_with_its_true_size(backend):
    x = gc.placeholder(gc.float32, [None])
    s = gc.placeholder(gc.int64, [3])
    y = gc.reshape(x, s, name="fed_shape")
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(4, np.float32), s: [2, 2, 1]}),
                                      np.ones((2, 2, 1)))
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"(?s)4 values, but the requested shape has "
                                 r"73786976294838206464.*fed_shape"):
            sess.run(y, {x: np.ones(4, np.float32), s: [2 ** 32, 2 ** 32, 4]})


# -------------------------------------------------------------- int64 shape tensors
@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_shape_tensors_over_an_unknown_batch(backend):
    x = gc.placeholder(gc.float32, [None, 3])
    s = gc.shape(x, out_type=gc.int64)
    n = gc.size(x, out_type=gc.int64)
    fetches = [s, n, gc.zeros(s), gc.reshape(x, gc.stack([s[1], s[0]])),
               gc.fill(gc.stack([s[0] * 2, 1]), 2.0), gc.range(s[0] - 1, -1, -1)]
    with gc.Session() as sess:
        for rows in (4, 0, 1, 3):
            a = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
            got = sess.run(fetches, {x: a})
            assert got[0].dtype == np.int64 and got[0].tolist() == [rows, 3]
            assert got[1].dtype == np.int64 and got[1] == rows * 3
            np.testing.assert_array_equal(got[2], np.zeros((rows, 3)))
            np.testing.assert_array_equal(got[3], a.reshape(3, rows))
            np.testing.assert_array_equal(got[4], np.full((rows * 2, 1), 2.0))
            assert got[5].dtype == np.int64
            np.testing.assert_array_equal(got[5], np.arange(rows - 1, -1, -1))


@pytest.mark.parametrize("backend", FOLDING_BACKENDS)
def test_shape_of_a_dim_past_32_bits(backend):
    big = gc.zeros([BIG])
    s64, n64 = gc.shape(big, out_type=gc.int64), gc.size(big, out_type=gc.int64)
    s32 = gc.shape(big, name="narrow_shape")
    with gc.Session() as sess:
        got_s, got_n = sess.run([s64, n64])
        assert got_s.tolist() == [BIG] and got_n == BIG
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"(?s)32-bit but .*4294967301.*narrow_shape"):
            sess.run(s32)  # TF's error, never 5


# ------------------------------------------------------- allocations past the machine
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_allocation_past_the_machine_is_resource_exhausted_naming_the_op(backend):
    z = gc.zeros([HUGE], name="huge_zeros")
    with gc.Session() as sess:
        with pytest.raises(errors.ResourceExhaustedError,
                           match=r"(?s)OOM when allocating tensor with shape\[1099511627776\]"
                                 r".*huge_zeros.*test_large_dims.py"):
            sess.run(z)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_feed_that_makes_a_fetch_too_big_is_refused_before_running(backend, monkeypatch):
    # the same compiled code for both sizes (guards hold): the runtime checks each plan
    monkeypatch.setenv("GRAPHC_MEMORY_LIMIT", str(1 << 20))
    x = gc.placeholder(gc.float32, [None])
    y = gc.tile(x, [4], name="tiled")
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(10, np.float32)}), np.ones(40))
        with pytest.raises(errors.ResourceExhaustedError, match=r"(?s)shape\[400000\].*tiled"):
            sess.run(y, {x: np.ones(100_000, np.float32)})


# ---------------------------------------------------------------- index arithmetic
def _big_reduction():
    """Row sums of a [2, 2**32 + 6] broadcast of two int64 numbers: 32-bit index math
    would wrap; the buffers are 16 bytes."""
    a = gc.placeholder(gc.int64, [None])
    return a, gc.reduce_sum(gc.broadcast_to(a[:, None], [2, 2 ** 32 + 6]), axis=1)


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_generated_index_arithmetic_is_64_bit(target):
    a, total = _big_reduction()
    module = lower([a], [total], [], [(2,)])
    schedule_module(module, gpu_target() if target == "gpu" else None)
    ir = generate(module)["llvm_ir"] if target == "cpu" else generate_gpu(module).llvm_ir
    assert re.search(r"icmp \w+ i64 %\S+, 4294967302", ir), "loop bound is not i64"
    # a 32-bit phi is a loop variable, except the entry's status code in its failure exit
    blocks = re.split(r"\n(?=[\w.\"]+:\n)", ir)
    assert not any(re.search(r"phi\s+i32", b) for b in blocks
                   if not b.startswith("failed:")), "a 32-bit loop variable"
    assert not re.search(r"getelementptr inbounds \w+, ptr %\S+, i32", ir), "a 32-bit index"


def test_a_reduction_over_a_logical_size_past_32_bits_is_exact(monkeypatch):
    # CPU code only: LLVM closes the loop of a loop-invariant int64 sum; the reference and
    # the emulated GPU would really iterate 2**33 elements
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    a, total = _big_reduction()
    with gc.Session() as sess:
        got = sess.run(total, {a: np.array([1, -3])})
    assert got.tolist() == [2 ** 32 + 6, -3 * (2 ** 32 + 6)]
