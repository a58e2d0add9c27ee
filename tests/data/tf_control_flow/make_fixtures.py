"""Writes the control-flow fixtures of tests/test_tf_control_flow_files.py with TensorFlow
2.21 in tf.compat.v1 graph mode with control flow v2 (While/If ops whose bodies are
FunctionDefs of the GraphDef's library), and prints what TF computes for each, as JSON,
to expected.json. Run from the repository root:

    /tmp/tfvenv/bin/python tests/data/tf_control_flow/make_fixtures.py

The tests read the .pb files and expected.json only: they never need TensorFlow."""
import json
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # TF1's rnn cells (tf_keras), not Keras 3

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
HERE = os.path.dirname(os.path.abspath(__file__))


def fixture(name, build, feeds, freeze=False):
    """Builds a graph, writes it to name.pb (its variables frozen into constants with
    TF's convert_variables_to_constants when `freeze`) and returns {fetch name: TF's value}
    for each of the feeds (a list of {placeholder name: value})."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(1)
        fetches = build()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            runs = [sess.run(fetches, {f"{k}:0": v for k, v in feed.items()})
                    for feed in feeds]
            graph_def = graph.as_graph_def()
            if freeze:
                graph_def = v1.graph_util.convert_variables_to_constants(
                    sess, graph_def, [t.op.name for t in fetches])
    with open(os.path.join(HERE, f"{name}.pb"), "wb") as f:
        f.write(graph_def.SerializeToString())
    return {"fetches": [t.name for t in fetches],
            "runs": [{"feed": {k: np.asarray(v).tolist() for k, v in feed.items()},
                      "feed_shapes": {k: list(np.shape(v)) for k, v in feed.items()},
                      "values": [np.asarray(v).tolist() for v in values],
                      "shapes": [list(np.shape(v)) for v in values]}
                     for feed, values in zip(feeds, runs)]}


def while_loop():
    x = v1.placeholder(tf.float32, [3], name="x")
    n = v1.placeholder(tf.int32, [], name="n")
    i, y = v1.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2.0 + x), [0, x],
                         name="loop")
    _, z = v1.while_loop(lambda k, z: tf.reduce_sum(z) < 100.0,
                         lambda k, z: (k + 1, z * 1.5 + 1.0), [0, tf.abs(x)],
                         maximum_iterations=6, name="capped")
    return [tf.identity(i, name="trips"), tf.identity(y, name="y"), tf.identity(z, name="z")]


def cond_and_nesting():
    x = v1.placeholder(tf.float64, [None], name="x")
    p = v1.placeholder(tf.bool, [], name="p")

    def looped():
        return v1.while_loop(lambda j, a: j < 3, lambda j, a: (j + 1, a * x + 1.0),
                             [0, tf.ones_like(x)])[1]
    a = v1.cond(p, looped, lambda: tf.sin(x) * 2.0, name="branch")

    def outer_body(k, acc):
        return k + 1, v1.cond(tf.equal(k % 2, 0), lambda: acc + x, lambda: acc * 0.5)
    _, b = v1.while_loop(lambda k, acc: k < 5, outer_body, [0, tf.zeros_like(x)],
                         name="outer")
    return [tf.identity(a, name="a"), tf.identity(b, name="b")]


def map_fn_graph():
    xs = v1.placeholder(tf.float32, [None, 2], name="xs")
    return [tf.identity(tf.map_fn(lambda r: r * r + 1.0, xs), name="squares")]


def dynamic_rnn_graph():
    """A GRU over sequences of different lengths (TF1's masking), its weights frozen."""
    x = v1.placeholder(tf.float32, [3, None, 2], name="x")
    lengths = v1.placeholder(tf.int32, [3], name="lengths")
    cell = v1.nn.rnn_cell.GRUCell(4, name="gru")
    out, state = v1.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    return [tf.identity(out, name="out"), tf.identity(state, name="state")]


def tensor_array_loop():
    """A TensorArray written in a loop (running sums), read back in a second loop."""
    xs = v1.placeholder(tf.float64, [None, 3], name="xs")
    n = tf.shape(xs)[0]
    sums = tf.TensorArray(tf.float64, size=n)

    def write(t, ta, acc):
        acc = acc + xs[t]
        return t + 1, ta.write(t, acc), acc
    _, sums, _ = v1.while_loop(lambda t, *_: t < n, write,
                               [0, sums, tf.zeros([3], tf.float64)])
    _, total = v1.while_loop(lambda t, s: t < n,
                             lambda t, s: (t + 1, s + sums.read(t) * 2.0),
                             [0, tf.zeros([3], tf.float64)])
    return [tf.identity(sums.stack(), name="stacked"), tf.identity(total, name="total")]


def loop_gradients():
    """TF's own gradient loops: the forward loop pushes each iteration's values on
    TensorList accumulators, the backward loop pops them."""
    x = v1.placeholder(tf.float64, [3], name="x")
    w = v1.placeholder(tf.float64, [3], name="w")
    _, y = v1.while_loop(lambda i, y: i < 4,
                         lambda i, y: (i + 1, tf.tanh(y) * w + tf.sigmoid(y * x)), [0, x])
    dx, dw = tf.gradients(tf.reduce_sum(y * [1.0, -2.0, 0.5]), [x, w])
    return [tf.identity(y, name="y"), tf.identity(dx, name="dx"), tf.identity(dw, name="dw")]


def v1_frames():
    """TF1's own loops (Enter/Merge/Switch/NextIteration/Exit frames), a nested one too."""
    v1.disable_control_flow_v2()
    try:
        x = v1.placeholder(tf.float32, [3], name="x")
        n = v1.placeholder(tf.int32, [], name="n")
        i, y = v1.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2.0 + x),
                             [0, x], name="loop")

        def outer_body(k, acc):
            inner = v1.while_loop(lambda j, a: j < k, lambda j, a: (j + 1, a + x * 0.5),
                                  [0, acc], name="inner")[1]
            return k + 1, inner - 1.0
        _, z = v1.while_loop(lambda k, acc: k < n, outer_body, [0, tf.zeros_like(x)],
                             name="outer")
        return [tf.identity(i, name="trips"), tf.identity(y, name="y"),
                tf.identity(z, name="z")]
    finally:
        v1.enable_control_flow_v2()


