"""NoOp, Identity, group, tuple, CheckNumerics and Assert; cond, case, switch_case and
while_loop (functional If and While ops: cond_v2.py, while_v2.py)."""
import builtins

import numpy as np

from graphc import errors
from graphc.framework.graph import Operation, Tensor, get_default_graph
from graphc.framework.op_def import register_op
from graphc.ops.constant_ops import convert_to_tensor

register_op("NoOp", infer=lambda inputs, a: [], kernel=lambda: (), kind="control")
register_op("Identity", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
            kernel=lambda x: x, grad=lambda op, g: [g], kind="elementwise", forwards_input=True)


def no_op(name=None):
    return get_default_graph().create_op("NoOp", [], name=name or "NoOp")


def identity(input, name=None):
    x = convert_to_tensor(input)
    return x.graph.create_op("Identity", [x], name=name or "Identity").outputs[0]


def group(*inputs, name=None):
    """An op that runs all `inputs` (ops or tensors)."""
    deps = []
    for i in inputs:
        if isinstance(i, (list, builtins.tuple)):
            deps.extend(i)
        else:
            deps.append(i)
    g = get_default_graph()
    for d in deps:
        d = getattr(d, "_as_graph_element", lambda: d)()
        if isinstance(d, (Tensor, Operation)):
            g = d.graph
            break
    with g.as_default(), g.control_dependencies(deps):
        return no_op(name=name or "group_deps")


def tuple(tensors, name=None, control_inputs=None):  # noqa: A001 - TF's name
    """Identities of `tensors` that are available only after all of them are computed
    (an IndexedSlices stays one, its values and indices gated)."""
    deps = [p for t in tensors if t is not None for p in _parts(t)]
    deps += list(control_inputs or [])
    with get_default_graph().name_scope(name or "tuple"):
        gate = group(*deps)
        with get_default_graph().control_dependencies([gate]):
            return [None if t is None else _gated(t) for t in tensors]


def _parts(t):
    return [t.values, t.indices] if hasattr(t, "indices") else [t]


def _gated(t):
    if not hasattr(t, "indices"):
        return identity(t)
    return type(t)(identity(t.values), identity(t.indices), t.dense_shape)


def _check_numerics_kernel(x, message):
    if x.dtype.kind == "f":
        if np.isnan(x).any():
            raise errors.KernelError(f"{message} : Tensor had NaN values")
        if np.isinf(x).any():
            raise errors.KernelError(f"{message} : Tensor had Inf values")
    return x


def _float_only(inputs, a):
    if not inputs[0].dtype.is_floating:
        raise TypeError(f"check_numerics expects a floating point tensor, got {inputs[0].dtype.name}")
    return inputs[0].shape, inputs[0].dtype


register_op("CheckNumerics", infer=_float_only, kernel=_check_numerics_kernel, kind="elementwise",
            grad=lambda op, g: [check_numerics(g, "Not a number (NaN) or infinity (Inf) values "
                                                  "detected in gradient. " + op.attrs["message"])])


def check_numerics(tensor, message, name=None):
    x = convert_to_tensor(tensor)
    return x.graph.create_op("CheckNumerics", [x], {"message": message},
                             name or "CheckNumerics").outputs[0]


def add_check_numerics_ops():
    """A group op that checks every floating-point tensor of the default graph."""
    g = get_default_graph()
    checks = []
    for op in g.get_operations():
        for t in op.outputs:
            if t.dtype.is_floating and op.type != "CheckNumerics":
                with g.control_dependencies(checks[-1:]):
                    checks.append(check_numerics(t, f"{op.name}:{t.value_index}").op)
    return group(*checks)


def _assert_kernel(condition, *data, message, summarize):
    if not bool(np.all(condition)):
        values = ", ".join(np.array2string(np.asarray(d).reshape(-1)[:summarize], separator=" ")
                           for d in data)
        raise errors.KernelError(f"assertion failed: [{message}]" +
                                 (f" [{values}]" if values else ""))
    return ()


def _assert_infer(inputs, a):
    if inputs[0].dtype.name != "bool":
        raise TypeError(f"Assert's condition must be a bool tensor, got {inputs[0].dtype.name}")
    return []


# host_only: it formats its data tensors into the error message on the host
register_op("Assert", infer=_assert_infer, kernel=_assert_kernel, stateful=True,
            kind="opaque", host_only=True, writes_state=False)


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TF's name
    """An op failing with InvalidArgumentError (the strings of `data`, then its tensors'
    values) when `condition` is false; run it through a control dependency."""
    cond_t = convert_to_tensor(condition)
    texts = [d for d in data if isinstance(d, str)]
    tensors = [convert_to_tensor(d) for d in data if not isinstance(d, str)]
    return cond_t.graph.create_op("Assert", [cond_t] + tensors,
                                  {"message": " ".join(texts), "summarize": summarize or 3},
                                  name or "Assert")
