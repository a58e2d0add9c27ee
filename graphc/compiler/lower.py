"""Lowering: the part of a graphc Graph that one run signature needs -> an IR Module.

The op selection is the reference executor's (`prune` over `value_inputs`, fed tensors
cutting the graph), so a module computes exactly what ReferenceExecutable runs. As there,
a variable is read when its consumer runs (TF1's ref semantics): each consumer of a
VariableV2 output gets its own VariableV2 read node just before it, and a fetched
variable is read after everything else. A random op's state (its key and run count,
graphc/framework/random_state.py) becomes a variable of the module too, which the node
names in attrs[ir.STATE_VARIABLE].

Shapes are symbolic (graphc/framework/symbolic.py). Unknown dim i of feed x becomes the
symbol `x.i`, whose hint is its size in this run's feeds (a size of 0 or 1 is specialized
to that int instead: broadcasting and empty tensors behave differently); a feed of unknown
rank takes the rank of the fed array. Every op's own shape inference then runs again on
stand-in inputs whose shapes hold those SymDims, so each IR dim is an int or an
expression of the feed symbols. The stand-ins' producers are stand-ins too (built when
inference looks at them), so shape tensors trace as well: Shape(x) reads as x's dims, and
so do fill(shape(x), v), reshape(g, shape(x)), random_uniform(shape(x)), shape(x)[0].
Decisions inference takes on the hints are recorded in `module.guards`; the module is
valid for every feed whose dims satisfy them (`check_guards`). A dim that depends on data
(Where's row count) stays None and makes the module not static-shaped.

Shape-determining VALUES (a fed reshape shape, fill dims, a range limit, a slice bound, a
transpose perm, a reduction or concat axis) are compile-time constants, as in XLA: when
shape inference reads the value of a small integer feed (at most MAX_SPECIALIZED_ELEMENTS
elements), the module is specialized on the value fed in the run being compiled. The
feed's uses read a Const holding that value and `module.value_guards` records it; the
runtime checks the fed value on every run and a different value compiles a new variant.
Integer feeds whose values inference never reads (labels, gather indices) are never
specialized. Values computed from data at run time stay unknown (dims of None).

Inference that fails for the fed sizes or values is the run-time error the reference
executor would raise: InvalidArgumentError naming the op, with the message of the op's
reference kernel run on stand-in data of those sizes (zeros, and the known values).
"""
import contextlib
import itertools
from collections.abc import Mapping

import numpy as np

from graphc import dtypes, errors
from graphc.compiler.ir import PARAMETER, STATE_VARIABLE, Module, Value, normalize_dims
from graphc.compiler.schedule.kernel import dims_equal
from graphc.framework.func_graph import function_of
from graphc.framework.graph import Tensor
from graphc.compiler.regions import FORWARD_DIM_SLOTS, GROWABLE_FIRST_ROWS, REGION_BODIES, \
    appended_arrays, bodies_of, carried_axes, carried_symbol, growable, leaving_symbol, \
    loose_axes, ragged_symbol, reads_carried_dims, run_dim_loop, set_during_run, \
    trip_bound, trips_symbol
from graphc.framework.op_def import FORWARD_DIMS, FORWARD_LOOP_VARS, RAGGED_SAVED, \
    RANDOM_OP_TYPES, READING_UPDATE_OPS, ref_input_indices
from graphc.framework.random_state import random_state_name
from graphc.framework.static_value import constant_value
from graphc.framework.subgraph import prune, unfed_placeholder_error, value_inputs
from graphc.framework.symbolic import GuardSet, SymDim, concrete
from graphc.framework.tensor_shape import TensorShape

_module_counter = itertools.count(1)
MAX_SPECIALIZED_ELEMENTS = 64  # larger integer feeds are data, never shape values
_MAX_STAND_IN_ELEMENTS = 1 << 22  # per input, for the reference kernel's error message
_PEEKING = [False]  # reading values without specializing on fed ones (_peeking)


class _WouldSpecialize(Exception):
    """A value read while _peeking needs a fed value not specialized on yet."""


@contextlib.contextmanager
def _peeking():
    before = _PEEKING[0]
    _PEEKING[0] = True
    try:
        yield
    finally:
        _PEEKING[0] = before


class LoweringError(NotImplementedError):
    """What native code cannot do for this run signature yet: lowering (inference that
    cannot take symbolic dims) or codegen (an op type without a rule, an axis that is not
    a compile-time constant...). The Session runs such a signature with the reference
    executor."""


class RegionOnHost(LoweringError):
    """A While or If (`op_name`, of the graph lowered, not of a body) whose bodies cannot
    be native code for these sizes (a loop variable whose shape changes, dims that depend
    on data inside a body): the Session runs that op on the host, the rest natively."""

    def __init__(self, message, op_name):
        super().__init__(message)
        self.op_name = op_name


def lower(feeds, fetches, targets, feed_shapes, name=None, feed_values=None,
          variable_shapes=None, exclude=frozenset(), ops=None):
    """Builds the Module for running `targets` and fetching `fetches` given `feeds`
    (graphc Tensors, Tensors, Operations: ReferenceExecutable's arguments).

    feed_shapes: the shapes of the arrays fed in the run being compiled, one per feed;
    they give the symbols' hints and the ranks of feeds of unknown rank.
    feed_values: optionally the fed arrays themselves (one per feed, or None): the small
    integer ones may be specialized on (see the module docstring); without them a
    shape-determining feed leaves its dims unknown.
    variable_shapes: {variable name: shape} of the Session's variables now; a variable
    whose graph shape is not fully known (validate_shape=False) takes the shape it holds
    (the runtime checks it, runtime.GuardFailure when it changed), or, when the run only
    assigns it, the shape of the value assigned.
    ops: ops_to_lower(fetches, targets, feeds, exclude) when the caller has it already
    (the Session prunes a signature once, not once per stage and compile)."""
    feeds, feed_shapes = list(feeds), [tuple(s) for s in feed_shapes]
    if len(feeds) != len(feed_shapes):
        raise ValueError(f"lower: {len(feeds)} feeds but {len(feed_shapes)} feed shapes")
    return _Lowering(feeds, list(fetches), list(targets), feed_shapes, name,
                     feed_values, variable_shapes, exclude, ops).module


