"""tf.parse_single_example / tf.parse_example: serialized tf.train.Example protos into
dense tensors (FixedLenFeature) and sparse ones (VarLenFeature).

One host op, ParseExampleProtos, parses a scalar (one Example) or a vector (a batch) of
serialized protos. Its outputs follow TF's ParseExample layout: for each VarLenFeature
its indices (int64 [N, rank+1]), values [N] and dense_shape (int64 [rank+1]), then for
each FixedLenFeature its dense tensor ([batch] + shape). Keys, dtypes, shapes and
defaults are attrs. A VarLenFeature comes back as a SparseTensor of those
three tensors; Session.run fetches it as a SparseTensorValue of arrays, as TF's."""
import collections

import numpy as np

from graphc import dtypes, errors
from graphc.framework.graph import get_default_graph, name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.sparse_tensor import SparseTensor
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor
from graphc.tf_formats import example

__all__ = ["FixedLenFeature", "VarLenFeature", "parse_single_example", "parse_example"]


class FixedLenFeature(collections.namedtuple("FixedLenFeature",
                                             ["shape", "dtype", "default_value"])):
    """A feature with a fixed number of values, parsed into a dense tensor of `shape`;
    a missing feature takes default_value (an error without one)."""

    def __new__(cls, shape, dtype, default_value=None):
        return super().__new__(cls, shape, dtype, default_value)


class VarLenFeature(collections.namedtuple("VarLenFeature", ["dtype"])):
    """A feature with any number of values, parsed into a SparseTensor."""




# ------------------------------------------------------------------ the op
def _infer(inputs, a):
    serialized = inputs[0]
    if serialized.dtype != dtypes.string:
        raise TypeError(f"parse_example takes serialized protos (string), got "
                        f"{serialized.dtype.name}")
    if serialized.shape.ndims not in (None, 0, 1):
        raise ValueError(f"serialized must be a scalar or a vector, got shape "
                         f"{serialized.shape}")
    batched = serialized.shape.ndims != 0
    batch = [serialized.shape[0].value] if batched and serialized.shape.ndims else []
    rank = 2 if batched else 1
    n = len(a["sparse_keys"])
    out = [(TensorShape([None, rank]), dtypes.int64)] * n
    out += [(TensorShape([None]), t) for t in a["sparse_types"]]
    out += [(TensorShape([rank]), dtypes.int64)] * n
    out += [(TensorShape(batch + list(s)), t)
            for s, t in zip(a["dense_shapes"], a["dense_types"])]
    return out


def _dense(features, key, dtype, shape, default, index):
    got = example.values(features, key, dtype, index)
    if got is None:
        if default is None:
            raise errors.KernelError(
                f"Name: <unknown>, Feature: {key} (data type: "
                f"{example.KIND_OF_DTYPE[dtype.name][1]}) is required but could not be found.",
                errors.InvalidArgumentError)
        return default
    size = int(np.prod(shape, dtype=np.int64))
    if got.size != size:
        raise errors.KernelError(
            f"Name: <unknown>, Key: {key}, Index: {index}.  Number of "
            f"{example.KIND_OF_DTYPE[dtype.name][1]} values != expected.  Values size: "
            f"{got.size} but output shape: {list(shape)}", errors.InvalidArgumentError)
    return got.reshape(shape)


def _kernel(serialized, sparse_keys, sparse_types, dense_keys, dense_types, dense_shapes,
            dense_defaults):
    batched = np.ndim(serialized) == 1
    protos_ = list(np.reshape(serialized, -1))
    parsed = [example.parse(s, i) for i, s in enumerate(protos_)]
    indices, values, shapes = [], [], []
    width = 2 if batched else 1
    for key, dtype in zip(sparse_keys, sparse_types):
        empty = np.zeros(0, dtype=object if dtype == dtypes.string else dtype.np)
        per = [example.values(f, key, dtype, i) for i, f in enumerate(parsed)]
        per = [empty if v is None else v for v in per]
        rows = [np.stack([np.full(len(v), i), np.arange(len(v))], 1) if batched
                else np.arange(len(v))[:, None] for i, v in enumerate(per)]
        indices.append(np.concatenate(rows + [np.zeros((0, width))]).astype(np.int64))
        values.append(np.concatenate(per + [empty]))
        longest = max((len(v) for v in per), default=0)
        shapes.append(np.array([len(per), longest] if batched else [longest], np.int64))
    dense = []
    for key, dtype, shape, default in zip(dense_keys, dense_types, dense_shapes,
                                          dense_defaults):
        shape = tuple(TensorShape(shape).as_list())
        rows = [_dense(f, key, dtype, shape, default, i) for i, f in enumerate(parsed)]
        out = np.stack(rows) if rows else np.zeros((0,) + shape, dtype.np)
        dense.append(out if batched else out[0])
    return indices + values + shapes + dense


