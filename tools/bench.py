#!/usr/bin/env python3
"""Benchmarks the workloads of tools/peers_bench.py: graphc against NumPy (and its own
reference executor), by the peers' protocol, so that the numbers compare with theirs.

The workloads, their data and the timing come from tools/peers_bench.py (an identical
copy of the peers' ../shared/bench/peers_bench.py, so a clone can run them), and graphc
runs that file's TF1 code unchanged: `tensorflow.compat.v1` is graphc here (a TF1 user
changes only the import). The protocol is peers_bench.py's own `--run-all`: one process
per (system, workload) pair, timed by peers_bench.run_one (warm-up, then >= 20 timed
iterations and >= 2 s, the median), the lowest median of `--reps` repetitions kept.
Prints median ms per iteration and ratios (lower is better for graphc), writes a JSON
file. The table against the peers (TF1, XLA, JAX, PyTorch) is tools/sitting.py's: it runs
graphc's process from here and the peers' processes interleaved in one sitting, so that
the machine's swings reach every system alike; --peers-results adds the ratio against
the fastest peer of a peers_bench.py --run-all results.json (measured minutes apart).

    python tools/bench.py [--workloads elementwise,mlp_train] [--backends compiled,reference]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_BENCH = os.path.join(REPO, "tools", "peers_bench.py")
NAMES = {"elementwise": "W1", "softmax_xent": "W2", "mlp_train": "W3", "tiny_overhead": "W4",
         "layernorm_gelu": "W5", "conv_train": "W6", "transformer_train": "transformer",
         "lstm_train": "lstm", "resnet_train": "resnet", "embedding_train": "embedding",
         "compile_scale_8": "scale8", "compile_scale_64": "scale64",
         "compile_scale_256": "scale256"}


def load_peers_bench(path=PEERS_BENCH):
    spec = importlib.util.spec_from_file_location("peers_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def install_tensorflow_shim(backend):
    """`import tensorflow.compat.v1 as tf` gives graphc, with Sessions on `backend`."""
    import graphc as gc

    class BackendSession(gc.Session):
        def __init__(self, target="", graph=None, config=None):
            config = config or gc.ConfigProto()
            config.backend = backend
            super().__init__(target, graph, config)

    v1 = types.ModuleType("tensorflow.compat.v1")
    v1.__dict__.update({k: getattr(gc, k) for k in dir(gc) if not k.startswith("__")})
    v1.Session = BackendSession
    tf = types.ModuleType("tensorflow")
    tf.__version__ = "graphc " + gc.__version__
    tf.nn = gc.nn
    tf.compat = types.ModuleType("tensorflow.compat")
    tf.compat.v1 = v1
    sys.modules.update({"tensorflow": tf, "tensorflow.compat": tf.compat,
                        "tensorflow.compat.v1": v1})


# ------------------------------------------------------------------ one measured process
def run_child(args):
    """This process measures one (system, workload) pair: peers_bench.run_one prints its
    JSON line. graphc's backends run as peers_bench's "tf1" system through the shim."""
    pb = load_peers_bench(args.peers)
    system = args.system
    if system != "numpy":
        sys.path.insert(0, REPO)  # this checkout's graphc and runtime, from any cwd
        install_tensorflow_shim(system)
        system = "tf1"
    pb.run_one(argparse.Namespace(
        system=system, workload=args.workload, feed=False, min_iters=args.min_iters,
        min_time=args.min_time, warmup_iters=args.warmup_iters,
        warmup_time=args.warmup_time, max_iters=args.max_iters, verify_steps=0))


def measure(system, workload, args):
    """The JSON record of one child process measuring (system, workload)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--system", system,
           "--workload", workload, "--peers", args.peers, "--min-iters", str(args.min_iters),
           "--min-time", str(args.min_time), "--warmup-iters", str(args.warmup_iters),
           "--warmup-time", str(args.warmup_time), "--max-iters", str(args.max_iters)]
    return run_measured(cmd, args.timeout)[0]


