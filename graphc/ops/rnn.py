"""RNNs: gc.nn.static_rnn and static_bidirectional_rnn unrolled over a Python list of time
steps; dynamic_rnn, bidirectional_dynamic_rnn and raw_rnn as one while_loop over the time
axis (its length may be known only at run time; the graph does not grow with it).

With sequence_length, a step at or past an example's length outputs zeros and passes
that example's state through unchanged, as TF1's _rnn_step does (TF skips the cell
with a cond when every example is done; here the select alone gives the same values),
so the final state is each example's state at its length.

A cell's variables are created before the loop (a first call of the cell, outside it,
whose other ops never run): variables cannot be created inside a loop body
(framework/func_graph.py), and TF1 names them the same way (rnn/<cell>/kernel).
"""
from graphc import dtypes
from graphc.framework import nest
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.rnn_cell import flatten, map_structure, pack_sequence_as
from graphc.variable_scope import variable_scope

__all__ = ["static_rnn", "static_bidirectional_rnn", "dynamic_rnn",
           "bidirectional_dynamic_rnn", "raw_rnn"]


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
        return _run_steps(cell, inputs, initial_state, dtype, sequence_length, varscope)


def _run_steps(cell, inputs, initial_state, dtype, sequence_length, varscope):
    """static_rnn's steps inside its variable scope `varscope`."""
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


def _to_time_major(x):
    """[batch, time, ...] -> [time, batch, ...] (and back: the same swap)."""
    perm = [1, 0] + list(range(2, x.shape.ndims))
    return array_ops.transpose(x, perm)


def _time_major_inputs(inputs, time_major):
    flat = [convert_to_tensor(x) for x in nest.flatten(inputs)]
    for x in flat:
        if x.shape.ndims is None or x.shape.ndims < 3:
            raise ValueError(f"dynamic_rnn: inputs must have rank at least 3 ([batch, time, "
                             f"depth], or [time, batch, depth] when time_major), got "
                             f"{x.shape} ({x.name})")
        if x.shape[2:].is_fully_defined() is False:
            raise ValueError("Input size (depth of inputs) must be accessible via shape "
                             f"inference, but saw value None (shape {x.shape}).")
    return flat if time_major else [_to_time_major(x) for x in flat]


def _element_dims(output, batch_size):
    """The dims of one step's output [batch, ...] as a tensor, from the batch size and
    the output's static dims when those are known (not computing the cell's first step
    for its shape)."""
    rest = output.shape[1:]
    if output.shape.ndims is None or not rest.is_fully_defined():
        return array_ops.shape(output)
    return array_ops.stack([batch_size] + rest.as_list())


def _build_cell(cell, step_inputs, state):
    """Creates the cell's variables outside the loop (see the module docstring); returns
    the structure of its output."""
    output, _ = cell(step_inputs, state)
    return output


