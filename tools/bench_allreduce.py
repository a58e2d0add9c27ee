#!/usr/bin/env python3
"""graphc.distribute's cost: its allreduce against raw mpi4py, and W3's step on 1 and 2 processes.

1. Allreduce (float32 sum, 2 ranks) of buffers from 4 KiB to 64 MiB, three ways on the
   same arrays: raw mpi4py `comm.Allreduce(x, out)`; graphc's MpiAllreduce kernel (the
   header exchange that checks the ranks agree, then the same Allreduce); and a whole
   `Session.run` of a graph holding the op (feeds, the host stage, the fetch). Prints
   ms per call, algorithm bandwidth (bytes / time) and the overhead against raw.
2. W3 (tools/compile_time.py's mlp_train: 784-512-512-10 relu, sparse xent, SGD 0.01) at
   a batch of 128 per process: the plain optimizer on 1 process, DistributedOptimizer on
   1 and on 2 processes (so 2 processes train on 256 examples per step). Prints the
   median step time and the fraction of it spent in collectives (MpiAllreduce kernels).

    python tools/bench_allreduce.py [--ranks 2] [--steps 50] [--json out.json]

Run plainly, it starts itself under mpiexec for each measurement and prints a table.
What a 2-core machine can show: the overhead of graphc's collectives over raw MPI (the
same bytes move through the same shared-memory transport) and the extra work of a step
that is split into native and host stages. What it cannot show: scaling. Two processes
on two cores share the memory bandwidth and the cores the compiled kernels would
otherwise use (each rank runs 1 thread here), and shared-memory MPI says nothing of a
network, where bandwidth is 10-100x lower and fusion matters far more.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]  # bytes


def call_seconds(fns, comm, calls, rounds=9):
    """{name: median over `rounds` of (time of `calls` back-to-back calls) / calls}. The
    ways are interleaved round by round, each round started together on every rank, so
    that a load change on the machine falls on all of them alike."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls)
    return {name: float(np.median(t)) for name, t in times.items()}


