"""tf.train.Example decoding: the values of one feature of a serialized Example, checked
against the dtype a FixedLenFeature / VarLenFeature asks for, with TF's error texts.

Example = Features {map<string, Feature> feature}; a Feature holds one of BytesList,
FloatList (float32) or Int64List. parse_single_example's dtypes are exactly these three:
string, float32, int64."""
import numpy as np

from graphc import dtypes, errors
from graphc.tf_formats import protos

# the Feature oneof field that holds each dtype, and its name in TF's messages
KIND_OF_DTYPE = {"string": ("bytes_list", "string"), "float32": ("float_list", "float"),
                 "int64": ("int64_list", "int64")}
_KIND_NAMES = {"bytes_list": "string", "float_list": "float", "int64_list": "int64"}


def check_dtype(dtype, key):
    dtype = dtypes.as_dtype(dtype)
    if dtype.name not in KIND_OF_DTYPE:
        raise ValueError(f"Unsupported dtype {dtype.name} for feature {key!r}: "
                         "parse_example takes tf.float32, tf.int64 or tf.string")
    return dtype


def parse(serialized, index):
    """The {key: Feature} map of one serialized Example; InvalidArgumentError if it does
    not parse."""
    example = protos.example_pb2().Example()
    try:
        example.ParseFromString(bytes(serialized))
    except Exception:  # protobuf's DecodeError (its class differs between runtimes)
        raise errors.KernelError(f"Could not parse example input, value: "
                                 f"'{bytes(serialized)[:40]!r}' (example {index})",
                                 errors.InvalidArgumentError) from None
    return example.features.feature


def values(features, key, dtype, index):
    """The values of feature `key` as a 1-D array of `dtype`, or None when it is absent
    (a feature with no kind set counts as empty)."""
    if key not in features:
        return None
    feature = features[key]
    kind = feature.WhichOneof("kind")
    want, type_name = KIND_OF_DTYPE[dtype.name]
    if kind is None:
        return np.zeros(0, dtype=object if dtype == dtypes.string else dtype.np)
    if kind != want:
        raise errors.KernelError(
            f"Name: <unknown>, Key: {key}, Index: {index}.  Data types don't match. "
            f"Data type: {_KIND_NAMES[kind]} but expected type: {type_name}",
            errors.InvalidArgumentError)
    items = list(getattr(feature, kind).value)
    if dtype == dtypes.string:
        out = np.empty(len(items), dtype=object)
        out[:] = [bytes(v) for v in items]
        return out
    return np.array(items, dtype=dtype.np)
