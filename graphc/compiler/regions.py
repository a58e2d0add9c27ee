"""Native control flow: which While and If ops compile into the CPU's code, and the facts
about their bodies that lowering, fusion and codegen share.

A While or If whose bodies hold only ops native code runs is lowered with its bodies as
modules of their own (`node.regions`, ir.py), optimized and scheduled like any module
(driver.py) and emitted into the one LLVM module as functions that the node's kernel
calls: a loop around the cond and body calls with the loop variables in two buffers that
swap each iteration, or a branch to one of the two branches (backends/cpu/regions.py).
TensorArrays (create, read, write, gather, scatter, stack, unstack) compile too, in
loops and out (backends/cpu/tensor_arrays.py), and a loop writes an array in place.
The GPU target compiles the same ones: each body's kernels are launched from the host on
device buffers, the loop variables in two that swap, only the predicate read back per
iteration (backends/gpu/control_flow.py, tensor_arrays.py; runtime/gpu/control_flow.py).
What stays on the host (between native stages, bodies on the reference executor):
  - a body holding a host op (py_func, Print, a string op, a TensorArray that grows:
    dynamic_size...) or a random op (its generator state is created per op of the stage,
    not of a body);
  - a While keeping stacks for a gradient (attr `saved`) without a bound on its trip
    count known before it runs: its stacks are sized by a trip count known only after
    it. The bound is that of a cond testing a counter stepped by 1 against a limit
    (trip_bound, below): maximum_iterations (dynamic_rnn's time steps), map_fn's
    and scan's elements, a user's `i < n`. With one the stacks have that many rows,
    allocated before the loop, and the loop writes row k of each in iteration k (rows
    past the trip count are never read: the backward loop counts the trip count down; a
    trip count past the rows is an error naming the While). An If's saved
    intermediates compile: the taken branch writes its own, the kernel zeros the other's;
  - a loop variable whose shape invariant is looser than the shape it enters with (its
    shape may change between iterations: a buffer of one size cannot hold it).
A loop variable whose unknown dim changes without a shape invariant (allowed by TF1) is
found when lowering (its body's output dims differ from its input dims): the stage then
runs on the reference executor with a warning (LoweringError).
"""
import numpy as np

from graphc import errors
from graphc.framework.func_graph import function_of
from graphc.framework.op_def import RANDOM_OP_TYPES, ROW_WRITE_OPS, UPDATE_OPS
from graphc.framework.static_value import constant_value

# op type -> (attr naming each body, the key of its region module)
REGION_BODIES = {"While": (("cond", "cond"), ("body", "body")),
                 "If": (("then_branch", "then"), ("else_branch", "else"))}


# TensorArray ops the CPU backend lowers (backends/cpu/tensor_arrays.py), their gradient
# ops included
TENSOR_ARRAY_OPS = frozenset({"TensorArrayV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
                              "TensorArrayGatherGrad", "TensorArrayScatterGrad"})


def tensor_array_compiles(op):
    """Whether a TensorArray op runs in native code: an array of one size (not
    dynamic_size) whose values have a known rank."""
    return op.type in TENSOR_ARRAY_OPS and not op.attrs.get("dynamic_size") and \
        op.outputs[0].shape.ndims is not None and \
        all(t.shape.ndims is not None for t in op.inputs)


def bodies_of(op):
    """{region key: FuncGraph} of a While or If op."""
    return {key: function_of(op, attr) for attr, key in REGION_BODIES[op.type]}


def compiles_natively(op, is_host_op):
    """Whether the While or If `op` runs in native code: its bodies' ops (nested loops
    and branches recursively) are all native (`is_host_op(op)` False) and it keeps no
    per-iteration values (module docstring)."""
    try:
        bodies = bodies_of(op)
    except errors.KernelError:  # a graph file's op without its bodies: the host says so
        return False
    if op.type == "While" and (_unbounded_stacks(op) or not _invariants_exact(op)):
        return False
    for body in bodies.values():
        for inner in body.get_operations():
            if inner.type in RANDOM_OP_TYPES or is_host_op(inner):
                return False
    return True


