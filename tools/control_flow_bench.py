"""dynamic_rnn (one while_loop) against static_rnn (unrolled): graph size, build time, and
one training step's time, over the number of time steps.

    python tools/control_flow_bench.py [--steps 32 128 512] [--backend reference]
    python tools/control_flow_bench.py --inference [--host-loops] [--repeat 20]
    GRAPHC_NUM_THREADS=2 python tools/control_flow_bench.py --workload lstm_train \
        --backend compiled

The graph of dynamic_rnn does not grow with the steps (its ops, bodies included, are
counted); static_rnn's does. A training step (first run: compile + run, wall and process
CPU seconds, then the median of --repeat steps) runs dynamic_rnn's forward loop, which
keeps stacks for the gradient sized by its maximum_iterations, and its backward loop
natively on the CPU with --backend compiled; the saved forward values (the stacks the
backward loop pops) are reported in bytes.

--inference times the forward pass alone, dynamic_rnn over a time dim unknown when the
graph is built (its while_loop, compiled natively on the CPU: graphc/compiler/regions.py)
against static_rnn: the first run (compile + run, wall and process CPU seconds) and the
median of --repeat runs. --host-loops runs the loops and TensorArrays on the host as
before they compiled (the comparison of before and after in one process).

--workload lstm_train trains tools/peers_bench.py's lstm_train (its batch, input, hidden and
classes: a dense layer and sparse softmax cross-entropy at every step, SGD) with the sequence
length set by --steps, its LSTM written with dynamic_rnn or static_rnn; the default
workload is the small LSTM above with a mean-square loss. With both kinds, lstm_train
compiles both graphs of a length, then alternates their steps (lstm_train_side_by_side)
and prints the ratio of their step times."""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import graphc as gc  # noqa: E402

BATCH, DEPTH, UNITS = 16, 16, 32


def all_ops(graph):
    ops = graph.get_operations()
    return len(ops) + sum(all_ops(f) for f in graph._functions.values())


def build(steps, kind):
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        x = gc.placeholder(gc.float32, [BATCH, steps, DEPTH])
        cell = gc.nn.rnn_cell.BasicLSTMCell(UNITS)
        if kind == "dynamic":
            out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
        else:
            out = gc.stack(gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)[0], 1)
        loss = gc.reduce_mean(out * out)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = gc.global_variables_initializer()
    return g, x, loss, train, init


def build_lstm_train(steps, kind):
    """peers_bench's lstm_train over `steps` time steps (its dims: tools/peers_bench.py)."""
    from peers_bench import LB, LH, LI, LR, LV
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        x = gc.placeholder(gc.float32, [LB, steps, LI])
        y = gc.placeholder(gc.int32, [LB, steps])
        cell = gc.nn.rnn_cell.BasicLSTMCell(LH)
        if kind == "dynamic":
            out, _ = _looped_dynamic_rnn(cell, x)
        else:
            out = gc.stack(gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)[0], 1)
        logits = gc.layers.dense(gc.reshape(out, [LB * steps, LH]), LV)
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=gc.reshape(y, [-1]), logits=logits))
        train = gc.train.GradientDescentOptimizer(LR).minimize(loss)
        init = gc.global_variables_initializer()
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((LB, steps, LI)).astype(np.float32),
            y: rng.integers(0, LV, (LB, steps)).astype(np.int32)}
    return g, feed, train, init


def _looped_dynamic_rnn(cell, x):
    """dynamic_rnn as its while_loop at every length: graphc unrolls short known lengths
    (graphc/ops/rnn.py UNROLL_MAX_STEPS), which would make the 32 steps a static_rnn."""
    from graphc.ops import rnn
    unroll, rnn.UNROLL_MAX_STEPS = rnn.UNROLL_MAX_STEPS, 0
    try:
        return gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
    finally:
        rnn.UNROLL_MAX_STEPS = unroll


def lstm_train(args):
    from peers_bench import LB, LH, LI, LV
    print(f"lstm_train: LSTM {LH} units, batch {LB}, input {LI}, {LV} classes, backend "
          f"{args.backend}, GRAPHC_NUM_THREADS={os.environ.get('GRAPHC_NUM_THREADS', '(all)')}")
    if len(args.kinds) == 2:
        return lstm_train_side_by_side(args)
    print(_TIMED_HEADER)
    for steps in args.steps:
        for kind in args.kinds:
            g, feed, train, init = build_lstm_train(steps, kind)
            _print_timed_row(kind, steps, g, None, train, init, feed, args.repeat)


