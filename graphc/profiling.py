"""What graphc tells the user about its own work: a progress line on slow compiles, the
"graphc" logger's messages, and with GRAPHC_PROFILE=1 a summary at exit of where the time
went (compiles by stage, runs by signature, kernels by CPU cycles).

Messages go to the logger named "graphc" (Python's logging), which prints to stderr
through its own handler at level INFO unless GRAPHC_VERBOSITY (debug, info, warning,
error) or `logging.getLogger("graphc").setLevel(...)` says otherwise:
  INFO   the progress line of a compile that takes longer than PROGRESS_AFTER seconds:
         what is compiling when it starts to take long, and the stage times and kernel
         count when it ends. Quick compiles say nothing.
  DEBUG  every compile's stage times, and compiles answered by the spec cache.
tf.logging is TF1's "tensorflow" logger: like TF's own C++ messages, graphc's are apart.
"""
import atexit
import collections
import logging
import os
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
        self._timer = threading.Timer(PROGRESS_AFTER, self._announce)
        self._timer.daemon = True

    def __enter__(self):
        self._timer.start()
        return self

    def stage(self, name):
        return _Stage(self, name)

    def add_times(self, times):
        for name, seconds in times.items():
            self.times[name] = self.times.get(name, 0.0) + seconds

    def _announce(self):
        self._announced = True
        log.info("compiling %s (%d ops)...", self.what, self.ops)

    def __exit__(self, exc_type, exc, tb):
        self._timer.cancel()
        total = time.perf_counter() - self._start
        if exc_type is not None:
            return False
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items())
        kernels = f", {self.kernels} kernels" if self.kernels is not None else ""
        level = logging.INFO if self._announced or total >= PROGRESS_AFTER else logging.DEBUG
        log.log(level, "compiled %s in %.1f s (%d ops%s: %s)", self.what, total, self.ops,
                kernels, stages)
        PROFILE.compiled(self.times, total)
        return False


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
        self.runs = collections.defaultdict(lambda: [0, 0.0])  # signature: [count, seconds]
        self.executables = []
        self._registered = False

    def compiled(self, times, total):
        self.compiles += 1
        self.compile_seconds.update(times)
        self.compile_seconds["total"] += total
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
                 f"cache), {self.compile_seconds['total']:.2f} s"]
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
