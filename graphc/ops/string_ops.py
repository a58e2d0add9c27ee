"""String ops as TF1's: splitting, joining, case, substrings, regexes, number formatting
and parsing, raw bytes. A string tensor holds bytes (an object array of them), as TF's.

Every op here is host_only: native code never holds a string, so each runs its reference
kernel on the host, between the compiled stages of the numbers around it."""
import base64
import binascii
import re

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.sparse_tensor import SparseTensor
from graphc.framework.static_value import constant_value
from graphc.framework.tensor_shape import TensorShape, broadcast_shapes
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.farmhash import fingerprint64

__all__ = ["string_split", "string_join", "reduce_join", "substr", "regex_replace",
           "string_to_number", "as_string", "decode_raw", "string_to_hash_bucket_fast",
           "encode_base64", "decode_base64"]

_HOST = dict(kind="opaque", host_only=True)
_WHITESPACE = b" \t\n\v\f\r"


def _each(fn, arr, dtype=object):
    """fn applied to each element of arr, into an array of arr's shape."""
    out = np.empty(np.shape(arr), dtype)
    flat_out = out.reshape(-1)
    for i, v in enumerate(np.asarray(arr, dtype=object).reshape(-1)):
        flat_out[i] = fn(v)
    return out


def _need_string(t, op_type, what="input"):
    if t.dtype != dtypes.string:
        raise TypeError(f"{op_type}: {what} must be a string tensor, got {t.dtype.name}")


def _strings(value, name):
    return convert_to_tensor(value, dtype=dtypes.string, name=name)


def _register_unary(op_type, fn, out_dtype=dtypes.string):
    """An op mapping each string of its input to one value of out_dtype."""
    def infer(inputs, a):
        _need_string(inputs[0], op_type)
        return inputs[0].shape, out_dtype

    def kernel(x, **attrs):
        return _each(lambda s: fn(s, **attrs), x, out_dtype.np)

    register_op(op_type, infer=infer, kernel=kernel, **_HOST)
    not_differentiable(op_type)


def _unary(op_type, input, name, **attrs):
    x = _strings(input, "input")
    return x.graph.create_op(op_type, [x], attrs, name or op_type).outputs[0]


# ----------------------------------------------------------- case, strip, length
def _lower(s, encoding=""):
    return s.decode("utf-8").lower().encode("utf-8") if encoding else s.lower()


def _upper(s, encoding=""):
    return s.decode("utf-8").upper().encode("utf-8") if encoding else s.upper()


def _length(s, unit="BYTE"):
    if unit == "BYTE":
        return len(s)
    try:
        return len(s.decode("utf-8"))
    except UnicodeDecodeError:
        raise KernelError(f"StringLength: {s!r} is not valid UTF-8") from None


# bytes.lower/upper/strip touch ASCII only, as TF's without an encoding (absl's Ascii*)
_register_unary("StringLower", _lower)
_register_unary("StringUpper", _upper)
_register_unary("StringStrip", lambda s: s.strip(_WHITESPACE))
_register_unary("StringLength", _length, dtypes.int32)


def _check_encoding(encoding):
    if encoding not in ("", "utf-8"):
        raise ValueError(f"encoding must be '' (ASCII) or 'utf-8', got {encoding!r}")


def lower(input, encoding="", name=None):
    """Each string in lower case: ASCII letters only, or all of UTF-8 with encoding='utf-8'."""
    _check_encoding(encoding)
    return _unary("StringLower", input, name, encoding=encoding)


def upper(input, encoding="", name=None):
    """Each string in upper case: ASCII letters only, or all of UTF-8 with encoding='utf-8'."""
    _check_encoding(encoding)
    return _unary("StringUpper", input, name, encoding=encoding)


def strip(input, name=None):
    """Each string without its leading and trailing ASCII whitespace."""
    return _unary("StringStrip", input, name)


def length(input, name=None, unit="BYTE"):
    """int32 length of each string in bytes, or in Unicode characters (unit='UTF8_CHAR')."""
    if unit not in ("BYTE", "UTF8_CHAR"):
        raise ValueError(f"length: unit must be 'BYTE' or 'UTF8_CHAR', got {unit!r}")
    return _unary("StringLength", input, name, unit=unit)


