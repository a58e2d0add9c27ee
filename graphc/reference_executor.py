"""The NumPy reference executor: runs a pruned subgraph with the ops' reference kernels.

It is the oracle for every compiled backend and the backend `"reference"` of a Session.
An executable is built once per run signature (feeds, fetches, targets) and then run
many times; run() takes the fed arrays and the session state and returns the fetches.
"""
import numpy as np

from graphc import errors
from graphc.framework.graph import format_location
from graphc.framework.op_def import READS_ONLY_INPUT_DIMS, kernel_outputs
from runtime import memory


def value_inputs(op):
    """The inputs whose values the op reads (all but its variable-reference inputs)."""
    refs = op.op_def.ref_inputs
    return [t for i, t in enumerate(op.inputs) if i not in refs] if refs else op.inputs


def prune(fetch_tensors, target_ops, feed_tensors, exclude=frozenset(), static_shapes=False):
    """The ops needed to compute the fetches and run the targets, in topological order.

    Fed tensors cut the graph: their producers run only when needed for something else.
    Ops in `exclude` (already run by an earlier stage of the same run) are left out.
    With `static_shapes`, the input of a shape-reading op (Shape, Size, ...) whose static
    shape is known is not computed for it (statically_shaped_inputs; the compiler does the
    same in constant folding, after lowering)."""
    fed = set(feed_tensors)
    needed = set(exclude)
    stack = [t.op for t in fetch_tensors if t not in fed] + list(target_ops)
    reshapable = not static_shapes or (stack and has_reshapable_variable(stack[0].graph))
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        static = statically_shaped_inputs(op, reshapable)
        stack.extend(t.op for t in value_inputs(op) if t not in fed and t not in static)
        stack.extend(op.control_inputs)
    return sorted(needed - set(exclude), key=lambda op: op._id)


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


def _static_stand_in(t):
    """A zero-stride array of t's static shape: what a shape-reading kernel needs of it."""
    return np.broadcast_to(np.zeros((), t.dtype.np), tuple(t.shape.as_list()))


class SessionState:
    """What persists in a Session between runs: variables, random generators, iterators."""

    def __init__(self):
        self.variables = {}
        self.rngs = {}
        self.iterators = {}  # tf.data iterator positions by name (graphc/data/iterator_ops.py)
        self.print_counts = {}  # runs so far of each Print op, by name (its first_n)
        self.queues = {}  # FIFOQueue/RandomShuffleQueue elements by queue name (queue_ops)
        self.operation_timeout_ms = 0  # the longest a queue wait lasts; 0: no limit

    def rng_for(self, op):
        """The op's generator: seeded by (seed, seed2) when set, else from OS entropy."""
        rng = self.rngs.get(op.name)
        if rng is None:
            seed, seed2 = op.attrs.get("seed"), op.attrs.get("seed2")
            if seed is None and seed2 is None:
                rng = np.random.default_rng()
            else:
                rng = np.random.default_rng([int(seed or 0), int(seed2 or 0)])
            self.rngs[op.name] = rng
        return rng


def op_error(op, message, cls=errors.InvalidArgumentError):
    return cls(None, op, f"{message}\n\t [[node {op.describe()}]]")


def run_kernel(op, args, state, check_shapes=True):
    """Runs one op's reference kernel; returns its outputs as arrays of the declared dtypes
    (of its static shapes too, unless `check_shapes` is False)."""
    op_def = op.op_def
    _refuse_oversized(op, [t.shape.as_tuple_or_none() for t in op.outputs])
    try:
        if op_def.uses_context:
            out = op_def.kernel(state, op, *args)
        else:
            out = op_def.kernel(*args, **op.attrs)
    except errors.OpError:
        raise
    except errors.KernelError as e:
        raise op_error(op, str(e), e.cls) from None
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise op_error(op, f"{type(e).__name__}: {e}") from None
    except MemoryError as e:  # a size known only now, past what NumPy could allocate
        raise op_error(op, f"OOM when allocating: {e}", errors.ResourceExhaustedError) from None
    outs = kernel_outputs(op, out)
    _refuse_oversized(op, [np.shape(v) for v in outs])  # sizes known only now
    results = []
    for t, v in zip(op.outputs, outs):
        v = np.asarray(v)
        if v.dtype != t.dtype.np:
            v = v.astype(t.dtype.np)
        if check_shapes and not t.shape.is_compatible_with(v.shape):
            raise op_error(op, f"kernel produced shape {v.shape} for {t.name}, whose static "
                               f"shape is {t.shape} (a graphc bug)", errors.InternalError)
        results.append(v)
    return results


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


