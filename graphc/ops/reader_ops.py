"""TF1's readers: TextLineReader, WholeFileReader, TFRecordReader and
FixedLengthRecordReader. reader.read(queue) gives (key, value), one record: the reader
takes a file name from the queue (a string_input_producer's) when it has none, reads that
file's records in order, and takes the next name when the file is done; once the queue is
closed and empty, read raises OutOfRangeError (the end of input that Coordinator and
MonitoredSession stop on).

A reader's position is Session state (SessionState.readers), so its ops are stateful host
ops; the reader op outputs a handle (a string naming it), as queue ops do."""
import gzip
import os
import zlib

import numpy as np

from graphc import dtypes
from graphc.errors import InvalidArgumentError, KernelError, NotFoundError, OutOfRangeError
from graphc.framework.graph import get_default_graph
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor
from graphc.tf_formats import records

__all__ = ["ReaderBase", "TextLineReader", "WholeFileReader", "TFRecordReader",
           "FixedLengthRecordReader", "text_lines"]

_READER_OP = dict(stateful=True, uses_context=True, kind="opaque", host_only=True)


def _file_bytes(path, compression=""):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise KernelError(f"{path}; No such file or directory", NotFoundError) from None
    if compression == "GZIP":
        return gzip.decompress(data)
    if compression == "ZLIB":
        return zlib.decompress(data)
    return data


def text_lines(path, compression=""):
    """The lines of a text file as TF's line reading gives them: without their "\\n" (or
    "\\r\\n"), empty lines kept, a last line without "\\n" kept."""
    lines = _file_bytes(path, compression).split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


# ----------------------------------------------------------- records of one file
def _text_records(path, attrs):
    skip = attrs.get("skip_header_lines", 0)
    for number, line in enumerate(text_lines(path), 1):
        if number > skip:
            yield f"{path}:{number}".encode(), line


def _whole_file_records(path, attrs):
    yield path.encode(), _file_bytes(path)


def _tf_records(path, attrs):
    for i, record in enumerate(records.read_records(path, attrs.get("compression_type", ""))):
        yield f"{path}:{i}".encode(), record


def _fixed_length_records(path, attrs):
    data = _file_bytes(path, attrs.get("encoding", ""))
    header, footer = attrs["header_bytes"], attrs["footer_bytes"]
    size, hop = attrs["record_bytes"], attrs["hop_bytes"] or attrs["record_bytes"]
    body = data[header:len(data) - footer]
    for i, start in enumerate(range(0, len(body) - size + 1, hop)):
        yield f"{path}:{i}".encode(), body[start:start + size]


_RECORDS = {"TextLineReaderV2": _text_records, "WholeFileReaderV2": _whole_file_records,
            "TFRecordReaderV2": _tf_records, "FixedLengthRecordReaderV2": _fixed_length_records}


class _ReaderState:
    """Where one reader is: the records left of its current file, and its counts."""

    def __init__(self, records_of, attrs):
        self.records_of, self.attrs = records_of, attrs
        self.current = None
        self.produced = 0
        self.completed = 0

    def reset(self):
        self.current, self.produced, self.completed = None, 0, 0

    def next_record(self, state, op, queue_handle):
        while True:
            if self.current is None:
                queue = state.resource("queues", queue_handle)
                timeout = state.operation_timeout_ms / 1000.0 if \
                    state.operation_timeout_ms else None
                name = queue.take(1, False, timeout)[0][0]
                path = os.fsdecode(bytes(np.asarray(name, object)[()]))
                self.current = iter(self.records_of(path, self.attrs))
            record = next(self.current, None)
            if record is not None:
                self.produced += 1
                return record
            self.current = None
            self.completed += 1


# -------------------------------------------------------------------------- ops
def _reader_kernel(state, op):
    if op.name not in state.readers:
        state.readers[op.name] = _ReaderState(_RECORDS[op.type], dict(op.attrs))
    return np.array(op.name, object)


def _read_kernel(state, op, reader, queue):
    key, value = state.resource("readers", reader).next_record(state, op, queue)
    return np.array(key, object), np.array(value, object)


def _read_up_to_kernel(state, op, reader, queue, num_records):
    n = int(num_records)
    if n <= 0:
        raise KernelError(f"num_records must be > 0, got {n}", InvalidArgumentError)
    r = state.resource("readers", reader)
    keys, values = [], []
    while len(keys) < n:
        try:
            key, value = r.next_record(state, op, queue)
        except KernelError as e:
            # the end of input after some records: those are the last batch, as TF's
            if keys and e.cls is OutOfRangeError:
                break
            raise
        keys.append(key)
        values.append(value)
    out_k, out_v = np.empty(len(keys), object), np.empty(len(values), object)
    out_k[:], out_v[:] = keys, values
    return out_k, out_v


def _scalar_pair(inputs, a):
    return [(TensorShape([]), dtypes.string), (TensorShape([]), dtypes.string)]


