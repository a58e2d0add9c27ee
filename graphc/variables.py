"""Variables: VariableV2 holds state in the Session; Assign/AssignAdd/AssignSub update it,
ScatterUpdate/ScatterAdd/ScatterSub update rows of it (TF1's state_ops.scatter_*)."""
import numpy as np

from graphc import dtypes, errors
from graphc.framework.default_session import session_for
from graphc.framework.graph import GraphKeys, get_default_graph
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape, as_shape
from graphc.ops import control_flow_ops
from graphc.ops.constant_ops import convert_to_tensor


def uninitialized_error(op):
    """TF's error for reading variable `op` before it has a value; the node description
    names the user's line that created the variable, which is what one needs to fix it."""
    return errors.FailedPreconditionError(
        None, op, f"Attempting to use uninitialized value {op.name}\n\t [[node "
                  f"{op.describe()}]]")


def _read_variable(state, op):
    try:
        return state.variables[op.name]
    except KeyError:
        raise uninitialized_error(op) from None


def _store(state, var_op, value):
    value = np.array(value, dtype=var_op.outputs[0].dtype.np)  # state is never aliased
    value.setflags(write=False)
    state.variables[var_op.name] = value
    return value


def _assign(state, op, ref, value):
    var_op = op.inputs[0].op
    if op.attrs.get("validate_shape", True):
        # TF1 checks the shape the variable holds (it may have changed since the graph
        # was built), or the declared one before the first assign
        held = state.variables[var_op.name].shape if var_op.name in state.variables else None
        lhs = var_op.outputs[0].shape if held is None else TensorShape(held)
        if not lhs.is_compatible_with(value.shape):
            raise errors.KernelError(f"Assign requires shapes of both tensors to match. lhs "
                                     f"shape= {lhs} rhs shape= {TensorShape(value.shape)}")
    return _store(state, var_op, value)


def _assign_update(sign):
    def kernel(state, op, ref, value):
        var_op = op.inputs[0].op
        old = _read_variable(state, var_op)
        if np.broadcast_shapes(old.shape, value.shape) != old.shape:
            raise errors.KernelError(f"{op.type} requires the update's shape {value.shape} to "
                                     f"broadcast to the variable's shape {old.shape}")
        return _store(state, var_op, old + sign * value)
    return kernel


def _scatter(combine):
    """A reference kernel writing `updates` into the rows `indices` of the variable, one
    at a time in row-major order (repeated rows add up, or the last one wins)."""
    def kernel(state, op, ref, indices, updates):
        var_op = op.inputs[0].op
        new = np.array(_read_variable(state, var_op))
        bad = (indices < 0) | (indices >= new.shape[0])
        if bad.any():
            pos = tuple(int(i) for i in np.argwhere(bad)[0])
            where = f"indices[{','.join(map(str, pos))}]" if pos else "indices"
            raise errors.KernelError(f"{where} = {indices[pos]} is not in [0, {new.shape[0]})")
        rows = updates.reshape((indices.size,) + new.shape[1:])
        combine(new, indices.reshape(-1), rows)
        return _store(state, var_op, new)
    return kernel


def _scatter_set(new, indices, rows):
    new[indices] = rows


def _scatter_infer(inputs, a):
    ref, indices, updates = inputs
    shape, dtype = _ref_infer([ref, updates], a)
    if not indices.dtype.is_integer:
        raise TypeError(f"indices must be an int32 or int64 tensor, got {indices.dtype.name}")
    if shape.ndims is not None and indices.shape.ndims is not None:
        want = indices.shape.concatenate(shape[1:])
        if not want.is_compatible_with(updates.shape):
            raise ValueError(f"Shapes of updates {updates.shape} must be indices.shape + "
                             f"ref.shape[1:] = {want}")
    return shape, dtype


def _ref_infer(inputs, a):
    if inputs[0].op.type != "VariableV2":
        raise TypeError(f"the first input must be a variable, got {inputs[0].name} of op type "
                        f"{inputs[0].op.type}")
    if inputs[1].dtype != inputs[0].dtype:
        raise TypeError(f"the value's dtype {inputs[1].dtype.name} does not match the "
                        f"variable's dtype {inputs[0].dtype.name}")
    return inputs[0].shape, inputs[0].dtype


