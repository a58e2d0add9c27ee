"""The machine code of graph-independent library functions, compiled once per machine.

Codegen emits some functions whose text depends only on their own parameters, never on
the graph: the convolutions' register-tiled microkernels, their filter gradients and the
per-image copies (graphc/compiler/backends/cpu/conv_direct.py and conv_kernel.py, all
named LIBRARY_PREFIX...). A ResNet's module spends about a quarter of its LLVM time on
them, and every new graph with the same conv shapes compiled them again. runtime/jit.py
takes them out of a module it has to compile (module_split.separate: only a group of them
that refers to nothing but itself and declared functions), compiles each group alone,
keeps its object code here, and links the objects with the graph's in one MCJIT engine:
the graph's code still calls them directly (the loader resolves the names), and there is
still one native entry call per run. Files and specs keep the whole IR, so what
runtime/verify.py checks is unchanged, and a loaded file uses this cache too.

Key: compile_cache.make_key of the group's own text (its functions and the declarations
they call), the target and the toolchain (LLVM, llvmlite, optimization settings, speed
level), with this module's format in the toolchain string: a change of the generated
code, of LLVM or of the CPU features is a new key. Entries live in the `library`
folder of the compile cache's directory (GRAPHC_CACHE_DIR; "" or "off" disables the disk
copy) as compile_cache entries: a header with the key's digest and the payload's
SHA-256, written atomically, a corrupt or foreign entry deleted and compiled again,
nothing pickled. Within a process the objects are also kept in memory (bounded), so the
next graph of the process reuses them with the disk cache off as well.
"""
import collections
import os
import threading

from . import compile_cache, module_split

LIBRARY_PREFIX = "graphc_conv_"
FORMAT = "graphc-library 1"
MEMORY_MAX_BYTES = 16 * 2**20

# Counters for this process (tests and tools/compile_time.py read them): "compiled"
# counts library groups LLVM compiled, "memory_hits" and "disk_hits" those reused.
stats = {"compiled": 0, "memory_hits": 0, "disk_hits": 0}
disk_stats = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0, "errors": 0, "evicted": 0}
_lock = threading.Lock()
_memory = collections.OrderedDict()  # key -> object bytes, least recently used first
_memory_bytes = 0


def is_library(name):
    return name.startswith(LIBRARY_PREFIX)


def separate(llvm_ir):
    """(graph IR, [library group texts]) of a module, or None when it has no closed
    library group (or its text is not one module_split reads)."""
    separated = module_split.separate(llvm_ir, is_library)
    if separated is None or not separated[1]:
        return None
    return separated


def make_key(group_text, target, toolchain):
    return compile_cache.make_key(group_text, target, f"{FORMAT} {toolchain}")


def cache_dir():
    """The library's folder in the compile cache's directory, or None when it is off."""
    directory = compile_cache.cache_dir()
    return os.path.join(directory, "library") if directory else None


def _disk():
    directory = cache_dir()
    if directory is None:
        return None
    return compile_cache.ObjectCache(directory, compile_cache.max_bytes(), stats=disk_stats)


def load(key):
    """The object code of the library group stored under `key`, or None."""
    with _lock:
        obj = _memory.get(key)
        if obj is not None:
            _memory.move_to_end(key)
            stats["memory_hits"] += 1
            return obj
    disk = _disk()
    obj = disk.load(key) if disk is not None else None
    if obj is not None:
        with _lock:
            stats["disk_hits"] += 1
        _remember(key, obj)
    return obj


def store(key, obj):
    """Keeps the object code LLVM just made of a library group."""
    with _lock:
        stats["compiled"] += 1
    _remember(key, obj)
    disk = _disk()
    if disk is not None:
        disk.store(key, obj)


def _remember(key, obj):
    global _memory_bytes
    obj = bytes(obj)
    with _lock:
        if key in _memory or len(obj) > MEMORY_MAX_BYTES:
            return
        _memory[key] = obj
        _memory_bytes += len(obj)
        while _memory_bytes > MEMORY_MAX_BYTES:
            _, old = _memory.popitem(last=False)
            _memory_bytes -= len(old)


def forget_memory():
    """Drops the in-memory copies (tests: the next load goes to the disk)."""
    global _memory_bytes
    with _lock:
        _memory.clear()
        _memory_bytes = 0
