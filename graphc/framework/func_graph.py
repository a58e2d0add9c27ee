"""FuncGraph: the body of a functional control-flow op (If, While), as in TF2's control
flow v2 and XLA, not TF1's Switch/Merge dataflow.

A FuncGraph is a Graph of its own whose `inputs` are placeholders (the function's
arguments, then one per captured tensor) and whose `outputs` are a list of its tensors.
The op that calls it (If, While) is created in the enclosing graph and lists everything
the body reads as its own inputs:
  - a tensor of an enclosing graph used inside is captured by value: the body reads a
    placeholder, and the outer tensor becomes an input of the calling op (`captures`);
  - a variable (a VariableV2 output) used inside as a reference (assign, read_value) is
    captured by reference: the body gets a VariableV2 op of the same name, which reads
    and updates the Session's variable when its consumers run, so TF1's ordering of
    reads and assigns inside the body holds (`ref_captures`); the outer variable is an
    input of the calling op that the op does not read (its attr ref_input_indices);
  - an op of an enclosing graph used as a control input inside becomes a control input
    of the calling op (`control_captures`).
A gradient body reads the forward body's intermediates: a FuncGraph built with
`forward_graphs` captures their tensors through `intermediate_source`, which the
gradient builder supplies (the forward op outputs them: cond) or stacks them per
iteration (while_loop).

While a FuncGraph is the default graph, ops that library code creates on an enclosing
(or forward) graph (`x.graph.create_op(...)`) are created in the FuncGraph instead
(Graph.create_op asks the default graph), so a body's ops never leak outside it.
Variables cannot be created inside a body (create them before the cond or loop): their
initializers would run inside it.

Bodies live in the function library of the graph holding the calling op
(`Graph._functions`, by the FuncGraph's unique name); the op's attrs name them, so attrs
stay plain data.
"""
from graphc import errors
from graphc.framework.graph import Graph, Tensor


class FuncGraph(Graph):
    def __init__(self, name, outer_graph, forward_graphs=()):
        self.outer_graph = outer_graph
        super().__init__()
        self.name = name
        self.inputs = []
        self.outputs = []
        self.captures = []          # (outer tensor, inner placeholder)
        self.ref_captures = []      # (outer VariableV2 tensor, inner VariableV2 tensor)
        self.control_captures = []  # ops of enclosing graphs that inner ops wait for
        self.forward_graphs = tuple(forward_graphs)
        self.intermediate_source = None
        self._captured = {}
        self._executables = {}      # fetch tuple -> ReferenceExecutable (ops/function_call.py)
        self._collections = outer_graph._collections
        self._name_stack = name     # unique in the outer graph: so are the body's op names
        self._device_stack = list(outer_graph._device_stack[-1:])
        self.seed = outer_graph.seed

    # variable scopes (and their reuse) are the enclosing graph's
    @property
    def _variable_scope_state(self):
        return self.outer_graph._variable_scope_state

    @_variable_scope_state.setter
    def _variable_scope_state(self, state):
        if state is not None:  # Graph.__init__ sets None: keep the outer graph's
            self.outer_graph._variable_scope_state = state

    def encloses(self, graph):
        """Whether `graph` is one of the graphs this body is nested in."""
        g = self.outer_graph
        while g is not None:
            if g is graph:
                return True
            g = getattr(g, "outer_graph", None)
        return False

    def _reads_from(self, graph):
        return graph is self.outer_graph or graph in self.forward_graphs or \
            self.outer_graph._reads_from(graph)

    def _create_op(self, op_type, inputs, attrs=None, name=None):
        if op_type == "VariableV2":
            raise ValueError(f"Variable '{name}' cannot be created inside the body of a cond "
                             f"or while_loop ('{self.name}') in graphc: create it before the "
                             "cond or loop (e.g. build the layer or cell once outside).")
        return super()._create_op(op_type, inputs, attrs, name)

    def _own_inputs(self, inputs):
        return [self.capture(t) if isinstance(t, Tensor) else t for t in inputs]

    def capture(self, t):
        """The tensor of this graph that stands for `t` (of this or an enclosing graph,
        or of a forward graph)."""
        if t.graph is self:
            return t
        inner = self._captured.get(t)
        if inner is not None:
            return inner
        if t.graph in self.forward_graphs:
            inner = self.intermediate_source(t)
        elif t.graph is self.outer_graph or self.outer_graph._reads_from(t.graph):
            outer = t if t.graph is self.outer_graph else self.outer_graph.capture(t)
            inner = self._capture_outer(t, outer)
        else:
            raise ValueError(f"Tensor {t.name} is from a graph that '{self.name}' cannot "
                             "read (a tensor from inside another cond or loop body).")
        self._captured[t] = inner
        return inner

    def _capture_outer(self, t, outer):
        with self.name_scope(None), self.control_dependencies(None):
            if outer.op.type == "VariableV2":
                inner = Graph._create_op(self, "VariableV2", [], dict(outer.op.attrs),
                                         outer.op.name + "/").outputs[0]
                self.ref_captures.append((outer, inner))
                return inner
            inner = Graph._create_op(self, "Placeholder", [], {"dtype": t.dtype,
                                                               "shape": t.shape},
                                     self.name + "/capture").outputs[0]
        self.captures.append((outer, inner))
        self.inputs.append(inner)
        return inner

    def outer_of(self, inner):
        """The enclosing graph's tensor that the placeholder `inner` captures, else None."""
        for outer, placeholder in self.captures:
            if placeholder is inner:
                return outer
        return None

    def _current_control_inputs(self, input_ops=()):
        own = []
        for op in super()._current_control_inputs(input_ops):
            if op.graph is self:
                own.append(op)
            else:
                self._capture_control(op)
        return own

    def _capture_control(self, op):
        if op.graph is self.outer_graph:
            if op not in self.control_captures:
                self.control_captures.append(op)
        elif self.encloses(op.graph):
            self.outer_graph._capture_control(op)
        # an op of a forward graph has run before any gradient of it: nothing to wait for

    def add_function(self, fgraph):
        self._functions[fgraph.name] = fgraph


def function_of(op, attr):
    """The FuncGraph named by op's attr `attr`."""
    try:
        return op.graph._functions[op.attrs[attr]]
    except KeyError:
        raise errors.KernelError(
            f"the body '{op.attrs.get(attr)}' (attr '{attr}') of this {op.type} op is not "
            "in its graph", errors.InvalidArgumentError) from None
