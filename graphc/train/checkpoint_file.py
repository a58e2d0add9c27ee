"""The checkpoint file: named arrays in one self-describing file, no pickle.

A checkpoint with prefix P is the single file P + ".gcckpt":

    bytes 0-7    magic b"\\x89GCCKPT\\n" (the high byte and newline catch text-mode copies)
    bytes 8-15   H: length of the header, uint64 little-endian
    H bytes      header, UTF-8 JSON:
                   {"format": "graphc-checkpoint", "version": 1,
                    "tensors": [{"name": "w/Adam", "dtype": "float32", "shape": [3, 4],
                                 "offset": 128, "nbytes": 48, "crc32": 123456}, ...]}
    data         each tensor's elements, C order, little-endian, at its absolute `offset`
                 (64-byte aligned), with the zlib CRC-32 of those bytes in `crc32`; a
                 string tensor's elements are each a uint64 length then its bytes.

Files are written to a temporary name in the same directory and renamed into place,
so a reader sees either the old checkpoint or the complete new one. The temporary name
carries the writer's process id (`<file>.tmp<pid>.<random>`, the form every file the Saver
writes uses), so the next save can remove what a killed writer left (remove_abandoned).
"""
import json
import os
import re
import struct
import tempfile
import zlib

import numpy as np

from graphc import dtypes, errors

SUFFIX = ".gcckpt"
MAGIC = b"\x89GCCKPT\n"
FORMAT_VERSION = 1
_ALIGN = 64
_PREFIX_LEN = len(MAGIC) + 8


def checkpoint_path(prefix):
    """The file holding the checkpoint `prefix` (the file's own name is accepted too)."""
    return prefix if prefix.endswith(SUFFIX) else prefix + SUFFIX


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


def _little_endian(arr, dtype):
    arr = np.ascontiguousarray(arr, dtype=dtype.np)
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False)


def _string_blob(value):
    """A string tensor's elements in C order, each its uint64 length then its bytes."""
    return b"".join(struct.pack("<Q", len(v)) + bytes(v)
                    for v in np.asarray(value, dtype=object).reshape(-1))


def _strings(blob, shape):
    """The elements _string_blob wrote; None when the blob does not hold exactly them."""
    count, pos, out = int(np.prod(shape, dtype=np.int64)), 0, []
    for _ in range(count):
        if pos + 8 > len(blob):
            return None
        (n,) = struct.unpack_from("<Q", blob, pos)
        if pos + 8 + n > len(blob):
            return None
        out.append(blob[pos + 8:pos + 8 + n])
        pos += 8 + n
    if pos != len(blob):
        return None
    arr = np.empty(count, dtype=object)
    arr[:] = out
    return arr.reshape(shape)


def write_checkpoint(prefix, named_arrays):
    """Writes {name: (array, DType)} atomically to checkpoint_path(prefix); returns the path."""
    entries, blobs = [], []
    for name, (value, dtype) in named_arrays.items():
        blob = _string_blob(value) if dtype == dtypes.string else \
            _little_endian(value, dtype).tobytes()
        entries.append({"name": name, "dtype": dtype.name, "shape": list(np.shape(value)),
                        "nbytes": len(blob), "crc32": zlib.crc32(blob)})
        blobs.append(blob)
    # offsets depend on the header length, which depends on the offsets' digits: a fixed
    # point reached in at most a couple of rounds
    header_len = 0
    while True:
        offset = _aligned(_PREFIX_LEN + header_len)
        for e, blob in zip(entries, blobs):
            e["offset"] = offset
            offset = _aligned(offset + len(blob))
        header = json.dumps({"format": "graphc-checkpoint", "version": FORMAT_VERSION,
                             "tensors": entries}).encode("utf-8")
        if len(header) == header_len:
            break
        header_len = len(header)
    path = checkpoint_path(prefix)

    def write(f):
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        for e, blob in zip(entries, blobs):
            f.seek(e["offset"])
            f.write(blob)
    write_atomically(path, write)
    return path


def write_atomically(path, write):
    """Writes `path` through `write(binary file)` into a temporary file (named as
    remove_abandoned finds it), synced, then renamed into place: a reader sees the old
    file or the complete new one, and a save killed midway leaves a temporary file the
    next save removes."""
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def temp_prefix(path):
    """The start of the temporary name of a file written into place at `path`."""
    return f"{os.path.basename(path)}.tmp{os.getpid()}."


_TEMP = re.compile(r"(?P<target>.+)\.tmp(?P<pid>[0-9]+)(?:\.[A-Za-z0-9_]+)?")


def remove_abandoned(directory, is_ours):
    """Removes the temporary files in `directory` that a writer killed mid-save left: names
    `<target>.tmp<pid>[.<random>]` whose target `is_ours(target)` and whose process is
    gone (a live writer's file, in this process or another, is left alone)."""
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return
    for name in names:
        m = _TEMP.fullmatch(name)
        if m is None or not is_ours(m.group("target")) or _alive(int(m.group("pid"))):
            continue
        try:
            os.remove(os.path.join(directory or ".", name))
        except OSError:
            pass  # another saver removed it first, or it is not ours to remove


