"""Native control flow: which While and If ops compile into the CPU's code, and the facts
about their bodies that lowering, fusion and codegen share.

A While or If whose bodies hold only ops native code runs is lowered with its bodies as
modules of their own (`node.regions`, ir.py), optimized and scheduled like any module
(driver.py) and emitted into the one LLVM module as functions that the node's kernel
calls: a loop around the cond and body calls with the loop variables in two buffers that
swap each iteration, or a branch to one of the two branches (backends/cpu/regions.py).
TensorArrays (create, read, write, gather, scatter, stack, unstack) compile too, in
loops and out (backends/cpu/tensor_arrays.py), and a loop writes an array in place. An
array that grows (dynamic_size) compiles where a loop appends to it (appended_arrays:
`ta.write(i, x)` at a counter from 0, raw_rnn's emitted outputs): it is no loop
variable then but a stack of the elements, as a saved value is, whose rows are the
trip count (the growable stacks below); reads, stacks and gathers of it after the loop,
and kernels computing of those, read its rows on the heap (backends/cpu/entry.py).
The GPU target compiles the same ones: each body's kernels are launched from the host on
device buffers, the loop variables in two that swap, only the predicate read back per
iteration (backends/gpu/control_flow.py, tensor_arrays.py; runtime/gpu/control_flow.py).
What stays on the host (between native stages, bodies on the reference executor):
  - a body holding a host op (py_func, Print, a string op, a TensorArray that grows
    other than by a loop appending to it: written at another index, read or sized in
    the body, or written in a body nested in the loop (its rows would outlive the
    body's entry)). The gradient of an appended array compiles: the backward body
    reads row k of the gradient of the whole array, a captured input on the heap as a
    stack is (ops/while_v2.py), not a loop variable: a loop variable's buffers are
    sized before the run, and these rows are the forward trip count;
  - a While keeping stacks for a gradient (attr `saved`) without a bound on its trip
    count known before it runs, where its stacks cannot grow in native code: in a body
    (nested loops: the heap they grow on is freed by the module's entry), or
    where a stack (or an appended array, or a value computed of one) leaves the stage
    it is made in (a fetch, or a backward loop in a later stage after a host op: the
    runtime sizes every output before the run, by the feeds' dims, and this one's rows
    are known only after the loop; no run dim sizes an output), or where the stage's
    shapes need a guard on the trip count (guards are checked before the run; a
    broadcast of a stack against a lower rank value needs none: its rows are the
    result's, 1 or not, framework/tensor_shape.broadcast_shapes). The GPU target
    compiles the others, its runtime growing their stacks in device buffers it owns
    between the host-driven iterations (backends/gpu/control_flow.py).
    The bound is that of a cond testing a counter stepped by 1 against a limit
    (trip_bound, below): maximum_iterations (dynamic_rnn's time steps), map_fn's
    and scan's elements, a user's `i < n`. With one the stacks have that many rows,
    allocated before the loop, and the loop writes row k of each in iteration k (rows
    past the trip count are never read: the backward loop counts the trip count down; a
    trip count past the rows is an error naming the While). Without one (a loop of the
    module itself, not of a body) its stacks grow: their rows are the loop's trip count,
    a dim known only during the run (trips_symbol: a syms slot after the error details,
    loops/program.py, that the forward loop's kernel sets when it leaves), each stack's
    value in the arena is a header (GROWABLE_HEADER_BYTES: a heap pointer and the rows it
    has room for, memory planning's buffer_bytes) that the forward kernel reallocates,
    doubling from GROWABLE_FIRST_ROWS, and the backward loops read through; the module's
    entry frees them when it returns, failing or not (backends/cpu/entry.py). Their only
    readers are backward loops (captured inputs), which pass the heap pointer to their
    bodies. An If's saved intermediates compile: the taken branch writes its own, the
    kernel zeros the other's;
  - a loop variable whose shape changes between iterations (a shape invariant looser
    than the shape it enters with: `out = concat([out, x_t], 0)`) where such a variable
    (or a value computed of it) leaves the native stage (a fetch: the runtime sizes it
    before the run) or, for a loop in a body (a branch, another loop's body), leaves
    that body (an output of it, a value it saves for a gradient: the body's entry frees
    the values on its heap when it returns). Elsewhere it compiles: each of its dims
    that the body changes
    (loose_axes, those whose first iteration changes them) is a symbol of the bodies
    (carried_symbol, a syms slot beside the trip counts) that the loop's kernel sets
    before the cond and the body run, computing the next value from the body's output
    dims; the body's kernels read it as they read a feed's dim. Its two buffers, and the
    arenas of bodies whose sizes read it, are the kernel's, on the heap, made bigger as
    an iteration needs and freed when the kernel returns (backends/cpu/control_flow.py).
    After the loop the dim is a run dim (leaving_symbol), and the variable a value on
    the heap read through a header, as a growable stack is (backends/cpu/entry.py: the
    entry of the module holding the loop frees it). No guard may decide on such a dim (framework/symbolic.py unguardable): one
    sends the loop to the host, as does an op whose shape inference fails on it (its
    output compared with a value of fixed dims: `out * g`, lower.py).
    Its gradient compiles too. The values the backward loop reads whose shapes change
    are ragged stacks (ops/while_v2.py RAGGED_SAVED): iteration k's block after the
    others' on the heap, read through a header as a growable stack (the kernel
    reallocates the rows to at least twice their bytes when a block does not fit), its
    elements a run dim the kernel sets when the loop leaves (ragged_symbol), the blocks'
    shapes an ordinary stack beside it. The backward loop is compiled in the forward
    body's dims: before its iteration k its kernel sets the forward loop's carried
    symbols to those of forward iteration k, read from the stacks of the loop variables'
    shapes (FORWARD_DIM_SLOTS); a block it reads (RaggedBlock, at an offset summed after
    the forward loop), a shape of a forward value it reads (lowering knows the forward
    body's dims of that value, lower.py _BackwardOfRaggedLoop) and its gradients of the
    loop variables (on its heap, heap_loop_vars: they have the forward body's output
    dims) then share one set of symbols, which inference can compare without a guard.
    The backward loop needs its forward loop native in its own stage (the symbols are
    that loop's), so neither is in a body (their stacks would leave it). The GPU target runs these loops, forward and backward, on the host.
A random op in a body compiles: its state (key and run counter, graphc/framework/
random_state.py) is that of the body's op, which the stage creates as it does its own ops'
(random_ops_within), and the body's kernel counts a run per call, so iteration k of a
loop draws the op's numbers of run r + k, as the reference executor does running the body
op by op. A gradient reads what the forward iteration drew from the stacks (a dropout's
mask is a saved intermediate), never draws again.
A loop variable whose unknown dim changes without a shape invariant (allowed by TF1) is
found when lowering (its body's output dims differ from its input dims): the stage then
runs on the reference executor with a warning (LoweringError).
"""
import numpy as np