def _vector_pair(inputs, a):
    return [(TensorShape([None]), dtypes.string), (TensorShape([None]), dtypes.string)]


for _type in _RECORDS:
    register_op(_type, infer=lambda inputs, a: (TensorShape([]), dtypes.string),
                kernel=_reader_kernel, **_READER_OP)
register_op("ReaderReadV2", infer=_scalar_pair, kernel=_read_kernel, **_READER_OP)
register_op("ReaderReadUpToV2", infer=_vector_pair, kernel=_read_up_to_kernel, **_READER_OP)
register_op("ReaderNumRecordsProducedV2",
            infer=lambda inputs, a: (TensorShape([]), dtypes.int64), writes_state=False,
            kernel=lambda state, op, r: np.int64(state.resource("readers", r).produced), **_READER_OP)
register_op("ReaderNumWorkUnitsCompletedV2",
            infer=lambda inputs, a: (TensorShape([]), dtypes.int64), writes_state=False,
            kernel=lambda state, op, r: np.int64(state.resource("readers", r).completed),
            **_READER_OP)
register_op("ReaderResetV2", infer=lambda inputs, a: [],
            kernel=lambda state, op, r: state.resource("readers", r).reset() or [], **_READER_OP)
not_differentiable(*_RECORDS, "ReaderReadV2", "ReaderReadUpToV2",
                   "ReaderNumRecordsProducedV2", "ReaderNumWorkUnitsCompletedV2",
                   "ReaderResetV2")


# ---------------------------------------------------------------------- classes
def _queue_handle(queue):
    handle = getattr(queue, "queue_ref", queue)
    if handle.dtype != dtypes.string:
        raise TypeError(f"a reader reads file names from a queue, got {handle!r}")
    return handle


class ReaderBase:
    """A reader of records from the files named by a queue (TF1's io_ops.ReaderBase)."""

    def __init__(self, op_type, attrs, name):
        graph = get_default_graph()
        self._reader_ref = graph.create_op(op_type, [], attrs, name or op_type).outputs[0]
        self._graph = graph

    reader_ref = property(lambda self: self._reader_ref)
    supports_serialize = False

    def read(self, queue, name=None):
        """(key, value): the next record, scalar strings."""
        return tuple(self._graph.create_op("ReaderReadV2", [self._reader_ref,
                                                            _queue_handle(queue)], {},
                                           name or "ReaderReadV2").outputs)

    def read_up_to(self, queue, num_records, name=None):
        """(keys, values): up to num_records records (fewer only at the end of input)."""
        with self._graph.as_default():
            n = convert_to_tensor(num_records, dtype=dtypes.int64, name="num_records")
        return tuple(self._graph.create_op("ReaderReadUpToV2", [self._reader_ref,
                                                                _queue_handle(queue), n], {},
                                           name or "ReaderReadUpToV2").outputs)

    def num_records_produced(self, name=None):
        return self._graph.create_op("ReaderNumRecordsProducedV2", [self._reader_ref], {},
                                     name or "ReaderNumRecordsProducedV2").outputs[0]

    def num_work_units_completed(self, name=None):
        return self._graph.create_op("ReaderNumWorkUnitsCompletedV2", [self._reader_ref], {},
                                     name or "ReaderNumWorkUnitsCompletedV2").outputs[0]

    def reset(self, name=None):
        return self._graph.create_op("ReaderResetV2", [self._reader_ref], {},
                                     name or "ReaderResetV2")


class TextLineReader(ReaderBase):
    """Records are lines (without "\\n" or "\\r\\n"); keys are "file:line" (from 1),
    after skip_header_lines lines of each file."""

    def __init__(self, skip_header_lines=None, name=None):
        super().__init__("TextLineReaderV2", {"skip_header_lines": int(skip_header_lines or 0)},
                         name)


class WholeFileReader(ReaderBase):
    """One record per file: key the file name, value its bytes."""

    def __init__(self, name=None):
        super().__init__("WholeFileReaderV2", {}, name)


class TFRecordReader(ReaderBase):
    """Records of TFRecord files; keys are "file:index"."""

    def __init__(self, name=None, options=None):
        super().__init__("TFRecordReaderV2",
                         {"compression_type": records.compression_type(options)}, name)


class FixedLengthRecordReader(ReaderBase):
    """Records of record_bytes bytes each, between header_bytes and footer_bytes of each
    file, every hop_bytes (default: record_bytes); a last partial record is dropped."""

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None,
                 name=None, encoding=None):
        if int(record_bytes) <= 0:
            raise ValueError(f"record_bytes must be > 0, got {record_bytes}")
        super().__init__("FixedLengthRecordReaderV2", {
            "record_bytes": int(record_bytes), "header_bytes": int(header_bytes or 0),
            "footer_bytes": int(footer_bytes or 0), "hop_bytes": int(hop_bytes or 0),
            "encoding": records.compression_type(encoding)}, name)
