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
and the op's compiler facts, declared here so that every table the compiler and the
executors keep of op types is a view of this registry (OpTypes) and a new op is added in
its definition alone:
  kind: what computation it is, as fusion and codegen see it (KINDS; the compiler's
      op_kinds module says what each means).
  host_only: compiled code never runs it; the host runs its reference kernel (Python
      objects, strings, the Session's own store, data-dependent output sizes). While, If
      and the TensorArray ops are host-only but for the CPU's code, which runs those that
      graphc/compiler/regions.py says it can.
  native_on_cpu: for a host-only op the CPU's code can run in some settings, an object
      saying where (`compiles(op)`) and giving the host's work around each run of the
      code holding such ops (`running(ops)`, a context manager): graphc.distribute's
      collectives, native in a job of several ranks (graphc/distribute/native.py).
  epilogue: an elementwise activation that may be applied to a MatMul/Conv2D result in
      place, as the gemm or conv kernel's epilogue.
  updates_variable: None, or how it writes its ref input 0 in place: "overwrite" (every
      element, without reading the old value: Assign) or "read_write" (it combines with or
      leaves part of the old value: AssignAdd, the row scatters).
  writes_state: whether a stateful op changes the Session state (default: stateful);
      False for the reads (VariableV2, the variable-status queries).
  dims_only_inputs: inputs whose dims it reads, never their values ("all", or indices):
      Shape, Size, ZerosLike...; given known dims, no backend computes those inputs.
  shape_inputs: inputs whose values its output's dims already say (a reshape's shape,
      a fill's dims): compiled code with known output dims never reads them.
  forwards_input: its output is input 0 itself (Identity, StopGradient).
  aliases_input: its output holds input 0's elements in the same order, only the dims
      may differ (the reshapes, and every op that forwards its input): it may share
      input 0's buffer.
  broadcasting: a binary elementwise op whose operands broadcast (NumPy rules).
Attrs hold only plain data (numbers, strings, bools, lists/tuples of them, DType,
TensorShape, NumPy arrays) so a graph can be written to a file without pickle.
"""
from collections.abc import Mapping, Set

import numpy as np

KINDS = ("elementwise", "index", "reduction", "gemm", "conv", "window", "opaque", "state",
         "random", "source", "control")
UPDATES = (None, "overwrite", "read_write")
FACTS = ("host_only", "native_on_cpu", "epilogue", "updates_variable", "writes_state",
         "dims_only_inputs", "shape_inputs", "forwards_input", "aliases_input", "broadcasting")


class OpDef:
    def __init__(self, type, infer, kernel, grad=None, stateful=False, uses_context=False,
                 ref_inputs=(), *, kind, host_only=False, native_on_cpu=None, epilogue=False,
                 updates_variable=None, writes_state=None, dims_only_inputs=(), shape_inputs=(),
                 forwards_input=False, aliases_input=False, broadcasting=False):
        self.type = type
        self.ref_inputs = tuple(ref_inputs)
        self.infer = infer
        self.kernel = kernel
        self.grad = grad
        self.stateful = stateful
        self.uses_context = uses_context
        self.differentiable = True
        self.kind = kind
        self.host_only = host_only
        self.native_on_cpu = native_on_cpu
        self.epilogue = epilogue
        self.updates_variable = updates_variable
        self.writes_state = stateful if writes_state is None else writes_state
        self.dims_only_inputs = dims_only_inputs if dims_only_inputs == "all" \
            else tuple(dims_only_inputs)
        self.shape_inputs = tuple(shape_inputs)
        self.forwards_input = forwards_input
        self.aliases_input = aliases_input or forwards_input
        self.broadcasting = broadcasting
        _check_facts(self)

    def __repr__(self):
        return f"OpDef({self.type})"


def _check_facts(d):
    """Facts that contradict each other would make the compiler's views disagree."""
    problems = []
    if d.kind is None:
        problems.append(f"kind is required (one of {', '.join(KINDS)})")
    elif d.kind not in KINDS:
        problems.append(f"kind {d.kind!r} is not one of {', '.join(KINDS)}")
    if d.updates_variable not in UPDATES:
        problems.append(f"updates_variable {d.updates_variable!r} is not one of {UPDATES}")
    if d.updates_variable and (0 not in d.ref_inputs or not d.stateful):
        problems.append("updates_variable needs a stateful op with ref input 0")
    if d.epilogue and d.kind != "elementwise":
        problems.append("an epilogue activation must be of kind 'elementwise'")
    if d.native_on_cpu is not None and not d.host_only:
        problems.append("native_on_cpu is for host-only ops")
    if d.writes_state and not d.stateful:
        problems.append("writes_state needs stateful=True")
    if problems:
        raise ValueError(f"register_op({d.type!r}): " + "; ".join(problems))


class _Registry(dict):
    """op type -> OpDef. `version` counts registrations and removals, so that the views
    below know when to look again (an OpDef's facts are fixed when it is registered)."""
    version = 0

    def __setitem__(self, op_type, op_def):
        super().__setitem__(op_type, op_def)
        self.version += 1

    def __delitem__(self, op_type):
        super().__delitem__(op_type)
        self.version += 1


OP_DEFS = _Registry()


def register_op(type, *, infer, kernel, kind=None, grad=None, stateful=False, uses_context=False,
                ref_inputs=(), **facts):
    """Registers an op type with its compiler facts (module docstring); returns its OpDef.
    Each type is registered once."""
    if type in OP_DEFS:
        raise KeyError(f"Op type {type!r} is already registered")
    unknown = sorted(set(facts) - set(FACTS))
    if unknown:
        raise ValueError(f"register_op({type!r}): unknown fact {', '.join(unknown)} "
                         f"(the facts are kind, {', '.join(FACTS)})")
    op_def = OpDef(type, infer, kernel, grad, stateful, uses_context, ref_inputs, kind=kind,
                   **facts)
    OP_DEFS[type] = op_def
    return op_def


class OpTypes(Set):
    """The registered op types whose OpDef has a fact: a live view of the registry, so an
    op registered later (by a test, a plugin) is in it too. `fact` is an OpDef attribute
    name or a predicate on an OpDef."""

    def __init__(self, fact):
        self._test = (lambda d: bool(getattr(d, fact))) if isinstance(fact, str) else fact
        self._name = fact if isinstance(fact, str) else getattr(fact, "__name__", "?")
        self._version = None
        self._types = frozenset()

    def _current(self):
        # the passes ask per node: a set rebuilt when the registry changes, not a scan
        if self._version != OP_DEFS.version:
            self._types = frozenset(t for t, d in OP_DEFS.items() if self._test(d))
            self._version = OP_DEFS.version
        return self._types

    def __contains__(self, op_type):
        if self._version != OP_DEFS.version:
            self._current()
        return op_type in self._types

    def __iter__(self):
        return iter(sorted(self._current()))

    def __len__(self):
        return len(self._current())

    @classmethod
    def _from_iterable(cls, types):
        return frozenset(types)  # a set operation's result is a snapshot

    def __repr__(self):
        return f"OpTypes({self._name}: {sorted(self)})"


class OpKinds(Mapping):
    """op type -> kind, a live view of the registry."""

    def __getitem__(self, op_type):
        return OP_DEFS[op_type].kind

    def __iter__(self):
        return iter(list(OP_DEFS))

    def __len__(self):
        return len(OP_DEFS)


OP_KINDS = OpKinds()

# Op types that read only the dims of their inputs, never their values: given static (or
# compile-time) shapes, every backend takes the result without computing the inputs, as
# TF's grappler does (so the Shape of an op that would fail at run time still runs).
READS_ONLY_INPUT_DIMS = OpTypes("dims_only_inputs")
HOST_OP_TYPES = OpTypes("host_only")
# Ops writing their variable input in place; all but Assign also read it (the rows or
# elements they leave or combine with).
UPDATE_OPS = OpTypes("updates_variable")
READING_UPDATE_OPS = OpTypes(lambda d: d.updates_variable == "read_write")
# Ops whose output is one of their inputs with a few rows changed: op type -> which input,
# given the output's index (a TensorArray write, its output k the flow k it writes; the
# flow's gradient with the written rows zeroed; the read gradient's rows summed into its
# 4th input, tensor_array_ops.accumulated_read_gradient). Their kernels write in place
# when handed that input's buffer: a native loop's flow variable, once no later kernel
# reads the old value (regions.written_in_place; the schedule runs them after the value's
# other readers: schedule/fusion.py). Without it a loop of T steps copies a [T, ...] flow
# each iteration: O(T^2).
ROW_WRITE_OPS = {"TensorArrayScatterV3": lambda index: index,
                 "TensorArrayScatterGrad": lambda index: 0,
                 "TensorArrayGatherGrad": lambda index: 3}
# Stateful ops that only read the state: passes may drop them when unused.
READ_ONLY_STATE_OPS = OpTypes(lambda d: d.stateful and not d.writes_state)
RANDOM_OP_TYPES = OpTypes(lambda d: d.kind == "random")

# Attrs of a While that its gradient sets (ops/while_v2.py) and the compiler reads.
# A forward While's: the places among its saved values (attr `saved`) of those kept ragged,
# each iteration's value flattened one after another ([total elements]), because their
# shapes may differ between iterations (a stack [trip count, *shape] cannot hold them)
RAGGED_SAVED = "ragged_saved"

# A backward While's, where its forward loop has loop variables of a looser shape
# invariant (ragged values): the forward loop variable of each of its gradients (its loop
# variables after the counter), and the forward loop variable then the backward body
# input of each stack of those variables' shapes (pairs one after another: a graph
# file's attr holds a flat list), from which native code sets the forward body's dims of
# iteration k before the backward body runs it (compiler/lower.py, backends/cpu/
# control_flow.py)
FORWARD_LOOP_VARS = "forward_loop_vars"
FORWARD_DIMS = "forward_dims"


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


# an op's attr listing more of its inputs that name a variable (a While's, an If's)
REF_INPUTS_ATTR = "ref_input_indices"
# the op types whose OpDef names inputs that name a variable; the others' ref inputs are
# only those their REF_INPUTS_ATTR lists
REF_INPUT_TYPES = OpTypes(lambda d: bool(d.ref_inputs))


def ref_input_indices(op):
    """The indices of op's inputs that name a variable rather than pass its value."""
    extra = op.attrs.get(REF_INPUTS_ATTR)
    return op.op_def.ref_inputs + tuple(extra) if extra else op.op_def.ref_inputs


def get_op_def(type):
    try:
        return OP_DEFS[type]
    except KeyError:
        raise KeyError(f"No op registered for type {type!r}") from None
