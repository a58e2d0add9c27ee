"""Runs small TF1 programs under real TensorFlow and under graphc and compares what they print.

graphc's tests check it against NumPy references written from TF1's documented semantics;
this tool checks the semantics themselves against TensorFlow, where one is installed (it is
not a dependency: install it in a throwaway venv, as tools/peers_bench.py says):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install numpy tensorflow-cpu tf-keras
    python tools/tf_parity.py --tf-python /tmp/tfvenv/bin/python [--case NAME ...]

Each case is a function of the module (`tensorflow.compat.v1` or `graphc`) that builds a
graph, runs it and returns a dict of results: arrays, numbers, strings (op names) or the
name of the exception class a misuse raised. The TensorFlow side runs in a subprocess of the
given interpreter (this file imported there), hands its results back as JSON, and every
entry is compared: strings exactly, numbers within a few float32 ulps.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _run(tf, fetches, feeds=None, init=True):
    with tf.Session() as sess:
        if init:
            sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feeds)


def _error_class(fn):
    try:
        fn()
    except Exception as e:  # the class is the result
        return type(e).__name__
    return "no error"


@case
def default_names(tf):
    a, b = tf.constant(1.0), tf.constant(2.0)
    made = [tf.add(a, b), a + b, tf.multiply(a, b), a * b, tf.subtract(a, b), a - b, a / b,
            tf.matmul([[1.0]], [[2.0]]), tf.nn.relu(a), tf.reduce_sum(a), tf.reduce_mean(a),
            tf.reshape(a, [1]), tf.zeros_like(a), tf.square(a), tf.sigmoid(a), tf.exp(a),
            tf.nn.softmax([[1.0, 2.0]]), tf.concat([[a], [b]], 0), tf.stack([a, b]),
            tf.cast(a, tf.int32), tf.identity(a), tf.maximum(a, b)]
    return {"names": [t.name for t in made]}


@case
def control_dependencies(tf):
    cnt, f = tf.Variable(0), tf.Variable(1.5)
    with tf.control_dependencies([tf.assign_add(cnt, 100), tf.assign_add(f, 1.0)]):
        after = tf.identity(cnt)
        expr = f * 2.0 + 1.0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        runs = [sess.run([after, expr]) for _ in range(3)]
    return {"after": [int(r[0]) for r in runs], "expr": [float(r[1]) for r in runs]}


@case
def piecewise_gradients_at_kinks(tf):
    x = tf.placeholder(tf.float64, [6])
    points = np.array([0.0, 6.0, -1.0, 1.0, 0.0, 0.0])
    ys = {"relu": tf.nn.relu(x), "relu6": tf.nn.relu6(x), "elu": tf.nn.elu(x),
          "selu": tf.nn.selu(x), "leaky_relu": tf.nn.leaky_relu(x), "abs": tf.abs(x),
          "softplus": tf.nn.softplus(x), "clip": tf.clip_by_value(x, 0.0, 6.0),
          "max_tie": tf.maximum(x, tf.zeros_like(x)), "min_tie": tf.minimum(x, tf.zeros_like(x))}
    grads = {k: tf.gradients(y, x)[0] for k, y in ys.items()}
    values = _run(tf, grads, {x: points}, init=False)
    return {k: np.asarray(v).tolist() for k, v in values.items()}


def _embedding_losses(tf, make_optimizer):
    rng = np.random.RandomState(0)
    table = tf.Variable(rng.randn(20, 4).astype(np.float32))
    w = tf.Variable(rng.randn(4, 3).astype(np.float32))
    batches = [rng.randint(0, 20, size=8) for _ in range(5)]
    batches[1][:4] = 3  # repeated ids are summed before the nonlinear updates
    labels = tf.constant(rng.randint(0, 3, size=8))
    ids = tf.placeholder(tf.int32, [None])
    logits = tf.matmul(tf.nn.embedding_lookup(table, ids), w)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    step = make_optimizer().minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = [float(sess.run([loss, step], {ids: b})[0]) for b in batches]
        return {"losses": losses, "table": sess.run(table).tolist()}


def _optimizer_case(name, make):
    def run(tf):
        return _embedding_losses(tf, lambda: make(tf))
    run.__name__ = name
    case(run)


for _name, _make in {
        "sparse_sgd": lambda tf: tf.train.GradientDescentOptimizer(0.5),
        "sparse_momentum": lambda tf: tf.train.MomentumOptimizer(0.5, 0.9),
        "sparse_nesterov": lambda tf: tf.train.MomentumOptimizer(0.5, 0.9, use_nesterov=True),
        "sparse_adagrad": lambda tf: tf.train.AdagradOptimizer(0.5),
        "sparse_rmsprop": lambda tf: tf.train.RMSPropOptimizer(0.05, momentum=0.5),
        "sparse_rmsprop_centered": lambda tf: tf.train.RMSPropOptimizer(0.05, momentum=0.5,
                                                                         centered=True),
        "sparse_adam": lambda tf: tf.train.AdamOptimizer(0.05)}.items():
    _optimizer_case(_name, _make)


@case
def batch_norm_moving_variance(tf):
    rng = np.random.RandomState(1)
    out = {}
    for shape in [(4, 3, 3, 2), (6, 2)]:
        x = tf.placeholder(tf.float32, shape)
        with tf.variable_scope(f"bn{len(shape)}"):
            y = tf.layers.batch_normalization(x, training=True)
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS, scope=f"bn{len(shape)}")
        moving = [v for v in tf.global_variables()
                  if v.name.startswith(f"bn{len(shape)}/") and "moving_variance" in v.name][0]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run([y] + updates, {x: rng.randn(*shape).astype(np.float32)})
            out[f"rank{len(shape)}"] = sess.run(moving).tolist()
    return out


@case
def layers_reuse_under_scope(tf):
    x = tf.constant(np.ones((2, 3), np.float32))

    def model(reuse):
        with tf.variable_scope("net", reuse=reuse):
            return tf.layers.dense(tf.layers.dense(x, 4), 2)

    model(False)
    model(True)
    return {"variables": sorted(v.name for v in tf.global_variables())}


@case
def constant_with_shape(tf):
    return {"fill_last": _run(tf, tf.constant([1, 2], shape=[2, 3]), init=False).tolist(),
            "too_many": _error_class(lambda: tf.constant([1, 2, 3], shape=[2]))}


@case
def misuse_error_classes(tf):
    x = tf.placeholder(tf.float32, [2])
    y = x * 2.0
    v = tf.Variable(1.0)
    closed = tf.Session()
    closed.close()
    with tf.Session() as sess:
        return {
            "feed_dict_list": _error_class(lambda: sess.run(y, [1, 2])),
            "wrong_feed_shape": _error_class(lambda: sess.run(y, {x: np.zeros(3)})),
            "unfed_placeholder": _error_class(lambda: sess.run(y)),
            "unknown_fetch_name": _error_class(lambda: sess.run("nope:0")),
            "uninitialized_variable": _error_class(lambda: sess.run(v)),
            "closed_session": _error_class(lambda: closed.run(y, {x: np.zeros(2)})),
            "add_incompatible": _error_class(lambda: tf.add(tf.zeros([2]), tf.zeros([3]))),
            "matmul_incompatible": _error_class(lambda: tf.matmul(tf.zeros([2, 3]),
                                                                  tf.zeros([2, 3]))),
            "reshape_impossible": _error_class(lambda: tf.reshape(tf.zeros([2, 4]), [3, 3])),
            "missing_tensor_name": _error_class(
                lambda: tf.get_default_graph().get_tensor_by_name("nope:0")),
        }


@case
def shape_arithmetic_over_unknown_batch(tf):
    x = tf.placeholder(tf.float32, [None, 3])
    n = tf.shape(x)[0]
    made = {"range": tf.range(n), "half": tf.range(n // 2, n), "fill": tf.fill([n, 2], 7.0),
            "mean": tf.reduce_mean(x, 0), "one_hot": tf.one_hot(tf.range(n), 3)}
    with tf.Session() as sess:
        return {f"{k}@{b}": np.asarray(sess.run(t, {x: np.ones((b, 3))})).tolist()
                for b in (1, 4, 7) for k, t in made.items()}


@case
def linear_regression_with_shapeless_placeholders(tf):
    X, Y = tf.placeholder("float"), tf.placeholder("float")
    W, b = tf.Variable(0.3), tf.Variable(0.1)
    cost = tf.reduce_sum(tf.pow(X * W + b - Y, 2)) / (2 * 17)
    step = tf.train.GradientDescentOptimizer(0.01).minimize(cost)
    xs = np.linspace(0, 1, 17)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            for px, py in zip(xs, 2 * xs + 1):
                sess.run(step, {X: px, Y: py})
        return {"W": float(sess.run(W)), "b": float(sess.run(b)),
                "cost": float(sess.run(cost, {X: xs, Y: 2 * xs + 1}))}


@case
def large_static_dims(tf):
    # not compared: tf.one_hot(ids, 2**32 + 3), whose depth TF 2.21 truncates to 3 (its depth
    # input is int32); graphc keeps the depth, on purpose
    return {"zeros": [int(d) for d in tf.zeros([2**32 + 5]).shape],
            "reshape": _error_class(lambda: tf.reshape(tf.zeros([2, 4]), [2**32 + 2, 4]))}


@case
def assign_without_shape_validation(tf):
    v = tf.Variable(np.zeros((6, 2), np.float32))
    value = tf.placeholder(tf.float32, None)
    assign = tf.assign(v, value, validate_shape=False)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(assign, {value: np.full((3, 3), 7.0, np.float32)})
        return {"after": sess.run(v).tolist()}


def run_cases(tf, names):
    results = {}
    for name in names:
        tf.reset_default_graph()
        try:
            results[name] = CASES[name](tf)
        except Exception as e:  # a case that fails on one side is a difference to report
            results[name] = {"raised": f"{type(e).__name__}: {e}"}
    return results


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    if a.shape != b.shape:
        return False
    if a.dtype == object and any(isinstance(e, str) for e in a.ravel()):
        return a.tolist() == b.tolist()
    a, b = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(a, b, rtol=4e-7, atol=4e-7, equal_nan=True))


def _tf_side(names):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.layers needs Keras 2 in TF >= 2.16
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()  # TF1 semantics: ref variables, graph mode
    tf.logging.set_verbosity(tf.logging.ERROR)
    json.dump(run_cases(tf, names), sys.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tf-python", required=False,
                        help="a Python interpreter that has tensorflow installed")
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="run only these cases (default: all)")
    parser.add_argument("--tf-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.case or sorted(CASES)
    if args.tf_side:
        return _tf_side(names)
    if not args.tf_python:
        parser.error("--tf-python is required (an interpreter with tensorflow installed)")
    command = [args.tf_python, os.path.abspath(__file__), "--tf-side"]
    for name in names:
        command += ["--case", name]
    tf_out = subprocess.run(command, check=True, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": ""})
    expected = json.loads(tf_out.stdout)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import graphc
    got = run_cases(graphc, names)
    differing = [n for n in names if not _same(expected[n], got[n])]
    for name in names:
        print(f"{'DIFF' if name in differing else 'same'}  {name}")
        if name in differing:
            print(f"      tf:     {json.dumps(expected[name])[:600]}")
            print(f"      graphc: {json.dumps(got[name])[:600]}")
    print(f"{len(names) - len(differing)} of {len(names)} cases agree with TensorFlow")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
