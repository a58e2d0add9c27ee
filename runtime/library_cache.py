"""The machine code of the conv library functions, compiled once per machine.

Codegen emits some functions whose text depends only on their own parameters, never on
the graph: the convolutions' register-tiled microkernels, their filter gradients, the
per-image copies, the direct convs' team tasks of each conv shape, the filter flip and the
partial filters' fold (graphc/compiler/backends/cpu/conv_direct.py, conv_images.py and
conv_kernel.py, all named LIBRARY_PREFIX...). resnet_train's module spends about a third
of its LLVM time on them, and every new graph with the same conv shapes compiled them
again. (What is cached
is each group specialized on the sizes its calls pass alike, see `specialize`: a new
graph reuses it when its convs have those sizes.) runtime/jit.py
takes them out of a module it has to compile (module_split.separate: only a group of them
that refers to nothing but itself and declared functions), compiles each group alone,
keeps its object code here, and links the objects with the graph's in one MCJIT engine:
the graph's code still calls them directly (the loader resolves the names), and there is
still one native entry call per run. Files and specs keep the whole IR, so what
runtime/verify.py checks is unchanged, and a loaded file uses this cache too.

Key: compile_cache.make_key of the group's own text (its functions, specialized on the
sizes every call of the graph passes alike, and the declarations they call), the target
and the toolchain (LLVM, llvmlite, optimization settings, speed level), with this
module's format in the toolchain string: a change of the generated code, of LLVM or of
the CPU features is a new key. Entries live in the `library`
folder of the compile cache's directory (GRAPHC_CACHE_DIR; "" or "off" disables the disk
copy) as compile_cache entries: a header with the key's digest and the payload's
SHA-256, written atomically, a corrupt or foreign entry deleted and compiled again,
nothing pickled. Within a process the objects are also kept in memory (bounded), so the
next graph of the process reuses them with the disk cache off as well.
"""
import collections
import os
import re
import threading

from . import compile_cache, module_split

LIBRARY_PREFIX = "graphc_conv_"
FORMAT = "graphc-library 2"
MEMORY_MAX_BYTES = 16 * 2**20

# Counters for this process (tests and tools/compile_time.py read them): "compiled"
# counts library groups LLVM compiled, "memory_hits" and "disk_hits" those reused.
stats = {"compiled": 0, "memory_hits": 0, "disk_hits": 0}
disk_stats = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0, "errors": 0, "evicted": 0}
_lock = threading.Lock()
_memory = compile_cache.MemoryCache()


def is_library(name):
    return name.startswith(LIBRARY_PREFIX)


def separate(llvm_ir):
    """(graph IR, [library group texts]) of a module, or None when it has no closed
    library group (or its text is not one module_split reads). Each group's entry points
    are specialized on the arguments that every call of the graph passes as the same
    constant (`specialize`)."""
    separated = module_split.separate(llvm_ir, is_library)
    if separated is None or not separated[1]:
        return None
    rest, groups = separated
    sites = CallSites(rest)
    return rest, [specialize(group, sites) for group in groups]


# Within one module LLVM's interprocedural constant propagation (IPSCCP) puts the sizes
# that all of a conv function's calls pass (a ResNet stage's convs share their image and
# channel sizes) into its body: constant trip counts and strides. A group compiled alone
# gets the same code by having those constants written into it here (with the sizes left
# as arguments, resnet_train's step measured 184-198 ms against 140-157 before, three
# interleaved runs of tools/bench.py on the loaded 2-core machine). They are part of the
# group's text, so of its key: graphs whose convs have the same sizes share the code.
_CALL = re.compile(r'\bcall void (@(?:"[^"\\]*"|[-\w$.]+))\(([^()\n]*)\)')
_REF = re.compile(r'@(?:"[^"\\]*"|[-\w$.]+)')
_DECLARED = re.compile(r'^declare [^\n]*?(@(?:"[^"\\]*"|[-\w$.]+))\(', re.M)
_DEFINED = re.compile(r'^define [^\n]*?(@(?:"[^"\\]*"|[-\w$.]+))\(', re.M)
_CONSTANT_ARG = re.compile(r"^i64 (-?\d+)$")


class CallSites:
    """The calls a module's text makes, read in one pass: {callee: [argument texts]},
    and how often each name appears otherwise than in its declaration or definition."""

    def __init__(self, text):
        self.calls = collections.defaultdict(list)
        for m in _CALL.finditer(text):
            self.calls[m.group(1)].append(m.group(2))
        self.uses = collections.Counter(_REF.findall(text))
        self.uses.subtract(_DECLARED.findall(text))
        self.uses.subtract(_DEFINED.findall(text))

    def only_called(self, ref, *more):
        """[argument texts of each call] of `ref` ("@name" as the IR spells it) here and
        in the CallSites `more`, or None when it is not called, or referred to otherwise
        (its address taken)."""
        sites = (self,) + more
        calls = [args for s in sites for args in s.calls.get(ref, ())]
        uses = sum(s.uses[ref] for s in sites)
        return calls if calls and len(calls) == uses else None


def specialize(group, sites):
    """The group's text with the constant arguments of its entry points' calls (the
    same integer at every call; sites: CallSites of the graph's text) in place of the
    parameters' uses. The group's own calls count too: an entry point that another of
    its functions calls with other sizes keeps the sizes that differ as parameters."""
    own = CallSites(group)
    for name in module_split.defined_functions(group):
        ref = f'@"{name}"' if f'@"{name}"(' in group else f"@{name}"  # as the IR spells it
        calls = sites.only_called(ref, own)
        constants = _common_constants(calls) if calls else None
        if constants:
            group = _with_constants(group, ref, constants)
    return group


def _common_constants(calls):
    """{argument position: integer text} of the i64 literals every call passes alike."""
    rows = [[a.strip() for a in args.split(",")] for args in calls]
    if len({len(r) for r in rows}) != 1:
        return {}
    out = {}
    for k, first in enumerate(rows[0]):
        m = _CONSTANT_ARG.match(first)
        if m and all(r[k] == first for r in rows):
            out[k] = m.group(1)
    return out


def _with_constants(group, ref, constants):
    """`ref`'s definition in the group with the uses of parameter k replaced by
    constants[k] (the parameters stay: its callers' code is unchanged)."""
    start = group.find("define ")
    while start >= 0 and group.find(ref + "(", start, group.find("\n", start)) < 0:
        start = group.find("define ", start + 1)
    if start < 0:
        return group
    open_at = group.index(ref + "(", start) + len(ref)
    close_at = group.index(")", open_at)
    params = [p.strip().split(" ")[-1] for p in group[open_at + 1:close_at].split(",")]
    body_at = group.index("{\n", close_at)
    end = group.find("\n}\n", body_at)
    end = len(group) if end < 0 else end
    body = group[body_at:end]
    for k, value in constants.items():
        if k >= len(params) or not params[k].startswith("%"):
            return group
        body = re.sub(re.escape(params[k]) + (r"" if params[k].endswith('"')
                                               else r"(?![-\w$.])"), value, body)
    return group[:body_at] + body + group[end:]


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
    obj = _memory.load(key)
    if obj is not None:
        with _lock:
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
    _memory.store(key, obj, MEMORY_MAX_BYTES)


def forget_memory():
    """Drops the in-memory copies (tests: the next load goes to the disk)."""
    _memory.clear()
