"""TensorFlow's GraphDef: importing frozen graphs (built here from TF's protos, and one
recorded once from real TF 2.21 in tf.compat.v1 graph mode: tests/data/tf_formats), and
writing graphc graphs as GraphDef (.pb binary, .pbtxt text) that import back."""
import os

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io

pytest.importorskip("tensorboard")
from tensorboard.compat.proto import (attr_value_pb2, graph_pb2, tensor_pb2,  # noqa: E402
                                      tensor_shape_pb2, types_pb2)

DATA = os.path.join(os.path.dirname(__file__), "data", "tf_formats")


# ------------------------------------------------------------------ proto builders
def shape(dims):
    if dims is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])


def tensor(dtype, dims, **values):
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape(dims), **values)


def attr(**kw):
    return attr_value_pb2.AttrValue(**kw)


def ints(values):
    return attr(list=attr_value_pb2.AttrValue.ListValue(i=values))


def node(gd, name, op, inputs=(), **attrs):
    n = gd.node.add(name=name, op=op)
    n.input.extend(inputs)
    for k, v in attrs.items():
        n.attr[k].CopyFrom(v)
    return n


F32, I32 = types_pb2.DT_FLOAT, types_pb2.DT_INT32
T_F32 = attr(type=F32)


def const(gd, name, array):
    """A Const node with its value as raw little-endian bytes (tensor_content)."""
    array = np.asarray(array)
    dtype = {np.float32: F32, np.float64: types_pb2.DT_DOUBLE, np.int32: I32}[array.dtype.type]
    node(gd, name, "Const", value=attr(tensor=tensor(
        dtype, list(array.shape), tensor_content=array.astype(array.dtype.newbyteorder("<"))
        .tobytes())), dtype=attr(type=dtype))


