"""Graph files holding the bodies of control-flow ops: While and If bodies written to a
GraphDef's function library (and graphc's JSON "functions"), nested bodies included, read
back through import_graph_def, write_graph, export/import_meta_graph and
convert_variables_to_constants, on every Session backend; values against NumPy loops
written here, gradients after import against central differences in float64. Files
that lack a body or hold a malformed one are refused, naming it, before anything runs."""
import numpy as np
import pytest

import graphc as gc
from graphc import graph_io

pytest.importorskip("tensorboard")

pytestmark = pytest.mark.filterwarnings("ignore:graphc could not compile this run")
FLOATS = [np.float32, np.float64]
FORMATS = ["pb", "pbtxt", "json"]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def reload(fmt, tmp_path, graph=None, name=""):
    """The default graph (or `graph`) written in format `fmt`, read back into a fresh
    default graph (under the import scope `name`)."""
    graph = graph or gc.get_default_graph()
    path = gc.train.write_graph(graph, str(tmp_path), f"g.{fmt}", as_text=fmt != "pb")
    gc.reset_default_graph()
    gc.import_graph_def(graph_io.read_graph_def(path), name=name)
    return gc.get_default_graph()


def run(fetches, feed=None):
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        return sess.run(fetches, feed)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_while_loop_round_trip(fmt, dtype, tmp_path):
    """The issue's example: the loop's bodies travel in the file."""
    x = gc.placeholder(dtype, [3], name="x")
    i, y = gc.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, y * 2.0), [0, x])
    gd = gc.get_default_graph().as_graph_def()
    assert {f.signature.name for f in gd.library.function} == {"while/cond", "while/body"}
    g = reload(fmt, tmp_path)
    xv = np.array([1.5, -2.0, 0.0], dtype)
    got_i, got_y = run([g.get_tensor_by_name(i.name), g.get_tensor_by_name(y.name)],
                       {"x:0": xv})
    assert got_i == 5 and got_y.dtype == dtype
    np.testing.assert_allclose(got_y, xv * 32, **tol(dtype))


@pytest.mark.parametrize("fmt", FORMATS)
def test_nested_loops_and_conds_under_an_import_scope(fmt, tmp_path):
    """A loop inside a cond inside a loop, with captured tensors at each level, imported
    under a scope (the bodies' ops and names move with it)."""
    x = gc.placeholder(gc.float64, [None], name="x")
    n = gc.placeholder(gc.int32, [], name="n")
    scale = gc.constant(0.5, gc.float64)

    def outer_body(k, acc):
        def inner(j, a):
            return j + 1, a + x * gc.cast(j, gc.float64)
        branch = gc.cond(k % 2 > 0,
                         lambda: gc.while_loop(lambda j, a: j < k, inner, [0, acc])[1],
                         lambda: acc * scale)
        return k + 1, branch
    _, out = gc.while_loop(lambda k, acc: k < n, outer_body, [0, gc.zeros_like(x)])
    g = reload(fmt, tmp_path, name="imp")
    xv, nv = np.array([1.0, -2.0, 3.0]), 5
    acc = np.zeros(3)
    for k in range(nv):
        acc = acc + x_sum(xv, k) if k % 2 else acc * 0.5
    got = run(g.get_tensor_by_name("imp/" + out.name), {"imp/x:0": xv, "imp/n:0": nv})
    np.testing.assert_allclose(got, acc, rtol=1e-12)
    assert all(name.startswith("imp/") for name in g._functions)


def x_sum(xv, k):
    return xv * sum(range(k))


