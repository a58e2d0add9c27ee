"""DTypes with the names and conversion rules of tf.compat.v1."""
import builtins

import numpy as np


class DType:
    """A tensor element type; compares equal to others of the same name."""

    def __init__(self, name, np_dtype):
        self.name = name
        self.as_numpy_dtype = np.dtype(np_dtype).type
        self._np = np.dtype(np_dtype)

    @property
    def np(self):
        return self._np

    @property
    def is_floating(self):
        return self._np.kind == "f"

    @property
    def is_integer(self):
        return self._np.kind in "iu"

    @property
    def is_unsigned(self):
        return self._np.kind == "u"

    @property
    def is_bool(self):
        return self._np.kind == "b"

    @property
    def base_dtype(self):
        return self

    @property
    def size(self):
        return self._np.itemsize

    @property
    def min(self):
        return np.finfo(self._np).min if self.is_floating else np.iinfo(self._np).min

    @property
    def max(self):
        return np.finfo(self._np).max if self.is_floating else np.iinfo(self._np).max

    def __eq__(self, other):
        try:
            return self.name == as_dtype(other).name
        except TypeError:
            return False

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"tf.{self.name}"


float16 = DType("float16", np.float16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int8 = DType("int8", np.int8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)
bool = DType("bool", np.bool_)  # noqa: A001 - TF's name
string = DType("string", object)  # host-only (names of uninitialized variables, summaries)
half = float16
double = float64

ALL = [float16, float32, float64, int8, int16, int32, int64, uint8, bool, string]
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16})
_BY_NP = {d.np: d for d in ALL}


def as_dtype(value):
    """Converts a DType, a name ("float", "int32"), a NumPy dtype or a Python type to a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in _BY_NAME:
            return _BY_NAME[value]
        raise TypeError(f"Cannot convert value {value!r} to a graphc DType.")
    if value is float:
        return float32
    if value is int:
        return int32
    if value is builtins.bool:
        return bool
    try:
        npd = np.dtype(value)
    except TypeError:
        raise TypeError(f"Cannot convert value {value!r} to a graphc DType.") from None
    if npd in _BY_NP:
        return _BY_NP[npd]
    if npd.kind in "SU":  # NumPy's fixed-width bytes and text, as TF's
        return string
    raise TypeError(f"Cannot convert value {value!r} to a graphc DType: unsupported type {npd}.")


def bytes_array(value):
    """`value` (str, bytes, or nested lists/arrays of them) as TF holds a string tensor: an
    object array of bytes, str encoded as UTF-8. TypeError naming the first element that
    is neither."""
    arr = np.array(value, dtype=object)
    flat = arr.reshape(-1)
    for i, v in enumerate(flat):
        if isinstance(v, (bytes, np.bytes_)):
            flat[i] = builtins.bytes(v)
        elif isinstance(v, str):
            flat[i] = v.encode("utf-8")
        elif isinstance(v, (bytearray, memoryview)):
            flat[i] = builtins.bytes(v)
        else:
            raise TypeError(f"Expected a string (str or bytes) for a tensor of dtype string, "
                            f"got {v!r} of type {type(v).__name__}")
    return arr
