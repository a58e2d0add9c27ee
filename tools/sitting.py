#!/usr/bin/env python3
"""One sitting: graphc and the peers on the workloads of tools/peers_bench.py, interleaved.

This VM's speed swings by up to 40% within minutes, so a table whose peers ran first and
graphc minutes later compares machine states, not systems. Here each workload's processes
run back to back: for rep in 1..R every system runs once in its own process (a peer as
`<peers python> tools/peers_bench.py --system S --workload W`, graphc by tools/bench.py's
per-workload process; both: warm-up, then >= 20 timed iterations and >= 2 s, the median),
the order reversed on odd reps so that a drift within the workload's minute reaches every
system's early and late runs. Each system's best (and median) over its reps goes into the
table, beside graphc / the fastest peer (a ✗ past 0.9x), each training workload's
matmul/conv FLOPs per second as a share of the machine's fp32 GEMM peak (W1: GB/s against
the copy bandwidth), and the 1-minute load average during the workload. The peak and the
bandwidth come from `peers_bench.py --machine`, run at the start and at the end.

    python tools/sitting.py --peers-python /tmp/peers-venv/bin/python [--reps 2]
        [--workloads transformer_train,lstm_train] [--systems tf1,torch,graphc]
        [--outdir sitting-out] [--resume] [--quick] [--retable]

Writes OUTDIR/sitting.json (every run, as it finishes) and OUTDIR/sitting.md (the table).
--resume continues an interrupted sitting from OUTDIR/sitting.json: finished runs are
kept, failed ones run again; --retable prints the table of the runs finished so far.
--quick runs every system once per workload, then only graphc and that round's fastest
peer R more times, alternating which goes first: the close calls are where noise decides.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (tools/bench.py: graphc's measured process, the workload names)

PEERS_BENCH = bench.PEERS_BENCH
PEERS = ["tf1", "tf1_xla", "jax", "torch", "torch_compile"]
SYSTEMS = PEERS + ["graphc"]
COLUMNS = {"tf1": "TF1", "tf1_xla": "TF1+XLA", "jax": "JAX", "torch": "torch",
           "torch_compile": "torch.compile", "graphc": "graphc"}
GRAPHC_BACKEND = "compiled"
# steady-state workloads; compile_scale_* measure first calls (tools/compile_time.py)
WORKLOADS = [w for w in bench.NAMES if not w.startswith("compile_scale")]
RATIO_BOUND = 0.9  # issue 14's goal: at most 0.9x the fastest peer
ELEMENTWISE_BYTES = 4 * 4 * (1 << 22)  # peers_bench's W1: three inputs read, one written
RESULTS, TABLE = "sitting.json", "sitting.md"
PROTOCOL = ("min_iters", "min_time", "warmup_iters", "warmup_time", "max_iters")


# ------------------------------------------------------------------------- the order
def rep_order(systems, rep):
    """The systems in rep `rep`'s order: as given on even reps, reversed on odd ones."""
    return list(systems) if rep % 2 == 0 else list(reversed(systems))


def interleaved(workload, systems, reps):
    """(workload, system, rep) of a full sitting's workload, in running order."""
    return [(workload, s, rep) for rep in range(reps) for s in rep_order(systems, rep)]


def fastest_peer(records):
    """The peer system with the lowest median among `records`; None when none measured."""
    timed = [r for r in records if r["system"] in PEERS and r.get("median_ms") is not None]
    return min(timed, key=lambda r: r["median_ms"])["system"] if timed else None


def sit_workload(workload, systems, reps, quick, run):
    """Runs one workload's processes in the sitting's order; `run(workload, system, rep)`
    gives each one's record. --quick: one full round (rep 0), then graphc and that round's
    fastest peer as reps 1..R, alternating which goes first."""
    if not quick:
        return [run(*key) for key in interleaved(workload, systems, reps)]
    first = [run(*key) for key in interleaved(workload, systems, 1)]
    peer = fastest_peer(first)
    if peer is None or "graphc" not in systems:
        return first
    pair = [s for s in systems if s in (peer, "graphc")]
    again = [(workload, s, rep) for rep in range(1, reps + 1) for s in rep_order(pair, rep)]
    return first + [run(*key) for key in again]


