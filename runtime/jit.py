"""JIT compilation of LLVM IR for the host CPU with llvmlite, and the BLAS it may call.

One process-wide llvmlite initialization; numpy's bundled OpenBLAS is loaded permanently so
that generated code can call CBLAS routines by their exported names (`blas_symbol`).

Thread teams: generated code runs its large loops through functions it only declares
(kernels/parallel.py); `link_parallel_runtime` defines them in the IR before compiling:
forwarding to the process's own team (runtime/team.py: workers hot for the duration of a
run) on Linux, else to libgomp (GCC's OpenMP runtime, loaded permanently the first time a
module needs it) when it is found, else as a serial shim (the loop's task runs once on
the calling thread). GRAPHC_OPENMP=0 in the environment forces the shim.
"""
import atexit
import ctypes
import ctypes.util
import glob
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import compile_cache, library_cache, module_split, team
from .errors import BlasUnavailable, TargetMismatch

_lock = threading.RLock()
_initialized = False
_blas_path = None
_blas_names = None

# CBLAS routines codegen may call; blas_names() reports which exist and under what name.
_BLAS_ROUTINES = [f"cblas_{p}{r}" for r in ("gemm", "gemv", "axpy", "dot", "scal",
                                            "copy", "ger", "trsm")
                  for p in "sd"]


def initialize():
    """Registers the native target once per process and loads the BLAS library."""
    global _initialized
    with _lock:
        if _initialized:
            return
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        _load_blas()
        llvm.add_symbol(BLAS_PIN_GLOBAL, ctypes.addressof(_blas_pin))
        _initialized = True


# Runs in progress that hold the BLAS library single-threaded, and its thread count before
# the first of them (one pair per process: every compiled module's entry refers to it, so
# that overlapping runs from several Python threads restore the count once, at the end of
# the last; backends/cpu/entry.py).
BLAS_PIN_GLOBAL = "graphc_blas_pin"
_blas_pin = (ctypes.c_int64 * 2)()


# ------------------------------------------------------------------ BLAS
def _blas_candidates():
    """Paths where numpy's wheels put their OpenBLAS (Linux, macOS, Windows layouts)."""
    np_dir = os.path.dirname(os.path.abspath(np.__file__))
    site = os.path.dirname(np_dir)
    patterns = [
        os.path.join(site, "numpy.libs", "libscipy_openblas*"),
        os.path.join(site, "numpy.libs", "libopenblas*"),
        os.path.join(np_dir, ".libs", "libscipy_openblas*"),
        os.path.join(np_dir, ".libs", "libopenblas*"),
        os.path.join(np_dir, ".dylibs", "libscipy_openblas*"),
        os.path.join(np_dir, ".dylibs", "libopenblas*"),
    ]
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(pattern))
    lib_dir = _config_blas_dir()
    if lib_dir:
        found += sorted(glob.glob(os.path.join(lib_dir, "lib*blas*")))
    for name in ("scipy_openblas64_", "scipy_openblas", "openblas", "cblas"):
        path = ctypes.util.find_library(name)
        if path:
            found.append(path)
    return found


def _config_blas_dir():
    try:
        return np.__config__.CONFIG["Build Dependencies"]["blas"].get("lib directory")
    except (AttributeError, KeyError, TypeError):
        return None


def _load_blas():
    global _blas_path
    for path in _blas_candidates():
        try:
            llvm.load_library_permanently(path)
        except RuntimeError:
            continue
        _blas_path = path
        return


def blas_library():
    """The path of the loaded BLAS library, or None when none was found."""
    initialize()
    return _blas_path


def blas_names():
    """{"cblas_sgemm": exported name, ...} for the CBLAS routines that are callable, e.g.
    {"cblas_sgemm": "scipy_cblas_sgemm64_"} with numpy's ILP64 OpenBLAS."""
    global _blas_names
    initialize()
    with _lock:
        if _blas_names is None:
            names = {}
            for routine in _BLAS_ROUTINES:
                base = routine[len("cblas_"):]
                for exported in (f"scipy_cblas_{base}64_", f"cblas_{base}64_",
                                 f"scipy_cblas_{base}", routine):
                    if llvm.address_of_symbol(exported):
                        names[routine] = exported
                        break
            _blas_names = names
    return dict(_blas_names)


def blas_symbol(routine):
    """The exported name to declare for `routine` ("cblas_sgemm"); raises BlasUnavailable."""
    name = blas_names().get(routine)
    if name is None:
        raise BlasUnavailable(f"no BLAS routine {routine} in {_blas_path or 'any library found'}")
    return name


_BLAS_THREAD_SPELLINGS = (("scipy_openblas_", "64_"), ("scipy_openblas_", ""),
                          ("openblas_", ""))


