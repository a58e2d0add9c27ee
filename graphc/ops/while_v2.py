"""while_loop as one functional op, While (TF2's while_v2), not Enter/Exit/NextIteration.

While(*loop_vars, *cond_captures, *body_captures) runs its body (a FuncGraph, attr `body`)
while its cond body (attr `cond`) gives true; each body reads the loop variables, then
its own captured inputs. Outputs: the final loop variables (of their shape invariants),
the trip count (int32), then the saved stacks.

maximum_iterations is an extra counter loop variable tested in the cond, as TF1 does.
TensorArrays in the loop variables travel as their flow tensors (tensor_array_ops.py).

Gradient (while_v2's design): the forward loop keeps, for each body tensor a gradient
needs, its value of every iteration in a stack [trip count, *shape] (attr `saved`, body
tensor names, appended as the gradient asks for them; the oracle runs them as the kernel
appending to a list, native code as buffers with a row per iteration the cond allows,
compiler/regions.py's trip_bound). The backward While runs the trip count down: its body is the gradient of the
forward body (gradients.py's walk, run inside a gradient body), reading iteration k's
saved values from the stacks, carrying the gradients of the loop variables and summing
those of the captured inputs (variables read in the body included, through their
snapshots). Each gradients() call through the loop builds its own backward While on the
same stacks, the forward op saving what the later one needs besides (two losses, an
optimizer and a summary's gradient norm). An array the loop appends to (compiler/
regions.py appended_arrays: raw_rnn's emitted outputs) is no loop variable of the
backward loop: its body reads row k of the array's gradient, captured (TF1's
TensorArrayGrad reads the gradient of each written index the same way). Loops built
with back_prop=False have no gradient (None), as TF1. A second derivative through a
loop (a gradient reaching a backward loop or a forward loop's stacks) is an error, not
built (TF1 has none either for most loops).

A value whose shape changes between iterations (computed from a loop variable whose
shape invariant is looser than the shape it enters with: `out = concat([out, x_t], 0)`)
cannot be stacked; TF1's stacks hold each iteration's value whatever its shape. Its
stack is ragged (attr `ragged_saved`): each iteration's elements one after another,
with its shapes stacked beside it, and the backward body reads iteration k's elements
at their offset (summed once after the forward loop) as a block of its shape
(RaggedBlock). Such a loop's backward While also keeps the shapes of its loop variables
of each iteration (FORWARD_DIMS), from which native code sets the forward body's dims of
iteration k before the backward body runs it (compiler/regions.py).
"""
import numpy as np

from graphc import dtypes, errors
from graphc.framework import nest
from graphc.framework.func_graph import FuncGraph, function_of
from graphc.framework.graph import get_default_graph
from graphc.framework.op_def import FORWARD_DIMS, FORWARD_LOOP_VARS, RAGGED_SAVED, \
    register_gradient, register_op
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape, as_shape
from graphc.ops.function_call import (run_function, set_outputs, trace, zeros_for_gradient,
                                      zeros_of_static_shape)

__all__ = ["while_loop"]


def _while_infer(inputs, a):
    return list(zip(a["output_shapes"], a["output_dtypes"]))


def _while_kernel(state, op, *args):
    cond_g, body_g = function_of(op, "cond"), function_of(op, "body")
    n = op.attrs["num_loop_vars"]
    n_cond = len(cond_g.inputs) - n
    values = list(args[:n])
    cond_caps = list(args[n:n + n_cond])
    body_caps = list(args[n + n_cond:n + n_cond + len(body_g.inputs) - n])
    saved = [body_g.get_tensor_by_name(name) for name in op.attrs["saved"]]
    ragged = set(op.attrs.get(RAGGED_SAVED, ()))
    stacks = [[] for _ in saved]
    trips = 0
    while bool(run_function(state, cond_g, values + cond_caps)[0]):
        out = run_function(state, body_g, values + body_caps, saved)
        values = out[:n]
        for stack, v in zip(stacks, out[n:]):
            stack.append(v)
        trips += 1
    return values + [np.int32(trips)] + [
        _concatenated(t, s) if k in ragged else _stacked(t, s)
        for k, (t, s) in enumerate(zip(saved, stacks))]


