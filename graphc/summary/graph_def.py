"""A TensorBoard GraphDef of a graphc Graph: node names, op types, inputs (with
^control inputs), device, and attrs converted to AttrValue where one represents them.

Const values larger than MAX_CONST_BYTES are left out (TensorBoard would not show them);
every node gets TF's `_output_shapes` attr so TensorBoard labels edges with shapes."""
import numbers

import numpy as np

from graphc import dtypes
from graphc.framework.tensor_shape import TensorShape
from graphc.summary import protos

MAX_CONST_BYTES = 1024

_DT_NAME = {"float16": "DT_HALF", "float32": "DT_FLOAT", "float64": "DT_DOUBLE",
            "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
            "uint8": "DT_UINT8", "bool": "DT_BOOL", "string": "DT_STRING"}


def _data_type(dtype):
    return protos.types_pb2().DataType.Value(_DT_NAME[dtypes.as_dtype(dtype).name])


def _shape_proto(shape, pb):
    if shape.ndims is None:
        return pb.TensorShapeProto(unknown_rank=True)
    return pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=-1 if d.value is None
                                                            else d.value) for d in shape])


def _tensor_proto(arr, pb):
    """A TensorProto of a small array, or None when it is too large to show."""
    if arr.dtype == object:
        strings = [s if isinstance(s, bytes) else str(s).encode() for s in arr.reshape(-1)]
        if sum(map(len, strings)) > MAX_CONST_BYTES:
            return None
        content = {"string_val": strings}
    else:
        if arr.nbytes > MAX_CONST_BYTES or arr.dtype.name not in _DT_NAME:
            return None
        content = {"tensor_content": arr.astype(arr.dtype.newbyteorder("<")).tobytes()}
    return pb.TensorProto(dtype=_data_type(dtypes.as_dtype(arr.dtype)),
                          tensor_shape=_shape_proto(TensorShape(arr.shape), pb), **content)


# (test, ListValue field, converter) for the elements of a list attr, most specific first
def _list_kinds(pb):
    return [(lambda v: isinstance(v, (bool, np.bool_)), "b", bool),
            (lambda v: isinstance(v, numbers.Integral), "i", int),
            (lambda v: isinstance(v, numbers.Real), "f", float),
            (lambda v: isinstance(v, str), "s", str.encode),
            (lambda v: isinstance(v, bytes), "s", bytes),
            (lambda v: isinstance(v, dtypes.DType), "type", _data_type),
            (lambda v: isinstance(v, TensorShape), "shape", lambda s: _shape_proto(s, pb))]


def attr_value(value, pb):
    """The AttrValue of a graphc attr, or None when AttrValue cannot represent it."""
    if isinstance(value, np.ndarray):
        tensor = _tensor_proto(value, pb)
        return None if tensor is None else pb.AttrValue(tensor=tensor)
    if isinstance(value, (list, tuple)):
        for test, field, convert in _list_kinds(pb):
            if all(test(v) for v in value):
                items = [convert(v) for v in value]
                return pb.AttrValue(list=pb.AttrValue.ListValue(**{field: items}))
        return None
    for test, field, convert in _list_kinds(pb):
        if test(value):
            return pb.AttrValue(**{field: convert(value)})
    return None


def _input_name(tensor):
    op = tensor.op.name
    return op if tensor.value_index == 0 else f"{op}:{tensor.value_index}"


def graph_def(graph):
    """The GraphDef proto of `graph` (tensorboard.compat.proto.graph_pb2.GraphDef)."""
    pb = protos.graph_protos()
    out = pb.GraphDef()
    for op in graph.get_operations():
        node = out.node.add(name=op.name, op=op.type, device=op.device or "")
        node.input.extend([_input_name(t) for t in op.inputs]
                          + ["^" + c.name for c in op.control_inputs])
        for key, value in op.attrs.items():
            converted = attr_value(value, pb)
            if converted is not None:
                node.attr[key].CopyFrom(converted)
        if op.outputs:
            node.attr["_output_shapes"].CopyFrom(
                attr_value([t.shape for t in op.outputs], pb))
    return out
