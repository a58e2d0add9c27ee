"""A training step through a loop whose trip count is decided by the data (no bound the
cond gives: its stacks for the gradient grow during the run, graphc/compiler/regions.py):
h <- tanh(h @ W + b) while a float counter stays below a fed limit, a mean-square loss,
SGD on W and b. Reports the first run (compile + run) and the median of --repeat steps,
in process CPU seconds and wall seconds.

    python tools/unbounded_loop_bench.py [--trips 64 512] [--units 64] [--repeat 15]

Run it in a tree before the change and after, in the same minute, to compare (the
process CPU seconds are what a loaded machine disturbs least)."""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import graphc as gc  # noqa: E402

BATCH = 16


def build(units):
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        h0 = gc.placeholder(gc.float32, [BATCH, units])
        limit = gc.placeholder(gc.float32, [])
        w = gc.Variable(gc.random_normal([units, units], stddev=1.0 / np.sqrt(units)))
        b = gc.Variable(gc.zeros([units]))

        def body(c, h):
            return c + 1, gc.tanh(gc.matmul(h, w) + b)
        h = gc.while_loop(lambda c, h: gc.reduce_sum(c) < limit, body,
                          [gc.zeros([1]), h0])[1]
        loss = gc.reduce_mean(h * h)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = gc.global_variables_initializer()
    return g, h0, limit, loss, train, init


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    for trips in args.trips:
        g, h0, limit, loss, train, init = build(args.units)
        feed = {h0: np.random.default_rng(0).standard_normal((BATCH, args.units))
                .astype(np.float32), limit: np.float32(trips)}
        with gc.Session(graph=g) as sess:
            sess.run(init)
            first = timed(lambda: sess.run([loss, train], feed))
            steps = [timed(lambda: sess.run([loss, train], feed)) for _ in range(args.repeat)]
        cpu = statistics.median(s[0] for s in steps)
        wall = statistics.median(s[1] for s in steps)
        spread = (min(s[0] for s in steps), max(s[0] for s in steps))
        print(f"trips {trips:5d} units {args.units}: first run {first[0]:.3f} CPU-s "
              f"({first[1]:.3f} s wall); step median {cpu * 1e3:.2f} CPU-ms "
              f"(min {spread[0] * 1e3:.2f}, max {spread[1] * 1e3:.2f}; "
              f"{wall * 1e3:.2f} ms wall)")


if __name__ == "__main__":
    main()
