#!/usr/bin/env python3
"""Where the time of a benchmark workload goes, kernel by kernel.

Runs one workload of tools/peers_bench.py (its TF1 code, on graphc, as
tools/bench.py does) with GRAPHC_PROFILE=1: the generated entry reads the CPU's time-stamp
counter around every kernel call and sums the cycles per kernel. Prints each kernel's
median cycles per run as a share of the time in kernels and in ms (the counter's rate
measured against the wall clock; medians keep runs another process preempted out).

The profiled code is compiled by this checkout, never loaded from the compile cache: the
cache's key is the IR, the target and the toolchain's name, and the directory is shared by
every checkout on the machine, so a hit can hand over machine code another checkout's
pipeline built for the same IR. That is what made lstm_train's serial step loops read
0.25-0.36 ms each (ms per step 74-94) where this checkout's code takes 0.03-0.05 ms (ms per
step 32-47): the counters were right about slower code.

    python tools/profile_kernels.py conv_train [--runs 50] [--cache]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["GRAPHC_PROFILE"] = "1"

import bench  # noqa: E402  (tools/bench.py: the peers_bench loader and the TF1 shim)

# this checkout's graphc and runtime, from any cwd: a script's sys.path starts at tools/,
# so an installed graphc (another checkout's) was the one profiled
sys.path.insert(0, bench.REPO)


def executables_created():
    """Every runtime Executable constructed from now on, in order."""
    import runtime.executable as rx
    created, init = [], rx.Executable.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        created.append(self)
    rx.Executable.__init__ = recording_init
    return created


def cycles_per_ms():
    """The time-stamp counter's rate, measured against perf_counter."""
    import ctypes

    from runtime import jit
    module = jit.CompiledModule("declare i64 @llvm.readcyclecounter()\n"
                                "define i64 @tsc() {\n  %t = call i64 @llvm.readcyclecounter()\n"
                                "  ret i64 %t\n}\n")
    tsc = ctypes.CFUNCTYPE(ctypes.c_int64)(module.address("tsc"))
    t0, c0 = time.perf_counter(), tsc()
    time.sleep(0.1)
    t1, c1 = time.perf_counter(), tsc()
    return (c1 - c0) / ((t1 - t0) * 1e3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", help="a workload of peers_bench.py (W1-W6 or the new ones)")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--cache", action="store_true",
                    help="let the compile cache answer (profiles whichever checkout's code "
                         "it holds for this IR)")
    ap.add_argument("--peers", default=os.path.join(bench.REPO, "tools",
                                                    "peers_bench.py"))
    args = ap.parse_args(argv)
    pb = bench.load_peers_bench(args.peers)
    if args.workload not in pb.WORKLOADS:
        ap.error(f"unknown workload {args.workload!r}; peers_bench.py has {pb.WORKLOADS}")
    if not args.cache:
        os.environ["GRAPHC_CACHE_DIR"] = "off"
    bench.install_tensorflow_shim("compiled")
    created = executables_created()
    import argparse as _argparse
    spec = pb.build_tf1(args.workload, pb.make_data(args.workload),
                        _argparse.Namespace(feed=False), xla=False)
    if spec.get("pre"):
        spec["pre"]()
    spec["fn"]()  # compiles (and warms) the benchmarked signature
    exe = created[-1]
    names = [name for name, _ in exe.kernel_profile()]
    last = [c for _, c in exe.kernel_profile()]
    per_run, walls = [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        spec["fn"]()
        walls.append(time.perf_counter() - start)
        now = [c for _, c in exe.kernel_profile()]
        per_run.append([b - a for a, b in zip(last, now)])
        last = now
    # medians: robust to the runs another process preempted
    wall_ms = statistics.median(walls) * 1e3
    cycles = [statistics.median(run[k] for run in per_run) for k in range(len(names))]
    in_kernels = statistics.median(sum(run) for run in per_run)
    total = sum(cycles) or 1  # the shares below are of the kernels' medians
    ms_per_cycle = 1 / cycles_per_ms()
    import graphc
    print(f"graphc: {os.path.dirname(os.path.dirname(os.path.abspath(graphc.__file__)))}")
    print(f"{args.workload}: {wall_ms:.3f} ms per run (median wall), {len(names)} kernels, "
          f"{in_kernels * ms_per_cycle:.3f} ms of it in kernels (median), "
          f"{total * ms_per_cycle:.3f} ms the sum of the kernels' medians")
    print("machine code: " + ("from the compile cache where it had it" if args.cache
                              else "compiled by this checkout (compile cache off)"))
    for name, c in sorted(zip(names, cycles), key=lambda r: -r[1]):
        print(f"{100 * c / total:5.1f}%  {c * ms_per_cycle:7.3f} ms  {name[:int(os.environ.get('PROFILE_NAME_WIDTH', 110))]}")


if __name__ == "__main__":
    main()