# ------------------------------------------------------------------------- processes
def measure_peer(system, workload, args):
    """(record, stderr) of `<peers python> peers_bench.py --system S --workload W`."""
    cmd = [args.peers_python, PEERS_BENCH, "--system", system, "--workload", workload]
    for field in PROTOCOL:
        cmd += ["--" + field.replace("_", "-"), str(getattr(args, field))]
    # as peers_bench --run-all: TF's log says whether XLA compiled a cluster, and a
    # compile_scale process compiles cold, in its own inductor cache
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    if not workload.startswith("compile_scale"):
        return bench.run_measured(cmd, args.timeout, env)
    with tempfile.TemporaryDirectory(prefix="inductor_cold_") as cold:
        return bench.run_measured(cmd, args.timeout, dict(env, TORCHINDUCTOR_CACHE_DIR=cold))


def measure(system, workload, args):
    """One process's record, stamped with its wall and CPU seconds and the load average
    before and after it."""
    load_before = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    if system == "graphc":
        record, stderr = bench.measure(GRAPHC_BACKEND, workload, bench_args(args)), ""
    else:
        record, stderr = measure_peer(system, workload, args)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = dict(record, system=system, workload=workload, started_at=t0,
                  process_wall_s=time.time() - t0,
                  process_cpu_s=(cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
                  load_before=load_before, load_after=os.getloadavg()[0])
    if system == "tf1_xla":
        record["xla_compiled_cluster_logged"] = "Compiled cluster using XLA" in stderr
    if "error" in record and stderr:
        record["stderr_tail"] = stderr[-1500:]
    return record


def bench_args(args):
    """tools/bench.py's options for graphc's process: the sitting's protocol."""
    fields = {f: getattr(args, f) for f in PROTOCOL}
    return argparse.Namespace(peers=PEERS_BENCH, timeout=args.timeout, **fields)


def measure_machine(python, timeout=300):
    """peers_bench.py --machine's figures (copy bandwidth, fp32 GEMM), or an error record."""
    record, _ = bench.run_measured([python, PEERS_BENCH, "--machine"], timeout)
    return dict(record, measured_at=time.time())


def gemm_peak(machine):
    """The machine's fp32 GEMM GFLOP/s as peers_bench's tables take it: 1024^3 at 2 BLAS
    threads, else the 1024^3 figure at the BLAS default."""
    by_threads = (machine or {}).get("gemm_fp32_GFLOPs_by_threads") or {}
    return (by_threads.get("1024x1024x1024", {}).get("2t_best")
            or (machine or {}).get("gemm1024_float32_GFLOPs_best"))


# ------------------------------------------------------------------------- the sitting
class Sitting:
    """The runs of one sitting, saved to OUTDIR/sitting.json after each."""

    def __init__(self, path, state):
        self.path, self.state = path, state
        self.finished = {run_key(r): r for r in state["runs"] if "error" not in r}

    @classmethod
    def start(cls, path, options):
        return cls(path, {"options": options, "runs": [], "segments": []})

    @classmethod
    def resume(cls, path, options):
        with open(path) as f:
            state = json.load(f)
        changed = [k for k in PROTOCOL + ("peers_python",)
                   if state["options"].get(k) != options.get(k)]
        if changed:
            raise SystemExit(f"--resume: {path} was measured with other "
                             + ", ".join(f"--{k.replace('_', '-')} "
                                         f"({state['options'].get(k)!r}, now {options.get(k)!r})"
                                         for k in changed))
        state["options"] = options
        # a run that failed may have met a passing condition (memory, a timeout): again
        state["runs"] = [r for r in state["runs"] if "error" not in r]
        return cls(path, state)

    def run(self, workload, system, rep, measure_fn):
        """The record of (workload, system, rep): the finished one, or measured now."""
        key = (workload, system, rep)
        if key in self.finished:
            return self.finished[key]
        record = dict(measure_fn(system, workload), rep=rep)
        self.state["runs"].append(record)
        if "error" not in record:
            self.finished[key] = record
        self.save()
        print(progress_line(record), flush=True)
        return record

    def wall_s(self):
        """Seconds the sitting has run: its finished segments, else (a sitting still
        running) the span of its runs."""
        if self.state["segments"]:
            return sum(end - start for start, end in self.state["segments"])
        runs = self.state["runs"]
        if not runs:
            return 0.0
        return max(r["started_at"] + r["process_wall_s"] for r in runs) - min(
            r["started_at"] for r in runs)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f, indent=1, default=str)
        os.replace(tmp, self.path)  # an interrupt mid-write leaves the last whole file


