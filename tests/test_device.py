"""tf.device scopes: recorded on ops; GPU placements fall back to the CPU (soft placement)."""
import warnings

import numpy as np
import pytest

import graphc as tf


@pytest.mark.parametrize("spec,canonical", [
    ("/cpu:0", "/device:CPU:0"), ("/gpu:0", "/device:GPU:0"), ("/GPU:1", "/device:GPU:1"),
    ("/device:GPU:0", "/device:GPU:0"), ("/device:CPU:*", "/device:CPU"),
    ("/job:worker/task:1/cpu:0", "/job:worker/task:1/device:CPU:0"), ("", ""),
])
def test_device_recorded_on_ops_and_tensors(spec, canonical):
    with tf.device(spec):
        a = tf.constant(1.0)
        b = a * 2.0
    c = b + 1.0
    assert a.op.device == canonical and b.device == canonical
    assert c.device == ""


def test_nested_scopes_merge_and_none_clears():
    with tf.device("/job:ps/task:0"):
        with tf.device("/gpu:0"):
            a = tf.constant(1.0)
            with tf.device("/cpu:0"):
                b = tf.constant(2.0)
            with tf.device(None):
                c = tf.constant(3.0)
        d = tf.constant(4.0)
    assert a.device == "/job:ps/task:0/device:GPU:0"
    assert b.device == "/job:ps/task:0/device:CPU:0"
    assert c.device == "" and d.device == "/job:ps/task:0"


def test_variables_and_gradients_take_the_scope():
    with tf.device("/cpu:0"):
        w = tf.Variable(tf.ones([2]), name="w")
        loss = tf.reduce_sum(w * w)
    assert w.device == "/device:CPU:0" and loss.device == "/device:CPU:0"


def test_bad_device_string():
    with pytest.raises(ValueError, match="Unknown attribute"):
        with tf.device("/tpu-ish:0"):
            pass


def _gpu_model():
    x = tf.placeholder(tf.float32, [None, 2])
    with tf.device("/gpu:0"):
        w = tf.Variable([[1.0], [2.0]])
        y = tf.matmul(x, w, name="MatMul")
    with tf.device("/cpu:0"):
        z = y + 1.0
    return x, w, z


def _gpu_present():
    from graphc.session import _find_gpu
    return _find_gpu() is not None


@pytest.mark.skipif("_gpu_present()", reason="a GPU is present: /gpu:0 runs there")
def test_gpu_placement_soft_falls_back_to_cpu_and_warns_once():
    x, w, z = _gpu_model()
    with pytest.warns(RuntimeWarning, match="GPU:0.*run on the CPU") as record:
        sess = tf.Session()
        sess.run(w.initializer)
        out = sess.run(z, {x: [[1.0, 1.0]]})
        sess.run(z * 2.0, {x: [[1.0, 1.0]]})  # a new executable: still no second warning
    assert len([r for r in record if "soft placement" in str(r.message)]) == 1
    np.testing.assert_allclose(out, [[4.0]])


def test_cpu_only_graph_does_not_warn():
    with tf.device("/cpu:0"):
        a = tf.constant(3.0) * 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tf.Session().run(a) == 6.0


def test_allow_soft_placement_false_names_the_op():
    x, w, z = _gpu_model()
    sess = tf.Session(config=tf.ConfigProto(allow_soft_placement=False))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Cannot assign a device for operation (MatMul|Variable)"):
        sess.run(w.initializer)
    sess.run(tf.constant(1.0))  # an unplaced part of the graph still runs
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        tf.Session(config=tf.ConfigProto(allow_soft_placement=False)).run(
            z, {x: [[1.0, 1.0]]})
    assert "was explicitly assigned to /device:GPU:0" in str(info.value)
    assert info.value.op.device == "/device:GPU:0"


def test_soft_placement_config_tutorial_style():
    """The tutorial line: ConfigProto(allow_soft_placement=True, log_device_placement=True)."""
    with tf.device("/gpu:0"):
        a = tf.constant([1.0, 2.0])
        b = tf.reduce_sum(a)
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=True)
    with pytest.warns(RuntimeWarning):
        with tf.Session(config=config) as sess:
            assert sess.run(b) == 3.0


def test_log_device_placement_prints_each_op_once_as_tf1(capsys):
    """TF1's placer places the whole graph when a run first needs it and prints
    `name: (Type): device` for each op; ops added later are printed at the next run."""
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    for backend in ("compiled", "reference"):
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [None, 2], name="x")
            w = tf.Variable([[1.0], [2.0]], name="w")
            y = tf.matmul(x, w, name="y")
        config = tf.ConfigProto(log_device_placement=True, backend=backend)
        with tf.Session(graph=y.graph, config=config) as sess:
            assert capsys.readouterr().out == "Device mapping: no known devices.\n"
            sess.run(w.initializer)
            assert capsys.readouterr().out.splitlines() == [
                f"x: (Placeholder): {cpu}", f"w/initial_value: (Const): {cpu}",
                f"w: (VariableV2): {cpu}", f"w/Assign: (Assign): {cpu}",
                f"w/read: (Identity): {cpu}", f"y: (MatMul): {cpu}"]
            assert sess.run(y, {x: [[1.0, 1.0]]}).tolist() == [[3.0]]
            assert capsys.readouterr().out == ""
            with sess.graph.as_default():
                z = tf.reduce_sum(y, name="z")
            assert sess.run(z, {x: [[1.0, 1.0]]}) == 3.0
            assert capsys.readouterr().out.splitlines() == [
                f"Const: (Const): {cpu}", f"z: (Sum): {cpu}"]


def test_no_placement_log_by_default(capsys):
    a = tf.constant([1.0, 2.0])
    with tf.Session() as sess:
        sess.run(tf.reduce_sum(a))
    assert capsys.readouterr().out == ""