def blas_thread_symbols():
    """(set, get): the exported names of the BLAS library's thread-count controls (C int
    arguments and results), or None when it exports none. Generated code that runs BLAS
    calls on its own thread team sets OpenBLAS to one thread around the team."""
    initialize()
    for prefix, suffix in _BLAS_THREAD_SPELLINGS:
        names = (f"{prefix}set_num_threads{suffix}", f"{prefix}get_num_threads{suffix}")
        if all(llvm.address_of_symbol(n) for n in names):
            return names
    return None


def blas_exported_candidates():
    """Every exported name a CBLAS routine or thread-count control may have in a library
    this runtime loads (what blas_names and blas_thread_symbols look up)."""
    names = set()
    for routine in _BLAS_ROUTINES:
        base = routine[len("cblas_"):]
        names |= {f"scipy_cblas_{base}64_", f"cblas_{base}64_", f"scipy_cblas_{base}",
                  routine}
    for prefix, suffix in _BLAS_THREAD_SPELLINGS:
        names |= {f"{prefix}set_num_threads{suffix}", f"{prefix}get_num_threads{suffix}"}
    return names


def blas_int_bits():
    """The width of the BLAS integer arguments (M, N, K, lda, ...): 64 for the ILP64 builds
    (numpy's, whose exported names end in 64_), else 32. Enum arguments (order, transpose)
    are C ints (i32) either way."""
    return 64 if blas_symbol("cblas_sgemm").endswith("64_") else 32


# ---------------------------------------------------------------- OpenMP
# The names generated code declares (kernels/parallel.py defines the same; runtime never
# imports kernels, a test checks that they agree).
PARALLEL_FN = "graphc_omp_parallel"
THREAD_NUM_FN = "graphc_omp_thread_num"
NUM_THREADS_FN = "graphc_omp_num_threads"
THREADS_GLOBAL = "graphc_num_threads"
TASKS_GLOBAL = "graphc_parallel_tasks"
RUN_BEGIN_FN = "graphc_omp_run_begin"
RUN_END_FN = "graphc_omp_run_end"
TEAM_ALONE_GLOBAL = "graphc_team_alone"  # regions a team was asked for that ran alone
_OMP_DECLARE = re.compile(r'^declare [^\n]*@"?(?:%s)"?\([^\n]*\n?' % "|".join(
    (PARALLEL_FN, THREAD_NUM_FN, NUM_THREADS_FN, RUN_BEGIN_FN, RUN_END_FN)), re.M)
# The libgomp shim (platforms without runtime/team.py's team): each region is one
# GOMP_parallel; runs tell it nothing.
_OMP_FORWARD = f"""
@{TEAM_ALONE_GLOBAL} = global i64 0
define void @{PARALLEL_FN}(ptr %fn, ptr %data, i32 %n) nounwind {{
  call void @GOMP_parallel(ptr %fn, ptr %data, i32 %n, i32 0)
  ret void
}}
define i32 @{THREAD_NUM_FN}() nounwind {{
  %t = call i32 @omp_get_thread_num()
  ret i32 %t
}}
define i32 @{NUM_THREADS_FN}() nounwind {{
  %n = call i32 @omp_get_num_threads()
  ret i32 %n
}}
define void @{RUN_BEGIN_FN}() nounwind {{
  ret void
}}
define void @{RUN_END_FN}() nounwind {{
  ret void
}}
declare void @GOMP_parallel(ptr, ptr, i32, i32) nounwind
declare i32 @omp_get_thread_num() nounwind
declare i32 @omp_get_num_threads() nounwind
"""
# Forwards to the process's team (runtime/team.py), counting the regions that asked for
# a team but ran on the caller alone (no worker came while the caller worked).
_TEAM_FORWARD = f"""
@{TEAM_ALONE_GLOBAL} = global i64 0
define void @{PARALLEL_FN}(ptr %fn, ptr %data, i32 %n) nounwind {{
  %ran = call i32 @{team.PARALLEL_FN}(ptr %fn, ptr %data, i32 %n)
  %alone = icmp eq i32 %ran, 0
  %asked = icmp sgt i32 %n, 1
  %counted = and i1 %alone, %asked
  br i1 %counted, label %count, label %out
count:
  %was = atomicrmw add ptr @{TEAM_ALONE_GLOBAL}, i64 1 monotonic
  br label %out
out:
  ret void
}}
define i32 @{THREAD_NUM_FN}() nounwind {{
  %t = call i32 @{team.THREAD_NUM_FN}()
  ret i32 %t
}}
define i32 @{NUM_THREADS_FN}() nounwind {{
  %n = call i32 @{team.NUM_THREADS_FN}()
  ret i32 %n
}}
define void @{RUN_BEGIN_FN}() nounwind {{
  call void @{team.RUN_BEGIN_FN}()
  ret void
}}
define void @{RUN_END_FN}() nounwind {{
  call void @{team.RUN_END_FN}()
  ret void
}}
declare i32 @{team.PARALLEL_FN}(ptr, ptr, i32) nounwind
declare i32 @{team.THREAD_NUM_FN}() nounwind
declare i32 @{team.NUM_THREADS_FN}() nounwind
declare void @{team.RUN_BEGIN_FN}() nounwind
declare void @{team.RUN_END_FN}() nounwind
"""
_OMP_SERIAL = f"""
define void @{PARALLEL_FN}(ptr %fn, ptr %data, i32 %n) nounwind {{
  call void %fn(ptr %data)
  ret void
}}
define i32 @{THREAD_NUM_FN}() nounwind {{
  ret i32 0
}}
define i32 @{NUM_THREADS_FN}() nounwind {{
  ret i32 1
}}
define void @{RUN_BEGIN_FN}() nounwind {{
  ret void
}}
define void @{RUN_END_FN}() nounwind {{
  ret void
}}
"""
_gomp_path = False  # not looked for yet


