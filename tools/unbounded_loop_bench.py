"""A training step through a loop whose trip count is decided by the data (no bound the
cond gives: its stacks for the gradient grow during the run, graphc/compiler/regions.py):
h <- tanh(h @ W + b) while a float counter stays below a fed limit, a mean-square loss,
SGD on W and b. Reports the first run (compile + run) and the median of --repeat steps,
in process CPU seconds and wall seconds.
--workload raw_rnn: tf.nn.raw_rnn over an LSTM on variable-length sequences (its loop
runs until every example has finished, appending the cell's outputs to a dynamic_size
TensorArray), a loss of the stacked outputs; "infer" steps run the loss, "train" steps
the loss and SGD on the cell's weights. --trips is the longest sequence.
--workload concat: a loop whose loop variable grows a row per iteration (`out =
concat([out, tanh(x[i] @ W)], 0)` under the shape invariant [None, units], TF1's
accumulation loop), a loss of out; "infer" steps run the loss, "train" steps the loss and
SGD on W (the gradient keeps out's values ragged: ops/while_v2.py).

    python tools/unbounded_loop_bench.py [--workload tanh|raw_rnn] [--trips 64 512]
        [--units 64] [--repeat 15]
    python tools/unbounded_loop_bench.py --workload concat --trips 512

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


def build_raw_rnn(units, trips, training):
    """(graph, feed, loss, train, init) of raw_rnn over an LSTM: BATCH sequences of
    lengths trips, trips - 1, ... (at least 1), inputs of `units` features; train is
    None unless training (a gradient in the graph changes the forward loop's body)."""
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        x = gc.placeholder(gc.float32, [trips, BATCH, units])
        lengths = gc.placeholder(gc.int32, [BATCH])
        inputs_ta = gc.TensorArray(gc.float32, size=trips).unstack(x)
        cell = gc.nn.rnn_cell.BasicLSTMCell(units)

        def loop_fn(time, cell_output, cell_state, loop_state):
            state = cell.zero_state(BATCH, gc.float32) if cell_output is None else cell_state
            return (gc.greater_equal(time, lengths),
                    inputs_ta.read(gc.minimum(time, trips - 1)), state, None, loop_state)
        emit_ta, _, _ = gc.nn.raw_rnn(cell, loop_fn)
        outputs = emit_ta.stack()
        loss = gc.reduce_mean(outputs * outputs)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss) if training else None
        init = gc.global_variables_initializer()
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((trips, BATCH, units)).astype(np.float32),
            lengths: np.maximum(trips - np.arange(BATCH), 1).astype(np.int32)}
    return g, feed, loss, train, init


def build_concat(units, trips, training):
    """(graph, feed, loss, train, init) of the concat-growing loop over `trips` rows."""
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        x = gc.placeholder(gc.float32, [None, units])
        w = gc.Variable(gc.random_normal([units, units], stddev=1.0 / np.sqrt(units)))
        n = gc.shape(x)[0]

        def body(i, out):
            row = gc.expand_dims(gc.gather(x, i), 0)  # x[i:i+1]'s dims depend on data
            return i + 1, gc.concat([out, gc.tanh(gc.matmul(row, w))], 0)
        out = gc.while_loop(lambda i, out: i < n, body, [0, gc.zeros([0, units])],
                            shape_invariants=[gc.TensorShape([]),
                                              gc.TensorShape([None, units])])[1]
        loss = gc.reduce_mean(out * out)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss) if training else None
        init = gc.global_variables_initializer()
    feed = {x: np.random.default_rng(0).standard_normal((trips, units)).astype(np.float32)}
    return g, feed, loss, train, init


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workload", choices=["tanh", "raw_rnn", "concat"], default="tanh")
    args = parser.parse_args()
    builders = {"raw_rnn": build_raw_rnn, "concat": build_concat}
    if args.workload in builders:
        for trips in args.trips:
            for kind in ("infer", "train"):
                g, feed, loss, train, init = builders[args.workload](args.units, trips,
                                                                     kind == "train")
                fetches = [loss] if kind == "infer" else [loss, train]
                report(f"{args.workload} {kind} trips {trips:5d} units {args.units}", g,
                       init, fetches, feed, args.repeat)
        return
    for trips in args.trips:
        g, h0, limit, loss, train, init = build(args.units)
        feed = {h0: np.random.default_rng(0).standard_normal((BATCH, args.units))
                .astype(np.float32), limit: np.float32(trips)}
        report(f"trips {trips:5d} units {args.units}", g, init, [loss, train], feed,
               args.repeat)


def report(label, g, init, fetches, feed, repeat):
    """Prints the first run's and the median step's process CPU and wall seconds."""
    with gc.Session(graph=g) as sess:
        sess.run(init)
        first = timed(lambda: sess.run(fetches, feed))
        steps = [timed(lambda: sess.run(fetches, feed)) for _ in range(repeat)]
    cpu = statistics.median(s[0] for s in steps)
    wall = statistics.median(s[1] for s in steps)
    spread = (min(s[0] for s in steps), max(s[0] for s in steps))
    print(f"{label}: first run {first[0]:.3f} CPU-s ({first[1]:.3f} s wall); step median "
          f"{cpu * 1e3:.2f} CPU-ms (min {spread[0] * 1e3:.2f}, max {spread[1] * 1e3:.2f}; "
          f"{wall * 1e3:.2f} ms wall)")


if __name__ == "__main__":
    main()
