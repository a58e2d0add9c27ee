#!/usr/bin/env python3
"""Cold and warm compile time of the first Session.run, each in a fresh process.

For each model (mlp_train: the W3 benchmark step, 784-512-512-10 relu, batch 128, sparse
xent, one SGD step; flagship: examples/mnist_mlp.py's model, one Adam step on a batch of
64 digits) a child process builds the graph, runs the initializer, then times the first
`sess.run(train_op)` (lowering, passes, codegen, LLVM, one step) and a second run.
"cold": a new empty on-disk cache (runtime/compile_cache.py) per repeat;
"warm": the same process again over the cache the cold run filled (LLVM is skipped).
Prints the median over --repeats of each and the cache hits the warm child saw.

    python tools/compile_time.py [--models mlp_train,flagship] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS_MS = {"cold": 300.0, "warm": 30.0}  # issue 3's targets for W3


def build_mlp_train():
    import numpy as np
    import graphc as gc
    rng = np.random.default_rng(0)
    f32 = np.float32

    def he(i, o):
        return (rng.standard_normal((i, o), dtype=f32) * np.sqrt(2.0 / i)).astype(f32)

    x = gc.placeholder(gc.float32, [128, 784], name="x")
    y = gc.placeholder(gc.int32, [128], name="y")
    w1, b1 = gc.Variable(he(784, 512), name="W1"), gc.Variable(np.zeros(512, f32), name="b1")
    w2, b2 = gc.Variable(he(512, 512), name="W2"), gc.Variable(np.zeros(512, f32), name="b2")
    w3, b3 = gc.Variable(he(512, 10), name="W3"), gc.Variable(np.zeros(10, f32), name="b3")
    h = gc.nn.relu(gc.matmul(x, w1) + b1)
    h = gc.nn.relu(gc.matmul(h, w2) + b2)
    logits = gc.matmul(h, w3) + b3
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train_op = gc.train.GradientDescentOptimizer(0.01).minimize(loss)
    feed = {x: rng.standard_normal((128, 784), dtype=f32),
            y: rng.integers(0, 10, 128).astype(np.int32)}
    return train_op, feed


def build_flagship():
    import numpy as np
    import graphc as gc
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import mnist_mlp
    gc.set_random_seed(0)  # as the example does; unseeded dropout differs per process
    x_train, y_train, _, _ = mnist_mlp.load_split()
    images, labels, training, loss, train_op = mnist_mlp.build_model(x_train.shape[1])[:5]
    feed = {images: x_train[:64], labels: y_train[:64], training: np.bool_(True)}
    return [train_op, loss], feed


MODELS = {"mlp_train": build_mlp_train, "flagship": build_flagship}


def child(model):
    """Runs in the fresh process: prints one JSON line of timings."""
    import time
    import warnings
    import graphc as gc
    from runtime import compile_cache
    fetches, feed = MODELS[model]()
    sess = gc.Session()
    sess.run(gc.global_variables_initializer())
    before = dict(compile_cache.stats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        sess.run(fetches, feed)
        first = time.perf_counter() - t0
    fallback = [str(w.message).splitlines()[0] for w in caught
                if "could not compile" in str(w.message)]
    t0 = time.perf_counter()
    sess.run(fetches, feed)
    second = time.perf_counter() - t0
    hits = compile_cache.stats["hits"] - before["hits"]
    misses = compile_cache.stats["misses"] - before["misses"]
    print(json.dumps({"first_ms": first * 1e3, "second_ms": second * 1e3, "hits": hits,
                      "llvm_modules": hits + misses, "fallback": fallback}))


def spawn(model, cache_dir):
    env = dict(os.environ, GRAPHC_CACHE_DIR=cache_dir, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, __file__, "--child", model], env=env, cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    for model in args.models.split(","):
        cold, warm, hits = [], [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="graphc_cache_") as cache_dir:
                cold.append(spawn(model, cache_dir)["first_ms"])
                w = spawn(model, cache_dir)
                warm.append(w["first_ms"])
                hits.append(w["hits"])
        line = (f"{model:10s} first run cold {statistics.median(cold):7.1f} ms  "
                f"warm {statistics.median(warm):6.1f} ms  (warm: {min(hits)} of "
                f"{w['llvm_modules']} LLVM modules from the cache; targets for W3: "
                f"< {TARGETS_MS['cold']:.0f} / < {TARGETS_MS['warm']:.0f} ms)")
        print(line, flush=True)
        if w["fallback"]:
            print(f"{'':10s} NOT COMPILED: {w['fallback'][0]}", flush=True)


if __name__ == "__main__":
    main()
