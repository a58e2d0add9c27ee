"""Symbolic reverse-mode differentiation: gradient ops are inserted into the graph.

Each op type registers its gradient function next to its definition
(`OpDef.grad(op, *output_grads) -> [input_grad or None, ...]`). `gradients` walks the
ops between `xs` and `ys` in reverse creation order, sums the gradients that reach a
tensor from several consumers, and calls each op's gradient function inside a
`gradients/<op name>_grad` name scope. Ops created there remember the forward op they
differentiate, so a run-time error in them names the forward op and its source line.
The gradient of a gather's params is an IndexedSlices (graphc/framework/indexed_slices.py),
kept sparse as TF1 does. The gradients of cond and while_loop are If and While ops of their
bodies' gradient bodies (graphc/ops/cond_v2.py, while_v2.py), built by this same walk run
inside a gradient body.
"""
from typing import List, Union

from graphc.framework.api_types import Optional, Sequence, TensorLike
from graphc.framework.graph import Tensor
from graphc.framework.indexed_slices import IndexedSlices


def _as_tensor_list(values, as_ref):
    from graphc.ops.constant_ops import convert_to_tensor
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        values = [values]
    out = []
    for v in values:
        if as_ref and hasattr(v, "_ref"):
            out.append(v._ref())
        else:
            out.append(convert_to_tensor(v))
    return out


def _ancestors(ys, stop):
    """Ops that ys depend on through data inputs, not passing through `stop` tensors."""
    seen = set()
    stack = [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs if t not in stop)
    return seen


def _descendants(xs, graph):
    consumers = {}
    for op in graph.get_operations():
        for t in op.inputs:
            consumers.setdefault(t, []).append(op)
    seen = set()
    stack = [c for x in xs for c in consumers.get(x, [])]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in op.outputs:
            stack.extend(consumers.get(t, []))
    return seen


def _sum(grads):
    """TF1's aggregation: dense gradients (or a mix, densified) by add_n, IndexedSlices
    alone by concatenating their rows (repeated rows are summed where they are used)."""
    from graphc.ops.math_ops import add_n
    grads = [g for g in grads if g is not None]
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    if any(not isinstance(g, IndexedSlices) for g in grads):
        return add_n(grads)
    return _concat_slices(grads)


def _concat_slices(slices):
    from graphc import dtypes
    from graphc.ops import array_ops, math_ops
    index_dtype = (dtypes.int64 if any(s.indices.dtype == dtypes.int64 for s in slices)
                   else dtypes.int32)
    indices = [math_ops.cast(s.indices, index_dtype) for s in slices]
    values = array_ops.concat([s.values for s in slices], 0)
    return IndexedSlices(values, array_ops.concat(indices, 0), slices[0].dense_shape)


# Op types whose gradient functions take an IndexedSlices as it is (as TF's do).
_TAKE_INDEXED_SLICES = frozenset({"ConcatV2"})

# Op types whose gradient functions take None for an output no gradient reaches, not
# zeros: a While's or If's saved intermediates (outputs a first gradients() call added)
# reached by a gradient are a second derivative, and zeros for them would be
# differentiated through the bodies again for nothing (as TF2's while_v2/cond_v2).
_TAKE_NONE = frozenset({"While", "If"})


def _dense(g, op):
    """What op's gradient function receives: IndexedSlices densified unless it takes them."""
    from graphc.ops.constant_ops import convert_to_tensor
    if isinstance(g, IndexedSlices) and op.type not in _TAKE_INDEXED_SLICES:
        return convert_to_tensor(g)
    return g


def _building_graph(graph):
    """Where the gradient ops go: the graph of ys, or the default graph when that is the
    gradient body of a cond or loop whose forward body holds ys (framework/func_graph.py;
    the forward body's tensors it reads are its saved intermediates)."""
    from graphc.framework.graph import get_default_graph
    default = get_default_graph()
    return default if default is graph or default._reads_from(graph) else graph


# The ops between xs and ys of each gradients() call building now, innermost last (a
# gradient body's walk runs inside its While's gradient function).
_between = []


def input_needed(t):
    """Whether the gradients() call building now needs d/dt: t's op lies between its xs
    and ys. A gradient function may skip the work for the others (a backward loop's
    accumulator of a captured input that no x reaches), as TF1 computes gradients only
    along those ops; any other caller gets every input's gradient."""
    return not _between or t.op in _between[-1]


