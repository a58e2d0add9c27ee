"""Cumsum as a scan kernel: sequential along the axis, vectorized across the other dims.

The loop nest runs over the output dims in row-major order, so for each outer index the
scan axis is a loop whose body is a vectorizable inner loop over the trailing dims:

    out[o, e, k] = x[o, e, k] + out[o, e - 1, k]          (inclusive)
    out[o, e, k] = x[o, e - 1, k] + out[o, e - 1, k]      (exclusive), 0 at the start

reading the previous row of the output it has just written (e runs backwards when
`reverse`). Sums are in the output type, in the reference's order (bit-identical).
float16 (which the reference accumulates in float32) is instead a prefix reduction per
element, in float32.
"""
import numpy as np

from graphc.compiler.loops.emitter import StoreTarget, main_node, group_nests
from graphc.compiler.loops.views import KernelViews, LoweringError


def cumsum_nests(program, kernel, rules):
    """(views, nests) of a Cumsum kernel, for a backend to emit."""
    node = main_node(kernel, "Cumsum")
    x, axis_t = node.inputs
    out = node.outputs[0]
    views = KernelViews(set(), program.storage_of, program.error_site, rules)
    rank = len(out.dims)
    axis_value = np.asarray(views.constant(axis_t))
    stores = program.stores_of(out)
    if not stores:
        raise LoweringError(f"Cumsum result has no buffer ({node.describe()})")
    dtype = out.dtype.name
    vx = views.x
    if axis_value.ndim != 0 or not -rank <= int(axis_value) < rank:
        # as the reference (and TF), a bad axis is a run-time error: the kernel only fails
        message = (f"ScanOp: axis must be a scalar, not {list(axis_value.shape)}"
                   if axis_value.ndim else f"ScanOp: Expected scan axis in the range "
                   f"[{-rank}, {rank}), but got {int(axis_value)}")
        failed = vx.check(vx.const(-1), vx.const(1), views.site(node, message))
        targets = [StoreTarget(s, out.dims, dtype, lambda index: vx.cast(failed, dtype))
                   for s in stores]
        return views, group_nests(views, targets)
    axis = int(axis_value) % rank
    exclusive, reverse = node.attrs["exclusive"], node.attrs["reverse"]
    size = vx.dim(out.dims[axis])

    def element(index):
        """The element index of loop index `index` (the axis runs backwards if reverse)."""
        if not reverse:
            return list(index)
        e = list(index)
        e[axis] = vx.sub(vx.sub(size, vx.const(1)), index[axis])
        return e

    def previous(index):
        p = list(index)
        p[axis] = vx.max(vx.sub(index[axis], vx.const(1)), vx.const(0))
        return element(p)

    def scan(index):
        first = vx.compare("eq", index[axis], vx.const(0))
        before = vx.load(stores[0], vx.linear(previous(index), out.dims), dtype)
        if exclusive:
            step = vx.op("Add", [before, views.view(x, previous(index))], dtype)
            return vx.select(first, vx.const(0, dtype), step)
        here = views.view(x, element(index))
        return vx.select(first, here, vx.op("Add", [before, here], dtype))

    def prefix(index):  # float16: sum of the prefix in float32, per element
        var, j = vx.var(size, "j")
        last = index[axis]
        keep = vx.compare("lt" if exclusive else "le", j, last)
        at = list(index)
        at[axis] = j
        body = vx.select(keep, vx.cast(views.view(x, element(at)), "float32"),
                         vx.const(0, "float32"))
        return vx.cast(vx.reduce("sum", [var] if var is not None else [], body, "float32"),
                       dtype)

    value = prefix if dtype == "float16" else scan
    targets = [StoreTarget(s, out.dims, dtype, value) for s in stores]
    nests = group_nests(views, targets)
    for nest in nests:
        for t in nest.targets:
            t.position = vx.linear(element(t.index), out.dims)
    return views, nests