def run_key(record):
    return record["workload"], record["system"], record["rep"]


def progress_line(r):
    ms = f"{r['median_ms']:.3f} ms" if r.get("median_ms") is not None else (
        r.get("error") or "unsupported")
    return (f"{r['workload']:18s} {r['system']:14s} rep {r['rep']}: {ms} "
            f"({r['process_wall_s']:.1f} s, load {r['load_after']:.2f})")


# ------------------------------------------------------------------------- the table
def summarize(runs, workloads, systems):
    """{workload: {system: best_ms, median_ms (over reps), rep_medians_ms, best run's
    figures}} and {workload: (lowest, highest) 1-minute load average during its runs}."""
    summary, loads = {}, {}
    for w in workloads:
        mine = [r for r in runs if r["workload"] == w]
        if mine:
            both = [x for r in mine for x in (r["load_before"], r["load_after"])]
            loads[w] = (min(both), max(both))
        for s in systems:
            rs = [r for r in mine if r["system"] == s]
            timed = [r for r in rs if r.get("median_ms") is not None]
            if timed:
                best = min(timed, key=lambda r: r["median_ms"])
                medians = [r["median_ms"] for r in sorted(timed, key=lambda r: r["rep"])]
                summary.setdefault(w, {})[s] = dict(
                    best_ms=best["median_ms"], median_ms=statistics.median(medians),
                    rep_medians_ms=medians, GFLOPs_per_s=best.get("GFLOPs_per_s"),
                    eff_GBps=best.get("eff_GBps"), first_call_ms=best.get("first_call_ms"),
                    check=best.get("check"))
            elif rs:
                summary.setdefault(w, {})[s] = dict(
                    best_ms=None, supported=rs[-1].get("supported", True),
                    error=rs[-1].get("error"))
    return summary, loads


def ratios(row):
    """(graphc / fastest peer on best-of-reps, the same on medians over reps, the peer)."""
    g = row.get("graphc", {})
    peers = {s: v for s, v in row.items() if s in PEERS and v.get("best_ms") is not None}
    if g.get("best_ms") is None or not peers:
        return None, None, None
    peer = min(peers, key=lambda s: peers[s]["best_ms"])
    on_medians = g["median_ms"] / min(v["median_ms"] for v in peers.values())
    return g["best_ms"] / peers[peer]["best_ms"], on_medians, peer


def fmt_ms(x):
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}" if x >= 1 else f"{x:.3f}" if x >= 0.1 else f"{x:.4f}"


def cell(v):
    if v is None:
        return "n/a"
    if v.get("best_ms") is None:
        return "—" if v.get("supported") is False else "ERR"
    return fmt_ms(v["best_ms"])


def ratio_cell(r):
    if r is None:
        return "—"
    return f"{r:.2f}x ✗" if r > RATIO_BOUND else f"{r:.2f}x"


def peak_cell(w, row, peer, flops, peak_gflops, copy_gbps):
    """Training workloads: graphc's and the fastest peer's matmul/conv GFLOP/s as a share
    of the GEMM peak; W1: graphc's GB/s and its share of the copy bandwidth."""
    g = row.get("graphc", {})
    if g.get("best_ms") is None:
        return "—"
    if w == "elementwise":
        gbps = ELEMENTWISE_BYTES / (g["best_ms"] * 1e-3) / 1e9
        return f"{gbps:.1f} GB/s" + (f" ({gbps / copy_gbps:.2f}x copy)" if copy_gbps else "")
    if not flops or not peak_gflops:
        return "—"
    text = f"graphc {share_of_peak(flops, g['best_ms'], peak_gflops):.0f}%"
    if peer:
        text += f", {COLUMNS[peer]} {share_of_peak(flops, row[peer]['best_ms'], peak_gflops):.0f}%"
    return text


def share_of_peak(flops, ms, peak_gflops):
    """Percent of the GEMM peak that `flops` in `ms` milliseconds reach."""
    return 100 * flops / (ms * 1e-3) / 1e9 / peak_gflops