@pytest.mark.parametrize("fmt", FORMATS)
def test_tensor_array_and_map_fn_round_trip(fmt, tmp_path):
    xs = gc.placeholder(gc.float32, [None, 2], name="xs")
    squares = gc.map_fn(lambda r: r * r + 1.0, xs)
    ta = gc.TensorArray(gc.float32, size=gc.shape(xs)[0])

    def body(t, ta, run_sum):
        run_sum = run_sum + xs[t]
        return t + 1, ta.write(t, run_sum), run_sum
    _, ta, _ = gc.while_loop(lambda t, *_: t < gc.shape(xs)[0], body,
                             [0, ta, gc.zeros([2])])
    cums = ta.stack()
    g = reload(fmt, tmp_path)
    xv = np.arange(10, dtype=np.float32).reshape(5, 2) - 3
    got_sq, got_cum = run([g.get_tensor_by_name(squares.name),
                           g.get_tensor_by_name(cums.name)], {"xs:0": xv})
    np.testing.assert_allclose(got_sq, xv * xv + 1, rtol=1e-6)
    np.testing.assert_allclose(got_cum, np.cumsum(xv, 0), rtol=1e-6)
    empty = run(g.get_tensor_by_name(squares.name), {"xs:0": np.zeros((0, 2), np.float32)})
    assert empty.shape == (0, 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_assign_inside_the_taken_branch_only(fmt, tmp_path):
    """A variable the bodies assign (captured by reference) is the Session's variable
    after import too: only the taken branch's assign runs."""
    v = gc.Variable(np.array([1.0, 2.0]), name="v")
    p = gc.placeholder(gc.bool, [], name="p")
    out = gc.cond(p, lambda: gc.identity(gc.assign_add(v, [10.0, 10.0])), lambda: v * 3.0)
    init = gc.global_variables_initializer()
    g = reload(fmt, tmp_path)
    with gc.Session() as sess:
        sess.run(g.get_operation_by_name(init.name))
        other = sess.run(g.get_tensor_by_name(out.name), {"p:0": False})
        taken = sess.run(g.get_tensor_by_name(out.name), {"p:0": True})
        after = sess.run("v:0")
    np.testing.assert_allclose(other, [3.0, 6.0])
    np.testing.assert_allclose(taken, [11.0, 12.0])
    np.testing.assert_allclose(after, [11.0, 12.0])


def test_gradients_after_import_match_finite_differences():
    """tf.gradients of an imported loop (its gradient loop built after import, reading
    the imported body) against central differences."""
    x = gc.placeholder(gc.float64, [3], name="x")
    w = gc.placeholder(gc.float64, [3], name="w")
    _, y = gc.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, gc.sin(y) * w + y * y * 0.1),
                         [0, x])
    gd = gc.get_default_graph().as_graph_def()
    gc.reset_default_graph()
    y2, = gc.import_graph_def(gd, name="", return_elements=[y.name])
    x2, w2 = (gc.get_default_graph().get_tensor_by_name(n) for n in ("x:0", "w:0"))
    loss = gc.reduce_sum(y2 * gc.constant([1.0, -2.0, 0.5], gc.float64))
    dx, dw = gc.gradients(loss, [x2, w2])
    xv, wv = np.array([0.3, -0.7, 1.1]), np.array([0.9, 1.2, -0.4])

    def f(xa, wa):
        ya = xa.copy()
        for _ in range(4):
            ya = np.sin(ya) * wa + ya * ya * 0.1
        return np.sum(ya * [1.0, -2.0, 0.5])
    got_dx, got_dw = run([dx, dw], {x2: xv, w2: wv})
    eps = 1e-6
    for got, which in ((got_dx, 0), (got_dw, 1)):
        want = np.zeros(3)
        for k in range(3):
            d = np.zeros(3)
            d[k] = eps
            args_p = [xv + d, wv] if which == 0 else [xv, wv + d]
            args_m = [xv - d, wv] if which == 0 else [xv, wv - d]
            want[k] = (f(*args_p) - f(*args_m)) / (2 * eps)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradient_loops_and_cond_gradients_round_trip(fmt, tmp_path):
    """A graph holding gradients already (the forward loop's saved stacks, the backward
    loop, an If of gradient branches) runs the same after the round trip."""
    x = gc.placeholder(gc.float64, [2], name="x")
    p = gc.placeholder(gc.bool, [], name="p")
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * y + 0.5), [0, x])
    z = gc.cond(p, lambda: gc.exp(y), lambda: y * 4.0)
    dx, = gc.gradients(gc.reduce_sum(z), [x])
    xv = np.array([0.3, -0.5])
    want = [run([z, dx], {x: xv, p: b}) for b in (True, False)]
    g = reload(fmt, tmp_path)
    got = [run([g.get_tensor_by_name(z.name), g.get_tensor_by_name(dx.name)],
               {"x:0": xv, "p:0": b}) for b in (True, False)]
    for (wz, wd), (gz, gd) in zip(want, got):
        np.testing.assert_allclose(gz, wz, rtol=1e-12)
        np.testing.assert_allclose(gd, wd, rtol=1e-12)
    # independently: y = f(f(f(x))), f(v) = v*v + 0.5; dz/dx through the chain rule
    v, dv = xv.copy(), np.ones(2)
    for _ in range(3):
        v, dv = v * v + 0.5, dv * 2 * v
    np.testing.assert_allclose(got[0][1], np.exp(v) * dv, rtol=1e-12)
    np.testing.assert_allclose(got[1][1], 4.0 * dv, rtol=1e-12)


