"""TF checkpoints (format V2, "tensor bundles"), tensorflow/core/util/tensor_bundle:

    <prefix>.index                  a table (table.py): key "" -> BundleHeaderProto
                                    (num_shards, endianness, version), then one key per
                                    tensor name -> BundleEntryProto (dtype, shape, shard_id,
                                    offset, size, masked CRC32C of the tensor's bytes)
    <prefix>.data-00000-of-00001    the tensors' bytes, C order, little-endian, one after
                                    another at their entries' offsets

A string tensor's bytes are: the varint64 length of each element, the masked CRC32C of
those varints (uint32), then the elements' bytes; its entry's crc32c covers all of it.
graphc writes one shard of numeric and string tensors; it reads any number of shards
of them (TF2's object checkpoints hold their object graph as one). Partitioned
(sliced) variables are refused with an error naming the tensor."""
import os
import struct

import numpy as np

from graphc import dtypes, errors
from graphc.tf_formats import protos
from graphc.tf_formats.records import masked_crc32c
from graphc.train.checkpoint_file import write_atomically
from graphc.tf_formats.table import (TableError, build_table, get_varint, put_varint,
                                     read_table)
from graphc.tf_formats.tensors import FormatError, data_type, graphc_dtype, graphc_shape, \
    shape_proto

INDEX_SUFFIX = ".index"


def index_path(prefix):
    return prefix + INDEX_SUFFIX


def data_path(prefix, shard=0, num_shards=1):
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def is_bundle(prefix):
    return os.path.isfile(index_path(prefix))


def _atomic_write(path, data):
    write_atomically(path, lambda f: f.write(data))


def write_bundle(prefix, named_arrays):
    """Writes {name: (array, DType)} as a TF V2 checkpoint; returns the index path.
    The data file is written before the index, so an index always has its data."""
    pb = protos.tensor_bundle_pb2()
    blobs, entries, offset = [], [], 0
    for name in sorted(named_arrays, key=lambda n: n.encode()):
        value, dtype = named_arrays[name]
        dtype = dtypes.as_dtype(dtype)
        array = np.asarray(value, dtype=dtype.np, order="C")  # keeps 0-d arrays 0-d
        if dtype == dtypes.string:
            blob, crc = _string_blob(array)
        else:
            blob = array.astype(array.dtype.newbyteorder("<")).tobytes()
            crc = masked_crc32c(blob)
        entry = pb.BundleEntryProto(dtype=data_type(dtype), shape=shape_proto(array.shape),
                                    shard_id=0, offset=offset, size=len(blob), crc32c=crc)
        entries.append((name.encode(), entry.SerializeToString()))
        blobs.append(blob)
        offset += len(blob)
    header = pb.BundleHeaderProto(num_shards=1, endianness=0)
    header.version.producer = 1  # TF's kTensorBundleVersion
    _atomic_write(data_path(prefix), b"".join(blobs))
    _atomic_write(index_path(prefix), build_table([(b"", header.SerializeToString())]
                                                  + entries))
    return index_path(prefix)


def _string_blob(array):
    """(bytes, entry checksum) of a string tensor as TF's bundle writer lays it out: the
    varint lengths, the masked CRC32C of the lengths as uint32s, the elements' bytes; the
    entry's checksum covers the lengths as uint32s, that CRC and the bytes."""
    items = [bytes(v) for v in array.reshape(-1)]
    varints = bytearray()
    for item in items:
        put_varint(varints, len(item))
    as_ints = b"".join(struct.pack("<I" if len(v) <= 0xFFFFFFFF else "<Q", len(v))
                       for v in items)
    check = struct.pack("<I", masked_crc32c(as_ints))
    body = b"".join(items)
    return bytes(varints) + check + body, masked_crc32c(as_ints + check + body)