def _assign_infer(inputs, a):
    _ref_infer(inputs, a)
    if a.get("validate_shape", True):
        if not inputs[0].shape.is_compatible_with(inputs[1].shape):
            raise ValueError(f"Shapes {inputs[0].shape} and {inputs[1].shape} are incompatible")
        return inputs[0].shape.merge_with(inputs[1].shape), inputs[0].dtype
    return inputs[1].shape, inputs[0].dtype


register_op("VariableV2", infer=lambda inputs, a: (a["shape"], a["dtype"]),
            kernel=lambda state, op: _read_variable(state, op), stateful=True, uses_context=True,
            grad=None, kind="state", writes_state=False)
def _value_or_default(state, op, ref, default):
    return state.variables.get(op.inputs[0].op.name, default)


_STATE_OP = dict(stateful=True, uses_context=True, ref_inputs=(0,))
_ASSIGN = dict(_STATE_OP, kind="state")
# the row scatters are "opaque": a loop over the updates writing only the named rows
_SCATTER = dict(_STATE_OP, kind="opaque", updates_variable="read_write")
# host-only: they read the Session's store itself (whether the variable is there)
_STATUS_QUERY = dict(_STATE_OP, kind="opaque", host_only=True, writes_state=False)
register_op("Assign", infer=_assign_infer, kernel=_assign, updates_variable="overwrite",
            **_ASSIGN)
register_op("AssignAdd", infer=_ref_infer, kernel=_assign_update(1),
            updates_variable="read_write", **_ASSIGN)
register_op("AssignSub", infer=_ref_infer, kernel=_assign_update(-1),
            updates_variable="read_write", **_ASSIGN)
register_op("ScatterUpdate", infer=_scatter_infer, kernel=_scatter(_scatter_set), **_SCATTER)
register_op("ScatterAdd", infer=_scatter_infer,
            kernel=_scatter(lambda new, i, rows: np.add.at(new, i, rows)), **_SCATTER)
register_op("ScatterSub", infer=_scatter_infer,
            kernel=_scatter(lambda new, i, rows: np.subtract.at(new, i, rows)), **_SCATTER)
register_op("IsVariableInitialized", infer=lambda inputs, a: (TensorShape([]), dtypes.bool),
            kernel=lambda state, op, ref: np.bool_(op.inputs[0].op.name in state.variables),
            **_STATUS_QUERY)
register_op("VariableValueOrDefault", infer=lambda inputs, a: (inputs[1].shape, inputs[1].dtype),
            kernel=_value_or_default, **_STATUS_QUERY)


def _count_up_to(state, op, ref):
    """The variable's value, then the variable + 1; OutOfRangeError once it reached limit
    (TF1's CountUpTo: how limit_epochs ends an input)."""
    var_op = op.inputs[0].op
    old = _read_variable(state, var_op)
    if old >= op.attrs["limit"]:
        raise errors.KernelError(f"Reached limit of {op.attrs['limit']}",
                                 errors.OutOfRangeError)
    _store(state, var_op, old + 1)
    return np.array(old)


def _count_up_to_infer(inputs, a):
    ref, = inputs
    if ref.op.type != "VariableV2" or ref.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"count_up_to needs an int32 or int64 variable, got {ref.name} "
                        f"({ref.dtype.name})")
    if ref.shape.ndims not in (None, 0):
        raise ValueError(f"count_up_to needs a scalar variable, got shape {ref.shape}")
    return TensorShape([]), ref.dtype


# host-only: reaching the limit raises OutOfRangeError, which native code cannot signal
register_op("CountUpTo", infer=_count_up_to_infer, kernel=_count_up_to, kind="opaque",
            host_only=True, updates_variable="read_write", **_STATE_OP)
not_differentiable("Assign", "AssignAdd", "AssignSub", "ScatterUpdate", "ScatterAdd",
                   "ScatterSub", "IsVariableInitialized",
                   "VariableValueOrDefault", "CountUpTo")


def count_up_to(ref, limit, name=None):
    """Increments the int variable ref and returns its value before; OutOfRangeError when
    that value has reached limit."""
    ref_t = ref._ref() if isinstance(ref, Variable) else ref
    return ref_t.graph.create_op("CountUpTo", [ref_t], {"limit": int(limit)},
                                 name or "CountUpTo").outputs[0]


def _ref_op(ref, op_type, value, use_locking, name, attrs=None):
    ref_t = ref._ref() if isinstance(ref, Variable) else ref
    value = convert_to_tensor(value, dtype=ref_t.dtype)
    return ref_t.graph.create_op(op_type, [ref_t, value], attrs, name or op_type).outputs[0]


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    out = _ref_op(ref, "Assign", value, use_locking, name,
                  {"validate_shape": validate_shape is not False})
    if validate_shape is False:
        _forget_static_shape(out.op.inputs[0])
    return out


