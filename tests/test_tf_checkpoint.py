"""TensorFlow V2 checkpoints (.index table + .data): read into matching graphc graphs
(a checkpoint recorded once by real TF 2.21's tf.compat.v1 Saver, and one built here byte
by byte), written by Saver(write_version=SaverDef.V2), damaged files named in errors."""
import os
import struct

import numpy as np
import pytest

import graphc as gc
from graphc import errors

pytest.importorskip("tensorboard")
pytest.importorskip("google_crc32c")
from tensorboard.compat.proto import tensor_shape_pb2, types_pb2  # noqa: E402

from graphc.tf_formats import protos, records  # noqa: E402
from graphc.tf_formats.table import build_table  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "tf_formats")
TF_PREFIX = os.path.join(DATA, "convnet-tf")
SHAPES = {"conv/w": [3, 3, 2, 3], "conv/b": [3], "bn/gamma": [3], "bn/beta": [3],
          "bn/mean": [3], "bn/var": [3], "fc/w": [27, 4]}


def expected_values():
    npz = np.load(os.path.join(DATA, "convnet_expected.npz"))
    return {name: npz[name.replace("/", "__")] for name in SHAPES}


# ---------------------------------------------------------------- a table by hand
def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def block(entries):
    """Entries stored whole (shared = 0), one restart point at 0, then the trailer."""
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in entries)
    body += struct.pack("<II", 0, 1)
    return body, body + b"\0" + struct.pack("<I", records.masked_crc32c(body + b"\0"))


def hand_made_checkpoint(prefix, tensors, num_shards=1):
    """A TF V2 checkpoint written from the format's description, not graphc's writer;
    tensor i goes to shard i % num_shards (as a sharded TF1 Saver spreads them)."""
    pb = protos.tensor_bundle_pb2()
    data, entries = [b""] * num_shards, []
    for i, (name, array) in enumerate(tensors):
        shard = i % num_shards
        blob = array.astype(array.dtype.newbyteorder("<")).tobytes()
        dtype = {np.float32: types_pb2.DT_FLOAT, np.float64: types_pb2.DT_DOUBLE,
                 np.int64: types_pb2.DT_INT64}[array.dtype.type]
        shape = tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in array.shape])
        entry = pb.BundleEntryProto(dtype=dtype, shape=shape, shard_id=shard,
                                    offset=len(data[shard]), size=len(blob),
                                    crc32c=records.masked_crc32c(blob))
        entries.append((name.encode(), entry.SerializeToString()))
        data[shard] += blob
    header = pb.BundleHeaderProto(num_shards=num_shards)
    header.version.producer = 1
    body, data_block = block([(b"", header.SerializeToString())] + sorted(entries))
    _, meta_block = block([])
    index_body, index_block = block([(sorted(entries)[-1][0],
                                      varint(0) + varint(len(body)))])
    meta_at, index_at = len(data_block), len(data_block) + len(meta_block)
    footer = (varint(meta_at) + varint(len(meta_block) - 5) + varint(index_at)
              + varint(len(index_body))).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    with open(prefix + ".index", "wb") as f:
        f.write(data_block + meta_block + index_block + footer)
    for shard, blob in enumerate(data):
        with open(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}", "wb") as f:
            f.write(blob)


def test_hand_made_checkpoint_reads(tmp_path):
    prefix = str(tmp_path / "hand")
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    b = np.array([1e300, -0.0], np.float64)
    c = np.array(-(2 ** 40), np.int64)
    hand_made_checkpoint(prefix, [("a", a), ("scope/b", b), ("c", c)])
    reader = gc.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {"a": [2, 3], "scope/b": [2], "c": []}
    assert reader.get_variable_to_dtype_map()["scope/b"] == gc.float64
    for name, want in (("a", a), ("scope/b", b), ("c", c)):
        got = reader.get_tensor(name)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert gc.train.list_variables(prefix) == [("a", [2, 3]), ("c", []), ("scope/b", [2])]


