"""A "loop" kernel -> one LLVM function: the kernel's store targets in loop nests
(loops/emitter.py), the outermost loops split across the thread team (parallel.py).

A final reduction whose result does not fit the kernel's loop as a prefix (a column sum:
BiasAddGrad, a reduce over axis 0) is an accumulating target of the main loop, filled with
its identity first, instead of a loop of its own reading the input column by column.

The function is `i32 name(ptr noalias buf0, ..., ptr syms)`: one pointer per distinct
buffer, then the symbol values; it returns 0, or 1 + the error site that fired.

A large output that no later kernel reads is written past the caches (streamed_storages:
the rule; the emitter's _emit_streaming: the code).
"""
import functools
import glob
import os

import numpy as np
from llvmlite import ir

from graphc.compiler.backends.cpu import parallel
from graphc.compiler.loops.emitter import (PEEL_BYTES, Emitter, StoreTarget, group_nests,
                                           kernel_targets, storages_used)
from graphc.compiler.loops.expr import dims_key, loaded_storages, walk
from graphc.compiler.loops.views import KernelViews
from graphc.compiler.op_kinds import reduction_axes
from kernels.loops import I32, PTR


def emit_loop_function(llvm_module, name, views, nests, storages, dim_emitter, scalar_ops,
                       prologue=None, streamed=frozenset()):
    """Defines the kernel function; returns it. `prologue(builder, buffers, syms)` emits
    code that runs before the loop nests (a gemm call before its epilogue); `streamed`:
    the storages whose stores bypass the caches (streamed_storages)."""
    fnty = ir.FunctionType(I32, [PTR] * (len(storages) + 1))
    fn = ir.Function(llvm_module, fnty, name)
    fn.attributes.add("nounwind")
    for arg in fn.args[:-1]:
        arg.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    buffers = dict(zip(storages, fn.args))
    if prologue is not None:
        prologue(builder, buffers, fn.args[-1])
    # the nests run at the function's top level: their outermost loops are splittable
    splitter = parallel.ParallelLoops(llvm_module, name) if parallel.enabled() else None
    emitter = Emitter(builder, views, buffers, fn.args[-1], dim_emitter, scalar_ops, splitter,
                      piecewise=True, streamed=streamed)
    for nest in nests:
        emitter.emit_nest(nest)
    builder.ret(emitter.status())
    return fn


def emit_nests(program, name, views, nests, scalar_ops):
    """The kernel function storing `nests` (group_nests output) and its storage keys."""
    storages = storages_used(nests)
    fn = emit_loop_function(program.llvm, name, views, nests, storages, program.emit_dim,
                            scalar_ops)
    return fn, storages


def lower_loop_kernel(program, kernel, name, scalar_ops, rules):
    """The LLVM function of a "loop" kernel and its storage keys (its pointer args)."""
    computed = {v for n in kernel.nodes for v in n.outputs}
    views = KernelViews(computed, program.storage_of, program.error_site, rules)
    folded, folds, fills, finishes = _accumulated_outputs(program, views, kernel)
    stored = [v for v in kernel.outputs if v not in folded]
    targets = kernel_targets(program, views, stored, kernel.nodes) + folds
    nests = group_nests(views, fills) + group_nests(views, targets) + \
        group_nests(views, finishes)
    storages = storages_used(nests)
    streamed = streamed_storages(program, kernel, stored, nests)
    fn = emit_loop_function(program.llvm, name, views, nests, storages, program.emit_dim,
                            scalar_ops, streamed=streamed)
    return fn, storages


# Element types a line is stored as one vector of (bool and float16 convert per element).
_STREAMABLE = ("float32", "float64", "int32", "int64")


def streamed_storages(program, kernel, stored, nests):
    """The storages of `stored` (the kernel's outputs) written with nontemporal stores:
    those no kernel of the run reads afterwards (Program.unread_stores: a fetch only the
    caller reads), stored element by element over the whole of their nest (contiguous in
    its innermost loop, over rows of at least PEEL_BYTES) and not read by the kernel
    itself, when the kernel's inputs and outputs (sizes known at compile time) are at
    least stream_threshold() bytes."""
    unread = {s for v in stored for s in program.unread_stores(v)}
    touched = _static_bytes(list(kernel.inputs) + list(stored)) if unread else None
    if touched is None or touched < stream_threshold():
        return frozenset()
    loaded = set()
    for e in walk([e for nest in nests for t in nest.targets for e in (t.expr, t.position)]):
        loaded.update(loaded_storages(e))
    fit, unfit = set(), set()
    for nest in nests:
        for t in nest.targets:
            whole = (t.place is None and t.accumulate is None and t.dtype in _STREAMABLE
                     and dims_key(t.dims) == nest.key and _long_rows(t))
            (fit if whole else unfit).add(t.storage)
    return frozenset((fit & unread) - unfit - loaded)


def _long_rows(target):
    """Whether the innermost loop over `target` spans PEEL_BYTES: a row's elements before
    its first line and after its last are stored one by one, which rows of 1024 floats
    (layer norm's) did not win back. numpy puts a large array 16 bytes past a line, so
    the rows of a [N, 1024] fetch all need them; a flat loop (W1's) needs them once per
    chunk of the team."""
    inner = target.dims[-1] if target.dims else 1
    return isinstance(inner, (int, np.integer)) and \
        int(inner) * np.dtype(target.dtype).itemsize >= PEEL_BYTES


def _static_bytes(values):
    """The bytes of `values` together, or None when a size is known only at run time."""
    total = 0
    for v in values:
        dims = getattr(v, "dims", None)
        if dims is None or not all(isinstance(d, (int, np.integer)) for d in dims):
            return None
        total += int(np.prod(dims, dtype=np.int64)) * v.dtype.size
    return total