def _forget_static_shape(var_t):
    """An assign with validate_shape=False gives the variable the value's shape: as in TF1
    its static shape, and its snapshot's, become unknown, so that what is built on it
    later takes its shape at run time (reads of it compile against the held shape)."""
    var_t.op._set_attr("shape", TensorShape(None))
    var_t._forget_shape()
    for op in var_t.consumers():
        if op.type == "Identity" and op.name == var_t.op.name + "/read":
            op.outputs[0]._forget_shape()


def assign_add(ref, value, use_locking=None, name=None):
    return _ref_op(ref, "AssignAdd", value, use_locking, name)


def assign_sub(ref, value, use_locking=None, name=None):
    return _ref_op(ref, "AssignSub", value, use_locking, name)


def _scatter_op(op_type, ref, indices, updates, name):
    ref_t = ref._ref() if isinstance(ref, Variable) else ref
    with ref_t.graph.as_default():
        indices = convert_to_tensor(indices, dtype_hint=dtypes.int32)
        updates = convert_to_tensor(updates, dtype=ref_t.dtype)
    return ref_t.graph.create_op(op_type, [ref_t, indices, updates], None,
                                 name or op_type).outputs[0]


def _scatter_slices(scatter, var, sparse_delta, name):
    """A Variable's scatter_* method: an IndexedSlices' rows into the variable."""
    from graphc.framework.indexed_slices import IndexedSlices
    if not isinstance(sparse_delta, IndexedSlices):
        raise TypeError(f"sparse_delta is not IndexedSlices: {sparse_delta}")
    return scatter(var, sparse_delta.indices, sparse_delta.values, name=name)


def scatter_update(ref, indices, updates, use_locking=True, name=None):
    """ref[indices[i]] = updates[i] (which of repeated indices wins is unspecified)."""
    return _scatter_op("ScatterUpdate", ref, indices, updates, name)


