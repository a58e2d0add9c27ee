"""TF 2.x's TensorList ops (what its TensorArray, map_fn and dynamic_rnn become under
control flow v2) read as graphc ops on a dense tensor.

graphc keeps a TensorList as one tensor [length, *element shape] of its elements, the
values of its own TensorArray (ops/tensor_array_ops.py), whose ops do the work: the list's
handle, a DT_VARIANT in TF, is that tensor here, and a While or If carrying one takes its
dtype from the tensor (graph_io's importer).
  TensorListReserve(element_shape, n)      TensorArrayV3: zeros [n, *element_shape]; an
                                           element shape not known yet (-1) is taken from
                                           the first write, as graphc's TensorArray does
  TensorListSetItem(list, i, item)          TensorArrayScatterV3 of row i
  TensorListGetItem(list, i)                row i
  TensorListFromTensor(t), TensorListStack  t itself
  TensorListLength(list)                    its rows
  TensorListElementShape(list)              its shape after the first dim
  EmptyTensorList(element_shape)             TensorArrayV3 of no rows that grows
  TensorListPushBack(list, item)            TensorArrayScatterV3 of a new last row
  TensorListPopBack(list)                   (all rows but the last, the last row)
The last three are the accumulators of TF's while-loop gradients (the forward loop
pushes each iteration's values, the backward loop pops them).
A write whose element shape differs from the list's is an error once the list holds a
nonzero value (TF's TensorArray checks the same when the graph is built): the dense form
has one element shape."""
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats.tensors import FormatError


def _element_shape_of(shape, node):
    from graphc.framework.static_value import constant_value
    dims = constant_value(shape)
    if dims is None:
        raise FormatError(f"node '{node['name']}' (op: '{node['op']}'): its element shape "
                          "must be a constant (graphc keeps a TensorList as one dense tensor)")
    return TensorShape(None) if dims.ndim == 0 else \
        TensorShape([None if d < 0 else int(d) for d in dims])


def _new_list(size, node, element, dynamic_size):
    op = size.graph.create_op("TensorArrayV3", [size], {
        "dtype": node["attrs"]["element_dtype"], "element_shape": element,
        "dynamic_size": dynamic_size}, name="list")
    return op.outputs[0]


def _write_row(values, index, item, dynamic_size):
    """TensorArrayScatterV3 of row `index`, keeping the others once a value is there (a
    list of zeros takes the first write's element shape, see the docstring)."""
    from graphc.ops import array_ops, math_ops, reduction_ops
    index = math_ops.cast(index, "int32")
    others = math_ops.not_equal(array_ops.range(array_ops.shape(values)[0]), index)
    held = reduction_ops.reduce_any(math_ops.not_equal(values, array_ops.zeros_like(values)))
    written = math_ops.logical_and(others, held)
    op = values.graph.create_op(
        "TensorArrayScatterV3", [values, written, array_ops.reshape(index, [1]),
                                 array_ops.expand_dims(item, 0)],
        {"dynamic_size": dynamic_size}, name="list")
    return op.outputs[0]


def _reserve(inputs, node, name):
    from graphc.framework.graph import name_scope
    from graphc.ops import math_ops
    shape, count = inputs[:2]
    element = _element_shape_of(shape, node)
    with name_scope(name + "/"):
        return [_new_list(math_ops.cast(count, "int32"), node, element, False)]


def _empty(inputs, node, name):
    from graphc.framework.graph import name_scope
    from graphc.ops.constant_ops import constant
    element = _element_shape_of(inputs[0], node)
    with name_scope(name + "/"):
        return [_new_list(constant(0), node, element, True)]


def _push_back(inputs, node, name):
    from graphc.framework.graph import name_scope
    from graphc.ops import array_ops
    values, item = inputs[:2]
    with name_scope(name + "/"):
        return [_write_row(values, array_ops.shape(values)[0], item, True)]


def _pop_back(inputs, node, name):
    from graphc.framework.graph import name_scope
    from graphc.ops import array_ops
    values = inputs[0]
    with name_scope(name + "/"):
        last = array_ops.shape(values)[0] - 1
        return [array_ops.gather(values, array_ops.range(last), name="list"),
                array_ops.gather(values, last, name="tensor")]


def _same(inputs, node, name):
    from graphc.ops.control_flow_ops import identity
    return [identity(inputs[0], name=name)]


def _get_item(inputs, node, name):
    from graphc.ops.array_ops import gather
    return [gather(inputs[0], inputs[1], name=name)]


def _set_item(inputs, node, name):
    from graphc.framework.graph import name_scope
    values, index, item = inputs[:3]
    with name_scope(name + "/"):
        return [_write_row(values, index, item, False)]


def _length(inputs, node, name):
    from graphc.ops import array_ops
    from graphc.ops.control_flow_ops import identity
    return [identity(array_ops.shape(inputs[0])[0], name=name)]


def _element_shape(inputs, node, name):
    from graphc.ops import array_ops, math_ops
    shape = array_ops.shape(inputs[0])[1:]
    return [math_ops.cast(shape, node["attrs"].get("shape_type", "int32"), name=name)]


def _stack(inputs, node, name):
    """The list; one never written, made with an element shape not known then, takes
    the element shape Stack gives (TF's map_fn of an empty tensor)."""
    from graphc.framework.static_value import constant_value
    from graphc.ops import array_ops
    from graphc.ops.control_flow_ops import identity
    from graphc.ops.constant_ops import constant
    values, shape = inputs[:2]
    dims = constant_value(shape)
    if dims is None or dims.ndim != 1 or (dims < 0).any():
        return [identity(values, name=name)]
    rows = array_ops.reshape(array_ops.shape(values)[0], [1])
    full = array_ops.concat([rows, constant(dims.astype("int32"))], 0)
    return [array_ops.reshape(values, full, name=name)]


COMPOSITES = {"TensorListReserve": _reserve, "EmptyTensorList": _empty,
              "TensorListPushBack": _push_back, "TensorListPopBack": _pop_back, "TensorListFromTensor": _same,
              "TensorListStack": _stack, "TensorListGetItem": _get_item,
              "TensorListSetItem": _set_item, "TensorListLength": _length,
              "TensorListElementShape": _element_shape}