# ------------------------------------------------------------------ NumPy reference
def conv2d_nhwc(x, w, strides, dilations, padding):
    n, h, wd, c = x.shape
    kh, kw, _, co = w.shape
    sh, sw = strides
    dh, dw = dilations
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":
        oh, ow = -(-h // sh), -(-wd // sw)
        ph = max((oh - 1) * sh + ekh - h, 0)
        pw = max((ow - 1) * sw + ekw - wd, 0)
        x = np.pad(x, [(0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)])
    else:
        oh, ow = (h - ekh) // sh + 1, (wd - ekw) // sw + 1
    out = np.zeros((n, oh, ow, co), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                      j * dw:j * dw + (ow - 1) * sw + 1:sw, :]
            out += patch.astype(np.float64) @ w[i, j].astype(np.float64)
    return out


def pool2x2(x, reduce):
    n, h, w, c = x.shape
    x = x[:, :h // 2 * 2, :w // 2 * 2]
    return reduce(x.reshape(n, h // 2, 2, w // 2, 2, c), axis=(2, 4))


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ------------------------------------------------------------------ frozen graph import
RNG = np.random.RandomState(7)
W = (RNG.randn(3, 3, 2, 4) * 0.5).astype(np.float32)
B = RNG.randn(4).astype(np.float32)
GAMMA, BETA = RNG.rand(4).astype(np.float32) + 0.5, RNG.randn(4).astype(np.float32)
MEAN, VAR = RNG.randn(4).astype(np.float32), RNG.rand(4).astype(np.float32) + 0.2
FC = (RNG.randn(16, 3) * 0.3).astype(np.float32)


def frozen_convnet():
    """A frozen GraphDef as TF1's freeze_graph writes them, node by node."""
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=T_F32, shape=attr(shape=shape([-1, 9, 8, 2])))
    const(gd, "w", W)
    const(gd, "b", B)
    node(gd, "conv", "Conv2D", ["x", "w"], T=T_F32, strides=ints([1, 2, 1, 1]),
         padding=attr(s=b"SAME"), dilations=ints([1, 1, 2, 1]), data_format=attr(s=b"NHWC"))
    node(gd, "bias", "BiasAdd", ["conv", "b"], T=T_F32)
    node(gd, "relu", "Relu", ["bias"], T=T_F32)
    for name, value in (("gamma", GAMMA), ("beta", BETA), ("mean", MEAN), ("var", VAR)):
        const(gd, name, value)
    node(gd, "bn", "FusedBatchNormV3", ["relu", "gamma", "beta", "mean", "var"], T=T_F32,
         U=T_F32, epsilon=attr(f=1e-3), is_training=attr(b=False))
    node(gd, "maxpool", "MaxPool", ["bn"], T=T_F32, ksize=ints([1, 2, 2, 1]),
         strides=ints([1, 2, 2, 1]), padding=attr(s=b"VALID"))
    node(gd, "avgpool", "AvgPool", ["bn"], T=T_F32, ksize=ints([1, 2, 2, 1]),
         strides=ints([1, 2, 2, 1]), padding=attr(s=b"VALID"))
    node(gd, "pools", "AddV2", ["maxpool", "avgpool"], T=T_F32)
    const(gd, "flat_shape", np.array([-1, 16], np.int32))
    node(gd, "flat", "Reshape", ["pools", "flat_shape"], T=T_F32, Tshape=attr(type=I32))
    const(gd, "fc", FC)
    node(gd, "logits", "MatMul", ["flat", "fc"], T=T_F32, transpose_a=attr(b=False),
         transpose_b=attr(b=False))
    node(gd, "probs", "Softmax", ["logits"], T=T_F32)
    # a scalar float_val fills the whole [1, 3] tensor (TF's one-value encoding)
    node(gd, "half", "Const", dtype=T_F32,
         value=attr(tensor=tensor(F32, [1, 3], float_val=[0.5])))
    node(gd, "scaled", "Mul", ["probs", "half"], T=T_F32)
    node(gd, "axis", "Const", dtype=attr(type=I32), value=attr(tensor=tensor(I32, [],
                                                                              int_val=[1])))
    node(gd, "both", "ConcatV2", ["probs", "scaled", "axis"], T=T_F32, N=attr(i=2),
         Tidx=attr(type=I32))
    node(gd, "mean_keep", "Mean", ["both", "axis"], T=T_F32, Tidx=attr(type=I32),
         keep_dims=attr(b=True))
    node(gd, "mean_out", "Squeeze", ["mean_keep"], T=T_F32, squeeze_dims=ints([1]))
    node(gd, "total", "Sum", ["both", "axis"], T=T_F32, Tidx=attr(type=I32))
    node(gd, "both_shape", "Shape", ["both"], T=T_F32, out_type=attr(type=I32))
    return gd


def convnet_reference(x):
    y = conv2d_nhwc(x, W, (2, 1), (1, 2), "SAME") + B
    y = np.maximum(y, 0)
    y = (y - MEAN) / np.sqrt(VAR.astype(np.float64) + 1e-3) * GAMMA + BETA
    y = pool2x2(y, np.max) + pool2x2(y, np.mean)
    probs = softmax(y.reshape(-1, 16) @ FC)
    both = np.concatenate([probs, probs * 0.5], axis=1)
    return probs, both.mean(axis=1), both.sum(axis=1), np.array(both.shape, np.int32)


def test_frozen_graph_built_from_protos_runs_compiled():
    gd = graph_pb2.GraphDef.FromString(frozen_convnet().SerializeToString())
    x = RNG.randn(3, 9, 8, 2).astype(np.float32)
    with gc.Graph().as_default():
        fetched = gc.import_graph_def(gd, name="net", return_elements=[
            "probs:0", "mean_out:0", "total:0", "both_shape:0", "bn"])
        assert fetched[0].name == "net/probs:0"
        with gc.Session() as sess:
            probs, mean, total, both_shape = sess.run(fetched[:4], {"net/x:0": x})
    want = convnet_reference(x)
    np.testing.assert_allclose(probs, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total, want[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(both_shape, want[3])


def test_float64_graph_def_computes_in_float64():
    """A DT_DOUBLE model stays float64 end to end (a float32 detour would lose ~1e-8)."""
    t64 = attr(type=types_pb2.DT_DOUBLE)
    w = np.random.RandomState(1).randn(5, 4) / 3
    b = np.array([1e-9, -2e-9, 3e-9, 0.0])
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=t64, shape=attr(shape=shape([-1, 5])))
    const(gd, "w", w)
    const(gd, "b", b)
    node(gd, "mm", "MatMul", ["x", "w"], T=t64)
    node(gd, "biased", "BiasAdd", ["mm", "b"], T=t64)
    node(gd, "probs", "Softmax", ["biased"], T=t64)
    const(gd, "axes", np.array([0, 1], np.int32))
    node(gd, "mean", "Mean", ["probs", "axes"], T=t64, Tidx=attr(type=I32))
    x = np.random.RandomState(2).randn(7, 5)
    with gc.Graph().as_default():
        probs, mean = gc.import_graph_def(gd, name="", return_elements=["probs:0", "mean:0"])
        assert probs.dtype == gc.float64
        with gc.Session() as sess:
            got_probs, got_mean = sess.run([probs, mean], {"x:0": x})
    want = softmax(x @ w + b)
    assert got_probs.dtype == np.float64
    np.testing.assert_allclose(got_probs, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got_mean, want.mean(), rtol=1e-12)


def test_string_const_and_placeholder_import():
    gd = graph_pb2.GraphDef()
    node(gd, "s", "Const", dtype=attr(type=types_pb2.DT_STRING), value=attr(tensor=tensor(
        types_pb2.DT_STRING, [2], string_val=[b"ab", b"\xff"])))
    node(gd, "p", "Placeholder", dtype=attr(type=types_pb2.DT_STRING))
    node(gd, "q", "Identity", ["p"], T=attr(type=types_pb2.DT_STRING))
    with gc.Graph().as_default():
        s, q = gc.import_graph_def(gd, name="", return_elements=["s:0", "q:0"])
        assert s.dtype == gc.string
        with gc.Session() as sess:
            got_s, got_q = sess.run([s, q], {"p:0": np.array([b"z"], dtype=object)})
    assert list(got_s) == [b"ab", b"\xff"] and list(got_q) == [b"z"]


def test_frozen_graph_recorded_by_tensorflow():
    """frozen_convnet.pb: Conv2D (dilated), BiasAdd, Relu, FusedBatchNormV3, MaxPool,
    MatMul, AddV2, Softmax, ConcatV2, Mean, as TF's convert_variables_to_constants wrote
    it; convnet_expected.npz holds TF's outputs for the input x."""
    gd = gc.GraphDef()
    with open(os.path.join(DATA, "frozen_convnet.pb"), "rb") as f:
        gd.ParseFromString(f.read())
    expected = np.load(os.path.join(DATA, "convnet_expected.npz"))
    with gc.Graph().as_default():
        x = gc.placeholder(gc.float32, [None, 6, 6, 2], name="images")
        probs, mean = gc.import_graph_def(gd, input_map={"x:0": x}, name="",
                                          return_elements=["probs:0", "mean:0"])
        with gc.Session() as sess:
            got = sess.run([probs, mean], {x: expected["x"]})
    np.testing.assert_allclose(got[0], expected["probs"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], expected["mean"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype, field, values, dims, want", [
    (types_pb2.DT_FLOAT, "float_val", [1.5, 2.0], [2, 2], [[1.5, 2.0], [2.0, 2.0]]),
    (types_pb2.DT_DOUBLE, "double_val", [0.1], [3], [0.1, 0.1, 0.1]),
    (types_pb2.DT_INT32, "int_val", [], [2], [0, 0]),
    (types_pb2.DT_INT64, "int64_val", [2 ** 40, -3], [2], [2 ** 40, -3]),
    (types_pb2.DT_UINT8, "int_val", [255, 7], [2], [255, 7]),
    (types_pb2.DT_BOOL, "bool_val", [True, False], [2], [True, False]),
    (types_pb2.DT_HALF, "half_val", [int(np.float16(1.5).view(np.uint16))], [2], [1.5, 1.5]),
    (types_pb2.DT_INT8, "int_val", [-128], [1, 2], [[-128, -128]]),
    (types_pb2.DT_INT16, "int_val", [], [0], []),
])
def test_tensor_proto_encodings(dtype, field, values, dims, want):
    gd = graph_pb2.GraphDef()
    node(gd, "c", "Const", dtype=attr(type=dtype),
         value=attr(tensor=tensor(dtype, dims, **{field: values})))
    with gc.Graph().as_default():
        c, = gc.import_graph_def(gd, return_elements=["c:0"], name="")
        with gc.Session() as sess:
            got = sess.run(c)
    want = np.array(want, dtype=c.dtype.np).reshape(dims)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_tensor_content_float64_and_bad_length():
    value = np.arange(6, dtype=np.float64).reshape(2, 3) / 3
    gd = graph_pb2.GraphDef()
    node(gd, "c", "Const", dtype=attr(type=types_pb2.DT_DOUBLE), value=attr(tensor=tensor(
        types_pb2.DT_DOUBLE, [2, 3], tensor_content=value.tobytes())))
    with gc.Graph().as_default():
        c, = gc.import_graph_def(gd, return_elements=["c:0"], name="")
        with gc.Session() as sess:
            np.testing.assert_array_equal(sess.run(c), value)
    gd.node[0].attr["value"].tensor.tensor_content = value.tobytes()[:-8]
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="node 'c' .op: 'Const'.*tensor_content holds 40"):
            gc.import_graph_def(gd)


def test_unsupported_op_and_attr_are_named():
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=T_F32)
    node(gd, "weird", "NonMaxSuppressionV5", ["x"], T=T_F32)
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="node 'weird' has op type 'NonMaxSuppressionV5'"):
            gc.import_graph_def(gd)
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=attr(type=types_pb2.DT_COMPLEX64))
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="node 'x' .op: 'Placeholder'., attr 'dtype': "
                                             "dtype DT_COMPLEX64 is not supported"):
            gc.import_graph_def(gd)
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=T_F32)
    for c in ("gamma", "beta", "mean", "var"):
        const(gd, c, GAMMA)
    node(gd, "bn", "FusedBatchNorm", ["x", "gamma", "beta", "mean", "var"], T=T_F32,
         is_training=attr(b=True))
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="node 'bn'.*is_training=True"):
            gc.import_graph_def(gd)


