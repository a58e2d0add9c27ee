"""What graphc tells the user about its own work: a progress line on slow compiles, the
"graphc" logger's messages, and with GRAPHC_PROFILE=1 a summary at exit of where the time
went (compiles by stage, runs by signature, kernels by CPU cycles).

Messages go to the logger named "graphc" (Python's logging), which prints to stderr
through its own handler at level INFO unless GRAPHC_VERBOSITY (debug, info, warning,
error) or `logging.getLogger("graphc").setLevel(...)` says otherwise:
  INFO   the progress line of a compile that takes longer than PROGRESS_AFTER seconds:
         what is compiling when it starts to take long, and the stage times, kernel
         count and peak memory (the process's, and how much the compile raised it) when
         it ends. Quick compiles say nothing.
  DEBUG  every compile's stage times, and compiles answered by the spec cache.
tf.logging is TF1's "tensorflow" logger: like TF's own C++ messages, graphc's are apart.
"""
import _thread
import atexit
import collections
import logging
import os
import resource
import sys
import threading
import time

PROGRESS_AFTER = 2.0  # seconds: a compile shorter than this prints nothing
STAGES = ("lower", "optimize", "schedule", "generate", "jit")

log = logging.getLogger("graphc")


def _configure_logger():
    if log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("graphc: %(message)s"))
    log.addHandler(handler)
    log.propagate = False  # printed once, by this handler, whatever the root logger does
    level = os.environ.get("GRAPHC_VERBOSITY", "info").upper()
    log.setLevel(getattr(logging, level, None) if isinstance(
        getattr(logging, level, None), int) else logging.INFO)


_configure_logger()


def enabled():
    """GRAPHC_PROFILE=1: the generated code counts kernel cycles and a summary prints at exit."""
    return os.environ.get("GRAPHC_PROFILE", "") not in ("", "0")


class CompileWatch:
    """Times the stages of one compile (`with watch.stage("jit"): ...`) and, when the whole
    compile outlasts PROGRESS_AFTER, says so while it runs and when it ends."""

    def __init__(self, what, ops):
        self.what, self.ops = what, ops
        self.times = collections.OrderedDict()
        self.kernels = None
        self._announced = False
        self._start = time.perf_counter()
        self._ended = threading.Event()

    def __enter__(self):
        self._peak_before = peak_memory_mb()
        # not a threading.Timer: its start() waits until the new thread runs, up to 10 ms
        # on a loaded machine, a share of a warm first run that is not compiling at all
        _thread.start_new_thread(self._watch, ())
        return self

    def _watch(self):
        if not self._ended.wait(PROGRESS_AFTER):
            self._announce()

    def stage(self, name):
        return _Stage(self, name)

    def add_times(self, times):
        for name, seconds in times.items():
            self.times[name] = self.times.get(name, 0.0) + seconds

    def _announce(self):
        self._announced = True
        log.info("compiling %s (%d ops)...", self.what, self.ops)

    def __exit__(self, exc_type, exc, tb):
        self._ended.set()
        total = time.perf_counter() - self._start
        if exc_type is not None:
            return False
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items())
        kernels = f", {self.kernels} kernels" if self.kernels is not None else ""
        peak = peak_memory_mb()
        # the compile's own peak shows where it raised the process's: below an earlier
        # peak (a larger compile before) it is not measured, and the rise is 0
        self.peak_rise_mb = max(0.0, peak - self._peak_before)
        level = logging.INFO if self._announced or total >= PROGRESS_AFTER else logging.DEBUG
        log.log(level, "compiled %s in %.1f s (%d ops%s: %s); peak memory %.0f MB (+%.0f MB "
                "in this compile)", self.what, total, self.ops, kernels, stages, peak,
                self.peak_rise_mb)
        PROFILE.compiled(self.times, total, peak, self.peak_rise_mb)
        return False


def peak_memory_mb():
    """The process's peak resident memory so far, in MB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2 ** 20 if sys.platform == "darwin" else 2 ** 10)


class _Stage:
    def __init__(self, watch, name):
        self.watch, self.name = watch, name

    def __enter__(self):
        self._start = time.perf_counter()

    def __exit__(self, *exc):
        self.watch.add_times({self.name: time.perf_counter() - self._start})
        return False


class _Profile:
    """Totals for the summary GRAPHC_PROFILE=1 prints at exit."""

    def __init__(self):
        self.compiles, self.cache_hits = 0, 0
        self.compile_seconds = collections.Counter()
        self.peak_mb = self.largest_peak_rise_mb = 0.0  # the process's; a compile's most
        self.runs = collections.defaultdict(lambda: [0, 0.0])  # signature: [count, seconds]
        self.executables = []
        self._registered = False

    def compiled(self, times, total, peak_mb, peak_rise_mb):
        self.compiles += 1
        self.compile_seconds.update(times)
        self.compile_seconds["total"] += total
        self.peak_mb = peak_mb
        self.largest_peak_rise_mb = max(self.largest_peak_rise_mb, peak_rise_mb)
        self._register()

    def cache_hit(self):
        self.cache_hits += 1

    def ran(self, signature, seconds):
        entry = self.runs[signature]
        entry[0] += 1
        entry[1] += seconds
        self._register()

    def keep(self, executable):
        """An executable whose kernels' cycle counts the summary reads at exit."""
        self.executables.append(executable)

    def _register(self):
        if not self._registered and enabled():
            self._registered = True
            atexit.register(lambda: print(self.summary(), file=sys.stderr))

    def summary(self, top=10):
        lines = ["graphc profile (GRAPHC_PROFILE=1)",
                 f"  compiles: {self.compiles} ({self.cache_hits} answered by the spec "
                 f"cache), {self.compile_seconds['total']:.2f} s; peak memory "
                 f"{self.peak_mb:.0f} MB, raised by at most {self.largest_peak_rise_mb:.0f} "
                 "MB in one compile"]
        for stage in STAGES:
            if stage in self.compile_seconds:
                lines.append(f"    {stage:<9} {self.compile_seconds[stage]:8.3f} s")
        runs = sorted(self.runs.items(), key=lambda kv: -kv[1][1])
        lines.append(f"  Session.run: {sum(c for c, _ in self.runs.values())} runs, "
                     f"{sum(s for _, s in self.runs.values()):.3f} s")
        for signature, (count, seconds) in runs[:top]:
            lines.append(f"    {seconds:8.3f} s  {count:6d} runs  "
                         f"{1e3 * seconds / count:9.3f} ms/run  {signature}")
        cycles = collections.Counter()
        for exe in self.executables:
            for name, n in exe.kernel_profile():
                cycles[name] += n
        total = sum(cycles.values())
        if total:
            lines.append(f"  kernels by CPU cycles ({total / 1e9:.3f} G cycles in all):")
            for name, n in cycles.most_common(top):
                lines.append(f"    {100 * n / total:5.1f}%  {name}")
        return "\n".join(lines)


PROFILE = _Profile()