# host_only: it reads serialized tf.train.Example protos (strings) with protobuf
register_op("ParseExampleProtos", infer=_infer, kernel=_kernel, kind="opaque", host_only=True)
not_differentiable("ParseExampleProtos")


# ------------------------------------------------------------------ public functions
def _default(feature, key):
    if feature.default_value is None:
        return None
    dtype = feature.dtype
    default = np.asarray(feature.default_value,
                         dtype=object if dtype == dtypes.string else dtype.np)
    shape = TensorShape(feature.shape).as_list()
    if default.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"default_value of feature {key!r} has {default.size} values, "
                         f"shape {shape} needs {int(np.prod(shape, dtype=np.int64))}")
    return default.reshape(shape)


def _parse(serialized, features, name, default_name):
    if not features:
        raise ValueError("Missing: features was empty.")
    sparse = sorted(k for k, f in features.items() if isinstance(f, VarLenFeature))
    dense = sorted(k for k, f in features.items() if isinstance(f, FixedLenFeature))
    unknown = sorted(set(features) - set(sparse) - set(dense))
    if unknown:
        raise ValueError(f"Unsupported feature type for {unknown[0]!r}: "
                         f"{type(features[unknown[0]]).__name__} (FixedLenFeature and "
                         "VarLenFeature are supported)")
    for key in dense:
        shape = TensorShape(features[key].shape)
        if not shape.is_fully_defined():
            raise ValueError(f"FixedLenFeature {key!r} needs a fully defined shape, got {shape}")
    attrs = {"sparse_keys": sparse,
             "sparse_types": [example.check_dtype(features[k].dtype, k) for k in sparse],
             "dense_keys": dense,
             "dense_types": [example.check_dtype(features[k].dtype, k) for k in dense],
             "dense_shapes": [TensorShape(features[k].shape) for k in dense],
             "dense_defaults": [_default(features[k]._replace(
                 dtype=example.check_dtype(features[k].dtype, k)), k) for k in dense]}
    serialized = convert_to_tensor(serialized, dtype=dtypes.string)
    with name_scope(name or default_name):
        op = get_default_graph().create_op("ParseExampleProtos", [serialized], attrs,
                                           name="ParseExampleProtos")
    n = len(sparse)
    out = {k: SparseTensor(op.outputs[i], op.outputs[n + i], op.outputs[2 * n + i])
           for i, k in enumerate(sparse)}
    out.update({k: op.outputs[3 * n + i] for i, k in enumerate(dense)})
    return out


def parse_single_example(serialized, features, name=None, example_names=None):
    """{key: Tensor or SparseTensor} of one serialized Example (a scalar string)."""
    serialized = convert_to_tensor(serialized, dtype=dtypes.string)
    if serialized.shape.ndims not in (None, 0):
        raise ValueError(f"parse_single_example takes a scalar, got shape {serialized.shape}"
                         "; use parse_example for a batch")
    return _parse(serialized, features, name, "ParseSingleExample")


def parse_example(serialized, features, name=None, example_names=None):
    """{key: Tensor or SparseTensor} of a batch (a vector) of serialized Examples: dense
    features get a leading batch dim; sparse ones index [example, position]."""
    serialized = convert_to_tensor(serialized, dtype=dtypes.string)
    if serialized.shape.ndims not in (None, 1):
        raise ValueError(f"parse_example takes a vector of serialized Examples, got shape "
                         f"{serialized.shape}")
    return _parse(serialized, features, name, "ParseExample")
