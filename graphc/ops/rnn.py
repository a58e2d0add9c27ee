"""RNNs unrolled statically over a Python list of time steps: gc.nn.static_rnn,
static_bidirectional_rnn, and dynamic_rnn for inputs whose number of steps is known
when the graph is built (it is unrolled the same way; there is no while loop).

With sequence_length, a step at or past an example's length outputs zeros and passes
that example's state through unchanged, as TF1's _rnn_step does (TF skips the cell
with a cond when every example is done; here the select alone gives the same values).
"""
from graphc import dtypes
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.rnn_cell import flatten, map_structure, pack_sequence_as
from graphc.variable_scope import variable_scope

__all__ = ["static_rnn", "static_bidirectional_rnn", "dynamic_rnn"]


def _with_rank_at_least(shape, rank):
    if shape.ndims is None:
        return TensorShape([None] * rank)
    if shape.ndims < rank:
        raise ValueError(f"Shape {shape} must have rank at least {rank}")
    return shape


def _batch_size(inputs):
    """The static batch size (int) of the steps, else the first step's dynamic one."""
    first = flatten(inputs[0])[0]
    batch = TensorShape([None])
    for step in inputs:
        for x in flatten(step):
            shape = _with_rank_at_least(x.shape, 2)
            batch = batch.merge_with(shape[:1])
            if not shape[1:].is_fully_defined():
                raise ValueError("Input size (dimension 1 of inputs) must be accessible via "
                                 f"shape inference, but saw value None (shape {shape}).")
    if batch[0].value is not None:
        return batch[0].value
    return array_ops.shape(first)[0]


def _initial_state(cell, initial_state, batch_size, dtype):
    if initial_state is not None:
        return initial_state
    if not dtype:
        raise ValueError("If no initial_state is provided, dtype must be specified")
    return cell.zero_state(batch_size, dtype)


def _sequence_length(sequence_length):
    lengths = convert_to_tensor(sequence_length, name="sequence_length")
    if lengths.shape.ndims not in (None, 1):
        raise ValueError("sequence_length must be a vector of length batch_size")
    return math_ops.cast(lengths, dtypes.int32)


def _masked_step(time, lengths, output, new_state, state):
    """Past each example's length: a zero output and the old state."""
    done = math_ops.greater_equal(constant(time, dtype=dtypes.int32), lengths)
    output = map_structure(lambda o: math_ops.where(done, array_ops.zeros_like(o), o), output)
    state = map_structure(lambda old, new: math_ops.where(done, old, new), state, new_state)
    return output, state


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """Runs `cell` over `inputs` (a list of [batch, depth] tensors, or of nests of them);
    returns (outputs, final_state)."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("inputs must be a sequence")
    if not inputs:
        raise ValueError("inputs must not be empty")
    with variable_scope(scope or "rnn") as varscope:
        inputs = [map_structure(convert_to_tensor, x) for x in inputs]
        batch_size = _batch_size(inputs)
        state = _initial_state(cell, initial_state, batch_size, dtype)
        lengths = None if sequence_length is None else _sequence_length(sequence_length)
        outputs = []
        for time, x in enumerate(inputs):
            if time > 0:
                varscope.reuse_variables()
            output, new_state = cell(x, state)
            if lengths is None:
                state = new_state
            else:
                output, state = _masked_step(time, lengths, output, new_state, state)
            outputs.append(output)
        return outputs, state


def _reverse_seq(steps, lengths):
    """The steps reversed in time; with lengths, only each example's first length steps
    (TF's reverse_sequence on the time axis)."""
    if lengths is None:
        return list(reversed(steps))
    flat = [flatten(s) for s in steps]
    reversed_flat = [_reverse_by_length([f[k] for f in flat], lengths)
                     for k in range(len(flat[0]))]
    return [pack_sequence_as(steps[0], [r[t] for r in reversed_flat])
            for t in range(len(steps))]


def _reverse_by_length(steps, lengths):
    """Step t of example b is step len_b - 1 - t for t < len_b, else step t."""
    n = len(steps)
    lengths = math_ops.cast(lengths, dtypes.int32)
    t = array_ops.expand_dims(constant(list(range(n)), dtype=dtypes.int32), 1)  # [T, 1]
    source = math_ops.where(math_ops.less(t, lengths), lengths - 1 - t, t + 0 * lengths)
    batch_major = array_ops.stack(steps, axis=1)  # [B, T, depth]
    picked = array_ops.gather(batch_major, array_ops.transpose(source), axis=1, batch_dims=1)
    return [s for s in array_ops.unstack(picked, num=n, axis=1)]


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None,
                             initial_state_bw=None, dtype=None, sequence_length=None,
                             scope=None):
    """A forward and a backward static_rnn; returns (outputs, state_fw, state_bw) with each
    output the concatenation [forward, backward] on the last axis."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError("inputs must be a list")
    if not inputs:
        raise ValueError("inputs must not be empty")
    lengths = None if sequence_length is None else _sequence_length(sequence_length)
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            output_fw, state_fw = static_rnn(cell_fw, inputs, initial_state_fw, dtype,
                                             lengths, scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            reversed_inputs = _reverse_seq(list(inputs), lengths)
            tmp, state_bw = static_rnn(cell_bw, reversed_inputs, initial_state_bw, dtype,
                                       lengths, scope=bw_scope)
    output_bw = _reverse_seq(tmp, lengths)
    outputs = [map_structure(lambda fw, bw: array_ops.concat([fw, bw], 1), fw, bw)
               for fw, bw in zip(output_fw, output_bw)]
    return outputs, state_fw, state_bw


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """TF1's dynamic_rnn for inputs [batch, time, depth] (or [time, batch, depth] when
    time_major) whose number of time steps is static: unrolled like static_rnn.
    Returns (outputs stacked on the time axis, final_state)."""
    inputs = convert_to_tensor(inputs)
    shape = _with_rank_at_least(inputs.shape, 3)
    time_axis = 0 if time_major else 1
    steps = shape[time_axis].value
    if steps is None:
        raise ValueError("dynamic_rnn here unrolls the time axis, which must have a static "
                         f"size; inputs have shape {shape}")
    step_inputs = array_ops.unstack(inputs, num=steps, axis=time_axis)
    outputs, state = static_rnn(cell, step_inputs, initial_state, dtype, sequence_length,
                                scope)
    return map_structure(lambda *o: array_ops.stack(list(o), axis=time_axis), *outputs), state