def ops_to_lower(fetches, targets, feeds, exclude=frozenset()):
    """The ops a run signature lowers, in topological order: the pruned subgraph less the
    ops whose every output is fed."""
    return unfed(prune(fetches, targets, feeds, exclude), feeds)


def unfed(ops, feeds):
    """`ops` less those whose every output is fed (a fed tensor's producer does not run)."""
    # ids: a tensor's hash is Python code (Tensor.__hash__); the feeds are few, the ops many
    fed = {id(t) for t in feeds}
    cut = {id(t.op) for t in feeds if all(id(out) in fed for out in t.op.outputs)}
    return [op for op in ops if id(op) not in cut] if cut else list(ops)


def specializable(dtype, array):
    """Whether a fed array may become a compile-time constant: small and integer."""
    return array is not None and dtype.is_integer and \
        np.size(array) <= MAX_SPECIALIZED_ELEMENTS


def signature_key(feeds, fetches, targets, feed_arrays):
    """The cache key of a run: what it feeds, fetches and runs, and the fed arrays' dtypes
    and ranks. Runs with one key differ only in dim sizes, which the guards decide."""
    return (tuple(feeds), tuple(fetches), tuple(targets),
            tuple(a.dtype.str for a in feed_arrays), tuple(a.ndim for a in feed_arrays))


def _module_name(fetches, targets):
    first = (fetches or targets or [None])[0]
    label = getattr(getattr(first, "op", first), "name", "empty")
    return f"module_{next(_module_counter):04d}_" + "".join(
        c if c.isalnum() else "_" for c in label)


