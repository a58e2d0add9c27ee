"""RNN cells of gc.nn.rnn_cell (TF1's rnn_cell_impl): the same gate orders, variable names
and variable scoping as TF1, so that weights transplanted from TF give the same results.

A cell creates its variables on its first call, inside a variable scope named after its
class ("basic_lstm_cell", uniquified like TF's layers) opened within the variable scope
current at that first call; later calls reuse them. Wrappers (DropoutWrapper,
ResidualWrapper) add no scope of their own, as in TF1.
"""
import collections
import re

from graphc import dtypes
from graphc.framework.graph import Tensor, name_scope
from graphc.ops import array_ops, math_ops, nn_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.matmul_ops import matmul
from graphc.variable_scope import get_variable, get_variable_scope, variable_scope

__all__ = ["RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell", "MultiRNNCell",
           "DropoutWrapper", "ResidualWrapper", "LSTMStateTuple"]


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """(c, h): the cell state and the output/hidden state of an LSTM."""
    __slots__ = ()

    @property
    def dtype(self):
        if self.c.dtype != self.h.dtype:
            raise TypeError(f"Inconsistent internal state: {self.c.dtype} vs {self.h.dtype}")
        return self.c.dtype


# ----------------------------------------------------------------------------- nesting
def _is_sequence(x):
    return isinstance(x, (list, tuple))


def flatten(structure):
    """The leaves of a nest of tuples/lists, depth first (TF's nest.flatten)."""
    if not _is_sequence(structure):
        return [structure]
    return [leaf for part in structure for leaf in flatten(part)]


def pack_sequence_as(structure, leaves):
    """leaves (flat) rebuilt into the shape of `structure` (TF's nest.pack_sequence_as)."""
    leaves = iter(leaves)

    def build(s):
        if not _is_sequence(s):
            return next(leaves)
        parts = [build(p) for p in s]
        return type(s)(*parts) if hasattr(s, "_fields") else type(s)(parts)
    return build(structure)


def map_structure(fn, *structures):
    flat = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*flat)])


def _snake_case(name):
    """TF's layer naming: BasicLSTMCell -> basic_lstm_cell."""
    name = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _zero_state(size, batch_size, dtype):
    """zeros of [batch_size, size], batch_size an int or a scalar int tensor."""
    if isinstance(batch_size, Tensor):
        dims = array_ops.stack([batch_size, constant(size, dtype=batch_size.dtype)])
        zeros = array_ops.zeros(dims, dtype)
        zeros.set_shape([None, size])
        return zeros
    return array_ops.zeros([batch_size, size], dtype)


# ----------------------------------------------------------------------------- base cell
class RNNCell:
    """An RNN cell: __call__(inputs, state) -> (output, new_state).

    Subclasses define state_size, output_size, build(input_depth, dtype) (creating
    variables with self.add_variable) and call(inputs, state)."""

    def __init__(self, reuse=None, name=None, dtype=None):
        self._reuse = reuse
        self._base_name = name or _snake_case(type(self).__name__)
        self._dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self._outer_scope = None  # the variable scope current at the first call
        self._scope = None        # the cell's own scope, inside _outer_scope
        self.built = False

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    @property
    def name(self):
        return self._base_name

    @property
    def variables(self):
        return list(getattr(self, "_variables", []))

    trainable_variables = trainable_weights = weights = variables

    def build(self, input_depth, dtype):
        pass

    def call(self, inputs, state):
        raise NotImplementedError

    def add_variable(self, name, shape, initializer=None, dtype=None):
        var = get_variable(name, shape=shape, dtype=dtype or self._dtype,
                           initializer=initializer)
        self._variables = getattr(self, "_variables", []) + [var]
        return var

    add_weight = add_variable

    def __call__(self, inputs, state, scope=None):
        if scope is not None:
            with variable_scope(scope, reuse=True if self.built else self._reuse) as s:
                return self._build_and_call(inputs, state, s)
        if self._outer_scope is None:
            self._outer_scope = get_variable_scope()
        with variable_scope(self._outer_scope):
            if self._scope is None:
                with variable_scope(None, default_name=self._base_name) as s:
                    self._scope = s
            with variable_scope(self._scope, reuse=True if self.built else self._reuse) as s:
                return self._build_and_call(inputs, state, s)

    def _build_and_call(self, inputs, state, scope):
        inputs = convert_to_tensor(inputs)
        if not self.built:
            if self._dtype is None:
                self._dtype = inputs.dtype
            depth = inputs.shape.with_rank(2)[1].value if inputs.shape.ndims is not None \
                else None
            if depth is None:
                raise ValueError(f"Expected inputs.shape[-1] to be known, saw shape: "
                                 f"{inputs.shape}")
            self.build(depth, self._dtype)
            self.built = True
        return self.call(inputs, state)

    def zero_state(self, batch_size, dtype):
        with name_scope(type(self).__name__ + "ZeroState"):
            dtype = dtypes.as_dtype(dtype)
            return map_structure(lambda size: _zero_state(size, batch_size, dtype),
                                 self.state_size)

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        return self.zero_state(batch_size, dtype)


