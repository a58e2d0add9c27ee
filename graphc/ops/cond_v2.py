"""cond, case and switch_case as one functional op, If (TF2's cond_v2), not Switch/Merge.

If(pred, *then_captures, *else_captures) runs one of two bodies (FuncGraphs named by its
attrs then_branch/else_branch, each reading its own captured inputs): only the taken
branch's ops run, its assigns included. The outputs are the branch's outputs (their
shapes the most specific shape both branches agree on), then the saved intermediates.

Saved intermediates: the gradient of an If is an If of the two branches' gradient
bodies. A gradient body reads forward values of its branch; the forward If outputs them
(attr `saved`, [branch, tensor name] pairs, appended as gradients ask for them, as
cond_v2 rewrites its forward op): the taken branch gives their values, the other branch
zeros of their static shape (never read: the gradient If takes the same branch). Because
the gradient is an If of ordinary ops, its own gradient (a second derivative) is built the
same way.
"""
import numpy as np

from graphc import dtypes
from graphc.framework import nest
from graphc.framework.func_graph import function_of
from graphc.framework.graph import Operation, get_default_graph
from graphc.framework.op_def import register_gradient, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.function_call import (run_function, set_outputs, trace, zeros_for_gradient,
                                      zeros_of_static_shape)

__all__ = ["cond", "case", "switch_case"]


def _if_infer(inputs, a):
    return list(zip(a["output_shapes"], a["output_dtypes"]))


def _if_kernel(state, op, pred, *args):
    branch = "then" if bool(pred) else "else"
    n_then = op.attrs["num_then_inputs"]
    n_else = len(function_of(op, "else_branch").inputs)
    body = function_of(op, branch + "_branch")
    body_args = args[:n_then] if branch == "then" else args[n_then:n_then + n_else]
    saved = op.attrs["saved"]
    mine = [body.get_tensor_by_name(name) for b, name in saved if b == branch]
    values = iter(run_function(state, body, body_args, mine))
    n_out = len(body.outputs)
    outs = [next(values) for _ in range(n_out)]
    for (b, _), t in zip(saved, op.outputs[n_out:]):
        outs.append(next(values) if b == branch else zeros_of_static_shape(t.shape, t.dtype))
    return outs


# host-only but for the CPU's and GPU's code, which compile the branches graphc/compiler/regions.py
# accepts; any other runs on the host between native stages, its bodies on the reference
# executor
register_op("If", infer=_if_infer, kernel=_if_kernel, stateful=True, uses_context=True,
            kind="opaque", host_only=True)


def cond(pred, true_fn=None, false_fn=None, strict=False, name=None, fn1=None, fn2=None):
    """tf.compat.v1.cond: true_fn() if pred else false_fn(), as one If op; only the taken
    branch runs. The branches return the same nested structure (tensors, values or ops);
    a singleton list is unpacked unless `strict`."""
    from graphc.ops.constant_ops import convert_to_tensor
    true_fn = true_fn if true_fn is not None else fn1
    false_fn = false_fn if false_fn is not None else fn2
    if not callable(true_fn):
        raise TypeError("true_fn must be callable.")
    if not callable(false_fn):
        raise TypeError("false_fn must be callable.")
    if isinstance(pred, bool):
        # TF1's rule: a Python bool would build a branch the graph never needs
        raise TypeError("pred must not be a Python bool")
    g = get_default_graph()
    with g.name_scope(name or "cond") as scope:
        pred = convert_to_tensor(pred, name="pred")
        if pred.dtype != dtypes.bool:
            raise TypeError(f"cond: pred must be a bool tensor, got {pred.dtype.name} "
                            f"({pred.name})")
        if pred.shape.ndims not in (None, 0):
            raise ValueError(f"cond: pred must be a scalar, got shape {pred.shape} "
                             f"({pred.name})")
        then_g, then_result = trace("true_branch", true_fn)
        else_g, else_result = trace("false_branch", false_fn)
        if then_result is None or else_result is None:
            raise ValueError("true_fn and false_fn must return a value (tensors or ops); "
                             f"got {then_result!r} and {else_result!r}")
        try:
            nest.assert_same_structure(then_result, else_result)
        except ValueError as e:
            raise ValueError(f"Outputs of true_fn and false_fn must have the same structure: "
                             f"{e}") from None
        set_outputs(then_g, nest.flatten(then_result))
        set_outputs(else_g, nest.flatten(else_result))
        op = _make_if(pred, then_g, else_g, scope[:-1] + "/")
    leaves = [op if isinstance(leaf, Operation) else t for leaf, t in
              zip(nest.flatten(then_result), op.outputs)]
    result = nest.pack_sequence_as(then_result, leaves)
    if not strict and isinstance(result, (list, tuple)) and not hasattr(result, "_fields") \
            and len(result) == 1:
        return result[0]
    return result


