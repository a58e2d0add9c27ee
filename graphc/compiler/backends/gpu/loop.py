"""The grid-stride loop template: a launch's nests with their parallel loops flattened.

For each nest, the loops down to launches.flat_depth (everything, for an elementwise nest;
all but the row loop, for a softmax) become one loop over their flattened index

    for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)

(consecutive threads take consecutive elements: coalesced loads and stores), and the
rest of the nest (a row's reductions, then the row's elements) runs in that thread as
on the CPU, emitted by the loop layer's emitter itself (loops.emitter.Emitter: the same
views, expressions and scalar ops). Reductions that need no loop variable (a total used
by every element) are computed by each thread before its loop. A nest whose iterations
depend on each other (launches.loaded_elsewhere: a scan the scan template does not take,
see scan.py) or that stores nothing below the top (a scalar total) runs in global thread
0 alone.

Accumulating targets (a scatter-add) fold with atomics in PTX (atomicrmw add/fadd); the
emulation runs threads one at a time and folds with a plain load, add and store.
"""
from contextlib import contextmanager

from llvmlite import ir

from graphc.compiler.backends.gpu.launches import (GpuCodegenNotImplemented, flat_depth,
                                               loaded_elsewhere)
from graphc.compiler.loops.emitter import Emitter, targets_by_level
from kernels import dtypes as kd
from kernels.loops import I32, I64, CarriedLoop


class GpuEmitter(Emitter):
    """The loop layer's emitter with atomic folds (PTX) for accumulating targets."""

    nvptx = False

    def store_element(self, t, value, position):
        if not (t.accumulate and self.nvptx):
            return super().store_element(t, value, position)
        if t.accumulate != "sum" or t.dtype in ("float16", "bool"):
            raise GpuCodegenNotImplemented(f"no atomic {t.accumulate} of {t.dtype} on GPU")
        ptr = kd.element_pointer(self.b, self.buffers[t.storage], position, t.dtype)
        op = "fadd" if kd.is_float(t.dtype) else "add"
        self.b.atomic_rmw(op, ptr, value, "monotonic")


def make_emitter(t, program, views, buffers, scalar_ops):
    em = GpuEmitter(t.b, views, buffers, t.syms, program.emit_dim, scalar_ops)
    em.nvptx = t.nvptx
    return em


def emit_loop_launch(t, program, layout, scalar_ops):
    """The body of a grid-stride loop launch (see the module doc)."""
    b = t.b
    with t.threads() as tid:
        em = make_emitter(t, program, layout.views, dict(zip(layout.storages, t.args)), scalar_ops)
        first = b.add(b.mul(t.ctaid, t.ntid), tid, name="gid")
        stride = b.mul(t.ntid, t.nctaid, name="gstride")
        for nest in layout.nests:
            emit_grid_nest(em, nest, first, stride)
        report_errors(t, em)


def report_errors(t, em):
    """Inside threads(): this thread's first failure (if any) into status and syms."""
    if em.error_slot is None:
        return
    details = [t.b.load(slot, typ=I64) for slot in (em.detail_slots or ())]
    t.report_status(t.b.load(em.error_slot, typ=I32), details, em.detail_base or 0)


def emit_grid_nest(em, nest, first, stride):
    by_level = targets_by_level(nest)
    deepest = max(by_level, default=-1)
    depth = flat_depth(nest)
    b = em.b
    if depth < 0 or loaded_elsewhere(nest):
        with b.if_then(b.icmp_signed("==", first, ir.Constant(I64, 0))):
            em.scopes.append({})  # values made here do not dominate what follows
            em.emit_level(nest, -1, by_level, deepest)
            em.scopes.pop()
        return
    em.hoist([e for ts in by_level.values() for t in ts for e in (t.expr, t.position)])
    flat = [v for v in nest.vars[:depth + 1] if v is not None]
    extents = [em.value(v.extent) for v in flat]
    total = extents[0]
    for e in extents[1:]:
        total = b.mul(total, e)
    with grid_stride_loop(b, first, stride, total, "flat") as i:
        rest = i
        for v, extent in reversed(list(zip(flat, extents))):
            em.var_values[v.id] = b.urem(rest, extent) if v is not flat[0] else rest
            rest = b.udiv(rest, extent)
            em.defined.add(v.id)
        em.scopes.append({})
        em.emit_level(nest, depth, by_level, deepest)
        em.scopes.pop()
        for v in flat:
            em.defined.discard(v.id)


@contextmanager
def grid_stride_loop(b, first, stride, n, name):
    """`for (i = first; i < n; i += stride)` as a context manager yielding i (i64)."""
    with CarriedLoop(b, n, (), name, start=first, step=stride) as (i, _):
        yield i
