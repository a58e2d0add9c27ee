"""hoist_loop_invariants: a copy a loop's body makes of a loop-invariant value each
iteration is made once, before the loop.

Moves a body node out of a native While (regions.py) into the enclosing module, just
before the While, when every input is loop-invariant (an input of the loop that is not
a loop variable, a constant, or a node moved already) and the node is a copy that cannot
fail: a Slice or StridedSlice of constant bounds, or a Transpose of a constant permutation,
all dims static. The body reads the result as one more loop-invariant input. The case
that pays: the rows of the weight (W[w:]) that dynamic_rnn's backward loop multiplies
by every step, a [256, 1024] copy per iteration otherwise (algebraic_simplify cuts the
product to the columns it uses, inside the body).

Left alone: nodes with control dependencies or stateful ones, other op types (a gather
or anything with a run-time check would fail before the loop even when it runs no
iteration), symbolic dims, and values the body fetches as they are (a loop variable's
new value or a saved one: those keep their place).
Guarantees: the same values (the node computes the same thing from the same inputs,
once instead of in every iteration).
"""
import numpy as np

from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.regions import add_loop_input, loop_input_of

COPIES = ("Slice", "StridedSlice", "Transpose")


def run(module):
    moved = 0
    for node in list(module.nodes):
        if node.type == "While" and node.regions:
            moved += _hoist_from(module, node)
    return {"loop_invariants_hoisted": moved}


def _hoist_from(module, node):
    body = node.regions["body"]
    n = node.attrs["num_loop_vars"]
    moved = 0
    for inner in list(body.nodes):
        if not _movable(body, inner, n):
            continue
        outer = _copy_before(module, node, inner)
        body.replace_all_uses(inner.outputs[0], add_loop_input(node, outer, "invariant"))
        moved += 1
    if moved:
        body.remove_dead()
        body.verify()
    return moved


def _movable(body, inner, n):
    if (inner.type not in COPIES or inner.control_deps or inner.control_users
            or len(inner.outputs) != 1 or inner.outputs[0] in body.outputs
            or not all(isinstance(v, Value) for v in inner.inputs)):
        return False
    x, *args = inner.inputs
    return (_invariant(x, n) and all(v.node.type == "Const" for v in args)
            and all(isinstance(d, int) for v in (x, inner.outputs[0]) for d in v.dims))


def _invariant(v, n):
    return v.node.type == PARAMETER and v.node.attrs["index"] >= n


def _copy_before(module, node, inner):
    """inner's node in the enclosing module, reading the While's inputs, before it."""
    where = dict(location=inner.location, before=node)
    x, *args = inner.inputs
    inputs = [loop_input_of(node, x)] + [
        module.add_constant(np.asarray(a.node.attrs["value"]), name=a.node.name, **where)
        for a in args]
    out = inner.outputs[0]
    return module.add_node(inner.type, inputs, dict(inner.attrs), [(out.dtype, out.dims)],
                           inner.name, inner.location, inner.gradient_of,
                           before=node).outputs[0]
