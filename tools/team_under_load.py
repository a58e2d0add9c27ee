#!/usr/bin/env python3
"""The thread team on a machine whose cores are taken: step times with 1 and N threads,
with and without competing processes that this tool starts itself (so the comparison
reproduces on a quiet machine too).

Workloads (median ms per step, the fastest step (what a step costs when nothing else
took the cores meanwhile), median process CPU ms per step, the team's regions that
ran on their caller alone: no worker joined them, runtime/team.py):
  chain       h = tanh(h . W)[:, :256] * 0.5 over 100 iterations of a while_loop, W
              [256, 1024], batch 32: the recurrent GEMM of lstm_train, a team region per
              iteration, a serial elementwise kernel between them
  any other   that workload of tools/peers_bench.py (lstm_train: its static_rnn LSTM
              training step; compile_scale_64: issue 11's deep MLP; mlp_train: W3)

Each (workload, threads, load) runs in its own process, in turn, --reps times:

    python tools/team_under_load.py [--workload chain] [--load 4] [--reps 3]

--load K starts K busy processes (a pure Python spin each) for the measured processes'
lifetime; 0 measures the machine as it is.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _busy(stop):
    while not stop.is_set():
        sum(range(10_000))


def _chain_step():
    import numpy as np

    import graphc as gc
    batch, hidden, trips = 32, 256, 100
    h0 = gc.placeholder(gc.float32, [batch, hidden])
    w = gc.placeholder(gc.float32, [hidden, 4 * hidden])
    _, h = gc.while_loop(
        lambda i, h: i < trips,
        lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w))[:, :hidden] * 0.5), [0, h0])
    rng = np.random.default_rng(0)
    feed = {h0: rng.standard_normal((batch, hidden)).astype(np.float32),
            w: (rng.standard_normal((hidden, 4 * hidden)) / 16).astype(np.float32)}
    sess = gc.Session()
    return lambda: sess.run(h, feed), sess


def _peers_step(workload):
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import argparse as _argparse

    import bench
    pb = bench.load_peers_bench()
    bench.install_tensorflow_shim("compiled")
    spec = pb.build_tf1(workload, pb.make_data(workload),
                        _argparse.Namespace(feed=False), xla=False)
    if spec.get("pre"):
        spec["pre"]()
    return spec["fn"], None


def _regions_alone():
    import gc as python_gc

    import runtime.executable as rx
    # getattr: a checkout from before the count has none (compared with 0)
    return sum(getattr(e, "team_regions_alone", 0) for e in python_gc.get_objects()
               if isinstance(e, rx.Executable))


def child(workload, steps):
    """This process times `steps` steps of `workload`; prints one JSON line."""
    sys.path.insert(0, REPO)
    step, _ = _chain_step() if workload == "chain" else _peers_step(workload)
    for _ in range(3):
        step()
    alone = _regions_alone()
    walls, cpus = [], []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    print(json.dumps({"wall_ms": statistics.median(walls) * 1e3,
                      "best_ms": min(walls) * 1e3,
                      "cpu_ms": statistics.median(cpus) * 1e3,
                      "regions_alone_per_step": (_regions_alone() - alone) / steps}))


def measure(workload, threads, steps):
    env = dict(os.environ, GRAPHC_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", workload,
                          "--steps", str(steps)], env=env, capture_output=True, text=True,
                         check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="chain",
                    help="chain, or a workload of tools/peers_bench.py")
    ap.add_argument("--threads", type=int, default=2, help="the team's size (and 1)")
    ap.add_argument("--load", type=int, default=2, help="busy processes started meanwhile")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.steps)
        return
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
            for _ in range(args.load)]
    for p in busy:
        p.start()
    try:
        print(f"{args.workload}, {args.load} busy processes, {os.cpu_count()} cores")
        for rep in range(args.reps):
            for threads in (args.threads, 1):
                r = measure(args.workload, threads, args.steps)
                print(f"rep {rep} threads {threads}: wall {r['wall_ms']:8.2f} ms  "
                      f"best {r['best_ms']:8.2f} ms  "
                      f"cpu {r['cpu_ms']:7.2f} ms  regions alone/step "
                      f"{r['regions_alone_per_step']:.1f}", flush=True)
    finally:
        stop.set()
        for p in busy:
            p.join()


if __name__ == "__main__":
    main()