# --------------------------------------------------------------------- regexes
def _python_rewrite(rewrite):
    r"""RE2's rewrite string in Python's re.sub syntax: \0 (the whole match) is \g<0>."""
    return re.sub(rb"\\(\\|0)", lambda m: rb"\\" if m.group(1) == b"\\" else rb"\g<0>", rewrite)


def _compiled(pattern):
    try:
        return re.compile(pattern)
    except re.error as e:
        raise KernelError(f"Invalid pattern: {pattern!r}, error: {e}") from None


def _regex_replace_infer(inputs, a):
    x, pattern, rewrite = inputs
    _need_string(x, "RegexReplace")
    _need_string(pattern, "RegexReplace", "pattern")
    _need_string(rewrite, "RegexReplace", "rewrite")
    for t, what in ((pattern, "pattern"), (rewrite, "rewrite")):
        if t.shape.ndims not in (None, 0):
            raise ValueError(f"RegexReplace: {what} must be a scalar, got shape {t.shape}")
    return x.shape, dtypes.string


def _regex_replace_kernel(x, pattern, rewrite, replace_global=True):
    regex = _compiled(bytes(pattern[()]))
    rewrite = _python_rewrite(bytes(rewrite[()]))
    count = 0 if replace_global else 1
    return _each(lambda s: regex.sub(rewrite, s, count=count), x)


register_op("RegexReplace", infer=_regex_replace_infer, kernel=_regex_replace_kernel, **_HOST)


def _static_regex_infer(op_type, out_dtype):
    def infer(inputs, a):
        _need_string(inputs[0], op_type)
        return inputs[0].shape, out_dtype
    return infer


def _as_bytes(text):
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _static_regex_replace_kernel(x, pattern, rewrite, replace_global=True):
    return _regex_replace_kernel(x, np.array(_as_bytes(pattern), object),
                                 np.array(_as_bytes(rewrite), object), replace_global)


# TF's form for a pattern and rewrite known when the graph is built (attrs, not inputs)
register_op("StaticRegexReplace", infer=_static_regex_infer("StaticRegexReplace",
                                                            dtypes.string),
            kernel=_static_regex_replace_kernel, **_HOST)


def _is_text(value):
    return isinstance(value, (str, bytes))


def regex_replace(input, pattern, rewrite, replace_global=True, name=None):
    """Each string with the matches of `pattern` (RE2 syntax) replaced by `rewrite` (\\1:
    a group, \\0: the match); only the first match unless replace_global."""
    with name_scope(name, "RegexReplace", [input]) as scope:
        x = _strings(input, "input")
        if _is_text(pattern) and _is_text(rewrite):
            return x.graph.create_op("StaticRegexReplace", [x], {
                "pattern": pattern, "rewrite": rewrite,
                "replace_global": bool(replace_global)}, scope).outputs[0]
        p = _strings(pattern, "pattern")
        r = _strings(rewrite, "rewrite")
        return x.graph.create_op("RegexReplace", [x, p, r],
                                 {"replace_global": bool(replace_global)}, scope).outputs[0]


def _regex_full_match_infer(inputs, a):
    _need_string(inputs[0], "RegexFullMatch")
    _need_string(inputs[1], "RegexFullMatch", "pattern")
    return inputs[0].shape, dtypes.bool


def _regex_full_match_kernel(x, pattern):
    regex = _compiled(bytes(pattern[()]))
    return _each(lambda s: regex.fullmatch(s) is not None, x, np.bool_)


register_op("RegexFullMatch", infer=_regex_full_match_infer, kernel=_regex_full_match_kernel,
            **_HOST)


register_op("StaticRegexFullMatch", infer=_static_regex_infer("StaticRegexFullMatch",
                                                              dtypes.bool),
            kernel=lambda x, pattern: _regex_full_match_kernel(
                x, np.array(_as_bytes(pattern), object)), **_HOST)


def regex_full_match(input, pattern, name=None):
    """bool: whether each whole string matches `pattern` (RE2 syntax)."""
    with name_scope(name, "RegexFullMatch", [input]) as scope:
        x = _strings(input, "input")
        if _is_text(pattern):
            return x.graph.create_op("StaticRegexFullMatch", [x], {"pattern": pattern},
                                     scope).outputs[0]
        p = _strings(pattern, "pattern")
        return x.graph.create_op("RegexFullMatch", [x, p], {}, scope).outputs[0]


not_differentiable("RegexReplace", "RegexFullMatch", "StaticRegexReplace", "StaticRegexFullMatch")