def stream_threshold():
    """Bytes of a kernel's inputs and outputs from which its unread outputs are
    streamed: GRAPHC_STREAM_BYTES, else the largest cache that serves one core (this
    VM's L2: 2 MiB; its 260 MiB L3 is the host's, shared with other guests). Measured
    on it, out = f(a, b, c) of 4 equal arrays, median CPU time per run, plain ->
    streamed stores: 1 MiB of arrays 40 -> 45 us (all four stay in L2 between runs),
    2 MiB 93 -> 79 us, 4 MiB 163 -> 140 us, 16 MiB 1.26 -> 1.11 ms, 64 MiB 5.29 -> 4.48
    ms (one thread; with two, 5.28 -> 4.59)."""
    env = os.environ.get("GRAPHC_STREAM_BYTES", "")
    if env.isdigit():
        return int(env)
    return _private_cache_bytes() or _DEFAULT_PRIVATE_CACHE


_DEFAULT_PRIVATE_CACHE = 2 << 20


@functools.lru_cache(maxsize=None)
def _private_cache_bytes():
    """The largest data cache that serves one CPU alone (Linux sysfs), or None."""
    sizes = []
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(index, "shared_cpu_list")) as f:
                shared = f.read().strip()
            with open(os.path.join(index, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size[:-1].isdigit() or "," in shared or "-" in shared:
            continue
        sizes.append(int(size[:-1]) << {"K": 10, "M": 20, "G": 30}.get(size[-1], 0))
    return max(sizes, default=None)


# Reductions whose result is the fold of the input's elements (a Mean's divided by the
# count afterwards, in a pass of its own).
_FOLDS = {"Sum": "sum", "Prod": "prod", "Max": "max", "Min": "min", "Any": "any",
          "All": "all", "BiasAddGrad": "sum", "SumToShape": "sum", "Mean": "sum"}
# A float Mean folds its sum into its own buffer only where the sum is kept in its dtype
# (op_lowering's accumulator): the division then sees the bits the unfolded mean would.
_MEAN_DTYPES = ("float32", "float64")


def _accumulated_outputs(program, views, kernel):
    """Final reductions over the kernel's loop that do not fit it as a prefix (column
    sums: BiasAddGrad, reduce over axis 0) become accumulating targets of the main loop.
    Returns (those values, their accumulating targets, the targets filling them with the
    reduction's identity first, the targets dividing a folded mean by its count last).
    A mean over a middle axis (an embedding bag's [batch, ids, dim] -> [batch, dim]) so
    runs with the kept innermost axis in the inner, vectorized loop, rather than as a
    reduction over the ids for each element read column by column."""
    folded, folds, fills, finishes = set(), [], [], []
    loop_dims = getattr(kernel, "dims", None)
    if not loop_dims:
        return folded, folds, fills, finishes
    loop_key = dims_key(loop_dims)
    for value in kernel.outputs:
        node = value.node
        kind = _FOLDS.get(node.type)
        if kind is None or value.dtype.name == "float16" or node not in kernel.nodes:
            continue
        if node.type == "Mean" and value.dtype.name not in _MEAN_DTYPES:
            continue
        spec = reduction_axes(node)
        stores = program.stores_of(value)
        if spec is None or not stores or dims_key(node.inputs[0].dims) != loop_key:
            continue
        _, axes, keep = spec
        if tuple(axes) == tuple(range(len(loop_key) - len(axes), len(loop_key))):
            continue  # a reduction over trailing axes is hoisted in the loop instead
            # (decided by the axes, not the dims: [64] of a [64,14,14,64] sum over the
            # first three axes looks like a prefix of the loop when batch == channels)
        dtype = value.dtype.name
        identity = _identity_const(views, kind, dtype)
        for storage in stores:
            folds.append(StoreTarget(storage, value.dims, dtype, None, accumulate=kind,
                                     loop_dims=loop_dims,
                                     place=_placer(views, node.inputs[0], value, axes, keep)))
            fills.append(StoreTarget(storage, value.dims, dtype, lambda index, e=identity: e))
            if node.type == "Mean":
                finishes.append(_mean_finish(views, storage, value, node.inputs[0], axes))
        folded.add(value)
    return folded, folds, fills, finishes


def _mean_finish(views, storage, value, source, axes):
    """The target dividing the folded sum in `storage` by the count of reduced elements
    (op_lowering's _mean_of, on the sum as stored)."""
    dtype = value.dtype.name
    count = views.x.const(1)
    for a in axes:
        count = views.x.mul(count, views.x.dim(source.dims[a]))

    def mean(index):
        total = views.x.load(storage, views.x.linear(index, value.dims), dtype)
        return views.x.op("RealDiv", [total, views.x.cast(count, dtype)], dtype)
    return StoreTarget(storage, value.dims, dtype, mean)


def _placer(views, source, value, axes, keep):
    def place(index):
        out_index = [views.x.const(0) if a in axes else i for a, i in enumerate(index)
                     if keep or a not in axes]
        lead = len(out_index) - len(value.dims)  # SumToShape drops leading axes
        out_index = out_index[lead:]
        body = views.x.cast(views.view(source, index), value.dtype.name)
        return body, views.x.linear(out_index, value.dims)
    return place


def _identity_const(views, kind, dtype):
    if kind in ("sum", "any"):
        value = 0
    elif kind in ("prod", "all"):
        value = 1
    elif dtype.startswith(("float", "complex")):
        value = -np.inf if kind == "max" else np.inf
    else:
        info = np.iinfo(dtype)
        value = info.min if kind == "max" else info.max
    return views.x.const(value, dtype)
