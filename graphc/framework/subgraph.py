"""The part of a graph one run needs: the one walker every executor and the compiler prune
with, so the reference executor, the compiled backend's stages and lowering select the same
ops. Fed tensors cut the graph; variable-reference inputs are not values (value_inputs).
"""
import operator

from graphc import errors
from graphc.framework.graph import format_location
from graphc.framework.op_def import (READS_ONLY_INPUT_DIMS, REF_INPUT_TYPES,
                                      REF_INPUTS_ATTR, ref_input_indices)


def value_inputs(op):
    """The inputs whose values the op reads (all but its variable-reference inputs)."""
    refs = ref_input_indices(op)
    return [t for i, t in enumerate(op.inputs) if i not in refs] if refs else op.inputs


def prune(fetch_tensors, target_ops, feed_tensors, exclude=frozenset(), static_shapes=False):
    """The ops needed to compute the fetches and run the targets, in topological order.

    Fed tensors cut the graph: their producers run only when needed for something else.
    Ops in `exclude` (already run by an earlier stage of the same run) are left out.
    With `static_shapes`, the input of a shape-reading op (Shape, Size, ...) whose static
    shape is known is not computed for it (statically_shaped_inputs; the compiler does the
    same in constant folding, after lowering)."""
    # sets of ids: ops and tensors hash in Python (__hash__), which was half of this
    # walk's time (a warm first run's prune of a 5k-op graph); the ops' and tensors'
    # fields, not their properties (the control inputs' copies its list), and
    # value_inputs only for an op that may have a variable-reference input: a third of
    # the rest
    fed = {id(t) for t in feed_tensors}
    seen = {id(op) for op in exclude}
    needed = []
    stack = [t.op for t in fetch_tensors if id(t) not in fed] + list(target_ops)
    reshapable = not static_shapes or (stack and has_reshapable_variable(stack[0].graph))
    with_refs = frozenset(REF_INPUT_TYPES)
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        needed.append(op)
        static = () if reshapable else statically_shaped_inputs(op, reshapable)
        inputs = value_inputs(op) if op.type in with_refs or REF_INPUTS_ATTR in op._attrs \
            else op._inputs
        for t in inputs:
            if id(t) not in fed and not (static and t in static):
                stack.append(t._op)
        stack.extend(op._control_inputs)
    return sorted(needed, key=creation_order)


creation_order = operator.attrgetter("_id")  # a sort key: creation order is topological


def statically_shaped_inputs(op, reshapable):
    """The inputs of a shape-reading op that it takes from their static shapes, not their
    values: all of them when every one is fully defined. TF's grappler and the compiled
    backends do the same, so the value is never computed (the Shape of an op that would
    fail at run time still gives its shape). Not in a graph with a variable whose shape
    may change (`reshapable`): static shapes built on it may be outdated."""
    if reshapable or op.type not in READS_ONLY_INPUT_DIMS or not op.inputs:
        return frozenset()
    if all(t.shape.is_fully_defined() for t in op.inputs):
        return frozenset(op.inputs)
    return frozenset()


def has_reshapable_variable(graph):
    """Whether a validate_shape=False assign (or an unshaped variable) may change the shape
    of one of graph's variables."""
    return any(o.type == "VariableV2" and o.outputs[0].shape.ndims is None
               for o in graph.get_operations())


def reshaped_by_variables(ops):
    """The ops (of `ops`, in topological order) computing from, or assigning, a variable
    whose shape may change (unknown static shape): their static shapes may be those of an
    older shape of the variable, inferred before an assign with validate_shape=False."""
    loose = set()
    for op in ops:
        if any(t.op in loose or (t.op.type == "VariableV2" and t.shape.ndims is None)
               for t in op.inputs):
            loose.add(op)
    return loose


def unfed_placeholder_error(ops):
    """TF's error for the first Placeholder among `ops` (a Placeholder that is pruned in
    was not fed), or None."""
    for op in ops:
        if op.type == "Placeholder":
            shape = op.attrs["shape"]
            dims = "<unknown>" if shape.ndims is None else \
                "[" + ",".join("?" if d.value is None else str(d.value) for d in shape) + "]"
            return errors.InvalidArgumentError(
                None, op, f"You must feed a value for placeholder tensor '{op.name}' with "
                          f"dtype {op.attrs['dtype'].name} and shape {dims}\n\t [[node "
                          f"{op.name} (defined at {format_location(op.location)})]]")
    return None