def _unbounded_stacks(op):
    """Whether a While keeps stacks for its gradient with no bound on its trip count to
    size them before it runs (trip_bound; lowering also needs the bound's
    value: lower.py)."""
    return bool(op.attrs.get("saved")) and trip_bound(op) is None


def _invariants_exact(op):
    """Each loop variable's shape invariant is the shape it enters the loop with, but for
    a TensorArray's flows (their invariant leaves the rows unknown, and a native array's
    rows never change)."""
    n = op.attrs["num_loop_vars"]
    outputs = function_of(op, "body").outputs
    for t, invariant, out in zip(op.inputs[:n], op.attrs["output_shapes"][:n], outputs):
        if t.shape.ndims is None or invariant.ndims is None:
            return False
        if t.shape.as_list() != invariant.as_list() and not (
                out.op.type == "TensorArrayScatterV3" and
                t.shape.as_list()[1:] == invariant.as_list()[1:]):
            return False
    return True


def updated_in_regions(node):
    """Names of the variables a region node's bodies (nested ones included) write."""
    names = set()
    for region in node.regions.values():
        for n in region.all_nodes():
            if n.type in UPDATE_OPS:
                names.add(n.inputs[0].name)
    return names


# comparisons `counter < limit` as (counter side, limit side, whether the limit is one
# more iteration: <=)
_BOUNDING_TESTS = {"Less": (0, 1, False), "LessEqual": (0, 1, True),
                   "Greater": (1, 0, False), "GreaterEqual": (1, 0, True)}


def trip_bound(op):
    """A bound on a While's trip count that its cond gives, as (i, limit, inclusive), or
    None: the cond tests `i < limit` (<=, >, >=; alone or and-ed with other tests) of loop
    variable i that the body steps by 1 (maximum_iterations' counter, map_fn's and scan's,
    a user's `i < n`); limit is the cond's tensor, inclusive for <=. Where the limit's
    value is known before the loop runs (a constant, a captured value, a dim: then the
    same every iteration), the trip count is at most limit - i's first value (+ 1 when
    inclusive), which sizes the stacks saved for a gradient (lower.py). Found from the
    bodies each time it is asked, never stored: a While read from a graph file (its
    bodies renamed by an import scope, or written by TF) has the same bound."""
    cond_g, body_g = function_of(op, "cond"), function_of(op, "body")
    n = op.attrs["num_loop_vars"]
    for counter, limit, inclusive in _bounding_tests(cond_g.outputs[0]):
        i = _loop_var_index(cond_g, counter, n)
        if i is not None and counter.dtype.is_integer and _steps_by_one(body_g, i):
            return i, limit, inclusive
    return None


def _bounding_tests(pred):
    """[(counter, limit, inclusive)] of the comparisons whose truth pred requires."""
    if pred.op.type == "LogicalAnd":
        return [t for x in pred.op.inputs for t in _bounding_tests(x)]
    test = _BOUNDING_TESTS.get(pred.op.type)
    if test is None:
        return []
    counter, limit, inclusive = test
    return [(pred.op.inputs[counter], pred.op.inputs[limit], inclusive)]


def _loop_var_index(fgraph, t, n):
    for i, x in enumerate(fgraph.inputs[:n]):
        if x is t:
            return i
    return None


def _steps_by_one(body_g, i):
    """Whether the body's new value of loop variable i is its old one plus 1."""
    out = body_g.outputs[i]
    if out.op.type not in ("Add", "AddV2"):
        return False
    a, b = out.op.inputs
    for var, step in ((a, b), (b, a)):
        known = constant_value(step)
        if var is body_g.inputs[i] and known is not None and np.ndim(known) == 0 and \
                int(known) == 1:
            return True
    return False