def _concatenated(t, values):
    """A ragged stack: each iteration's value flattened, one after another."""
    dtype = np.dtype(t.dtype.as_numpy_dtype)
    if not values:
        return np.zeros([0], dtype)
    return np.concatenate([np.ravel(v) for v in values]).astype(dtype, copy=False)


def _stacked(t, values):
    if not values:
        return zeros_of_static_shape(TensorShape([0]).concatenate(t.shape), t.dtype)
    try:
        return np.stack(values)
    except ValueError:
        raise errors.KernelError(
            f"the gradient of this while_loop needs the value of {t.name} (op "
            f"'{t.op.type}', created at {t.op.location}) from every iteration, but its "
            "shape changes between iterations, which the shape invariants of the loop "
            "variables do not allow for (one enters with unknown dims that the body "
            "changes): give them shape_invariants looser than the shapes they enter with "
            "(of known rank)",
            errors.UnimplementedError) from None


# host-only but for the CPU's and GPU's code, which compile the loops graphc/compiler/regions.py
# accepts (loops and branches in the generated code); any other runs on the host between
# native stages, its bodies on the reference executor
register_op("While", infer=_while_infer, kernel=_while_kernel, stateful=True,
            uses_context=True, kind="opaque", host_only=True)


# --------------------------------------------------------------------- while_loop
def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, name=None, maximum_iterations=None,
               return_same_structure=False):
    """tf.compat.v1.while_loop: repeats `loop_vars = body(*loop_vars)` while
    cond(*loop_vars), as one While op. loop_vars is a (nested) list/tuple of tensors,
    values and TensorArrays; a loop variable whose shape changes needs a less specific
    shape in shape_invariants. Returns the final loop variables (a single one unpacked
    unless return_same_structure)."""
    if not callable(cond):
        raise TypeError("cond must be callable.")
    if not callable(body):
        raise TypeError("body must be callable.")
    if not isinstance(parallel_iterations, int) or parallel_iterations < 1:
        raise TypeError("parallel_iterations must be a positive integer.")
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    if not nest.flatten(structure):
        raise ValueError("No loop variables provided")
    g = get_default_graph()
    with g.name_scope(name or "while") as scope:
        from graphc.ops.constant_ops import convert_to_tensor
        structure = nest.map_structure(
            lambda v: v if _is_tensor_array(v) else convert_to_tensor(v), structure)
        invariants = _invariants(structure, shape_invariants, single)
        user_cond, user_body = cond, body
        if maximum_iterations is not None:
            counter = convert_to_tensor(0, name="iteration_counter")
            limit = convert_to_tensor(maximum_iterations, dtype=dtypes.int32,
                                      name="maximum_iterations")
            if limit.shape.ndims not in (None, 0):
                raise ValueError("maximum_iterations must be a scalar, got shape "
                                 f"{limit.shape}")
            structure = [counter, structure]
            invariants = [TensorShape([])] + [invariants]
            user_cond, user_body = _counted(cond, body, limit)
        results = _build_loop(scope, user_cond, user_body, structure, invariants, back_prop)
    if maximum_iterations is not None:
        results = results[1]
    if single or (not return_same_structure and len(results) == 1):
        return results[0]
    return results


def _counted(cond, body, limit):
    from graphc.ops import math_ops

    def counted_cond(i, loop_vars):
        return math_ops.logical_and(math_ops.less(i, limit), cond(*loop_vars))

    def counted_body(i, loop_vars):
        out = body(*loop_vars)
        if len(loop_vars) == 1 and not isinstance(out, (list, tuple)):
            out = [out]
        return [math_ops.add(i, 1), out]
    return counted_cond, counted_body


def _is_tensor_array(v):
    from graphc.ops.tensor_array_ops import TensorArray
    return isinstance(v, TensorArray)


def _invariants(structure, shape_invariants, single):
    if shape_invariants is None:
        return nest.map_structure(lambda v: None if _is_tensor_array(v) else v.shape,
                                  structure)
    if single:
        shape_invariants = [shape_invariants]
    try:
        nest.assert_same_structure(structure, _as_shapes(structure, shape_invariants))
    except ValueError as e:
        raise ValueError(f"shape_invariants must have the structure of loop_vars: {e}") \
            from None
    return _as_shapes(structure, shape_invariants)


