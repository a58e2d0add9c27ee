"""The compiler's IR: a small mutable SSA module lowered from one run signature.

A `Module` holds an ordered list of `Node`s. Each node has an op type (a registered graphc
op type, or "Parameter" for a fed value), inputs that are `Value`s (outputs of earlier
nodes) or `VariableRef`s (the variable an Assign writes), plain-data attrs, and outputs,
each with a dtype and dims. A dim is an int or a SymDim (graphc/framework/symbolic.py): an
expression of the feed symbols (e.g. `x.0`, dim 0 of feed x) for a size known only at run
time. `module.symbols` says where each symbol is read from the feeds and `module.guards`
the conditions on them the module was compiled under. A dim that depends on data (Where's
row count) is None ("dynamic", printed `?`), unknown rank is `dims = None`; a module with
either is not static-shaped (`is_static_shaped()`), which codegen refuses.

Semantics (those of graphc/reference_executor.py):
- The node list is the execution order. Passes may drop pure nodes and insert new ones,
  but never reorder stateful nodes among themselves.
- A "VariableV2" node reads its variable when it runs: its value is a snapshot, later
  assigns do not change it. Lowering puts one read just before each consumer, which is
  when the reference executor reads a variable (TF1's ref semantics).
- `roots` are the nodes that must run for their effect: the run's targets and every node
  that changes state (assigns, random ops advancing their generator), so that a rewrite
  dropping the last use of such a node's value never drops its effect.
- `control_deps` of a node: nodes that must run before it (TF control dependencies).
- A node that keeps state of its own between runs (a random op's key and run count,
  graphc/framework/random_state.py) names the module variable holding it in
  `attrs[STATE_VARIABLE]`: it reads and writes that variable when it runs.
- A control-flow node (While, If) that compiles natively holds its bodies as modules of
  their own, `node.regions` {"cond", "body"} or {"then", "else"}: their Parameters are the
  body's inputs (attrs["index"]: position in the FuncGraph's inputs), their outputs the
  body's outputs, their dims expressions of the enclosing module's symbols, and their
  variables those of the enclosing module (graphc/compiler/regions.py).

Nodes and values mimic the attribute names of graphc's Operation and Tensor (name, type,
attrs, inputs, outputs, op, shape, dtype, describe) so that the reference kernels that
take the op itself (`uses_context`: variables, random ops) run unchanged on IR nodes.
"""
import base64
import json
import os

import numpy as np

from graphc import dtypes
from graphc.framework.graph import format_location
from graphc.framework.op_def import READ_ONLY_STATE_OPS, get_op_def
from graphc.framework.symbolic import SymDim, concrete
from graphc.framework.tensor_shape import TensorShape

PARAMETER = "Parameter"
STATE_VARIABLE = "state_variable"  # the attr naming a node's own state variable
# Stateful op types that only read state: they are not side-effect roots.

_SHORT_DTYPE = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "s8",
                "int16": "s16", "int32": "s32", "int64": "s64", "uint8": "u8", "bool": "pred",
                "string": "str"}


def shape_of_dims(dims):
    """The TensorShape of IR dims: symbolic dims become unknown dims."""
    if dims is None:
        return TensorShape(None)
    return TensorShape([d if isinstance(d, int) else None for d in dims])


def format_dim(d):
    """`784`, `x.0`, `784*x.0`, `x.0-1`; a dynamic (data-dependent) dim is `?`."""
    if d is None:
        return "?"
    return str(d).replace(" + -", "-").replace(" ", "")


def verify_every_stage():
    """Whether Module.verify runs after every pass and schedule step
    (GRAPHC_VERIFY_PASSES=1: a broken rewrite fails at the pass that made it), not once
    after the passes (pipeline.py)."""
    return os.environ.get("GRAPHC_VERIFY_PASSES", "") not in ("", "0")