def _linear(args, kernel, bias):
    """concat(args, 1) @ kernel + bias: TF1's layout of the recurrent kernels."""
    x = args[0] if len(args) == 1 else array_ops.concat(args, 1)
    return nn_ops.bias_add(matmul(x, kernel), bias)


def _zeros_init(dtype):
    from graphc import init_ops
    return init_ops.zeros_initializer(dtype=dtype)


# ----------------------------------------------------------------------------- cells
class BasicRNNCell(RNNCell):
    """output = new_state = activation(W [inputs, state] + b)."""

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(reuse=reuse, name=name, dtype=dtype)
        self._num_units = num_units
        self._activation = activation or math_ops.tanh

    state_size = output_size = property(lambda self: self._num_units)

    def build(self, input_depth, dtype):
        self._kernel = self.add_variable("kernel", [input_depth + self._num_units,
                                                    self._num_units])
        self._bias = self.add_variable("bias", [self._num_units], _zeros_init(dtype))

    def call(self, inputs, state):
        output = self._activation(_linear([inputs, state], self._kernel, self._bias))
        return output, output


def _split_state(state, sizes, state_is_tuple):
    """(c, h) of an LSTM state given as a tuple or as the concatenation [c, h]."""
    if state_is_tuple:
        return state
    return array_ops.split(state, list(sizes), axis=1)


def _join_state(c, h, state_is_tuple):
    return LSTMStateTuple(c, h) if state_is_tuple else array_ops.concat([c, h], 1)


class BasicLSTMCell(RNNCell):
    """TF1's BasicLSTMCell: gates i, j, f, o from one matmul of [inputs, h]; no peepholes."""

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None,
                 reuse=None, name=None, dtype=None):
        super().__init__(reuse=reuse, name=name, dtype=dtype)
        self._num_units = num_units
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or math_ops.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    output_size = property(lambda self: self._num_units)

    def build(self, input_depth, dtype):
        n = self._num_units
        self._kernel = self.add_variable("kernel", [input_depth + n, 4 * n])
        self._bias = self.add_variable("bias", [4 * n], _zeros_init(dtype))

    def call(self, inputs, state):
        c, h = _split_state(state, (self._num_units, self._num_units), self._state_is_tuple)
        gates = _linear([inputs, h], self._kernel, self._bias)
        i, j, f, o = array_ops.split(gates, 4, axis=1)
        forget_bias = constant(self._forget_bias, dtype=f.dtype)
        new_c = math_ops.add(math_ops.multiply(c, math_ops.sigmoid(math_ops.add(f, forget_bias))),
                             math_ops.multiply(math_ops.sigmoid(i), self._activation(j)))
        new_h = math_ops.multiply(self._activation(new_c), math_ops.sigmoid(o))
        return new_h, _join_state(new_c, new_h, self._state_is_tuple)