def _as_shapes(structure, invariants):
    """The invariants as TensorShapes (a shape given as a list is one leaf)."""
    if isinstance(structure, (list, tuple)) and isinstance(invariants, (list, tuple)) and \
            len(structure) == len(invariants) and not _is_tensor_array(structure):
        return type(structure)(*[_as_shapes(s, i) for s, i in zip(structure, invariants)]) \
            if hasattr(structure, "_fields") else \
            type(structure)(_as_shapes(s, i) for s, i in zip(structure, invariants))
    if isinstance(structure, dict):
        return {k: _as_shapes(structure[k], invariants[k]) for k in structure}
    return None if invariants is None else as_shape(invariants)


def _flat(structure):
    """The loop's flat tensors: each leaf, a TensorArray as its flow tensors."""
    out = []
    for leaf in nest.flatten(structure):
        out.extend(leaf.flows if _is_tensor_array(leaf) else [leaf])
    return out


def _unflat(structure, tensors):
    it = iter(tensors)
    leaves = [leaf.with_flows([next(it) for _ in leaf.flows]) if _is_tensor_array(leaf)
              else next(it) for leaf in nest.flatten(structure)]
    return nest.pack_sequence_as(structure, leaves)


def _flat_invariants(structure, invariants):
    out = []
    for leaf, inv in zip(nest.flatten(structure), _leaves_of_invariants(structure,
                                                                         invariants)):
        if _is_tensor_array(leaf):
            out.extend(leaf.flow_invariants())
        else:
            shape = leaf.shape if inv is None else inv
            if not shape.is_compatible_with(leaf.shape) or \
                    (shape.ndims is not None and leaf.shape.ndims is not None and
                     not leaf.shape.is_compatible_with(shape)):
                raise ValueError(f"The shape invariant specified for {leaf.name} is not "
                                 f"compatible with the initial shape of the loop variable. "
                                 f"It enters the loop with shape {leaf.shape}, but the "
                                 f"specified shape invariant is {shape}.")
            out.append(shape)
    return out


def _leaves_of_invariants(structure, invariants):
    out = []

    def walk(s, inv):
        if _is_tensor_array(s) or not nest.is_nested(s):
            out.append(inv)
            return
        keys = sorted(s) if isinstance(s, dict) else range(len(s))
        for k in keys:
            walk(s[k], inv[k])
    walk(structure, invariants)
    return out


def _build_loop(scope, cond, body, structure, invariants, back_prop):
    flat = _flat(structure)
    shapes = _flat_invariants(structure, invariants)
    specs = [(s, t.dtype) for s, t in zip(shapes, flat)]

    def cond_fn(*args):
        return cond(*_unflat(structure, args))

    def body_fn(*args):
        out = body(*_unflat(structure, args))
        if len(structure) == 1 and not isinstance(out, (list, tuple)):
            out = [out]
        try:
            nest.assert_same_structure(list(structure), list(out) if isinstance(
                out, (list, tuple)) else out)
        except ValueError as e:
            raise ValueError(f"body of while_loop must return the structure of loop_vars: "
                             f"{e}") from None
        return out

    cond_g, pred = trace("cond", cond_fn, specs)
    from graphc.ops.constant_ops import convert_to_tensor
    with cond_g.as_default():
        pred = convert_to_tensor(pred)
    if pred.dtype != dtypes.bool or pred.shape.ndims not in (None, 0):
        raise TypeError(f"cond of while_loop must return a scalar bool tensor, got "
                        f"{pred.dtype.name} of shape {pred.shape}")
    set_outputs(cond_g, [pred])
    body_g, out = trace("body", body_fn, specs)
    with body_g.as_default():  # a Python number returned for a loop variable takes its dtype
        out_flat = [convert_to_tensor(t, dtype_hint=v.dtype)
                    for t, v in zip(_flat(_with_arrays(structure, out)), flat)]
    _check_body_outputs(flat, out_flat, shapes)
    set_outputs(body_g, out_flat)
    op = make_while(flat, cond_g, body_g, shapes, back_prop, scope[:-1] + "/")
    return _unflat(structure, op.outputs[:len(flat)])


