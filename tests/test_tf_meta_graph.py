"""TensorFlow's MetaGraphDef (.meta): a meta graph and checkpoint recorded once by real
TF 2.21 (tf.compat.v1 Saver: resource variables, SaveV2/RestoreV2 saver ops) import and
restore here; graphc's graphs export as MetaGraphDef (binary and text) and import back."""
import os

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io

pytest.importorskip("tensorboard")
pytest.importorskip("google_crc32c")
from tensorboard.compat.proto import meta_graph_pb2, variable_pb2  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "tf_formats")


def test_tensorflow_meta_graph_and_checkpoint_run_here():
    expected = np.load(os.path.join(DATA, "convnet_expected.npz"))
    saver = gc.train.import_meta_graph(os.path.join(DATA, "convnet-tf.meta"))
    names = [v.op.name for v in gc.trainable_variables()]
    assert names == ["conv/w", "conv/b", "bn/gamma", "bn/beta", "bn/mean", "bn/var", "fc/w"]
    assert all(isinstance(v, gc.Variable) for v in gc.global_variables())
    with pytest.raises(KeyError):  # TF's own saver ops (save/SaveV2, ...) are not imported
        gc.get_default_graph().get_operation_by_name("save/RestoreV2")
    with gc.Session() as sess:
        saver.restore(sess, os.path.join(DATA, "convnet-tf"))
        probs, mean = sess.run(["probs:0", "mean:0"], {"x:0": expected["x"]})
        np.testing.assert_array_equal(sess.run(gc.trainable_variables()[-1]),
                                      expected["fc__w"])
    np.testing.assert_allclose(probs, expected["probs"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, expected["mean"], rtol=1e-5, atol=1e-6)


def build():
    x = gc.placeholder(gc.float64, [None, 3], name="x")
    w = gc.Variable(np.arange(6, dtype=np.float64).reshape(3, 2) / 5, name="w")
    b = gc.Variable(np.zeros(2), name="b", trainable=False)
    out = gc.identity(gc.nn.relu(gc.matmul(x, w) + b), name="out")
    loss = gc.reduce_sum(gc.square(out))
    train = gc.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    gc.add_to_collection("outputs", out)
    gc.add_to_collection("my_train", train)
    gc.add_to_collection("names", "hello")
    gc.add_to_collection("sizes", 3)
    gc.add_to_collection("rates", 0.5)
    return x, out, train


@pytest.mark.parametrize("as_text", [False, True])
def test_export_meta_graph_is_tf_and_imports_back(tmp_path, as_text):
    x, out, train = build()
    xv = np.array([[1.0, -2.0, 3.0], [0.5, 0.5, 0.5]])
    saver = gc.train.Saver(write_version=gc.train.SaverDef.V2)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {x: xv})
        expected = sess.run(out, {x: xv})
        prefix = saver.save(sess, str(tmp_path / "model"), write_meta_graph=False)
    path = str(tmp_path / "model.meta")
    meta = gc.train.export_meta_graph(path, as_text=as_text)
    raw = open(path, "rb").read()
    parsed = meta_graph_pb2.MetaGraphDef()
    if as_text:
        from google.protobuf import text_format
        text_format.Parse(raw.decode(), parsed)
    else:
        parsed.ParseFromString(raw)
    assert parsed == meta
    var_def = variable_pb2.VariableDef.FromString(
        parsed.collection_def["variables"].bytes_list.value[0])
    assert (var_def.variable_name, var_def.snapshot_name) == ("w:0", "w/read:0")
    assert list(parsed.collection_def["trainable_variables"].bytes_list.value) == \
        [parsed.collection_def["variables"].bytes_list.value[0]]
    assert list(parsed.collection_def["outputs"].node_list.value) == ["out:0"]

    gc.reset_default_graph()
    restorer = gc.train.import_meta_graph(path, import_scope="net")
    assert [v.op.name for v in gc.global_variables()] == ["net/w", "net/b"]
    assert [v.op.name for v in gc.trainable_variables()] == ["net/w"]
    assert gc.get_collection("names") == ["hello"]
    assert gc.get_collection("sizes") == [3] and gc.get_collection("rates") == [0.5]
    out2, = gc.get_collection("outputs")
    train2, = gc.get_collection("my_train")
    with gc.Session() as sess:
        restorer.restore(sess, prefix)
        np.testing.assert_array_equal(sess.run(out2, {"net/x:0": xv}), expected)
        sess.run(train2, {"net/x:0": xv})  # the imported training op still trains
        assert not np.array_equal(sess.run(out2, {"net/x:0": xv}), expected)


def test_v2_saver_writes_a_tf_meta_graph(tmp_path):
    build()
    saver = gc.train.Saver(write_version=gc.train.SaverDef.V2)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "m"))
    meta = meta_graph_pb2.MetaGraphDef.FromString(open(prefix + ".meta", "rb").read())
    assert "w" in {n.name for n in meta.graph_def.node}


def test_bad_meta_graphs(tmp_path):
    path = tmp_path / "bad.meta"
    path.write_bytes(b"\x0a\xff\xff\xff")
    with pytest.raises(ValueError, match="bad.meta is not a TensorFlow MetaGraphDef "
                                         ".binary protobuf that does not parse"):
        gc.train.import_meta_graph(str(path))
    with pytest.raises(ValueError, match="neither a TensorFlow MetaGraphDef nor a graphc"):
        graph_io.import_meta_graph({"format": "other"})
