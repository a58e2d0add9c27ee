"""What kind of computation each op type is, as fusion and codegen see it.

OP_KINDS maps every registered op type to one kind:
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
                 host-side ops: summaries, dataset iterators, candidate samplers).
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

from graphc.compiler.ir import PARAMETER
from graphc.framework.op_def import READS_ONLY_INPUT_DIMS

KINDS = ("elementwise", "index", "reduction", "gemm", "conv", "window", "opaque", "state",
         "random", "source", "control")

_ELEMENTWISE = """Abs Add AddN BiasAdd Cast Ceil CheckNumerics Cos Elu Equal Erf Erfc Exp Expm1
    Floor FloorDiv FloorMod Greater GreaterEqual Identity LeakyRelu Less LessEqual Log
    Log1p LogicalAnd LogicalNot LogicalOr Maximum Minimum Mul Neg NotEqual Pow RealDiv
    Reciprocal Relu Relu6 Round Rsqrt Select Selu Sigmoid Sign Sin Softplus Softsign Sqrt
    Square SquaredDifference StopGradient Sub Tanh PlaceholderWithDefault"""
_INDEX = """BroadcastTo ConcatV2 ExpandDims Fill GatherV2 MirrorPad OneHot OnesLike Pack Pad
    PadV2 Range Rank Reshape Shape ShapeN Size Slice Split SplitV Squeeze StridedSlice
    StridedSliceGrad Tile Transpose Unpack ZerosLike"""
_REDUCTION = """All Any ArgMax ArgMin BiasAddGrad L2Loss LogSoftmax Max Mean Min Prod Softmax
    SparseSoftmaxCrossEntropyWithLogits Sum SumToShape"""
_WINDOW = "AvgPool AvgPoolGrad MaxPool MaxPoolGrad MaxPoolGradGrad"
_OPAQUE = """Cumsum GatherGrad InvertPermutation IsVariableInitialized MirrorPadGrad
    ScatterAdd ScatterSub ScatterUpdate Unique UninitializedNames
    VariableValueOrDefault Where
    HistogramSummary ImageSummary MergeSummary ScalarSummary IteratorGetNext MakeIterator
    LogUniformCandidateSampler UniformCandidateSampler Assert
    If While TensorArrayV3 TensorArrayScatterV3 TensorArrayGatherV3 TensorArrayScatterGrad
    TensorArrayGatherGrad"""

OP_KINDS = {}
for _kind, _names in [("elementwise", _ELEMENTWISE), ("index", _INDEX),
                      ("reduction", _REDUCTION), ("window", _WINDOW), ("opaque", _OPAQUE),
                      ("gemm", "MatMul BatchMatMulV2"),
                      ("conv", "Conv2D Conv2DBackpropInput Conv2DBackpropFilter"),
                      ("state", "VariableV2 Assign AssignAdd AssignSub"),
                      ("random", "RandomStandardNormal RandomUniform RandomUniformInt "
                                 "TruncatedNormal"),
                      ("source", "Const Placeholder"), ("control", "NoOp")]:
    for _name in _names.split():
        OP_KINDS[_name] = _kind

SCATTER_OPS = frozenset({"ScatterUpdate", "ScatterAdd", "ScatterSub"})
# Ops writing their variable input in place; all but Assign also read it (the rows or
# elements they leave or combine with).
UPDATE_OPS = frozenset({"Assign", "AssignAdd", "AssignSub"}) | SCATTER_OPS
READING_UPDATE_OPS = UPDATE_OPS - {"Assign"}
# Reductions whose output has the input's dims: the reduction is internal (row max/sum).
ROW_NORMALIZERS = frozenset({"Softmax", "LogSoftmax"})

# Inputs whose values are never read, only their dims (or the output's dims say it all):
# op type -> input indices. They hold only when the dims involved are all known (ints or
# SymDim expressions), see shape_only_inputs.
_SHAPE_ONLY = {"Shape": "all", "ShapeN": "all", "Size": "all", "Rank": "all",
               "ZerosLike": (0,), "OnesLike": (0,), "Reshape": (1,), "ExpandDims": (1,),
               "Fill": (0,), "BroadcastTo": (1,), "SumToShape": (1,),
               "RandomStandardNormal": (0,), "RandomUniform": (0,), "TruncatedNormal": (0,),
               "RandomUniformInt": (0,)}
# of those, READS_ONLY_INPUT_DIMS (graphc.framework.op_def) are the ones whose listed inputs'
# own dims are what matters (not the output's)


def kind_of(node):
    """The kind of one IR node (see the module docstring)."""
    if node.type == PARAMETER:
        return "source"
    kind = OP_KINDS.get(node.type, "opaque")
    if kind == "reduction" and reduction_axes(node) is None:
        return "opaque"
    return kind


def dims_known(dims):
    """True when every dim is an int or a SymDim (not None, not an unknown rank)."""
    from graphc.framework.symbolic import SymDim
    return dims is not None and all(isinstance(d, (int, SymDim)) and not isinstance(d, bool)
                                    for d in dims)


def shape_only_inputs(node):
    """Indices of node's inputs whose data compiled code never reads (only dims)."""
    spec = _SHAPE_ONLY.get(node.type)
    if spec is None:
        return frozenset()
    indices = range(len(node.inputs)) if spec == "all" else spec
    if node.type in READS_ONLY_INPUT_DIMS:
        ok = all(dims_known(node.inputs[i].dims) for i in indices)
    else:
        ok = all(dims_known(v.dims) for v in node.outputs)
    return frozenset(indices) if ok else frozenset()


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
        from graphc.compiler.kernel import dim_is
        lead = rank - len(out)
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out)
                                          if dim_is(d, 1) and not dim_is(x.dims[lead + i], 1))
        return 0, axes, True
    return None