def _with_arrays(structure, out):
    """The body's result with each TensorArray leaf of structure checked to be one."""
    for s, o in zip(nest.flatten(structure), nest.flatten(out)):
        if _is_tensor_array(s) != _is_tensor_array(o):
            raise TypeError(f"body of while_loop returned {o!r} where loop_vars has {s!r}")
    return out


def _check_body_outputs(flat, outputs, shapes):
    for t, out, shape in zip(flat, outputs, shapes):
        if out.dtype != t.dtype:
            raise TypeError(f"The body of while_loop returned a {out.dtype.name} tensor for "
                            f"the loop variable {t.name} of dtype {t.dtype.name}.")
        if not shape.is_compatible_with(out.shape) or \
                (shape.ndims is not None and out.shape.ndims is None):
            raise ValueError(f"Input tensor '{t.name}' enters the loop with shape {shape}, "
                             f"but has shape {out.shape} after one iteration. To allow the "
                             "shape to vary across iterations, use the `shape_invariants` "
                             "argument of tf.while_loop to specify a less-specific shape.")


def make_while(loop_vars, cond_g, body_g, shapes, back_prop, name):
    """The While op running body_g from loop_vars while cond_g; the variables the bodies
    capture by reference are its last inputs (not read by it)."""
    g = get_default_graph()
    caps = [outer for fg in (cond_g, body_g) for outer, _ in fg.captures]
    refs = [outer for fg in (cond_g, body_g) for outer, _ in fg.ref_captures]
    inputs = list(loop_vars) + caps + refs
    attrs = {"cond": cond_g.name, "body": body_g.name, "num_loop_vars": len(loop_vars),
             "output_shapes": list(shapes) + [TensorShape([])],
             "output_dtypes": [t.dtype for t in loop_vars] + [dtypes.int32],
             "saved": [], "back_prop": bool(back_prop),
             "ref_input_indices": list(range(len(inputs) - len(refs), len(inputs)))}
    op = g.create_op("While", inputs, attrs, name)
    for c in cond_g.control_captures + body_g.control_captures:
        op._add_control_input(c)
    return op




def save_in_loop(op, t, ragged=False):
    """The output of the forward While `op` keeping the value of `t` (a tensor of its
    body) of every iteration, added if not there yet: a stack [trip count, *shape], or
    where ragged their elements one iteration after another."""
    saved = op.attrs["saved"]
    first = len(op.outputs) - len(saved)
    if t.name in saved:
        return op.outputs[first + saved.index(t.name)]
    if ragged:
        shape = TensorShape([None])
        op._set_attr(RAGGED_SAVED, list(op.attrs.get(RAGGED_SAVED, ())) + [len(saved)])
    else:
        shape = TensorShape([None]).concatenate(t.shape)
    op._set_attr("saved", saved + [t.name])
    op._set_attr("output_shapes", op.attrs["output_shapes"] + [shape])
    op._set_attr("output_dtypes", op.attrs["output_dtypes"] + [t.dtype])
    return op._add_output(shape, t.dtype)