# ----------------------------------------------------------------------- joins
def _join_infer(inputs, a):
    shape = TensorShape([])
    for t in inputs:
        _need_string(t, "StringJoin", "every input")
        if t.shape.ndims == 0:
            continue
        if shape.ndims == 0:
            shape = t.shape
        elif not shape.is_compatible_with(t.shape):
            raise ValueError(f"StringJoin: inputs must be scalars or of one shape, got "
                             f"{shape} and {t.shape}")
        else:
            shape = shape.merge_with(t.shape)
    return shape, dtypes.string


def _join_kernel(*parts, separator=""):
    shapes = {p.shape for p in parts if p.ndim}
    if len(shapes) > 1:
        raise KernelError(f"Input shapes do not match: {' vs. '.join(map(str, shapes))}")
    shape = shapes.pop() if shapes else ()
    sep = separator.encode("utf-8") if isinstance(separator, str) else separator
    columns = [np.broadcast_to(p, shape).reshape(-1) for p in parts]
    out = np.empty(shape, object)
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = sep.join(bytes(c[i]) for c in columns)
    return out


register_op("StringJoin", infer=_join_infer, kernel=_join_kernel, **_HOST)
not_differentiable("StringJoin")


def string_join(inputs, separator="", name=None):
    """The strings of `inputs` (a list of tensors of one shape, or scalars) joined with
    `separator`, element by element."""
    with name_scope(name, "StringJoin", inputs) as scope:
        parts = [_strings(t, "input") for t in inputs]
        if not parts:
            raise ValueError("string_join needs at least one input")
        return parts[0].graph.create_op("StringJoin", parts, {"separator": str(separator)},
                                        scope).outputs[0]


def _normalized_axes(axes, rank, op_type):
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"{op_type}: axis {a} is out of range for a tensor of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"{op_type}: axis {list(axes)} names a dimension twice")
    return out


def _reduce_join_infer(inputs, a):
    x, axes = inputs
    _need_string(x, "ReduceJoin")
    if not axes.dtype.is_integer:
        raise TypeError(f"ReduceJoin: axis must be int32, got {axes.dtype.name}")
    value = constant_value(axes)
    if x.shape.ndims is None or value is None:
        return TensorShape(None), dtypes.string
    reduced = _normalized_axes(np.reshape(value, -1), x.shape.ndims, "ReduceJoin")
    dims = x.shape.as_list()
    keep = a["keep_dims"]
    return TensorShape([1 if i in reduced else d for i, d in enumerate(dims)] if keep else
                       [d for i, d in enumerate(dims) if i not in reduced]), dtypes.string


def _reduce_join_kernel(x, axes, keep_dims=False, separator=""):
    reduced = _normalized_axes(np.reshape(axes, -1), x.ndim, "ReduceJoin")
    kept = [i for i in range(x.ndim) if i not in reduced]
    # the first axis listed varies fastest in each joined row, as TF's ([0, 1] of
    # [["a", "b"], ["c", "d"]] is "acbd")
    rows = np.transpose(x, kept + reduced[::-1]).reshape(
        [x.shape[i] for i in kept] + [int(np.prod([x.shape[i] for i in reduced]))])
    sep = separator.encode("utf-8")
    out = np.empty(rows.shape[:-1], object)
    flat_rows = rows.reshape(out.size, rows.shape[-1])
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = sep.join(bytes(v) for v in flat_rows[i])
    if keep_dims:
        out = out.reshape([1 if i in reduced else d for i, d in enumerate(x.shape)])
    return out


register_op("ReduceJoin", infer=_reduce_join_infer, kernel=_reduce_join_kernel, **_HOST)
not_differentiable("ReduceJoin")


def reduce_join(inputs, axis=None, keep_dims=None, separator="", name=None,
                reduction_indices=None, keepdims=None):
    """The strings along `axis` joined with `separator`, the first axis listed varying
    fastest; axis None joins all, last axis fastest (row-major); an empty axis joins to
    b''."""
    if reduction_indices is not None:
        if axis is not None:
            raise ValueError("reduce_join: give axis or reduction_indices, not both")
        axis = reduction_indices
    if keepdims is not None and keep_dims is not None and bool(keepdims) != bool(keep_dims):
        raise ValueError("reduce_join: keepdims and keep_dims disagree")
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with name_scope(name, "ReduceJoin", [inputs]) as scope:
        x = _strings(inputs, "inputs")
        if axis is None:
            if x.shape.ndims is None:
                from graphc.ops.array_ops import range as range_, rank
                axes = range_(rank(x) - 1, -1, -1)
            else:
                axes = convert_to_tensor(np.arange(x.shape.ndims - 1, -1, -1, dtype=np.int32),
                                         name="axis")
        else:
            axes = convert_to_tensor(axis, dtype=dtypes.int32, name="axis")
        return x.graph.create_op("ReduceJoin", [x, axes],
                                 {"keep_dims": keep, "separator": str(separator)},
                                 scope).outputs[0]