# ------------------------------------------------------------------ export
def build_model():
    x = gc.placeholder(gc.float32, [None, 5], name="x")
    w = gc.constant(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))
    h = gc.nn.relu(gc.matmul(x, w) + 0.25)
    h = gc.concat([h, gc.nn.softmax(h)], axis=1)
    out = gc.reduce_sum(gc.transpose(h, [1, 0])[1:4] * gc.cast(gc.shape(h)[0], gc.float32),
                        axis=0, name="out")
    return x, out


@pytest.mark.parametrize("name, as_text", [("model.pb", False), ("model.pbtxt", True)])
def test_write_graph_writes_tf_graph_def_that_imports_back(tmp_path, name, as_text):
    x, out = build_model()
    xv = np.random.RandomState(0).randn(4, 5).astype(np.float32)
    with gc.Session() as sess:
        expected = sess.run(out, {x: xv})
    path = gc.train.write_graph(gc.get_default_graph(), str(tmp_path), name, as_text=as_text)
    raw = open(path, "rb").read()
    gd = graph_pb2.GraphDef()
    if as_text:
        from google.protobuf import text_format
        text_format.Parse(raw.decode(), gd)
    else:
        gd.ParseFromString(raw)
    by_name = {n.name: n for n in gd.node}
    assert by_name["MatMul"].attr["T"].type == F32       # TF's type attrs are there
    assert by_name["out"].attr["Tidx"].type == I32
    assert list(by_name["out"].input) == ["mul", "out/reduction_indices"] or \
        by_name["out"].input[0] != ""
    with gc.Graph().as_default():
        out2, = gc.import_graph_def(graph_io.read_graph_def(path), name="",
                                    return_elements=["out:0"])
        with gc.Session() as sess:
            np.testing.assert_array_equal(sess.run(out2, {"x:0": xv}), expected)


