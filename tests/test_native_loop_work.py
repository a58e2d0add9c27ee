"""The work of one iteration of dynamic_rnn's native loops does not grow with the number of
time steps T: no [T, ...] array is copied or summed whole per iteration (which made a
training step O(T^2): tools/control_flow_bench.py --workload lstm_train).

- The backward loop's TensorArray flow gradient (TensorArrayScatterGrad: the flow's
  gradient with the rows the forward write overwrote zeroed) is written in place: the
  schedule runs it after the flow's other readers (schedule/fusion.py), so that the loop
  gives it one buffer (backends/cpu/control_flow.py written_in_place).
- The backward loop keeps no accumulator for a captured input that no x reaches (the
  input TensorArray of data fed in): tf.gradients walks only the ops between xs and ys, as
  TF1's does (graphc/gradients.py input_needed, ops/while_v2.py).
The values of both paths are checked against NumPy and central differences in
tests/test_native_control_flow.py (gradients with respect to x too) and
tests/test_parallel_regions.py (variables only).
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import control_flow
from graphc.ops import rnn
from tests.test_dynamic_rnn import np_dynamic_lstm


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")  # the lowering runs: no cached spec
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)  # the loop, never unrolled


def lstm(dtype=np.float32):
    x = gc.placeholder(dtype, [2, None, 3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, dtype=dtype)
    loss = gc.reduce_sum(out * out) + gc.reduce_sum(state.c)
    return x, cell, loss


def grad_loops(graph):
    return [op for op in graph.get_operations() if op.type == "While" and "grad" in op.name]


def test_the_flow_gradient_is_written_in_place(monkeypatch):
    found = []

    def spy(body, n):
        in_place = written_in_place(body, n)
        found.extend((body.outputs[j].node.type, j in in_place) for j in range(n))
        return in_place
    written_in_place = control_flow.written_in_place
    monkeypatch.setattr(control_flow, "written_in_place", spy)
    x, cell, loss = lstm()
    grads = gc.gradients(loss, cell.variables)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(grads, {x: np.ones((2, 5, 3), np.float32)})
    flows = [in_place for op_type, in_place in found if op_type == "TensorArrayScatterGrad"]
    assert flows and all(flows), found


def backward_loop(with_x, dtype=np.float32):
    """(the graph, x, cell, the gradients of the loss for the cell's variables (and x
    first when with_x), the backward While)."""
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(5)
        x, cell, loss = lstm(dtype)
        grads = gc.gradients(loss, ([x] if with_x else []) + cell.variables)
    (loop,) = grad_loops(g)
    return g, x, cell, grads, loop


def test_no_accumulator_for_an_input_no_x_reaches():
    alone, with_x = backward_loop(False)[-1], backward_loop(True)[-1]
    # d/dx sums into one more loop variable: the input TensorArray's gradient
    assert with_x.attrs["num_loop_vars"] == alone.attrs["num_loop_vars"] + 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_of_variables_alone_match_those_taken_with_x(dtype):
    xv = np.random.default_rng(3).standard_normal((2, 6, 3)).astype(dtype)
    got = []
    for with_x in (False, True):
        g, x, cell, grads, _ = backward_loop(with_x, dtype)
        with g.as_default(), gc.Session(graph=g) as sess:
            sess.run(gc.global_variables_initializer())
            w = {v.op.name.split("/")[-1]: sess.run(v) for v in cell.variables}
            got.append(sess.run(grads[-2:], {x: xv}))
    got_alone = got[0]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    zeros = np.zeros((2, 4), dtype)
    eps = 1e-6

    def loss_of(bias):
        out, c, _ = np_dynamic_lstm(dict(w, bias=bias), xv.astype(np.float64),
                                    np.full(2, 6), zeros, zeros)
        return (out * out).sum() + c.sum()
    numeric = np.array([(loss_of(w["bias"] + eps * e) - loss_of(w["bias"] - eps * e)) / (2 * eps)
                        for e in np.eye(16)])
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(got_alone[1], numeric, **tol)
