"""tf.train.Example parsing (parse_single_example / parse_example with FixedLenFeature and
VarLenFeature) and tf.data.TFRecordDataset, against TF's documented results: dense
features shaped [batch] + shape, sparse ones as indices/values/dense_shape."""
import os

import numpy as np
import pytest

import graphc as gc
from graphc import errors

pytest.importorskip("tensorboard")
pytest.importorskip("google_crc32c")
TF_FILE = os.path.join(os.path.dirname(__file__), "data", "tf_formats", "examples.tfrecord")


def make_example(**features):
    """An Example from {key: list}: floats -> FloatList, ints -> Int64List, bytes ->
    BytesList."""
    feature = {}
    for key, values in features.items():
        if all(isinstance(v, bytes) for v in values) and values:
            feature[key] = gc.train.Feature(bytes_list=gc.train.BytesList(value=values))
        elif all(isinstance(v, int) for v in values) and values:
            feature[key] = gc.train.Feature(int64_list=gc.train.Int64List(value=values))
        else:
            feature[key] = gc.train.Feature(float_list=gc.train.FloatList(value=values))
    return gc.train.Example(features=gc.train.Features(feature=feature)).SerializeToString()


FEATURES = {"label": gc.FixedLenFeature([2], gc.int64),
            "x": gc.VarLenFeature(gc.float32),
            "name": gc.FixedLenFeature([], gc.string),
            "weight": gc.FixedLenFeature([1, 2], gc.float32, default_value=[[0.25, -1.0]])}


def test_parse_single_example_of_records_tensorflow_wrote():
    records = list(gc.python_io.tf_record_iterator(TF_FILE))
    serialized = gc.placeholder(gc.string, [])
    parsed = gc.parse_single_example(serialized, FEATURES)
    assert parsed["label"].shape.as_list() == [2] and parsed["label"].dtype == gc.int64
    assert parsed["weight"].shape.as_list() == [1, 2]
    assert parsed["x"].indices.shape.as_list() == [None, 1]
    with gc.Session() as sess:
        for i, record in enumerate(records):
            got = sess.run(parsed, {serialized: record})
            np.testing.assert_array_equal(got["label"], [i, -i * 1000])
            assert got["name"] == b"ex%d" % i
            np.testing.assert_array_equal(got["weight"], np.array([[0.25, -1.0]], np.float32))
            want_x = np.array([0.5 * i, 1.5, -2.0][:i + 1], np.float32)
            np.testing.assert_array_equal(got["x"].values, want_x)
            np.testing.assert_array_equal(got["x"].indices, np.arange(i + 1)[:, None])
            np.testing.assert_array_equal(got["x"].dense_shape, [i + 1])
            assert got["x"].indices.dtype == np.int64