def test_sharded_checkpoint_reads_every_shard(tmp_path):
    prefix = str(tmp_path / "sharded")
    tensors = [(f"v{i}", np.full([i + 1], i, np.float64)) for i in range(5)]
    hand_made_checkpoint(prefix, tensors, num_shards=2)
    assert sorted(os.listdir(tmp_path)) == ["sharded.data-00000-of-00002",
                                            "sharded.data-00001-of-00002", "sharded.index"]
    reader = gc.train.load_checkpoint(prefix)
    for name, want in tensors:
        np.testing.assert_array_equal(reader.get_tensor(name), want)
    variables = [gc.Variable(np.zeros(i + 1), name=f"v{i}") for i in range(5)]
    with gc.Session() as sess:
        gc.train.Saver().restore(sess, prefix)
        assert [float(v[-1]) for v in sess.run(variables)] == [0, 1, 2, 3, 4]
    os.remove(prefix + ".data-00001-of-00002")
    with pytest.raises(errors.NotFoundError, match="data-00001-of-00002: the data file"):
        gc.train.load_checkpoint(prefix).get_tensor("v1")


def matching_graph():
    """The graph TF's checkpoint was saved from, variables only (the same names)."""
    variables = {name: gc.Variable(np.zeros(shape, np.float32), name=name)
                 for name, shape in SHAPES.items()}
    return variables


def test_tensorflow_checkpoint_restores_into_the_matching_graph():
    variables = matching_graph()
    saver = gc.train.Saver()
    with gc.Session() as sess:
        saver.restore(sess, TF_PREFIX)
        got = sess.run(variables)
    for name, want in expected_values().items():
        np.testing.assert_array_equal(got[name], want)
    reader = gc.train.NewCheckpointReader(TF_PREFIX)
    assert reader.get_variable_to_shape_map() == SHAPES
    np.testing.assert_array_equal(gc.train.load_variable(TF_PREFIX, "fc/w:0"),
                                  expected_values()["fc/w"])


def test_restore_checks_shapes_against_a_tf_checkpoint():
    gc.Variable(np.zeros([3, 3, 2, 4], np.float32), name="conv/w")
    saver = gc.train.Saver()
    with gc.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match="rhs shape= \\[3,3,2,3\\]"):
            saver.restore(sess, TF_PREFIX)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_saver_writes_tf_v2_checkpoints(tmp_path, dtype):
    rng = np.random.RandomState(3)
    values = {"w": rng.randn(4, 3).astype(dtype), "s": np.array(2.5, dtype),
              "empty": np.zeros((0, 5), dtype), "step": np.array(7, np.int64)}
    variables = {k: gc.Variable(v, name=k) for k, v in values.items()}
    saver = gc.train.Saver(write_version=gc.train.SaverDef.V2)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=5)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-5.data-00000-of-00001",
                                            "model.ckpt-5.index", "model.ckpt-5.meta"]
    # the data file is the tensors' little-endian bytes in key order, nothing else
    raw = open(prefix + ".data-00000-of-00001", "rb").read()
    assert raw == b"".join(values[k].astype(values[k].dtype.newbyteorder("<")).tobytes()
                           for k in sorted(values))
    gc.reset_default_graph()
    restored = {k: gc.Variable(np.zeros_like(v), name=k) for k, v in values.items()}
    with gc.Session() as sess:
        gc.train.Saver().restore(sess, gc.train.latest_checkpoint(str(tmp_path)))
        got = sess.run(restored)
    for k, v in values.items():
        assert got[k].dtype == v.dtype
        np.testing.assert_array_equal(got[k], v)
    with pytest.warns(UserWarning, match="does not write TF's V1 checkpoint format; "
                                         "writing V2"):
        assert gc.train.Saver(write_version=gc.train.SaverDef.V1)._write_tf_format
    with pytest.raises(ValueError, match="write_version 7"):
        gc.train.Saver(write_version=7)


