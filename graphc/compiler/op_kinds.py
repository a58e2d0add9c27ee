"""What kind of computation each op type is, as fusion and codegen see it.

Each op declares its kind where it is defined (register_op(..., kind=...); the live view
graphc.framework.op_def.OP_KINDS maps op type -> kind), one of:
  "elementwise"  out[i] = f(inputs at i, with broadcasting): math, activations, BiasAdd,
                 Cast, Select, Identity, CheckNumerics...
  "index"        out[i] = an input at a remapped index (reshape, transpose, slice, pad,
                 concat, gather, one_hot...) or a value of the index alone (Fill, Range,
                 ZerosLike, Shape...): no arithmetic worth sharing, so they fuse anywhere.
  "reduction"    an inner loop over some axes of one input (Sum, Max, ArgMax, Softmax,
                 the fused cross entropy, L2Loss, BiasAddGrad, SumToShape...).
  "gemm"         MatMul, BatchMatMulV2 (a BLAS call).
  "conv"         Conv2D and its two backprops.
  "window"       out[i] = a function of a window of an input around i (pooling and its
                 gradients in gather form): a loop rule like the kinds above, but each
                 input element is read by several outputs, so fusion puts a window op in
                 its consumers' loop, never an arithmetic producer into its loop (the
                 producer would be recomputed for every window that reads it).
  "opaque"       anything else, computed alone by its own codegen template (scans,
                 scatters, data-dependent output sizes, variable-status queries,
                 host-side ops: summaries, dataset iterators, candidate samplers,
                 MPI collectives).
  "state"        VariableV2 (a read) and Assign/AssignAdd/AssignSub (in-place updates;
                 the row scatters ScatterUpdate/ScatterAdd/ScatterSub update in place too,
                 but as "opaque" kernels of their own).
  "random"       counter-based random numbers: element = f(seed, counter, index), so they
                 fuse like elementwise ops (but are never duplicated).
  "source"       Const and Placeholder: values that exist before any kernel runs.
  "control"      NoOp: ordering only.

`kind_of(node)` refines the table for one IR node: a Parameter is a "source", and a
reduction whose axes are not known at compile time (a non-constant axis input, a softmax
over a non-trailing axis) is "opaque".
"""
import numpy as np

from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.schedule.kernel import dim_is
from graphc.framework.op_def import OP_DEFS, get_op_def
from graphc.framework.symbolic import SymDim

# Reductions whose output has the input's dims: the reduction is internal (row max/sum).
ROW_NORMALIZERS = frozenset({"Softmax", "LogSoftmax"})


def kind_of(node):
    """The kind of one IR node (see the module docstring)."""
    if node.type == PARAMETER:
        return "source"
    kind = get_op_def(node.type).kind
    if kind == "reduction" and reduction_axes(node) is None:
        return "opaque"
    return kind


def dims_known(dims):
    """True when every dim is an int or a SymDim (not None, not an unknown rank)."""
    return dims is not None and all(isinstance(d, (int, SymDim)) and not isinstance(d, bool)
                                    for d in dims)


def shape_only_inputs(node):
    """Indices of node's inputs whose data compiled code never reads (only dims): the op's
    dims_only_inputs when their dims are known, its shape_inputs when its output's are."""
    op_def = OP_DEFS.get(node.type)
    if op_def is None:
        return frozenset()
    if op_def.dims_only_inputs:
        spec = op_def.dims_only_inputs
        indices = range(len(node.inputs)) if spec == "all" else spec
        ok = all(dims_known(node.inputs[i].dims) for i in indices)
    else:
        indices = op_def.shape_inputs
        ok = all(dims_known(v.dims) for v in node.outputs)
    return frozenset(indices) if indices and ok else frozenset()


def _const_ints(value):
    if value.node.type != "Const":
        return None
    return [int(a) for a in np.reshape(value.node.attrs["value"], [-1])]


def reduction_axes(node):
    """(input index, sorted reduced axes, keep_dims) of a reduction node, or None when the
    axes are not known at compile time. keep_dims tells whether the output keeps the
    reduced axes as 1s; Softmax/LogSoftmax keep them at full size (ROW_NORMALIZERS)."""
    t = node.type
    x = node.inputs[0]
    if x.dims is None:
        return None
    rank = len(x.dims)
    if t in ("Sum", "Mean", "Max", "Min", "Prod", "Any", "All", "ArgMax", "ArgMin"):
        axes = _const_ints(node.inputs[1])
        if axes is None or any(not -rank <= a < rank for a in axes):
            return None
        keep = bool(node.attrs.get("keep_dims", False))
        return 0, tuple(sorted({a % rank for a in axes})), keep
    if t in ROW_NORMALIZERS:
        axis = node.attrs.get("axis", -1)
        if rank == 0 or axis % rank != rank - 1:
            return None
        return 0, (rank - 1,), True
    if t == "SparseSoftmaxCrossEntropyWithLogits":
        return 0, (rank - 1,), False
    if t == "L2Loss":
        return 0, tuple(range(rank)), False
    if t == "BiasAddGrad":
        channel = (1 if node.attrs.get("data_format") == "NCHW" else -1) % rank
        return 0, tuple(a for a in range(rank) if a != channel), False
    if t == "SumToShape":
        out = node.outputs[0].dims
        if out is None or not dims_known(out) or not dims_known(x.dims):
            return None
        lead = rank - len(out)
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out)
                                          if dim_is(d, 1) and not dim_is(x.dims[lead + i], 1))
        return 0, axes, True
    return None


# Strided views of batched products (fusion step 2b, loops/products.ProductViews)
def is_batched_product(node):
    """A floating-point BatchMatMulV2 (a BLAS call) with batch dims, its dims static and
    nonzero: one whose operands and result may be strided views (each batch entry's matrix
    found by its offset and leading dimension instead of a dense copy)."""
    out = node.outputs[0]
    return node.type == "BatchMatMulV2" and out.dtype.name in ("float32", "float64") and \
        out.dims is not None and len(out.dims) >= 3 and \
        all(_static(v.dims) for v in (out, *node.inputs[:2]))


def view_perm(node):
    """The perm of a Transpose that keeps its last axis last (so each matrix of the result
    has unit-stride rows: a strided view a GEMM can address), its dims static and nonzero;
    else None."""
    if node.type != "Transpose" or not isinstance(node.inputs[1], Value) or \
            node.inputs[1].node.type != "Const":
        return None
    x, out = node.inputs[0], node.outputs[0]
    if not (_static(x.dims) and _static(out.dims)) or len(out.dims) < 2:
        return None
    rank = len(out.dims)
    perm = [int(p) % rank for p in np.reshape(node.inputs[1].node.attrs["value"], -1)]
    return perm if len(perm) == rank and perm[-1] == rank - 1 else None


def row_major_strides(dims):
    """The element strides of a dense row-major array of static dims."""
    strides, size = [], 1
    for d in reversed(dims):
        strides.append(size)
        size *= int(d)
    return strides[::-1]


def _static(dims):
    return dims is not None and all(isinstance(d, (int, np.integer)) and d > 0 for d in dims)
