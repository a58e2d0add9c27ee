"""ExponentialMovingAverage and assign_moving_average (TF1's tf.train.moving_averages).

apply(var_list) makes, for each variable (or tensor), a non-trainable shadow variable
"<name>/<EMA name>" (a variable's starts at the variable's initial value, a tensor's at
zeros) and returns one op updating each: shadow -= (1 - decay) * (shadow - value), with
decay = min(decay, (1 + n) / (10 + n)) when num_updates n is given.
"""
from graphc import dtypes
from graphc.framework.graph import GraphKeys, Tensor, get_default_graph, name_scope
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import group
from graphc.variables import Variable, global_variables, trainable_variables

__all__ = ["ExponentialMovingAverage", "assign_moving_average", "moving_average_variables"]

_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)


def assign_moving_average(variable, value, decay, zero_debias=True, name=None):
    """variable -= (1 - decay) * (variable - value); returns the updated value. zero_debias
    is TF1's default for this function; graphc does not do it, and says so."""
    if zero_debias:
        raise NotImplementedError(
            "assign_moving_average(zero_debias=True) is not supported by graphc; pass "
            "zero_debias=False (ExponentialMovingAverage uses False unless asked)")
    with name_scope(name, "AssignMovingAvg", [variable, value, decay]):
        decay = math_ops.cast(convert_to_tensor(decay, dtype_hint=variable.dtype),
                              variable.dtype)
        delta = (variable - convert_to_tensor(value, dtype=variable.dtype)) * (1 - decay)
        return variable.assign_sub(delta)


def moving_average_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def _op_name(var):
    return var.op.name


class ExponentialMovingAverage:
    def __init__(self, decay, num_updates=None, zero_debias=False,
                 name="ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("ExponentialMovingAverage(zero_debias=True) is not "
                                      "supported by graphc")
        self._decay = decay
        self._num_updates = num_updates
        self._name = name
        self._averages = {}  # the variable or tensor -> its shadow Variable

    @property
    def name(self):
        return self._name

    def _make_shadow(self, var):
        graph = var.graph
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
            if isinstance(var, Variable):
                initial = var.initialized_value
                shadow = Variable(initial, trainable=False, name=f"{_op_name(var)}/{self._name}",
                                  dtype=var.dtype)
                graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, var)
            else:
                if not var.shape.is_fully_defined():
                    raise ValueError(f"ExponentialMovingAverage: the shape of tensor {var.name} "
                                     f"must be fully defined, got {var.shape}")
                shadow = Variable(lambda: array_ops.zeros(var.shape.as_list(), var.dtype),
                                  trainable=False, name=f"{_op_name(var)}/{self._name}")
        return shadow

    def apply(self, var_list=None):
        """Creates the shadows of var_list (default: the trainable variables) and returns
        the op that moves each toward its variable's current value."""
        if var_list is None:
            var_list = trainable_variables()
        var_list = list(var_list)
        for var in var_list:
            if not isinstance(var, (Variable, Tensor)):
                raise TypeError(f"ExponentialMovingAverage.apply: {var!r} is not a Variable "
                                "or Tensor")
            if var.dtype not in _FLOATS:
                raise TypeError(f"The variables must be half, float, or double: {var.name}")
            if var in self._averages:
                raise ValueError(f"Moving average already computed for: {var.name}")
            self._averages[var] = self._make_shadow(var)
        with name_scope(self._name) as scope:
            decay = convert_to_tensor(self._decay, dtype_hint=dtypes.float32, name="decay")
            if self._num_updates is not None:
                n = math_ops.cast(self._num_updates, dtypes.float32, name="num_updates")
                decay = math_ops.minimum(math_ops.cast(decay, dtypes.float32),
                                         (1.0 + n) / (10.0 + n))
            updates = [assign_moving_average(self._averages[var], var, decay,
                                             zero_debias=False) for var in var_list]
            return group(*updates, name=scope)

    def average(self, var):
        """The shadow Variable of var, or None if apply() was not called with it."""
        return self._averages.get(var)

    def average_name(self, var):
        """The name of var's shadow (also when it does not exist yet: for restoring)."""
        return f"{_op_name(var)}/{self._name}"

    def variables_to_restore(self, moving_avg_variables=None):
        """{name in the checkpoint: variable}, mapping each moving-averaged variable to its
        shadow's name, so that a Saver built on it loads the averages into the model."""
        if moving_avg_variables is None:
            moving_avg_variables = trainable_variables() + moving_average_variables()
        averaged = list(dict.fromkeys(moving_avg_variables))
        name_map = {self.average_name(v): v for v in averaged}
        for v in global_variables():
            if v not in averaged and _op_name(v) not in name_map:
                name_map[_op_name(v)] = v
        return name_map
