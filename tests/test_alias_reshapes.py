"""A reshape read by a loop kernel and by a product stays an alias of its input for the product
and is an index remap in the loop kernel (fusion step 2a), never a copy written by the loop:
attention's backward reshapes dq, dk, dv ([B, S, H, dh] -> [B*S, D]) for the weight
gradients' products and sums their columns for the bias gradients.

Structure on the CPU and GPU targets; values against NumPy references written here (float32
and float64, odd sizes) on every backend; gradients against central finite differences.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.driver import compile_options, schedule_module
from tests.gradcheck import check_gradients

ALL_BACKENDS = pytest.mark.backends("compiled", "reference", "gpu_emulated")
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-11)}
GPU_TARGET = {"kind": "gpu", "arch": "sm_80", "ptx": False}


def _module(fetches, feeds, target=None):
    module = lower(list(feeds), list(fetches), [], [np.shape(a) for a in feeds.values()])
    schedule_module(module, target=target, options=compile_options())
    return module


def _block(p, v, x, w, b, s):
    """A batched product's result p . v [b, s, d] seen as rows [b*s, d]: a dense layer's
    input of weight w (its product) and the column sums (a bias gradient's loop)."""
    rows = gc.reshape(gc.matmul(p, v), [b * s, -1])
    return gc.matmul(x, rows, transpose_a=True), gc.reduce_sum(rows, axis=0), rows


def _np_block(p, v, x, w, b, s):
    rows = (p @ v).reshape(b * s, -1)
    return x.T @ rows, rows.sum(0)


def _arrays(dtype, b, s, d, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype)
            for shape in [(b, s, s), (b, s, d), (b * s, d), (d, d)]]


def _graph(dtype, b, s, d):
    arrays = _arrays(dtype, b, s, d)
    phs = [gc.placeholder(gc.as_dtype(dtype), a.shape) for a in arrays]
    return dict(zip(phs, arrays)), arrays, _block(*phs, b, s)


@pytest.mark.parametrize("target", [None, GPU_TARGET], ids=["cpu", "gpu"])
def test_a_reshape_a_product_and_a_loop_read_is_an_alias_not_a_copy(target):
    feeds, _, (dw, db, rows) = _graph(np.float32, 2, 3, 4)
    module = _module([dw, db], feeds, target)
    text = "\n".join(map(str, module.kernels))
    assert not any(v.node.name == rows.op.name for k in module.kernels for v in k.outputs), text
    alias = [v for v in module.aliases if v.node.name == rows.op.name]
    assert len(alias) == 1 and module.aliases[alias[0]].node.type == "BatchMatMulV2"
    (loop,) = [k for k in module.kernels if k.kind == "loop"]
    assert any(n.name == rows.op.name for n in loop.nodes)  # an index remap there


def test_a_fetched_reshape_is_written():
    feeds, _, (dw, db, rows) = _graph(np.float32, 2, 3, 4)
    module = _module([dw, db, rows], feeds)
    assert any(v.node.name == rows.op.name for k in module.kernels for v in k.outputs)


@ALL_BACKENDS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("b, s, d", [(2, 3, 4), (1, 1, 1), (3, 5, 7)])
def test_block_matches_numpy(dtype, b, s, d):
    feeds, arrays, (dw, db, _) = _graph(dtype, b, s, d)
    with gc.Session() as sess:
        got = sess.run([dw, db], feeds)
    for g, w in zip(got, _np_block(*arrays, b, s)):
        np.testing.assert_allclose(g, w, **TOL[dtype])


@ALL_BACKENDS
def test_block_gradients_match_finite_differences():
    b, s, d = 2, 3, 4

    def fn(p, v, x, w):
        dw, db, _ = _block(p, v, x, w, b, s)
        return gc.matmul(dw, w) + db
    check_gradients(fn, _arrays(np.float64, b, s, d, seed=1))