class _Lowering:
    def __init__(self, feeds, fetches, targets, feed_shapes, name, feed_values=None,
                 variable_shapes=None, exclude=frozenset(), ops=None, enclosing=None,
                 known_values=None):
        """enclosing: the _Lowering of the module whose While or If this one is a body
        of; feed_shapes are then the dims (of its symbols) of the body's inputs.
        known_values: {tensor: its value (dims, an object array)} of the tensors whose
        values shape inference reads as constants although they are computed (a backward
        body's shapes of forward values: _BackwardOfRaggedLoop)."""
        self.module = m = Module(name or _module_name(fetches, targets))
        self.enclosing = enclosing
        self.region_guards = []  # the guards of this module's bodies (on its symbols)
        self.region_attrs = {}  # op -> attrs its lowering gives its node (_lower_while)
        # a body's captured input -> the enclosing graph's tensor it stands for (its value
        # is the same every iteration: shape inference reads through it, a known one is a
        # constant of the body)
        self.captured = {}
        if enclosing is not None:
            m.symbols = dict(enclosing.module.symbols)
            m.run_dims = enclosing.module.run_dims  # one list: a body reads them too
            graph = feeds[0].graph if feeds else None
            self.captured = {inner: outer for outer, inner in getattr(graph, "captures", ())}
        self.values = {}      # graphc Tensor -> ir Value
        self.nodes = {}       # graphc Operation -> ir Node
        self._stand_ins = {}  # hints? -> {graphc Tensor: its stand-in}
        self.fed = set(feeds)
        self.known_values = known_values or {}
        self.feed_index = {t: i for i, t in enumerate(feeds)}
        self.value_candidates = {
            t: np.array(a, dtype=t.dtype.np) for t, a in zip(feeds, feed_values or ())
            if specializable(t.dtype, a)}
        self.specialized = {}  # fed Tensor -> the value the module is specialized on
        if ops is None:
            ops = ops_to_lower(fetches, targets, feeds, exclude)
        unfed_error = unfed_placeholder_error(ops)
        if unfed_error is not None:
            raise unfed_error
        self.variable_shapes = variable_shapes or {}
        self.read_variables = _variables_read(ops, fetches)
        self.var_dims = {}  # variable name -> its dims in this module (decided once)
        with GuardSet() as guards:
            for i, (t, shape) in enumerate(zip(feeds, feed_shapes)):
                self._lower_feed(i, t, shape, guards)
            for op in ops:
                if op.type != "VariableV2":  # read where used, below
                    self._lower_op(op)
            end_reads = {}
            m.outputs = [self.values[t] if t in self.values else
                         end_reads.setdefault(t, self._read_variable(t)) for t in fetches]
        m.guards = list(guards.guards)
        m.guards += [g for g in self.region_guards if g not in m.guards]
        self._keep_growth_inside()
        if enclosing is not None:
            self._use_values_captured_since()
        self._use_specialized_values()
        roots = [self.nodes[op] for op in targets if op in self.nodes]
        roots += [n for n in m.nodes if n.has_side_effect]
        m.roots = list(dict.fromkeys(roots))

    def _keep_growth_inside(self):
        """RegionOnHost naming the While whose trip count (the rows of its growable
        stacks, regions.py) the runtime would need before the run: a fetched stack (the
        runtime sizes fetches before the run) or a guard on it (checked before the run)."""
        for v in self.module.outputs:
            if growable(v):  # a stack, an appended array, a loop variable whose dims
                # changed, or a value computed of them
                loop = next(run_dim_loop(d.to_json()) for d in v.dims if set_during_run(d))
                raise RegionOnHost(f"'{loop}' keeps values for its gradient, appends to "
                                   f"arrays or changes the dims of loop variables whose "
                                   f"sizes leave the native stage (in {v.node.describe()}; "
                                   "the runtime sizes what it returns before the run): it "
                                   "runs on the host", loop)
        for lhs, _, rhs, _ in self.module.guards:
            loop = run_dim_loop(lhs) or run_dim_loop(rhs)
            if loop is not None:
                raise RegionOnHost(f"the sizes of this run are decided by a dim that "
                                   f"'{loop}' sets during the run (its trip count or a loop "
                                   "variable's): it runs on the host", loop)

    def _lower_random_state(self, op, node):
        """A random op's key and run count live in the Session state next to the variables
        (graphc/framework/random_state.py): the module declares that [k0, k1, runs] array
        as a variable, and the node names it as the state it reads and advances."""
        ref = self.module.add_variable(random_state_name(op.name), dtypes.int64, (3,),
                                       op.location)
        node.attrs[STATE_VARIABLE] = ref.name

    def _lower_feed(self, index, t, shape, guards):
        if self.enclosing is not None:  # a body's input: dims of the enclosing module
            node = self.module.add_node(PARAMETER, [], {"index": index}, [(t.dtype, shape)],
                                        t.name, t.op.location)
            self.values[t] = node.outputs[0]
            self._use_captured_value(t)
            return
        label = t.op.name if t.value_index == 0 else t.name
        static = t.shape.as_tuple_or_none()
        if static is None:
            static = (None,) * len(shape)
        if len(static) != len(shape) or any(s is not None and s != n
                                            for s, n in zip(static, shape)):
            raise ValueError(f"Cannot feed value of shape {shape} for Tensor '{t.name}', "
                             f"which has shape '{t.shape}'")
        dims = []
        for axis, (s, n) in enumerate(zip(static, shape)):
            if s is not None:
                dims.append(s)
                continue
            sym = SymDim.symbol(f"{label}.{axis}", n)
            self.module.symbols[f"{label}.{axis}"] = (index, axis)
            if n in (0, 1):  # specialized: size-1 dims broadcast, empty ones skip work
                guards.record(sym, "==", n, True)
                dims.append(n)
            else:
                dims.append(sym)
        node = self.module.add_node(PARAMETER, [], {"index": index}, [(t.dtype, dims)], t.name,
                                    t.op.location)
        self.values[t] = node.outputs[0]

    def _use_captured_value(self, t):
        """A body's captured input whose value the enclosing module knows becomes a Const
        of the body (an axis, a shape: codegen needs it as a constant)."""
        known = self._captured_constant(t)
        if known is not None:
            first = next((n for n in self.module.nodes if n.type != PARAMETER), None)
            const = self.module.add_constant(known, before=first, name=t.op.name,
                                             location=t.op.location)
            if t in self.values:
                self.module.replace_all_uses(self.values[t], const)
            self.values[t] = const

    def _use_values_captured_since(self):
        """Captured inputs whose values became known while the body was lowered: its shape
        inference read a fed integer through them (an axis, a reshape's shape), which
        specialized the enclosing module on that feed."""
        for t in self.captured:
            value = self.values.get(t)
            if value is not None and value.node.type == PARAMETER:
                self._use_captured_value(t)

    def _captured_constant(self, t):
        """The value of a body's captured input when the enclosing graph knows it (ints
        only: a symbolic dim is no constant), else None. Only a read of the body's shape
        inference specializes the enclosing module on a fed value, never this one: a body
        reading a fed integer as data (dynamic_rnn's sequence_length) would compile again
        for every batch's values."""
        outer = self.captured.get(t)
        if outer is None:
            return None
        try:
            with GuardSet(), _peeking():  # a value read here decides nothing
                value = constant_value(self.enclosing.stand_in(outer))
        except _WouldSpecialize:
            return None
        if value is None or np.asarray(value).dtype == object or \
                np.size(value) > MAX_SPECIALIZED_ELEMENTS:  # data, not a shape or axis
            return None
        return np.asarray(value, dtype=t.dtype.np)

    def specialize(self, t):
        """The value of fed tensor t, which shape inference needs: the module becomes
        specialized on it (its uses read a Const; the runtime checks the feed)."""
        value = self.value_candidates[t]
        if t not in self.specialized:
            if _PEEKING[0]:
                raise _WouldSpecialize(t.name)
            for d in self.values[t].dims:  # the value fixes the feed's dims
                int(d)
            self.specialized[t] = value
        return value

    def _use_specialized_values(self):
        m = self.module
        m.value_guards = []
        first = next((n for n in m.nodes if n.type != PARAMETER), None)
        for t, value in self.specialized.items():
            const = m.add_constant(value, before=first, name=t.op.name, location=t.op.location)
            m.replace_all_uses(self.values[t], const)
            m.value_guards.append({"feed": self.feed_index[t], "name": t.name,
                                   "dtype": value.dtype.name, "shape": list(value.shape),
                                   "values": [int(x) for x in value.reshape(-1)]})

    def _lower_op(self, op):
        m = self.module
        refs = ref_input_indices(op)
        inputs = []
        reads = {}
        for j, t in enumerate(op.inputs):
            if j in refs:
                v = t.op
                inputs.append(m.add_variable(v.name, t.dtype, self._variable_dims(t),
                                             v.location))
            elif t in self.values:
                inputs.append(self.values[t])
            else:
                inputs.append(reads.setdefault(t, self._read_variable(t)))
        if op.type in REGION_BODIES:
            regions, out_dims = self._lower_regions(op, inputs)
        else:
            regions, out_dims = {}, self._output_dims(op)
        out_types = [(t.dtype, d) for t, d in zip(op.outputs, out_dims)]
        appended = appended_arrays(op) if regions else {}
        out_types += [(op.outputs[jv].dtype, d)
                      for jv, d in zip(appended, out_dims[len(op.outputs):])]
        fwd = op.forward_op
        node = m.add_node(op.type, inputs, op.attrs, out_types, op.name, op.location,
                          None if fwd is None else (fwd.name, fwd.type, fwd.location),
                          [self.nodes[c] for c in op.control_inputs if c in self.nodes])
        node.regions = regions
        node.attrs.update(self.region_attrs.pop(op, {}))
        self.nodes[op] = node
        for t, v in zip(op.outputs, node.outputs):
            self.values.setdefault(t, v)   # a fed output keeps its Parameter
        for k, (jv, (jw, _)) in enumerate(appended.items()):
            self._arrays_after_loop(op, node, jv, jw, node.outputs[len(op.outputs) + k])
        if op.type in RANDOM_OP_TYPES:
            self._lower_random_state(op, node)
        if op.type == "Assign" and self.var_dims.get(op.inputs[0].op.name) is None:
            self._assigned_dims(op, node)

    # ------------------------------------------------------------ regions
    def _lower_regions(self, op, inputs):
        """({key: body module}, output dims) of a While or If (graphc/compiler/regions.py):
        each body lowered on the dims of the values it reads here. RegionOnHost, naming
        op, when its bodies cannot be native code for these sizes."""
        try:
            return self._lower_region_bodies(op, inputs)
        except LoweringError as e:  # a nested loop's too: this op then runs on the host
            raise RegionOnHost(str(e), op.name) from None

    def _lower_region_bodies(self, op, inputs):
        bodies = bodies_of(op)
        if op.type == "While":
            return self._lower_while(op, inputs, bodies)
        return self._lower_if(op, inputs, bodies)

    def _lower_while(self, op, inputs, bodies, unannounced=None):
        """unannounced: {loop variable: axes} the body changes although the shape
        invariant is the shape the variable enters with (TF1 allows it along an unknown
        dim): carried too, found by a first lowering that did not carry them."""
        n = op.attrs["num_loop_vars"]
        n_cond = len(bodies["cond"].inputs) - n
        loop_vars = inputs[:n]
        backward = _BackwardOfRaggedLoop.of(self, op, bodies, inputs)
        for i, v in enumerate(loop_vars):
            late = [d for d in v.dims if set_during_run(d)]
            # e.g. the gradient of an array an earlier loop appended to (a backward
            # loop's gradients of loop variables that change shape are on its heap)
            if late and not (backward and i in backward.on_heap):
                raise LoweringError(f"loop variable {i} of {op.describe()} has dims "
                                    f"{v.dims}, known only once "
                                    f"'{run_dim_loop(late[0].to_json())}' has run: a loop's "
                                    "buffers are sized before the run")
        n_body = len(bodies["body"].inputs) - n
        guards_before = len(self.region_guards)
        if backward:
            var_dims = backward.var_dims
        else:
            var_dims = self._carried_dims(op, bodies["body"],
                                          loop_vars + inputs[n + n_cond:n + n_cond + n_body],
                                          unannounced or {})
        try:
            cond_lowering = self._body_lowering(op, bodies["cond"],
                                                loop_vars + inputs[n:n + n_cond], dims=var_dims)
            cond = self._lower_body(op, bodies["cond"], lowering=cond_lowering)
            rows = self._stack_rows(op, cond_lowering)
            saved = [bodies["body"].get_tensor_by_name(name) for name in op.attrs["saved"]]
            appended = appended_arrays(op)
            outputs = list(bodies["body"].outputs)
            for jv, (jw, _) in appended.items():  # no loop variables: stacks (regions.py)
                outputs[jv], outputs[jw] = bodies["body"].inputs[jv], bodies["body"].inputs[jw]
            elements = [scatter.inputs[3] for _, scatter in appended.values()]
            body = self._lower_body(op, bodies["body"],
                                    loop_vars + inputs[n + n_cond:n + n_cond + n_body],
                                    saved + elements, outputs=outputs, dims=var_dims,
                                    known_values=backward and backward.known_values)
        except (errors.OpError, ValueError) as e:
            if var_dims == [v.dims for v in loop_vars]:
                raise
            # inference decided on a carried dim's hint (a reshape to a fixed size): the
            # error is the hint's, not the graph's; the host runs the loop on its values
            raise LoweringError(f"the bodies of {op.describe()} cannot be compiled with its "
                                f"loop variables' dims carried ({e})") from None
        pred = cond.outputs[0]
        if pred.dtype != dtypes.bool or pred.dims != ():
            raise LoweringError(f"the cond of {op.describe()} gives {pred} for its predicate")
        changing = _unannounced_changes(op, var_dims, body.outputs)
        if changing and unannounced is None:
            del self.region_guards[guards_before:]  # those of the lowering thrown away
            return self._lower_while(op, inputs, bodies, changing)
        for i, (dims, out) in enumerate(zip(var_dims, body.outputs)):
            if not _same_dims(_uncarried(dims), _uncarried(out.dims)):
                raise LoweringError(
                    f"loop variable {i} of {op.describe()} enters with dims {dims} and "
                    f"leaves the body with dims {out.dims}: a loop variable whose shape "
                    "changes without a shape invariant allowing it runs on the host")
        ragged = set(op.attrs.get(RAGGED_SAVED, ()))
        stacks = [(self._ragged_elements(op, k),) if k in ragged else (rows,) + tuple(v.dims)
                  for k, v in enumerate(body.outputs[n:n + len(saved)])]
        if appended:
            trips = self._growable_rows(op)
            stacks += [(trips,) + tuple(v.dims[1:]) for v in body.outputs[n + len(saved):]]
        if any(reads_carried_dims(d) for dims in stacks for d in dims):
            raise LoweringError(f"{op.describe()} keeps values whose dims change between "
                                "iterations for its gradient: it runs on the host")
        if backward:
            self.region_attrs[op] = {FORWARD_DIM_SLOTS: backward.dims_slots()}
            leaving = backward.leaving_dims()
        else:
            leaving = [_leaving_dims(op.name, i, dims) for i, dims in enumerate(var_dims)]
        return {"cond": cond, "body": body}, leaving + [()] + stacks

    def _ragged_elements(self, op, k):
        """The elements of ragged stack k of While `op` (ops/while_v2.py RAGGED_SAVED):
        their number, a dim its kernel sets when the loop leaves (regions.ragged_symbol),
        the stack on the heap as a growable one is. In a body the heap value would
        outlive the body's entry that frees it: LoweringError (the loop runs on the
        host)."""
        if self.enclosing is not None:
            raise LoweringError(f"{op.describe()} keeps values whose dims change between "
                                "iterations for its gradient, in a loop or branch: it runs "
                                "on the host")
        name = ragged_symbol(op.name, k)
        if name not in self.module.run_dims:
            self.module.run_dims.append(name)
        return SymDim.symbol(name, GROWABLE_FIRST_ROWS)

    def _carried_dims(self, op, body_graph, body_inputs, unannounced):
        """The dims of each loop variable in the While's bodies: those that change in
        its first iteration among those its shape invariant leaves unknown
        (regions.loose_axes) a carried_symbol each, which the loop's kernel sets before
        each call (the body lowered on them must give the others unchanged). The values
        after such a loop live on the heap, which the entry of the module holding the
        loop owns (a body's own entry where it is in a body: _lower_body keeps them in
        it)."""
        n = op.attrs["num_loop_vars"]
        loop_vars = body_inputs[:n]
        loose = loose_axes(op)
        changed = dict(unannounced)
        if loose:
            first = self._body_lowering(op, body_graph, body_inputs).module.outputs[:n]
            for i, axes in loose.items():
                changed[i] = sorted(set(changed.get(i, ())) | {
                    axis for axis in axes
                    if not _identical(loop_vars[i].dims[axis], first[i].dims[axis])})
        if not any(changed.values()):
            return [v.dims for v in loop_vars]
        out = []
        for i, v in enumerate(loop_vars):
            dims = list(v.dims)
            for axis in changed.get(i, ()):
                name = carried_symbol(op.name, i, axis)
                for symbol in (name, leaving_symbol(op.name, i, axis)):
                    if symbol not in self.module.run_dims:
                        self.module.run_dims.append(symbol)
                # a hint past 0 and 1: no decision of inference specializes on it
                dims[axis] = SymDim.symbol(name, GROWABLE_FIRST_ROWS)
            out.append(tuple(dims))
        return out

    def _arrays_after_loop(self, op, node, jv, jw, stack):
        """The flows of an array the While appended to (regions.appended_arrays) after
        the loop: its values the stack of the elements written, every row written."""
        self.values[op.outputs[jv]] = stack
        written = self.module.add_node("OnesLike", [stack], {}, [(dtypes.bool, stack.dims[:1])],
                                       f"{op.name}/written_{jw}", op.location)
        self.values[op.outputs[jw]] = written.outputs[0]

    def _stack_rows(self, op, cond_lowering):
        """The rows of the stacks a While keeps for its gradient (attr `saved`): the bound
        on its trip count that its cond gives (regions.trip_bound: a counter that
        steps by 1 tested against a limit, maximum_iterations' included), the limit and
        the counter's first value known here (cond_lowering: the cond's) as numbers or
        feeds' dims. Without them the stacks' size is known only after the loop:
        LoweringError (the loop runs on the host)."""
        if not op.attrs.get("saved"):
            return None
        bound = trip_bound(op)
        limit = start = None
        if bound is not None:
            counter, limit_tensor, inclusive = bound
            limit = _scalar_value(cond_lowering.stand_in(limit_tensor))
            start = _scalar_value(self.stand_in(op.inputs[counter]))
        if limit is None or start is None:
            return self._growable_rows(op)
        rows = limit - start + (1 if inclusive else 0)
        # a limit the counter starts past runs no iteration (and sizes nothing)
        return rows.maximum(0) if isinstance(rows, SymDim) else max(int(rows), 0)

    def _growable_rows(self, op):
        """The rows of stacks that grow during the run (regions.py): the trip count, a
        dim the loop's kernel sets. In a body the loop's stacks would outlive the body's
        entry that frees them: LoweringError (the loop runs on the host)."""
        if self.enclosing is not None:
            raise LoweringError(f"{op.describe()} keeps values for its gradient and has no "
                                "bound on its trip count known before it runs, in a loop "
                                "or branch: it runs on the host")
        name = trips_symbol(op.name)
        if name not in self.module.run_dims:  # its stacks' and its arrays' rows
            self.module.run_dims.append(name)
        return SymDim.symbol(name, GROWABLE_FIRST_ROWS)

    def _lower_if(self, op, inputs, bodies):
        """Each branch module outputs the If's outputs, then the intermediates the If
        saves for its gradient from that branch (attr `saved`; the other branch's are
        zeros, which the kernel writes)."""
        n_then = op.attrs["num_then_inputs"]
        n_else = len(bodies["else"].inputs)
        saved = [tuple(pair) for pair in op.attrs["saved"]]
        n_out = len(bodies["then"].outputs)
        branches = {}
        for key, values in (("then", inputs[1:1 + n_then]),
                            ("else", inputs[1 + n_then:1 + n_then + n_else])):
            body = bodies[key]
            mine = [body.get_tensor_by_name(name) for b, name in saved if b == key]
            branches[key] = self._lower_body(op, body, values, mine)
        then, other = branches["then"], branches["else"]
        for i, (a, b) in enumerate(zip(then.outputs[:n_out], other.outputs[:n_out])):
            if not _same_dims(a.dims, b.dims):
                raise LoweringError(f"output {i} of {op.describe()} has dims {a.dims} in one "
                                    f"branch and {b.dims} in the other")
        own = {key: iter(m.outputs[n_out:]) for key, m in branches.items()}
        dims = [v.dims for v in then.outputs[:n_out]] + [next(own[b]).dims for b, _ in saved]
        return branches, dims

    def _lower_body(self, op, fgraph, values=None, extra_fetches=(), lowering=None,
                    outputs=None, dims=None, known_values=None):
        """The module of body `fgraph` reading `values` (this module's) and giving its
        outputs (or `outputs`, its tensors in their place) then `extra_fetches` (its
        tensors), its variables declared here too; lowering: the body's _body_lowering
        when made already."""
        if lowering is None:
            lowering = self._body_lowering(op, fgraph, values, extra_fetches, outputs, dims,
                                           known_values)
        body = lowering.module
        _keep_heap_values_inside(op, fgraph, body)
        dynamic = body.dynamic_values()
        if dynamic:
            raise LoweringError(f"the body '{fgraph.name}' of {op.describe()} has values "
                                "whose dims depend on run-time data: " + ", ".join(
                                    v.node.describe().splitlines()[0] for v in dynamic[:3]))
        for name, ref in body.variables.items():
            self.module.add_variable(name, ref.dtype, ref.dims, ref.location)
        self.region_guards.extend(body.guards)
        return body

    def _body_lowering(self, op, fgraph, values, extra_fetches=(), outputs=None, dims=None,
                       known_values=None):
        """The _Lowering of body `fgraph` (see _lower_body); dims: those of its first
        inputs where they are not their values' (a While's carried dims); known_values:
        _Lowering's."""
        if len(values) != len(fgraph.inputs) or any(not isinstance(v, Value) for v in values):
            raise LoweringError(f"the inputs of {op.describe()} do not match its body "
                                f"'{fgraph.name}'")
        name = f"{self.module.name}_{fgraph.name}"
        outputs = list(fgraph.outputs if outputs is None else outputs)
        shapes = [v.dims for v in values]
        shapes[:len(dims or ())] = dims or ()
        return _Lowering(list(fgraph.inputs), outputs + list(extra_fetches), [],
                         shapes, "".join(c if c.isalnum() else "_"
                                                           for c in name),
                         variable_shapes=self.variable_shapes, enclosing=self,
                         known_values=known_values)

    def _variable_dims(self, t):
        """The dims of t's variable in this module: its graph shape when fully known,
        else the shape it holds (guarded by the runtime), else (only assigned in this
        run) None until its Assign is lowered."""
        name = t.op.name
        if name in self.var_dims:
            return self.var_dims[name]
        dims = _graph_dims(t)
        if dims is None or None in dims:
            held = self.variable_shapes.get(name)
            if name in self.read_variables and held is not None and \
                    (dims is None or len(dims) == len(held)):
                dims = tuple(int(d) for d in held)
                self.module.shape_guarded_variables = \
                    getattr(self.module, "shape_guarded_variables", set()) | {name}
            elif name not in self.read_variables:
                dims = None  # set by the Assign
            elif held is None:  # what the reference executor says when it reads it
                raise errors.FailedPreconditionError(
                    None, t.op, f"Attempting to use uninitialized value {name}\n\t [[node "
                                f"{t.op.describe()}]]")
        self.var_dims[name] = dims
        return dims

    def _assigned_dims(self, op, node):
        """A variable of unknown shape that this run only assigns has the value's dims."""
        name = op.inputs[0].op.name
        ref = self.module.variables[name]
        dims = node.outputs[0].dims
        if ref.dims is not None and not dims_equal(ref.dims, dims):
            raise LoweringError(f"variable {name} is assigned values of dims {ref.dims} and "
                                f"{dims} in one run")
        ref.dims = normalize_dims(dims)
        self.var_dims[name] = ref.dims

    def _read_variable(self, t):
        """A VariableV2 node reading t's variable now (appended to the module)."""
        var = t.op
        dims = self._variable_dims(t)
        self.module.add_variable(var.name, t.dtype, dims, var.location)
        node = self.module.add_node("VariableV2", [], var.attrs, [(t.dtype, dims)], var.name,
                                    var.location)
        return node.outputs[0]

    def _output_dims(self, op):
        """Each output's dims from op's shape inference on symbolic stand-in inputs."""
        if op.type == "PlaceholderWithDefault" and op.inputs[0] in self.values:
            # not fed (a fed one is a Parameter): its value is its input, whose dims are
            # known here; its own inference gives the declared, looser shape
            return [self.values[op.inputs[0]].dims]
        try:
            specs = op.op_def.infer([self.stand_in(t) for t in op.inputs], dict(op.attrs))
        except ValueError as e:  # impossible for this run's feeds, e.g. a reshape's size
            loop = self._loop_setting_dims_of(op)
            if loop is not None:  # or possible, for the dims the loop will set
                raise RegionOnHost(f"shape inference of {op.describe()} cannot decide on "
                                   f"dims that '{loop}' sets during the run ({e}): it runs "
                                   "on the host", loop) from None
            raise errors.op_error(op, self._failure_message(op, e)) from None
        except (TypeError, ArithmeticError, IndexError, KeyError) as e:
            # inference that cannot take symbolic dims: the reference executor runs it
            raise LoweringError(f"shape inference of {op.describe()} failed on symbolic "
                                f"dims ({type(e).__name__}: {e})") from None
        if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], dtypes.DType):
            specs = [specs]
        return [_merge_dims(spec[0], t.shape) for spec, t in zip(specs, op.outputs)]

    def _loop_setting_dims_of(self, op):
        """The While (of this module) whose trip count or loop variable's dims an input
        of op has, known only during the run (no guard can decide on them), or None."""
        for t in op.inputs:
            v = self.values.get(t)
            for d in (v.dims or ()) if v is not None else ():
                if set_during_run(d):
                    return run_dim_loop(d.to_json())
        return None

    def _failure_message(self, op, error):
        """The reference kernel's error for these sizes (what TF says at run time), with
        shape inference's own message after it when that says something else."""
        static = self._concrete_message(op, error)
        reference_message = self._run_time_message(op)
        if reference_message is None or reference_message == static:
            return static
        return f"{reference_message} ({static})"

    def _run_time_message(self, op):
        """What the op's reference kernel says when it runs on inputs of this run's sizes
        (zeros, or the values known at compile time), or None if it does not fail: the
        error the reference executor gives for these feeds."""
        d = op.op_def
        if d.uses_context or d.stateful or d.ref_inputs:
            return None
        args = []
        with GuardSet():
            for t in op.inputs:
                s = self.stand_in(t, True)
                v = constant_value(s)
                if v is None or np.asarray(v).dtype == object:
                    shape = s.shape.as_tuple_or_none()
                    if shape is None or None in shape:
                        return None
                    if int(np.prod(shape)) > _MAX_STAND_IN_ELEMENTS:
                        return None  # not worth allocating for a message
                    v = np.zeros(shape, t.dtype.np)
                args.append(np.asarray(v, t.dtype.np))
        try:
            d.kernel(*args, **op.attrs)
        except errors.KernelError as e:
            return str(e)
        except Exception:  # noqa: BLE001 - any other failure: inference's message is better
            return None
        return None

    def _concrete_message(self, op, error):
        """The error inference gives with this run's sizes in place of the symbols (the
        numbers the user fed), or the symbolic one if that does not fail the same way."""
        with GuardSet():  # decisions taken here guard nothing
            try:
                op.op_def.infer([self.stand_in(t, True) for t in op.inputs], dict(op.attrs))
            except ValueError as e:
                return str(e)
        return str(error)

    def stand_in(self, t, hints=False):
        """A Tensor like t whose shape holds its IR dims (SymDims, or with `hints` their
        sizes in this run), made by a stand-in op."""
        if t in self.captured:  # the same every iteration: what it captures
            return self.enclosing.stand_in(self.captured[t], hints)
        cache = self._stand_ins.setdefault(hints, {})
        s = cache.get(t)
        if s is None:
            v = self.values.get(t)
            if v is None and t.op.type == "VariableV2" and \
                    self.var_dims.get(t.op.name) is not None:
                v = self.module.variables[t.op.name]  # its dims as decided here
            shape = t.shape if v is None else TensorShape(
                v.dims if v.dims is None or not hints else
                [d.hint if isinstance(d, SymDim) else d for d in v.dims])
            s = cache[t] = Tensor(_StandInOp(t, self, t in self.fed, hints),
                                  t.value_index, shape, t.dtype)
        return s


