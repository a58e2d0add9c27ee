"""Tracing Python functions into FuncGraphs and running them with the reference kernels.

trace() builds a body (framework/func_graph.py); run_function() is how the reference
executor runs one: a ReferenceExecutable of the body's ops, built once per set of
fetched tensors, fed the body's input placeholders. An error inside a body is the body
op's own (it names that op and the user's line that created it).
"""
import numpy as np

from graphc.framework.func_graph import FuncGraph
from graphc.framework.graph import Operation, get_default_graph


def trace(name, fn, arg_specs=(), forward_graphs=()):
    """(FuncGraph, fn's result): fn called on placeholders of `arg_specs` ((shape, dtype)
    pairs) inside a new body named after `name` (made unique in the current graph)."""
    outer = get_default_graph()
    fgraph = FuncGraph(outer.unique_name(name), outer, forward_graphs)
    outer._functions[fgraph.name] = fgraph
    with fgraph.as_default():
        from graphc.ops.constant_ops import placeholder
        with fgraph.name_scope(None), fgraph.control_dependencies(None):
            fgraph.inputs = [placeholder(dtype, shape, name=f"{fgraph.name}/arg")
                             for shape, dtype in arg_specs]
        result = fn(*fgraph.inputs) if fn is not None else None
    return fgraph, result


def set_outputs(fgraph, leaves):
    """Makes `leaves` (tensors, values, Operations, IndexedSlices) the body's outputs, as
    tensors of the body; an Operation becomes a constant that waits for it."""
    from graphc.ops.constant_ops import constant, convert_to_tensor
    outputs = []
    with fgraph.as_default():
        for leaf in leaves:
            if isinstance(leaf, Operation):
                with fgraph.control_dependencies([leaf]):
                    t = constant(True, name="control_output")
            else:
                t = convert_to_tensor(leaf)
            outputs.append(fgraph.capture(t))
    fgraph.outputs = outputs
    return outputs


def run_function(state, fgraph, args, extra_fetches=()):
    """The values of the body's outputs (then of `extra_fetches`, its tensors) for the
    argument arrays `args` (one per fgraph.inputs)."""
    from graphc.reference_executor import ReferenceExecutable
    fetches = tuple(fgraph.outputs) + tuple(extra_fetches)
    exe = fgraph._executables.get(fetches)
    if exe is None:
        exe = fgraph._executables[fetches] = ReferenceExecutable(fgraph.inputs, fetches, [])
    return exe.run([np.asarray(a) for a in args], state)


def zeros_of_static_shape(shape, dtype):
    """A stand-in value of a tensor that was not computed: zeros of its static shape, an
    unknown dim taken as 0 (an unknown rank as a scalar)."""
    dims = shape.as_list() if shape.ndims is not None else []
    return np.zeros([0 if d is None else d for d in dims], dtype.np)


def zeros_for_gradient(t):
    """Zeros of t's shape (a gradient that is none); for a variable, from its static
    shape, without reading it."""
    from graphc.ops.array_ops import zeros, zeros_like
    if t.op.type == "VariableV2" and t.shape.is_fully_defined():
        return zeros(t.shape.as_list(), t.dtype)
    return zeros_like(t)
