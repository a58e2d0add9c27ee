"""Graph, Operation and Tensor: the static dataflow graph a user builds.

A Graph is append-only: an op's inputs and control inputs always exist before it,
so creation order (`Operation._id`) is a topological order.
"""
import contextlib
import linecache
import os
import re
import sys
import threading
import types
import warnings

from graphc import dtypes
from graphc.framework.default_session import session_for
from graphc.framework.device_spec import merge_device
from graphc.framework.op_def import get_op_def
from graphc.framework.tensor_shape import TensorShape, as_shape

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = (_PACKAGE_DIR + os.sep, os.path.dirname(contextlib.__file__) + os.sep + "contextlib")


def user_frame():
    """(filename, lineno, function) of the innermost caller outside graphc, or None."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP_DIRS):
            return (fn, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def warn_at_user(message, category=UserWarning):
    """warnings.warn attributed to the innermost caller outside graphc, so the warning
    names the user's line, not graphc's (Python 3.12's skip_file_prefixes does this; we
    support 3.10)."""
    level, f = 1, sys._getframe(0)
    while f is not None and f.f_code.co_filename.startswith(_SKIP_DIRS):
        level, f = level + 1, f.f_back
    warnings.warn(message, category, stacklevel=level)


def _string_inputs_note(inputs):
    """Where a string tensor reached an op that refused it: most ops take numbers only,
    and a string can come from far away (a placeholder, a parsed file)."""
    strings = [t.name for t in inputs if t.dtype == dtypes.string]
    if not strings:
        return ""
    return (f" It was given the string tensor{'s' if len(strings) > 1 else ''} "
            f"{', '.join(strings)} at:\n  {format_location(user_frame())}")


def format_location(loc):
    if loc is None:
        return "<unknown location>"
    fn, line, func = loc
    text = linecache.getline(fn, line).strip()
    return f'File "{fn}", line {line}, in {func}' + (f"\n    {text}" if text else "")


class Tensor:
    """The symbolic value of one output of an Operation."""

    def __init__(self, op, value_index, shape, dtype):
        self._op = op
        self._value_index = value_index
        self._name = f"{op.name}:{value_index}"  # an op keeps its name: made once
        self._shape = as_shape(shape)
        self._dtype = dtypes.as_dtype(dtype)

    op = property(lambda self: self._op)
    value_index = property(lambda self: self._value_index)
    dtype = property(lambda self: self._dtype)
    graph = property(lambda self: self._op.graph)
    name = property(lambda self: self._name)
    shape = property(lambda self: self._shape)
    device = property(lambda self: self._op.device)

    def get_shape(self):
        return self._shape

    def set_shape(self, shape):
        self._shape = self._shape.merge_with(as_shape(shape))
        self._op._changed()

    def _forget_shape(self):
        """The static shape becomes unknown (an assign with validate_shape=False gives
        its variable the value's shape)."""
        self._shape = TensorShape(None)
        self._op._changed()

    def consumers(self):
        return [op for op in self.graph.get_operations() if self in op.inputs]

    def eval(self, feed_dict=None, session=None):
        return session_for(session, self.graph).run(self, feed_dict)

    def __repr__(self):
        return f"<gc.Tensor '{self.name}' shape={self._shape} dtype={self._dtype.name}>"

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __eq__(self, other):  # TF1 graph tensors compare by identity
        return self is other

    def __bool__(self):
        raise TypeError("Using a `gc.Tensor` as a Python `bool` is not allowed. "
                        "Use `if t is not None:` or a graph op such as gc.where.")

    def __len__(self):
        n = self._shape[0].value if self._shape.ndims else None
        if n is None:
            raise TypeError(f"len() of tensor {self.name} with unknown first dimension")
        return n

    def __iter__(self):
        n = len(self)
        for i in range(n):
            yield self[i]

    __array_priority__ = 100  # so numpy_array + tensor defers to Tensor.__radd__

    @staticmethod
    def _override_operator(name, fn):
        setattr(Tensor, name, fn)


class Operation:
    """A node of the graph: type, inputs, attrs, outputs, control inputs."""

    def __init__(self, graph, op_type, name, inputs, attrs, control_inputs, out_specs):
        self.graph = graph
        self.type = op_type
        self.name = name
        self._inputs = tuple(inputs)
        self._attrs = dict(attrs or {})
        # read-only: a change after creation goes through _set_attr, which drops what is
        # memoized of the op (_changed)
        self.attrs = types.MappingProxyType(self._attrs)
        self._control_inputs = list(control_inputs)
        self.outputs = [Tensor(self, i, s, d) for i, (s, d) in enumerate(out_specs)]
        self._id = graph._next_id()
        self.location = user_frame()
        self.forward_op = graph._forward_op_stack[-1] if graph._forward_op_stack else None
        self.device = graph._device_stack[-1] if graph._device_stack else ""
        # the spec cache's form of this op (spec_cache.op_form), made when a key first
        # reads the op: a warm Session's key walk reads it instead of the op. Every
        # change to the op after creation goes through _changed, which drops it.
        self._key_form = None

    inputs = property(lambda self: self._inputs)
    control_inputs = property(lambda self: list(self._control_inputs))
    op_def = property(lambda self: get_op_def(self.type))

    def get_attr(self, name):
        return self.attrs[name]

    def _add_control_input(self, op):
        if op not in self._control_inputs:
            self._control_inputs.append(op)
            self._changed()

    def _set_attr(self, name, value):
        self._attrs[name] = value
        self._changed()

    def _add_output(self, shape, dtype):
        """A new last output (a forward loop or branch saving a value for its
        gradient); counted as a new op by the graph's version."""
        out = Tensor(self, len(self.outputs), shape, dtype)
        self.outputs.append(out)
        self._changed()
        self.graph.version += 1
        return out

    def _set_origin(self, device, location, forward_op):
        """The device, creation site and forward op an imported graph's file records."""
        self.device, self.location, self.forward_op = device, location, forward_op
        self._changed()

    def _changed(self):
        """After any change to the op once created: memos of what it is are stale. The
        graph's edits count it (they add no op, so its version does not)."""
        self._key_form = None
        self.graph.edits += 1

    def run(self, feed_dict=None, session=None):
        session_for(session, self.graph).run(self, feed_dict)

    def describe(self):
        """Name, type and creation site, for error messages."""
        s = f"'{self.name}' (op: '{self.type}'), created at:\n  {format_location(self.location)}"
        if self.forward_op is not None:
            f = self.forward_op
            s += (f"\n  This op is part of the gradient of '{f.name}' (op: '{f.type}'), created at:"
                  f"\n  {format_location(f.location)}")
        return s

    def __repr__(self):
        return f"<gc.Operation '{self.name}' type={self.type}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other



def tensor_dtype_names(ops):
    """The dtype names of the inputs and outputs of `ops`, as one set. The fields, not
    the properties: a warm first run asks it of every op of a signature (whether any
    holds a string), and the properties' calls were four fifths of that."""
    names = {t._dtype.name for op in ops for t in op.outputs}
    names.update(t._dtype.name for op in ops for t in op._inputs)
    return names


class _ControlBlock:
    """One control_dependencies block in force: its control inputs, and the ops made
    inside it."""

    def __init__(self, ops):
        self.ops = ops
        self.created = set()

class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    METRIC_VARIABLES = "metric_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    MODEL_VARIABLES = "model_variables"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    WEIGHTS = "weights"  # what contrib.layers.apply_regularization reads by default
    BIASES = "biases"
    GLOBAL_STEP = "global_step"
    SUMMARIES = "summaries"
    TRAIN_OP = "train_op"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    # what a tf.train.Scaffold finds or makes (MonitoredSession)
    SAVERS = "savers"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    READY_FOR_LOCAL_INIT_OP = "ready_for_local_init_op"
    SUMMARY_OP = "summary_op"
    QUEUE_RUNNERS = "queue_runners"
    TABLE_INITIALIZERS = "table_initializer"


class Graph:
    def __init__(self):
        self._ops = []
        self._ops_by_name = {}
        self._names_in_use = {}
        self._name_stack = ""
        self._control_stack = []   # _ControlBlocks; a None entry clears outer ones
        self._forward_op_stack = []
        self._device_stack = []
        self._collections = {}
        self._finalized = False
        self._last_id = 0
        self.seed = None
        self._variable_scope_state = None  # owned by graphc.variable_scope
        self._functions = {}  # name -> FuncGraph: bodies of If/While ops (func_graph.py)
        self._lock = threading.Lock()
        self.version = 0
        # changes to ops already created (a static shape narrowed, a control input
        # added): they add no op, so version (an op count, graph_io's from_version) does
        # not count them; memos of what the graph holds are keyed on both
        self.edits = 0

    def _next_id(self):
        self._last_id += 1
        return self._last_id

    # ----------------------------------------------------------------- default graph
    @contextlib.contextmanager
    def as_default(self):
        """Makes this graph the default; while a cond or loop body reading this graph is
        being built, the body stays the default (`x.graph.as_default()` in library code
        must not take the body's ops out of it)."""
        stack = _graph_stack()
        builder = stack[-1] if stack else None
        stack.append(builder if builder is not None and builder._reads_from(self) else self)
        try:
            yield self
        finally:
            stack.pop()

    @contextlib.contextmanager
    def _as_builder(self):
        """This graph is the default even while a body reading it is being built: a
        gradient computes a small value (a shape) in the forward body, to save that."""
        stack = _graph_stack()
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    # ----------------------------------------------------------------------- names
    def unique_name(self, name, mark_as_used=True):
        if self._name_stack:
            name = self._name_stack + "/" + name
        key = name.lower()
        i = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = i + 1
        if i > 0:
            base = name
            while f"{base}_{i}".lower() in self._names_in_use:
                i += 1
            name = f"{base}_{i}"
            if mark_as_used:
                self._names_in_use[name.lower()] = 1
        return name

    def get_name_scope(self):
        return self._name_stack

    @contextlib.contextmanager
    def name_scope(self, name):
        """TF1 semantics: a new unique scope, "a/" re-enters scope "a", None or "" the root."""
        old = self._name_stack
        if not name:
            new = ""
        elif name.endswith("/"):
            new = name[:-1]
        else:
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield (new + "/") if new else ""
        finally:
            self._name_stack = old

    # ----------------------------------------------------------- control, devices
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        if control_inputs is None:
            self._control_stack.append(None)
        else:
            ops = []
            for c in control_inputs:
                c = getattr(c, "_as_graph_element", lambda: c)()
                op = c.op if isinstance(c, Tensor) else c
                if not isinstance(op, Operation):
                    raise TypeError(f"Control input must be an Operation or Tensor: {c!r}")
                ops.append(op)
            self._control_stack.append(_ControlBlock(ops))
        try:
            yield
        finally:
            self._control_stack.pop()

    def _open_control_blocks(self):
        """The control_dependencies blocks in force, outermost first."""
        blocks = []
        for entry in reversed(self._control_stack):
            if entry is None:
                break
            blocks.append(entry)
        return blocks[::-1]

    def _current_control_inputs(self, input_ops=()):
        """The control inputs of an op made now from the ops `input_ops`. As TF's
        _control_dependencies_for_inputs: a block one of whose own ops is an input adds
        none, as that input already runs after the block's control inputs. Without the
        rule every op of a gradient built under control_dependencies(update_ops) waits
        for every update, and the compiler works through ops x updates edges."""
        out = []
        for block in self._open_control_blocks():
            if not any(op in block.created for op in input_ops):
                out.extend(block.ops)
        return out

    @contextlib.contextmanager
    def device(self, name):
        """Ops created inside record the device `name` merged into the enclosing scope's;
        None clears the enclosing scopes."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"graphc device scopes take device strings, got {name!r}")
        outer = self._device_stack[-1] if self._device_stack and name is not None else ""
        self._device_stack.append(merge_device(outer, name))
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def gradient_of(self, forward_op):
        """Ops created inside are marked as part of forward_op's gradient (for errors)."""
        self._forward_op_stack.append(forward_op)
        try:
            yield
        finally:
            self._forward_op_stack.pop()

    # ------------------------------------------------------------------ op creation
    def create_op(self, op_type, inputs, attrs=None, name=None):
        """Creates an op, inferring its output shapes and dtypes. Returns the Operation.
        While a cond or loop body that reads this graph is being built (the default
        graph), the op is created in the body (framework/func_graph.py)."""
        builder = get_default_graph()
        if builder is not self and builder._reads_from(self):
            return builder.create_op(op_type, inputs, attrs, name)
        return self._create_op(op_type, inputs, attrs, name)

    def _reads_from(self, graph):
        """Whether this graph may use tensors of `graph` (a FuncGraph its outer ones')."""
        return False

    def _own_inputs(self, inputs):
        """The inputs as tensors of this graph (a FuncGraph captures outer ones)."""
        return list(inputs)

    def _create_op(self, op_type, inputs, attrs=None, name=None):
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified.")
        op_def = get_op_def(op_type)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TypeError(f"Input to op {op_type} must be a Tensor, got {t!r}")
        inputs = self._own_inputs(inputs)
        for t in inputs:
            if t.graph is not self:
                raise ValueError(f"Tensor {t.name} must be from the same graph as the op "
                                 f"{op_type} being created.")
        if name and name.endswith("/"):  # an exact name taken from a name scope, as in TF
            name = name[:-1]
            self._names_in_use.setdefault(name.lower(), 1)
        else:
            name = self.unique_name(name or op_type)
        if name in self._ops_by_name:
            raise ValueError(f"Duplicate node name in graph: '{name}'")
        attrs = dict(attrs or {})
        try:
            specs = op_def.infer(list(inputs), attrs)
        except (ValueError, TypeError) as e:
            shapes = ", ".join(_shape_str(t.shape) for t in inputs)
            raise type(e)(f"{e} for '{name}' (op: '{op_type}') with input shapes: {shapes}."
                          f"{_string_inputs_note(inputs)}") from None
        if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], dtypes.DType):
            specs = [specs]
        input_ops = {t.op for t in inputs}
        controls = [c for c in self._current_control_inputs(input_ops) if c not in input_ops]
        op = Operation(self, op_type, name, inputs, attrs, controls, specs)
        for block in self._open_control_blocks():
            block.created.add(op)
        with self._lock:
            self._ops.append(op)
            self._ops_by_name[name] = op
            self.version += 1
        return op

    # ----------------------------------------------------------------- lookups
    def get_operations(self):
        return list(self._ops)

    def get_operation_by_name(self, name):
        if not isinstance(name, str):
            raise TypeError(f"Operation names are strings (or similar), not "
                            f"{type(name).__name__}.")
        return self.as_graph_element(name, allow_tensor=False, allow_operation=True)

    def get_tensor_by_name(self, name):
        if not isinstance(name, str):
            raise TypeError(f"Tensor names are strings (or similar), not {type(name).__name__}.")
        return self.as_graph_element(name, allow_tensor=True, allow_operation=False)

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """The Tensor or Operation `obj` names, with the error classes and texts of TF's
        Graph._as_graph_element_locked (a missing name is a KeyError, a malformed or
        disallowed one a ValueError, another type a TypeError)."""
        kinds = " or ".join(k for k, ok in (("Tensor", allow_tensor),
                                            ("Operation", allow_operation)) if ok)
        obj = getattr(obj, "_as_graph_element", lambda: obj)()
        if isinstance(obj, str):
            return self._element_by_name(obj, allow_tensor, allow_operation, kinds)
        if isinstance(obj, Tensor) and allow_tensor or isinstance(obj, Operation) and \
                allow_operation:
            if obj.graph is not self:
                raise ValueError(f"{type(obj).__name__} {obj!r} is not an element of this graph.")
            return obj
        raise TypeError(f"Can not convert a {type(obj).__name__} into a {kinds}.")

    def _element_by_name(self, name, allow_tensor, allow_operation, kinds):
        form = " Tensor names must be of the form \"<op_name>:<output_index>\"."
        if ":" in name:
            if not allow_tensor:
                raise ValueError(f"Name '{name}' appears to refer to a Tensor, not a {kinds}.")
            m = re.fullmatch(r"([^:]+):(\d+)", name)
            if not m:
                raise ValueError(f"The name '{name}' looks a like a Tensor name, but is not a "
                                 f"valid one.{form}")
            op = self._ops_by_name.get(m.group(1))
            if op is None:
                raise KeyError(f"The name '{name}' refers to a Tensor which does not exist. "
                               f"The operation, '{m.group(1)}', does not exist in the graph.")
            i = int(m.group(2))
            if i >= len(op.outputs):
                raise KeyError(f"The name '{name}' refers to a Tensor which does not exist. The "
                               f"operation, '{op.name}', exists but only has "
                               f"{len(op.outputs)} outputs.")
            return op.outputs[i]
        if allow_operation:
            try:
                return self._ops_by_name[name]
            except KeyError:
                raise KeyError(f"The name '{name}' refers to an Operation not in the "
                               "graph.") from None
        if name in self._ops_by_name:
            raise ValueError(f"The name '{name}' refers to an Operation, not a {kinds}.{form}")
        raise ValueError(f"The name '{name}' looks like an (invalid) Operation name, not a "
                         f"{kinds}.{form}")

    def as_graph_def(self, from_version=None, add_shapes=False):
        """tf.Graph.as_graph_def: TensorFlow's GraphDef proto of this graph; add_shapes
        records each output's static shape, as TF's `_output_shapes` attr."""
        from graphc import graph_io
        return graph_io.as_graph_def(self, add_shapes=add_shapes, from_version=from_version)

    @property
    def graph_def_versions(self):
        from graphc import graph_io
        return {"producer": graph_io.VERSION, "min_consumer": graph_io.VERSION}

    # ---------------------------------------------------------------- collections
    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value):
        for n in ([names] if isinstance(names, str) else names):
            self.add_to_collection(n, value)

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])

    def get_collection(self, name, scope=None):
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        return [i for i in items if re.match(scope, getattr(i, "name", ""))]

    def get_all_collection_keys(self):
        return list(self._collections)

    def clear_collection(self, name):
        self._collections.pop(name, None)

    # ------------------------------------------------------------------- finalize
    def finalize(self):
        self._finalized = True

    @property
    def finalized(self):
        return self._finalized

    def _unsafe_unfinalize(self):
        self._finalized = False


