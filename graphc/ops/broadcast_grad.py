"""Un-broadcasting for gradients: sum a gradient back down to the shape of an input.

When x of shape [1, 3] is broadcast against [4, 3], d/dx sums the gradient over the
broadcast axes. With static shapes the axes are known at graph-build time; with unknown
dims the SumToShape op decides at run time from the input's dynamic shape.
"""
import numpy as np

from graphc.framework.op_def import register_op
from graphc.framework.static_value import shape_from_tensor


def sum_to_shape_array(x, shape):
    """NumPy: sum `x` over the axes along which `shape` was broadcast to x.shape."""
    shape = tuple(int(d) for d in np.reshape(shape, [-1]))
    lead = x.ndim - len(shape)
    if lead < 0 or np.broadcast_shapes(shape, x.shape) != x.shape:
        raise ValueError(f"cannot sum a gradient of shape {x.shape} to shape {shape}")
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    return np.sum(x, axis=axes).reshape(shape) if axes else x.reshape(shape)


def _sum_to_shape_grad(op, g):
    from graphc.ops.array_ops import broadcast_to, shape
    return [broadcast_to(g, shape(op.inputs[0])), None]


register_op("SumToShape", infer=lambda inputs, a: (shape_from_tensor(inputs[1]), inputs[0].dtype),
            kernel=sum_to_shape_array, grad=_sum_to_shape_grad, kind="reduction",
            shape_inputs=(1,))


def unbroadcast(grad, x):
    """`grad` (the gradient of a broadcast result) summed to the shape of input `x`."""
    from graphc.ops import array_ops
    from graphc.ops.constant_ops import constant
    gs, xs = grad.shape, x.shape
    if gs.is_fully_defined() and xs.is_fully_defined():
        if gs.as_list() == xs.as_list():
            return grad
        target = constant(np.array(xs.as_list(), dtype=np.int32))
    else:
        target = array_ops.shape(x)
    return grad.graph.create_op("SumToShape", [grad, target], name="SumToShape").outputs[0]
