"""GraphDefs that TensorFlow 2.21 wrote in tf.compat.v1 graph mode with control flow v2
(While/StatelessWhile/If/StatelessIf ops, their bodies FunctionDefs of the library,
nested ones included, TensorLists) and with control flow v1 (loop frames): graphc
imports and runs them, giving what TF printed when it made them
(tests/data/tf_control_flow/make_fixtures.py wrote the .pb files and expected.json; TF
is not needed here)."""
import json
import os

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io

pytest.importorskip("tensorboard")

DATA = os.path.join(os.path.dirname(__file__), "data", "tf_control_flow")
with open(os.path.join(DATA, "expected.json")) as f:
    EXPECTED = json.load(f)


def imported(name):
    gc.import_graph_def(graph_io.read_graph_def(os.path.join(DATA, f"{name}.pb")), name="")
    return EXPECTED[name]


def feed_of(run):
    return {f"{k}:0": np.reshape(v, run["feed_shapes"][k]) for k, v in run["feed"].items()}


@pytest.mark.parametrize("name", ["while_tf", "cond_tf", "map_fn_tf", "tensor_array_tf",
                                  "dynamic_rnn_tf", "loop_gradients_tf", "v1_frames_tf"])
def test_tf_written_control_flow_gives_tfs_values(name):
    """while_loop (maximum_iterations too), cond, a loop in a cond and a cond in a loop,
    map_fn (of an empty tensor too), TensorArrays written in one loop and read in
    another, a frozen dynamic_rnn (a GRU over sequences of lengths 5, 2 and 0), TF's own
    gradient of a loop (TensorList accumulators pushed forward, popped backward), and
    TF1's own loop frames (control flow v1, a nested loop too) rebuilt as While ops."""
    expected = imported(name)
    with gc.Session() as sess:
        for run in expected["runs"]:
            got = sess.run(expected["fetches"], feed_of(run))
            for g, want, shape, fetch in zip(got, run["values"], run["shapes"],
                                             expected["fetches"]):
                assert np.shape(g) == tuple(shape), fetch
                np.testing.assert_allclose(g, np.reshape(want, shape), rtol=1e-5, atol=1e-6,
                                           err_msg=fetch)


@pytest.mark.filterwarnings("ignore:Converting sparse IndexedSlices")
def test_gradients_through_an_imported_tf_tensor_array_loop():
    """gc.gradients after import: total = sum_t 2 * (running sum of xs)[t], so
    d total[j] / d xs[k, j] = 2 * (n - k)."""
    expected = imported("tensor_array_tf")
    g = gc.get_default_graph()
    xs, total = g.get_tensor_by_name("xs:0"), g.get_tensor_by_name("total:0")
    weights = np.array([1.0, -0.5, 2.0])
    grad, = gc.gradients(gc.reduce_sum(total * weights), [xs])
    xv = feed_of(expected["runs"][0])["xs:0"]
    with gc.Session() as sess:
        got = sess.run(grad, {xs: xv})
    n = len(xv)
    np.testing.assert_allclose(got, 2.0 * (n - np.arange(n))[:, None] * weights,
                               rtol=1e-12)


def test_tf_bodies_become_graphc_bodies():
    """TF's StatelessWhile (its loop counter and maximum_iterations loop variables
    included) becomes a While whose bodies read only their arguments."""
    imported("while_tf")
    g = gc.get_default_graph()
    loops = [op for op in g.get_operations() if op.type == "While"]
    assert len(loops) == 2
    for op in loops:
        body = g._functions[op.attrs["body"]]
        assert len(body.inputs) == op.attrs["num_loop_vars"] == len(body.outputs)
        assert not body.captures


def test_v1_frames_become_while_ops():
    """Each frame (the nested one first) is one While; the Exits keep their names."""
    imported("v1_frames_tf")
    g = gc.get_default_graph()
    types = {op.type for op in g.get_operations()}
    assert not types & {"Enter", "Merge", "Switch", "LoopCond", "NextIteration", "Exit"}
    loops = [op.name for op in g.get_operations() if op.type == "While"]
    assert sorted(loops) == ["loop/while", "outer/while"]
    outer = g.get_operation_by_name("outer/while")
    inner = [op for op in g._functions[outer.attrs["body"]].get_operations()
             if op.type == "While"]
    assert len(inner) == 1
    assert g.get_operation_by_name("loop/Exit_1").type == "Identity"


def test_v1_conds_are_refused_naming_the_op():
    from tensorboard.compat.proto import graph_pb2
    gd = graph_pb2.GraphDef()
    for name, op, inputs in (("x", "Placeholder", []), ("p", "Placeholder", []),
                             ("cond/Switch", "Switch", ["x", "p"])):
        node = gd.node.add(name=name, op=op, input=inputs)
        node.attr["dtype" if op == "Placeholder" else "T"].type = 1 if name != "p" else 10
    with pytest.raises(ValueError, match="node .cond/Switch. has op type .Switch.*TF1.s cond"):
        gc.import_graph_def(gd, name="")


def test_tf_loop_gradients_match_finite_differences():
    """The values TF printed for its gradient loops, checked independently: central
    differences of y = f^4(x), f(y) = tanh(y) w + sigmoid(y x), in float64."""
    run = EXPECTED["loop_gradients_tf"]["runs"][0]
    xv, wv = np.array(run["feed"]["x"]), np.array(run["feed"]["w"])

    def loss(xa, wa):
        ya = xa.copy()
        for _ in range(4):
            ya = np.tanh(ya) * wa + 1 / (1 + np.exp(-ya * xa))
        return np.sum(ya * [1.0, -2.0, 0.5])
    eps, basis = 1e-6, np.eye(3)
    want_dx = [(loss(xv + eps * e, wv) - loss(xv - eps * e, wv)) / (2 * eps) for e in basis]
    want_dw = [(loss(xv, wv + eps * e) - loss(xv, wv - eps * e)) / (2 * eps) for e in basis]
    imported("loop_gradients_tf")
    with gc.Session() as sess:
        dx, dw = sess.run(["dx:0", "dw:0"], feed_of(run))
    np.testing.assert_allclose(dx, want_dx, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-7, atol=1e-9)
