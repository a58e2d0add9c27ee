"""Whole files as string tensors: read_file, write_file and matching_files, as TF1's.

Host ops: they touch the file system. ReadFile and MatchingFiles are stateful so that a
run reads the file as it is then (never a constant folded when the graph compiled)."""
import glob
import os

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError, NotFoundError
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["read_file", "write_file", "matching_files"]

_FILE_OP = dict(stateful=True, kind="opaque", host_only=True)


def _path(value):
    return os.fsdecode(bytes(np.asarray(value, object)[()]))


def _scalar_string(t, op_type, what):
    if t.dtype != dtypes.string:
        raise TypeError(f"{op_type}: {what} must be a string tensor, got {t.dtype.name}")
    if t.shape.ndims not in (None, 0):
        raise ValueError(f"{op_type}: {what} must be a scalar, got shape {t.shape}")


def _read_file_infer(inputs, a):
    _scalar_string(inputs[0], "ReadFile", "filename")
    return TensorShape([]), dtypes.string


def _read_file_kernel(filename):
    path = _path(filename)
    try:
        with open(path, "rb") as f:
            return np.array(f.read(), object)
    except FileNotFoundError:
        raise KernelError(f"{path}; No such file or directory", NotFoundError) from None
    except IsADirectoryError:
        raise KernelError(f"{path}; Is a directory") from None


def _write_file_infer(inputs, a):
    _scalar_string(inputs[0], "WriteFile", "filename")
    _scalar_string(inputs[1], "WriteFile", "contents")
    return []


def _write_file_kernel(filename, contents):
    path = _path(filename)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)  # TF's WriteFile creates the directory
    with open(path, "wb") as f:
        f.write(bytes(np.asarray(contents, object)[()]))
    return []


def _matching_files_infer(inputs, a):
    if inputs[0].dtype != dtypes.string or inputs[0].shape.ndims not in (None, 0, 1):
        raise TypeError("MatchingFiles: pattern must be a string scalar or vector")
    return TensorShape([None]), dtypes.string


def _matching_files_kernel(pattern):
    names = sorted({name for p in np.asarray(pattern, object).reshape(-1)
                    for name in glob.glob(os.fsdecode(bytes(p)))})
    out = np.empty(len(names), object)
    out[:] = [os.fsencode(n) for n in names]
    return out


register_op("ReadFile", infer=_read_file_infer, kernel=_read_file_kernel, writes_state=False,
            **_FILE_OP)
register_op("WriteFile", infer=_write_file_infer, kernel=_write_file_kernel, **_FILE_OP)
register_op("MatchingFiles", infer=_matching_files_infer, kernel=_matching_files_kernel,
            writes_state=False, **_FILE_OP)
not_differentiable("ReadFile", "WriteFile", "MatchingFiles")


def read_file(filename, name=None):
    """The bytes of the file `filename` (a scalar string), read when the op runs."""
    f = convert_to_tensor(filename, dtype=dtypes.string, name="filename")
    return f.graph.create_op("ReadFile", [f], {}, name or "ReadFile").outputs[0]


def write_file(filename, contents, name=None):
    """The op writing `contents` (a scalar string) to `filename`, creating its folder."""
    f = convert_to_tensor(filename, dtype=dtypes.string, name="filename")
    with f.graph.as_default():
        c = convert_to_tensor(contents, dtype=dtypes.string, name="contents")
    return f.graph.create_op("WriteFile", [f, c], {}, name or "WriteFile")


def matching_files(pattern, name=None):
    """The sorted names of the files matching the glob `pattern` (a scalar or vector)."""
    p = convert_to_tensor(pattern, dtype=dtypes.string, name="pattern")
    return p.graph.create_op("MatchingFiles", [p], {}, name or "MatchingFiles").outputs[0]