def measure_allreduce(comm):
    import graphc as gc
    import graphc.distribute as hvd
    from graphc.framework.op_def import get_op_def
    hvd.init()
    kernel = get_op_def("MpiAllreduce").kernel
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        x = np.random.default_rng(comm.Get_rank()).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        gc.reset_default_graph()
        ph = gc.placeholder(gc.float32, [n])
        y = hvd.allreduce(ph, op=hvd.Sum)
        sess = gc.Session()
        np.testing.assert_array_equal(sess.run(y, {ph: x}), kernel(None, y.op, x))
        calls = max(3, min(100, (16 << 20) // nbytes))
        t = call_seconds({"raw": lambda: comm.Allreduce(x, out),
                          "op": lambda: kernel(None, y.op, x),
                          "session": lambda: sess.run(y, {ph: x})}, comm, calls)
        rows.append({"bytes": nbytes, "raw_ms": t["raw"] * 1e3, "op_ms": t["op"] * 1e3,
                     "session_ms": t["session"] * 1e3})
    return rows


def build_w3(distributed, batch=128):
    """W3's graph (tools/compile_time.py build_mlp_train), this rank's batch fed."""
    import graphc as gc
    import graphc.distribute as hvd
    rng = np.random.default_rng(0)
    f32 = np.float32

    def he(i, o):
        return (rng.standard_normal((i, o), dtype=f32) * np.sqrt(2.0 / i)).astype(f32)

    x = gc.placeholder(gc.float32, [batch, 784], name="x")
    y = gc.placeholder(gc.int32, [batch], name="y")
    w1, b1 = gc.Variable(he(784, 512), name="W1"), gc.Variable(np.zeros(512, f32), name="b1")
    w2, b2 = gc.Variable(he(512, 512), name="W2"), gc.Variable(np.zeros(512, f32), name="b2")
    w3, b3 = gc.Variable(he(512, 10), name="W3"), gc.Variable(np.zeros(10, f32), name="b3")
    h = gc.nn.relu(gc.matmul(x, w1) + b1)
    h = gc.nn.relu(gc.matmul(h, w2) + b2)
    logits = gc.matmul(h, w3) + b3
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    opt = gc.train.GradientDescentOptimizer(0.01)
    train_op = (hvd.DistributedOptimizer(opt) if distributed else opt).minimize(loss)
    data = np.random.default_rng(1 + hvd.rank())
    feed = {x: data.standard_normal((batch, 784), dtype=f32),
            y: data.integers(0, 10, batch).astype(np.int32)}
    return train_op, feed


def measure_w3(comm, distributed, steps, threads):
    import graphc as gc
    import graphc.distribute as hvd
    from graphc.distribute import collective_ops
    from graphc.framework.op_def import get_op_def
    hvd.init()
    op_def = get_op_def("MpiAllreduce")
    inner_kernel, inner_agree = op_def.kernel, collective_ops._agree
    spent = {"kernel": 0.0, "agree": 0.0}

    def timed(what, fn):
        def run(*args):
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent[what] += time.perf_counter() - start
        return run

    # time inside the collective kernels of a step, and inside their header exchange
    # (mostly waiting for the slowest rank to arrive)
    op_def.kernel = timed("kernel", inner_kernel)
    collective_ops._agree = timed("agree", inner_agree)
    train_op, feed = build_w3(distributed)
    config = gc.ConfigProto(intra_op_parallelism_threads=threads)
    rows = []
    with gc.Session(config=config) as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(3):
            sess.run(train_op, feed)  # compile and warm up
        for _ in range(steps):
            comm.Barrier()
            spent.update(kernel=0.0, agree=0.0)
            start = time.perf_counter()
            sess.run(train_op, feed)
            rows.append((time.perf_counter() - start, spent["kernel"], spent["agree"]))
    op_def.kernel, collective_ops._agree = inner_kernel, inner_agree
    step, kernel, agree = np.array(rows).T
    return {"step_ms": float(np.median(step)) * 1e3,
            "comm_ms": float(np.median(kernel)) * 1e3,
            "wait_ms": float(np.median(agree)) * 1e3,
            "comm_fraction": float(np.median(kernel / step)),
            "transfer_fraction": float(np.median((kernel - agree) / step))}


def worker(args):
    """Runs under mpiexec: one measurement; rank 0 prints its JSON."""
    import graphc.distribute as hvd
    hvd.init()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if args.worker == "allreduce":
        result = measure_allreduce(comm)
    else:
        result = measure_w3(comm, args.worker == "w3_distributed", args.steps, args.threads)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


def launch(what, ranks, args):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = ["mpiexec", "-n", str(ranks), sys.executable, os.path.abspath(__file__),
           "--worker", what, "--steps", str(args.steps), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="compiled-code threads per rank")
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(f"allreduce, float32 sum over {args.ranks} ranks (median ms per call)")
    print(f"{'size':>9} {'raw mpi4py':>11} {'graphc op':>10} {'overhead':>9} "
          f"{'Session.run':>12} {'overhead':>9} {'raw GB/s':>9}")
    rows = launch("allreduce", args.ranks, args)
    for r in rows:
        print(f"{_size(r['bytes']):>9} {r['raw_ms']:11.4f} {r['op_ms']:10.4f} "
              f"{r['op_ms'] / r['raw_ms'] - 1:9.1%} {r['session_ms']:12.4f} "
              f"{r['session_ms'] / r['raw_ms'] - 1:9.1%} "
              f"{r['bytes'] / r['raw_ms'] / 1e6:9.2f}")
    w3 = {"1 process, plain SGD": launch("w3_plain", 1, args),
          "1 process, DistributedOptimizer": launch("w3_distributed", 1, args),
          f"{args.ranks} processes, DistributedOptimizer": launch("w3_distributed",
                                                                  args.ranks, args)}
    print(f"\nW3 (batch 128 per process, {args.threads} thread(s) per process), median of "
          f"{args.steps} steps")
    print(f"  {'':36s} {'step ms':>8} {'in collectives':>15} {'of which waiting':>17} "
          f"{'moving data':>12}")
    for name, r in w3.items():
        print(f"  {name:36s} {r['step_ms']:8.3f} {r['comm_ms']:8.3f} ({r['comm_fraction']:4.0%})"
              f" {r['wait_ms']:17.3f} {r['comm_ms'] - r['wait_ms']:7.3f} "
              f"({r['transfer_fraction']:3.0%})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"allreduce": rows, "w3": w3}, f, indent=1)


def _size(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


if __name__ == "__main__":
    main()