def past_the_peak(summary, flops, peak_gflops):
    """Whether some system's share of the peak passes 100%: the peak was then measured in
    a slower minute than that workload ran in, and no share is the machine's."""
    return bool(peak_gflops) and any(
        share_of_peak(flops(w), v["best_ms"], peak_gflops) > 100
        for w, row in summary.items() if flops(w) for v in row.values()
        if v.get("best_ms") is not None)


def label(w, flops):
    short = bench.NAMES.get(w, "")
    name = f"{short} {w}" if short.startswith("W") else w
    return f"{name} ({flops / 1e9:.1f} GFLOP)" if flops else name


def build_table(state, workloads, systems, flops):
    """The sitting's markdown: machine figures, then one row per workload."""
    summary, loads = summarize(state["runs"], workloads, systems)
    starts, ends = state.get("machine_start") or {}, state.get("machine_end") or {}
    peaks = [p for p in (gemm_peak(starts), gemm_peak(ends)) if p]
    copies = [c for c in (starts.get("copy_GBps_rw"), ends.get("copy_GBps_rw")) if c]
    peak, copy_gbps = max(peaks, default=None), max(copies, default=None)
    opts = state["options"]
    lines = [f"# One sitting ({opts.get('mode', 'full')}, reps {opts.get('reps')}): median ms "
             "per step, best of reps, each system in its own process, interleaved", ""]
    lines.append("Machine fp32 GEMM peak (1024^3, 2 threads) at start / end: "
                 + " / ".join(fmt_ms(p) if p else "—" for p in (gemm_peak(starts), gemm_peak(ends)))
                 + " GFLOP/s; copy bandwidth: "
                 + " / ".join(fmt_ms(c) if c else "—"
                              for c in (starts.get("copy_GBps_rw"), ends.get("copy_GBps_rw")))
                 + " GB/s (shares below are of the higher figure)")
    if state.get("wall_s") is not None:
        lines.append(f"Sitting wall time: {state['wall_s'] / 60:.1f} min")
    lines += ["", "| workload | " + " | ".join(COLUMNS[s] for s in systems)
              + " | graphc / fastest | on rep medians | % of GEMM peak (W1: GB/s) | load |",
              "| --- " * (len(systems) + 5) + "|"]
    for w in workloads:
        row = summary.get(w, {})
        best, on_medians, peer = ratios(row)
        timed = [s for s in systems if row.get(s, {}).get("best_ms") is not None]
        fastest = min(timed, key=lambda s: row[s]["best_ms"]) if timed else None
        cells = [f"**{cell(row.get(s))}**" if s == fastest else cell(row.get(s))
                 for s in systems]
        low, high = loads.get(w, (None, None))
        load = f"{low:.1f}-{high:.1f}" if low is not None else "—"
        lines.append(f"| {label(w, flops(w))} | " + " | ".join(cells)
                     + f" | {ratio_cell(best)} | {ratio_cell(on_medians)} | "
                     + f"{peak_cell(w, row, peer, flops(w), peak, copy_gbps)} | {load} |")
    lines += ["", f"graphc / fastest: graphc's best over the fastest peer's best (✗ past "
              f"{RATIO_BOUND}x); on rep medians: each system's median over its reps. "
              "Shares of the GEMM peak count matmul/conv FLOPs only (peers_bench.flops). "
              "Load: the 1-minute load average before and after the workload's runs."]
    if past_the_peak(summary, flops, peak):
        lines += ["", "A share past 100%: the GEMM peak was measured in a slower minute than "
                  "that workload ran in (the machine was loaded), so the shares are not the "
                  "machine's; the ratios, measured side by side, still compare."]
    checks = {w: {s: v.get("check") for s, v in summary.get(w, {}).items()
                  if v.get("check") is not None} for w in workloads}
    lines += ["", "Check values (should agree across systems):"]
    lines += [f"- {w}: {json.dumps(c)}" for w, c in checks.items() if c]
    failed = [r for r in state["runs"] if r.get("error")]
    if failed:
        lines += ["", "Errors:"]
        lines += [f"- {r['workload']} / {r['system']} rep {r['rep']}: {r['error'][:300]}"
                  for r in failed]
    return "\n".join(lines) + "\n", summary