# The loop compiles natively for inference on the CPU (graphc/compiler/regions.py), but a
# loop kept for a gradient (its stacks) still runs its body on the host's reference
# executor, 10-100x slower than compiled code. A sequence whose length is known when the
# graph is built, and at most this long, is unrolled instead (static_rnn: the same values
# and final state); longer or unknown lengths use the loop, whose graph does not grow with
# the length.
UNROLL_MAX_STEPS = 64


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """TF1's dynamic_rnn: the cell run over the time axis of `inputs` ([batch, time, depth],
    or [time, batch, depth] when time_major; a nest of such tensors) by one while_loop
    (unrolled for short static lengths: UNROLL_MAX_STEPS).
    Returns (outputs stacked on the time axis, final_state)."""
    from graphc.ops.tensor_array_ops import TensorArray
    from graphc.ops.while_v2 import while_loop
    with variable_scope(scope or "rnn") as varscope:
        flat = _time_major_inputs(inputs, time_major)
        steps = flat[0].shape[0].value
        if steps is not None and 0 < steps <= UNROLL_MAX_STEPS:
            return _unrolled_rnn(cell, inputs, flat, steps, sequence_length, initial_state,
                                 dtype, time_major, varscope)
        batch = flat[0].shape[1].value
        batch_size = batch if batch is not None else array_ops.shape(flat[0])[1]
        state = _initial_state(cell, initial_state, batch_size, dtype)
        lengths = None if sequence_length is None else _sequence_length(sequence_length)
        steps = array_ops.shape(flat[0])[0]
        inputs_tas = [TensorArray(x.dtype, size=steps, element_shape=x.shape[1:],
                                  element_dims=array_ops.shape(x)[1:],
                                  name="input_ta").unstack(x) for x in flat]
        out_structure = _build_cell(cell, nest.pack_sequence_as(inputs, [x[0] for x in flat]),
                                    state)
        flat_out = nest.flatten(out_structure)
        outputs_tas = [TensorArray(o.dtype, size=steps, element_shape=o.shape,
                                   element_dims=_element_dims(o, batch_size),
                                   name="output_ta")
                       for o in flat_out]

        def body(time, out_tas, state):
            x = nest.pack_sequence_as(inputs, [ta.read(time) for ta in inputs_tas])
            output, new_state = cell(x, state)
            if lengths is not None:
                output, new_state = _masked_time_step(time, lengths, output, new_state, state)
            out_tas = [ta.write(time, o) for ta, o in zip(out_tas, nest.flatten(output))]
            return time + 1, out_tas, new_state

        _, outputs_tas, final_state = while_loop(
            lambda time, out_tas, state: math_ops.less(time, steps), body,
            [0, outputs_tas, state], parallel_iterations=parallel_iterations or 32,
            swap_memory=swap_memory, maximum_iterations=steps)  # as TF1: sizes the stacks
        outputs = [_stacked_steps(ta, o, flat[0]) for ta, o in zip(outputs_tas, flat_out)]
        if not time_major:
            outputs = [_to_time_major(o) for o in outputs]
        return nest.pack_sequence_as(out_structure, outputs), final_state


def _unrolled_rnn(cell, inputs, flat, steps, sequence_length, initial_state, dtype,
                  time_major, varscope):
    """dynamic_rnn over `steps` known steps as static_rnn does them, in dynamic_rnn's
    variable scope `varscope`: flat holds the inputs time-major."""
    per_step = list(zip(*[array_ops.unstack(x, num=steps, axis=0) for x in flat]))
    step_inputs = [nest.pack_sequence_as(inputs, list(xs)) for xs in per_step]
    outputs, state = _run_steps(cell, step_inputs, initial_state, dtype, sequence_length,
                                varscope)
    axis = 0 if time_major else 1
    return map_structure(lambda *o: array_ops.stack(list(o), axis=axis), *outputs), state


def _stacked_steps(ta, step_output, first_input):
    """The outputs [time, batch, ...] of a TensorArray of steps, with the static time and
    batch sizes of the inputs (zero steps give [0, batch, ...])."""
    out = ta.stack()
    depth = step_output.shape[1:]
    if depth.is_fully_defined():  # zero steps: an empty stack knows no batch size
        out = array_ops.reshape(out, array_ops.concat(
            [array_ops.shape(first_input)[:2], constant(depth.as_list(), dtype=dtypes.int32)],
            0))
    out.set_shape(TensorShape([first_input.shape[0].value]).concatenate(step_output.shape))
    return out


def _masked_time_step(time, lengths, output, new_state, state):
    """_masked_step for a time step known at run time."""
    done = math_ops.greater_equal(time, lengths)
    output = map_structure(lambda o: math_ops.where(done, array_ops.zeros_like(o), o), output)
    state = map_structure(lambda old, new: math_ops.where(done, old, new), state, new_state)
    return output, state