def run_measured(cmd, timeout, env=None):
    """(record, stderr) of one measuring process: the last JSON line it printed, or an
    error record. tools/sitting.py runs the peers' processes through here too."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}, ""
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line), p.stderr
            except json.JSONDecodeError:
                pass
    tail = (p.stderr or p.stdout).strip().splitlines()
    return {"error": f"rc={p.returncode}: {tail[-1] if tail else 'no output'}"}, p.stderr


def best_of(reps):
    """The rep with the lowest median (the peers' "best of reps"), its rep medians added;
    the first error when no rep measured."""
    timed = [r for r in reps if r.get("median_ms") is not None]
    if not timed:
        return reps[0] if reps else {"error": "not run"}
    best = dict(min(timed, key=lambda r: r["median_ms"]))
    best["rep_medians_ms"] = [r["median_ms"] for r in timed]
    return best


def fastest_peers(path):
    """{workload: the fastest peer's record} from peers_bench.py --run-all's results.json."""
    with open(path) as f:
        records = json.load(f)
    if isinstance(records, dict):  # peers_bench.py --run-all writes {"runs": [...], ...}
        records = records.get("runs", [])
    peers = {}
    for r in records:
        if r.get("supported", True) and r.get("median_ms") is not None and not r.get("feed"):
            best = peers.get(r["workload"])
            if best is None or r["median_ms"] < best["median_ms"]:
                peers[r["workload"]] = r
    return peers


def copy_bandwidth_gbps():
    src = np.ones(64 * 1024 * 1024, np.float32)  # 256 MB
    dst = np.zeros_like(src)
    import time
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9


def add_protocol_arguments(ap):
    """The timing protocol's options, with peers_bench.py's defaults: the same protocol for
    every system (tools/sitting.py takes them too)."""
    ap.add_argument("--min-iters", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--warmup-iters", type=int, default=3)
    ap.add_argument("--warmup-time", type=float, default=0.3)
    ap.add_argument("--max-iters", type=int, default=200000)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per process")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default=PEERS_BENCH)
    ap.add_argument("--workloads", default=",".join(NAMES))
    ap.add_argument("--backends", default="compiled,reference")
    ap.add_argument("--no-numpy", action="store_true", help="skip the NumPy baseline")
    ap.add_argument("--reps", type=int, default=2)
    add_protocol_arguments(ap)
    ap.add_argument("--peers-results", help="results.json written by peers_bench.py --run-all")
    ap.add_argument("--out", default="bench-results.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run_child(args)
        return
    pb = load_peers_bench(args.peers)
    peers = fastest_peers(args.peers_results) if args.peers_results else {}
    results = {"copy_GBps": copy_bandwidth_gbps(), "reps": args.reps, "workloads": {}}
    print(f"np.copyto bandwidth: {results['copy_GBps']:.1f} GB/s (read + write)")
    for w in args.workloads.split(","):
        if w not in pb.WORKLOADS:
            ap.error(f"--workloads: {w!r} is not a workload of {args.peers}")
        systems = [] if args.no_numpy or ("numpy", w) in pb.UNSUPPORTED else ["numpy"]
        systems += args.backends.split(",")
        # reps outermost, as peers_bench --run-all: a slow minute does not hit every rep
        reps = {s: [] for s in systems}
        for _ in range(args.reps):
            for s in systems:
                reps[s].append(dict(measure(s, w, args), system=s))
        row = {s: best_of(r) for s, r in reps.items()}
        results["workloads"][w] = row
        print_row(w, row, peers.get(w), results["copy_GBps"])
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(f"wrote {args.out}")


def print_row(w, row, peer, copy_gbps):
    cells = []
    for system, r in row.items():
        cells.append(f"{system} {r['median_ms']:.3f} ms" if r.get("median_ms") is not None
                     else f"{system} {r.get('error', 'unsupported')[:60]}")
    line = f"{NAMES.get(w, w)} {w:15s} " + " | ".join(cells)
    compiled = row.get("compiled", {})
    g = compiled.get("median_ms")
    if g is not None and w.startswith("compile_scale"):
        line += f" | compiled first call {compiled['first_call_ms']:.0f} ms"
    if g is not None and row.get("numpy", {}).get("median_ms"):
        line += f" | compiled/numpy {g / row['numpy']['median_ms']:.2f}x"
    if g is not None and row.get("reference", {}).get("median_ms"):
        line += f" | compiled/reference {g / row['reference']['median_ms']:.3f}x"
    if g is not None and peer:
        line += f" | compiled/fastest peer ({peer['system']}) {g / peer['median_ms']:.2f}x"
    if g is not None and compiled.get("GFLOPs_per_s"):
        line += f" | {compiled['GFLOPs_per_s']:.0f} GFLOP/s"
    if w == "elementwise" and g is not None:
        gbps = 4 * 4 * (1 << 22) / (g * 1e-3) / 1e9
        line += f" | {gbps:.1f} GB/s = {gbps / copy_gbps:.2f}x copy"
    print(line, flush=True)


if __name__ == "__main__":
    main()