def test_as_graph_def_serializes_and_keeps_the_users_line():
    x, out = build_model()
    data = gc.get_default_graph().as_graph_def().SerializeToString()
    gd = graph_pb2.GraphDef.FromString(data)
    with gc.Graph().as_default():
        out2, = gc.import_graph_def(gd, name="", return_elements=["out:0"])
        assert out2.op.location == out.op.location


def test_softmax_on_an_inner_axis_cannot_be_exported():
    x = gc.placeholder(gc.float32, [2, 3])
    gc.nn.softmax(x, axis=0)
    with pytest.raises(ValueError, match="'Softmax'.*no axis attr"):
        gc.get_default_graph().as_graph_def()


def test_tf_file_where_graphc_json_is_expected(tmp_path):
    path = tmp_path / "model.json"
    path.write_bytes(frozen_convnet().SerializeToString())
    with pytest.raises(ValueError, match="model.json is a TensorFlow GraphDef, not a graphc "
                                         "JSON graph file: read it with gc.import_graph_def"):
        graph_io._read_json(str(path))
    # read_graph_def takes either
    assert len(graph_io.read_graph_def(str(path)).node) == len(frozen_convnet().node)
    path.write_bytes(b"\x00\xb4 junk")
    with pytest.raises(ValueError, match="invalid JSON"):
        graph_io._read_json(str(path))