class LSTMCell(RNNCell):
    """TF1's LSTMCell: optional peepholes (w_f_diag, w_i_diag, w_o_diag), cell clipping
    and an output projection ("projection/kernel") with optional clipping."""

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None,
                 num_proj=None, proj_clip=None, num_unit_shards=None, num_proj_shards=None,
                 forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None):
        super().__init__(reuse=reuse, name=name, dtype=dtype)
        if num_unit_shards is not None or num_proj_shards is not None:
            raise ValueError("num_unit_shards and num_proj_shards (partitioned variables) "
                             "are not supported")
        self._num_units = num_units
        self._use_peepholes = use_peepholes
        self._cell_clip = cell_clip
        self._initializer = initializer
        self._num_proj = num_proj
        self._proj_clip = proj_clip
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or math_ops.tanh

    @property
    def _h_depth(self):
        return self._num_proj or self._num_units

    @property
    def state_size(self):
        if self._state_is_tuple:
            return LSTMStateTuple(self._num_units, self._h_depth)
        return self._num_units + self._h_depth

    output_size = property(lambda self: self._h_depth)

    def build(self, input_depth, dtype):
        n, init = self._num_units, self._initializer
        self._kernel = self.add_variable("kernel", [input_depth + self._h_depth, 4 * n], init)
        self._bias = self.add_variable("bias", [4 * n], _zeros_init(dtype))
        if self._use_peepholes:
            self._w_f_diag = self.add_variable("w_f_diag", [n], init)
            self._w_i_diag = self.add_variable("w_i_diag", [n], init)
            self._w_o_diag = self.add_variable("w_o_diag", [n], init)
        if self._num_proj is not None:
            self._proj_kernel = self.add_variable("projection/kernel", [n, self._num_proj], init)

    def call(self, inputs, state):
        sigmoid, act = math_ops.sigmoid, self._activation
        c_prev, m_prev = _split_state(state, (self._num_units, self._h_depth),
                                      self._state_is_tuple)
        i, j, f, o = array_ops.split(_linear([inputs, m_prev], self._kernel, self._bias), 4,
                                     axis=1)
        f = f + self._forget_bias
        if self._use_peepholes:
            f = f + self._w_f_diag * c_prev
            i = i + self._w_i_diag * c_prev
        c = sigmoid(f) * c_prev + sigmoid(i) * act(j)
        if self._cell_clip is not None:
            c = math_ops.clip_by_value(c, -self._cell_clip, self._cell_clip)
        if self._use_peepholes:
            o = o + self._w_o_diag * c
        m = sigmoid(o) * act(c)
        if self._num_proj is not None:
            m = matmul(m, self._proj_kernel)
            if self._proj_clip is not None:
                m = math_ops.clip_by_value(m, -self._proj_clip, self._proj_clip)
        return m, _join_state(c, m, self._state_is_tuple)


class GRUCell(RNNCell):
    """TF1's GRUCell: gates r, u = sigmoid(W_g [inputs, h] + b_g) (bias initialized to 1),
    candidate c = act(W_c [inputs, r * h] + b_c), new h = u * h + (1 - u) * c."""

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None,
                 bias_initializer=None, name=None, dtype=None):
        super().__init__(reuse=reuse, name=name, dtype=dtype)
        self._num_units = num_units
        self._activation = activation or math_ops.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    state_size = output_size = property(lambda self: self._num_units)

    def build(self, input_depth, dtype):
        from graphc import init_ops
        n, kinit, binit = self._num_units, self._kernel_initializer, self._bias_initializer
        self._gate_kernel = self.add_variable("gates/kernel", [input_depth + n, 2 * n], kinit)
        self._gate_bias = self.add_variable(
            "gates/bias", [2 * n], binit or init_ops.constant_initializer(1.0, dtype=dtype))
        self._candidate_kernel = self.add_variable("candidate/kernel", [input_depth + n, n],
                                                   kinit)
        self._candidate_bias = self.add_variable("candidate/bias", [n],
                                                 binit or _zeros_init(dtype))

    def call(self, inputs, state):
        gates = math_ops.sigmoid(_linear([inputs, state], self._gate_kernel, self._gate_bias))
        r, u = array_ops.split(gates, 2, axis=1)
        candidate = self._activation(_linear([inputs, r * state], self._candidate_kernel,
                                             self._candidate_bias))
        new_h = u * state + (1 - u) * candidate
        return new_h, new_h