class _BackwardOfRaggedLoop:
    """How a backward While of a forward While whose loop variables change shape (ops/
    while_v2.py: its gradients of those variables, and the forward values it reads, of
    iteration k's shapes) compiles: each iteration its kernel sets the forward body's
    carried dims (regions.carried_symbol) to those of forward iteration k, read from the
    stacks of the loop variables' shapes (attr forward_dims); then its gradients of the
    loop variables have the dims of the forward body's outputs, what it reads of a
    ragged stack (RaggedBlock) and of a stack of shapes the forward body's dims of those
    values, all of one set of symbols (no guard could equate the dims of two). Its
    gradients of the loop variables live on the kernel's heap (control_flow._LoopHeap)
    and leave with the dims the forward loop variables entered with."""

    def __init__(self, lowering, op, fwd, fwd_node, inputs):
        self.op, self.fwd, self.fwd_node = op, fwd, fwd_node
        n = op.attrs["num_loop_vars"]
        self.var_ids = list(op.attrs[FORWARD_LOOP_VARS])
        fwd_body = fwd_node.regions["body"]
        self.fwd_dims = {}  # forward body tensor name -> its dims in the forward body
        for node in fwd_body.nodes:
            if node.type == PARAMETER:
                self.fwd_dims[node.name] = node.outputs[0].dims
            else:
                self.fwd_dims.update((f"{node.name}:{v.index}", v.dims) for v in node.outputs)
        self.var_dims = [v.dims for v in inputs[:n]]
        self.on_heap = set()
        for j, i in enumerate(self.var_ids, 1):
            self.var_dims[j] = fwd_body.outputs[i].dims
            self.on_heap.add(j)
        self.entered = [lowering.values[fwd.inputs[i]].dims for i in self.var_ids]
        self.known_values = self._shapes_read(bodies_of(op)["body"])

    @classmethod
    def of(cls, lowering, op, bodies, inputs):
        """The backward While `op`'s, or None where it is no such loop; LoweringError
        where its forward loop is not native code of this module (its dims would not
        be set)."""
        if op.type != "While" or not op.attrs.get(FORWARD_DIMS):
            return None
        # the forward loop: the one whose stack of shapes the first pair reads (a graph
        # file's bodies do not know which loop they differentiate)
        n = op.attrs["num_loop_vars"]
        n_cond = len(bodies["cond"].inputs) - n
        fwd = op.inputs[n_cond + op.attrs[FORWARD_DIMS][1]].op
        fwd_node = lowering.nodes.get(fwd) if fwd.type == "While" else None
        if fwd_node is None or not fwd_node.regions:
            raise LoweringError(f"{op.describe()} differentiates a loop whose loop variables "
                                "change shape that is not native code of its stage")
        return cls(lowering, op, fwd, fwd_node, inputs)

    def _shapes_read(self, back_body):
        """{backward body tensor: the forward body's dims} of the reads of row k of a
        stack of shapes of forward body values (ops/while_v2.py _forward_value)."""
        n_fwd = self.fwd.attrs["num_loop_vars"]
        saved = self.fwd.attrs["saved"]
        fwd_body = function_of(self.fwd, "body")
        outer_of = {inner: outer for outer, inner in back_body.captures}
        out = {}
        for o in back_body.get_operations():
            if o.type != "GatherV2" or not _is_iteration(o.inputs[1], back_body):
                continue
            stack = outer_of.get(o.inputs[0])
            if stack is None or stack.op is not self.fwd or stack.value_index <= n_fwd:
                continue
            t = fwd_body.get_tensor_by_name(saved[stack.value_index - n_fwd - 1])
            if t.op.type != "Shape":
                continue
            dims = self.fwd_dims.get(t.op.inputs[0].name)
            if dims is None:
                raise LoweringError(f"{self.op.describe()} reads the shape of "
                                    f"{t.op.inputs[0].name}, which its forward loop's native "
                                    "body does not compute")
            out[o.outputs[0]] = np.array(list(dims), dtype=object)
        return out

    def dims_slots(self):
        """[(While input, rank, axis, carried symbol)] of the forward dims the kernel sets
        each iteration: column `axis` of row k of the stack of loop variable shapes that
        the While's input is, counted from its first input past the loop variables (a
        pass may drop a loop variable: passes/sink_loop_gemms.py)."""
        n = self.op.attrs["num_loop_vars"]
        n_cond = len(function_of(self.op, "cond").inputs) - n
        out = []
        pairs = self.op.attrs[FORWARD_DIMS]
        for i, body_input in zip(pairs[::2], pairs[1::2]):
            for var, axis in carried_axes(self.fwd_node):
                if var == i:
                    out.append((n_cond + body_input - n, len(self.fwd.inputs[i].shape),
                                axis, carried_symbol(self.fwd.name, i, axis)))
        return out

    def leaving_dims(self):
        """The dims of the loop variables after the loop: a gradient of a forward loop
        variable those it entered the forward loop with."""
        out = list(self.var_dims)
        for j, dims in enumerate(self.entered, 1):
            out[j] = dims
        return out