# ------------------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="of " + ",".join(SYSTEMS) + " (graphc: its compiled backend)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--peers-python", help="the python of the peers' venv (peers_bench.py's "
                    "docstring says how to make it)")
    ap.add_argument("--outdir", default="sitting-out")
    ap.add_argument("--resume", action="store_true",
                    help="continue OUTDIR/sitting.json: finished runs are kept")
    ap.add_argument("--retable", action="store_true",
                    help="rebuild OUTDIR/sitting.md from OUTDIR/sitting.json, running nothing")
    ap.add_argument("--quick", action="store_true",
                    help="one full round, then graphc and the fastest peer REPS more times")
    ap.add_argument("--no-machine", action="store_true",
                    help="skip peers_bench.py --machine (no GEMM peak or copy bandwidth)")
    bench.add_protocol_arguments(ap)
    args = ap.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.systems = args.systems.split(",")
    known = bench.load_peers_bench().WORKLOADS
    for w in args.workloads:
        if w not in known:
            ap.error(f"--workloads: {w!r} is not a workload of {PEERS_BENCH}")
    for s in args.systems:
        if s not in SYSTEMS:
            ap.error(f"--systems: {s!r} is not one of {','.join(SYSTEMS)}")
    if args.reps < 1:
        ap.error(f"--reps: {args.reps} (at least 1)")
    if any(s in PEERS for s in args.systems) and not (args.peers_python or args.retable):
        ap.error("--peers-python is needed for the peers in --systems "
                 "(or --systems graphc)")
    if args.peers_python and not os.access(args.peers_python, os.X_OK):
        ap.error(f"--peers-python: {args.peers_python} is not an executable")
    return args


def options_of(args):
    options = {k: getattr(args, k) for k in PROTOCOL + ("reps", "peers_python")}
    return dict(options, workloads=args.workloads, systems=args.systems,
                mode="quick" if args.quick else "full")


def open_sitting(args):
    path = os.path.join(args.outdir, RESULTS)
    if args.resume:
        if not os.path.exists(path):
            raise SystemExit(f"--resume: no {path} to continue")
        return Sitting.resume(path, options_of(args))
    if os.path.exists(path):
        raise SystemExit(f"{path} exists: --resume continues it; another --outdir starts over")
    os.makedirs(args.outdir, exist_ok=True)
    return Sitting.start(path, options_of(args))


def main(argv=None):
    args = parse_args(argv)
    if args.retable:
        retable(args.outdir)
        return
    sitting = open_sitting(args)
    state = sitting.state
    machine_python = args.peers_python or sys.executable
    t0 = time.time()
    if not args.no_machine and not state.get("machine_start"):
        state["machine_start"] = measure_machine(machine_python)
        sitting.save()
    measure_fn = lambda system, workload: measure(system, workload, args)
    run = lambda w, s, rep: sitting.run(w, s, rep, measure_fn)
    try:
        for w in args.workloads:
            sit_workload(w, args.systems, args.reps, args.quick, run)
    except KeyboardInterrupt:
        state["segments"].append([t0, time.time()])
        sitting.save()
        raise SystemExit(f"interrupted: {sitting.path} keeps the finished runs; "
                         "--resume continues") from None
    if not args.no_machine:
        state["machine_end"] = measure_machine(machine_python)
    state["segments"].append([t0, time.time()])
    write_table(sitting, args.workloads, args.systems)


def write_table(sitting, workloads, systems):
    """Builds the table from the sitting's runs, keeps its summary in the JSON, writes the
    markdown beside it and prints it."""
    state = sitting.state
    state["wall_s"] = sitting.wall_s()
    text, state["summary"] = build_table(state, workloads, systems,
                                         bench.load_peers_bench().flops)
    sitting.save()
    table = os.path.join(os.path.dirname(sitting.path), TABLE)
    with open(table, "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {sitting.path} and {table}")


def retable(outdir):
    """The table of OUTDIR/sitting.json's runs as they stand, nothing run (an interrupted
    sitting's so far)."""
    path = os.path.join(outdir, RESULTS)
    if not os.path.exists(path):
        raise SystemExit(f"--retable: no {path}")
    with open(path) as f:
        sitting = Sitting(path, json.load(f))
    options = sitting.state["options"]
    write_table(sitting, options["workloads"], options["systems"])


if __name__ == "__main__":
    main()
