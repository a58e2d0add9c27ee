"""Runs a Module with the ops' NumPy reference kernels: the oracle for every pass.

Same semantics as graphc/reference_executor.py (it runs each node through that module's
`run_kernel`, so variables, random generators and errors behave identically), plus checks
of the IR itself: the feeds must satisfy the module's guards, and every value's actual
shape must equal its dims evaluated at this run's symbol values (a dynamic, data-dependent
dim is not checked).
"""
import numpy as np

from graphc import errors
from graphc.compiler.ir import PARAMETER, Value, format_type
from graphc.framework.op_kernel import SessionState, run_kernel
from graphc.framework.symbolic import SymDim, check_guards, evaluate_json


class GuardError(ValueError):
    """The feeds do not satisfy the guards the module was compiled under."""


def symbol_values(module, feed_arrays):
    """{symbol: its size in these feeds}, as the runtime reads them."""
    return {s: int(np.shape(feed_arrays[i])[axis]) for s, (i, axis) in module.symbols.items()}


def interpret(module, feed_arrays, state, check_shapes=True):
    """Runs `module`; returns the output arrays in order.

    feed_arrays: one array per Parameter, in feed order. state: a SessionState, or a dict
    {variable name: array} that assigns update in place. check_shapes: check the guards
    and every value's shape against its symbolic dims."""
    if isinstance(state, dict):
        variables, state = state, SessionState()
        state.variables = variables
    feed_arrays = [np.asarray(a) for a in feed_arrays]
    env = symbol_values(module, feed_arrays) if check_shapes else None
    if check_shapes:
        failed = check_guards(module.guards, env)
        if failed:
            raise GuardError(f"{module.name} does not hold for symbol values {env}: it was "
                             f"compiled under the guards {failed}")
    values = {}
    for node in module.nodes:
        if node.type == PARAMETER:
            outs = [feed_arrays[node.attrs["index"]].astype(node.outputs[0].dtype.np, copy=False)]
        else:
            args = [values[v] if isinstance(v, Value) else None for v in node.inputs]
            outs = run_kernel(node, args, state)
        for v, arr in zip(node.outputs, outs):
            if check_shapes:
                _check_dims(node, v, np.shape(arr), env)
            values[v] = arr
    return [values[v] for v in module.outputs]


def _check_dims(node, value, shape, env):
    if value.dims is None:
        return
    want = tuple(evaluate_json(d.to_json(), env) if isinstance(d, SymDim) else d
                 for d in value.dims)
    if len(shape) != len(want) or any(w is not None and w != n for w, n in zip(want, shape)):
        raise _ir_error(node, f"{value.ref} has shape {shape}, the IR says "
                              f"{format_type(value.dtype, value.dims)} = {want} for {env}")


def _ir_error(node, message):
    return errors.InternalError(None, node, f"{message} (a compiler bug)\n\t [[node "
                                            f"{node.describe()}]]")
