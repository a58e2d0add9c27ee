"""THE compile path: a run signature (or a lowered module) -> an executable spec.

    result = compile_signature(feeds, fetches, targets, feed_shapes, target=..., options=...)
    result = compile_module(module, target, options)   # CompileResult(spec, pass_stats, dumps)
    stats = schedule_module(module, target, options)   # the stages before code generation

The stages, in order:
    lower.py     graph -> ir.Module for one run signature (symbolic dims, guards)
    pipeline.py  optimize: the switchable passes of passes/ (prune, folding, CSE, ...)
    schedule/    always: fusion (the kernels), memory planning (scratch sizes asked of the
                 backend)
    backend      generate: backends/cpu/ (LLVM IR, x86 code) or backends/gpu/ (PTX and its
                 CPU emulation), chosen by the target, both lowering through loops/
The Session (CPU and GPU), gc.export, tools/ and the tests compile through here, so a switch
(GRAPHC_DISABLE_PASSES) or a dump (GRAPHC_DUMP) does the same wherever the compile comes
from. A target is a CPU target ({"triple", "cpu", "features"}, default the host) or a GPU
one (gpu_target()). Finished specs are kept in the on-disk spec cache (spec_cache.py)
unless the compile is dumped, profiled or asked not to be cached.
"""
import contextlib
import gc
import os
import threading
import time
from typing import NamedTuple, Optional

from graphc.compiler import spec_cache
from graphc.compiler.lower import lower, ops_to_lower
from graphc.compiler.pipeline import ModuleDumps, disabled_passes, optimize
from graphc.compiler.schedule import schedule
from runtime import compile_cache, jit

__all__ = ["CompileOptions", "CompileResult", "compile_options", "compile_signature",
           "compile_module", "schedule_module", "gpu_target", "GPU_ARCH"]

GPU_ARCH = "sm_80"  # the compute capability GPU code is compiled for unless told
# A graph this big (lowered nodes) likely makes an LLVM module that runtime/jit.py
# compiles in parts beside worker processes: they are started as its compile begins, so
# that their start-up overlaps the passes (an LSTM step of 32 steps: 1.8k nodes, 0.5 MB
# of LLVM IR; an MLP of depth 64: 1.2k nodes, 0.1 MB, compiled whole)
PRESTART_WORKERS_NODES = 1500


class CompileOptions(NamedTuple):
    disable: frozenset = frozenset()  # switched-off pass and schedule names (pipeline.py)
    dump_dir: Optional[str] = None    # write the module after each stage under this folder
    keep_dumps: bool = False          # return those texts in CompileResult.dumps
    profile: bool = False             # CPU: the entry counts each kernel's cycles
    cache: bool = True                # read and write the on-disk spec cache


class CompileResult(NamedTuple):
    spec: dict                   # the executable spec (docs/compiler.md section 6)
    pass_stats: Optional[dict]   # {pass or schedule step: its counts}; None: from the cache
    dumps: Optional[dict]        # {"lowered" | stage name: module text} when kept
    times: dict = {}             # {stage: seconds}: cache (pruning, the spec cache's key
    #                              and look-up), lower, optimize, schedule, generate


def compile_options(disable=None, dump_dir=None, keep_dumps=False, profile=None,
                    cache=True):
    """CompileOptions as the environment sets them (GRAPHC_DISABLE_PASSES, GRAPHC_DUMP,
    GRAPHC_PROFILE) with the arguments added; an unknown pass name is a ValueError."""
    if profile is None:
        profile = os.environ.get("GRAPHC_PROFILE", "") not in ("", "0")
    return CompileOptions(disable=frozenset(disabled_passes(disable)),
                          dump_dir=dump_dir if dump_dir is not None
                          else os.environ.get("GRAPHC_DUMP") or None,
                          keep_dumps=keep_dumps, profile=profile, cache=cache)


def gpu_target(arch=GPU_ARCH, ptx=True):
    """The target of GPU code for compute capability `arch`; ptx=False: the spec carries no
    PTX (for the CPU emulation alone, a fifth of the compile time)."""
    target = {"kind": "gpu", "arch": arch}
    if not ptx:
        target["ptx"] = False
    return target


def compile_signature(feeds, fetches, targets, feed_shapes, feed_values=None,
                      variable_shapes=None, exclude=frozenset(), target=None, options=None,
                      ops=None):
    """Lowers one run signature and compiles it (compile_module). feed_values: the fed
    arrays, when known (small integer feeds whose values decide shapes are specialized on,
    guarded, see lower.py); variable_shapes: {name: shape} of the variables now; exclude:
    ops an earlier stage of the run has already run; ops: the signature's ops to lower
    when the caller has them (lower.ops_to_lower). The spec cache is looked up by a key
    made from the graph (spec_cache.signature_key), so a warm process does not lower."""
    options = options if options is not None else compile_options()
    target = target if target is not None else _host_target()
    with _no_full_collections():
        start = time.perf_counter()
        if ops is None:
            ops = ops_to_lower(fetches, targets, feeds, exclude)
        key = None
        if _cacheable(options):
            key = spec_cache.signature_key(feeds, fetches, targets, feed_shapes, feed_values,
                                           variable_shapes, exclude, ops, options.disable,
                                           target)
            spec = spec_cache.load(key, feeds, feed_values) if key else None
            if spec is not None:
                return CompileResult(spec, None, None, {"cache": time.perf_counter() - start})
        looked_up = time.perf_counter()
        module = lower(feeds, fetches, targets, feed_shapes, feed_values=feed_values,
                       variable_shapes=variable_shapes, exclude=exclude, ops=ops)
        lowered = time.perf_counter() - looked_up
        result = _compile(module, target, options, key)
    return result._replace(times={"cache": looked_up - start, "lower": lowered,
                                  **result.times})


