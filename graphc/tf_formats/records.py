"""TFRecord files, in TensorFlow's exact framing (tensorflow/core/lib/io/record_writer.cc):

    uint64 length            little-endian
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xa282ead8 (mod 2**32): TF masks its
checksums so that a CRC of bytes that hold CRCs stays well distributed. Event files
(gc.summary.FileWriter) and TFRecord datasets are the same stream. A whole file may be
compressed: "GZIP" (a gzip file) or "ZLIB" (one zlib stream), TFRecordOptions' kinds."""
import gzip
import os
import struct
import zlib

from graphc import errors
from graphc.tf_formats import protos

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
COMPRESSION_TYPES = ("", "GZIP", "ZLIB")


def crc32c(data):
    return protos.crc32c_module().value(bytes(data))


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked):
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def compression_type(value):
    """"", "GZIP" or "ZLIB" from None, a string or a TFRecordOptions."""
    value = getattr(value, "compression_type", value)
    value = {None: "", 0: "", 1: "ZLIB", 2: "GZIP"}.get(value, value)
    if not isinstance(value, str) or value.upper() not in COMPRESSION_TYPES:
        raise ValueError(f"compression_type must be one of '', 'ZLIB', 'GZIP', got {value!r}")
    return value.upper()


def frame(data):
    """The bytes of one record holding `data`."""
    data = bytes(data)
    header = struct.pack("<Q", len(data))
    return (header + _FOOTER.pack(masked_crc32c(header)) + data
            + _FOOTER.pack(masked_crc32c(data)))


class _ZlibFile:
    """A write-only file object compressing into one zlib stream."""

    def __init__(self, f):
        self._f, self._z = f, zlib.compressobj()

    def write(self, data):
        self._f.write(self._z.compress(data))

    def flush(self):
        self._f.write(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._f.flush()

    def close(self):
        self._f.write(self._z.flush())
        self._f.close()


class RecordWriter:
    """Appends framed records to a file (a path, or an open binary file object)."""

    def __init__(self, path_or_file, compression=""):
        raw = open(os.fspath(path_or_file), "wb") if isinstance(path_or_file, (str, os.PathLike)) \
            else path_or_file
        kind = compression_type(compression)
        self._file = {"": lambda f: f, "GZIP": lambda f: gzip.GzipFile(fileobj=f, mode="wb"),
                      "ZLIB": _ZlibFile}[kind](raw)
        self._raw = raw

    def write(self, record):
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"a record is bytes, got {type(record).__name__}")
        self._file.write(frame(record))

    def flush(self):
        self._file.flush()
        if self._raw is not self._file:
            self._raw.flush()

    def close(self):
        self._file.close()
        if self._raw is not self._file:
            self._raw.close()


class _ZlibReader:
    """A read-only file object over one zlib stream."""

    def __init__(self, f):
        self._f, self._z, self._buf = f, zlib.decompressobj(), b""

    def read(self, n):
        while len(self._buf) < n and not self._z.eof:
            chunk = self._f.read(1 << 16)
            if not chunk:
                break
            self._buf += self._z.decompress(chunk)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def close(self):
        self._f.close()


def _open_for_reading(path, kind):
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise errors.NotFoundError(None, None, f"{path}; No such file or directory") from None
    return {"": lambda f: f, "GZIP": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
            "ZLIB": _ZlibReader}[kind](raw)


def read_records(path, compression=""):
    """The data of each record of the TFRecord file `path`, checked as it is read.

    A truncated or damaged record raises DataLossError naming the file, the record and
    its offset, as TF's tf_record_iterator does."""
    path = os.fspath(path)
    kind = compression_type(compression)
    f = _open_for_reading(path, kind)
    # a plain file's size bounds a record's length before reading it
    size = os.path.getsize(path) if kind == "" else None
    try:
        offset, index = 0, 0
        while True:
            try:
                header = f.read(_HEADER.size)
                if not header:
                    return
                where = f"{path}: record {index} at byte offset {offset}"
                if len(header) < _HEADER.size:
                    raise errors.DataLossError(None, None, f"{where}: truncated record header")
                length, length_crc = _HEADER.unpack(header)
                if masked_crc32c(header[:8]) != length_crc:
                    raise errors.DataLossError(None, None, f"{where}: corrupted record (the "
                                                           "length's checksum does not match)")
                if size is not None and offset + _HEADER.size + length + _FOOTER.size > size:
                    raise errors.DataLossError(None, None, f"{where}: truncated record "
                                                           f"(length {length}, "
                                                           f"{size - offset - _HEADER.size} "
                                                           "bytes left)")
                body = f.read(length + _FOOTER.size)
            except (OSError, EOFError, zlib.error) as e:
                raise errors.DataLossError(None, None, f"{path}: not a {kind}-compressed "
                                                       f"TFRecord file ({e})") from None
            if len(body) < length + _FOOTER.size:
                raise errors.DataLossError(None, None, f"{where}: truncated record (length "
                                                       f"{length}, {len(body)} bytes left)")
            record = body[:length]
            if masked_crc32c(record) != _FOOTER.unpack(body[length:])[0]:
                raise errors.DataLossError(None, None, f"{where}: corrupted record (the "
                                                       "data's checksum does not match)")
            yield record
            offset, index = offset + _HEADER.size + len(body), index + 1
    finally:
        f.close()
