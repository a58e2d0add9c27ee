"""The operands of the TensorArray gradient kernels (graphc/ops/tensor_array_ops.py),
checked once for both targets' lowerings (backends/cpu/tensor_arrays.py and
backends/gpu/tensor_arrays.py, which may not import each other)."""
from graphc.compiler.loops.views import LoweringError
from graphc.compiler.schedule.kernel import dims_equal

_SUMMED = ("float32", "float64")


def gather_grad_operands(node):
    """(g, indices, into, out) of a TensorArrayGatherGrad: g's rows add into out's rows at
    the indices; into, a 4th input, is the sum they add to (tensor_array_ops.
    accumulated_read_gradient), else None (zeros)."""
    g, _, indices = node.inputs[:3]
    into = node.inputs[3] if len(node.inputs) > 3 else None
    out = node.outputs[0]
    if not dims_equal(g.dims, tuple(indices.dims) + tuple(out.dims[1:])) or \
            (into is not None and not dims_equal(into.dims, out.dims)):
        raise LoweringError(f"{node.describe()} adds {g.dims} into {out.dims} at "
                            f"{indices.dims} indices")
    if out.dtype.name not in _SUMMED:
        raise LoweringError(f"{node.describe()} sums {out.dtype.name} rows")
    return g, indices, into, out


def scatter_grad_operands(node):
    """(g, indices, out) of a TensorArrayScatterGrad: out is g with the rows at the
    indices zeroed."""
    g, _, indices = node.inputs
    out = node.outputs[0]
    if not dims_equal(out.dims[1:], g.dims[1:]) or not dims_equal(out.dims[:1], g.dims[:1]):
        raise LoweringError(f"{node.describe()} takes {out.dims} rows of {g.dims}")
    return g, indices, out