def _is_iteration(t, back_body):
    """Whether t is a backward body's k: its counter less 1 (ops/while_v2.py)."""
    if t.op.type != "Sub" or t.op.inputs[0] is not back_body.inputs[0]:
        return False
    one = constant_value(t.op.inputs[1])
    return one is not None and np.ndim(one) == 0 and int(one) == 1


class _StandInOp:
    """A graph op as shape inference sees it while lowering: its inputs are stand-ins. The
    producer of a fed tensor looks like a Placeholder: its value is the feed, not its own;
    a small integer feed looks like a Const whose value, once read, specializes the module
    on it."""

    def __init__(self, t, lowering, fed, hints):
        self._op = t.op
        self._tensor = t
        self._lowering = lowering
        self._fed = fed
        self._value_fed = fed and t in lowering.value_candidates
        self._known = lowering.known_values.get(t)
        self._hints = hints

    def __getattr__(self, name):
        return getattr(self._op, name)

    @property
    def type(self):
        if self._value_fed or self._known is not None:
            return "Const"
        return "Placeholder" if self._fed else self._op.type

    @property
    def attrs(self):
        if self._value_fed:
            return _FedValueAttrs(self._lowering, self._tensor)
        if self._known is not None:
            value = self._known if not self._hints else np.array(
                [d.hint if isinstance(d, SymDim) else d for d in self._known], dtype=object)
            return {"value": value, "dtype": self._tensor.dtype}
        return self._op.attrs

    @property
    def inputs(self):
        if self._fed or self._known is not None:
            return []
        return [self._lowering.stand_in(t, self._hints) for t in self._op.inputs]


