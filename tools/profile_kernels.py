#!/usr/bin/env python3
"""Where the time of a benchmark workload goes, kernel by kernel.

Runs one workload of ../shared/bench/peers_bench.py (its TF1 code, on graphc, as
tools/bench.py does) with GRAPHC_PROFILE=1: the generated entry reads the CPU's time-stamp
counter around every kernel call and sums the cycles per kernel. Prints each kernel's share
of the run and its time per run (cycles converted with the wall-clock time of the same runs).

    python tools/profile_kernels.py conv_train [--runs 50]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["GRAPHC_PROFILE"] = "1"

import bench  # noqa: E402  (tools/bench.py: the peers_bench loader and the TF1 shim)


def executables_created():
    """Every runtime Executable constructed from now on, in order."""
    import runtime.executable as rx
    created, init = [], rx.Executable.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        created.append(self)
    rx.Executable.__init__ = recording_init
    return created


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=sorted(bench.NAMES))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--peers", default=os.path.join(bench.REPO, "..", "shared", "bench",
                                                    "peers_bench.py"))
    args = ap.parse_args(argv)
    pb = bench.load_peers_bench(args.peers)
    bench.install_tensorflow_shim("compiled")
    created = executables_created()
    import argparse as _argparse
    spec = pb.build_tf1(args.workload, pb.make_data(args.workload),
                        _argparse.Namespace(feed=False), xla=False)
    if spec.get("pre"):
        spec["pre"]()
    spec["fn"]()  # compiles (and warms) the benchmarked signature
    exe = created[-1]
    before = dict(exe.kernel_profile())
    start = time.perf_counter()
    for _ in range(args.runs):
        spec["fn"]()
    wall_ms = (time.perf_counter() - start) * 1e3 / args.runs
    rows = [(name, cycles - before.get(name, 0)) for name, cycles in exe.kernel_profile()]
    total = sum(c for _, c in rows) or 1
    ms_per_cycle = wall_ms / (total / args.runs)  # upper bound: includes Python per run
    print(f"{args.workload}: {wall_ms:.3f} ms per run (wall), {len(rows)} kernels")
    for name, cycles in sorted(rows, key=lambda r: -r[1]):
        per_run = cycles / args.runs
        print(f"{100 * cycles / total:5.1f}%  {per_run * ms_per_cycle:7.3f} ms  {name[:110]}")


if __name__ == "__main__":
    main()
