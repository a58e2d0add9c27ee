"""tf.train.init_from_checkpoint with TF1's assignment_map forms, from a TF V2 checkpoint
(as BERT's pretrained weights are loaded) and from graphc's own."""
import numpy as np
import pytest

import graphc as gc

pytest.importorskip("tensorboard")
pytest.importorskip("google_crc32c")

VALUES = {"bert/embeddings/table": np.arange(12, dtype=np.float32).reshape(4, 3),
          "bert/encoder/w": np.full((3, 3), 0.5, np.float32),
          "bert/encoder/b": np.array([1.0, -1.0, 2.0], np.float32),
          "head/w": np.array([[2.0], [3.0], [4.0]], np.float32),
          "step": np.array(42, np.int64)}


@pytest.fixture(params=[gc.train.SaverDef.V2, None], ids=["tf_v2", "graphc"])
def checkpoint(request, tmp_path):
    with gc.Graph().as_default():
        for name, value in VALUES.items():
            gc.Variable(value, name=name)
        saver = gc.train.Saver(write_version=request.param)
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            return saver.save(sess, str(tmp_path / "pretrained"), write_meta_graph=False)


def zeros(name, like):
    return gc.get_variable(name, shape=VALUES[like].shape, dtype=gc.as_dtype(VALUES[like].dtype),
                           initializer=gc.zeros_initializer())


def test_scope_to_scope_one_to_one_and_variable_objects(checkpoint):
    with gc.variable_scope("model"):
        table = zeros("embeddings/table", "bert/embeddings/table")
        w = zeros("encoder/w", "bert/encoder/w")
        b = zeros("encoder/b", "bert/encoder/b")
    head = zeros("classifier/w", "head/w")
    fresh = zeros("classifier/bias", "bert/encoder/b")   # not in the map: keeps its init
    step = gc.Variable(np.int64(0), name="global_step")
    gc.train.init_from_checkpoint(checkpoint, {"bert/": "model/",
                                               "head/w": "classifier/w",
                                               "step": step})
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run({"table": table, "w": w, "b": b, "head": head, "fresh": fresh,
                        "step": step})
    np.testing.assert_array_equal(got["table"], VALUES["bert/embeddings/table"])
    np.testing.assert_array_equal(got["w"], VALUES["bert/encoder/w"])
    np.testing.assert_array_equal(got["b"], VALUES["bert/encoder/b"])
    np.testing.assert_array_equal(got["head"], VALUES["head/w"])
    np.testing.assert_array_equal(got["fresh"], np.zeros(3, np.float32))
    assert got["step"] == 42 and got["step"].dtype == np.int64


def test_root_to_scope(checkpoint):
    with gc.variable_scope("restored"):
        with gc.variable_scope("head"):
            w = zeros("w", "head/w")
        step = zeros("step", "step")
    gc.train.init_from_checkpoint(checkpoint, {"/": "restored/"})
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(w), VALUES["head/w"])
        assert sess.run(step) == 42


def test_bad_assignment_maps(checkpoint):
    w = zeros("w", "head/w")
    with pytest.raises(ValueError, match="Tensor nope is not found in"):
        gc.train.init_from_checkpoint(checkpoint, {"nope": w})
    with pytest.raises(ValueError, match="Shape of variable w:0 .* doesn't match with shape of "
                                         "tensor bert/encoder/w \\(\\[3, 3\\]\\)"):
        gc.train.init_from_checkpoint(checkpoint, {"bert/encoder/w": w})
    scalar = gc.Variable(np.float32(0), name="scalar")
    with pytest.raises(ValueError, match="dtype of variable scalar:0 \\(float32\\) doesn't "
                                         "match the dtype of tensor step \\(int64\\)"):
        gc.train.init_from_checkpoint(checkpoint, {"step": scalar})
    with pytest.raises(ValueError, match="should map to scope only"):
        gc.train.init_from_checkpoint(checkpoint, {"bert": "other/"})
    with pytest.raises(ValueError, match="Tensor bert/scalar .scalar in bert/. is not found"):
        gc.train.init_from_checkpoint(checkpoint, {"bert/": "/"})