class _FedValueAttrs(Mapping):
    """The attrs of a small integer feed seen as a Const: reading "value" specializes."""

    def __init__(self, lowering, t):
        self._lowering = lowering
        self._t = t

    def __getitem__(self, key):
        if key == "value":
            return self._lowering.specialize(self._t)
        if key == "dtype":
            return self._t.dtype
        raise KeyError(key)

    def __iter__(self):
        return iter(("value", "dtype"))

    def __len__(self):
        return 2


def _keep_heap_values_inside(op, fgraph, body):
    """LoweringError (op runs on the host) where a body module's outputs or guards read
    dims that a loop in it sets during the run (regions.growable: the values after a
    loop whose loop variables change shape, on the heap of the body's entry, which frees
    them when it returns; guards are checked before the run)."""
    for v in body.outputs:
        if growable(v):
            raise LoweringError(f"the body '{fgraph.name}' of {op.describe()} gives a value "
                                f"of dims {v.dims}, set during its run by a loop in it")
    for lhs, _, rhs, _ in body.guards:
        loop = run_dim_loop(lhs) or run_dim_loop(rhs)
        if loop is not None:
            raise LoweringError(f"the body '{fgraph.name}' of {op.describe()} decides on a "
                                f"dim that '{loop}' sets during the run")