def _verify_dims(dims, known, owner):
    """Module.verify's check of a value's (or variable's) dims; `known`: the module's
    symbols and run dims. The message names owner (made only when a check fails)."""
    if dims is None:
        return
    assert isinstance(dims, tuple), f"{_dims_owner(owner)}: dims {dims!r} are not a tuple"
    for d in dims:
        if isinstance(d, SymDim):
            assert d.constant() is None, \
                f"{_dims_owner(owner)}: constant SymDim {d} (should be an int)"
            unknown = d.symbols() - known
            assert not unknown, \
                f"{_dims_owner(owner)}: dim {d} uses symbols {unknown} not in the module"
        else:
            assert d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0), \
                f"{_dims_owner(owner)}: bad dim {d!r} in {dims}"


def _dims_owner(owner):
    return "&" + owner.name if isinstance(owner, VariableRef) else owner.ref


def format_type(dtype, dims):
    """`f32[x.0,784]`; unknown rank prints as `f32[*]`."""
    body = "*" if dims is None else ",".join(format_dim(d) for d in dims)
    return f"{_SHORT_DTYPE.get(dtype.name, dtype.name)}[{body}]"


def normalize_dims(dims):
    """A tuple of python ints, SymDims with symbols, and None (dynamic); None stays None."""
    if dims is None:
        return None
    return tuple(None if d is None else concrete(d) if isinstance(d, SymDim) else int(d)
                 for d in dims)


def dims_are_static(dims):
    """Known rank and every dim an int or a SymDim (no data-dependent dim)."""
    return dims is not None and all(isinstance(d, (int, SymDim)) for d in dims)


class Value:
    """One output of a node. `uses` lists the consuming nodes, once per input slot."""

    __slots__ = ("node", "index", "dtype", "dims", "uses")

    def __init__(self, node, index, dtype, dims):
        self.node = node
        self.index = index
        self.dtype = dtypes.as_dtype(dtype)
        self.dims = normalize_dims(dims)
        self.uses = []

    op = property(lambda self: self.node)
    shape = property(lambda self: shape_of_dims(self.dims))
    name = property(lambda self: f"{self.node.name}:{self.index}")

    @property
    def ref(self):
        """`%3`, or `%3.1` for output 1 of a multi-output node: its name in the text form."""
        n = self.node
        return f"%{n.id}" if len(n.outputs) == 1 else f"%{n.id}.{self.index}"

    def __repr__(self):
        return f"<Value {self.ref} {format_type(self.dtype, self.dims)}>"


class VariableRef:
    """A variable named as the target of an update (an input in op_def.ref_inputs).

    Acts as both the op and its only output, like the VariableV2 op the kernels expect."""

    def __init__(self, name, dtype, dims, location=None):
        self.name = name
        self.dtype = dtypes.as_dtype(dtype)
        self.dims = normalize_dims(dims)
        self.location = location

    op = property(lambda self: self)
    outputs = property(lambda self: [self])
    shape = property(lambda self: shape_of_dims(self.dims))
    type = "VariableV2"

    def describe(self):
        return f"'{self.name}' (op: 'VariableV2'), created at:\n  {format_location(self.location)}"

    def __repr__(self):
        return f"<VariableRef &{self.name} {format_type(self.dtype, self.dims)}>"


class Node:
    """One operation of the module. Create nodes with Module.add_node."""

    def __init__(self, id, type, name, attrs, location=None, gradient_of=None):
        self.id = id
        self.type = type
        self.name = name
        self.attrs = dict(attrs or {})
        self.inputs = []
        self.outputs = []
        self.control_deps = []
        self.control_users = []
        self.location = location          # (file, line, function) of the user's code
        self.gradient_of = gradient_of    # (name, type, location) of the forward op, or None
        self.regions = {}                 # body name -> Module (native control flow)

    @property
    def op_def(self):
        return get_op_def(self.type)

    @property
    def is_stateful(self):
        if self.type == PARAMETER:
            return False
        d = self.op_def
        return d.stateful or d.uses_context

    @property
    def has_side_effect(self):
        return self.is_stateful and self.type not in READ_ONLY_STATE_OPS

    @property
    def value_inputs(self):
        return [v for v in self.inputs if isinstance(v, Value)]

    def describe(self):
        """Name, type and creation site, as Operation.describe (for error messages)."""
        s = f"'{self.name}' (op: '{self.type}'), created at:\n  {format_location(self.location)}"
        if self.gradient_of is not None:
            name, type, loc = self.gradient_of
            s += (f"\n  This op is part of the gradient of '{name}' (op: '{type}'), created at:"
                  f"\n  {format_location(loc)}")
        return s

    def __repr__(self):
        return f"<Node %{self.id} {self.type} '{self.name}'>"