class MultiRNNCell(RNNCell):
    """Cells stacked: the output of cell k is the input of cell k+1; each cell's variables
    live under "multi_rnn_cell/cell_k/"."""

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        if not cells:
            raise ValueError("Must specify at least one cell for MultiRNNCell.")
        self._cells = list(cells)
        self._state_is_tuple = state_is_tuple
        if not state_is_tuple and any(_is_sequence(c.state_size) for c in self._cells):
            raise ValueError("Some cells return tuples of states, but the flag "
                             "state_is_tuple is not set.")

    @property
    def state_size(self):
        if self._state_is_tuple:
            return tuple(cell.state_size for cell in self._cells)
        return sum(cell.state_size for cell in self._cells)

    output_size = property(lambda self: self._cells[-1].output_size)

    @property
    def variables(self):
        return [v for cell in self._cells for v in cell.variables]

    trainable_variables = trainable_weights = weights = variables

    def zero_state(self, batch_size, dtype):
        if not self._state_is_tuple:
            return super().zero_state(batch_size, dtype)
        with name_scope("MultiRNNCellZeroState"):
            return tuple(cell.zero_state(batch_size, dtype) for cell in self._cells)

    def call(self, inputs, state):
        if self._state_is_tuple:
            if not _is_sequence(state) or len(state) != len(self._cells):
                raise ValueError(f"Expected state to be a tuple of length "
                                 f"{len(self._cells)}, but received: {state}")
            states = list(state)
        else:
            states = array_ops.split(state, [c.state_size for c in self._cells], axis=1)
        x, new_states = inputs, []
        for k, (cell, cell_state) in enumerate(zip(self._cells, states)):
            with variable_scope(f"cell_{k}"):
                x, new_state = cell(x, cell_state)
            new_states.append(new_state)
        if self._state_is_tuple:
            return x, tuple(new_states)
        return x, array_ops.concat(new_states, 1)


# ----------------------------------------------------------------------------- wrappers
class _Wrapper(RNNCell):
    """A cell around another cell, adding no variable scope of its own."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    state_size = property(lambda self: self.cell.state_size)
    output_size = property(lambda self: self.cell.output_size)
    variables = trainable_variables = trainable_weights = weights = property(
        lambda self: self.cell.variables)

    def zero_state(self, batch_size, dtype):
        return self.cell.zero_state(batch_size, dtype)


def _is_constant_one(value):
    return isinstance(value, (int, float)) and value == 1


class DropoutWrapper(_Wrapper):
    """Dropout on the inputs, outputs and (except an LSTM's c) the state of a cell, with a
    fresh mask every step (variational_recurrent=False)."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None):
        super().__init__(cell)
        if variational_recurrent:
            raise ValueError("variational_recurrent=True is not supported")
        for p in (input_keep_prob, output_keep_prob, state_keep_prob):
            if isinstance(p, (int, float)) and not 0 < p <= 1:
                raise ValueError(f"Parameter keep_prob must be between 0 and 1: {p}")
        self._input_keep_prob = input_keep_prob
        self._output_keep_prob = output_keep_prob
        self._state_keep_prob = state_keep_prob
        self._seed = seed

    def _dropout(self, values, keep_prob, salt):
        seed = None if self._seed is None else self._seed + salt
        return map_structure(lambda v: nn_ops.dropout(v, keep_prob, seed=seed), values)

    def __call__(self, inputs, state, scope=None):
        if not _is_constant_one(self._input_keep_prob):
            inputs = self._dropout(inputs, self._input_keep_prob, 0)
        output, new_state = self.cell(inputs, state, scope=scope)
        if not _is_constant_one(self._state_keep_prob):
            new_state = self._drop_state(new_state)
        if not _is_constant_one(self._output_keep_prob):
            output = self._dropout(output, self._output_keep_prob, 2)
        return output, new_state

    def _drop_state(self, state):
        # TF1's default filter: an LSTM's memory c is never dropped, everything else is.
        if isinstance(state, LSTMStateTuple):
            return LSTMStateTuple(state.c, self._dropout(state.h, self._state_keep_prob, 1))
        if _is_sequence(state):
            return type(state)(self._drop_state(s) for s in state)
        return self._dropout(state, self._state_keep_prob, 1)


class ResidualWrapper(_Wrapper):
    """output = cell output + inputs."""

    def __init__(self, cell, residual_fn=None):
        super().__init__(cell)
        self._residual_fn = residual_fn or (lambda inputs, outputs: map_structure(
            math_ops.add, inputs, outputs))

    def __call__(self, inputs, state, scope=None):
        output, new_state = self.cell(inputs, state, scope=scope)
        return self._residual_fn(inputs, output), new_state
