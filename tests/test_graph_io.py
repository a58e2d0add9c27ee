"""Saving the uncompiled graph and loading it back: write_graph / import_graph_def and
export_meta_graph / import_meta_graph (+ Saver.restore)."""
import json
import os

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
XV = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)


def build(graph):
    with graph.as_default():
        x = gc.placeholder(gc.float32, [None, 4], name="x")
        w = gc.Variable(W, name="w")
        b = gc.Variable(np.array([0.5, -1, 2], np.float32), name="b")
        h = gc.nn.relu(gc.matmul(x, w) + b)
        pieces = gc.split(h, [1, 2], axis=1)          # list attrs, multi-output op
        t = gc.transpose(gc.concat([pieces[1], pieces[0]], axis=1), [1, 0])
        out = gc.reduce_sum(t * gc.cast(gc.constant([[1], [2], [3]]), gc.float32), axis=0,
                            name="out")
        loss = gc.reduce_mean(gc.square(out))
        train = gc.train.GradientDescentOptimizer(0.01).minimize(loss, name="train")
        gc.add_to_collection("my_tensors", out)
        gc.add_to_collection("my_values", "hello")
        init = gc.global_variables_initializer()
    return x, out, train, init


def run_fresh(graph, fetch, feeds, init_name="init"):
    with gc.Session(graph=graph) as sess:
        sess.run(init_name)
        return sess.run(fetch, feeds)


def test_write_import_graph_def_same_outputs(tmp_path):
    g = gc.Graph()
    x, out, train, init = build(g)
    expected = run_fresh(g, out, {x: XV}, init)
    path = graph_io.write_graph(g, str(tmp_path / "logs"), "model.json")
    assert json.load(open(path))["format"] == "graphc.GraphDef"
    g2 = gc.Graph()
    with g2.as_default():
        gd = graph_io.read_graph_def(path)
        returned = gc.import_graph_def(gd, name="", return_elements=["out:0", "init"])
        assert returned[0].name == "out:0" and returned[1].type == "NoOp"
        assert g2.get_tensor_by_name("x:0").shape.as_list() == [None, 4]
    np.testing.assert_array_equal(run_fresh(g2, "out:0", {"x:0": XV}), expected)


def test_import_under_scope_with_input_map():
    g = gc.Graph()
    x, out, train, init = build(g)
    expected = run_fresh(g, out, {x: XV}, init)
    gd = graph_io.as_graph_def(g)
    g2 = gc.Graph()
    with g2.as_default():
        mine = gc.placeholder(gc.float32, [None, 4], name="mine")
        out2, init2 = gc.import_graph_def(gd, input_map={"x": mine},
                                          return_elements=["out:0", "init"])
        assert out2.name == "import/out:0"
        again, = gc.import_graph_def(gd, return_elements=["out:0"])
        assert again.name == "import_1/out:0"
    with gc.Session(graph=g2) as sess:
        sess.run(init2)
        np.testing.assert_array_equal(sess.run(out2, {mine: XV}), expected)


def test_serialize_round_trip_and_text_or_binary(tmp_path):
    g = gc.Graph()
    build(g)
    gd = graph_io.json_graph_def(g)
    text = graph_io.write_graph(gd, str(tmp_path), "a.json", as_text=True)
    binary = graph_io.write_graph(gd, str(tmp_path), "b.json", as_text=False)
    assert os.path.getsize(binary) < os.path.getsize(text)
    assert graph_io.read_graph_def(binary).node == graph_io.read_graph_def(text).node


def test_meta_graph_and_saver_restore(tmp_path):
    g = gc.Graph()
    x, out, train, init = build(g)
    with g.as_default():
        saver = gc.train.Saver()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        sess.run(train, {x: XV})  # values differ from the initial ones now
        expected = sess.run(out, {x: XV})
        prefix = saver.save(sess, str(tmp_path / "model"), global_step=3)
        meta = graph_io.export_meta_graph(str(tmp_path / "model.meta"))
    assert len(meta.collection_def["trainable_variables"].bytes_list.value) == 2
    assert prefix.endswith("model-3")  # save() wrote the meta graph beside it, as TF1 does
    g2 = gc.Graph()
    with g2.as_default():
        restorer = gc.train.import_meta_graph(prefix + ".meta")
        variables = gc.trainable_variables()
        assert [v.name for v in variables] == ["w:0", "b:0"]
        assert all(isinstance(v, gc.Variable) for v in variables)
        assert gc.get_collection("my_values") == ["hello"]
        train2 = gc.get_collection(gc.GraphKeys.TRAIN_OP) or [g2.get_operation_by_name("train")]
        out2 = gc.get_collection("my_tensors")[0]
    with gc.Session(graph=g2) as sess:
        restorer.restore(sess, prefix)
        np.testing.assert_array_equal(sess.run(out2, {"x:0": XV}), expected)
        np.testing.assert_array_equal(sess.run(variables[0]), sess.run(variables[0]))
        sess.run(train2[0], {"x:0": XV})  # the imported training op still trains
        assert not np.array_equal(sess.run(out2, {"x:0": XV}), expected)