def _merged_specs(then_g, else_g):
    shapes, types = [], []
    for i, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if a.dtype != b.dtype:
            raise ValueError(f"Outputs of true_fn and false_fn must have the same type: "
                             f"{a.dtype.name}, {b.dtype.name} (output {i})")
        shapes.append(_most_specific_compatible(a.shape, b.shape))
        types.append(a.dtype)
    return shapes, types


def _most_specific_compatible(a, b):
    if a.ndims is None or b.ndims is None or a.ndims != b.ndims:
        return TensorShape(None)
    return TensorShape([x.value if x.value == y.value else None for x, y in zip(a, b)])


def _make_if(pred, then_g, else_g, name):
    """The If op calling then_g/else_g; the variables they capture by reference are its
    last inputs (not read by it), the outer ops they wait for its control inputs."""
    g = pred.graph
    shapes, types = _merged_specs(then_g, else_g)
    then_caps = [outer for outer, _ in then_g.captures]
    else_caps = [outer for outer, _ in else_g.captures]
    refs = [outer for fg in (then_g, else_g) for outer, _ in fg.ref_captures]
    inputs = [pred] + then_caps + else_caps + refs
    first_ref = len(inputs) - len(refs)
    attrs = {"then_branch": then_g.name, "else_branch": else_g.name,
             "num_then_inputs": len(then_caps), "output_shapes": shapes,
             "output_dtypes": types, "saved": [],
             "ref_input_indices": list(range(first_ref, len(inputs)))}
    op = g.create_op("If", inputs, attrs, name)
    for c in then_g.control_captures + else_g.control_captures:
        op._add_control_input(c)
    return op


def save_intermediate(op, branch, t):
    """The output of the forward If `op` that gives the value of `t` (a tensor of its
    `branch` body) to a gradient body, added if not there yet."""
    key = [branch, t.name]
    saved = op.attrs["saved"]
    n_out = len(op.attrs["output_shapes"]) - len(saved)
    if key in saved:
        return op.outputs[n_out + saved.index(key)]
    op._set_attr("saved", saved + [key])
    op._set_attr("output_shapes", op.attrs["output_shapes"] + [t.shape])
    op._set_attr("output_dtypes", op.attrs["output_dtypes"] + [t.dtype])
    return op._add_output(t.shape, t.dtype)