from graphc import errors
from graphc.framework.func_graph import function_of
from graphc.framework.op_def import RANDOM_OP_TYPES, ROW_WRITE_OPS, UPDATE_OPS
from graphc.framework.static_value import constant_value
from graphc.framework.symbolic import CARRIED_DIM_SUFFIX, RUN_DIM_SUFFIX, SymDim, \
    reads_carried_dims, set_during_run  # noqa: F401

# op type -> (attr naming each body, the key of its region module)
REGION_BODIES = {"While": (("cond", "cond"), ("body", "body")),
                 "If": (("then_branch", "then"), ("else_branch", "else"))}


# TensorArray ops the CPU backend lowers (backends/cpu/tensor_arrays.py), their gradient
# ops included
TENSOR_ARRAY_OPS = frozenset({"TensorArrayV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
                              "TensorArrayGatherGrad", "TensorArrayScatterGrad"})


def tensor_array_compiles(op):
    """Whether a TensorArray op runs in native code: one whose values have a known rank,
    and which does not grow an array (a dynamic_size scatter; creating one compiles: it
    has the size it is made with, and a loop appending to it makes a stack of it,
    appended_arrays)."""
    return op.type in TENSOR_ARRAY_OPS and \
        not (op.type == "TensorArrayScatterV3" and op.attrs.get("dynamic_size")) and \
        op.outputs[0].shape.ndims is not None and \
        all(t.shape.ndims is not None for t in op.inputs)


