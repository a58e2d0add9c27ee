"""tf.data.TFRecordDataset and TextLineDataset: the records of TFRecord files
(tf_formats/records.py) or the lines of text files (as TF1's TextLineReader reads them),
one scalar string element each, file after file."""
import os

import numpy as np

from graphc import dtypes, errors
from graphc.data import structure
from graphc.data.dataset_ops import Dataset
from graphc.framework.graph import Tensor
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.reader_ops import text_lines
from graphc.tf_formats import records

__all__ = ["TFRecordDataset", "TextLineDataset"]


def _file_names(value):
    names = np.asarray(value, dtype=object).reshape(-1)
    out = []
    for n in names:
        if isinstance(n, bytes):
            n = n.decode("utf-8")
        if not isinstance(n, str):
            raise errors.KernelError(f"dataset filenames must be strings, got {n!r}",
                                     errors.InvalidArgumentError)
        out.append(n)
    return out


def _checked_file_names(filenames, what):
    """filenames (a path, a list of them, or a string Tensor of them), checked."""
    if isinstance(filenames, Tensor):
        if filenames.dtype != dtypes.string:
            raise TypeError(f"{what} filenames must be a string Tensor, got "
                            f"{filenames.dtype.name}")
        if filenames.shape.ndims not in (None, 0, 1):
            raise ValueError(f"filenames must be a scalar or a vector, got shape "
                             f"{filenames.shape}")
        return filenames
    filenames = [filenames] if isinstance(filenames, (str, bytes, os.PathLike)) \
        else list(filenames)
    filenames = [os.fspath(n) if isinstance(n, os.PathLike) else n for n in filenames]
    bad = [n for n in filenames if not isinstance(n, (str, bytes))]
    if bad:
        raise TypeError(f"{what} filenames must be strings, got {bad[0]!r}")
    return filenames


class _FileRecordsDataset(Dataset):
    """One scalar string element per record of each file of `filenames` in turn (a path, a
    list of paths, or a string Tensor of them, e.g. a placeholder fed when the iterator is
    initialized), read on the host as the pipeline asks. compression_type: None/"", "ZLIB"
    or "GZIP"."""

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None):
        self._filenames = _checked_file_names(filenames, type(self).__name__)
        self._params = [self._filenames]
        self._compression = records.compression_type(compression_type)
        self._structure = structure.LEAF
        self._types = [dtypes.string]
        self._shapes = [TensorShape([])]

    def _elements(self, run):
        for path in _file_names(run.value(self._filenames)):
            for record in self._records(path):
                yield [np.array(record, dtype=object)]


class TextLineDataset(_FileRecordsDataset):
    """The lines of the files (without "\\n" or "\\r\\n"; empty lines kept)."""

    def _records(self, path):
        return text_lines(path, self._compression)


class TFRecordDataset(_FileRecordsDataset):
    """The records of TFRecord files (tf_formats/records.py)."""

    def _records(self, path):
        return records.read_records(path, self._compression)