# ------------------------------------------------------------------------ gradient
def _if_grad(op, *grads):
    """An If of the branches' gradient bodies: each gives the gradients of all the
    forward If's captured inputs (zeros for the other branch's)."""
    from graphc.ops.constant_ops import convert_to_tensor
    then_g, else_g = function_of(op, "then_branch"), function_of(op, "else_branch")
    n_out = len(op.outputs) - len(op.attrs["saved"])
    saved_names = list(op.attrs["saved"])
    # (branch, branch tensor) of each input after pred: captures, then variables by reference
    owners = [("then", t) for _, t in then_g.captures] + [("else", t) for _, t in
                                                           else_g.captures]
    owners += [("then", t) for _, t in then_g.ref_captures] + [("else", t) for _, t in
                                                                else_g.ref_captures]
    inputs = op.inputs[1:]
    pairs = [(t, g) for t, g in zip(op.outputs, grads) if g is not None]

    def branch_grad(branch, fg):
        def fn():
            from graphc.gradients import gradients
            ys, gys = [], []
            for t, g in pairs:
                if t.value_index < n_out:
                    ys.append(fg.outputs[t.value_index])
                else:
                    b, name = saved_names[t.value_index - n_out]
                    if b != branch:
                        continue
                    ys.append(fg.get_tensor_by_name(name))
                gys.append(g)
            xs = [t for b, t in owners if b == branch]
            dxs = iter(gradients(ys, xs, grad_ys=gys) if ys else [None] * len(xs))
            out = []
            for (b, _), outer in zip(owners, inputs):
                d = next(dxs) if b == branch else None
                if outer.dtype.is_floating:
                    out.append(zeros_for_gradient(outer) if d is None else convert_to_tensor(d))
            return out
        return fn

    g = get_default_graph()
    with g.name_scope("If_grad") as scope:
        then_b, then_res = _trace_grad("true_branch", then_g, op, "then",
                                       branch_grad("then", then_g))
        else_b, else_res = _trace_grad("false_branch", else_g, op, "else",
                                       branch_grad("else", else_g))
        set_outputs(then_b, then_res)
        set_outputs(else_b, else_res)
        grad_op = _make_if(op.inputs[0], then_b, else_b, scope[:-1] + "/")
    results = iter(grad_op.outputs)
    return [None] + [next(results) if t.dtype.is_floating else None for t in inputs]



def _forward_value(forward, op, branch, t):
    """The tensor giving the forward branch tensor t to a gradient branch: what it
    captures, the shape of what it captures (made where the If is), or an output of the
    forward If saving it."""
    outer = forward.outer_of(t)
    if outer is not None:
        return outer
    if t.op.type in _SHAPE_OPS and forward.outer_of(t.op.inputs[0]) is not None:
        # the same whichever branch runs: saved, it would be zeros where the other branch
        # ran, which a gradient taking it for a shape (a TensorArray read's) cannot take,
        # and data (known only when the If has run) to a compiled gradient
        source = forward.outer_of(t.op.inputs[0])
        with source.graph._as_builder():
            return source.graph.create_op(t.op.type, [source], dict(t.op.attrs),
                                          t.op.name.rsplit("/", 1)[-1]).outputs[0]
    return save_intermediate(op, branch, t)


# ops whose value depends only on their input's shape
_SHAPE_OPS = ("Shape", "Size", "Rank")


def _trace_grad(name, forward, op, branch, fn):
    """A gradient body of `forward`, reading its intermediates as outputs of op."""
    from graphc.framework.func_graph import FuncGraph
    outer = get_default_graph()
    grad_g = FuncGraph(outer.unique_name(name), outer, forward_graphs=(forward,))
    outer._functions[grad_g.name] = grad_g
    def intermediate(t):
        known = _known_value(grad_g, t)
        return known if known is not None else grad_g.capture(
            _forward_value(forward, op, branch, t))
    grad_g.intermediate_source = intermediate
    with grad_g.as_default():
        result = fn()
    return grad_g, result


def _known_value(grad_g, t):
    """A constant of the gradient body for a forward tensor whose value is known when
    the graph is built (a shape, an axis): not saved, so a gradient op that needs it as
    a constant (StridedSliceGrad's shape) has one. None otherwise."""
    from graphc.framework.static_value import constant_value
    from graphc.ops.constant_ops import constant
    value = constant_value(t)
    if value is None or np.asarray(value).dtype == object:
        return None
    with grad_g._as_builder():
        return constant(value, dtype=t.dtype)


register_gradient("If")(_if_grad)