# ------------------------------------------------------------------------- gradient
def _while_grad(op, *grads):
    """A While running the trip count down through the gradient of the forward body."""
    cond_g, body_g = function_of(op, "cond"), function_of(op, "body")
    n = op.attrs["num_loop_vars"]
    # a gradient reaching a backward loop (its body differentiates a forward body) or a
    # forward loop's stacks differentiates a gradient: not built, rather than None
    if body_g.forward_graphs or any(g is not None for g in grads[n + 1:]):
        raise LookupError(f"Second derivatives through while_loop '{_forward_name(op)}' "
                          "are not supported.")
    if not op.attrs["back_prop"]:
        return [None] * len(op.inputs)
    from graphc.gradients import input_needed
    n_cond = len(cond_g.inputs) - n
    # what the body reads besides the loop variables: its captured tensors, then the
    # variables it captures by reference (the op's last inputs); (op input index, outer
    # tensor, body tensor) of those that take a gradient
    first_ref = len(op.inputs) - len(body_g.ref_captures)
    reads = [(n + n_cond + j, outer, inner) for j, (outer, inner) in
             enumerate(body_g.captures)]
    reads += [(first_ref + j, outer, inner) for j, (outer, inner) in
              enumerate(body_g.ref_captures)]
    # an accumulator for every captured input no x reaches (a loop reading rows of its
    # data, say) would cost a [T, ...] sum per iteration for a gradient nobody reads
    reads = [r for r in reads if r[1].dtype.is_floating and input_needed(op.inputs[r[0]])]
    # an array the loop appends to enters empty (a TensorArrayV3, no gradient) and only
    # the write of iteration k reads it: the backward body reads row k of the gradient of
    # the whole array, captured, rather than carrying it as a loop variable that zeros
    # row k each iteration (its rows are the forward trip count, known only once the
    # forward loop has run: no loop variable's buffer can be sized before the run)
    arrays = _appended_arrays(op)
    appended = {jv: grads[jv] for jv in arrays if grads[jv] is not None}
    var_ids = [i for i in range(n) if op.outputs[i].dtype.is_floating and i not in arrays]
    if not var_ids and not reads and not appended:
        return [None] * len(op.inputs)
    from graphc.ops.array_ops import zeros_like
    init = [op.outputs[n]]
    init += [grads[i] if grads[i] is not None else zeros_like(op.outputs[i]) for i in var_ids]
    init += [zeros_for_gradient(outer) for _, outer, _ in reads]
    shapes = [TensorShape([])] + [op.attrs["output_shapes"][i] for i in var_ids] + \
        [outer.shape for _, outer, _ in reads]
    specs = [(s, t.dtype) for s, t in zip(shapes, init)]
    g = get_default_graph()
    with g.name_scope("while_grad") as scope:
        back_cond, pred = trace("cond", _counter_positive, specs)
        set_outputs(back_cond, [pred])
        back_body = _backward_body("body", op, body_g, var_ids, [r[2] for r in reads], specs,
                                   appended)
        back = make_while(init, back_cond, back_body, shapes, False, scope[:-1] + "/")
    if back_body.forward_dims:
        back._set_attr(FORWARD_LOOP_VARS, list(var_ids))
        back._set_attr(FORWARD_DIMS, back_body.forward_dims)
    results = iter(back.outputs[1:1 + len(var_ids) + len(reads)])
    in_grads = [None] * len(op.inputs)
    for i in var_ids:
        in_grads[i] = next(results)
    for index, _, _ in reads:
        in_grads[index] = next(results)
    return in_grads


def _forward_name(op):
    """The name of the user's loop that the While op is, or differentiates."""
    forward = function_of(op, "body").forward_graphs
    if not forward:
        return op.name
    loops = [o for o in op.graph.get_operations()
             if o.type == "While" and o.attrs["body"] == forward[0].name]
    return _forward_name(loops[0]) if loops else op.name


def _appended_arrays(op):
    """The loop variables holding the values of the arrays While `op` appends to (compiler/
    regions.py owns which those are: the forward loop compiles them as stacks)."""
    from graphc.compiler.regions import appended_arrays
    return appended_arrays(op)


def _counter_positive(k, *rest):
    from graphc.ops import math_ops
    return math_ops.greater(k, 0)


def _backward_body(name, op, body_g, var_ids, read_tensors, specs, appended):
    """One backward iteration: the gradient of the forward body at iteration k - 1, its
    forward values popped from the stacks. appended: {loop variable: the gradient of the
    whole array after the loop} of the arrays the loop appends to, which the body reads
    (captured) as the gradient of its write."""
    from graphc.gradients import gradients
    from graphc.ops import array_ops, math_ops
    from graphc.ops.constant_ops import convert_to_tensor
    from graphc.ops.tensor_array_ops import accumulated_read_gradient
    outer = get_default_graph()
    back = FuncGraph(outer.unique_name(name), outer, forward_graphs=(body_g,))
    outer._functions[back.name] = back
    with back.as_default():
        from graphc.ops.constant_ops import placeholder
        with back.name_scope(None), back.control_dependencies(None):
            back.inputs = [placeholder(dtype, shape, name=f"{back.name}/arg")
                           for shape, dtype in specs]
        k = math_ops.subtract(back.inputs[0], 1)
        back.intermediate_source = lambda t: _forward_value(back, op, body_g, t, k)
        back.forward_dims = _forward_dims(back, op, body_g)
        var_grads = back.inputs[1:1 + len(var_ids)]
        accs = back.inputs[1 + len(var_ids):]
        ys = [body_g.outputs[i] for i in var_ids] + [body_g.outputs[i] for i in appended]
        grad_ys = list(var_grads) + [back.capture(g) for g in appended.values()]
        xs = [body_g.inputs[i] for i in var_ids] + list(read_tensors)
        dxs = gradients(ys, xs, grad_ys=grad_ys) if ys and xs else [None] * len(xs)
        outs = [k]
        for d, gv in zip(dxs[:len(var_ids)], var_grads):
            outs.append(array_ops.zeros_like(gv) if d is None else convert_to_tensor(d))
        for d, acc in zip(dxs[len(var_ids):], accs):
            outs.append(acc if d is None else
                        accumulated_read_gradient(acc, convert_to_tensor(d)))
    set_outputs(back, outs)
    return back