def lstm_train_side_by_side(args):
    """Both graphs' steps alternated, one of each per round: on a shared machine a load
    that comes and goes then weighs on both alike. The ratio is the median of the rounds'
    dynamic/static CPU times (and its range over the rounds' middle half). compile cpu s:
    the process CPU seconds inside graphc's compiles of the first run (CompileCpu), which
    also pays for first touching the arena (its stacks grow with the steps)."""
    print(f"{'steps':>5} {'kind':8} {'ops':>6} {'first run s':>11} {'first cpu s':>11} "
          f"{'compile cpu s':>13} {'step cpu ms':>11} {'step wall ms':>12}   "
          f"dynamic/static cpu (IQR)")
    for steps in args.steps:
        sessions, rows = {}, {}
        try:
            for kind in ("dynamic", "static"):
                g, feed, train, init = build_lstm_train(steps, kind)
                sess = gc.Session(graph=g)
                sess.run(init)
                t0, c0 = time.perf_counter(), time.process_time()
                with CompileCpu() as compiling:
                    sess.run(train, feed)
                sessions[kind] = (sess, train, feed)
                rows[kind] = [all_ops(g), time.perf_counter() - t0, time.process_time() - c0,
                              compiling.seconds, [], []]
            for _ in range(args.repeat):
                for kind, (sess, train, feed) in sessions.items():
                    t0, c0 = time.perf_counter(), time.process_time()
                    sess.run(train, feed)
                    rows[kind][4].append(time.process_time() - c0)
                    rows[kind][5].append(time.perf_counter() - t0)
        finally:
            for sess, _, _ in sessions.values():
                sess.close()
        ratios = np.array(rows["dynamic"][4]) / np.array(rows["static"][4])
        for kind, (ops, first, first_cpu, compile_cpu, cpu, wall) in rows.items():
            ratio = (f"   {np.median(ratios):.3f} ({np.percentile(ratios, 25):.3f}-"
                     f"{np.percentile(ratios, 75):.3f})" if kind == "static" else "")
            print(f"{steps:5d} {kind:8} {ops:6d} {first:11.2f} {first_cpu:11.2f} "
                  f"{compile_cpu:13.2f} {1000 * np.median(cpu):11.3f} "
                  f"{1000 * np.median(wall):12.3f}{ratio}", flush=True)


class CompileCpu:
    """Counts the process CPU seconds spent inside graphc's compiles (each one a
    profiling.CompileWatch) while it is entered."""

    def __enter__(self):
        from graphc import profiling
        self.seconds, self._watch = 0.0, profiling.CompileWatch
        enter, leave = self._watch.__enter__, self._watch.__exit__
        self._restore = enter, leave
        counter = self

        def timed_enter(watch):
            watch.cpu_start = time.process_time()
            return enter(watch)

        def timed_exit(watch, *exc):
            counter.seconds += time.process_time() - watch.cpu_start
            return leave(watch, *exc)
        self._watch.__enter__, self._watch.__exit__ = timed_enter, timed_exit
        return self

    def __exit__(self, *exc):
        self._watch.__enter__, self._watch.__exit__ = self._restore
        return False


def saved_bytes(graph, sess, x, xv):
    """Bytes of the stacks the forward loops keep for the gradient."""
    stacks = [t for op in graph.get_operations() if op.type == "While"
              for t in op.outputs[op.attrs["num_loop_vars"] + 1:]]
    return sum(a.nbytes for a in sess.run(stacks, {x: xv})) if stacks else 0


def build_inference(steps, kind):
    g = gc.Graph()
    with g.as_default():
        gc.set_random_seed(0)
        cell = gc.nn.rnn_cell.BasicLSTMCell(UNITS)
        if kind == "dynamic":  # time unknown when built: the loop, never unrolled
            x = gc.placeholder(gc.float32, [BATCH, None, DEPTH])
            out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
        else:
            x = gc.placeholder(gc.float32, [BATCH, steps, DEPTH])
            out = gc.stack(gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=gc.float32)[0], 1)
        init = gc.global_variables_initializer()
    return g, x, out, init