def gradients(ys: Union[Tensor, Sequence[Tensor]], xs: Union[TensorLike, Sequence[TensorLike]],
              grad_ys: Optional[Sequence[Optional[TensorLike]]] = None, name: str = "gradients",
              colocate_gradients_with_ops: bool = False, gate_gradients: bool = False,
              aggregation_method=None,
              stop_gradients: Optional[Sequence[Tensor]] = None
              ) -> List[Optional[Union[Tensor, IndexedSlices]]]:
    """d(sum(ys))/d(x) for each x in xs, as a list of Tensors (None where unconnected),
    or IndexedSlices where all that reaches x is sparse (the params of a gather)."""
    from graphc.ops import array_ops
    ys = _as_tensor_list(ys, as_ref=False)
    xs = _as_tensor_list(xs, as_ref=True)
    stop = set(_as_tensor_list(stop_gradients, as_ref=True))
    if not ys:
        raise ValueError("gradients: ys must not be empty")
    graph = ys[0].graph
    build = _building_graph(graph)
    if grad_ys is not None and not isinstance(grad_ys, (list, tuple)):
        grad_ys = [grad_ys]
    if grad_ys is not None and len(grad_ys) != len(ys):
        raise ValueError(f"Passed {len(grad_ys)} grad_ys for {len(ys)} ys")
    with build.as_default(), build.name_scope(name):
        grads = {}
        for i, y in enumerate(ys):
            gy = None if grad_ys is None else grad_ys[i]
            if gy is None:
                # TF seeds integer ys with ones too; no gradient passes an integer tensor,
                # so their xs get None
                if not (y.dtype.is_floating or y.dtype.is_integer):
                    raise TypeError(f"Tensor {y.name} with type {y.dtype.name} must be "
                                    "numeric to obtain a default gradient")
                gy = array_ops.ones_like(y, name=f"grad_ys_{i}")
            else:
                from graphc.ops.constant_ops import convert_to_tensor
                gy = convert_to_tensor(gy, dtype=y.dtype)
            grads.setdefault(y, []).append(gy)
        between = _ancestors(ys, stop) & (_descendants(xs, graph) | {x.op for x in xs})
        _between.append(between)
        try:
            _walk(build, between, xs, grads, stop)
        finally:
            _between.pop()
        return [_sum(grads.get(x, [])) for x in xs]


def _walk(build, between, xs, grads, stop):
    """Adds to `grads` ({tensor: [gradients reaching it]}) the gradients of the ops
    `between`, from the last created back."""
    from graphc.ops import array_ops
    x_set = set(xs)
    for op in sorted(between, key=lambda o: o._id, reverse=True):
        out_grads = [_sum(grads.get(t, [])) for t in op.outputs]
        if all(g is None for g in out_grads) or any(t in stop for t in op.outputs):
            continue
        if all(t in x_set for t in op.outputs) and op.type in ("VariableV2", "Placeholder"):
            continue
        if op.type == "Identity" and isinstance(out_grads[0], IndexedSlices):
            if op.inputs[0] not in stop:
                grads.setdefault(op.inputs[0], []).append(out_grads[0])
            continue
        grad_fn = op.op_def.grad
        if not op.op_def.differentiable or not any(t.dtype.is_floating for t in op.inputs):
            continue
        if grad_fn is None:
            raise LookupError(f"No gradient defined for operation '{op.name}' "
                              f"(op type: {op.type})")
        with build.name_scope(op.name + "_grad"), build.gradient_of(op):
            out_grads = [_dense(g, op) for g in out_grads]
            if len(out_grads) > 1 and op.type not in _TAKE_NONE:
                out_grads = [array_ops.zeros_like(t) if g is None and t.dtype.is_floating
                             else g for g, t in zip(out_grads, op.outputs)]
            in_grads = list(grad_fn(op, *out_grads))
        if len(in_grads) != len(op.inputs):
            raise ValueError(f"Gradient function for op type {op.type} returned "
                             f"{len(in_grads)} gradients, expected {len(op.inputs)}")
        for t, g in zip(op.inputs, in_grads):
            if g is not None and t.dtype.is_floating and t not in stop:
                if not isinstance(g, (Tensor, IndexedSlices)):
                    raise TypeError(f"Gradient of {op.type} for input {t.name} is not a "
                                    f"Tensor: {g!r}")
                grads.setdefault(t, []).append(g)