# ------------------------------------------------------------------- case, switch_case
def case(pred_fn_pairs, default=None, exclusive=False, strict=False, name="case"):
    """tf.compat.v1.case: the fn of the first pred that is true (all of them if
    `exclusive`: then more than one true pred is an error), else default(). Without a
    default, the last pair is the default and its pred must be true (an error at run
    time otherwise), as TF1."""
    if isinstance(pred_fn_pairs, dict):
        pred_fn_pairs = list(pred_fn_pairs.items())
    pairs = list(pred_fn_pairs)
    if not pairs and default is None:
        raise ValueError("case: pred_fn_pairs is empty and there is no default.")
    for p in pairs:
        if not isinstance(p, (tuple, list)) or len(p) != 2 or not callable(p[1]):
            raise TypeError(f"case: each of pred_fn_pairs must be a (pred, callable) pair, "
                            f"got {p!r}")
        if isinstance(p[0], bool):  # tf.compat.v1.case's rule (allow_python_preds=False)
            raise TypeError(f"pred must be a Tensor, got: {p[0]}")
    from graphc.ops.constant_ops import convert_to_tensor
    g = get_default_graph()
    with g.name_scope(name or "case"):
        preds = [convert_to_tensor(p, name="pred") for p, _ in pairs]
        fns = [f for _, f in pairs]
        checks = []
        if exclusive and len(preds) > 1:
            checks.append(_assert_at_most_one(preds))
        if default is None:
            last_pred, last_fn = preds.pop(), fns.pop()
            default = _checked(last_fn, last_pred, preds)
        with g.control_dependencies(checks):
            return _chain(preds, fns, default, strict)


def _chain(preds, fns, default, strict):
    if not preds:
        return _call_strict(default, strict)
    return cond(preds[0], fns[0], lambda: _chain(preds[1:], fns[1:], default, strict),
                strict=strict)


def _call_strict(fn, strict):
    result = fn()
    if not strict and isinstance(result, (list, tuple)) and len(result) == 1 and \
            not hasattr(result, "_fields"):
        return result[0]
    return result


def _checked(fn, pred, others):
    def default():
        from graphc.ops.control_flow_ops import Assert
        check = Assert(pred, ["case: none of the conditions evaluated as True (no default "
                              f"given; the last pair's pred {pred.name} is false)"])
        with get_default_graph().control_dependencies([check]):
            return _pass_through(fn())
    return default


def _pass_through(result):
    from graphc.ops.control_flow_ops import identity
    return nest.map_structure(
        lambda x: x if isinstance(x, Operation) else identity(x), result)


def _assert_at_most_one(preds):
    from graphc.ops import math_ops
    from graphc.ops.array_ops import stack
    from graphc.ops.control_flow_ops import Assert
    from graphc.ops.reduction_ops import reduce_sum
    count = reduce_sum(math_ops.cast(stack(preds), dtypes.int32))
    return Assert(math_ops.less_equal(count, 1),
                  ["case: more than one condition evaluated as True but exclusive=True"])


def switch_case(branch_index, branch_fns, default=None, name="switch_case"):
    """tf.switch_case: branch_fns[branch_index]() (a list, or a dict / (key, fn) pairs
    keyed by ints); an index out of range runs default, else the last branch."""
    from graphc.ops import math_ops
    from graphc.ops.constant_ops import convert_to_tensor
    if isinstance(branch_fns, dict):
        items = sorted(branch_fns.items())
    elif branch_fns and isinstance(branch_fns[0], (tuple, list)):
        items = sorted((k, f) for k, f in branch_fns)
    else:
        items = list(enumerate(branch_fns))
    if not items:
        raise ValueError("switch_case: branch_fns must not be empty.")
    for k, f in items:
        if not callable(f):
            raise TypeError(f"switch_case: branch {k} is not callable: {f!r}")
    g = get_default_graph()
    with g.name_scope(name or "switch_case"):
        index = convert_to_tensor(branch_index, name="branch_index")
        if not index.dtype.is_integer or index.shape.ndims not in (None, 0):
            raise TypeError(f"switch_case: branch_index must be a scalar int32/int64 tensor, "
                            f"got {index.dtype.name} of shape {index.shape}")
        if default is None:
            items, default = items[:-1], items[-1][1]
        preds = [math_ops.equal(index, math_ops.cast(k, index.dtype)) for k, _ in items]
        return _chain(preds, [f for _, f in items], default, strict=True)