def exported_meta_graph(fmt, tmp_path):
    """The path of the default graph written as a meta graph: TF's MetaGraphDef ("meta")
    or graphc's JSON ("json")."""
    path = str(tmp_path / f"model.{fmt}")
    if fmt == "json":
        graph_io.export_json_meta_graph(path)
    else:
        gc.train.export_meta_graph(path)
    return path


@pytest.mark.parametrize("fmt", ["meta", "json"])
def test_dynamic_rnn_training_graph_through_meta_graph(fmt, tmp_path):
    """A dynamic_rnn trained by gradient descent: exported as a meta graph (TF's
    MetaGraphDef, graphc's JSON: bodies, gradient loops, collections), imported into a
    fresh graph, its training steps give the losses the original graph gives."""
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((4, 5, 3)).astype(np.float32)
    lv = np.array([5, 2, 0, 3], np.int32)
    yv = rng.standard_normal((4, 6)).astype(np.float32)
    x = gc.placeholder(gc.float32, [None, None, 3], name="x")
    lengths = gc.placeholder(gc.int32, [None], name="lengths")
    y = gc.placeholder(gc.float32, [None, 6], name="y")
    with gc.variable_scope("rnn_model", initializer=gc.glorot_uniform_initializer(seed=7)):
        _, state = gc.nn.dynamic_rnn(gc.nn.rnn_cell.GRUCell(6), x, sequence_length=lengths,
                                     dtype=gc.float32)
    loss = gc.reduce_mean(gc.square(state - y), name="loss")
    train = gc.train.GradientDescentOptimizer(0.5).minimize(loss, name="train")
    feed = {"x:0": xv, "lengths:0": lv, "y:0": yv}
    path = exported_meta_graph(fmt, tmp_path)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        start = {v.op.name: sess.run(v) for v in gc.global_variables()}
        want = [sess.run([loss, train], feed)[0] for _ in range(4)]
    gc.reset_default_graph()
    gc.train.import_meta_graph(path)
    with gc.Session() as sess:
        for v in gc.global_variables():
            v.load(start[v.op.name], sess)
        got = [sess.run(["loss:0", "train"], feed)[0] for _ in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert want[-1] < want[0]


@pytest.mark.parametrize("fmt", ["meta", "json"])
def test_meta_graph_under_an_import_scope_keeps_variables_and_gradients(fmt, tmp_path):
    """Bodies that assign and read a variable by reference, and a gradient loop, imported
    under a scope: the bodies' stand-ins are the scoped Session variable."""
    v = gc.Variable(np.array([1.0, 2.0]), name="v")
    p = gc.placeholder(gc.bool, [], name="p")
    x = gc.placeholder(gc.float64, [2], name="x")
    out = gc.cond(p, lambda: gc.identity(gc.assign_add(v, x)), lambda: v * 3.0)
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * v), [0, x])
    dv, = gc.gradients(gc.reduce_sum(y), [v])
    path = exported_meta_graph(fmt, tmp_path)
    gc.reset_default_graph()
    gc.train.import_meta_graph(path, import_scope="s")
    xv = np.array([1.0, -0.5])
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run("s/" + out.name, {"s/p:0": True, "s/x:0": xv})
        after = sess.run("s/v:0")
        got_dv = sess.run("s/" + dv.name, {"s/x:0": xv})
    np.testing.assert_allclose(got, [2.0, 1.5])
    np.testing.assert_allclose(after, [2.0, 1.5])
    np.testing.assert_allclose(got_dv, 3 * xv * after ** 2)  # d/dv sum(x v^3)