def _gomp_candidates():
    """Names and paths to load libgomp by, tried in turn until one loads. The names the
    loader finds by itself come first: find_library runs `ldconfig -p` in a subprocess,
    ~10 ms of a warm process's first run (it gives the same soname where the loader
    searches)."""
    yield from ("libgomp.so.1", "libgomp.so", "libgomp.1.dylib")
    name = ctypes.util.find_library("gomp")
    if name:
        yield name
    for lib_dir in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                    "/usr/lib", "/usr/local/lib"):
        yield from sorted(glob.glob(os.path.join(lib_dir, "libgomp.so*")))


# How long (iterations of a pause loop: 10000 took 130-170 us on the 2-core VM, a pause
# ~15 ns) a libgomp thread spins for more work
# after a loop before it sleeps, unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT.
# libgomp's default (300000, and forever with OMP_WAIT_POLICY=active) keeps the team's
# threads busy between loops: on a machine whose cores are shared (other processes,
# OpenBLAS's own threads during the gemm calls between our loops) a spinning thread takes
# the core the thread it waits for needs, which made W3 (loops and gemm calls in turn)
# 10-30x slower on a loaded 2-core machine. Short spins keep back-to-back loops cheap.
GOMP_SPINCOUNT = "10000"


def _quiet_idle_threads():
    """Read by libgomp when it is loaded (its constructor calls getenv)."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT


def openmp_library():
    """The path of the loaded libgomp, or None: not found, or GRAPHC_OPENMP=0 (then
    generated code runs its loops on the calling thread only)."""
    global _gomp_path
    if _teams_off():
        return None
    initialize()
    with _lock:
        if _gomp_path is False:
            _gomp_path = None
            _quiet_idle_threads()
            for path in _gomp_candidates():
                try:
                    # pinned first: at exit LLVM dlcloses the libraries it loaded
                    # "permanently", which unmapped libgomp under its idle threads (still
                    # spinning in its code): a segfault at exit
                    ctypes.CDLL(path, mode=os.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE", 0))
                    llvm.load_library_permanently(path)
                except (OSError, RuntimeError):
                    continue
                if llvm.address_of_symbol("GOMP_parallel"):
                    _gomp_path = path
                    break
    return _gomp_path


# A child forked after libgomp started its threads has none of them: a team there hangs.
# Children run every loop serially (Executable.set_num_threads asks `teams_allowed`).
_forked = False
_fork_hooks = []


def _after_fork_in_child():
    global _forked
    _forked = True
    for hook in _fork_hooks:
        hook()


def on_fork_in_child(hook):
    """Calls `hook()` in a child process after a fork (the runtime makes code serial)."""
    _fork_hooks.append(hook)


def teams_allowed():
    return not _forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_team = False  # not made yet


def _teams_off():
    return os.environ.get("GRAPHC_OPENMP", "1").lower() in ("0", "off", "false", "no")


def thread_team():
    """The process's thread team (runtime/team.py), made the first time it is asked for;
    None where the platform has none (libgomp then runs the regions) or GRAPHC_OPENMP=0."""
    global _team
    if _teams_off():
        return None
    with _lock:
        if _team is False:
            _team = None
            if team.supported():
                made = team.Team(CompiledModule(team.team_ir()))
                atexit.register(made.stop)
                on_fork_in_child(made.after_fork_in_child)
                _team = made
    return _team


def parallel_runtime():
    """What runs the regions of code compiled here: "team" (runtime/team.py), "libgomp",
    or None (each region's task runs once, on its caller)."""
    if thread_team() is not None:
        return "team"
    return "libgomp" if openmp_library() else None


def ensure_team_workers(threads):
    """Starts the team's workers a team of `threads` needs (none in a forked child)."""
    made = thread_team()
    if made is not None and threads > 1 and teams_allowed():
        made.ensure_workers(threads - 1)


def link_parallel_runtime(llvm_ir):
    """The IR with the thread-team functions it declares defined (our team, libgomp or
    serial)."""
    if PARALLEL_FN not in llvm_ir:
        return llvm_ir
    kind = parallel_runtime()
    shim = {"team": _TEAM_FORWARD, "libgomp": _OMP_FORWARD}.get(kind, _OMP_SERIAL)
    return _without_team_declarations(llvm_ir) + shim


def _without_team_declarations(llvm_ir):
    """llvm_ir less its lines that _OMP_DECLARE matches, found by str.find from each
    `declare` line: _OMP_DECLARE.sub over the whole text tried the pattern at every line
    of a module of megabytes (3 ms of a warm first run's 130 ms at depth 256), and a
    module declares a few dozen functions."""
    kept, start = [], 0
    line = 0 if llvm_ir.startswith("declare ") else _next_declaration(llvm_ir, 1)
    while line >= 0:
        end = llvm_ir.find("\n", line)
        end = len(llvm_ir) if end < 0 else end + 1
        if _OMP_DECLARE.match(llvm_ir, line, end):
            kept.append(llvm_ir[start:line])
            start = end
        line = _next_declaration(llvm_ir, end)
    kept.append(llvm_ir[start:])
    return "".join(kept)


def _next_declaration(llvm_ir, line):
    """The start of the first `declare` line at or after `line` (a line's start, > 0),
    or -1."""
    found = llvm_ir.find("\ndeclare ", line - 1)
    return found + 1 if found >= 0 else -1


# ------------------------------------------------------- what code may call
# The external symbols a compiled file's code may declare: exactly what this module binds
# (BLAS through _load_blas, the thread team through link_parallel_runtime, the BLAS pin
# through initialize) plus libm, malloc/free and LLVM's intrinsics. runtime/verify.py
# rejects code that declares anything else (system(), dlopen(), ...), so this is the one
# list to extend when codegen starts calling something new.
LIBM_FUNCTIONS = frozenset(
    f + suffix for f in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
                         "cbrt", "pow", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
                         "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
                         "tgamma", "lgamma", "fmod", "remainder", "floor", "ceil", "round",
                         "trunc", "rint", "nearbyint", "fabs", "copysign", "fmin", "fmax",
                         "hypot", "ldexp", "frexp", "modf")
    for suffix in ("", "f"))