def test_damaged_checkpoints_name_file_and_field(tmp_path):
    prefix = str(tmp_path / "d")
    hand_made_checkpoint(prefix, [("a", np.arange(4, dtype=np.float32))])
    index = open(prefix + ".index", "rb").read()
    data = open(prefix + ".data-00000-of-00001", "rb").read()

    def damaged(index_bytes=index, data_bytes=data):
        open(prefix + ".index", "wb").write(index_bytes)
        open(prefix + ".data-00000-of-00001", "wb").write(data_bytes)
        return gc.train.load_checkpoint(prefix)

    with pytest.raises(errors.DataLossError, match=f"{prefix}.index: bad table magic"):
        damaged(index[:-1] + b"\0")
    with pytest.raises(errors.DataLossError, match="data block: block at offset 0 fails its "
                                                   "checksum"):
        damaged(bytes([index[0]]) + bytes([index[1] ^ 1]) + index[2:])
    with pytest.raises(errors.DataLossError, match="too short"):
        damaged(index[:20])
    with pytest.raises(errors.DataLossError, match="checksum mismatch for 'a' "
                                                   ".BundleEntryProto.crc32c."):
        damaged(data_bytes=data[:-1] + b"\x01").get_tensor("a")
    with pytest.raises(errors.DataLossError, match="00001: truncated: 'a' needs bytes 0..16"):
        damaged(data_bytes=data[:8]).get_tensor("a")
    pb = protos.tensor_bundle_pb2()
    for field, value, message in (("offset", -8, "field offset -8 or size 16 is negative"),
                                  ("shard_id", 3, "field shard_id 3 is not below num_shards 1"),
                                  ("size", 12, "field size is 12, shape \\[4\\] of float32 "
                                               "needs 16")):
        entry = pb.BundleEntryProto(dtype=1, offset=0, size=16)
        entry.shape.dim.add(size=4)
        setattr(entry, field, value)
        header = pb.BundleHeaderProto(num_shards=1)
        table = build_table([(b"", header.SerializeToString()),
                             (b"a", entry.SerializeToString())])
        with pytest.raises(errors.DataLossError, match=f"{prefix}.index: "
                                                       f"BundleEntryProto of 'a': {message}"):
            damaged(table)
    with pytest.raises(errors.NotFoundError, match="pass its prefix"):
        gc.train.load_checkpoint(prefix + ".index")
    with pytest.raises(errors.NotFoundError, match="nope.index"):
        gc.train.load_checkpoint(str(tmp_path / "nope"))


def test_tf2_object_checkpoint_with_string_tensors(tmp_path):
    """tf2_object: written once by real TF 2.21's tf.train.Checkpoint (a float variable, a
    string variable, and the object graph TF keeps as a scalar string)."""
    prefix = os.path.join(DATA, "tf2_object")
    reader = gc.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {
        "_CHECKPOINTABLE_OBJECT_GRAPH": [], "dense/.ATTRIBUTES/VARIABLE_VALUE": [2, 3],
        "words/.ATTRIBUTES/VARIABLE_VALUE": [3]}
    assert reader.get_variable_to_dtype_map()["words/.ATTRIBUTES/VARIABLE_VALUE"] == gc.string
    words = reader.get_tensor("words/.ATTRIBUTES/VARIABLE_VALUE")
    assert list(words) == [b"alpha", b"", "\u03b2eta".encode()]
    np.testing.assert_array_equal(reader.get_tensor("dense/.ATTRIBUTES/VARIABLE_VALUE"),
                                  np.arange(6, dtype=np.float32).reshape(2, 3))
    graph = reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert graph.shape == () and b"dense" in graph.item()
    # a flipped byte in the strings' bytes fails the entry's checksum
    for suffix in (".index", ".data-00000-of-00001"):
        data = open(prefix + suffix, "rb").read()
        if suffix.startswith(".data"):
            at = data.index(b"alpha")
            data = data[:at] + b"A" + data[at + 1:]
        (tmp_path / ("copy" + suffix)).write_bytes(data)
    damaged = gc.train.load_checkpoint(str(tmp_path / "copy"))
    with pytest.raises(errors.DataLossError, match="checksum mismatch for "
                                                   "'words/.ATTRIBUTES/VARIABLE_VALUE'"):
        damaged.get_tensor("words/.ATTRIBUTES/VARIABLE_VALUE")