def _scalar_value(stand_in):
    """The value of a stand-in scalar known before running (a number, a feed's dim, a small
    integer feed's value the module specializes on), or None."""
    value = constant_value(stand_in)
    if value is None or np.ndim(value) != 0:
        return None
    return value.item() if isinstance(value, np.ndarray) else value


def _unannounced_changes(op, var_dims, outputs):
    """{loop variable: axes} whose dims the body changes (outputs: its module's) where
    the shape invariant leaves them unknown, not carried yet; {} where another dim
    changes too (no carrying makes that loop native)."""
    out = {}
    for i, (dims, invariant) in enumerate(zip(var_dims, op.attrs["output_shapes"])):
        if i >= len(outputs) or outputs[i].dims is None or len(outputs[i].dims) != len(dims):
            return {}
        # equal for the sizes compiled is the same (a guard then keeps it so), as for
        # _same_dims
        axes = [axis for axis, (d, o) in enumerate(zip(dims, outputs[i].dims))
                if not reads_carried_dims(d) and (o is None or not bool(d == o))]
        if not axes:
            continue
        unknown = invariant.as_list() if invariant.ndims is not None else None
        if unknown is None or any(unknown[axis] is not None for axis in axes) or \
                outputs[i].node.type.startswith("TensorArray"):
            return {}
        out[i] = axes
    return out