# ----------------------------------------------------------------------- split
def _split_infer(op_type):
    def infer(inputs, a):
        source, sep = inputs
        _need_string(source, op_type)
        _need_string(sep, op_type, "delimiter")
        if source.shape.ndims not in (None, 1):
            raise ValueError(f"{op_type}: input must be a vector, got shape {source.shape}")
        if sep.shape.ndims not in (None, 0):
            raise ValueError(f"{op_type}: delimiter must be a scalar, got shape {sep.shape}")
        return [(TensorShape([None, 2]), dtypes.int64), (TensorShape([None]), dtypes.string),
                (TensorShape([2]), dtypes.int64)]
    return infer


def _split_any_char(s, delimiter, skip_empty):
    """TF1's StringSplit: every byte of delimiter splits; an empty one splits into bytes;
    an empty string has no tokens, even with skip_empty=False."""
    if not s:
        return []
    if not delimiter:
        return [s[i:i + 1] for i in range(len(s))]
    tokens = re.split(b"[" + re.escape(delimiter) + b"]", s)
    return [t for t in tokens if t] if skip_empty else tokens


def _split_sep(s, sep, maxsplit):
    """StringSplitV2 as Python's str.split: sep b'' splits on runs of ASCII whitespace."""
    if not sep:
        return s.split(None, maxsplit)
    return s.split(sep, maxsplit)


def _sparse_rows(rows):
    """(indices, values, dense_shape) of a SparseTensor [len(rows), longest] of token rows."""
    indices = np.array([(i, j) for i, row in enumerate(rows) for j in range(len(row))],
                       np.int64).reshape(-1, 2)
    values = np.empty(len(indices), object)
    values[:] = [t for row in rows for t in row]
    width = max((len(r) for r in rows), default=0)
    return indices, values, np.array([len(rows), width], np.int64)


def _split_kernel(source, sep, skip_empty=True):
    sep = bytes(sep[()])
    return _sparse_rows([_split_any_char(bytes(s), sep, skip_empty) for s in source])


def _split_v2_kernel(source, sep, maxsplit=-1):
    sep = bytes(sep[()])
    return _sparse_rows([_split_sep(bytes(s), sep, maxsplit) for s in source])


register_op("StringSplit", infer=_split_infer("StringSplit"), kernel=_split_kernel, **_HOST)
register_op("StringSplitV2", infer=_split_infer("StringSplitV2"), kernel=_split_v2_kernel,
            **_HOST)
not_differentiable("StringSplit", "StringSplitV2")


def _split(op, source, sep, attrs, name):
    with name_scope(name, op, [source]) as scope:
        x = _strings(source, "input")
        s = _strings(sep, "delimiter")
        out = x.graph.create_op(op, [x, s], attrs, scope).outputs
        return SparseTensor(*out)


def string_split(source, sep=None, skip_empty=True, delimiter=None, name=None):
    """TF1's tf.string_split: a SparseTensor [batch, longest] of the tokens of each string
    of the vector `source`; every character of `delimiter` (default ' ') splits, and ''
    splits into bytes; empty tokens are dropped when skip_empty."""
    if sep is not None and delimiter is not None:
        raise ValueError("string_split: give sep or delimiter, not both")
    delimiter = sep if sep is not None else " " if delimiter is None else delimiter
    return _split("StringSplit", source, delimiter, {"skip_empty": bool(skip_empty)}, name)


def split(input=None, sep=None, maxsplit=-1, result_type="SparseTensor", source=None,
          name=None):
    """TF1's tf.strings.split: a SparseTensor of the tokens of each string of a vector, as
    Python's bytes.split: `sep` splits (empty tokens kept), None or '' splits on runs of
    whitespace; at most maxsplit splits when it is not -1."""
    if (input is None) == (source is None):
        raise ValueError("strings.split: give input (or source), once")
    if result_type != "SparseTensor":
        raise ValueError(f"strings.split: graphc has no RaggedTensor; result_type must be "
                         f"'SparseTensor', got {result_type!r}")
    return _split("StringSplitV2", input if source is None else source,
                  "" if sep is None else sep, {"maxsplit": int(maxsplit)}, name)