def _forward_dims(back, op, body_g):
    """[loop variable, backward body input, ...] of the stacks (captured in `back`) of
    the shapes of the forward loop variables whose shape invariant is looser than the
    shape they enter with (compiler/regions.py loose_axes), each iteration's."""
    from graphc.compiler.regions import loose_axes
    from graphc.ops import array_ops
    out = []
    for i in sorted(loose_axes(op)):
        with body_g._as_builder():
            shape = array_ops.shape(body_g.inputs[i])
        inner = back.capture(save_in_loop(op, shape))
        out += [i, next(j for j, x in enumerate(back.inputs) if x is inner)]
    return out


def _forward_value(back, op, body_g, t, k):
    """The value that the body tensor t had in forward iteration k, in the backward body:
    a captured input is the same every iteration (read as it is, not stacked); any other
    tensor is popped from its stack (built in `back` even while a body nested in it is
    the default graph)."""
    from graphc.ops import array_ops
    outer = body_g.outer_of(t)
    if outer is not None:
        return back.capture(outer)
    known = constant_value(t)
    if known is not None and known.dtype != object:
        # a shape the graph knows (a gradient's reshape to a body tensor's): a constant,
        # not a stack whose values the native loop would know only when it runs
        from graphc.ops.constant_ops import constant
        with back._as_builder():
            return constant(known, dtype=t.dtype)
    if t.op.type == "Shape" and body_g.outer_of(t.op.inputs[0]) is not None:
        # a captured input's shape (a TensorArray gradient's, say): the same every
        # iteration too, and known where the loop runs, as a stack's rows are not
        source = body_g.outer_of(t.op.inputs[0])
        with source.graph._as_builder():
            outer = array_ops.shape(source, out_type=t.dtype)
        return back.capture(outer)
    varying = _shapes_varying(back, op, body_g)
    if t.op.type in _SHAPE_ONLY_OPS and t.op.inputs[0] not in varying:
        return _shape_only_value(back, op, body_g, t, k)
    if t in _shapes_changing(back, op, body_g) and not t.shape.is_fully_defined():
        return _ragged_value(back, op, body_g, t, k)
    with back._as_builder():
        return array_ops.gather(back.capture(save_in_loop(op, t)), k)


def _ragged_value(back, op, body_g, t, k):
    """t's value of forward iteration k where its shape may differ between iterations
    (TF1's stacks hold each iteration's value whatever its shape): its elements kept
    ragged (save_in_loop), its shapes stacked, and the offset of each iteration's
    elements summed once after the forward loop."""
    from graphc.ops import array_ops, reduction_ops
    if t.shape.ndims is None:
        raise ValueError(
            f"the gradient of while_loop '{_forward_name(op)}' needs the value of {t.name} "
            f"(op '{t.op.type}', created at {t.op.location}) from every iteration, but its "
            "rank is unknown; give the loop variables it is computed from a shape "
            "invariant of known rank")
    with body_g._as_builder():
        shape = array_ops.shape(t)
    elements = save_in_loop(op, t, ragged=True)
    shapes = save_in_loop(op, shape)
    with op.graph._as_builder():
        offsets = reduction_ops.cumsum(reduction_ops.reduce_prod(shapes, axis=1),
                                       exclusive=True)
    with back._as_builder():
        # one op, not a slice at a data offset then a reshape: native lowering gives its
        # dims those of t in the forward body at iteration k (compiler/lower.py), which
        # a slice's size read from data would hide
        value = back.create_op("RaggedBlock", [back.capture(elements),
                                               array_ops.gather(back.capture(offsets), k),
                                               array_ops.gather(back.capture(shapes), k)],
                               {}, "ragged_block").outputs[0]
    value.set_shape(t.shape)
    return value