class Module:
    """An ordered SSA node list plus its interface: params, outputs, roots, variables."""

    def __init__(self, name="module"):
        self.name = name
        self._nodes = []
        # Insertions before a node are kept aside and merged in by the next read of
        # `nodes`: list.insert after a list.index scan made each one O(n), so a pass
        # inserting before many nodes (constant folding) was quadratic.
        self._inserted_before = {}   # anchor node (in _nodes) -> nodes to put before it
        self._anchor = {}            # each such node -> its anchor
        self._position = None        # node -> index in _nodes, built when asked
        self.params = []       # Parameter nodes; attrs["index"] is the feed position
        self.outputs = []      # Values fetched, in fetch order
        self.roots = []        # nodes run for their effect
        self.variables = {}    # name -> VariableRef
        self.symbols = {}      # symbol name -> (feed index, axis) it is read from
        self.guards = []       # (lhs json, op, rhs json, outcome) the symbols satisfy
        # symbols that native code sets during the run, not read from the feeds: the trip
        # count of a loop whose stacks grow (compiler/regions.py)
        self.run_dims = []
        self._next_id = 0

    # ------------------------------------------------------------------ building
    def add_node(self, type, inputs, attrs, out_types, name=None, location=None,
                 gradient_of=None, control_deps=(), before=None):
        """Appends a node (or inserts it just before node `before`); returns it.

        out_types: list of (dtype, dims), one per output."""
        node = Node(self._next_id, type, name or f"{type}_{self._next_id}", attrs, location,
                    gradient_of)
        self._next_id += 1
        node.outputs = [Value(node, i, d, dims) for i, (d, dims) in enumerate(out_types)]
        for v in inputs:
            node.inputs.append(v)
            if isinstance(v, Value):
                v.uses.append(node)
        # a new node has no deps yet: dedupe by hashing, not a scan of its list per dep
        # (a training step's NoOp waits for every update: quadratic in the variables)
        for dep in dict.fromkeys(control_deps):
            node.control_deps.append(dep)
            dep.control_users.append(node)
        if before is None:
            if self._position is not None:
                self._position[node] = len(self._nodes)
            self._nodes.append(node)
        else:
            self._insert_before(before, node)
        if type == PARAMETER:
            self.params.append(node)
        return node

    @property
    def nodes(self):
        """The nodes in execution order (each pending insertion merged in, once)."""
        if self._inserted_before:
            self._merge_insertions()
        return self._nodes

    @nodes.setter
    def nodes(self, nodes):
        if self._inserted_before:
            raise AssertionError("nodes replaced while insertions before nodes are pending")
        self._nodes = nodes
        self._position = None

    def _insert_before(self, before, node):
        anchor = self._anchor.get(before, before)
        waiting = self._inserted_before.setdefault(anchor, [])
        # Before a node that is itself waiting: just ahead of it in its anchor's queue.
        waiting.insert(waiting.index(before) if before is not anchor else len(waiting), node)
        self._anchor[node] = anchor

    def _merge_insertions(self):
        merged = []
        for n in self._nodes:
            waiting = self._inserted_before.pop(n, None)
            if waiting:
                merged.extend(waiting)
            merged.append(n)
        if self._inserted_before:
            missing = next(iter(self._inserted_before))
            raise ValueError(f"a node was inserted before {missing!r}, which is not in "
                             f"module '{self.name}'")
        self._anchor.clear()
        self._nodes[:] = merged  # in place, as list.insert was: holders of `nodes` see it
        self._position = None

    def precedes(self, a, b):
        """Whether node `a` runs before node `b`; pending insertions count without being
        merged, so a pass can insert and compare in turn in O(1) each."""
        return self._order_key(a) < self._order_key(b)

    def _order_key(self, node):
        anchor = self._anchor.get(node)
        if anchor is None:
            return (self._index_of(node), 1, 0)
        return (self._index_of(anchor), 0, self._inserted_before[anchor].index(node))

    def _index_of(self, node):
        position = self._position
        if position is None or position.get(node) is None or \
                self._nodes[position[node]] is not node:
            position = self._position = {n: i for i, n in enumerate(self._nodes)}
        try:
            return position[node]
        except KeyError:
            raise ValueError(f"{node!r} is not in module '{self.name}'") from None

    def add_constant(self, value, before, name="Const", location=None):
        """A Const node holding a read-only copy of `value`; returns its Value."""
        arr = np.array(value, order="C")
        arr.setflags(write=False)
        dtype = dtypes.as_dtype(arr.dtype)
        node = self.add_node("Const", [], {"value": arr, "dtype": dtype},
                             [(dtype, arr.shape)], name, location, before=before)
        return node.outputs[0]

    def add_control_dep(self, node, dep):
        if dep is not node and dep not in node.control_deps:
            node.control_deps.append(dep)
            dep.control_users.append(node)

    def add_variable(self, name, dtype, dims, location=None):
        ref = self.variables.get(name)
        if ref is None:
            ref = self.variables[name] = VariableRef(name, dtype, dims, location)
        return ref

    # ---------------------------------------------------------------- rewriting
    def set_input(self, node, i, value):
        old = node.inputs[i]
        if isinstance(old, Value):
            old.uses.remove(node)
        node.inputs[i] = value
        if isinstance(value, Value):
            value.uses.append(node)

    def replace_all_uses(self, old, new):
        """Every input slot and output that reads `old` reads `new` instead."""
        if old is new:
            return
        users, old.uses = old.uses, []  # not one list.remove per use: a value read by
        for user in dict.fromkeys(users):  # every update (the learning rate) was quadratic
            for i, v in enumerate(user.inputs):
                if v is old:
                    user.inputs[i] = new
                    if isinstance(new, Value):
                        new.uses.append(user)
        self.outputs = [new if v is old else v for v in self.outputs]

    def replace_node(self, old, new_values):
        """Redirects the uses of each output of `old` to the matching new value, and its
        control users to the new values' nodes; `old` is left dead (unless a root)."""
        for o, n in zip(old.outputs, new_values):
            self.replace_all_uses(o, n)
        new_nodes = list(dict.fromkeys(v.node for v in new_values))
        users, old.control_users = old.control_users, []  # not one list.remove per user
        for user in users:
            user.control_deps.remove(old)
            for n in new_nodes:
                if self.precedes(n, user):
                    self.add_control_dep(user, n)

    def remove_control_dep(self, node, dep):
        node.control_deps.remove(dep)
        dep.control_users.remove(node)

    def remove_nodes(self, doomed):
        """Deletes nodes nothing outside `doomed` uses any more."""
        doomed = set(doomed)
        losing = {}  # each dep losing control users, filtered once: a removal per edge
        for node in doomed:  # from a list of thousands was quadratic (ResNet-50's prune)
            for v in node.value_inputs:
                v.uses.remove(node)
            for dep in node.control_deps:
                losing[id(dep)] = dep
        for dep in losing.values():
            dep.control_users = [u for u in dep.control_users if u not in doomed]
        self.nodes = [n for n in self.nodes if n not in doomed]
        self.params = [n for n in self.params if n not in doomed]
        self.roots = [n for n in self.roots if n not in doomed]

    def live_nodes(self):
        """Nodes the outputs and roots need, through data inputs and control deps."""
        live = set(self.params)
        stack = [v.node for v in self.outputs] + list(self.roots)
        while stack:
            node = stack.pop()
            if node in live:
                continue
            live.add(node)
            stack.extend(v.node for v in node.value_inputs)
            stack.extend(node.control_deps)
        return live

    def remove_dead(self):
        """Deletes the nodes no output or root needs; returns how many."""
        live = self.live_nodes()
        dead = [n for n in self.nodes if n not in live]
        self.remove_nodes(dead)
        return len(dead)

    # --------------------------------------------------------------- inspection
    def all_nodes(self):
        """The nodes, each followed by those of its regions (nested ones too)."""
        for n in self.nodes:
            yield n
            for region in n.regions.values():
                yield from region.all_nodes()

    def variables_used(self):
        """Names of the variables the nodes (and their regions) read or write: VariableV2
        reads, ref inputs and the nodes' own state variables."""
        used = set()
        for n in self.all_nodes():
            if n.type == "VariableV2":
                used.add(n.name)
            used.update(v.name for v in n.inputs if isinstance(v, VariableRef))
            if STATE_VARIABLE in n.attrs:
                used.add(n.attrs[STATE_VARIABLE])
        return used

    @property
    def constants(self):
        return [n for n in self.nodes if n.type == "Const"]

    def is_static_shaped(self):
        """Whether every value's rank is known and every dim is an int or a SymDim."""
        return all(dims_are_static(v.dims) for n in self.nodes for v in n.outputs) and \
            all(dims_are_static(r.dims) for r in self.variables.values())

    def dynamic_values(self):
        """The values whose rank is unknown or that have a data-dependent dim."""
        return [v for n in self.nodes for v in n.outputs if not dims_are_static(v.dims)]

    def verify(self):
        """Raises AssertionError unless the module is well formed: every input and control
        dep is defined earlier, use lists match the inputs, the interface is in the module."""
        seen = set()
        uses = {}
        # each dep's control users as a set, made once: a training step under
        # control_dependencies(update_ops) gives thousands of nodes the same ~100 deps, and
        # a membership test in the list per edge made verify quadratic (76 s of ResNet-50)
        control_users = {}
        for node in self.nodes:
            assert node not in seen, f"{node} appears twice"
            for v in node.inputs:
                if isinstance(v, VariableRef):
                    assert self.variables.get(v.name) is v, f"{node} updates unknown {v}"
                    continue
                assert v.node in seen, f"{node} uses {v.ref}, which is not defined before it"
                uses.setdefault(v, []).append(node)
            for dep in node.control_deps:
                assert dep in seen, f"{node} depends on {dep}, which does not come before it"
                if dep not in control_users:
                    control_users[dep] = set(dep.control_users)
                assert node in control_users[dep], f"{dep} does not list control user {node}"
            seen.add(node)
        for node in self.nodes:
            for v in node.outputs:
                assert sorted(map(id, v.uses)) == sorted(map(id, uses.get(v, []))), \
                    f"use list of {v.ref} is out of date"
        for v in self.outputs:
            assert v.node in seen, f"output {v.ref} is not in the module"
        for n in self.roots + self.params:
            assert n in seen, f"{n} is not in the module"
        assert all(p.type == PARAMETER for p in self.params)
        known = set(self.symbols) | set(self.run_dims)
        for node in self.nodes:
            for v in node.outputs:
                _verify_dims(v.dims, known, v)
        for r in self.variables.values():
            _verify_dims(r.dims, known, r)
        return True

    # --------------------------------------------------------------- text form
    def to_text(self):
        """HLO-like text: one line per node, then the outputs and roots."""
        params = ", ".join(f"%{p.id}: {format_type(p.outputs[0].dtype, p.outputs[0].dims)}"
                           for p in self.params)
        lines = [f"module {self.name}({params}) {{"]
        for name, ref in self.variables.items():
            lines.append(f"  var &{name}: {format_type(ref.dtype, ref.dims)}")
        for n in self.nodes:
            lines.append("  " + node_text(n))
            for key, region in n.regions.items():
                lines.extend(f"    {key}: " + line if k == 0 else "    " + line
                             for k, line in enumerate(region.to_text().splitlines()))
        outs = ", ".join(v.ref for v in self.outputs)
        roots = ", ".join(f"%{n.id}" for n in self.roots)
        lines.append(f"  return ({outs})" + (f" effects {{{roots}}}" if roots else ""))
        lines.append("}")
        return "\n".join(lines) + "\n"

    __str__ = to_text

    # -------------------------------------------------------------- dict form
    def to_dict(self):
        """A JSON-able dict (arrays as base64, dtypes by name); inverse of from_dict."""
        def ref(v):
            return {"var": v.name} if isinstance(v, VariableRef) else [v.node.id, v.index]
        return {
            "name": self.name,
            "variables": [{"name": r.name, "dtype": r.dtype.name, "dims": _dims_out(r.dims),
                           "location": _loc_out(r.location)} for r in self.variables.values()],
            "nodes": [{"id": n.id, "type": n.type, "name": n.name, "attrs": encode_attrs(n.attrs),
                       "inputs": [ref(v) for v in n.inputs],
                       "outputs": [{"dtype": v.dtype.name, "dims": _dims_out(v.dims)}
                                   for v in n.outputs],
                       "control_deps": [d.id for d in n.control_deps],
                       "location": _loc_out(n.location),
                       "gradient_of": None if n.gradient_of is None else
                       [n.gradient_of[0], n.gradient_of[1], _loc_out(n.gradient_of[2])],
                       # a body's content, not only its name, keys the spec cache
                       **({"regions": {k: r.to_dict() for k, r in n.regions.items()}}
                          if n.regions else {})}
                      for n in self.nodes],
            "params": [n.id for n in self.params],
            "outputs": [ref(v) for v in self.outputs],
            "roots": [n.id for n in self.roots],
            "symbols": [[s, i, axis] for s, (i, axis) in self.symbols.items()],
            "guards": [list(g) for g in self.guards],
            "run_dims": list(self.run_dims),
        }

    @classmethod
    def from_dict(cls, d):
        m = cls(d["name"])
        for r in d["variables"]:
            m.add_variable(r["name"], r["dtype"], _dims_in(r["dims"]), _loc_in(r["location"]))
        by_id = {}

        def value(ref):
            return m.variables[ref["var"]] if isinstance(ref, dict) else \
                by_id[ref[0]].outputs[ref[1]]
        for nd in d["nodes"]:
            grad_of = nd["gradient_of"]
            m._next_id = nd["id"]
            node = m.add_node(nd["type"], [value(r) for r in nd["inputs"]],
                              decode_attrs(nd["attrs"]),
                              [(o["dtype"], _dims_in(o["dims"])) for o in nd["outputs"]],
                              nd["name"], _loc_in(nd["location"]),
                              None if grad_of is None else
                              (grad_of[0], grad_of[1], _loc_in(grad_of[2])),
                              [by_id[i] for i in nd["control_deps"]])
            node.regions = {k: Module.from_dict(r) for k, r in nd.get("regions", {}).items()}
            by_id[node.id] = node
        m._next_id = max(by_id, default=-1) + 1
        m.params = [by_id[i] for i in d["params"]]
        m.outputs = [value(r) for r in d["outputs"]]
        m.roots = [by_id[i] for i in d["roots"]]
        m.symbols = {s: (i, axis) for s, i, axis in d.get("symbols", [])}
        m.guards = [tuple(g) for g in d.get("guards", [])]
        m.run_dims = list(d.get("run_dims", []))
        return m