# ------------------------------------------------------------------- substrings
def _substr_infer(inputs, a):
    x, pos, n = inputs
    _need_string(x, "Substr")
    for t, what in ((pos, "pos"), (n, "len")):
        if t.dtype not in (dtypes.int32, dtypes.int64):
            raise TypeError(f"Substr: {what} must be int32 or int64, got {t.dtype.name}")
    if pos.dtype != n.dtype:
        raise TypeError(f"Substr: pos and len must have one dtype, got {pos.dtype.name} and "
                        f"{n.dtype.name}")
    try:
        return broadcast_shapes(broadcast_shapes(x.shape, pos.shape), n.shape), dtypes.string
    except ValueError:
        raise ValueError(f"Substr: pos and len must broadcast with input, got shapes "
                         f"{x.shape}, {pos.shape} and {n.shape}") from None


def _units(s, unit):
    if unit == "BYTE":
        return s
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        raise KernelError(f"Substr: {s!r} is not valid UTF-8") from None


def _substr_kernel(x, pos, n, unit="BYTE"):
    x, pos, n = np.broadcast_arrays(np.asarray(x, object), pos, n)
    out = np.empty(x.shape, object)
    for i in np.ndindex(x.shape):
        s = _units(bytes(x[i]), unit)
        p, k = int(pos[i]), int(n[i])
        start = p if p >= 0 else p + len(s)
        if not 0 <= start <= len(s):
            raise KernelError(f"pos {p} out of range for string b'{bytes(x[i]).decode('latin-1')}'"
                              f" at index {list(i)}")
        piece = s[start:] if k < 0 else s[start:start + k]
        out[i] = piece if unit == "BYTE" else piece.encode("utf-8")
    return out


register_op("Substr", infer=_substr_infer, kernel=_substr_kernel, **_HOST)
not_differentiable("Substr")


def substr(input, pos, len, name=None, unit="BYTE"):
    """The substring of `len` units (bytes, or Unicode characters with unit='UTF8_CHAR')
    of each string from `pos`; a negative pos counts from the end, a len past the end or
    negative takes the rest; a pos outside the string is an InvalidArgumentError."""
    if unit not in ("BYTE", "UTF8_CHAR"):
        raise ValueError(f"substr: unit must be 'BYTE' or 'UTF8_CHAR', got {unit!r}")
    with name_scope(name, "Substr", [input, pos, len]) as scope:
        x = _strings(input, "input")
        p = convert_to_tensor(pos, dtype_hint=dtypes.int32, name="pos")
        n = convert_to_tensor(len, dtype_hint=p.dtype, name="len")
        return x.graph.create_op("Substr", [x, p, n], {"unit": unit}, scope).outputs[0]


# ----------------------------------------------------------------- numbers
_TO_NUMBER_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64)
_INTEGER = re.compile(rb"[ \t\n\v\f\r]*[+-]?[0-9]+[ \t\n\v\f\r]*")
_FLOAT = re.compile(rb"[ \t\n\v\f\r]*[+-]?([0-9]+\.?[0-9]*([eE][+-]?[0-9]+)?|"
                    rb"\.[0-9]+([eE][+-]?[0-9]+)?|inf|infinity|nan)[ \t\n\v\f\r]*",
                    re.IGNORECASE)
# strtod's hexadecimal form, which TF's float parsing also reads ("0x10" is 16)
_HEX_FLOAT = re.compile(rb"[ \t\n\v\f\r]*[+-]?0x([0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)"
                        rb"(p[+-]?[0-9]+)?[ \t\n\v\f\r]*", re.IGNORECASE)