def test_freezing_turns_variables_read_in_bodies_into_constants():
    v = gc.Variable(np.array([0.5, 2.0], np.float32), name="v")
    x = gc.placeholder(gc.float32, [2], name="x")
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * v + v), [0, x])
    gc.identity(y, name="out")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        frozen = gc.graph_util.convert_variables_to_constants(
            sess, gc.get_default_graph().as_graph_def(), ["out"])
    ops = [n.op for n in frozen.node] + [n.op for f in frozen.library.function
                                         for n in f.node_def]
    assert "VariableV2" not in ops
    gc.reset_default_graph()
    gc.import_graph_def(frozen, name="")
    xv = np.array([1.0, -1.0], np.float32)
    want = xv.copy()
    for _ in range(3):
        want = want * [0.5, 2.0] + [0.5, 2.0]
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run("out:0", {"x:0": xv}), want, rtol=1e-6)


def test_freezing_a_gradient_loop_that_reads_variables():
    """A loop saving stacks for its gradient keeps graphc's layout, where the body reads
    the variable by reference: frozen, the reference becomes the constant, in the
    forward and the backward loop."""
    v = gc.Variable(np.array([0.5, -1.5]), name="v")
    x = gc.placeholder(gc.float64, [2], name="x")
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, gc.sin(y) * v + y), [0, x])
    dx, dv = gc.gradients(gc.reduce_sum(y), [x, v])
    gc.identity(dx, name="dx")
    gc.identity(dv, name="dv")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        frozen = gc.graph_util.convert_variables_to_constants(
            sess, gc.get_default_graph().as_graph_def(), ["dx", "dv"])
    assert any("num_loop_vars" in n.attr for n in frozen.node if n.op == "While")
    ops = [n.op for n in frozen.node] + [n.op for f in frozen.library.function
                                         for n in f.node_def]
    assert "VariableV2" not in ops
    gc.reset_default_graph()
    gc.import_graph_def(frozen, name="")
    xv, vv = np.array([0.3, 1.2]), np.array([0.5, -1.5])
    with gc.Session() as sess:
        got_dx, got_dv = sess.run(["dx:0", "dv:0"], {"x:0": xv})
    ys, dy_dx, dy_dv = xv.copy(), np.ones(2), np.zeros(2)
    for _ in range(3):  # y' = sin(y) v + y: the chain rule, step by step
        dy_dv = (np.cos(ys) * vv + 1) * dy_dv + np.sin(ys)
        dy_dx = (np.cos(ys) * vv + 1) * dy_dx
        ys = np.sin(ys) * vv + ys
    np.testing.assert_allclose(got_dx, dy_dx, rtol=1e-12)
    np.testing.assert_allclose(got_dv, dy_dv, rtol=1e-12)