def test_import_meta_graph_with_scope(tmp_path):
    g = gc.Graph()
    build(g)
    meta = graph_io.export_meta_graph(graph=g)
    g2 = gc.Graph()
    with g2.as_default():
        saver = graph_io.import_meta_graph(meta, import_scope="net")
        assert [v.op.name for v in gc.global_variables()] == ["net/w", "net/b"]
        assert set(saver._refs) == {"w", "b"}  # checkpoint keys are the saved names


@pytest.mark.parametrize("content, pattern", [
    (b"not json", "not a TensorFlow GraphDef .protobuf text"),
    (b"{not json", "invalid JSON"),
    (b'{"a": 1}', "no graphc format tag"),
    (b'{"format": "graphc.GraphDef", "version": 99, "nodes": []}', "newer"),
    (b'{"format": "graphc.GraphDef", "version": 1, "nodes": [{"op": 1}]}', "malformed"),
])
def test_bad_graph_files(tmp_path, content, pattern):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=pattern):
        graph_io.read_graph_def(str(path))


def test_bad_imports():
    g = gc.Graph()
    build(g)
    gd = graph_io.json_graph_def(g)
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="not found in graph_def: \\[nope:0\\]"):
            gc.import_graph_def(gd, input_map={"nope:0": gc.constant(1.0)})
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="return_element 'missing:0'"):
            gc.import_graph_def(gd, return_elements=["missing:0"])
    broken = graph_io.JsonGraphDef([dict(n) for n in gd.node])
    broken.node[-1]["inputs"] = ["ghost:0"]
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="input 'ghost:0'"):
            gc.import_graph_def(broken)
    hostile = graph_io.JsonGraphDef([{"name": "c", "op": "Const", "inputs": [], "attrs": {
        "value": {"ndarray": "AAAA", "dtype": "|O", "shape": [1], "scalar": False},
        "dtype": {"dtype": "float32"}}}])
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="not allowed"):
            gc.import_graph_def(hostile)
    cyclic = graph_io.JsonGraphDef([
        {"name": "a", "op": "Identity", "inputs": ["b:0"], "attrs": {}},
        {"name": "b", "op": "Identity", "inputs": ["a:0"], "attrs": {}}])
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="cycle"):
            gc.import_graph_def(cyclic)


def test_graph_as_graph_def_method():
    """tf.get_default_graph().as_graph_def(add_shapes=...) and sess.graph_def, with TF's
    defaults: no shapes unless asked; from_version keeps the ops added since then."""
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = gc.reduce_sum(x * 2.0, axis=1, name="y")
    g = gc.get_default_graph()
    gd = g.as_graph_def()
    assert [n.name for n in gd.node] == [op.name for op in g.get_operations()]
    assert all("_output_shapes" not in n.attr for n in gd.node)
    shaped = {n.name: n.attr["_output_shapes"].list.shape for n in
              g.as_graph_def(add_shapes=True).node}
    assert [d.size for d in shaped["x"][0].dim] == [-1, 3]
    assert [d.size for d in shaped["y"][0].dim] == [-1]
    version = g.version
    z = gc.identity(y, name="z")
    assert [n.name for n in g.as_graph_def(from_version=version).node] == ["z"]
    with gc.Session() as sess:
        assert len(sess.graph_def.node) == len(g.get_operations())
    g2 = gc.Graph()
    with g2.as_default():
        (z2,) = gc.import_graph_def(gd, return_elements=["y:0"], name="")
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    with gc.Session(graph=g2) as sess:
        np.testing.assert_array_equal(sess.run(z2, {"x:0": xv}), (xv * 2).sum(1))
    assert z.name == "z:0"
