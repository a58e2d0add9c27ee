"""GatherGrad as a scatter-add kernel: zero the result, then one loop over the gradient
adding each element into its gathered position. The row scatters into a variable
(ScatterUpdate/ScatterAdd/ScatterSub) are the same loop over their updates, storing or
adding straight into the variable's buffer: only the rows they name are touched. Their
updates may be computed in the same loop by the kernel's other nodes (elementwise and
index ops that nothing else reads), element by element as they are stored.

    out[pre, indices[b, i], post] += grad[pre, i, post]     (b: the batch_dims prefix)

Repeated indices add up, in the gradient's row-major order (as the reference's add.at).
An index outside [0, params_shape[axis]) records an error site (the run fails with
InvalidArgumentError) and is clamped, so nothing is written out of bounds; into a buffer
of no elements, where no clamp lands, the emitter skips the stores (store_target).
"""
import numpy as np

from graphc.compiler.loops.emitter import StoreTarget, main_node, group_nests
from graphc.compiler.loops.views import KernelViews, LoweringError


def gather_grad_nests(program, kernel, rules):
    """(views, nests) of a GatherGrad kernel, for a backend to emit."""
    node = main_node(kernel, "GatherGrad")
    grad, indices, _, axis_t = node.inputs
    out = node.outputs[0]
    views = KernelViews(set(), program.storage_of, program.error_site, rules)
    vx = views.x
    rank = len(out.dims)
    axis = int(np.reshape(views.constant(axis_t), -1)[0])
    if not -rank <= axis < rank:
        raise LoweringError(f"GatherGrad axis {axis} out of range ({node.describe()})")
    axis %= rank
    ri = len(indices.dims)
    bd = node.attrs.get("batch_dims", 0)
    bd = bd + ri if bd < 0 else bd
    dtype = out.dtype.name
    limit = vx.dim(out.dims[axis])
    stores = program.stores_of(out)
    if not stores:
        raise LoweringError(f"GatherGrad result has no buffer ({node.describe()})")

    def place(g):
        idx = list(g[:bd]) + list(g[axis:axis + ri - bd])
        pos = views.checked_index(  # the reference's message names the bad index
            node, vx.cast(views.view(indices, idx), "int64"), limit,
            "indices{2} = {0} is not in [0, {1})",
            f"indices has a value that is not in [0, {out.dims[axis]})",
            [(vx.linear(idx, indices.dims), {"index": list(indices.dims)})])
        out_index = list(g[:axis]) + [pos] + list(g[axis + ri - bd:])
        # the row, for a team splitting by rows (parallel.py), only where pos is the
        # outermost index of the result
        row = (pos,) if axis == 0 else ()
        return (views.view(grad, g), vx.linear(out_index, out.dims)) + row

    zero = vx.const(0, dtype)
    fills = [StoreTarget(s, out.dims, dtype, lambda index: zero) for s in stores]
    adds = [StoreTarget(s, out.dims, dtype, None, accumulate="sum", loop_dims=grad.dims,
                        place=place) for s in stores]
    nests = group_nests(views, fills) + group_nests(views, adds)
    return views, nests


def scatter_nests(program, kernel, rules):
    """(views, nests) of ScatterUpdate/ScatterAdd/ScatterSub: one loop over the updates,
    each element stored (or added, subtracted) at its row of the variable; then the
    variable copied to the op's fetches, if it is fetched."""
    node = getattr(kernel, "main", None) or kernel.nodes[0]
    ref, indices, updates = node.inputs
    # the kernel's other nodes compute the updates (fusion's _fuse_scatter_updates)
    producers = {v for n in kernel.nodes if n is not node for v in n.outputs}
    views = KernelViews(producers, program.storage_of, program.error_site, rules)
    vx = views.x
    dtype, ri = ref.dtype.name, len(indices.dims)
    var = ("var", ref.name)
    limit = vx.dim(ref.dims[0])

    def place(u):
        row = views.checked_index(
            node, vx.cast(views.view(indices, u[:ri]), "int64"), limit,
            "indices{2} = {0} is not in [0, {1})",
            f"indices has a value that is not in [0, {ref.dims[0]})",
            [(vx.linear(u[:ri], indices.dims), {"index": list(indices.dims)})])
        value = views.view(updates, u)
        if node.type == "ScatterSub":  # x + -y is x - y, bit for bit
            value = vx.op("Neg", [value], dtype)
        return value, vx.linear([row] + list(u[ri:]), ref.dims), row

    accumulate = None if node.type == "ScatterUpdate" else "sum"
    writes = [StoreTarget(var, ref.dims, dtype, None, accumulate=accumulate,
                          loop_dims=updates.dims, place=place)]
    copies = [StoreTarget(s, ref.dims, dtype,
                          lambda index: views.load(var, index, ref.dims, dtype))
              for s in program.stores_of(node.outputs[0]) if s != var]
    nests = group_nests(views, writes) + group_nests(views, copies)
    return views, nests