# ------------------------------------------------------------------ the proto's form
def test_written_library_has_tf_form():
    """What TF 2.x reads: TF's While (every input a loop variable of both functions: the
    loop variables, a trip counter, the captured tensors) and If (every input after the
    condition an argument of both branches), bodies named by `func` attrs, FunctionDefs
    whose args are read by name and whose nodes' outputs are "node:arg:index" of TF's
    op defs."""
    x = gc.placeholder(gc.float32, [2], name="x")
    q = gc.placeholder(gc.bool, [], name="q")
    _, y = gc.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, gc.tanh(y) + x), [0, x])
    gc.cond(q, lambda: gc.unstack(y)[1], lambda: y[0] * x[1])
    gd = gc.get_default_graph().as_graph_def()
    loop = next(n for n in gd.node if n.op == "While")
    branch = next(n for n in gd.node if n.op == "If")
    assert loop.attr["cond"].func.name == "while/cond"
    assert loop.attr["body"].func.name == "while/body"
    assert list(loop.input) == ["while/Const", "x", "while/trip_count_init", "x"]
    assert list(loop.attr["T"].list.type) == [3, 1, 3, 1]  # int32, float, int32, float
    assert set(loop.attr) == {"T", "cond", "body", "output_shapes", "parallel_iterations",
                              "_graphc_location"}
    assert list(branch.input) == ["q", "while:1", "while:1", "x"]
    assert list(branch.attr["Tin"].list.type) == [1, 1, 1]
    assert list(branch.attr["Tout"].list.type) == [1]
    functions = {f.signature.name: f for f in gd.library.function}
    body = functions["while/body"]
    assert [a.name for a in body.signature.input_arg] == ["arg0", "arg1", "arg2", "arg3"]
    assert [a.name for a in body.signature.output_arg] == ["out0", "out1", "out2", "out3"]
    tanh = next(n for n in body.node_def if n.op == "Tanh")
    assert list(tanh.input) == ["arg1"]
    add = next(n for n in body.node_def if n.op == "Add" and "arg3" in n.input)
    assert list(add.input) == [f"{tanh.name}:y:0", "arg3"]
    assert body.ret["out1"] == f"{add.name}:z:0"
    assert body.ret["out3"] == "arg3"  # the captured x, passed through
    count = next(n for n in body.node_def if n.op == "Add" and "arg2" in n.input)
    assert body.ret["out2"] == f"{count.name}:z:0"
    assert len(functions["while/cond"].signature.input_arg) == 4
    then = functions[branch.attr["then_branch"].func.name]
    other = functions[branch.attr["else_branch"].func.name]
    assert len(then.signature.input_arg) == len(other.signature.input_arg) == 3
    unpack = next(n for n in then.node_def if n.op == "Unpack")
    assert then.ret["out0"] == f"{unpack.name}:output:1"


def test_ops_tf_cannot_hold_keep_graphcs_layout():
    """A loop that saves stacks for its gradient, and a cond that assigns a variable,
    are written in graphc's layout (which graphc reads back), the rest in TF's."""
    v = gc.Variable(1.0, name="v")
    x = gc.placeholder(gc.float32, [], name="x")
    _, y = gc.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * y * v), [0, x])
    gc.gradients(y, x)
    gc.cond(x > 0, lambda: gc.identity(gc.assign_add(v, 1.0)), lambda: v * 2.0)
    layouts = {n.name: "num_loop_vars" in n.attr or "num_then_inputs" in n.attr
               for n in gc.get_default_graph().as_graph_def().node if n.op in ("While", "If")}
    assert layouts == {"while": True, "gradients/while_grad/while_grad": False, "cond": True}


# ------------------------------------------------------------------ bad files
def _loop_graph_def():
    x = gc.placeholder(gc.float32, [2], name="x")
    gc.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y + 1.0), [0, x])
    gd = gc.get_default_graph().as_graph_def()
    gc.reset_default_graph()
    return gd


def _function(gd, name):
    return next(f for f in gd.library.function if f.signature.name == name)


def _drop_cond(gd):
    del gd.library.function[[f.signature.name for f in gd.library.function]
                            .index("while/cond")]


def _break_ret(gd):
    _function(gd, "while/body").ret.pop("out1")