# the C heap: per-thread scratch of thread teams and large convolution buffers
# (graphc/compiler/backends/cpu/parallel.py libc()), stacks a loop grows for its gradient
# (graphc/compiler/backends/cpu/control_flow.py)
LIBC_FUNCTIONS = frozenset({"malloc", "realloc", "free"})


def allowed_external_functions():
    """Names of the functions compiled code may declare (LLVM intrinsics, "llvm.*", aside)."""
    return (LIBM_FUNCTIONS | LIBC_FUNCTIONS | blas_exported_candidates() |
            {PARALLEL_FN, THREAD_NUM_FN, NUM_THREADS_FN, RUN_BEGIN_FN, RUN_END_FN})


ALLOWED_EXTERNAL_GLOBALS = frozenset({BLAS_PIN_GLOBAL})


def default_num_threads():
    """GRAPHC_NUM_THREADS if set, else the cores this process may run on."""
    env = os.environ.get("GRAPHC_NUM_THREADS")
    if env and env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# ------------------------------------------------------------------ target
_host_target = None


def host_target():
    """The target description codegen puts in a spec for this machine (asked of LLVM once
    per process: the query costs about 0.4 ms)."""
    global _host_target
    if _host_target is None:
        initialize()
        features = llvm.get_host_cpu_features().flatten()
        if "+avx512f" in features.split(","):
            # LLVM tunes AVX-512 CPUs to prefer 256-bit vectors (for clock throttling on
            # old Xeons); measured on these machines, 512-bit loops run W2/W5 ~25% faster.
            features += ",-prefer-256-bit"
        _host_target = {"triple": llvm.get_process_triple(), "cpu": llvm.get_host_cpu_name(),
                        "features": features}
    return dict(_host_target)


def _feature_set(features):
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def check_target(target):
    """Raises TargetMismatch when code built for `target` cannot run on this machine."""
    host = host_target()
    want_arch = (target.get("triple") or host["triple"]).split("-")[0]
    have_arch = host["triple"].split("-")[0]
    if want_arch != have_arch:
        raise TargetMismatch(f"code built for {target.get('triple')} cannot run on "
                             f"{host['triple']}")
    missing = _feature_set(target.get("features") or "") - _feature_set(host["features"])
    if missing:
        raise TargetMismatch("code built for CPU features this machine lacks: "
                             + ", ".join(sorted(missing)))


def target_machine(target=None, for_jit=True, opt=3):
    """A new target machine for `target` (default: the host) at code generation level
    `opt`. Not shared: an MCJIT engine takes ownership of its machine. MCJIT needs a JIT
    machine; emitting assembly needs a plain one (a JIT machine crashes there)."""
    host = host_target()
    target = target or {}
    features = target.get("features")
    return llvm.Target.from_triple(target.get("triple") or host["triple"]).create_target_machine(
        cpu=target.get("cpu") or host["cpu"],
        features=host["features"] if features is None else features, opt=opt,
        codemodel="jitdefault" if for_jit else "default", jit=for_jit)


