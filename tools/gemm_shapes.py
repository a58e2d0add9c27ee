#!/usr/bin/env python3
"""GFLOP/s of graphc's gemm kernels, shape by shape, on 1 and 2 threads, beside OpenBLAS
(numpy, threadpoolctl) on 1 and 2 threads for the same shape.

Each shape is one MatMul of two variables compiled by graphc; its kernel's time is read
from the GRAPHC_PROFILE cycle counters (tools/profile_kernels.py), so the fetch of C is not
in it. The 1-thread and 2-thread sessions and the numpy calls take turns, rep by rep, so
that the load of a shared machine hits them alike; medians of the reps are printed, with
the spread (max/min of the reps' medians) as a noise figure.

    python tools/gemm_shapes.py                       # the workloads' shapes (SHAPES)
    python tools/gemm_shapes.py 64x256x256:NN 7x1023x1:TN --reps 5
    python tools/gemm_shapes.py --calls transformer_train

--calls W prints instead the BLAS calls one training step of workload W (tools/peers_bench.py)
makes, with their counts: how the team cut its products, which does not depend on the
machine's load (compare two checkouts' listings to see what a change of the split rule
changes).

A shape is MxKxN:XY, C[M, N] = op(A) op(B) with inner size K; X, Y are N (as stored) or
T (transposed), as MatMul's transpose_a / transpose_b. The 2-thread peak of the machine
is ~303 GFLOP/s (tools/peers_bench.py --machine).
"""
import argparse
import collections
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_kernels  # noqa: E402  (sets GRAPHC_PROFILE=1 before graphc is imported)

# The products of tools/peers_bench.py's training workloads: forward (NN), input gradient
# (NT: dY . W^T), weight gradient (TN: X^T . dY).
SHAPES = {
    "transformer proj fwd": "2048x256x256:NN",
    "transformer ffn1 fwd": "2048x256x1024:NN",
    "transformer ffn2 fwd": "2048x1024x256:NN",
    "transformer cls fwd": "2048x256x1000:NN",
    "transformer cls dX": "2048x1000x256:NT",
    "transformer cls dW": "256x2048x1000:TN",
    "transformer ffn1 dW": "256x2048x1024:TN",
    "transformer ffn2 dX": "2048x256x1024:NT",
    "transformer proj dW": "256x2048x256:TN",
    "mlp_train l1 fwd": "128x784x512:NN",
    "mlp_train l1 dW": "784x128x512:TN",
    "mlp_train l2 fwd": "128x512x512:NN",
    "mlp_train l2 dX": "128x512x512:NT",
    "mlp_train l2 dW": "512x128x512:TN",
    "deep mlp fwd": "64x256x256:NN",
    "deep mlp dX": "64x256x256:NT",
    "deep mlp dW": "256x64x256:TN",
    "lstm step": "32x384x1024:NN",
}


def parse(spec):
    sizes, _, flags = spec.partition(":")
    m, k, n = (int(x) for x in sizes.split("x"))
    flags = (flags or "NN").upper()
    return m, k, n, flags[0] == "T", flags[1] == "T"


class GraphcProduct:
    """One compiled MatMul at a given team size; run() -> the gemm kernel's ms."""

    def __init__(self, spec, stored, threads, created, ms_per_cycle):
        import graphc as tf
        _, _, _, ta, tb = parse(spec)
        a, b = stored
        graph = tf.Graph()
        with graph.as_default():
            c = tf.matmul(tf.Variable(a), tf.Variable(b), transpose_a=ta, transpose_b=tb)
            init = tf.global_variables_initializer()
        config = tf.ConfigProto(intra_op_parallelism_threads=threads)
        self.sess = tf.Session(graph=graph, config=config)
        self.sess.run(init)
        self.result = self.sess.run(c)  # compiles
        self.exe = created[-1]
        self.fetch = c
        self.ms_per_cycle = ms_per_cycle
        self.calls = self.tasks = self.alone = 0

    def run(self):
        before, tasks, alone = self._cycles(), self.exe.parallel_tasks, \
            self.exe.team_regions_alone
        self.sess.run(self.fetch)
        self.calls += 1
        self.tasks += self.exe.parallel_tasks - tasks
        self.alone += self.exe.team_regions_alone - alone
        return (self._cycles() - before) * self.ms_per_cycle

    def _cycles(self):
        return sum(c for name, c in self.exe.kernel_profile() if "gemm" in name)


def numpy_run(a, b, out, threads, limits):
    import numpy as np
    with limits(limits=threads, user_api="blas"):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        return (time.perf_counter() - start) * 1e3