def appended_arrays(op):
    """{values loop variable: (written loop variable, the body's scatter)} of the
    dynamic_size TensorArrays a While appends to: iteration k writes element k, so that
    the array after the loop is a stack of one element per iteration (its rows the trip
    count), made as a saved value is (lower.py). Such an array enters the loop empty
    (made by a TensorArrayV3 of size 0), the body writes it once (`ta.write(i, x)`) at
    the old value of a loop variable i that starts at 0 and steps by 1, and nothing else
    in the cond or the body reads it (a read or a size in the body would need the rows
    written so far, a gradient the size each iteration saw: those loops run on the
    host). raw_rnn's emitted arrays are such arrays, as is `ta.write(i, ...)` in a loop
    counting i from 0."""
    if op.type != "While":
        return {}
    cond_g, body_g = function_of(op, "cond"), function_of(op, "body")
    n = op.attrs["num_loop_vars"]
    out = {}
    for jv in range(n):
        scatter = body_g.outputs[jv].op
        if scatter.type != "TensorArrayScatterV3" or not scatter.attrs.get("dynamic_size") \
                or body_g.outputs[jv] is not scatter.outputs[0]:
            continue
        values, written, indices, _ = scatter.inputs
        jw = _loop_var_index(body_g, written, n)
        if _loop_var_index(body_g, values, n) != jv or jw is None or \
                body_g.outputs[jw] is not scatter.outputs[1] or \
                not _empty_array(op.inputs[jv], op.inputs[jw]) or \
                any(c is not scatter for j in (jv, jw) for c in body_g.inputs[j].consumers()) \
                or any(cond_g.inputs[j].consumers() for j in (jv, jw)):
            continue
        counter = _written_at_counter(indices, body_g, n)
        if counter is not None and _starts_at_zero(op.inputs[counter]):
            out[jv] = (jw, scatter)
    return out


def _empty_array(values, written):
    """Whether the flows are those of a TensorArrayV3 made with size 0."""
    create = values.op
    return create.type == "TensorArrayV3" and values is create.outputs[0] and \
        written is create.outputs[1] and _starts_at_zero(create.inputs[0])


def _starts_at_zero(t):
    known = constant_value(t)
    return known is not None and np.ndim(known) == 0 and int(known) == 0


def _written_at_counter(indices, body_g, n):
    """The loop variable i (stepping by 1) whose old value is the one index the scatter
    writes (TensorArray.write's reshape of it), or None."""
    if indices.op.type != "Reshape":
        return None
    i = _loop_var_index(body_g, indices.op.inputs[0], n)
    shape = constant_value(indices.op.inputs[1])
    if i is None or shape is None or list(np.reshape(shape, [-1])) != [1] or \
            not _steps_by_one(body_g, i):
        return None
    return i


def bodies_of(op):
    """{region key: FuncGraph} of a While or If op."""
    return {key: function_of(op, attr) for attr, key in REGION_BODIES[op.type]}


def compiles_natively(op, is_host_op):
    """Whether the While or If `op` runs in native code: its bodies' ops (nested loops
    and branches recursively) are all native (`is_host_op(op)` False) but for the
    scatters of the arrays it appends to (appended_arrays), none a loop whose stacks or
    arrays grow, and its loop variables keep their shapes (module docstring)."""
    try:
        bodies = bodies_of(op)
    except errors.KernelError:  # a graph file's op without its bodies: the host says so
        return False
    if op.type == "While" and not _invariants_exact(op):
        return False
    appended = {scatter for _, scatter in appended_arrays(op).values()}
    for body in bodies.values():
        for inner in body.get_operations():
            if inner not in appended and (is_host_op(inner) or _unbounded_stacks(inner) or
                                          appended_arrays(inner)):
                return False
    return True


