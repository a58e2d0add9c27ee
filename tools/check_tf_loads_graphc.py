"""Checks that TensorFlow loads the GraphDefs graphc writes for control flow and computes
what graphc computes. Two steps, graphc's Python then TF's:

    python tools/check_tf_loads_graphc.py write /tmp/tfcheck
    /tmp/tfvenv/bin/python tools/check_tf_loads_graphc.py check /tmp/tfcheck

`write` builds each case with graphc, writes CASE.pb and graphc's values (cases.json);
`check` imports each .pb into TF 2.21 (tf.compat.v1 graph mode), runs the same fetches
and prints, per case, whether TF's values equal graphc's."""
import json
import os
import sys

import numpy as np


def _cases(gc):
    def loop_reading_a_variable():
        x = gc.placeholder(gc.float32, [3], name="x")
        w = gc.Variable(np.array([1.0, -2.0, 0.5], np.float32), name="w")
        i, y = gc.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, gc.tanh(y) * w + x),
                             [0, x])
        return [i, y], {"x": [0.5, -1.0, 2.0]}

    def nested_loop_in_cond_in_loop():
        x = gc.placeholder(gc.float64, [None], name="x")
        n = gc.placeholder(gc.int32, [], name="n")

        def body(k, acc):
            inner = gc.while_loop(lambda j, a: j < k, lambda j, a: (j + 1, a + x), [0, acc])
            return k + 1, gc.cond(k % 2 > 0, lambda: inner[1], lambda: acc * 0.5)
        return list(gc.while_loop(lambda k, acc: k < n, body, [0, gc.zeros_like(x)])), \
            {"x": [1.0, -2.0, 3.0], "n": 5}

    def cond_of_structures_with_maximum_iterations():
        x = gc.placeholder(gc.float32, [2, 2], name="x")
        a, b = gc.cond(gc.reduce_sum(x) > 0, lambda: (gc.matmul(x, x), x * 2.0),
                       lambda: (x - 1.0, gc.transpose(x)))
        _, z = gc.while_loop(lambda i, z: gc.reduce_sum(z) < 50.0,
                             lambda i, z: (i + 1, z * 1.5 + 1.0), [0, gc.abs(x)],
                             maximum_iterations=4)
        return [a, b, z], {"x": [[1.0, 2.0], [-0.5, 0.25]]}

    def cond_reading_variables():
        x = gc.placeholder(gc.float32, [None, 2], name="x")
        w = gc.Variable(np.array([[1.0, 0.5], [-1.0, 2.0]], np.float32), name="w")
        b = gc.Variable(np.array([0.25, -0.75], np.float32), name="b")
        y = gc.cond(gc.shape(x)[0] > 0, lambda: gc.matmul(x, w) + b, lambda: x * b)
        return [y], {"x": [[1.0, -2.0], [0.5, 0.0], [3.0, 1.0]]}

    return {"loop_reading_a_variable": loop_reading_a_variable,
            "cond_reading_variables": cond_reading_variables,
            "nested_loop_in_cond_in_loop": nested_loop_in_cond_in_loop,
            "cond_of_structures_with_maximum_iterations":
                cond_of_structures_with_maximum_iterations}


def write(directory):
    import graphc as gc
    os.makedirs(directory, exist_ok=True)
    record = {}
    for name, build in _cases(gc).items():
        gc.reset_default_graph()
        fetches, feed = build()
        init = gc.global_variables_initializer()
        with gc.Session() as sess:
            sess.run(init)
            values = sess.run(fetches, {f"{k}:0": v for k, v in feed.items()})
        gc.train.write_graph(gc.get_default_graph(), directory, f"{name}.pb", as_text=False)
        record[name] = {"fetches": [t.name for t in fetches], "feed": feed, "init": init.name,
                        "values": [np.asarray(v).tolist() for v in values]}
    with open(os.path.join(directory, "cases.json"), "w") as f:
        json.dump(record, f)


def check(directory):
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    with open(os.path.join(directory, "cases.json")) as f:
        record = json.load(f)
    failures = 0
    for name, case in record.items():
        graph_def = v1.GraphDef()
        with open(os.path.join(directory, f"{name}.pb"), "rb") as f:
            graph_def.ParseFromString(f.read())
        with tf.Graph().as_default(), v1.Session() as sess:
            tf.import_graph_def(graph_def, name="")
            sess.run(case["init"])
            got = sess.run(case["fetches"], {f"{k}:0": v for k, v in case["feed"].items()})
        same = all(np.allclose(g, w, rtol=1e-6, atol=1e-6)
                   for g, w in zip(got, case["values"]))
        failures += not same
        print(f"{name}: TF 2.{tf.__version__.split('.')[1]} loads it, values "
              f"{'equal' if same else 'DIFFER from'} graphc's")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