def _break_input(gd):
    node = next(n for n in _function(gd, "while/body").node_def if n.op == "Add")
    node.input[0] = "nowhere:z:0"


def _wrong_output_arg(gd):
    node = next(n for n in _function(gd, "while/body").node_def if n.op == "Add")
    body = _function(gd, "while/body")
    body.ret["out1"] = f"{node.name}:product:0"


def _drop_input(gd):
    loop = next(n for n in gd.node if n.op == "While")
    del loop.input[1]


def _drop_loop_variable(gd):
    _drop_input(gd)
    loop = next(n for n in gd.node if n.op == "While")
    del loop.attr["T"].list.type[1]
    del loop.attr["output_shapes"].list.shape[1]


def _retype_loop_variable(gd):
    loop = next(n for n in gd.node if n.op == "While")
    loop.attr["T"].list.type[1] = 2  # float64 for the float32 loop variable


def _json_without_attr(data):
    loop = next(n for n in data["nodes"] if n["op"] == "While")
    del loop["attrs"]["num_loop_vars"]


def test_function_control_outputs_run_with_the_body():
    """A FunctionDef's control_ret (a stateful op no result reads, as TF runs it with the
    function) runs with graphc's body too: here an Assert that fails."""
    gd = _loop_graph_def()
    body = _function(gd, "while/body")
    check = body.node_def.add(name="check", op="Assert", input=["never:z:0", "arg1"])
    check.attr["T"].list.type.append(1)
    never = body.node_def.add(name="never", op="Less", input=["arg1", "arg1"])
    never.attr["T"].type = 1
    body.control_ret["check"] = "check"
    gc.import_graph_def(gd, name="")
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError):
            sess.run("while:1", {"x:0": [1.0, 2.0]})


@pytest.mark.parametrize("breaks, message", [
    (_drop_cond, r"node 'while' \(op: 'While'\) calls function 'while/cond' \(attr 'cond'\), "
                 r"which is not in the graph's function library"),
    (_break_ret, r"function 'while/body': output 'out1' has no ret value"),
    (_break_input, r"function 'while/body': node '.*' reads 'nowhere:z:0', neither"),
    (_wrong_output_arg, r"function 'while/body': ret 'out1' reads '.*:product:0', Add's "
                        r"output is 'z'"),
    (_drop_input, r"node 'while' \(op: 'While'\): attr 'T' lists 3 types for 2 inputs"),
    (_retype_loop_variable, r"node 'while' \(op: 'While'\): 'while/body' gives float32 "
                            r"\(.*\) where the op has float64"),
    (_drop_loop_variable, r"node 'while' \(op: 'While'\): its 2 inputs and attrs do not fit "
                          r"its bodies 'while/cond' \(3 args, 1 results\), 'while/body' "
                          r"\(3 args, 3 results\)"),
])
def test_malformed_libraries_are_refused_naming_the_function(breaks, message):
    gd = _loop_graph_def()
    breaks(gd)
    with pytest.raises(ValueError, match=message):
        gc.import_graph_def(gd, name="")


def test_json_function_missing_or_malformed(tmp_path):
    x = gc.placeholder(gc.float32, [2], name="x")
    gc.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y + 1.0), [0, x])
    data = graph_io.json_graph_def().to_dict()
    gc.reset_default_graph()
    missing = dict(data, functions=[f for f in data["functions"] if f["name"] != "while/body"])
    with pytest.raises(ValueError, match="calls function 'while/body'"):
        gc.import_graph_def(missing)
    bad = dict(data, functions=[dict(data["functions"][0], inputs="arg")])
    with pytest.raises(ValueError, match="graph def function 0 is malformed"):
        gc.import_graph_def(bad)
    _json_without_attr(data)
    with pytest.raises(ValueError, match=r"node 'while' \(op: 'While'\): attr "
                                         "'num_loop_vars' is missing or not an int"):
        gc.import_graph_def(data)