def random_ops_within(ops):
    """The random ops among `ops` and in the bodies of their While and If ops (nested ones
    included): those whose generator state a stage running `ops` reads and advances."""
    out = []
    # the types first: asked per op, RANDOM_OP_TYPES (a live view) was half of this
    # walk of a signature in a warm first run
    kinds = {op.type for op in ops}
    if kinds.isdisjoint(RANDOM_OP_TYPES) and kinds.isdisjoint(REGION_BODIES):
        return out
    for op in ops:
        if op.type in RANDOM_OP_TYPES:
            out.append(op)
        elif op.type in REGION_BODIES:
            try:
                bodies = bodies_of(op)
            except errors.KernelError:  # a graph file's op without its bodies
                continue
            for body in bodies.values():
                out += random_ops_within(body.get_operations())
    return out


def _unbounded_stacks(op):
    """Whether `op` is a While keeping stacks for its gradient with no bound on its trip
    count to size them before it runs (trip_bound): stacks that grow, which a body cannot
    hold (module docstring)."""
    return op.type == "While" and bool(op.attrs.get("saved")) and trip_bound(op) is None


# stacks whose rows are a loop's trip count, known only during the run (module docstring)
GROWABLE_HEADER_BYTES = 16  # the heap pointer, then the rows it has room for (i64)
GROWABLE_FIRST_ROWS = 16


# a loop variable's dim that changes between iterations (a looser shape invariant: a
# concat growing it): in the loop's bodies a symbol the loop's kernel sets before each
# call (carried_symbol, read from syms as a feed's dim is), after the loop a dim set
# during the run (leaving_symbol), read by the kernels after it from the heap as a
# growable stack's rows are
def carried_symbol(while_name, var, axis):
    """The dim `axis` of loop variable `var` inside the bodies of While `while_name`."""
    return f"{while_name}:var{var}.{axis}{CARRIED_DIM_SUFFIX}"


def leaving_symbol(while_name, var, axis):
    """The dim `axis` of loop variable `var` after While `while_name`, a run dim."""
    return f"{while_name}:var{var}.{axis}{RUN_DIM_SUFFIX}"


# a backward While node's attr (lowering's, compiler/lower.py _BackwardOfRaggedLoop):
# [(its input past the loop variables, rank, axis, carried symbol)] of the forward loop's
# dims its kernel sets before each iteration k, from row k of that input (a stack of a
# loop variable's shapes)
FORWARD_DIM_SLOTS = "forward_dim_slots"


def heap_loop_vars(node):
    """The loop variables of a While node whose dims in its body read carried dims (its
    own changing ones, or a backward loop's forward dims): their buffers are on the
    kernel's heap, sized each iteration."""
    n = node.attrs["num_loop_vars"]
    return {p.attrs["index"] for p in node.regions["body"].params
            if p.attrs["index"] < n and any(reads_carried_dims(d) for d in p.outputs[0].dims)}


def carried_axes(node):
    """[(loop variable, axis)] of the dims of a While node's loop variables that change
    between iterations (its outputs' dims there are leaving_symbols)."""
    n = node.attrs["num_loop_vars"]
    return [(i, axis) for i, v in enumerate(node.outputs[:n]) for axis, d in enumerate(v.dims)
            if isinstance(d, SymDim) and d.symbols() == {leaving_symbol(node.name, i, axis)}]


def ragged_symbol(while_name, k):
    """The number of elements of ragged stack k (among its saved values) of While
    `while_name` (ops/while_v2.py RAGGED_SAVED), set during the run by its kernel."""
    return f"{while_name}:ragged{k}{RUN_DIM_SUFFIX}"


def trips_symbol(while_name):
    """The name of the dim that is the trip count of While `while_name`, set during the
    run by its kernel: the rows of its growable stacks."""
    return while_name + RUN_DIM_SUFFIX


