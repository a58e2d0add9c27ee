"""sparse_tensor_to_dense / sparse_to_dense (TF1's SparseToDense): the dense form of a
SparseTensor, string_split's included, with TF's index checks; its values' gradient
against central differences."""
import numpy as np
import pytest

import graphc as gc
from graphc import errors
from tests.conftest import BACKENDS
from tests.gradcheck import check_gradients


def run(fetches, feed_dict=None):
    with gc.Session() as sess:
        return sess.run(fetches, feed_dict)


def test_string_split_to_a_dense_matrix_of_tokens():
    sp = gc.string_split(["a b c", "", "d e"])
    dense = gc.sparse_tensor_to_dense(sp, default_value="<pad>")
    default_pad = gc.sparse.to_dense(sp)
    got, got_default = run([dense, default_pad])
    assert got.tolist() == [[b"a", b"b", b"c"], [b"<pad>"] * 3, [b"d", b"e", b"<pad>"]]
    assert got_default.tolist() == [[b"a", b"b", b"c"], [b""] * 3, [b"d", b"e", b""]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_sparse_to_dense_values_and_default(backend, dtype):
    sp = gc.SparseTensor([[0, 1], [1, 0], [2, 2]], gc.constant(np.array([1.5, -2, 3], dtype)
                                                               .astype(dtype)), [3, 4])
    dense = gc.sparse_tensor_to_dense(sp, default_value=7) * 2
    want = np.full((3, 4), 7, dtype)
    want[0, 1], want[1, 0], want[2, 2] = np.array([1.5, -2, 3]).astype(dtype)
    got = run(dense)
    assert got.dtype == dtype and got.shape == (3, 4)
    np.testing.assert_array_equal(got, want * 2)


def test_sparse_to_dense_of_a_vector_and_of_nothing():
    got = run([gc.sparse_to_dense([3, 1], [5], [10, 20], default_value=-1, validate_indices=False),
               gc.sparse_to_dense(np.zeros((0, 2), np.int64), [2, 0], np.zeros(0, np.float32))])
    np.testing.assert_array_equal(got[0], [-1, 20, -1, 10, -1])
    assert got[1].shape == (2, 0)


@pytest.mark.parametrize("indices, match", [([[0, 0], [0, 0]], "repeated"),
                                            ([[1, 0], [0, 0]], "out of order"),
                                            ([[0, 0], [2, 0]], "out of bounds")])
def test_bad_indices_are_invalid_argument(indices, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        run(gc.sparse_to_dense(indices, [2, 2], [1.0, 2.0]))


def test_values_gradient_against_central_differences():
    indices = np.array([[0, 2], [1, 1], [2, 0]], np.int64)
    check_gradients(lambda v: gc.sparse_to_dense(indices, [3, 3], v, 0.5) ** 2,
                    [np.array([0.3, -1.2, 2.0])])