def test_parse_example_batch_and_compiled_consumers():
    serialized = [make_example(label=[1, 2], x=[3.0], name=[b"a"]),
                  make_example(label=[3, 4], x=[], name=[b"bb"], weight=[5.0, 6.0]),
                  make_example(label=[5, 6], x=[1.0, 2.0, 4.0], name=[b""])]
    batch = gc.placeholder(gc.string, [None])
    parsed = gc.parse_example(batch, FEATURES)
    assert parsed["label"].shape.as_list() == [None, 2]
    # compiled ops after the host-side parse
    total = gc.reduce_sum(gc.cast(parsed["label"], gc.float32) * 2.0, axis=1) + \
        gc.reduce_sum(parsed["weight"], axis=[1, 2])
    with gc.Session() as sess:
        got, total_v = sess.run([parsed, total], {batch: serialized})
    np.testing.assert_array_equal(got["label"], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(got["weight"], np.array([[[0.25, -1]], [[5, 6]], [[0.25, -1]]],
                                                          np.float32))
    np.testing.assert_allclose(total_v, [6 - 0.75, 14 + 11, 22 - 0.75])
    assert list(got["name"]) == [b"a", b"bb", b""]
    # TF's sparse layout: [example, position] indices, dense_shape [batch, longest]
    np.testing.assert_array_equal(got["x"].indices, [[0, 0], [2, 0], [2, 1], [2, 2]])
    np.testing.assert_array_equal(got["x"].values, np.array([3, 1, 2, 4], np.float32))
    np.testing.assert_array_equal(got["x"].dense_shape, [3, 3])
    with gc.Session() as sess:
        empty = sess.run(parsed, {batch: np.zeros(0, dtype=object)})
    assert empty["label"].shape == (0, 2) and empty["x"].indices.shape == (0, 2)
    np.testing.assert_array_equal(empty["x"].dense_shape, [0, 0])


@pytest.mark.parametrize("record, message", [
    (make_example(label=[1], name=[b"a"]), "Key: label, Index: 0.  Number of int64 values != "
                                           "expected.  Values size: 1 but output shape: \\[2\\]"),
    (make_example(name=[b"a"]), "Feature: label \\(data type: int64\\) is required but "
                                "could not be found"),
    (make_example(label=[1.0, 2.0], name=[b"a"]), "Key: label, Index: 0.  Data types don't "
                                                  "match. Data type: float but expected "
                                                  "type: int64"),
    (b"\xff\xff\xff", "Could not parse example input"),
], ids=["too_few_values", "missing_feature", "wrong_type", "not_a_proto"])  # not the bytes:
# a proto map serializes in a per-process order, and pytest-xdist's workers must agree
def test_bad_examples_are_invalid_argument(record, message):
    serialized = gc.placeholder(gc.string, [])
    parsed = gc.parse_single_example(serialized, FEATURES)
    with gc.Session() as sess:
        with pytest.raises(errors.InvalidArgumentError, match=message):
            sess.run(parsed, {serialized: record})


def test_bad_feature_specs_fail_when_built():
    s = gc.placeholder(gc.string, [])
    with pytest.raises(ValueError, match="Unsupported dtype float64 for feature 'a'"):
        gc.parse_single_example(s, {"a": gc.FixedLenFeature([1], gc.float64)})
    with pytest.raises(ValueError, match="default_value of feature 'a' has 1 values, shape "
                                         "\\[3\\] needs 3"):
        gc.parse_single_example(s, {"a": gc.FixedLenFeature([3], gc.float32, 0.0)})
    with pytest.raises(ValueError, match="parse_single_example takes a scalar"):
        gc.parse_single_example(gc.placeholder(gc.string, [2]), FEATURES)


def test_tfrecord_dataset_files_from_a_placeholder(tmp_path):
    paths = []
    for n, compression in enumerate(["", "GZIP"]):
        path = str(tmp_path / f"part-{n}.tfrecord")
        with gc.python_io.TFRecordWriter(path, gc.python_io.TFRecordOptions(compression)) as w:
            for i in range(3):
                w.write(make_example(label=[10 * n + i, 0], name=[b"r"]))
        paths.append(path)
    files = gc.placeholder(gc.string, [None])
    plain = gc.data.TFRecordDataset(files)
    assert plain.output_types == gc.string and plain.output_shapes.as_list() == []
    it = plain.map(lambda r: gc.parse_single_example(r, FEATURES)["label"]) \
        .batch(2).make_initializable_iterator()
    nxt = it.get_next()
    gz = gc.data.TFRecordDataset(paths[1:], compression_type="GZIP") \
        .make_one_shot_iterator().get_next()
    with gc.Session() as sess:
        sess.run(it.initializer, {files: paths[:1]})
        np.testing.assert_array_equal(sess.run(nxt), [[0, 0], [1, 0]])
        np.testing.assert_array_equal(sess.run(nxt), [[2, 0]])
        with pytest.raises(errors.OutOfRangeError):
            sess.run(nxt)
        assert [gc.train.Example.FromString(sess.run(gz)).features.feature["label"]
                .int64_list.value[0] for _ in range(3)] == [10, 11, 12]


def test_tfrecord_dataset_damaged_file(tmp_path):
    path = tmp_path / "bad.tfrecord"
    raw = open(TF_FILE, "rb").read()
    path.write_bytes(raw[:-2])
    nxt = gc.data.TFRecordDataset(str(path)).make_one_shot_iterator().get_next()
    with gc.Session() as sess:
        sess.run(nxt)
        sess.run(nxt)
        with pytest.raises(errors.DataLossError, match="bad.tfrecord: record 2 .*truncated"):
            sess.run(nxt)