def _parse_number(s, dtype):
    """One string as TF's StringToNumber reads it: decimal, optional sign, surrounding
    whitespace; floats also exponents, hexadecimal, inf and nan (past float32's range:
    inf); an integer out of range is an error."""
    if not dtype.is_integer and _HEX_FLOAT.fullmatch(s) is not None:
        return _as_float(float.fromhex(s.decode("ascii").strip()), dtype)
    pattern = _INTEGER if dtype.is_integer else _FLOAT
    if pattern.fullmatch(s) is None:
        raise KernelError(f"StringToNumberOp could not correctly convert string: "
                          f"{s.decode('latin-1')}")
    if dtype.is_integer:
        value = int(s)
        info = np.iinfo(dtype.np)
        if not info.min <= value <= info.max:
            raise KernelError(f"StringToNumberOp could not correctly convert string: "
                              f"{s.decode('latin-1')}")
        return value
    return _as_float(float(s), dtype)


def _as_float(value, dtype):
    with np.errstate(over="ignore"):  # past float32's range is inf, as TF's
        return dtype.np.type(value)


def _to_number_infer(inputs, a):
    _need_string(inputs[0], "StringToNumber", "string_tensor")
    return inputs[0].shape, a["out_type"]


def _to_number_kernel(x, out_type):
    return _each(lambda s: _parse_number(bytes(s), out_type), x, out_type.np)


register_op("StringToNumber", infer=_to_number_infer, kernel=_to_number_kernel, **_HOST)
not_differentiable("StringToNumber")


def string_to_number(string_tensor=None, out_type=dtypes.float32, name=None, input=None):
    """Each string parsed as a number of out_type (float32, float64, int32 or int64)."""
    out_type = dtypes.as_dtype(out_type)
    if out_type not in _TO_NUMBER_TYPES:
        raise TypeError(f"string_to_number: out_type must be one of float32, float64, int32, "
                        f"int64, got {out_type.name}")
    x = _strings(string_tensor if input is None else input, "string_tensor")
    return x.graph.create_op("StringToNumber", [x], {"out_type": out_type},
                             name or "StringToNumber").outputs[0]


def to_number(input, out_type=dtypes.float32, name=None):
    return string_to_number(input, out_type, name)


_FILLS = ("", " ", "+", "-", "0", "#")


def _as_string_format(dtype, precision, scientific, shortest, width, fill):
    """The printf format TF's AsString builds (as_string_op.cc)."""
    if scientific and shortest:
        raise ValueError("as_string: cannot select both scientific and shortest notation")
    if fill not in _FILLS:
        raise ValueError(f"as_string: fill argument not supported: {fill!r} (one of "
                         f"{', '.join(map(repr, _FILLS))})")
    if not dtype.is_floating and (scientific or shortest or precision > -1):
        raise ValueError(f"as_string: scientific, shortest and precision apply to floats "
                         f"only, not to {dtype.name}")
    spec = "%" + fill + (str(width) if width > -1 else "")
    if dtype.is_floating:
        spec += (f".{precision}" if precision > -1 else "") + \
            ("e" if scientific else "g" if shortest else "f")
    else:
        spec += "s" if dtype.is_bool else "d"
    return spec


def _as_string_infer(inputs, a):
    x = inputs[0]
    if x.dtype == dtypes.string:
        raise TypeError("AsString: input must be a number or bool, got string")
    _as_string_format(x.dtype, **a)
    return x.shape, dtypes.string


def _as_string_kernel(x, **attrs):
    fmt = _as_string_format(dtypes.as_dtype(x.dtype), **attrs)
    if x.dtype == np.bool_:
        return _each(lambda v: (fmt % ("true" if v else "false")).encode(), x)
    cast = float if x.dtype.kind == "f" else int
    return _each(lambda v: (fmt % cast(v)).encode(), x)


register_op("AsString", infer=_as_string_infer, kernel=_as_string_kernel, **_HOST)
not_differentiable("AsString")


def as_string(input, precision=-1, scientific=False, shortest=False, width=-1, fill="",
              name=None):
    """Each number as text, as C's printf: floats "%f" (or %e scientific, %g shortest,
    with `precision` digits), integers "%d", bools "true"/"false"; padded to `width` with
    spaces or `fill`."""
    x = convert_to_tensor(input, name="input")
    attrs = {"precision": int(precision), "scientific": bool(scientific),
             "shortest": bool(shortest), "width": int(width), "fill": str(fill)}
    try:
        return x.graph.create_op("AsString", [x], attrs, name or "AsString").outputs[0]
    except ValueError as e:
        raise ValueError(f"as_string: {e}") from None


# -------------------------------------------------------------------- raw bytes
_DECODE_RAW_TYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int8,
                     dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8)