def _refuse_oversized(op, shapes):
    """ResourceExhaustedError for an output of op whose shape needs more memory than
    the machine has: checked on the static shapes before its kernel runs (NumPy might
    allocate it lazily, then fill it), and on the shapes the kernel produced."""
    for t, shape in zip(op.outputs, shapes):
        if shape is None or None in shape or t.dtype.name == "string":
            continue
        message = memory.oom_message(shape, t.dtype.np)
        if message is not None:
            raise op_error(op, message, errors.ResourceExhaustedError)


class ReferenceExecutable:
    """A pruned, ordered op list for one run signature, executed with NumPy."""

    def __init__(self, feeds, fetches, targets, exclude=frozenset()):
        self.feeds = list(feeds)
        self.fetches = list(fetches)
        self.ops = prune(self.fetches, targets, self.feeds, exclude, static_shapes=True)
        fed = self._fed = set(self.feeds)
        # VariableV2 ops are not run in order: their consumers read the variable when they run
        self.ops = [op for op in self.ops if op.type != "VariableV2" and
                    (not op.outputs or not all(t in fed for t in op.outputs))]
        for op in self.ops:
            if op.type == "Placeholder":
                shape = op.attrs["shape"]
                dims = "<unknown>" if shape.ndims is None else \
                    "[" + ",".join("?" if d.value is None else str(d.value) for d in shape) + "]"
                self.unfed_error = errors.InvalidArgumentError(
                    None, op, f"You must feed a value for placeholder tensor '{op.name}' with "
                              f"dtype {op.attrs['dtype'].name} and shape {dims}\n\t [[node "
                              f"{op.name} (defined at {format_location(op.location)})]]")
                break
        else:
            self.unfed_error = None
        reshapable = bool(self.ops) and has_reshapable_variable(self.ops[0].graph)
        self._static = [statically_shaped_inputs(op, reshapable) for op in self.ops]
        self._last_use = self._last_uses()
        self._loose = reshaped_by_variables(self.ops)


    def _last_uses(self):
        last = {}
        for i, op in enumerate(self.ops):
            for t in value_inputs(op):
                last[t] = i
        for t in self.fetches:
            last[t] = len(self.ops)
        drop = [[] for _ in self.ops]
        for t, i in last.items():
            if i < len(self.ops):
                drop[i].append(t)
        return drop

    def run(self, feed_arrays, state):
        if self.unfed_error is not None:
            raise self.unfed_error
        env = dict(zip(self.feeds, feed_arrays))

        def value(t):  # a variable is read when its consumer runs (TF1's ref semantics)
            if t.op.type == "VariableV2" and t not in env:
                return run_kernel(t.op, [], state)[0]
            return env[t]

        for i, op in enumerate(self.ops):
            refs = op.op_def.ref_inputs
            static = self._static[i]
            args = [None if j in refs else _static_stand_in(t) if t in static and t not in env
                    else value(t) for j, t in enumerate(op.inputs)]
            outs = run_kernel(op, args, state, op not in self._loose)
            for t, v in zip(op.outputs, outs):
                if t not in env:  # a fed output keeps its fed value
                    env[t] = v
            for t in self._last_use[i]:
                if t not in self._fed:
                    env.pop(t, None)
        return [value(t) for t in self.fetches]
