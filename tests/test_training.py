"""End to end: models train (the loss falls a lot) and the examples run."""
import os
import re
import subprocess
import sys

import numpy as np
import graphc as gc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(loss, feed, optimizer, steps):
    train_op = optimizer.minimize(loss)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(loss, feed)
        for _ in range(steps):
            sess.run(train_op, feed)
        return first, sess.run(loss, feed)


def test_linear_regression_by_gradient_descent():
    rng = np.random.default_rng(0)
    xv = rng.uniform(-1, 1, (100, 3)).astype(np.float32)
    yv = xv @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.7
    x = gc.placeholder(gc.float32, [None, 3])
    y = gc.placeholder(gc.float32, [None, 1])
    pred = gc.layers.dense(x, 1)
    loss = gc.losses.mean_squared_error(y, pred)
    first, last = _train(loss, {x: xv, y: yv}, gc.train.GradientDescentOptimizer(0.3), 150)
    assert last < first / 100


def test_two_layer_mlp_with_adam():
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((128, 4)).astype(np.float32)
    labels = ((xv[:, 0] * xv[:, 1] > 0).astype(np.int32) + (xv[:, 2] > 0.5)).astype(np.int32)
    x = gc.placeholder(gc.float32, [None, 4])
    y = gc.placeholder(gc.int32, [None])
    gc.set_random_seed(0)
    h = gc.layers.dense(x, 32, activation=gc.nn.tanh)
    logits = gc.layers.dense(h, 3)
    loss = gc.losses.sparse_softmax_cross_entropy(y, logits)
    first, last = _train(loss, {x: xv, y: labels}, gc.train.AdamOptimizer(0.02), 300)
    assert last < first / 10


def test_batch_norm_model_trains_with_update_ops():
    rng = np.random.default_rng(2)
    gc.set_random_seed(2)  # the dense kernel's initial values: the run is reproducible
    xv = (rng.standard_normal((64, 3)) * 5 + 10).astype(np.float32)
    yv = (xv.sum(1, keepdims=True) - 30) / 5
    x = gc.placeholder(gc.float32, [None, 3])
    y = gc.placeholder(gc.float32, [None, 1])
    training = gc.placeholder_with_default(True, [])
    h = gc.layers.batch_normalization(x, training=training)
    loss = gc.losses.mean_squared_error(y, gc.layers.dense(h, 1))
    with gc.control_dependencies(gc.get_collection(gc.GraphKeys.UPDATE_OPS)):
        train_op = gc.train.AdamOptimizer(0.05).minimize(loss)
    moving_mean = [v for v in gc.global_variables() if "moving_mean" in v.name][0]
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(loss, {x: xv, y: yv})
        for _ in range(300):
            sess.run(train_op, {x: xv, y: yv})
        assert sess.run(loss, {x: xv, y: yv, training: False}) < first / 10
        np.testing.assert_allclose(sess.run(moving_mean), xv.mean(0), rtol=0.05)


def _run_example(name, *args, timeout=120, backend=None):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if backend:
        env["GRAPHC_BACKEND"] = backend
    proc = subprocess.run([sys.executable, os.path.join(REPO, "examples", name), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_linear_regression_example():
    out = _run_example("linear_regression.py", "--steps", "100")
    w, b = map(float, re.search(r"w = ([-\d.]+).*b = ([-\d.]+)", out).groups())
    assert abs(w - 3) < 0.1 and abs(b - 2) < 0.1


def test_mnist_mlp_example(tmp_path):
    out = _run_example("mnist_mlp.py", "--epochs", "4", "--out", str(tmp_path))
    accuracy = float(re.search(r"^test accuracy: ([\d.]+)", out, re.M).group(1))
    restored = float(re.search(r"restored test accuracy: ([\d.]+)", out).group(1))
    assert accuracy > 0.85
    assert restored == accuracy
    assert "steps/s" in out and os.listdir(tmp_path)
    epochs = re.findall(r"^epoch +(\d+)  loss [\d.]+  train accuracy ([\d.]+)  ([\d.]+) ms$",
                        out, re.M)
    assert [int(e) for e, _, _ in epochs] == [1, 2, 3, 4], out
    assert all(0 <= float(a) <= 1 for _, a, _ in epochs) and float(epochs[-1][1]) > 0.5
    # the exported model, run by the standalone runtime (the script asserts that neither
    # graphc nor kernels was imported), scores the same
    out = _run_example("mnist_mlp_runtime.py", str(tmp_path))
    assert float(re.search(r"runtime test accuracy: ([\d.]+)", out).group(1)) == accuracy


def test_examples_train_to_the_same_accuracy_on_both_backends(tmp_path):
    """The compiled backend (the default) and the reference executor reach the same test
    accuracy on the flagship example: same data order, same seeds, same math."""
    results = {}
    for backend in ("compiled", "reference"):
        env_out = _run_example("mnist_mlp.py", "--epochs", "3", "--out",
                               str(tmp_path / backend), backend=backend)
        results[backend] = float(re.search(r"^test accuracy: ([\d.]+)", env_out, re.M).group(1))
    assert abs(results["compiled"] - results["reference"]) <= 0.01, results


def test_cnn_example():
    out = _run_example("cnn.py", "--steps", "40")
    accuracy = float(re.search(r"test accuracy: ([\d.]+)", out).group(1))
    assert accuracy > 0.6  # 40 steps: far above chance (0.1), not yet converged
    steps = re.findall(r"^step +\d+  loss [\d.]+  train accuracy ([\d.]+)  [\d.]+ ms/step$",
                       out, re.M)
    assert len(steps) == 10 and all(0 <= float(a) <= 1 for a in steps), out


def test_sequence_rnn_example():
    """dynamic_rnn over batches of other lengths: learns (chance is about 0.3: the most
    common letter of a short string) and compiles its training step once."""
    out = _run_example("sequence_rnn.py", "--steps", "200")
    accuracy = float(re.search(r"test accuracy: ([\d.]+)", out).group(1))
    assert accuracy > 0.8
    assert "the training step compiled 1 time(s)" in out
    steps = re.findall(r"^step +\d+  loss [\d.]+  train accuracy ([\d.]+)  [\d.]+ ms/step$",
                       out, re.M)
    assert len(steps) == 10 and all(0 <= float(a) <= 1 for a in steps), out


def test_linear_regression_docstring_matches_its_defaults():
    sys.path.insert(0, os.path.join(REPO, "examples"))
    try:
        import linear_regression
    finally:
        sys.path.pop(0)
    usage = re.search(r"python examples/linear_regression.py (.*)", linear_regression.__doc__)
    documented = dict(re.findall(r"\[--([\w-]+) ([^\]]+)\]", usage.group(1)))
    parser = linear_regression.make_parser()
    defaults = {a.option_strings[0][2:]: a.default for a in parser._actions
                if a.option_strings and a.option_strings[0].startswith("--")
                and a.default is not None and a.dest != "help"}
    assert {k: type(defaults[k])(v) for k, v in documented.items()} == defaults
