"""A While on the GPU target, device loop against host-driven: per run, the launches, the
device->host copies and the process CPU seconds (median of --repeats runs), for a counter
loop, an RNN cell over a small state and dynamic_rnn's LSTM training step.

    python tools/gpu_loop_bench.py [--backend gpu_emulated|gpu] [--trips 1023] [--repeats 5]

On gpu_emulated the seconds are the host's (kernels run on the CPU; what the device form
saves there is the Python per iteration and the launch calls); on a GPU they are the
run's wall time as the host sees it. The counts are the device's counters where it has
them (the emulated device does).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import graphc as gc  # noqa: E402


def counter(trips):
    n = gc.placeholder(gc.int32, [])
    _, s = gc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + 2 * i + 1), [0, 0])
    return s, {n: trips}


def rnn_cell(trips):
    x = gc.placeholder(gc.float32, [8, 32])
    n = gc.placeholder(gc.int32, [])
    w = gc.constant(np.linspace(-0.1, 0.1, 32 * 32, dtype=np.float32).reshape(32, 32))
    _, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)), [0, x])
    return h, {x: np.ones((8, 32), np.float32) * 0.1, n: trips}


def lstm_train(trips):
    from graphc.ops import rnn
    rnn.UNROLL_MAX_STEPS = 0  # a while_loop, whatever the length
    x = gc.placeholder(gc.float32, [8, trips, 16])
    cell = gc.nn.rnn_cell.BasicLSTMCell(32)
    out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float32)
    loss = gc.reduce_sum(out * out)
    step = gc.train.GradientDescentOptimizer(0.01).minimize(loss)
    return [loss, step], {x: np.full((8, trips, 16), 0.01, np.float32)}


WORKLOADS = {"counter": counter, "rnn_cell": rnn_cell, "lstm_train": lstm_train}


def measure(build, trips, repeats, device_loops):
    os.environ["GRAPHC_GPU_DEVICE_LOOPS"] = "1" if device_loops else "0"
    with gc.Graph().as_default():
        fetch, feed = build(trips)
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            sess.run(fetch, feed)  # compiles
            device = sess._gpu
            counts = (getattr(device, "launches", 0), getattr(device, "copies_out", 0))
            seconds = []
            for _ in range(repeats):
                start = time.process_time()
                sess.run(fetch, feed)
                seconds.append(time.process_time() - start)
            launches = (getattr(device, "launches", 0) - counts[0]) / repeats
            copies_out = (getattr(device, "copies_out", 0) - counts[1]) / repeats
    return launches, copies_out, statistics.median(seconds), max(seconds) - min(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gpu_emulated", choices=["gpu_emulated", "gpu"])
    parser.add_argument("--trips", type=int, default=1023)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    args = parser.parse_args()
    os.environ["GRAPHC_BACKEND"] = args.backend
    print(f"{'workload':12} {'form':12} {'launches':>9} {'copies out':>11} "
          f"{'CPU-s median':>13} {'spread':>8}")
    for name in args.workloads:
        for device_loops in (True, False):
            launches, copies, median, spread = measure(WORKLOADS[name], args.trips,
                                                       args.repeats, device_loops)
            form = "device loop" if device_loops else "host-driven"
            print(f"{name:12} {form:12} {launches:9.0f} {copies:11.0f} {median:13.4f} "
                  f"{spread:8.4f}")


if __name__ == "__main__":
    main()