# --------------------------------------------------------------- compile
# Everything besides the IR and the target that decides the machine code: part of the
# on-disk cache key (runtime/compile_cache.py). Change it when _optimize changes.
# ("variants-with-callers": module_split keeps the vector math functions in their
# callers' part; objects of parts split before that call sigmoid/tanh once per element
# and must not be loaded)
_PIPELINE = "O3 vectorize no-unroll noinline-branchy O0-entry variants-with-callers"
# Functions with a conditional branch (the kernels' loop nests) are not inlined into their
# caller (the entry): inlining a loop nest into a sequence of calls gains nothing at run
# time, and it made LLVM optimize and emit every kernel twice (its own copy and the
# inlined one). Straight-line helpers stay inlinable.
_DEFINE = re.compile(r'^define [^@]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\(', re.M)


def toolchain_id():
    return (f"llvm {'.'.join(map(str, llvm.llvm_version_info))} llvmlite "
            f"{llvmlite.__version__} " + _PIPELINE)


class CompiledModule:
    """LLVM IR compiled in memory; keeps its MCJIT engine (and so the code) alive.

    With the on-disk cache on (compile_cache), a hit loads the machine code stored by an
    earlier process for the same unoptimized IR and target: no O3 pipeline, no codegen.
    `cache_hit` says which happened; `memory_hit` that the code came from this process's
    in-memory copy of code it compiled before (compile_cache.memory_load)."""

    def __init__(self, llvm_ir, target=None, speed_level=3):
        """speed_level: LLVM's optimization level (3 for what runs fast; the GPU
        emulation, which only checks kernels, compiles at 1: a third of the time)."""
        initialize()
        start = time.perf_counter()
        llvm_ir = link_parallel_runtime(llvm_ir)
        if target:
            check_target(target)
        self.target = target
        self.speed_level = speed_level
        self._llvm_ir = llvm_ir
        self._optimized = None
        self.target_machine = target_machine(target)
        cache = compile_cache.default_cache()
        tm_target = {"triple": self.target_machine.triple,
                     "cpu": (target or {}).get("cpu") or host_target()["cpu"],
                     "features": _features_of(target)}
        key = compile_cache.make_key(llvm_ir, tm_target, toolchain_id() +
                                     ("" if speed_level == 3 else f" O{speed_level}"))
        obj = cache.load(key) if cache is not None else None
        self.cache_hit = obj is not None
        self.memory_hit = False
        self.worker_compiled = False
        if obj is None:
            obj = compile_cache.memory_load(key)
            self.memory_hit = obj is not None
            if obj is not None and cache is not None:
                cache.store(key, obj)  # the disk's entry went (evicted, corrupt): renew it
        if obj is None:
            objects = _compile_parts(llvm_ir, target, speed_level, tm_target)
            if objects is not None:
                obj = compile_cache.pack_objects(objects)
                _store(cache, key, obj)
        if obj is None and _worker_due():
            obj = _compile_in_worker(llvm_ir, target, speed_level)
            self.worker_compiled = obj is not None
            if obj is not None:
                _store(cache, key, obj)
        objects = compile_cache.unpack_objects(obj) if obj is not None else None
        self.parts = len(objects) if objects else 1
        if objects is not None and len(objects) > 1:
            self.engine = _engine_of_objects(objects, self.target_machine)
            self.compile_seconds = time.perf_counter() - start
            return
        if obj is None:
            obj = self._emit(llvm_ir, speed_level)
            _store(cache, key, obj)
        # MCJIT takes the object and resolves its symbols; the module it is given only
        # has to exist (the IR is parsed lazily if optimized_ir() is asked)
        module = llvm.parse_assembly("")
        module.triple = self.target_machine.triple
        module.data_layout = str(self.target_machine.target_data)
        with _lock:  # MCJIT's loader touches process-wide LLVM state
            self.engine = llvm.create_mcjit_compiler(module, self.target_machine)
            self.engine.set_object_cache(getbuffer_func=lambda _module: obj)
            self.engine.finalize_object()
        self.compile_seconds = time.perf_counter() - start

    def _emit(self, llvm_ir, speed_level):
        """The object code of the whole module, optimized here. Emitted by the target
        machine, not by MCJIT, whose code generator runs the IR verifier twice more
        (3 ms of compile_scale_8's 0.23 CPU s): the module was verified before O3."""
        module = _optimized_module(llvm_ir, self.target_machine, speed_level)
        _count_optimization()
        self._optimized = module
        with _lock:
            return self.target_machine.emit_object(module)

    def address(self, name):
        addr = self.engine.get_function_address(name)
        if not addr:
            raise LookupError(f"function {name} not found in the compiled module")
        return addr

    def global_address(self, name):
        """The address of global variable `name`, or None when the module has none."""
        return self.engine.get_global_value_address(name) or None

    def optimized_ir(self):
        if self._optimized is None:  # a cache hit: optimize a copy to show it
            self._optimized = _optimized_module(self._llvm_ir, target_machine(self.target),
                                                self.speed_level)
        return str(self._optimized)

    def asm(self):
        # emitted from a copy so that the engine's module is never touched again
        copy = llvm.parse_assembly(self.optimized_ir())
        return target_machine(self.target, for_jit=False).emit_assembly(copy)