def _dims_out(dims):
    """JSON dims: ints, null for a dynamic dim, {"expr", "hint"} for a SymDim."""
    if dims is None:
        return None
    return [{"expr": d.to_json(), "hint": d.hint} if isinstance(d, SymDim) else d
            for d in dims]


def _dims_in(dims):
    if dims is None:
        return None
    return tuple(SymDim.from_json(d["expr"], d["hint"]) if isinstance(d, dict) else d
                 for d in dims)


def _loc_out(loc):
    return None if loc is None else list(loc)


def _loc_in(loc):
    return None if loc is None else tuple(loc)


# ------------------------------------------------------------------------ attrs
def encode_attr(value):
    """Plain JSON for one attr value; tagged dicts for DType, TensorShape, arrays, tuples."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dtypes.DType):
        return {"dtype": value.name}
    if isinstance(value, TensorShape):
        return {"shape": None if value.ndims is None else [d.value for d in value]}
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype == object and all(isinstance(v, bytes) for v in arr.flat):
            # a string tensor's bytes (any bytes: JSON text could not hold them raw)
            return {"bytes": [base64.b64encode(v).decode("ascii") for v in arr.flat],
                    "shape": list(arr.shape)}
        if arr.dtype == object:
            return {"strings": arr.tolist(), "shape": list(arr.shape),
                    "scalar": isinstance(value, np.generic)}
        return {"ndarray": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode("ascii"),
                "dtype": arr.dtype.str, "shape": list(arr.shape),
                "scalar": isinstance(value, np.generic)}
    if isinstance(value, tuple):
        return {"tuple": [encode_attr(v) for v in value]}
    if isinstance(value, list):
        return [encode_attr(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: encode_attr(v) for k, v in value.items()}}
    raise TypeError(f"attr value {value!r} of type {type(value).__name__} is not plain data")


def decode_attr(value):
    if isinstance(value, list):
        return [decode_attr(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "dtype" in value and len(value) == 1:
        return dtypes.as_dtype(value["dtype"])
    if "shape" in value and len(value) == 1:
        return TensorShape(value["shape"])
    if "tuple" in value:
        return tuple(decode_attr(v) for v in value["tuple"])
    if "dict" in value:
        return {k: decode_attr(v) for k, v in value["dict"].items()}
    if "bytes" in value:
        arr = np.empty(len(value["bytes"]), dtype=object)
        arr[:] = [base64.b64decode(v, validate=True) for v in value["bytes"]]
        arr = arr.reshape(value["shape"])
        arr.setflags(write=False)
        return arr
    if "strings" in value:
        arr = np.empty(len(value["strings"]) if value["shape"] else (), dtype=object)
        arr[...] = value["strings"] if value["shape"] else value["strings"]
        return arr.reshape(value["shape"])
    arr = np.frombuffer(base64.b64decode(value["ndarray"]), dtype=np.dtype(value["dtype"]))
    arr = arr.reshape(value["shape"]).copy()
    if value["scalar"]:
        return arr[()]
    arr.setflags(write=False)
    return arr


def encode_attrs(attrs):
    return {k: encode_attr(v) for k, v in attrs.items()}


def decode_attrs(attrs):
    return {k: decode_attr(v) for k, v in attrs.items()}


def attrs_key(attrs):
    """A hashable, exact key for attrs: equal keys mean equal attrs (CSE uses it)."""
    return json.dumps(encode_attrs(attrs), sort_keys=True)


# ------------------------------------------------------------------------ text
def _attr_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dtypes.DType):
        return _SHORT_DTYPE.get(value.name, value.name)
    if isinstance(value, TensorShape):
        return "[*]" if value.ndims is None else \
            "[" + ",".join("?" if d.value is None else str(d.value) for d in value) + "]"
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.size <= 8:
            return np.array2string(arr, separator=",").replace("\n", "")
        return f"<{arr.size} elements>"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_attr_text(v) for v in value) + "]"
    return repr(value)


def node_text(node):
    if len(node.outputs) == 1:
        v = node.outputs[0]
        lhs, ty = f"%{node.id}", format_type(v.dtype, v.dims)
    else:
        lhs = f"%{node.id}"
        ty = "(" + ", ".join(format_type(v.dtype, v.dims) for v in node.outputs) + ")"
    args = ", ".join(f"&{v.name}" if isinstance(v, VariableRef) else v.ref for v in node.inputs)
    attrs = {k: v for k, v in node.attrs.items() if not (node.type == "Const" and k == "dtype")}
    text = f"{lhs} = {ty} {node.type}({args})"
    if attrs:
        text += " {" + ", ".join(f"{k}={_attr_text(v)}" for k, v in sorted(attrs.items())) + "}"
    if node.control_deps:
        text += " after(" + ", ".join(f"%{d.id}" for d in node.control_deps) + ")"
    comment = node.name
    if node.location is not None:
        comment += f"  @{node.location[0].rsplit('/', 1)[-1]}:{node.location[1]}"
    return f"{text}  # {comment}"