def scatter_add(ref, indices, updates, use_locking=False, name=None):
    """ref[indices[i]] += updates[i], repeated indices adding up."""
    return _scatter_op("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref, indices, updates, use_locking=False, name=None):
    """ref[indices[i]] -= updates[i], repeated indices adding up."""
    return _scatter_op("ScatterSub", ref, indices, updates, name)


class Variable:
    """tf.compat.v1.Variable (a RefVariable): state held by the Session between runs."""

    def __init__(self, initial_value=None, trainable=True, collections=None, validate_shape=True,
                 caching_device=None, name=None, variable_def=None, dtype=None,
                 expected_shape=None, import_scope=None, constraint=None, use_resource=None,
                 synchronization=None, aggregation=None, shape=None):
        if initial_value is None:
            raise ValueError("initial_value must be specified.")
        g = get_default_graph()
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        collections = list(collections)
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        with g.name_scope(name or "Variable") as scope:
            # TF's names: a value becomes <var>/initial_value; a callable's ops go under
            # <var>/Initializer (tf.zeros there makes <var>/Initializer/zeros)
            with g.control_dependencies(None):
                if callable(initial_value):
                    with g.name_scope("Initializer"):
                        init = convert_to_tensor(initial_value(), dtype=dtype,
                                                 name="initial_value")
                else:
                    init = convert_to_tensor(initial_value, dtype=dtype, name="initial_value")
            var_shape = as_shape(shape) if shape is not None else (
                init.shape if validate_shape else TensorShape(None))
            with g.name_scope(None), g.control_dependencies(None):
                self._variable = g.create_op("VariableV2", [], {"shape": var_shape,
                                                                "dtype": init.dtype},
                                             scope).outputs[0]
            self._initial_value = init
            with g.control_dependencies(None):
                # not assign(): the shape declared here stays the variable's static shape
                self._initializer_op = _ref_op(self._variable, "Assign", init, None, "Assign",
                                               {"validate_shape": validate_shape is not False}).op
                self._snapshot = control_flow_ops.identity(self._variable, name="read")
        self._trainable = trainable
        self.constraint = constraint
        self._save_slice_info = None
        g.add_to_collections(collections, self)

    # -------------------------------------------------------------- properties
    name = property(lambda self: self._variable.name)
    op = property(lambda self: self._variable.op)
    graph = property(lambda self: self._variable.graph)
    dtype = property(lambda self: self._variable.dtype)
    shape = property(lambda self: self._variable.shape)
    device = property(lambda self: self._variable.device)
    initializer = property(lambda self: self._initializer_op)
    initial_value = property(lambda self: self._initial_value)
    trainable = property(lambda self: self._trainable)

    def get_shape(self):
        return self.shape

    def value(self):
        return self._snapshot

    def _ref(self):
        return self._variable

    def _as_tensor(self):
        # as TF2's compat.v1 variables: converted inside a control_dependencies block, the
        # variable is read there, after the block's control inputs (its snapshot may run
        # before them and miss an assign the block waits for)
        # (the default graph's block: inside a cond or loop body, the body's)
        if get_default_graph()._current_control_inputs():
            return self.read_value()
        return self._snapshot

    def _as_graph_element(self):
        return self._variable

    def read_value(self):
        return control_flow_ops.identity(self._variable, name="read")

    def initialized_value(self):
        """The variable's value once initialized, else its initial value (for chained inits)."""
        with self.graph.control_dependencies(None):
            return self.graph.create_op("VariableValueOrDefault",
                                        [self._variable, self._initial_value],
                                        name=self.op.name + "/initialized_value").outputs[0]

    def assign(self, value, use_locking=False, name=None, read_value=True):
        out = assign(self._variable, value, use_locking=use_locking, name=name)
        return out if read_value else out.op

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        out = assign_add(self._variable, delta, use_locking=use_locking, name=name)
        return out if read_value else out.op

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        out = assign_sub(self._variable, delta, use_locking=use_locking, name=name)
        return out if read_value else out.op

    def count_up_to(self, limit):
        return count_up_to(self, limit)

    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        return _scatter_slices(scatter_add, self, sparse_delta, name)

    def scatter_sub(self, sparse_delta, use_locking=False, name=None):
        return _scatter_slices(scatter_sub, self, sparse_delta, name)

    def scatter_update(self, sparse_delta, use_locking=False, name=None):
        return _scatter_slices(scatter_update, self, sparse_delta, name)

    def eval(self, session=None):
        return self._variable.eval(session=session)

    def load(self, value, session=None):
        sess = session_for(session, self.graph)
        arr = np.asarray(value, dtype=self.dtype.np)
        if not self.shape.is_compatible_with(arr.shape):
            raise ValueError(f"Cannot load value of shape {arr.shape} into variable "
                             f"{self.op.name} of shape {self.shape}")
        _store(sess._state, self.op, arr)

    def set_shape(self, shape):
        self._variable.set_shape(shape)

    def __repr__(self):
        return (f"<gc.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>")

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __bool__(self):
        raise TypeError("Using a `gc.Variable` as a Python `bool` is not allowed.")

    def __iter__(self):
        return iter(self._as_tensor())

    def __len__(self):
        return len(self._snapshot)


def _delegate(name):
    def method(self, *args):
        return getattr(self._as_tensor(), name)(*args)
    method.__name__ = name
    return method


for _name in ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
              "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__abs__", "__lt__", "__le__",
              "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__xor__",
              "__invert__", "__getitem__"]:
    setattr(Variable, _name, _delegate(_name))


def global_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def local_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def trainable_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def model_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    if not var_list:
        return control_flow_ops.no_op(name=name)
    return control_flow_ops.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init")


# the pre-1.0 names that early tutorials still call
initialize_all_variables = global_variables_initializer
initialize_local_variables = local_variables_initializer
initialize_variables = variables_initializer
all_variables = global_variables  # deprecated in TF 1.0, kept through 1.x


def is_variable_initialized(variable):
    ref = variable._ref() if isinstance(variable, Variable) else variable
    return ref.graph.create_op("IsVariableInitialized", [ref],
                               name="IsVariableInitialized").outputs[0]


def _names_kernel(*flags, names):
    return np.array([n for n, f in zip(names, flags) if not f], dtype=object)


register_op("UninitializedNames", infer=lambda inputs, a: (TensorShape([None]), dtypes.string),
            kernel=_names_kernel, kind="opaque", host_only=True)


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    """A 1-D string tensor with the names of the variables not yet initialized."""
    var_list = global_variables() + local_variables() if var_list is None else var_list
    g = get_default_graph()
    with g.name_scope(name):
        flags = [is_variable_initialized(v) for v in var_list]
        return g.create_op("UninitializedNames", flags, {"names": [v.op.name for v in var_list]},
                           "UninitializedNames").outputs[0]