def _alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or not a pid we can ask about: keep it
    return True


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate keys in {keys}")
    return dict(pairs)


class CheckpointReader:
    """Reads a checkpoint written by write_checkpoint; checks it as it reads.

    Raises NotFoundError for a missing file or tensor, DataLossError for a damaged file."""

    def __init__(self, prefix):
        self._path = checkpoint_path(prefix)
        try:
            with open(self._path, "rb") as f:
                head = f.read(_PREFIX_LEN)
                if len(head) < _PREFIX_LEN or head[:len(MAGIC)] != MAGIC:
                    self._corrupt("not a graphc checkpoint (bad magic number)")
                (header_len,) = struct.unpack("<Q", head[len(MAGIC):])
                self._size = os.fstat(f.fileno()).st_size
                if _PREFIX_LEN + header_len > self._size:
                    self._corrupt("the file is truncated (header runs past the end)")
                header = self._parse_header(f.read(header_len))
                # a string tensor's lengths can only be checked by reading them: done here,
                # so that a damaged header is found when the checkpoint is opened
                self._strings = {e["name"]: self._read_strings(f, e) for e in header["tensors"]
                                 if e["dtype"] == dtypes.string}
        except FileNotFoundError:
            raise errors.NotFoundError(
                None, None, f"Unsuccessful TensorSliceReader constructor: Failed to find any "
                            f"matching files for {self._path}") from None
        self._entries = {e["name"]: e for e in header["tensors"]}

    def _corrupt(self, why):
        raise errors.DataLossError(None, None, f"Unable to read checkpoint {self._path}: {why}")

    def _blob(self, f, e):
        f.seek(e["offset"])
        blob = f.read(e["nbytes"])
        if len(blob) != e["nbytes"] or zlib.crc32(blob) != e["crc32"]:
            self._corrupt(f"checksum mismatch for {e['name']!r}: the data is damaged")
        return blob

    def _read_strings(self, f, e):
        arr = _strings(self._blob(f, e), e["shape"])
        if arr is None:
            self._corrupt(f"the string tensor {e['name']!r} does not hold its elements")
        return arr

    def _parse_header(self, raw):
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
            version = int(header["version"])
            for e in header["tensors"]:
                e["dtype"] = dtypes.as_dtype(e["dtype"])
                e["shape"] = [int(d) for d in e["shape"]]
                e["offset"], e["nbytes"] = int(e["offset"]), int(e["nbytes"])
                if not isinstance(e["name"], str) or not isinstance(e["crc32"], int):
                    raise TypeError(f"entry {e['name']!r}: a name must be a string and a "
                                    "crc32 an integer")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            # RecursionError: json recurses once per nesting level of a damaged header
            self._corrupt(f"the header is damaged ({type(exc).__name__}: {str(exc)[:200]})")
        if header.get("format") != "graphc-checkpoint" or version > FORMAT_VERSION:
            self._corrupt(f"unsupported format {header.get('format')!r} version {version}")
        data_start = _PREFIX_LEN + len(raw)
        names = [e["name"] for e in header["tensors"]]
        if len(set(names)) != len(names):
            self._corrupt("a tensor name appears twice")
        for e in header["tensors"]:
            self._check_entry(e, data_start)
        return header

    def _check_entry(self, e, data_start):
        """The entry's bytes lie in the data area and hold exactly its dtype and shape."""
        size = e["dtype"].size if e["dtype"] != dtypes.string else 8  # at least a length
        if any(d < 0 for d in e["shape"]):
            self._corrupt(f"the entry for {e['name']!r} has dtype {e['dtype'].name} and shape "
                          f"{e['shape']}, which no saved tensor has")
        expected = size
        for d in e["shape"]:
            expected *= d  # Python ints: a product of huge dims cannot wrap around
        too_few = e["nbytes"] < expected if e["dtype"] == dtypes.string else \
            e["nbytes"] != expected
        if too_few or e["offset"] < data_start or \
                e["offset"] + e["nbytes"] > self._size:
            self._corrupt(f"the entry for {e['name']!r} does not fit the file")

    @property
    def path(self):
        return self._path

    def has_tensor(self, name):
        return name in self._entries

    def get_variable_to_shape_map(self):
        return {n: list(e["shape"]) for n, e in self._entries.items()}

    def get_variable_to_dtype_map(self):
        return {n: e["dtype"] for n, e in self._entries.items()}

    def get_tensor(self, name):
        e = self._entries.get(name)
        if e is None:
            raise errors.NotFoundError(None, None, f"Key {name} not found in checkpoint")
        if e["dtype"] == dtypes.string:
            return self._strings[name].copy()
        with open(self._path, "rb") as f:
            blob = self._blob(f, e)
        little = e["dtype"].np.newbyteorder("<")
        arr = np.frombuffer(blob, dtype=little).reshape(e["shape"])
        return arr.astype(e["dtype"].np)  # native byte order, a writable copy