def _reverse_time(x, lengths, time_axis):
    """x reversed along time_axis; with lengths, only each example's first length steps
    (TF's reverse_sequence), for a number of steps known at run time."""
    steps = array_ops.shape(x)[time_axis]
    t = array_ops.range(0, steps)
    if lengths is None:
        return array_ops.gather(x, math_ops.subtract(math_ops.subtract(steps, 1), t),
                                axis=time_axis)
    batch_major = x if time_axis == 1 else _to_time_major(x)
    t = array_ops.expand_dims(t, 1)  # [T, 1]
    source = math_ops.where(math_ops.less(t, lengths), lengths - 1 - t, t + 0 * lengths)
    picked = array_ops.gather(batch_major, array_ops.transpose(source), axis=1, batch_dims=1)
    return picked if time_axis == 1 else _to_time_major(picked)


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None,
                              initial_state_fw=None, initial_state_bw=None, dtype=None,
                              parallel_iterations=None, swap_memory=False, time_major=False,
                              scope=None):
    """A forward and a backward dynamic_rnn; returns ((output_fw, output_bw),
    (output_state_fw, output_state_bw)), the backward outputs back in input order."""
    lengths = None if sequence_length is None else _sequence_length(sequence_length)
    time_axis = 0 if time_major else 1
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            output_fw, state_fw = dynamic_rnn(cell_fw, inputs, lengths, initial_state_fw,
                                              dtype, parallel_iterations, swap_memory,
                                              time_major, scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            reversed_inputs = nest.map_structure(
                lambda x: _reverse_time(convert_to_tensor(x), lengths, time_axis), inputs)
            tmp, state_bw = dynamic_rnn(cell_bw, reversed_inputs, lengths, initial_state_bw,
                                        dtype, parallel_iterations, swap_memory, time_major,
                                        scope=bw_scope)
    output_bw = nest.map_structure(lambda o: _reverse_time(o, lengths, time_axis), tmp)
    return (output_fw, output_bw), (state_fw, state_bw)


def raw_rnn(cell, loop_fn, parallel_iterations=None, swap_memory=False, scope=None):
    """TF1's raw_rnn: loop_fn(time, cell_output, cell_state, loop_state) -> (finished,
    next_input, next_cell_state, emit_output, next_loop_state) drives the cell until every
    example is finished. Returns (emit_ta, final_state, final_loop_state); a finished
    example emits zeros and keeps its state."""
    from graphc.ops.tensor_array_ops import TensorArray
    from graphc.ops.while_v2 import while_loop
    if not callable(loop_fn):
        raise TypeError("loop_fn must be a callable")
    with variable_scope(scope or "rnn"):
        time = constant(0, dtype=dtypes.int32)
        finished, first_input, state, emit_structure, loop_state = loop_fn(time, None, None,
                                                                           None)
        finished = convert_to_tensor(finished)
        output = _build_cell(cell, first_input, state)
        emit_structure = output if emit_structure is None else emit_structure
        emit_tas = [TensorArray(e.dtype, size=0, dynamic_size=True, element_shape=e.shape,
                                name="rnn_output_ta") for e in nest.flatten(emit_structure)]
        no_loop_state = loop_state is None
        carried = constant(0) if no_loop_state else loop_state

        def body(time, finished, x, state, emit_tas, loop_state):
            output, cell_state = cell(x, state)
            nest.assert_same_structure(state, cell_state)
            nxt = loop_fn(time + 1, output, cell_state, None if no_loop_state else loop_state)
            next_finished, next_input, next_state, emit, next_loop_state = nxt
            emit = output if emit is None else emit
            emit = map_structure(
                lambda e: math_ops.where(finished, array_ops.zeros_like(e), e), emit)
            next_state = map_structure(lambda old, new: math_ops.where(finished, old, new),
                                       state, next_state)
            emit_tas = [ta.write(time, e) for ta, e in zip(emit_tas, nest.flatten(emit))]
            return (time + 1, math_ops.logical_or(finished, next_finished), next_input,
                    next_state, emit_tas, loop_state if no_loop_state else next_loop_state)

        from graphc.ops.reduction_ops import reduce_all
        result = while_loop(
            lambda time, finished, *rest: math_ops.logical_not(reduce_all(finished)), body,
            [time, finished, first_input, state, emit_tas, carried],
            parallel_iterations=parallel_iterations or 32, swap_memory=swap_memory)
        _, _, _, final_state, emit_tas, final_loop_state = result
        emit_ta = nest.pack_sequence_as(emit_structure, emit_tas)
        return emit_ta, final_state, None if no_loop_state else final_loop_state
