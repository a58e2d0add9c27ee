"""Runs a Module with the ops' NumPy reference kernels: the oracle for every pass.

Same semantics as graphc/reference_executor.py (it runs each node through that module's
`run_kernel`, so variables, random generators and errors behave identically), plus one
check of the IR itself: every symbolic dim is bound to a size the first time it is seen
and every later occurrence must have that size.
"""
import numpy as np

from graphc import errors
from graphc.compiler.ir import PARAMETER, Value
from graphc.reference_executor import SessionState, run_kernel


def interpret(module, feed_arrays, state):
    """Runs `module`; returns the output arrays in order.

    feed_arrays: one array per Parameter, in feed order. state: a SessionState, or a dict
    {variable name: array} that assigns update in place."""
    if isinstance(state, dict):
        variables, state = state, SessionState()
        state.variables = variables
    feed_arrays = [np.asarray(a) for a in feed_arrays]
    sizes = {}
    env = {}
    for node in module.nodes:
        if node.type == PARAMETER:
            outs = [feed_arrays[node.attrs["index"]].astype(node.outputs[0].dtype.np, copy=False)]
        else:
            args = [env[v] if isinstance(v, Value) else None for v in node.inputs]
            outs = run_kernel(node, args, state)
        for v, arr in zip(node.outputs, outs):
            _check_dims(node, v, np.shape(arr), sizes)
            env[v] = arr
    return [env[v] for v in module.outputs]


def _check_dims(node, value, shape, sizes):
    if value.dims is None:
        return
    if len(shape) != len(value.dims):
        raise _ir_error(node, f"{value.ref} has rank {len(shape)}, the IR says {value.dims}")
    for d, n in zip(value.dims, shape):
        if isinstance(d, int):
            ok = d == n
        else:
            ok = sizes.setdefault(d, n) == n
        if not ok:
            raise _ir_error(node, f"{value.ref} has shape {shape}, the IR says {value.dims} "
                                  f"(with {sizes})")


def _ir_error(node, message):
    return errors.InternalError(None, node, f"{message} (a compiler bug)\n\t [[node "
                                            f"{node.describe()}]]")
