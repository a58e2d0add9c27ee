"""py_func / numpy_function: a Python function as an op, run on the host (a host stage
between native stages) with the inputs' NumPy arrays.

The function itself is not part of the graph (attrs hold plain data): it is kept in this
process's registry under a token the op names, as TF1 does, so a graph written to a file
and run elsewhere fails with a message naming the token. Its results must have the Tout
dtypes exactly (TF1 refuses a float64 result for a float32 output rather than casting);
an exception it raises becomes TF1's error class for that exception.
"""
import itertools

import numpy as np

from graphc import dtypes, errors
from graphc.errors import KernelError
from graphc.framework.graph import Tensor
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["py_func", "numpy_function"]

_functions = {}  # token -> the Python function of the PyFunc ops naming it
_tokens = itertools.count()

# TF1's FuncRegistry: the Python exception -> the error the op raises
_ERROR_OF = [(ValueError, errors.InvalidArgumentError), (TypeError, errors.InvalidArgumentError),
             (StopIteration, errors.OutOfRangeError),
             (NotImplementedError, errors.UnimplementedError),
             (MemoryError, errors.ResourceExhaustedError)]


def _py_func_infer(inputs, a):
    return [(TensorShape(None), dtypes.as_dtype(t)) for t in a["Tout"]]


def _results(token, value, tout):
    if value is None and not tout:
        return []
    if isinstance(value, (bytes, str)) or not isinstance(value, (list, tuple)):
        value = [value]
    if len(value) != len(tout):
        raise KernelError(f"{token} returned {len(value)} values, but {len(tout)} were "
                          "expected (Tout)")
    out = []
    for i, (v, t) in enumerate(zip(value, tout)):
        v = np.asarray(v)
        want = dtypes.as_dtype(t)
        if want == dtypes.string and v.dtype.kind in "SUO":
            v = v.astype(object)
        elif v.dtype != want.np:
            got = dtypes.as_dtype(v.dtype).name if v.dtype.kind in "biuf" else str(v.dtype)
            raise KernelError(f"{i}-th value returned by {token} is {got}, but expects "
                              f"{want.name}")
        out.append(v)
    return out


def _py_func_kernel(*arrays, token, Tout, stateful=True):
    func = _functions.get(token)
    if func is None:
        raise KernelError(f"{token}: its Python function is not registered in this process "
                          "(py_func ops run only in the process that built them)",
                          errors.FailedPreconditionError)
    try:
        value = func(*arrays)
    except Exception as e:  # noqa: BLE001 - the user's function: any error, named
        cls = next((c for py, c in _ERROR_OF if isinstance(e, py)), errors.UnknownError)
        raise KernelError(f"{type(e).__name__}: {e}\n(raised by the function of {token})",
                          cls) from None
    return _results(token, value, Tout)


# host_only: it calls the user's Python function
register_op("PyFunc", infer=_py_func_infer, kernel=_py_func_kernel, stateful=True,
            kind="opaque", host_only=True)
not_differentiable("PyFunc")


def py_func(func, inp, Tout, stateful=True, name=None):  # noqa: N803 - TF's name
    """func(*input arrays) as an op: a Tensor for a single Tout dtype, a list for a list.
    Output shapes are unknown (set_shape them where known)."""
    if not callable(func):
        raise TypeError(f"py_func: func must be callable, got {func!r}")
    single = not isinstance(Tout, (list, tuple))
    tout = [dtypes.as_dtype(t) for t in ([Tout] if single else Tout)]
    inputs = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inp]
    token = f"pyfunc_{next(_tokens)}"
    _functions[token] = func
    from graphc.framework.graph import get_default_graph
    graph = inputs[0].graph if inputs else get_default_graph()
    op = graph.create_op("PyFunc", inputs, {"token": token, "Tout": tout,
                                            "stateful": bool(stateful)}, name or "PyFunc")
    if single:
        return op.outputs[0]
    return list(op.outputs)


def numpy_function(func, inp, Tout, name=None):  # noqa: N803
    return py_func(func, inp, Tout, stateful=True, name=name)