def _identical(a, b):
    """Whether two dims are the same int or expression (deciding nothing on hints); a
    dim that depends on data (None) is no other."""
    if a is None or b is None:
        return False
    if isinstance(a, SymDim) or isinstance(b, SymDim):
        return isinstance(a, SymDim) and isinstance(b, SymDim) and a.to_json() == b.to_json()
    return int(a) == int(b)


def _uncarried(dims):
    """dims with those a loop carries (regions.carried_symbol) left out of a comparison."""
    return tuple(None if reads_carried_dims(d) else d for d in dims)


def _leaving_dims(while_name, i, dims):
    """A loop variable's dims after the loop: its carried dims the leaving_symbols."""
    out = []
    for axis, d in enumerate(dims):
        if reads_carried_dims(d):
            d = SymDim.symbol(leaving_symbol(while_name, i, axis), GROWABLE_FIRST_ROWS)
        out.append(d)
    return tuple(out)


def _same_dims(a, b):
    """Whether two dims tuples are equal for the sizes being compiled: dims that are
    different expressions (a gradient loop's variable and the rows of a stack the loop
    before it filled) but equal sizes now are recorded as a guard, so the code is reused
    only while they stay equal."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(bool(x == y) for x, y in zip(a, b))


def _merge_dims(inferred, graph_shape):
    """The inferred dims, with the graph's static dims where inference knows less (a
    set_shape, an op whose inference cannot see through its shape tensor)."""
    dims = inferred.as_tuple_or_none()
    static = graph_shape.as_tuple_or_none()
    if dims is None:
        return static
    if static is None or len(static) != len(dims):
        return tuple(concrete(d) for d in dims)
    out = []
    for d, s in zip(dims, static):
        d = concrete(d)
        if d is None or (isinstance(d, SymDim) and s is not None and d == s):  # guarded
            d = s
        out.append(d)
    return tuple(out)


def _graph_dims(t):
    return t.shape.as_tuple_or_none()


def _variables_read(ops, fetches):
    """Names of the variables whose values the run reads (VariableV2 outputs used as
    values or fetched, and the variables updated by ops that read them too)."""
    read = {t.op.name for t in fetches if t.op.type == "VariableV2"}
    for op in ops:
        read |= {t.op.name for t in value_inputs(op) if t.op.type == "VariableV2"}
        if op.type in READING_UPDATE_OPS:
            read.add(op.inputs[0].op.name)
    return read