# ------------------------------------------------------------ compile worker
# llvmlite's O3 pipeline leaks native memory on every module it optimizes (about 65 KB for
# a small module, more for big ones: LLVMPY_buildPerModuleDefaultPipeline and
# LLVMPY_RunNewModulePassManager; a pipeline cannot be built once and reused, running it
# consumes it), so a process that compiled 300 distinct graphs kept ~100 KB each for good
# even after every engine and executable was freed. Past its first IN_PROCESS_COMPILES
# optimizations a process therefore has its code optimized and emitted by a helper
# process (runtime/compile_worker.py) that is replaced after WORKER_COMPILES modules, and
# loads the object code it returns exactly as a compile-cache hit: memory levels off.
# GRAPHC_COMPILE_WORKER=0 keeps every compile in the process.
IN_PROCESS_COMPILES = 32
WORKER_COMPILES = 200
_worker_lock = threading.Lock()
_idle_workers = []  # started workers of this process waiting for a request
_optimizations = [0, os.getpid()]  # in-process optimizations so far, in this pid


def _count_optimization():
    with _worker_lock:
        if _optimizations[1] != os.getpid():
            _optimizations[:] = [0, os.getpid()]
        _optimizations[0] += 1


def _worker_due():
    if not _workers_allowed():
        return False
    # a forked child counts its own optimizations from 0
    return _optimizations[1] == os.getpid() and _optimizations[0] >= IN_PROCESS_COMPILES