# ------------------------------------------------- the region node's scratch (both targets)
def written_in_place(body, n):
    """The loop variables (indices < n) that a While's body module may write into the
    buffer it reads them from: a TensorArray flow (or a gradient of one) that the body's
    output takes from a kernel changing a few rows of that same variable (ROW_WRITE_OPS)
    while no kernel after that one reads the old value. Any other loop variable needs a
    second buffer: its new value is computed while its old one is still read."""
    params = {p.attrs["index"]: p.outputs[0] for p in body.params}
    aliases = getattr(body, "aliases", None) or {}
    kernel_of = {node: t for t, k in enumerate(body.kernels) for node in k.nodes}
    out = set()
    for j, v in enumerate(body.outputs[:n]):
        p = params.get(j)
        node = v.node
        updated = ROW_WRITE_OPS.get(node.type, lambda index: None)(v.index)
        if p is None or updated is None or updated >= len(node.inputs) or \
                node.inputs[updated] is not p or body.outputs.count(v) != 1 or \
                p in body.outputs or node not in kernel_of:
            continue
        later = body.kernels[kernel_of[node] + 1:]
        if not any(_resolve(x, aliases) is p for k in later for x in k.inputs):
            out.add(j)
    return out


def _resolve(value, aliases):
    while value in aliases:
        value = aliases[value]
    return value


def scratch_parts(node, align):
    """[(what, bytes)] of a region node's scratch, in order, each part starting on an
    `align`-byte boundary (the target's): each body's arena, then for a While two buffers
    per loop variable and a row per stack (the body writes its saved value even where no
    kernel reads the stack), for an If a slot per output."""
    def aligned(nbytes):
        return (nbytes + align - 1) // align * align
    parts = [(("arena", key), aligned(region.memory_plan.arena_bytes))
             for key, region in node.regions.items()]
    if node.type == "While":
        n = node.attrs["num_loop_vars"]
        for side in ("a", "b"):
            parts += [((side, i), aligned(value_bytes(v))) for i, v in enumerate(node.outputs[:n])]
        parts += [(("row", v.index), aligned(row_bytes(v))) for v in node.outputs[n + 1:]]
    else:
        parts += [(("slot", i), aligned(value_bytes(v))) for i, v in enumerate(node.outputs)]
    return parts


def branch_outputs(node):
    """{branch: [the If's output index of each of its module's outputs]}: the If's
    outputs, then its saved intermediates of that branch (cond_v2.py)."""
    saved = [pair[0] for pair in node.attrs.get("saved", ())]
    n_out = len(node.outputs) - len(saved)
    return {key: list(range(n_out)) + [n_out + k for k, b in enumerate(saved) if b == key]
            for key in ("then", "else")}


def value_bytes(value):
    """The bytes of an IR value (a dim expression where its dims are)."""
    size = np.dtype(value.dtype.name).itemsize
    for d in value.dims:
        size = size * d
    return size


def row_bytes(stack):
    """The bytes of one iteration's value in a While's stack [rows, *dims]."""
    size = np.dtype(stack.dtype.name).itemsize
    for d in stack.dims[1:]:
        size = size * d
    return size


# ------------------------------------------ a While's loop-invariant inputs (loop passes)
def loop_input_of(node, value):
    """The While's input that the value of a body Parameter past the loop variables
    stands for (its inputs: the loop variables, the cond's captures, then the body's)."""
    n = node.attrs["num_loop_vars"]
    return node.inputs[len(node.regions["cond"].params) + value.node.attrs["index"] - n]


def add_loop_input(node, outer, name):
    """A new body Parameter reading `outer`, a value of the enclosing module computed
    before the While, which becomes the While's last input; returns its value."""
    body = node.regions["body"]
    index = len(body.params)
    n = node.attrs["num_loop_vars"]
    assert len(node.inputs) == len(node.regions["cond"].params) + index - n
    param = body.add_node("Parameter", [], {"index": index}, [(outer.dtype, outer.dims)],
                          f"{body.name}/{name}_{index}", before=body.nodes[0])
    node.inputs.append(outer)
    outer.uses.append(node)
    return param.outputs[0]