def _decode_raw_infer(inputs, a):
    x = inputs[0]
    _need_string(x, "DecodeRaw", "bytes")
    return x.shape.concatenate([None]), a["out_type"]


def _decode_raw_kernel(x, out_type, little_endian=True):
    dtype = out_type.np.newbyteorder("<" if little_endian else ">")
    flat = [bytes(s) for s in x.reshape(-1)]
    size = len(flat[0]) if flat else 0
    for i, s in enumerate(flat):
        if len(s) != size:
            raise KernelError(f"DecodeRaw requires input strings to all be the same size, "
                              f"but element {i} has size {len(s)} != {size}")
    if size % dtype.itemsize:
        raise KernelError(f"Input to DecodeRaw has length {size} that is not a multiple of "
                          f"{dtype.itemsize}, the size of {out_type.name}")
    values = np.frombuffer(b"".join(flat), dtype).astype(out_type.np)
    return values.reshape(x.shape + (size // dtype.itemsize,))


register_op("DecodeRaw", infer=_decode_raw_infer, kernel=_decode_raw_kernel, **_HOST)
not_differentiable("DecodeRaw")


def decode_raw(input_bytes=None, out_type=None, little_endian=True, name=None, bytes=None):
    """Each string's bytes read as a vector of out_type: the output has the input's shape
    plus one dim; every string must have the same length, a multiple of the type's size."""
    if (input_bytes is None) == (bytes is None):
        raise ValueError("decode_raw: give input_bytes (or bytes), once")
    if out_type is None:
        raise ValueError("decode_raw: out_type is required")
    out_type = dtypes.as_dtype(out_type)
    if out_type not in _DECODE_RAW_TYPES:
        raise TypeError(f"decode_raw: out_type must be one of "
                        f"{', '.join(t.name for t in _DECODE_RAW_TYPES)}, got {out_type.name}")
    x = _strings(input_bytes if bytes is None else bytes, "bytes")
    return x.graph.create_op("DecodeRaw", [x], {"out_type": out_type,
                                                "little_endian": bool(little_endian)},
                             name or "DecodeRaw").outputs[0]


# ----------------------------------------------------------------------- hashing
def _hash_bucket_infer(inputs, a):
    _need_string(inputs[0], "StringToHashBucketFast")
    return inputs[0].shape, dtypes.int64


def _hash_bucket_kernel(x, num_buckets):
    return _each(lambda s: fingerprint64(bytes(s)) % num_buckets, x, np.int64)


register_op("StringToHashBucketFast", infer=_hash_bucket_infer, kernel=_hash_bucket_kernel,
            **_HOST)
not_differentiable("StringToHashBucketFast")


def string_to_hash_bucket_fast(input, num_buckets, name=None):
    """int64 bucket of each string: FarmHash Fingerprint64 mod num_buckets, TF's values."""
    if int(num_buckets) < 1:
        raise ValueError(f"string_to_hash_bucket_fast: num_buckets must be >= 1, got "
                         f"{num_buckets}")
    x = _strings(input, "input")
    return x.graph.create_op("StringToHashBucketFast", [x], {"num_buckets": int(num_buckets)},
                             name or "StringToHashBucketFast").outputs[0]


def to_hash_bucket_fast(input, num_buckets, name=None):
    return string_to_hash_bucket_fast(input, num_buckets, name)


# ------------------------------------------------------------------------ base64
def _encode_base64(s, pad=False):
    text = base64.urlsafe_b64encode(s)
    return text if pad else text.rstrip(b"=")


def _decode_base64(s):
    """TF's DecodeBase64: the web-safe alphabet, padding optional."""
    if not re.fullmatch(rb"[A-Za-z0-9_-]*={0,2}", s) or len(s.rstrip(b"=")) % 4 == 1:
        raise KernelError(f"Invalid character found in base64 or invalid length: {s!r}")
    body = s.rstrip(b"=")
    try:
        return base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise KernelError(f"Invalid base64 data: {s!r}") from None


_register_unary("EncodeBase64", _encode_base64)
_register_unary("DecodeBase64", _decode_base64)


def encode_base64(input, pad=False, name=None):
    """Each string in web-safe base64 ('-' and '_' for '+' and '/'), '=' padding if pad."""
    return _unary("EncodeBase64", input, name, pad=bool(pad))


def decode_base64(input, name=None):
    """Each web-safe base64 string decoded (padding optional)."""
    return _unary("DecodeBase64", input, name)
