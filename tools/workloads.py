"""The workloads of tools/peers_bench.py (an identical copy of ../shared/bench/peers_bench.py,
kept here so that a clone of this repository can run them) built for graphc:
`build(workload, tf)` returns what tools/compile_time.py --scale times. peers_bench.py's
`make_data_new` gives the same initial weights everywhere and its `build_tf1_new` is plain
tf.compat.v1 code, run here with `import graphc as tf`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_bench import build_tf1_new, make_data_new  # noqa: E402


def build(workload, tf):
    """(session, fetch, feed) of one training step of `workload` in a fresh graph, its
    variables initialized the way peers_bench.py's build_tf1 does (initial values fed)."""
    import numpy as np
    g = tf.Graph()
    inits = {}

    def var(name, arr):
        ph = tf.placeholder(tf.as_dtype(arr.dtype), arr.shape, name=name + "_init")
        v = tf.Variable(ph, name=name)
        inits[v.initializer] = {ph: arr}
        return v

    d = make_data_new(workload, np.random.default_rng(0))
    with g.as_default():
        feed, fetch, _, post_init, _ = build_tf1_new(workload, d, tf, var, inits)
    sess = tf.Session(graph=g)
    for op, fd in list(inits.items()) + post_init:
        sess.run(op, fd)
    return sess, fetch, feed