class _CompileWorker:
    """One helper process: requests and replies are length-prefixed on its stdin/stdout."""

    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p))
        self.pid = os.getpid()  # the process that may talk to it (not a forked child)
        self.served = 0
        self.proc = subprocess.Popen([sys.executable, "-m", "runtime.compile_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=root)

    def compile(self, llvm_ir, target, speed_level):
        """The object code, or None when the worker reports a failure (the caller then
        compiles in-process, so the error is the one it always was)."""
        request = json.dumps({"llvm_ir": llvm_ir, "target": target,
                              "speed_level": speed_level}).encode()
        self.proc.stdin.write(struct.pack("<Q", len(request)) + request)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        if len(head) != 8:
            raise OSError("the compile worker exited")
        reply = self.proc.stdout.read(struct.unpack("<Q", head)[0])
        self.served += 1
        return reply[1:] if reply[:1] == b"\0" else None

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def _close_workers():
    """At exit: a worker ends with its stdin (it would anyway, once this process is gone)."""
    with _worker_lock:
        workers, _idle_workers[:] = list(_idle_workers), []
    for worker in workers:
        if worker.pid == os.getpid():
            worker.close()


atexit.register(_close_workers)


def _take_worker():
    """An idle worker of this process, else a new one."""
    with _worker_lock:
        while _idle_workers:
            worker = _idle_workers.pop()
            if worker.pid == os.getpid() and worker.served < WORKER_COMPILES:
                return worker
            if worker.pid == os.getpid():
                worker.close()
            # (a forked child leaves its parent's workers alone)
    return _CompileWorker()


def _idle_worker_count():
    with _worker_lock:
        return sum(w.pid == os.getpid() and w.served < WORKER_COMPILES
                   for w in _idle_workers)


def _compile_in_worker(llvm_ir, target, speed_level):
    """The object code a worker made of `llvm_ir`, or None when it failed (the caller
    then compiles in-process, so the error is the one it always was)."""
    worker = None
    try:
        worker = _take_worker()
        obj = worker.compile(llvm_ir, target, speed_level)
    except BaseException as e:
        # a worker interrupted mid-reply (Ctrl-C, a dead pipe) cannot be talked to again
        if worker is not None:
            worker.proc.kill()
            worker.close()
        if isinstance(e, (OSError, ValueError)):
            return None
        raise
    with _worker_lock:
        _idle_workers.append(worker)
    return obj


# ----------------------------------------------------------- parallel compile
# LLVM's time is most of a big graph's first run, and it runs on one core while the
# others wait. A module of at least SPLIT_MIN_WEIGHT (runtime/module_split.py's unit:
# bytes of function text; about 2 us of LLVM work each) is cut into one part per free
# core (compile_part_count()), which this process and compile workers optimize and emit at
# once; the parts' object files are linked by one MCJIT engine: the entry is still one
# native call per run. The compile cache keeps the parts' objects as one entry
# (compile_cache.pack_objects). Smaller modules (every graph of the test suite) stay
# whole: a worker costs WORKER_START_WEIGHT to start (a Python process importing llvmlite
# and numpy: 0.3-0.4 CPU s), which a part given to a new worker is dealt less work for.
SPLIT_MIN_WEIGHT = 256 * 1024
# An entry (optnone functions) of this much text or more is emitted at O0 as a part of
# its own (module_split.cut_optnone): lstm_train's 70 KB took 50 ms of O3 code
# generation and 25 at O0, compile_scale_64's 110 KB 50 and 20; a part costs a few ms
# (its declarations parsed, a target machine, one more object loaded)
ENTRY_PART_BYTES = 32 * 1024
WORKER_START_WEIGHT = 160 * 1024
MAX_PARTS = 4  # past this, more parts add more start-up and declarations than they save


def compile_part_count():
    """GRAPHC_COMPILE_PARTS if set, else the cores this process may run on that other
    processes leave free (at most MAX_PARTS); 1 compiles every module whole.

    Parts only help on cores nobody else runs on: on the 2-core machine with one other
    busy process (load average 2), two processes spinning at once each took 6.2 s for
    what one alone did in 3.8, and lstm_train's LLVM stage took 1.37 s in two parts vs
    0.97 whole (its worker's start-up and the parts' shared headers are work besides).
    So the count is the cores less the 1-minute load average, this process counted as
    one of the runners (it has been running the compiler's passes)."""
    env = os.environ.get("GRAPHC_COMPILE_PARTS", "").strip()
    if env.isdigit():
        return max(1, int(env))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):
        others = 0.0
    return max(1, min(int(cores - others + 0.5), MAX_PARTS))


def start_compile_workers():
    """Starts the workers a split compile would use, unless they are running already:
    called when a big graph's compile begins (graphc/compiler/driver.py), their start-up
    then overlaps the compiler's passes instead of delaying its LLVM stage."""
    parts = compile_part_count()
    if parts < 2 or not _workers_allowed():
        return
    wanted = parts - (0 if _worker_due() else 1)
    for _ in range(wanted - _idle_worker_count()):
        worker = _CompileWorker()
        with _worker_lock:
            _idle_workers.append(worker)


def _workers_allowed():
    return os.environ.get("GRAPHC_COMPILE_WORKER", "1").lower() not in ("0", "off", "false",
                                                                        "no")


def _compile_parts(llvm_ir, target, speed_level, tm_target):
    """[object code of each part, then of each library group] of a module compiled in
    parts at once and linked with its library functions' code (runtime/library_cache.py),
    or None when it is neither split nor has a library group nor a long entry, or a
    compile failed (the caller then compiles the module whole, which reports the error as
    it always did).

    A big module is cut into one part per free core (each part's process its own); else
    the module is one part, compiled here (or in a worker, jit.IN_PROCESS_COMPILES past).
    The library groups not cached yet are compiled by the same processes, each taking
    the next from a shared queue once its part is done. An entry of at least
    ENTRY_PART_BYTES is a part of its own, emitted here at O0 (module_split.cut_optnone)."""
    toolchain = toolchain_id() + ("" if speed_level == 3 else f" O{speed_level}")
    separated = library_cache.separate(llvm_ir)
    graph_ir, groups = separated if separated is not None else (llvm_ir, [])
    cut = module_split.cut_optnone(graph_ir, ENTRY_PART_BYTES)
    graph_ir, entry = cut if cut is not None else (graph_ir, None)
    keys = [library_cache.make_key(g, tm_target, toolchain) for g in groups]
    library = [library_cache.load(k) for k in keys]
    missing = sorted((k for k, obj in enumerate(library) if obj is None),
                     key=lambda k: -len(groups[k]))
    here = 0 if _worker_due() else 1  # parts compiled by this process (not its leak)
    parts = _split_over_workers(graph_ir, here)
    if parts is None:
        if not groups and entry is None:
            return None
        parts = [graph_ir]
    compiled = _compile_at_once(parts, [groups[k] for k in missing], here, target,
                                speed_level, entry)
    if compiled is None:
        return None
    objects, made = compiled
    for k, obj in zip(missing, made):
        library[k] = obj
        library_cache.store(keys[k], obj)
    return objects + library


def _split_over_workers(llvm_ir, here):
    """The module's parts, one per free core, or None when it stays whole."""
    count = compile_part_count()
    if count < 2 or not _workers_allowed():
        return None
    idle = _idle_worker_count()
    loads = [0] * here + [0 if k < idle else WORKER_START_WEIGHT
                          for k in range(count - here)]
    return module_split.split(llvm_ir, loads, SPLIT_MIN_WEIGHT)


def _compile_at_once(parts, queue, here, target, speed_level, entry=None):
    """([object code of each part, then of `entry`], [object code of each module of
    `queue`]), or None when one failed: part k is compiled by this process when k < here,
    else by a worker of its own; each process then takes the queue's next module until
    none is left. `entry` (a module text or None) is emitted at O0 by this process while
    the workers run (no optimization pipeline: nothing leaks, see IN_PROCESS_COMPILES)."""
    if entry is not None:
        parts = parts + [entry]
    objects = [None] * len(parts)
    made = [None] * len(queue)
    taken = iter(range(len(queue)))
    taking = threading.Lock()
    raised = []

    def run(k):
        try:
            if k < here:
                objects[k] = _part_in_process(parts[k], target, speed_level)
            else:
                objects[k] = _compile_in_worker(parts[k], target, speed_level)
            while True:
                with taking:
                    j = next(taken, None)
                if j is None:
                    return
                # (a library group counts toward IN_PROCESS_COMPILES as a part does: O3
                # leaks on it, and new conv sizes make new groups)
                if k < here:
                    made[j] = _part_in_process(queue[j], target, speed_level)
                else:
                    made[j] = _compile_in_worker(queue[j], target, speed_level)
        except BaseException as e:  # noqa: BLE001 -- raised again by the caller's thread
            raised.append(e)

    workers = len(parts) - (entry is not None)
    threads = [threading.Thread(target=run, args=(k,), daemon=True)
               for k in range(here, workers)]
    for thread in threads:
        thread.start()
    try:
        if entry is not None:
            objects[-1] = _part_in_process(entry, target, 0)
        if here:
            run(0)
    finally:
        for thread in threads:
            thread.join()
    if raised:
        raise raised[0]
    if any(o is None for o in objects + made):
        return None
    return objects, made


def _part_in_process(llvm_ir, target, speed_level):
    try:
        obj = object_code(llvm_ir, target, speed_level)
    except RuntimeError:
        return None  # compiled whole next, which reports it
    if speed_level > 0:
        _count_optimization()
    return obj


def _engine_of_objects(objects, tm):
    """One MCJIT engine that loads and links the object files of a module's parts."""
    module = llvm.parse_assembly("")
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    with _lock:
        engine = llvm.create_mcjit_compiler(module, tm)
        for obj in objects:
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
    return engine


def object_code(llvm_ir, target, speed_level):
    """Parses, optimizes and emits `llvm_ir` (thread-team runtime already linked) the way
    CompiledModule does, and returns the object code (what the compile cache stores: the
    same bytes as MCJIT emits, whose loader resolves the symbols when it loads them). Runs
    in the compile worker, and for the parts of a split module. speed_level 0: LLVM's O0,
    no optimization pipeline and the code generator's fast paths (a long entry's part)."""
    initialize()
    tm = target_machine(target, opt=0 if speed_level == 0 else 3)
    return tm.emit_object(_optimized_module(llvm_ir, tm, speed_level))


def _optimized_module(llvm_ir, tm, speed_level):
    """`llvm_ir` parsed for target machine `tm`, verified and optimized at `speed_level`
    (0: left as it is): what CompiledModule, object_code and optimized_ir all emit or
    show."""
    module = _parse(llvm_ir)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    module.verify()
    if speed_level > 0:
        _optimize(module, tm, speed_level)
    return module


def _store(cache, key, buf):
    compile_cache.memory_store(key, buf)
    if cache is not None:
        cache.store(key, buf)


def _features_of(target):
    features = (target or {}).get("features")
    return host_target()["features"] if features is None else features


def _parse(llvm_ir):
    """Parses the IR and marks its functions with branches noinline (see _PIPELINE)."""
    module = llvm.parse_assembly(llvm_ir)
    for name in _branchy_functions(llvm_ir):
        try:
            fn = module.get_function(name)
        except NameError:  # a quoted name with escapes: leave it to the inliner
            continue
        if not any(b"alwaysinline" in bytes(a) for a in fn.attributes):
            fn.add_function_attribute("noinline")
    return module


def _branchy_functions(llvm_ir):
    starts = [(m.start(), m.group(1)) for m in _DEFINE.finditer(llvm_ir)]
    names = []
    for (pos, name), (end, _) in zip(starts, starts[1:] + [(len(llvm_ir), None)]):
        if llvm_ir.find("br i1 ", pos, end) >= 0:
            if name.startswith('"'):
                name = name[1:-1]  # names codegen quotes hold no escapes
            names.append(name)
    return names


def _optimize(module, tm, speed_level=3):
    """O3 with the loop and SLP vectorizers (interleaving included: several vector
    accumulators per loop), but no loop unrolling pass: it fully unrolled tiny constant
    loops (a 10-class inner loop) and then vectorized those copies again, which doubled the
    optimized IR of the flagship's training step and cost about a third of its LLVM time
    (255 -> 170 ms), while the W1/W2/W5 benchmarks ran no slower without it."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
