"""tf.compat: bytes/text conversion as TF1's, and `compat.v1`, which is graphc itself (so
TF2-era scripts written against tf.compat.v1 run unchanged)."""
import numbers as _numbers
import os as _os
import sys as _sys

import numpy as _np

v1 = _sys.modules["graphc"]

bytes_or_text_types = (bytes, str)
integral_types = (_numbers.Integral, _np.integer)
real_types = (_numbers.Real, _np.integer, _np.floating)
complex_types = (_numbers.Complex, _np.number)


def as_bytes(bytes_or_text, encoding="utf-8"):
    """bytes as they are, str encoded; anything else a TypeError, as TF1's."""
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text, encoding="utf-8"):
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text.decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text
as_bytes_or_text = as_text


def as_str_any(value):
    """str of anything; bytes are decoded rather than repr'd."""
    return as_str(value) if isinstance(value, bytes) else str(value)


def path_to_str(path):
    return _os.fspath(path) if isinstance(path, _os.PathLike) else path


def forward_compatible(year, month, day):
    """graphc has no forward-compatibility window: every date is in the past for it."""
    return True
