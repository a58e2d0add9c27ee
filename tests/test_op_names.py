"""Default op names against TF 2.21's tf.compat.v1 in graph mode.

Each public function's default name is the one its TF Python wrapper gives its result:
`name_scope(name, "Default")` names the result after the scope, generated gen_* wrappers
after the op type, and a `name="..."` default is taken as is. Surprising entries cite
TF's source (tensorflow/python/ops/...):
  add              tf.add is gen_math_ops.add (the generated wrapper): "Add"; only the
                   `+` operator is "add" (math_ops._OverrideBinaryOperatorHelper(
                   _add_dispatch, "add") opens name_scope(None, "add"))
  divide           math_ops.divide with no name is `x / y`: the operator's "truediv"
  range            math_ops.range(..., name="range"): the default argument wins over
                   name_scope's "Range"
  transpose, one_hot, zeros, ones, zeros_like, ones_like, clip_by_value, l2_normalize,
  random_*         name_scope(name, "<lower-case name>") and the last op takes the scope
  concat, stack, unstack, split   `name="concat"` etc. as default arguments
  gather           compat.v1 gather calls gen_array_ops.gather_v2: "GatherV2"
  sigmoid_cross_entropy_with_logits   name_scope(name, "logistic_loss")
  group            control_flow_ops.group: name_scope(name, "group_deps")
  global_variables_initializer    variables_initializer(..., name="init")
"""
import numpy as np
import pytest

import graphc as gc


def F():
    return gc.placeholder(gc.float32, [2, 3], name="f")


def B():
    return gc.placeholder(gc.bool, [2, 3], name="b")


def I():  # noqa: E743
    return gc.placeholder(gc.int32, [2, 3], name="i")


def IMG():
    return gc.placeholder(gc.float32, [1, 4, 4, 1], name="img")


