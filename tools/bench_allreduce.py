#!/usr/bin/env python3
"""graphc.distribute's cost: its allreduce against raw mpi4py; training steps on 1 and 2 processes.

1. Allreduce (float32 sum, 2 ranks) of buffers from 4 KiB to 64 MiB, on the same arrays,
   once with the collectives compiled into the native code (`native`: MPI_Allreduce called
   from the compiled entry, graphc/distribute/native.py) and once on the host path
   (`host`: GRAPHC_MPI_NATIVE=0, the op's kernel in a host stage between native stages):
     raw      mpi4py's `comm.Allreduce(x, out)` alone, back to back;
     op       graphc's MpiAllreduce host kernel, back to back: what the host stage of a
              run calls (the steady state: the ranks follow the collectives they agreed
              on, so no header is exchanged; the `exchanges` column counts any);
     by hand  `Session.run` of a NoOp with the same feed, then `comm.Allreduce`: a run's
              round trip plus raw MPI, what a user without graphc's op would pay at least;
     run      `Session.run` of the graph holding the op (feed, the collective: a native
              call, or a host stage between two native ones; fetch).
   `op` against `raw` is the cost of graphc's host kernel itself; `run` against `by hand`
   is the cost of having the collective in the graph (the number the issue bounds). The
   overheads are medians over rounds of the per-round ratio (the ways run interleaved,
   each round started together on every rank) with the interquartile range of those
   ratios, and the ratio of the fastest rounds
   (`best`: what each way costs when the shared machine lets it run undisturbed). Last,
   the process CPU time per call of each way with MPI's Allreduce replaced by nothing
   (the native code's by an Allreduce over MPI_COMM_SELF, a copy of 4 KiB): the work each
   adds to MPI's own, which the other jobs' load does not blur.
2. Training steps, batch per process fixed: W3 (tools/compile_time.py's mlp_train:
   784-512-512-10 relu, batch 128, SGD) and resnet_train (peers_bench.py's CIFAR ResNet,
   batch 32, Momentum), the plain optimizer on 1 process and DistributedOptimizer on 2
   (so 2 processes train on twice the examples per step), on both paths. Prints the
   median step time, the time inside the collectives (MPI plus waiting for the slower
   rank) and its fraction of the step: on the host path the collectives' kernels timed
   by the clock; on the native path the collectives' share of the cycles the compiled
   kernels took (GRAPHC_PROFILE=1 counts each kernel's) times the step time.
   (DistributedOptimizer in a job of one process is the plain optimizer: it adds no op.)

    python tools/bench_allreduce.py [--ranks 2] [--steps 50] [--workloads w3,resnet_train]
                                    [--paths native,host] [--json out.json]

Run plainly, it starts itself under mpiexec for each measurement and prints the tables.
What a 2-core machine can show: the overhead of graphc's collectives over raw MPI (the
same bytes move through the same shared-memory transport), the extra work of a step
that is split into native and host stages, and how the time of a step divides between
computing and communicating. What it cannot show: scaling. Two processes on two cores
share the memory bandwidth and the cores the compiled kernels would otherwise use (each
rank runs 1 thread here), so a 2-process step is not expected to be faster per example;
and shared-memory MPI says nothing of a network, where bandwidth is 10-100x lower and
fusion and overlap matter far more.
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
    """{name: [time of `calls` back-to-back calls / calls, per round]}. The ways are
    interleaved round by round, each round started together on every rank, so that a
    load change on the machine falls on all of them alike."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def measure_allreduce(comm, rounds):
    import graphc as gc
    import graphc.distribute as hvd
    from graphc.distribute.world import world
    from graphc.framework.op_def import get_op_def
    hvd.init()
    mpi_sum = world().mpi.SUM
    agreement = world().agreement
    kernel = get_op_def("MpiAllreduce").kernel
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        x = np.random.default_rng(comm.Get_rank()).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        gc.reset_default_graph()
        ph = gc.placeholder(gc.float32, [n])
        y = hvd.allreduce(ph, op=hvd.Sum)
        same_run_without_op = gc.no_op()
        sess = gc.Session()
        np.testing.assert_array_equal(sess.run(y, {ph: x}), kernel(None, y.op, x))
        sess.run(same_run_without_op, {ph: x})  # set up before the clock starts
        calls = max(3, min(200, (16 << 20) // nbytes))
        before = agreement.exchanges
        t = call_seconds({
            "raw": lambda: comm.Allreduce(x, out, op=mpi_sum),
            "op": lambda: kernel(None, y.op, x),
            "by_hand": lambda: (sess.run(same_run_without_op, {ph: x}),
                                comm.Allreduce(x, out, op=mpi_sum)),
            "run": lambda: sess.run(y, {ph: x})}, comm, calls, rounds)
        rows.append({"bytes": nbytes, "calls": calls, "seconds": t,
                     "exchanges": agreement.exchanges - before,
                     # (the table prints the smallest size's: there the work around
                     # MPI is most of a call)
                     "cpu_us": own_cpu_seconds(sess, y, ph, x, same_run_without_op, kernel)
                     if nbytes == SIZES[0] else None})
    return rows


class _NoMpi:
    """A communicator whose Allreduce does nothing: what remains of a call is the caller's
    own work."""

    def Allreduce(self, x, out, op=None):  # noqa: N802 - mpi4py's name
        pass


def own_cpu_seconds(sess, y, ph, x, same_run_without_op, kernel, calls=2000):
    """{way: process CPU microseconds per call with MPI's Allreduce replaced by nothing}
    (median of 7 runs of `calls`): what each way adds to MPI's own work, undisturbed by
    the other jobs' load and by waiting for the other rank."""
    from mpi4py import MPI
    from runtime import mpi_library
    from graphc.distribute.world import world
    w = world()
    comm, w.comm = w.comm, _NoMpi()
    native_comm = mpi_library.WORDS[mpi_library.COMM]
    mpi_library.WORDS[mpi_library.COMM] = MPI._handleof(MPI.COMM_SELF)
    out = np.empty_like(x)
    ways = {"raw": lambda: w.comm.Allreduce(x, out),
            "op": lambda: kernel(None, y.op, x),
            "by_hand": lambda: (sess.run(same_run_without_op, {ph: x}), w.comm.Allreduce(x, out)),
            "run": lambda: sess.run(y, {ph: x})}
    try:
        result = {}
        for name, fn in ways.items():
            runs = []
            for _ in range(7):
                start = time.process_time()
                for _ in range(calls):
                    fn()
                runs.append((time.process_time() - start) / calls)
            result[name] = float(np.median(runs)) * 1e6
        return result
    finally:
        w.comm = comm
        mpi_library.WORDS[mpi_library.COMM] = native_comm


def build_w3(tf, batch=128):
    """W3's graph (tools/compile_time.py build_mlp_train) in the default graph; returns
    (feed, loss) with this rank's batch."""
    import graphc.distribute as hvd
    rng = np.random.default_rng(0)
    f32 = np.float32

    def he(i, o):
        return (rng.standard_normal((i, o), dtype=f32) * np.sqrt(2.0 / i)).astype(f32)

    x = tf.placeholder(tf.float32, [batch, 784], name="x")
    y = tf.placeholder(tf.int32, [batch], name="y")
    w1, b1 = tf.Variable(he(784, 512), name="W1"), tf.Variable(np.zeros(512, f32), name="b1")
    w2, b2 = tf.Variable(he(512, 512), name="W2"), tf.Variable(np.zeros(512, f32), name="b2")
    w3, b3 = tf.Variable(he(512, 10), name="W3"), tf.Variable(np.zeros(10, f32), name="b3")
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    h = tf.nn.relu(tf.matmul(h, w2) + b2)
    logits = tf.matmul(h, w3) + b3
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    data = np.random.default_rng(1 + hvd.rank())
    feed = {x: data.standard_normal((batch, 784), dtype=f32),
            y: data.integers(0, 10, batch).astype(np.int32)}
    return feed, train_op


class HorovodTf:
    """graphc as the `tf` of a Horovod user's script: tf.train's optimizers come wrapped
    in DistributedOptimizer, and Sessions run `threads` compiled-code threads, so that
    peers_bench's workloads build unchanged for several processes."""

    def __init__(self, threads):
        import graphc
        self._tf, self._threads = graphc, threads
        self.train = _DistributedTrain(graphc.train)

    def Session(self, graph=None, config=None):  # noqa: N802 - tf's name
        return self._tf.Session(graph=graph, config=self._tf.ConfigProto(
            intra_op_parallelism_threads=self._threads))

    def __getattr__(self, name):
        return getattr(self._tf, name)


class _DistributedTrain:
    def __init__(self, train):
        self._train = train

    def __getattr__(self, name):
        import graphc.distribute as hvd
        value = getattr(self._train, name)
        if isinstance(value, type) and issubclass(value, self._train.Optimizer):
            return lambda *args, **kwargs: hvd.DistributedOptimizer(value(*args, **kwargs))
        return value


def build_step(workload, threads):
    """(session, fetch, feed) of one training step of `workload`, variables initialized."""
    tf = HorovodTf(threads)
    if workload == "w3":
        graph = tf.Graph()
        with graph.as_default():
            feed, train_op = build_w3(tf)
            init = tf.global_variables_initializer()
        sess = tf.Session(graph=graph)
        sess.run(init)
        return sess, train_op, feed
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from workloads import build
    return build(workload, tf)


def measure_step(comm, workload, steps, threads):
    import graphc.distribute as hvd
    from graphc.distribute.world import world
    from graphc.framework.op_def import get_op_def
    hvd.init()
    collectives = [get_op_def(t) for t in ("MpiAllreduce", "MpiAllgather", "MpiBroadcast")]
    kernels = [d.kernel for d in collectives]
    spent = [0.0]

    def timed(kernel):
        def run(*args):
            start = time.perf_counter()
            try:
                return kernel(*args)
            finally:
                spent[0] += time.perf_counter() - start
        return run

    for d in collectives:  # the time of a step inside the collectives' host kernels
        d.kernel = timed(d.kernel)
    sess, fetch, feed = build_step(workload, threads)
    agreement = world().agreement
    for _ in range(3):
        sess.run(fetch, feed)  # compile and warm up
    before = agreement.exchanges if agreement else 0
    rows = []
    for _ in range(steps):
        comm.Barrier()
        spent[0] = 0.0
        cycles = native_cycles()
        start = time.perf_counter()
        sess.run(fetch, feed)
        step = time.perf_counter() - start
        in_mpi, total = np.subtract(native_cycles(), cycles)
        rows.append((step, spent[0] + (step * in_mpi / total if in_mpi else 0.0)))
    for d, kernel in zip(collectives, kernels):
        d.kernel = kernel
    step, comm_s = np.array(rows).T
    return {"step_ms": float(np.median(step)) * 1e3,
            "step_iqr_ms": float(np.subtract(*np.percentile(step, [75, 25]))) * 1e3,
            "comm_ms": float(np.median(comm_s)) * 1e3,
            "comm_fraction": float(np.median(comm_s / step)),
            "exchanges": (agreement.exchanges - before) if agreement else 0}


def native_cycles():
    """(cycles in the compiled collectives' kernels, cycles in all kernels) so far, summed
    over the executables GRAPHC_PROFILE=1 keeps."""
    from graphc import profiling
    in_mpi = total = 0
    for exe in profiling.PROFILE.executables:
        for name, cycles in exe.kernel_profile():
            total += cycles
            if "MpiAllreduce" in name or "MpiBroadcast" in name:
                in_mpi += cycles
    return in_mpi, total


def worker(args):
    """Runs under mpiexec: one measurement; rank 0 prints its JSON."""
    import graphc.distribute as hvd
    hvd.init()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if args.worker == "allreduce":
        result = measure_allreduce(comm, args.rounds)
    else:
        result = measure_step(comm, args.worker, args.steps, args.threads)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


def launch(what, ranks, args, path="native"):
    """path: "native" (collectives compiled into the code; the steps count the kernels'
    cycles) or "host" (GRAPHC_MPI_NATIVE=0)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GRAPHC_MPI_NATIVE="1" if path == "native" else "0")
    if path == "native" and what != "allreduce":
        env["GRAPHC_PROFILE"] = "1"
    cmd = ["mpiexec", "-n", str(ranks), sys.executable, os.path.abspath(__file__),
           "--worker", what, "--steps", str(args.steps), "--threads", str(args.threads),
           "--rounds", str(args.rounds)]
    if ranks == 1:
        cmd = cmd[3:]  # a process of its own: the plain optimizer, no MPI at all
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")


def overhead(way, base, row):
    """(median, interquartile range) over the rounds of way's time / base's time - 1, and
    the fastest round of way against the fastest of base."""
    way_s, base_s = np.array(row["seconds"][way]), np.array(row["seconds"][base])
    q1, median, q3 = np.percentile(way_s / base_s - 1, [25, 50, 75])
    return median, q3 - q1, way_s.min() / base_s.min() - 1


def print_allreduce(rows, ranks, path):
    print(f"\nallreduce, float32 sum over {ranks} ranks, {path} path: median ms per call; "
          "overheads: median (interquartile range) of the per-round ratios")
    print(f"{'size':>7} {'raw':>9} {'op':>9} {'op vs raw (IQR)':>18} {'best':>7} "
          f"{'by hand':>9} {'run':>9} {'run vs by hand (IQR)':>21} {'best':>7} "
          f"{'raw GB/s':>8} {'exchanges':>9}")
    for r in rows:
        ms = {k: float(np.median(v)) * 1e3 for k, v in r["seconds"].items()}
        op, op_iqr, op_best = overhead("op", "raw", r)
        run, run_iqr, run_best = overhead("run", "by_hand", r)
        print(f"{_size(r['bytes']):>7} {ms['raw']:9.4f} {ms['op']:9.4f} "
              f"{op:+8.1%} ({op_iqr:6.1%}) {op_best:+7.1%} {ms['by_hand']:9.4f} "
              f"{ms['run']:9.4f} {run:+11.1%} ({run_iqr:6.1%}) {run_best:+7.1%} "
              f"{r['bytes'] / ms['raw'] / 1e6:8.2f} {r['exchanges']:9d}")
    cpu = rows[0]["cpu_us"]
    print(f"\nCPU microseconds per call with MPI's Allreduce replaced by nothing (what each way "
          f"adds to MPI's own work; {_size(rows[0]['bytes'])}): raw {cpu['raw']:.2f}, op "
          f"{cpu['op']:.2f}, by hand {cpu['by_hand']:.2f}, run {cpu['run']:.2f}")


def print_steps(results, args):
    print(f"\ntraining steps ({args.threads} compiled-code thread(s) per process), median "
          f"of {args.steps} steps")
    print(f"  {'':60s} {'step ms':>8} {'(IQR)':>8} {'in collectives':>17} {'exchanges':>9}")
    for name, r in results.items():
        print(f"  {name:60s} {r['step_ms']:8.2f} {r['step_iqr_ms']:8.2f} "
              f"{r['comm_ms']:8.2f} ({r['comm_fraction']:4.0%}) {r['exchanges']:9d}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the allreduce table")
    parser.add_argument("--threads", type=int, default=1, help="compiled-code threads per rank")
    parser.add_argument("--workloads", default="w3,resnet_train",
                        help="steps to time: w3, resnet_train (comma-separated; empty: none)")
    parser.add_argument("--paths", default="native,host",
                        help="collective paths to measure: native, host (comma-separated)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    paths = [p for p in args.paths.split(",") if p]
    rows = {}
    for path in paths:  # one after the other, so that both see the same load
        rows[path] = launch("allreduce", args.ranks, args, path)
        print_allreduce(rows[path], args.ranks, path)
    steps = {}
    for workload in filter(None, args.workloads.split(",")):
        steps[f"{workload}: 1 process, plain optimizer"] = launch(workload, 1, args)
        for path in paths:
            steps[f"{workload}: {args.ranks} processes, DistributedOptimizer, {path}"] = \
                launch(workload, args.ranks, args, path)
    if steps:
        print_steps(steps, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"allreduce": rows, "steps": steps}, f, indent=1)


def _size(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


if __name__ == "__main__":
    main()