def _ragged_block_infer(inputs, a):
    from graphc.framework.static_value import shape_from_tensor
    return [(shape_from_tensor(inputs[2]), inputs[0].dtype)]


def _ragged_block_kernel(elements, offset, shape):
    """Iteration k's value in a ragged stack: its elements from `offset`, of `shape`."""
    shape = [int(d) for d in np.reshape(shape, [-1])]
    start = int(offset)
    return elements[start:start + int(np.prod(shape, dtype=np.int64))].reshape(shape)


# RaggedBlock(elements, offset, shape): the block of a ragged stack (save_in_loop) that
# one forward iteration kept; only backward bodies make it (no gradient of its own: a
# second derivative through a loop is not built)
register_op("RaggedBlock", infer=_ragged_block_infer, kernel=_ragged_block_kernel,
            kind="index")


# ops whose value depends only on their input's shape (and dtype)
_SHAPE_ONLY_OPS = ("Shape", "Size", "Rank", "ZerosLike", "OnesLike")


def _shapes_varying(back, op, body_g):
    """The body tensors whose shapes may differ between iterations (their values could
    not be stacked to make a shape again): those of _shapes_changing, outputs whose
    unknown dims come from data (a range(i), a Where: unknown dims out of inputs of known
    shapes), and whatever is computed from those. Worked out once per backward body."""
    if not hasattr(back, "_shapes_varying"):
        back._shapes_varying = _computed_from_loose_shapes(op, body_g, data_dims=True)
    return back._shapes_varying


def _shapes_changing(back, op, body_g):
    """The body tensors computed from a loop variable whose shape invariant is looser than
    the shape it enters with (a concat growing it, an array the loop appends to): their
    shapes do change between iterations, so their values are kept ragged. A value whose
    unknown dims come from data is stacked (its rows the same each iteration: an inner
    loop's stacks, sized by its bound, which native code knows)."""
    if not hasattr(back, "_shapes_changing"):
        back._shapes_changing = _computed_from_loose_shapes(op, body_g, data_dims=False)
    return back._shapes_changing


def _computed_from_loose_shapes(op, body_g, data_dims):
    """The body tensors computed from the loop variables whose shape invariant is looser
    than the shape they enter with, and where data_dims from the outputs whose unknown
    dims come from data."""
    n = op.attrs["num_loop_vars"]
    out = {body_g.inputs[i] for i in range(n)
           if body_g.inputs[i].shape.as_tuple_or_none() != op.inputs[i].shape.as_tuple_or_none()}
    for o in body_g.get_operations():  # in creation order: inputs before their users
        if any(i in out for i in o.inputs):
            out.update(o.outputs)
        elif data_dims and o.inputs and all(i.shape.is_fully_defined() for i in o.inputs):
            out.update(t for t in o.outputs if not t.shape.is_fully_defined())
    return out


def _shape_only_value(back, op, body_g, t, k):
    """t (a shape of a body tensor u, or zeros like it) made again in the backward body
    from u's value there. Stacking t instead would make a gradient's reshape to u's shape
    read its dims from data (a native loop needs them before it runs: with an unknown
    batch, dynamic_rnn's backward loop ran on the host), and zeros like u would be read
    from memory instead of written."""
    u = t.op.inputs[0]
    with back._as_builder():
        if t.op.type in ("ZerosLike", "OnesLike") and u.shape.is_fully_defined():
            from graphc.ops import array_ops
            fill = array_ops.zeros if t.op.type == "ZerosLike" else array_ops.ones
            return fill(u.shape.as_list(), dtype=t.dtype)
    like = _forward_value(back, op, body_g, u, k)
    with back._as_builder():
        return back.create_op(t.op.type, [like], dict(t.op.attrs),
                              t.op.name.rsplit("/", 1)[-1]).outputs[0]


register_gradient("While")(_while_grad)
