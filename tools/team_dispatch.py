#!/usr/bin/env python3
"""What a team region costs: the latency of the runtime's thread team (runtime/team.py,
or libgomp where that has none: runtime/jit.py) against the work it splits.

A region here is what gemm_team.py emits for a product cut in `units` units: the team's
threads claim units from a shared counter, each unit `work_us` microseconds of busy
work (a dependent chain of adds, calibrated on one thread). `regions` regions run
back to back inside one native call that tells the team a run started and ended, as a
compiled entry does (the team's workers spin between its regions), after `gap_us` of
serial work each (a step's serial elementwise kernels between two products). --no-run
leaves the run's start and end out: the workers then sleep between regions more than
GRACE apart (runtime/team.py), and each such region shows what a cold worker costs.

Prints per (work, gap): microseconds per region alone (team of 1) and on the team,
the team's overhead (team time less the ideal: units' work / threads), the speedup, and
the share of regions the runtime's fallback ran alone. Medians of --reps batches.

    python tools/team_dispatch.py [--units 2] [--threads 2] [--regions 200] [--reps 7]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runtime import jit  # noqa: E402

IR = """
declare void @{par}(ptr, ptr, i32)
declare void @{begin}()
declare void @{end}()

define internal void @spin(i64 %n) noinline {{
entry:
  %acc = alloca i64
  store volatile i64 0, ptr %acc
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %v = load volatile i64, ptr %acc
  %w = add i64 %v, %i
  store volatile i64 %w, ptr %acc
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %out
out:
  ret void
}}

; data: [spins per unit, units, next unit]
define void @task(ptr %data) nounwind {{
entry:
  %spins = load i64, ptr %data
  %units.at = getelementptr i64, ptr %data, i64 1
  %units = load i64, ptr %units.at
  %next.at = getelementptr i64, ptr %data, i64 2
  br label %claim
claim:
  %u = atomicrmw add ptr %next.at, i64 1 monotonic
  %mine = icmp slt i64 %u, %units
  br i1 %mine, label %work, label %done
work:
  call void @spin(i64 %spins)
  br label %claim
done:
  ret void
}}

define void @run(i64 %regions, i64 %spins, i64 %units, i64 %gap, i32 %threads, i1 %as.run) {{
entry:
  br i1 %as.run, label %begin, label %start
begin:
  call void @{begin}()
  br label %start
start:
  %data = alloca [3 x i64]
  %units.at = getelementptr i64, ptr %data, i64 1
  %next.at = getelementptr i64, ptr %data, i64 2
  br label %loop
loop:
  %r = phi i64 [0, %start], [%r.next, %loop]
  call void @spin(i64 %gap)
  store i64 %spins, ptr %data
  store i64 %units, ptr %units.at
  store i64 0, ptr %next.at
  call void @{par}(ptr @task, ptr %data, i32 %threads)
  %r.next = add i64 %r, 1
  %more = icmp slt i64 %r.next, %regions
  br i1 %more, label %loop, label %out
out:
  br i1 %as.run, label %end, label %done
end:
  call void @{end}()
  br label %done
done:
  ret void
}}
"""


def compile_module(threads, as_run):
    module = jit.CompiledModule(IR.format(par=jit.PARALLEL_FN, begin=jit.RUN_BEGIN_FN,
                                          end=jit.RUN_END_FN))
    jit.ensure_team_workers(threads)
    native = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_int32, ctypes.c_bool)(
        module.address("run"))
    run = lambda *args: native(*args, as_run)  # noqa: E731
    counter = ctypes.c_int64.from_address(module.global_address(jit.TEAM_ALONE_GLOBAL))
    return module, run, lambda: counter.value


def spins_per_us(run):
    """Iterations of the spin loop per microsecond, on one thread (best of 5)."""
    n = 2_000_000
    best = min(_timed(run, 1, n, 1, 0, 1) for _ in range(5))
    return n / (best * 1e6)


def _timed(run, regions, spins, units, gap, threads):
    start = time.perf_counter()
    run(regions, spins, units, gap, threads)
    return time.perf_counter() - start


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--regions", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--work-us", default="0,5,10,20,40,80,160")
    ap.add_argument("--gap-us", default="0,20,300,1000")
    ap.add_argument("--no-run", action="store_true",
                    help="call the regions outside a run (no run start/end)")
    args = ap.parse_args(argv)
    kind = jit.parallel_runtime()
    if kind is None:
        raise SystemExit("no thread team here: regions run serially")
    # the module keeps the code alive
    module, run, alone = compile_module(args.threads, not args.no_run)
    rate = spins_per_us(run)
    where = (f"libgomp {jit.openmp_library()}, GOMP_SPINCOUNT="
             f"{os.environ.get('GOMP_SPINCOUNT')}" if kind == "libgomp" else
             f"runtime/team.py, GRACE_NS={jit.team.GRACE_NS}, "
             f"{'no run' if args.no_run else 'one run per call'}")
    print(f"{where}, {args.units} units per region, team of {args.threads}, {args.regions} regions "
          f"per call, medians of {args.reps}; load {os.getloadavg()[0]:.2f}")
    print(f"{'unit us':>8}{'gap us':>8}{'alone us':>10}{'team us':>10}{'overhead us':>13}"
          f"{'speedup':>9}{'run alone':>11}")
    for work in (float(w) for w in args.work_us.split(",")):
        for gap in (float(g) for g in args.gap_us.split(",")):
            spins, gap_spins = int(work * rate), int(gap * rate)
            serial, team, alone_share = [], [], []
            for _ in range(args.reps):
                serial.append(_timed(run, args.regions, spins, args.units, gap_spins, 1))
                before = alone()
                team.append(_timed(run, args.regions, spins, args.units, gap_spins,
                                   args.threads))
                alone_share.append((alone() - before) / args.regions)
            per = lambda ts: statistics.median(ts) / args.regions * 1e6 - gap  # noqa: E731
            one, many = per(serial), per(team)
            ideal = -(-args.units // args.threads) * work
            print(f"{work:8.0f}{gap:8.0f}{one:10.1f}{many:10.1f}{many - ideal:13.1f}"
                  f"{one / max(many, 1e-9):9.2f}{100 * statistics.median(alone_share):10.0f}%",
                  flush=True)


if __name__ == "__main__":
    main()