def test_gradient_and_scatter_ops_export_with_tf_type_attrs():
    """The TF ops of gradient graphs carry the type attrs TF needs to load them; the
    graph imports back with the same values (real TF 2.21 loaded this graph and matched
    when it was written)."""
    x = gc.placeholder(gc.float32, [2, 4, 4, 3], name="x")
    v = gc.Variable(np.ones([5, 3], np.float32), name="v")
    y = gc.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    z = gc.nn.avg_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    b = gc.nn.bias_add(x, gc.constant(np.ones(3, np.float32)))
    mp = gc.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
    loss = sum(gc.reduce_sum(t * t) for t in (y, z, b, x[:, 1:3], mp))
    g = gc.identity(gc.gradients(loss, [x])[0], name="g")
    gc.scatter_add(v, [0, 2], [[1., 2., 3.], [4., 5., 6.]], name="up")
    gd = gc.get_default_graph().as_graph_def()
    by_type = {n.op: n for n in gd.node}
    want = {"MaxPoolGrad": ["T"], "AvgPoolGrad": ["T"], "BiasAddGrad": ["T"],
            "StridedSliceGrad": ["T", "Index"], "MirrorPadGrad": ["T", "Tpaddings"],
            "ScatterAdd": ["T", "Tindices"]}
    for op_type, keys in want.items():
        for key in keys:
            assert by_type[op_type].attr[key].type in (F32, I32), (op_type, key)
    xv = np.random.RandomState(0).randn(2, 4, 4, 3).astype(np.float32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        expected = sess.run([g, "up:0"], {x: xv})
    with gc.Graph().as_default():
        g2, up2, init = gc.import_graph_def(gd, name="", return_elements=["g:0", "up:0",
                                                                          "v/Assign"])
        with gc.Session() as sess:
            sess.run(init)
            got = sess.run([g2, up2], {"x:0": xv})
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_freeze_with_convert_variables_to_constants(tmp_path):
    """TF1's freezing: variables become Consts of their trained values, the graph is cut
    to what the outputs need, and the frozen file runs without a checkpoint."""
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    w = gc.Variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 4, name="w")
    b = gc.Variable(np.zeros(2, np.float32), name="b")
    out = gc.nn.softmax(gc.matmul(x, w) + b, name="probs")
    loss = gc.reduce_sum(out * out)
    train = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
    xv = np.array([[1, 2, 3], [-1, 0, 2]], np.float32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(train, {x: xv})
        w_v, b_v, expected = sess.run([w, b, out], {x: xv})
        frozen = gc.graph_util.convert_variables_to_constants(sess, sess.graph_def, ["probs"])
    ops = {n.name: n.op for n in frozen.node}
    assert ops["w"] == "Const" and ops["b"] == "Const"
    assert "VariableV2" not in ops.values() and not any("GradientDescent" in n for n in ops)
    gc.train.write_graph(frozen, str(tmp_path), "frozen.pb", as_text=False)
    with gc.Graph().as_default():
        probs, = gc.import_graph_def(graph_io.read_graph_def(str(tmp_path / "frozen.pb")),
                                     name="", return_elements=["probs:0"])
        with gc.Session() as sess:
            got = sess.run(probs, {"x:0": xv})
            np.testing.assert_array_equal(sess.run("w:0"), w_v)
    z = xv @ w_v + b_v
    np.testing.assert_allclose(got, softmax(z.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(AssertionError, match="nope is not in graph"):
        gc.graph_util.extract_sub_graph(frozen, ["nope"])


@pytest.mark.parametrize("dtype, np_dtype", [(types_pb2.DT_INT32, np.int32),
                                             (types_pb2.DT_INT64, np.int64),
                                             (types_pb2.DT_FLOAT, np.float32),
                                             (types_pb2.DT_DOUBLE, np.float64)])
def test_tf_ops_that_are_other_ops_here(dtype, np_dtype):
    """Div (integers: C division, rounding toward zero, as TF's kernel), Snapshot,
    PreventGradient and BatchMatMul, as TF wrote them."""
    gd = graph_pb2.GraphDef()
    t = attr(type=dtype)
    node(gd, "x", "Placeholder", dtype=t)
    node(gd, "y", "Placeholder", dtype=t)
    node(gd, "div", "Div", ["x", "y"], T=t)
    node(gd, "snap", "Snapshot", ["div"], T=t)
    node(gd, "kept", "PreventGradient", ["snap"], T=t, message=attr(s=b"no"))
    node(gd, "a", "Placeholder", dtype=T_F32)
    node(gd, "bmm", "BatchMatMul", ["a", "a"], T=T_F32, adj_y=attr(b=True))
    xv = np.array([-7, 7, -7, 7, 6, -6, 0], np_dtype)
    yv = np.array([2, -2, -2, 2, 3, 3, -5], np_dtype)
    av = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    with gc.Graph().as_default():
        kept, bmm = gc.import_graph_def(gd, name="", return_elements=["kept:0", "bmm:0"])
        with gc.Session() as sess:
            got, got_bmm = sess.run([kept, bmm], {"x:0": xv, "y:0": yv, "a:0": av})
    if np.issubdtype(np_dtype, np.integer):
        want = np.trunc(xv.astype(np.float64) / yv).astype(np_dtype)  # [-3, -3, 3, 3, 2, -2, 0]
    else:
        want = xv / yv
    assert got.dtype == np_dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got_bmm, av @ av.transpose(0, 2, 1))


def test_polymorphic_library_function_is_refused_by_name():
    """A library function whose args take their types from attrs (a polymorphic
    tf.function body) is not one graphc can make a body of."""
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", dtype=T_F32)
    function = gd.library.function.add()
    function.signature.name = "__inference_step_42"
    function.signature.input_arg.add(name="x", type_attr="T")
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="function '__inference_step_42': arg 'x' has no "
                                             "fixed type"):
            gc.import_graph_def(gd)


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Const", [], {"dtype": T_F32}, "node 'n' .op: 'Const'. lacks attr 'value'"),
    ("Placeholder", [], {}, "node 'n' .op: 'Placeholder'. lacks attr 'dtype'"),
    ("Conv2D", ["p", "p"], {"T": T_F32}, "node 'n' .op: 'Conv2D'. lacks attr 'padding'"),
    ("MatMul", ["p"], {"T": T_F32}, "'import/n' .op: 'MatMul'"),
])
def test_malformed_nodes_are_named(op, inputs, attrs, message):
    gd = graph_pb2.GraphDef()
    node(gd, "p", "Placeholder", dtype=T_F32, shape=attr(shape=shape([2, 2, 2, 2])))
    node(gd, "n", op, inputs, **attrs)
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match=message):
            gc.import_graph_def(gd)