def run_dim_loop(expr):
    """The While whose trip count a dim expression (plain data, SymDim.to_json) reads, or
    None."""
    if isinstance(expr, int):
        return None
    for _, mono in expr:
        for atom, _ in mono:
            if isinstance(atom, str):
                for suffix in (RUN_DIM_SUFFIX, CARRIED_DIM_SUFFIX):
                    if atom.endswith(suffix):
                        # a trip count's, a loop variable's dim or a ragged stack's size
                        return atom[:-len(suffix)].rsplit(":var", 1)[0].rsplit(
                            ":ragged", 1)[0]
                continue
            found = run_dim_loop(atom[1]) or run_dim_loop(atom[2])
            if found:
                return found
    return None


def growable(value):
    """Whether an IR value lives on the heap, its dims known only during the run: a stack
    growing during the run (its rows a trips_symbol), a loop variable whose dims changed
    in the loop (leaving_symbol), or a value computed of them."""
    return any(set_during_run(d) for d in value.dims)


def _invariants_exact(op):
    """Each loop variable's shape invariant is of known rank, and the shape it enters the
    loop with but for a TensorArray's flows (their invariant leaves the rows unknown, and
    a native array's rows never change) and for a tensor whose dims may change (lowering
    carries them, carried_symbol) unless the loop keeps its values ragged for a gradient
    (ops/while_v2.py: no native stack holds those)."""
    n = op.attrs["num_loop_vars"]
    outputs = function_of(op, "body").outputs
    for t, invariant, out in zip(op.inputs[:n], op.attrs["output_shapes"][:n], outputs):
        if t.shape.ndims is None or invariant.ndims is None:
            return False
        if t.shape.as_list() != invariant.as_list() and not (
                out.op.type == "TensorArrayScatterV3" and
                t.shape.as_list()[1:] == invariant.as_list()[1:]) and \
                out.op.type.startswith("TensorArray"):
            return False
    return True


def loose_axes(op):
    """{loop variable: [axes]} of a While's loop variables (tensors, not TensorArray
    flows) whose shape invariant is looser than the shape they enter with: the axes the
    invariant leaves unknown, whose dims may change between iterations."""
    n = op.attrs["num_loop_vars"]
    outputs = function_of(op, "body").outputs
    out = {}
    for i, (t, invariant) in enumerate(zip(op.inputs[:n], op.attrs["output_shapes"][:n])):
        if t.shape.ndims is None or invariant.ndims is None or \
                t.shape.as_list() == invariant.as_list() or \
                outputs[i].op.type.startswith("TensorArray"):
            continue
        out[i] = [axis for axis, d in enumerate(invariant.as_list()) if d is None]
    return out


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
    kernel reads the stack), for an If a slot per output. Arenas and loop variables whose
    sizes read a loop variable's carried dims are on the heap instead (the kernel's)."""
    def aligned(nbytes):
        return (nbytes + align - 1) // align * align
    parts = [(("arena", key), aligned(region.memory_plan.arena_bytes))
             for key, region in node.regions.items()
             if not reads_carried_dims(region.memory_plan.arena_bytes)]
    if node.type == "While":
        n = node.attrs["num_loop_vars"]
        carried = heap_loop_vars(node)
        for side in ("a", "b"):
            parts += [((side, i), aligned(value_bytes(v))) for i, v in enumerate(node.outputs[:n])
                      if i not in carried]
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


# a While's attr: the places among its stacks of those whose rows past the trip count its
# kernel zeros when the loop leaves (a product after the loop reads every row:
# passes/sink_loop_gemms.py)
ZEROED_PAST_TRIPS = "zeroed_past_trips"


def zeroed_past_trips(node):
    """The stacks (outputs) of While `node` whose rows past its trip count it zeros."""
    n = node.attrs["num_loop_vars"]
    return [node.outputs[n + 1 + k] for k in node.attrs.get(ZEROED_PAST_TRIPS, ())]


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