def inference(args):
    print(f"LSTM {UNITS} units, batch {BATCH}, depth {DEPTH}, forward only, backend "
          f"{args.backend}{', loops on the host' if args.host_loops else ''}")
    print(_TIMED_HEADER)
    for steps in args.steps:
        xv = np.random.default_rng(0).standard_normal((BATCH, steps, DEPTH)).astype(np.float32)
        for kind in args.kinds:
            g, x, out, init = build_inference(steps, kind)
            _print_timed_row(kind, steps, g, x, out, init, xv, args.repeat)


_TIMED_HEADER = (f"{'kind':8} {'steps':>6} {'ops':>7} {'first run s':>11} "
                 f"{'first cpu s':>11} {'step cpu ms':>11} {'step wall ms':>12}")


def _print_timed_row(kind, steps, g, x, out, init, xv, repeat):
    """One row of _TIMED_HEADER's table: _timed_runs of the graph g."""
    try:
        row = _timed_runs(g, x, out, init, xv, repeat)
    except RecursionError:  # the unrolled graph is too deep for the compiler
        print(f"{kind:8} {steps:6d} {all_ops(g):7d} RecursionError compiling")
        return
    print(f"{kind:8} {steps:6d} {all_ops(g):7d} " +
          " ".join(f"{v:{w}.{p}f}" for v, w, p in zip(row, (11, 11, 11, 12), (2, 2, 3, 3))),
          flush=True)


def _timed_runs(g, x, out, init, xv, repeat):
    """(first run wall s, its process CPU s, median CPU ms and wall ms of the next runs):
    CPU seconds, since the machine is shared and wall times are noisy. x None: xv is the
    whole feed dict."""
    feed = xv if x is None else {x: xv}
    with gc.Session(graph=g) as sess:
        sess.run(init)
        t0, c0 = time.perf_counter(), time.process_time()
        sess.run(out, feed)
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        cpu, wall = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            sess.run(out, feed)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - t0)
    return first, first_cpu, 1000 * float(np.median(cpu)), 1000 * float(np.median(wall))


def host_loops():
    """The loops and TensorArrays on the host, as before they compiled natively."""
    from graphc import compiled_executor
    compiled_executor.compiles_natively = lambda op, is_host_op: False
    compiled_executor.tensor_array_compiles = lambda op: False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--backend", default=os.environ.get("GRAPHC_BACKEND", "reference"))
    parser.add_argument("--inference", action="store_true")
    parser.add_argument("--workload", choices=["small", "lstm_train"], default="small",
                        help="lstm_train: tools/peers_bench.py's (module doc)")
    parser.add_argument("--host-loops", action="store_true")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--kinds", nargs="+", default=["dynamic", "static"],
                        choices=["dynamic", "static"], help="which graphs")
    args = parser.parse_args()
    if args.inference and "GRAPHC_BACKEND" not in os.environ and \
            "--backend" not in sys.argv:
        args.backend = "compiled"
    os.environ["GRAPHC_BACKEND"] = args.backend
    if args.host_loops:
        host_loops()
    if args.inference:
        return inference(args)
    if args.workload == "lstm_train":
        return lstm_train(args)
    import warnings
    warnings.filterwarnings("ignore", "graphc could not compile")
    print(f"LSTM {UNITS} units, batch {BATCH}, depth {DEPTH}, backend {args.backend}")
    print(f"{'kind':8} {'steps':>6} {'ops':>7} {'build s':>8} {'first run s':>11} "
          f"{'first cpu s':>11} {'step cpu ms':>11} {'step wall ms':>12} {'saved MB':>9}")
    for steps in args.steps:
        xv = np.random.default_rng(0).standard_normal((BATCH, steps, DEPTH)).astype(np.float32)
        for kind in args.kinds:
            t0 = time.perf_counter()
            g, x, loss, train, init = build(steps, kind)
            built = time.perf_counter() - t0
            row = _timed_runs(g, x, train, init, xv, args.repeat)
            with gc.Session(graph=g) as sess:
                sess.run(init)
                saved = saved_bytes(g, sess, x, xv) / 2 ** 20
            print(f"{kind:8} {steps:6d} {all_ops(g):7d} {built:8.2f} " +
                  " ".join(f"{v:{w}.{p}f}" for v, w, p in zip(row, (11, 11, 11, 12),
                                                             (2, 2, 3, 3))) +
                  f" {saved:9.2f}")

if __name__ == "__main__":
    main()
