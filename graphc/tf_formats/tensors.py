"""TensorFlow's DataType, TensorShapeProto and TensorProto <-> graphc dtypes, shapes, arrays.

A TensorProto holds its elements in one of several encodings (TF's tensor_util reads them
all): `tensor_content` (raw little-endian bytes, C order), or the typed repeated field of
its dtype (half_val holds float16 bit patterns in int32s; int_val serves int8/16/32 and
uint8). A typed field shorter than the tensor is padded with its last value, so a single
value fills the tensor; with no value at all the tensor is zeros."""
import numpy as np

from graphc import dtypes
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats import protos

# graphc dtype name -> TF DataType enum name
_DT_NAME = {"float16": "DT_HALF", "float32": "DT_FLOAT", "float64": "DT_DOUBLE",
            "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
            "uint8": "DT_UINT8", "bool": "DT_BOOL", "string": "DT_STRING"}
_GRAPHC_NAME = {v: k for k, v in _DT_NAME.items()}
_REF_OFFSET = 100  # DT_FLOAT_REF = DT_FLOAT + 100: a variable's ref output in old graphs

# the typed TensorProto field of each dtype
_VALUE_FIELD = {"float16": "half_val", "float32": "float_val", "float64": "double_val",
                "int8": "int_val", "int16": "int_val", "int32": "int_val", "uint8": "int_val",
                "int64": "int64_val", "bool": "bool_val", "string": "string_val"}


class FormatError(ValueError):
    """A TF file or proto that graphc cannot take; the message names what and where."""


def data_type(dtype):
    """The TF DataType enum value of a graphc dtype."""
    return protos.types_pb2().DataType.Value(_DT_NAME[dtypes.as_dtype(dtype).name])


def graphc_dtype(enum_value, where):
    """The graphc DType of a TF DataType enum value (ref types read as their base type)."""
    types_pb2 = protos.types_pb2()
    if enum_value > _REF_OFFSET:
        enum_value -= _REF_OFFSET
    try:
        name = types_pb2.DataType.Name(enum_value)
    except ValueError:
        name = f"DataType {enum_value}"
    if name not in _GRAPHC_NAME:
        raise FormatError(f"{where}: dtype {name} is not supported by graphc "
                          f"(it has {', '.join(sorted(_GRAPHC_NAME))})")
    return dtypes.as_dtype(_GRAPHC_NAME[name])


def shape_proto(shape):
    pb = protos.tensor_shape_pb2()
    shape = TensorShape(shape)
    if shape.ndims is None:
        return pb.TensorShapeProto(unknown_rank=True)
    return pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=-1 if d.value is None
                                                            else d.value) for d in shape])


def graphc_shape(proto):
    if proto.unknown_rank:
        return TensorShape(None)
    return TensorShape([None if d.size < 0 else d.size for d in proto.dim])


def tensor_proto(array, dtype=None):
    """The TensorProto of an array: tensor_content for numbers, string_val for strings."""
    pb = protos.tensor_pb2()
    dtype = dtypes.as_dtype(dtype if dtype is not None else array.dtype)
    array = np.asarray(array)
    proto = pb.TensorProto(dtype=data_type(dtype), tensor_shape=shape_proto(array.shape))
    if dtype == dtypes.string:
        proto.string_val.extend(s if isinstance(s, bytes) else str(s).encode()
                                for s in array.reshape(-1))
    else:
        little = np.asarray(array, dtype=dtype.np, order="C")  # keeps 0-d arrays 0-d
        proto.tensor_content = little.astype(little.dtype.newbyteorder("<")).tobytes()
    return proto


def array_of(proto, where):
    """The ndarray a TensorProto holds, in any of TF's encodings."""
    dtype = graphc_dtype(proto.dtype, where)
    shape = graphc_shape(proto.tensor_shape)
    if not shape.is_fully_defined():
        raise FormatError(f"{where}: a tensor value needs a fully defined shape, got {shape}")
    dims = shape.as_list()
    count = int(np.prod(dims, dtype=np.int64))
    if proto.tensor_content:
        if dtype == dtypes.string:
            raise FormatError(f"{where}: string tensors cannot use tensor_content")
        little = dtype.np.newbyteorder("<")
        if len(proto.tensor_content) != count * little.itemsize:
            raise FormatError(f"{where}: tensor_content holds {len(proto.tensor_content)} "
                              f"bytes, shape {dims} of {dtype.name} needs "
                              f"{count * little.itemsize}")
        return np.frombuffer(proto.tensor_content, little).astype(dtype.np).reshape(dims)
    values = list(getattr(proto, _VALUE_FIELD[dtype.name]))
    if dtype == dtypes.float16:
        values = np.array(values, np.uint16).view(np.float16)
    if len(values) > count:
        raise FormatError(f"{where}: {len(values)} values for a tensor of shape {dims}")
    out = np.empty(count, dtype=object if dtype == dtypes.string else dtype.np)
    if dtype == dtypes.string:
        out[:] = b""
    else:
        out[:] = 0
    if len(values):
        out[:len(values)] = values
        out[len(values):] = values[-1]
    return out.reshape(dims)
