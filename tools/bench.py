#!/usr/bin/env python3
"""Benchmarks W1-W6 of the compiler issue: graphc against NumPy (and its own reference
executor), measured side by side in this process.

The workloads, their data and the timing loop come from tools/peers_bench.py (an identical
copy of the peers' ../shared/bench/peers_bench.py, so a clone can run them),
and graphc runs that file's TF1 code unchanged: `tensorflow.compat.v1` is graphc here
(a TF1 user changes only the import). Prints median ms per iteration and ratios (lower
is better for graphc), writes a JSON file. Peer numbers (TF1, XLA, JAX, PyTorch) come
from running peers_bench.py in its own venv in the same session: pass its results.json
with --peers-results to add the ratio against the fastest peer.

    python tools/bench.py [--workloads elementwise,mlp_train] [--backends compiled,reference]
"""
import argparse
import importlib.util
import json
import os
import sys
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = {"elementwise": "W1", "softmax_xent": "W2", "mlp_train": "W3", "tiny_overhead": "W4",
         "layernorm_gelu": "W5", "conv_train": "W6"}


def load_peers_bench(path):
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


def measure(pb, build, workload, args):
    data = pb.make_data(workload)
    spec = build(workload, data)
    sync = spec.get("sync") or (lambda r: r)
    if spec.get("pre"):
        spec["pre"]()
    res = pb.bench(spec["fn"], sync, args.min_iters, args.min_time, 3, 0.2, 10000)
    check = spec["post"](sync(spec["fn"]())) if spec.get("post") else None
    return dict(median_ms=res["median_ms"], first_call_ms=res["first_call_ms"], check=check)


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default=os.path.join(REPO, "tools", "peers_bench.py"))
    ap.add_argument("--workloads", default=",".join(NAMES))
    ap.add_argument("--backends", default="compiled,reference")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--min-iters", type=int, default=10)
    ap.add_argument("--peers-results", help="results.json written by peers_bench.py --run-all")
    ap.add_argument("--out", default="bench-results.json")
    args = ap.parse_args(argv)
    pb = load_peers_bench(args.peers)
    pb_args = argparse.Namespace(feed=False)
    peers = {}
    if args.peers_results:
        records = json.load(open(args.peers_results))
        if isinstance(records, dict):  # peers_bench.py --run-all writes {"runs": [...], ...}
            records = records.get("runs", [])
        for r in records:
            if r.get("supported", True) and r.get("median_ms") is not None and not r.get("feed"):
                best = peers.get(r["workload"])
                if best is None or r["median_ms"] < best["median_ms"]:
                    peers[r["workload"]] = r
    results = {"copy_GBps": copy_bandwidth_gbps(), "workloads": {}}
    print(f"np.copyto bandwidth: {results['copy_GBps']:.1f} GB/s (read + write)")
    for w in args.workloads.split(","):
        row = {}
        if (("numpy", w) not in pb.UNSUPPORTED):
            row["numpy"] = measure(pb, lambda wl, d: pb.build_numpy(wl, d, pb_args), w, args)
        for backend in args.backends.split(","):
            install_tensorflow_shim(backend)
            try:
                row[backend] = measure(pb, lambda wl, d: pb.build_tf1(wl, d, pb_args, xla=False),
                                       w, args)
            except Exception as e:  # report, keep benchmarking the rest
                row[backend] = {"error": f"{type(e).__name__}: {e}"}
        results["workloads"][w] = row
        print_row(w, row, peers.get(w), results["copy_GBps"])
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(f"wrote {args.out}")


def print_row(w, row, peer, copy_gbps):
    cells = []
    for system, r in row.items():
        cells.append(f"{system} {r['median_ms']:.3f} ms" if "median_ms" in r
                     else f"{system} {r['error'][:60]}")
    line = f"{NAMES.get(w, w)} {w:15s} " + " | ".join(cells)
    g = row.get("compiled", {}).get("median_ms")
    if g is not None and "numpy" in row:
        line += f" | compiled/numpy {g / row['numpy']['median_ms']:.2f}x"
    if g is not None and "median_ms" in row.get("reference", {}):
        line += f" | compiled/reference {g / row['reference']['median_ms']:.3f}x"
    if g is not None and peer:
        line += f" | compiled/fastest peer ({peer['system']}) {g / peer['median_ms']:.2f}x"
    if w == "elementwise" and g is not None:
        gbps = 4 * 4 * (1 << 22) / (g * 1e-3) / 1e9
        line += f" | {gbps:.1f} GB/s = {gbps / copy_gbps:.2f}x copy"
    print(line, flush=True)


if __name__ == "__main__":
    main()
