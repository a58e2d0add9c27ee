"""GraphDefs that TensorFlow 2.21 wrote in tf.compat.v1 graph mode with control flow v2
(While/StatelessWhile/If/StatelessIf ops, their bodies FunctionDefs of the library,
nested ones included): graphc imports and runs them, giving what TF printed when it
made them (tests/data/tf_control_flow/make_fixtures.py wrote the .pb files and
expected.json; TF is not needed here)."""
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


@pytest.mark.parametrize("name", ["while_tf", "cond_tf"])
def test_tf_written_loops_and_conds_give_tfs_values(name):
    expected = imported(name)
    with gc.Session() as sess:
        for run in expected["runs"]:
            feed = {f"{k}:0": v for k, v in run["feed"].items()}
            got = sess.run(expected["fetches"], feed)
            for g, want, fetch in zip(got, run["values"], expected["fetches"]):
                np.testing.assert_allclose(g, np.asarray(want, np.asarray(g).dtype),
                                           rtol=1e-6, atol=1e-6, err_msg=fetch)


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