class BundleReader:
    """Reads a TF V2 checkpoint; the same methods as checkpoint_file.CheckpointReader.

    Raises NotFoundError for a missing file or tensor, DataLossError for a damaged one
    (naming the file and the field)."""

    def __init__(self, prefix):
        self._prefix = prefix
        self._path = index_path(prefix)
        try:
            with open(self._path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise errors.NotFoundError(
                None, None, f"Unsuccessful TensorSliceReader constructor: Failed to find any "
                            f"matching files for {prefix}") from None
        try:
            items = read_table(raw, self._path)
        except TableError as e:
            raise errors.DataLossError(None, None, f"Unable to read checkpoint: {e}") from None
        self._entries = {}
        self._num_shards = self._read_header(items)
        for key, value in items[1:]:
            self._add_entry(key, value)

    def _corrupt(self, why):
        raise errors.DataLossError(None, None, f"Unable to read checkpoint {self._path}: {why}")

    def _read_header(self, items):
        pb = protos.tensor_bundle_pb2()
        if not items or items[0][0] != b"":
            self._corrupt("no BundleHeaderProto (the table has no entry with the empty key)")
        header = pb.BundleHeaderProto()
        try:
            header.ParseFromString(items[0][1])
        except Exception as e:  # protobuf's DecodeError
            self._corrupt(f"BundleHeaderProto does not parse ({e})")
        if header.endianness != 0:
            self._corrupt("BundleHeaderProto.endianness is BIG: big-endian checkpoints are "
                          "not supported")
        if header.num_shards < 1:
            self._corrupt(f"BundleHeaderProto.num_shards is {header.num_shards}")
        return header.num_shards

    def _add_entry(self, key, value):
        pb = protos.tensor_bundle_pb2()
        name = key.decode("utf-8", "replace")
        entry = pb.BundleEntryProto()
        try:
            entry.ParseFromString(value)
        except Exception as e:  # protobuf's DecodeError
            self._corrupt(f"BundleEntryProto of {name!r} does not parse ({e})")
        where = f"{self._path}: BundleEntryProto of {name!r}"
        try:
            dtype = graphc_dtype(entry.dtype, where + ", field dtype")
        except FormatError as e:
            raise errors.DataLossError(None, None, f"Unable to read checkpoint: {e}") from None
        if len(entry.slices):
            self._corrupt(f"{name!r} is a partitioned (sliced) variable: not supported")
        shape = graphc_shape(entry.shape).as_list()
        if None in shape:
            self._corrupt(f"BundleEntryProto of {name!r}: field shape {shape} is not fully "
                          "defined")
        count = int(np.prod(shape, dtype=np.int64))
        if dtype != dtypes.string and entry.size != count * dtype.size:
            self._corrupt(f"BundleEntryProto of {name!r}: field size is {entry.size}, shape "
                          f"{shape} of {dtype.name} needs {count * dtype.size}")
        if entry.offset < 0 or entry.size < 0:
            self._corrupt(f"BundleEntryProto of {name!r}: field offset {entry.offset} or size "
                          f"{entry.size} is negative")
        if not 0 <= entry.shard_id < self._num_shards:
            self._corrupt(f"BundleEntryProto of {name!r}: field shard_id {entry.shard_id} "
                          f"is not below num_shards {self._num_shards}")
        self._entries[name] = (dtype, shape, entry)

    @property
    def path(self):
        return self._prefix

    def has_tensor(self, name):
        return name in self._entries

    def get_variable_to_shape_map(self):
        return {n: list(shape) for n, (_, shape, _) in self._entries.items()}

    def get_variable_to_dtype_map(self):
        return {n: dtype for n, (dtype, _, _) in self._entries.items()}

    def debug_string(self):
        return "".join(f"{n} ({d.name}) {s}\n" for n, (d, s, _) in sorted(self._entries.items()))

    def get_tensor(self, name):
        if name not in self._entries:
            raise errors.NotFoundError(None, None, f"Key {name} not found in checkpoint")
        dtype, shape, entry = self._entries[name]
        path = data_path(self._prefix, entry.shard_id, self._num_shards)
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                blob = f.read(entry.size)
        except FileNotFoundError:
            raise errors.NotFoundError(None, None, f"{path}: the data file of checkpoint "
                                                   f"{self._prefix} is missing") from None
        if len(blob) != entry.size:
            raise errors.DataLossError(None, None, f"{path}: truncated: {name!r} needs bytes "
                                                   f"{entry.offset}..{entry.offset + entry.size}")
        if dtype == dtypes.string:
            return self._strings(blob, shape, name, path, entry.crc32c)
        if masked_crc32c(blob) != entry.crc32c:
            raise _checksum_mismatch(path, name)
        little = dtype.np.newbyteorder("<")
        return np.frombuffer(blob, little).astype(dtype.np).reshape(shape)

    @staticmethod
    def _strings(blob, shape, name, path, entry_crc):
        """A string tensor's elements. TF's checksums cover the lengths as uint32 (uint64
        beyond 4 GB), not as the varints the file holds."""
        count = int(np.prod(shape, dtype=np.int64))
        lengths, pos = [], 0
        try:
            for _ in range(count):
                length, pos = get_varint(blob, pos, f"{path}: string tensor {name!r}")
                lengths.append(length)
        except TableError as e:
            raise errors.DataLossError(None, None, str(e)) from None
        as_ints = b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths)
        check = blob[pos:pos + 4]
        body = blob[pos + 4:]
        if len(check) < 4 or struct.unpack("<I", check)[0] != masked_crc32c(as_ints) or \
                len(body) != sum(lengths):
            raise errors.DataLossError(None, None, f"{path}: string tensor {name!r}: its "
                                                   "lengths do not match their checksum or "
                                                   "its size")
        if masked_crc32c(as_ints + check + body) != entry_crc:
            raise _checksum_mismatch(path, name)
        out = np.empty(count, dtype=object)
        offsets = np.cumsum([0] + lengths)
        for i in range(count):
            out[i] = body[offsets[i]:offsets[i + 1]]
        return out.reshape(shape)


def _checksum_mismatch(path, name):
    return errors.DataLossError(None, None, f"{path}: checksum mismatch for {name!r} "
                                            "(BundleEntryProto.crc32c): the data is damaged")
