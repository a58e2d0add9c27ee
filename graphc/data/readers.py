"""tf.data.TFRecordDataset: the records of TFRecord files (tf_formats/records.py), one
scalar string element per record, file after file."""
import os

import numpy as np

from graphc import dtypes, errors
from graphc.data import structure
from graphc.data.dataset_ops import Dataset
from graphc.framework.graph import Tensor
from graphc.framework.tensor_shape import TensorShape
from graphc.tf_formats import records

__all__ = ["TFRecordDataset"]


def _file_names(value):
    names = np.asarray(value, dtype=object).reshape(-1)
    out = []
    for n in names:
        if isinstance(n, bytes):
            n = n.decode("utf-8")
        if not isinstance(n, str):
            raise errors.KernelError(f"TFRecordDataset filenames must be strings, got {n!r}",
                                     errors.InvalidArgumentError)
        out.append(n)
    return out


class TFRecordDataset(Dataset):
    """Records of `filenames` (a path, a list of paths, or a string Tensor of them, e.g. a
    placeholder fed when the iterator is initialized), read on the host as the pipeline
    asks for them. compression_type: None/"" , "ZLIB" or "GZIP"."""

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None):
        if isinstance(filenames, Tensor):
            if filenames.dtype != dtypes.string:
                raise TypeError(f"filenames must be a string Tensor, got {filenames.dtype.name}")
            if filenames.shape.ndims not in (None, 0, 1):
                raise ValueError(f"filenames must be a scalar or a vector, got shape "
                                 f"{filenames.shape}")
        else:
            filenames = [filenames] if isinstance(filenames, (str, bytes, os.PathLike)) \
                else list(filenames)
            filenames = [os.fspath(n) if isinstance(n, os.PathLike) else n for n in filenames]
            bad = [n for n in filenames if not isinstance(n, (str, bytes))]
            if bad:
                raise TypeError(f"TFRecordDataset filenames must be strings, got {bad[0]!r}")
        self._filenames = filenames
        self._params = [filenames]
        self._compression = records.compression_type(compression_type)
        self._structure = structure.LEAF
        self._types = [dtypes.string]
        self._shapes = [TensorShape([])]

    def _elements(self, run):
        for path in _file_names(run.value(self._filenames)):
            for record in records.read_records(path, self._compression):
                yield [np.array(record, dtype=object)]