def _shape_str(shape):
    if shape.ndims is None:
        return "<unknown>"
    return "[" + ",".join("?" if d.value is None else str(d.value) for d in shape) + "]"


# As in TF1: the stack of `as_default` graphs is per thread (a thread building its own
# graph does not see another thread's), the global default graph is shared.
_thread_local = threading.local()
_global_default_graph = Graph()


def _graph_stack():
    stack = getattr(_thread_local, "graphs", None)
    if stack is None:
        stack = _thread_local.graphs = []
    return stack


def get_default_graph():
    stack = _graph_stack()
    return stack[-1] if stack else _global_default_graph


def reset_default_graph():
    global _global_default_graph
    if _graph_stack():
        raise AssertionError("Do not use reset_default_graph() inside a `with graph.as_default()` "
                             "block.")
    _global_default_graph = Graph()


def name_scope(name, default_name=None, values=None):
    """gc.name_scope(name, default_name=None, values=None) on the default graph."""
    g = get_default_graph()
    for v in values or []:
        if isinstance(v, (Tensor, Operation)):
            g = v.graph
            break
    return g.name_scope(name if name is not None else default_name)


def control_dependencies(control_inputs):
    return get_default_graph().control_dependencies(control_inputs)


def device(name):
    return get_default_graph().device(name)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names, value):
    get_default_graph().add_to_collections(names, value)


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def get_collection_ref(key):
    return get_default_graph().get_collection_ref(key)


def create_op(op_type, inputs, attrs=None, name=None):
    """Creates an op in the graph of its inputs (or the default graph)."""
    g = inputs[0].graph if inputs else get_default_graph()
    return g.create_op(op_type, inputs, attrs, name)