DEFAULT_NAMES = [
    ("add", lambda: gc.add(F(), F()), "Add"),
    ("subtract", lambda: gc.subtract(F(), F()), "Sub"),
    ("multiply", lambda: gc.multiply(F(), F()), "Mul"),
    ("divide", lambda: gc.divide(F(), F()), "truediv"),
    ("truediv", lambda: gc.truediv(F(), F()), "truediv"),
    ("div", lambda: gc.div(F(), F()), "div"),
    ("floordiv", lambda: gc.floordiv(F(), F()), "floordiv"),
    ("floormod", lambda: gc.floormod(F(), F()), "FloorMod"),
    ("mod", lambda: gc.mod(F(), F()), "FloorMod"),
    ("pow", lambda: gc.pow(F(), F()), "Pow"),
    ("maximum", lambda: gc.maximum(F(), F()), "Maximum"),
    ("minimum", lambda: gc.minimum(F(), F()), "Minimum"),
    ("squared_difference", lambda: gc.squared_difference(F(), F()), "SquaredDifference"),
    ("negative", lambda: gc.negative(F()), "Neg"),
    ("abs", lambda: gc.abs(F()), "Abs"),
    ("sign", lambda: gc.sign(F()), "Sign"),
    ("square", lambda: gc.square(F()), "Square"),
    ("sqrt", lambda: gc.sqrt(F()), "Sqrt"),
    ("rsqrt", lambda: gc.rsqrt(F()), "Rsqrt"),
    ("reciprocal", lambda: gc.reciprocal(F()), "Reciprocal"),
    ("exp", lambda: gc.exp(F()), "Exp"),
    ("log", lambda: gc.log(F()), "Log"),
    ("log1p", lambda: gc.log1p(F()), "Log1p"),
    ("expm1", lambda: gc.expm1(F()), "Expm1"),
    ("tanh", lambda: gc.tanh(F()), "Tanh"),
    ("sigmoid", lambda: gc.sigmoid(F()), "Sigmoid"),
    ("sin", lambda: gc.sin(F()), "Sin"),
    ("cos", lambda: gc.cos(F()), "Cos"),
    ("floor", lambda: gc.floor(F()), "Floor"),
    ("ceil", lambda: gc.ceil(F()), "Ceil"),
    ("round", lambda: gc.round(F()), "Round"),
    ("erf", lambda: gc.erf(F()), "Erf"),
    ("equal", lambda: gc.equal(F(), F()), "Equal"),
    ("not_equal", lambda: gc.not_equal(F(), F()), "NotEqual"),
    ("less", lambda: gc.less(F(), F()), "Less"),
    ("less_equal", lambda: gc.less_equal(F(), F()), "LessEqual"),
    ("greater", lambda: gc.greater(F(), F()), "Greater"),
    ("greater_equal", lambda: gc.greater_equal(F(), F()), "GreaterEqual"),
    ("logical_and", lambda: gc.logical_and(B(), B()), "LogicalAnd"),
    ("logical_or", lambda: gc.logical_or(B(), B()), "LogicalOr"),
    ("logical_xor", lambda: gc.logical_xor(B(), B()), "LogicalXor"),
    ("logical_not", lambda: gc.logical_not(B()), "LogicalNot"),
    ("where1", lambda: gc.where(B()), "Where"),
    ("where3", lambda: gc.where(B(), F(), F()), "Select"),
    ("clip_by_value", lambda: gc.clip_by_value(F(), 0.0, 1.0), "clip_by_value"),
    ("add_n", lambda: gc.add_n([F(), F()]), "AddN"),
    ("cast", lambda: gc.cast(F(), gc.int32), "Cast"),
    ("to_float", lambda: gc.to_float(I()), "ToFloat"),
    ("to_int32", lambda: gc.to_int32(F()), "ToInt32"),
    ("to_int64", lambda: gc.to_int64(F()), "ToInt64"),
    ("argmax", lambda: gc.argmax(F(), 1), "ArgMax"),
    ("argmin", lambda: gc.argmin(F(), 1), "ArgMin"),
    ("cumsum", lambda: gc.cumsum(F(), 1), "Cumsum"),
    ("reduce_sum", lambda: gc.reduce_sum(F()), "Sum"),
    ("reduce_mean", lambda: gc.reduce_mean(F()), "Mean"),
    ("reduce_max", lambda: gc.reduce_max(F()), "Max"),
    ("reduce_min", lambda: gc.reduce_min(F()), "Min"),
    ("reduce_prod", lambda: gc.reduce_prod(F()), "Prod"),
    ("reduce_all", lambda: gc.reduce_all(B()), "All"),
    ("reduce_any", lambda: gc.reduce_any(B()), "Any"),
    ("reduce_logsumexp", lambda: gc.reduce_logsumexp(F()), "ReduceLogSumExp"),
    ("count_nonzero", lambda: gc.count_nonzero(F()), "count_nonzero/Sum"),
    ("matmul", lambda: gc.matmul(F(), gc.transpose(F())), "MatMul"),
    ("range", lambda: gc.range(5), "range"),
    ("rank", lambda: gc.rank(F()), "Rank"),
    ("shape", lambda: gc.shape(F()), "Shape"),
    ("size", lambda: gc.size(F()), "Size"),
    ("shape_n", lambda: gc.shape_n([F(), F()])[0], "ShapeN"),
    ("reshape", lambda: gc.reshape(F(), [3, 2]), "Reshape"),
    ("transpose", lambda: gc.transpose(F()), "transpose"),
    ("expand_dims", lambda: gc.expand_dims(F(), 0), "ExpandDims"),
    ("squeeze", lambda: gc.squeeze(gc.expand_dims(F(), 0), name=None), "Squeeze"),
    ("concat", lambda: gc.concat([F(), F()], 0), "concat"),
    ("stack", lambda: gc.stack([F(), F()]), "stack"),
    ("unstack", lambda: gc.unstack(F())[0], "unstack"),
    ("split", lambda: gc.split(F(), 3, axis=1)[0], "split"),
    ("tile", lambda: gc.tile(F(), [1, 2]), "Tile"),
    ("pad", lambda: gc.pad(F(), [[1, 1], [0, 0]]), "Pad"),
    ("slice", lambda: gc.slice(F(), [0, 0], [1, 1]), "Slice"),
    ("strided_slice", lambda: gc.strided_slice(F(), [0], [1]), "StridedSlice"),
    ("gather", lambda: gc.gather(F(), [0, 1]), "GatherV2"),
    ("one_hot", lambda: gc.one_hot(I(), 4), "one_hot"),
    ("fill", lambda: gc.fill([2, 2], 1.0), "Fill"),
    ("zeros", lambda: gc.zeros([2, 2]), "zeros"),
    ("ones", lambda: gc.ones([2, 2]), "ones"),
    ("zeros_like", lambda: gc.zeros_like(F()), "zeros_like"),
    ("ones_like", lambda: gc.ones_like(F()), "ones_like"),
    ("broadcast_to", lambda: gc.broadcast_to(F(), [4, 2, 3]), "BroadcastTo"),
    ("invert_permutation", lambda: gc.invert_permutation(gc.constant([1, 0])), "InvertPermutation"),
    ("identity", lambda: gc.identity(F()), "Identity"),
    ("stop_gradient", lambda: gc.stop_gradient(F()), "StopGradient"),
    ("check_numerics", lambda: gc.check_numerics(F(), "m"), "CheckNumerics"),
    ("placeholder", lambda: gc.placeholder(gc.float32), "Placeholder"),
    ("placeholder_with_default", lambda: gc.placeholder_with_default(1.0, []),
     "PlaceholderWithDefault"),
    ("constant", lambda: gc.constant(1.0), "Const"),
    ("no_op", lambda: gc.no_op(), "NoOp"),
    ("group", lambda: gc.group(gc.no_op()), "group_deps"),
    ("random_normal", lambda: gc.random_normal([2]), "random_normal"),
    ("random_uniform", lambda: gc.random_uniform([2]), "random_uniform"),
    ("truncated_normal", lambda: gc.truncated_normal([2]), "truncated_normal"),
    ("global_variables_initializer", lambda: gc.global_variables_initializer(), "init"),
    ("local_variables_initializer", lambda: gc.local_variables_initializer(), "init"),
    ("op+", lambda: F() + F(), "add"),
    ("op+const", lambda: F() + 1.0, "add"),
    ("op radd", lambda: 1.0 + F(), "add"),
    ("op-", lambda: F() - F(), "sub"),
    ("op*", lambda: F() * F(), "mul"),
    ("op/", lambda: F() / F(), "truediv"),
    ("op//", lambda: F() // F(), "floordiv"),
    ("op%", lambda: F() % F(), "mod"),
    ("op**", lambda: F() ** F(), "pow"),
    ("op@", lambda: F() @ gc.transpose(F()), "matmul"),
    ("op&", lambda: B() & B(), "and"),
    ("op|", lambda: B() | B(), "or"),
    ("op^", lambda: B() ^ B(), "xor"),
    ("op<", lambda: F() < F(), "Less"),
    ("op>=", lambda: F() >= F(), "GreaterEqual"),
    ("op neg", lambda: -F(), "Neg"),
    ("op abs", lambda: abs(F()), "Abs"),
    ("op ~", lambda: ~B(), "LogicalNot"),
    ("op []", lambda: F()[0], "strided_slice"),
    ("nn.relu", lambda: gc.nn.relu(F()), "Relu"),
    ("nn.relu6", lambda: gc.nn.relu6(F()), "Relu6"),
    ("nn.elu", lambda: gc.nn.elu(F()), "Elu"),
    ("nn.selu", lambda: gc.nn.selu(F()), "Selu"),
    ("nn.leaky_relu", lambda: gc.nn.leaky_relu(F()), "LeakyRelu"),
    ("nn.softplus", lambda: gc.nn.softplus(F()), "Softplus"),
    ("nn.softsign", lambda: gc.nn.softsign(F()), "Softsign"),
    ("nn.softmax", lambda: gc.nn.softmax(F()), "Softmax"),
    ("nn.log_softmax", lambda: gc.nn.log_softmax(F()), "LogSoftmax"),
    ("nn.bias_add", lambda: gc.nn.bias_add(F(), gc.zeros([3])), "BiasAdd"),
    ("nn.l2_loss", lambda: gc.nn.l2_loss(F()), "L2Loss"),
    ("nn.l2_normalize", lambda: gc.nn.l2_normalize(F(), 1), "l2_normalize"),
    ("nn.sigmoid_xent", lambda: gc.nn.sigmoid_cross_entropy_with_logits(labels=F(), logits=F()),
     "logistic_loss"),
    ("nn.conv2d", lambda: gc.nn.conv2d(IMG(), gc.zeros([2, 2, 1, 1]), [1, 1, 1, 1], "SAME"),
     "Conv2D"),
    ("nn.max_pool", lambda: gc.nn.max_pool(IMG(), [1, 2, 2, 1], [1, 2, 2, 1], "SAME"), "MaxPool"),
    # nn_ops._dropout: gen_math_ops.mul(x, scale), then mul(ret, cast(keep_mask))
    ("nn.dropout", lambda: gc.nn.dropout(F(), rate=0.5), "dropout/Mul_1"),
    ("nn.moments", lambda: gc.nn.moments(F(), [0])[1], "moments/Squeeze_1"),
    # nn_impl.batch_normalization: x * cast(inv) + cast(offset - mean * inv), operators
    ("nn.batch_normalization", lambda: gc.nn.batch_normalization(F(), 0.5, 2.0, 1.0, 3.0, 1e-3),
     "batchnorm/add_1"),
    # losses_impl._safe_mean: div_no_nan(..., name="value") under the loss's scope
    ("losses.mean_squared_error", lambda: gc.losses.mean_squared_error(F(), F()),
     "mean_squared_error/value"),
    ("losses.softmax_cross_entropy", lambda: gc.losses.softmax_cross_entropy(F(), F()),
     "softmax_cross_entropy_loss/value"),
    ("nn.avg_pool", lambda: gc.nn.avg_pool(IMG(), [1, 2, 2, 1], [1, 2, 2, 1], "SAME"), "AvgPool"),
]


@pytest.mark.parametrize("label,build,tf_name", DEFAULT_NAMES, ids=[c[0] for c in DEFAULT_NAMES])
def test_default_name_matches_tf(label, build, tf_name):
    made = build()
    assert made.name == (tf_name + ":0" if isinstance(made, gc.Tensor) else tf_name)


def test_uniquification_is_case_insensitive_and_shared_with_scopes():
    """TF keeps one case-insensitive set of used names for ops and scopes: after tf.add's
    "Add", `x + y` is "add_1", and a name scope "add" taken later is "add_2"."""
    x, y = F(), F()
    assert gc.add(x, y).name == "Add:0"
    assert (x + y).name == "add_1:0"
    assert (x + y).name == "add_2:0"
    assert gc.add(x, y).name == "Add_3:0"
    with gc.name_scope("add") as scope:
        assert scope == "add_4/"
    assert [(x * y).name, (x * 2.0).name, gc.multiply(x, y).name] == \
        ["mul:0", "mul_1:0", "Mul_2:0"]


def test_names_under_name_scopes():
    x, y = F(), F()
    with gc.name_scope("layer"):
        assert (x + y).name == "layer/add:0"
        assert (x + y).name == "layer/add_1:0"
        assert gc.zeros_like(x).name == "layer/zeros_like:0"
        assert gc.random_normal([2]).name == "layer/random_normal:0"
        assert x[0].name == "layer/strided_slice:0"
    with gc.name_scope("layer"):
        assert (x + y).name == "layer_1/add:0"
    assert gc.reduce_logsumexp(x, name="lse").name == "lse:0"
    assert gc.add(x, y, name="sum").name == "sum:0"


def test_operator_operands_are_named_inside_the_operator_scope():
    """TF converts a Python operand inside the operator's scope: "add/y" on the right,
    "add/x" on the left (r_binary_op_wrapper), matmul's second operand "matmul/b"."""
    x = F()
    assert [t.name for t in (x + 1.0).op.inputs] == ["f:0", "add/y:0"]
    assert [t.name for t in (2.0 * x).op.inputs] == ["mul/x:0", "f:0"]
    assert (x @ np.ones((3, 1), np.float32)).op.inputs[1].name == "matmul/b:0"
    with gc.Session() as sess:
        xv = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = sess.run([x + 1.0, 2.0 * x, 1.0 - x, x @ np.ones((3, 1), np.float32)], {x: xv})
    np.testing.assert_array_equal(out[0], xv + 1)
    np.testing.assert_array_equal(out[1], 2 * xv)
    np.testing.assert_array_equal(out[2], 1 - xv)
    np.testing.assert_array_equal(out[3], xv.sum(1, keepdims=True))


def test_variable_initial_value_names_as_tf():
    """TF 2.21 compat.v1 (checked): a value becomes <var>/initial_value, a callable's ops go
    under <var>/Initializer, get_variable's initializer under <var>/Initializer too."""
    g = gc.Graph()
    with g.as_default():
        gc.Variable([[1.0], [2.0]], name="w")
        gc.Variable(3.0)
        gc.Variable(lambda: gc.constant([1.0, 2.0]), name="u")
        gc.get_variable("g", [2], initializer=gc.zeros_initializer())
    names = [op.name for op in g.get_operations()]
    assert names[:4] == ["w/initial_value", "w", "w/Assign", "w/read"]
    assert names[4:8] == ["Variable/initial_value", "Variable", "Variable/Assign",
                          "Variable/read"]
    assert "u/Initializer/Const" in names and "u" in names
    assert any(n.startswith("g/Initializer/") for n in names)