def main():
    v1.disable_eager_execution()
    v1.enable_control_flow_v2()
    v1.disable_resource_variables()  # TF1's variables, which TF's freezing makes constants
    rng = np.random.default_rng(0)
    expected = {
        "while_tf": fixture("while_tf", while_loop, [
            {"x": [0.5, -1.0, 2.0], "n": 4}, {"x": [3.0, 0.0, -0.25], "n": 0}]),
        "cond_tf": fixture("cond_tf", cond_and_nesting, [
            {"x": [0.5, -1.5, 2.0], "p": True}, {"x": [0.5, -1.5, 2.0], "p": False},
            {"x": [], "p": True}]),
        "map_fn_tf": fixture("map_fn_tf", map_fn_graph, [
            {"xs": rng.standard_normal((4, 2)).astype(np.float32)},
            {"xs": np.zeros((0, 2), np.float32)}]),
        "tensor_array_tf": fixture("tensor_array_tf", tensor_array_loop, [
            {"xs": rng.standard_normal((5, 3))}]),
        "dynamic_rnn_tf": fixture("dynamic_rnn_tf", dynamic_rnn_graph, [
            {"x": rng.standard_normal((3, 5, 2)).astype(np.float32), "lengths": [5, 2, 0]}],
            freeze=True),
        "loop_gradients_tf": fixture("loop_gradients_tf", loop_gradients, [
            {"x": [0.3, -0.7, 1.1], "w": [0.9, 1.2, -0.4]}]),
        "v1_frames_tf": fixture("v1_frames_tf", v1_frames, [
            {"x": [0.5, -1.0, 2.0], "n": 4}, {"x": [3.0, 0.0, -0.25], "n": 0}]),
    }
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main()
