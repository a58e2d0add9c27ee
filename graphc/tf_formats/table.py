"""The table file of a TF checkpoint's `.index`: LevelDB's SSTable layout, which TF's
tensorflow/core/lib/io/table*.cc keeps (with no compression for tensor bundles).

    data block 0 | data block 1 | ... | metaindex block | index block | footer

Block: the entries, then the restart array (uint32 offsets of entries whose key is
stored whole), then uint32 num_restarts; then a 5-byte trailer: the compression type
(0 = none) and the masked CRC32C of the block contents and that type byte. Entry: varint
shared (bytes of the previous key it reuses), varint non_shared, varint value_length,
the key's non-shared bytes, the value. Keys increase bytewise.
Index block: one entry per data block, key >= that block's last key (and < the next
block's first), value = the block's handle (varint offset, varint size without trailer).
Footer (48 bytes): the metaindex and index handles, zero-padded to 40 bytes, then the
magic number 0xdb4775248b80fb57 as uint64 little-endian."""
import struct

from graphc.tf_formats.records import masked_crc32c

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
_TRAILER_SIZE = 5
_RESTART_INTERVAL = 16
_BLOCK_SIZE = 4096  # TF's table default


class TableError(ValueError):
    """A damaged table; the message says which part."""


# ------------------------------------------------------------------ varints
def put_varint(out, value):
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def get_varint(data, pos, what):
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise TableError(f"{what}: truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


# ------------------------------------------------------------------ writing
class _BlockBuilder:
    def __init__(self):
        self.buf = bytearray()
        self.restarts = [0]
        self.count = 0
        self.last_key = b""

    def add(self, key, value):
        shared = 0
        if self.count % _RESTART_INTERVAL == 0:
            if self.count:
                self.restarts.append(len(self.buf))
        else:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        for n in (shared, len(key) - shared, len(value)):
            put_varint(self.buf, n)
        self.buf += key[shared:] + value
        self.last_key = key
        self.count += 1

    def finish(self):
        return bytes(self.buf) + b"".join(struct.pack("<I", r) for r in self.restarts) + \
            struct.pack("<I", len(self.restarts))


def _handle(offset, size):
    out = bytearray()
    put_varint(out, offset)
    put_varint(out, size)
    return bytes(out)


def build_table(items):
    """The bytes of a table holding (key bytes, value bytes) pairs, keys strictly
    increasing."""
    out = bytearray()
    index = _BlockBuilder()

    def flush(block):
        contents = block.finish()
        handle = _handle(len(out), len(contents))
        out.extend(contents + b"\0" + struct.pack("<I", masked_crc32c(contents + b"\0")))
        return handle

    block = _BlockBuilder()
    previous = None
    for key, value in items:
        if previous is not None and key <= previous:
            raise ValueError(f"table keys must increase: {key!r} after {previous!r}")
        previous = key
        block.add(key, value)
        if len(block.buf) >= _BLOCK_SIZE:
            index.add(block.last_key, flush(block))
            block = _BlockBuilder()
    if block.count:
        index.add(block.last_key, flush(block))
    metaindex = flush(_BlockBuilder())
    index_handle = flush(index)
    footer = (metaindex + index_handle).ljust(40, b"\0") + struct.pack("<Q", MAGIC)
    return bytes(out + footer)


# ------------------------------------------------------------------ reading
def _block(data, handle, what):
    offset, pos = get_varint(handle, 0, what)
    size, _ = get_varint(handle, pos, what)
    end = offset + size
    if end + _TRAILER_SIZE > len(data):
        raise TableError(f"{what}: block at offset {offset} (size {size}) runs past the end "
                         f"of the file ({len(data)} bytes)")
    contents = data[offset:end]
    kind = data[end]
    (crc,) = struct.unpack_from("<I", data, end + 1)
    if masked_crc32c(contents + bytes([kind])) != crc:
        raise TableError(f"{what}: block at offset {offset} fails its checksum")
    if kind != 0:
        raise TableError(f"{what}: block at offset {offset} is compressed (type {kind}); "
                         "TF writes checkpoint tables uncompressed")
    return contents


def _entries(block, what):
    if len(block) < 4:
        raise TableError(f"{what}: block too short")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise TableError(f"{what}: bad restart count {num_restarts}")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = get_varint(block, pos, what)
        non_shared, pos = get_varint(block, pos, what)
        value_length, pos = get_varint(block, pos, what)
        if shared > len(key) or pos + non_shared + value_length > limit:
            raise TableError(f"{what}: bad entry at offset {pos}")
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        yield key, block[pos:pos + value_length]
        pos += value_length


def read_table(data, what):
    """[(key, value)] of every entry of the table bytes `data` (in key order)."""
    data = bytes(data)
    if len(data) < FOOTER_SIZE:
        raise TableError(f"{what}: file too short ({len(data)} bytes) for a table footer")
    footer = data[-FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, 40)
    if magic != MAGIC:
        raise TableError(f"{what}: bad table magic number {magic:#x} (expected {MAGIC:#x}): "
                         "not a TF checkpoint index")
    _, pos = get_varint(footer, 0, f"{what} footer")   # metaindex offset
    _, pos = get_varint(footer, pos, f"{what} footer")  # metaindex size
    index = _block(data, footer[pos:40], f"{what} index block")
    items = []
    for _, handle in _entries(index, f"{what} index block"):
        items.extend(_entries(_block(data, handle, f"{what} data block"),
                              f"{what} data block"))
    return items