# Compiles running now (threads may compile at once), and the collector's thresholds
# to restore when the last one ends.
_compiles = {"running": 0, "thresholds": None}
_compiles_lock = threading.Lock()
# gc's third threshold: a full collection runs once this many young collections have run
# since the last one (never, during a compile)
_NO_FULL_COLLECTION = 2 ** 30


@contextlib.contextmanager
def _no_full_collections():
    """Holds off the cyclic collector's full collections while a compile runs: each one
    walked the user's whole graph (often the largest thing in the heap) again, a cost that
    grows as the graph times the number of collections (lowering's time grew as
    depth^1.6). Young collections still collect the cycles the compile makes, and the
    collector's counts go on, so the full collection they add up to runs after the compile.

    (gc.freeze() did this before, but a freeze zeroes the counts that trigger
    collections: a process compiling many small graphs never ran a full collection, and
    the cycles each graph leaves, its llvmlite IR, ctypes types and the graph itself,
    piled up: test_long_process_memory kept 57 KB per graph.)"""
    with _compiles_lock:
        if _compiles["running"] == 0:
            _compiles["thresholds"] = gc.get_threshold()
            young, older = _compiles["thresholds"][:2]
            gc.set_threshold(young, older, _NO_FULL_COLLECTION)
        _compiles["running"] += 1
    try:
        yield
    finally:
        with _compiles_lock:
            _compiles["running"] -= 1
            if _compiles["running"] == 0:
                gc.set_threshold(*_compiles["thresholds"])


def compile_module(module, target=None, options=None):
    """The CompileResult of a lowered module for `target` (default: the host CPU): the
    passes, the schedule and the backend's code generation, run over `module` in place.
    Raises the backend's LoweringError (or GpuCodegenNotImplemented) for what it cannot
    generate."""
    options = options if options is not None else compile_options()
    target = target if target is not None else _host_target()
    return _compile(module, target, options)


def _compile(module, target, options, key=None):
    """compile_module, the spec cache looked up (and filled) under `key`, else under the
    module's own key."""
    backend = _backend(target)
    if key is None and _cacheable(options):
        key = spec_cache.key(module, options.disable, target)
        spec = spec_cache.load(key) if key else None
        if spec is not None:
            return CompileResult(spec, None, None, {})
    dumps = ModuleDumps(module.name, options.dump_dir, options.keep_dumps)
    times = {}
    if len(module.nodes) >= PRESTART_WORKERS_NODES and target.get("kind") != "gpu":
        jit.start_compile_workers()
    stats = _optimize_and_schedule(module, backend, options, dumps, times)
    start = time.perf_counter()
    spec = backend.generate(module, target, options)
    times["generate"] = time.perf_counter() - start
    if _cacheable(options):
        spec_cache.store(key, spec)
    return CompileResult(spec, stats, dumps.texts, times)


def schedule_module(module, target=None, options=None):
    """Runs the passes and the schedule over a lowered module (in place: module.kernels
    and module.memory_plan set) and stops before code generation, for what inspects the
    stages (tests, tools/ptxas_report.py). Returns {pass or step name: its counts}."""
    options = options if options is not None else compile_options()
    backend = _backend(target if target is not None else _host_target())
    dumps = ModuleDumps(module.name, options.dump_dir, options.keep_dumps)
    return _optimize_and_schedule(module, backend, options, dumps)


def _optimize_and_schedule(module, backend, options, dumps, times=None):
    times = times if times is not None else {}
    start = time.perf_counter()
    _optimize_regions(module, options)
    stats = optimize(module, options.disable, dumps=dumps)
    times["optimize"] = time.perf_counter() - start
    _schedule_regions(module, backend, options)
    stats.update(schedule(module, backend.scratch_bytes,
                          fuse="fusion" not in options.disable,
                          reuse="memory_planning" not in options.disable, dumps=dumps,
                          strided_products=backend.strided_products))
    times["schedule"] = time.perf_counter() - start - times["optimize"]
    return stats


def _optimize_regions(module, options):
    """Runs the passes over the bodies of the module's native While and If nodes
    (regions.py), nested ones first, before the module's own passes: those that rewrite
    a loop (sink_loop_gemms.py) match its body's optimized form."""
    for node in module.nodes:
        for region in node.regions.values():
            _optimize_regions(region, options)
            optimize(region, options.disable,
                     dumps=ModuleDumps(region.name, options.dump_dir, False))


def _schedule_regions(module, backend, options):
    """Schedules the bodies (optimized by _optimize_regions) as modules of their own,
    before the module's own schedule, whose memory plan asks the backend for the scratch
    memory the bodies need."""
    for node in module.nodes:
        for region in node.regions.values():
            _schedule_regions(region, backend, options)
            schedule(region, backend.scratch_bytes, fuse="fusion" not in options.disable,
                     reuse="memory_planning" not in options.disable,
                     dumps=ModuleDumps(region.name, options.dump_dir, False))


def _cacheable(options):
    # a cached spec skips the stages, so it has no dumps, counts nor profile to give; with
    # no cache directory (GRAPHC_CACHE_DIR=off) there is nothing to look up, so no key is
    # made (a signature's key walks the graph)
    return options.cache and not (options.dump_dir or options.keep_dumps or options.profile) \
        and compile_cache.cache_dir() is not None


def _backend(target):
    """The code generator of a target; imported when first needed (it loads llvmlite)."""
    if target.get("kind") == "gpu":
        from graphc.compiler.backends.gpu import GpuBackend
        return GpuBackend
    from graphc.compiler.backends.cpu import CpuBackend
    return CpuBackend


def _host_target():
    return jit.host_target()
