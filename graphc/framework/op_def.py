"""The op registry: one OpDef per op type, holding everything graphc knows about that op.

An OpDef carries
  infer(inputs, attrs) -> (TensorShape, DType) or a list of them, one per output.
      Runs when the op is created; raises ValueError/TypeError for bad shapes/dtypes.
  kernel(*arrays, **attrs) -> array (one output) or a tuple/list of arrays: the NumPy
      reference kernel (the oracle for compiled code). A multi-output op type (Split,
      Unpack, ...) may have one output: its kernel still returns a sequence, see
      kernel_outputs. With `uses_context=True` the
      kernel is called as kernel(ctx, op, *arrays) and may read/write session state
      (variables, random generators).
  grad(op, *output_grads) -> list with one gradient Tensor (or None) per input.
  stateful: never constant-folded, never merged by CSE.
  ref_inputs: indices of inputs that name a variable to read or update (the output of a
      VariableV2 op) rather than pass its value; the executor passes None for them. An op
      may name more in its attr `ref_input_indices` (If and While: the variables their
      bodies capture by reference); ref_input_indices(op) gives them all.
Attrs hold only plain data (numbers, strings, bools, lists/tuples of them, DType,
TensorShape, NumPy arrays) so a graph can be written to a file without pickle.
"""
import numpy as np


class OpDef:
    def __init__(self, type, infer, kernel, grad=None, stateful=False, uses_context=False,
                 ref_inputs=()):
        self.type = type
        self.ref_inputs = tuple(ref_inputs)
        self.infer = infer
        self.kernel = kernel
        self.grad = grad
        self.stateful = stateful
        self.uses_context = uses_context
        self.differentiable = True

    def __repr__(self):
        return f"OpDef({self.type})"


OP_DEFS = {}

# Op types that read only the dims of their inputs, never their values: given static (or
# compile-time) shapes, every backend takes the result without computing the inputs, as
# TF's grappler does (so the Shape of an op that would fail at run time still runs).
READS_ONLY_INPUT_DIMS = frozenset({"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike"})


def register_op(type, *, infer, kernel, grad=None, stateful=False, uses_context=False,
                ref_inputs=()):
    """Registers an op type; returns its OpDef. Each type is registered once."""
    if type in OP_DEFS:
        raise KeyError(f"Op type {type!r} is already registered")
    op_def = OpDef(type, infer, kernel, grad, stateful, uses_context, ref_inputs)
    OP_DEFS[type] = op_def
    return op_def


def register_gradient(type):
    """Decorator: fn(op, *grads) -> list of input gradients, for an already registered op."""
    def decorate(fn):
        get_op_def(type).grad = fn
        return fn
    return decorate


def not_differentiable(*types):
    """Marks op types whose inputs get no gradient (None), e.g. comparisons, Shape."""
    for t in types:
        get_op_def(t).differentiable = False


def kernel_outputs(op, out):
    """The list of output arrays of a kernel's result for `op`. A kernel of a multi-output
    op type returns a sequence even when this op has one output (split in one piece,
    unstack of a dim of 1); taken as one array, it would gain a leading dim."""
    if len(op.outputs) != 1:
        return list(out)
    if isinstance(out, (tuple, list)) and len(out) == 1 and \
            isinstance(out[0], (np.ndarray, np.generic)):
        return [out[0]]
    return [out]


def ref_input_indices(op):
    """The indices of op's inputs that name a variable rather than pass its value."""
    extra = op.attrs.get("ref_input_indices")
    return op.op_def.ref_inputs + tuple(extra) if extra else op.op_def.ref_inputs


def get_op_def(type):
    try:
        return OP_DEFS[type]
    except KeyError:
        raise KeyError(f"No op registered for type {type!r}") from None