def blas_calls(workload):
    """Counter of (M, N, K, op(A), op(B)) over the BLAS calls of one step of `workload`
    (after a first, compiling step): the compiled code's ?gemm is swapped for a recording
    one that forwards each call (llvm.add_symbol: the JIT binds names when it loads)."""
    import argparse as _argparse

    import llvmlite.binding as llvm

    import bench
    from runtime import jit
    os.environ["GRAPHC_CACHE_DIR"] = "off"  # compiled afresh, by this checkout's rule
    jit.initialize()
    calls, callbacks = collections.Counter(), []
    size = ctypes.c_int64 if jit.blas_int_bits() == 64 else ctypes.c_int32
    for routine, scalar in (("cblas_sgemm", ctypes.c_float), ("cblas_dgemm", ctypes.c_double)):
        name = jit.blas_symbol(routine)
        ptr, enum = ctypes.c_void_p, ctypes.c_int
        proto = ctypes.CFUNCTYPE(None, enum, enum, enum, size, size, size, scalar, ptr, size,
                                 ptr, size, scalar, ptr, size)
        real = proto(llvm.address_of_symbol(name))

        def recording(order, ta, tb, m, n, k, *rest, real=real):
            calls[(m, n, k, "NT"[ta == 112], "NT"[tb == 112])] += 1  # CblasTrans is 112
            real(order, ta, tb, m, n, k, *rest)
        callbacks.append(proto(recording))
        llvm.add_symbol(name, ctypes.cast(callbacks[-1], ctypes.c_void_p).value)
    pb = bench.load_peers_bench(os.path.join(bench.REPO, "tools", "peers_bench.py"))
    bench.install_tensorflow_shim("compiled")
    spec = pb.build_tf1(workload, pb.make_data(workload), _argparse.Namespace(feed=False),
                        xla=False)
    if spec.get("pre"):
        spec["pre"]()
    spec["fn"]()
    calls.clear()
    spec["fn"]()
    return calls


def print_calls(workload):
    calls = blas_calls(workload)
    total = sum(2.0 * m * n * k * c for (m, n, k, _, _), c in calls.items())
    print(f"{workload}: {sum(calls.values())} BLAS calls per step, {total / 1e9:.3f} GFLOP")
    print(f"{'M':>6}{'N':>6}{'K':>6}  op  calls  share")
    for (m, n, k, ta, tb), c in sorted(calls.items(), key=lambda kv: -kv[0][0] * kv[0][1] *
                                       kv[0][2] * kv[1]):
        print(f"{m:6d}{n:6d}{k:6d}  {ta}{tb}  {c:5d}  {200.0 * m * n * k * c / total:4.1f}%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", help="MxKxN:XY (default: the workloads' shapes)")
    ap.add_argument("--reps", type=int, default=5, help="rounds of the four systems")
    ap.add_argument("--calls", metavar="WORKLOAD",
                    help="print the BLAS calls of one step of WORKLOAD instead")
    ap.add_argument("--per-round", type=int, default=20, help="calls per system per round")
    args = ap.parse_args(argv)
    if args.calls:
        print_calls(args.calls)
        return
    import numpy as np
    from threadpoolctl import threadpool_limits

    import graphc
    created = profile_kernels.executables_created()
    ms_per_cycle = 1 / profile_kernels.cycles_per_ms()
    shapes = {s: s for s in args.shapes} if args.shapes else SHAPES
    rng = np.random.default_rng(0)
    print(f"graphc: {os.path.dirname(os.path.dirname(os.path.abspath(graphc.__file__)))}")
    print(f"{'shape':<24}{'MxKxN:op':>18}  GFLOP/s (median of rep medians; spread max/min)")
    print(f"{'':<24}{'':>18}  {'graphc 1t':>16}{'graphc 2t':>16}{'blas 1t':>16}"
          f"{'blas 2t':>16}  2t/1t graphc  2t: tasks/call, regions alone")
    for label, spec in shapes.items():
        m, k, n, ta, tb = parse(spec)
        stored = (rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32),
                  rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
        products = {t: GraphcProduct(spec, stored, t, created, ms_per_cycle) for t in (1, 2)}
        a = np.ascontiguousarray(stored[0].T if ta else stored[0])
        b = np.ascontiguousarray(stored[1].T if tb else stored[1])
        expected = a.astype(np.float64) @ b.astype(np.float64)
        for t, p in products.items():
            err = float(np.max(np.abs(p.result - expected), initial=0.0))
            if err > 1e-3 * max(1.0, float(np.max(np.abs(expected), initial=0.0))) * k:
                raise SystemExit(f"{spec}: graphc on {t} threads differs from numpy by {err}")
        out = np.empty((m, n), np.float32)
        runs = {"g1": lambda: products[1].run(), "g2": lambda: products[2].run(),
                "b1": lambda: numpy_run(a, b, out, 1, threadpool_limits),
                "b2": lambda: numpy_run(a, b, out, 2, threadpool_limits)}
        medians = {key: [] for key in runs}
        for _ in range(args.reps):
            for key, run in runs.items():
                run()  # warm
                medians[key].append(statistics.median(run() for _ in range(args.per_round)))
        flop = 2.0 * m * k * n
        cells = []
        for key in runs:
            ms = statistics.median(medians[key])
            spread = max(medians[key]) / max(min(medians[key]), 1e-9)
            cells.append(f"{flop / max(ms, 1e-9) / 1e6:9.1f} ({spread:4.2f})")
        speedup = statistics.median(medians["g1"]) / max(statistics.median(medians["g2"]), 1e-9)
        two = products[2]
        print(f"{label:<24}{spec:>18}  {''.join(f'{c:>16}' for c in cells)}  {speedup:5.2f}x"
              f"  {two.tasks / two.calls:5.2f} {100 * two.alone / two.calls:5.1f}%", flush=True)


if __name__ == "__main__":
    main()
