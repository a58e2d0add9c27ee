"""The compiler's front half: IR, lowering, each pass, the pipeline, the IR interpreter.

Every pass is checked for what it must rewrite and what it must leave alone, and whole
graphs (including an MLP training step) must give the Session's results after all passes.
"""
import json
import os

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.compiler import interpret, lower, optimize
from graphc.compiler.driver import compile_options, schedule_module
from graphc.compiler.ir import Module
from graphc.compiler.passes import algebraic_simplify, constant_folding, cse, prune
from graphc.compiler.pipeline import PASS_NAMES, STAGE_NAMES

RNG = np.random.default_rng(0)


def _types(module):
    return [n.type for n in module.nodes]


def _count(module, type):
    return _types(module).count(type)


def _lower(fetches, feeds=(), targets=(), shapes=None):
    """Lowers for feeds of `shapes` (default: each unknown dim 4)."""
    fetches = fetches if isinstance(fetches, list) else [fetches]
    if shapes is None:
        shapes = [[4 if d is None else d for d in f.shape.as_list()] for f in feeds]
    return lower(list(feeds), fetches, list(targets), shapes)


def _dims(v):
    return tuple(str(d) for d in v.dims)


def _run(module, feed_arrays=(), variables=None):
    return interpret(module, list(feed_arrays), {} if variables is None else variables)


def _check_same_as_session(fetches, feed_dict=None, targets=(), disable=None):
    """Lowers and optimizes, then checks outputs and final variables against Session.run."""
    feed_dict = feed_dict or {}
    # the oracle is the reference executor (the interpreter runs the same NumPy kernels)
    sess = gc.Session(config=gc.ConfigProto(backend="reference"))
    if gc.global_variables():
        sess.run(gc.global_variables_initializer())
    variables = {k: v.copy() for k, v in sess._state.variables.items()}
    module = lower(list(feed_dict), fetches, list(targets),
                   [np.shape(a) for a in feed_dict.values()])
    stats = optimize(module, disable=disable)
    got = interpret(module, list(feed_dict.values()), variables)
    want = sess.run(list(fetches) + list(targets), feed_dict)[:len(fetches)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert sorted(variables) == sorted(sess._state.variables)
    for name, value in variables.items():
        np.testing.assert_array_equal(value, sess._state.variables[name], err_msg=name)
    return module, stats


# ---------------------------------------------------------------------------------- IR
def test_text_form_one_line_per_node_with_symbols_attrs_and_source_name():
    x = gc.placeholder(gc.float32, [None, 784], name="x")
    w = gc.constant(np.zeros((784, 10), np.float32), name="w")
    gc.matmul(x, w, name="dense/MatMul")
    m = _lower(gc.get_default_graph().get_tensor_by_name("dense/MatMul:0"), [x])
    text = m.to_text()
    assert "%0 = f32[x.0,784] Parameter() {index=0}  # x:0" in text
    line = next(ln for ln in text.splitlines() if " MatMul(" in ln)
    assert line.strip().startswith("%2 = f32[x.0,10] MatMul(%0, %1) "
                                   "{transpose_a=false, transpose_b=false}  # dense/MatMul")
    assert "test_compiler_passes.py:" in line  # the creation site
    assert "return (%2)" in text


def test_dict_form_is_json_and_round_trips():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    v = gc.Variable(np.arange(3, dtype=np.float32), name="v")
    y = gc.reduce_sum(x * v + gc.constant([1.0, 2.0, np.nan]), axis=1, keepdims=True)
    step = v.assign_add(gc.constant([-0.0, 1.0, 2.5]))
    m = _lower(y, [x], [step.op])
    d = json.loads(json.dumps(m.to_dict(), allow_nan=True))
    m2 = Module.from_dict(d)
    m2.verify()
    assert m2.to_text() == m.to_text()
    consts = [n.attrs["value"] for n in m2.nodes if n.type == "Const"]
    assert any(np.signbit(c).any() for c in consts)  # -0.0 survives
    assert any(np.isnan(c).any() for c in consts)
    assert all(not c.flags.writeable for c in consts)
    sess = gc.Session()
    sess.run(v.initializer)
    feed = RNG.standard_normal((2, 3)).astype(np.float32)
    vars1, vars2 = dict(sess._state.variables), dict(sess._state.variables)
    np.testing.assert_array_equal(_run(m, [feed], vars1)[0], _run(m2, [feed], vars2)[0])
    np.testing.assert_array_equal(vars1["v"], vars2["v"])


def test_use_lists_replace_all_uses_and_verify():
    x = gc.placeholder(gc.float32, [2], name="x")
    y = gc.exp(x)
    z = y + y
    m = _lower([z, y], [x])
    exp_node = next(n for n in m.nodes if n.type == "Exp")
    add_node = next(n for n in m.nodes if n.type == "Add")
    assert exp_node.outputs[0].uses == [add_node, add_node]
    m.replace_all_uses(exp_node.outputs[0], m.params[0].outputs[0])
    assert exp_node.outputs[0].uses == [] and m.outputs[1] is m.params[0].outputs[0]
    assert m.verify()
    m.nodes.remove(add_node)
    m.nodes.insert(0, add_node)  # now used before its input is defined
    with pytest.raises(AssertionError, match="not defined before"):
        m.verify()


class _ScannedList(list):
    """A control-user list that counts how often it is searched or walked."""
    scans = 0

    def __contains__(self, item):
        type(self).scans += 1
        return super().__contains__(item)

    def __iter__(self):
        type(self).scans += 1
        return super().__iter__()

    def remove(self, item):
        type(self).scans += 1
        return super().remove(item)


def _module_with_shared_control_deps(n_users, n_deps):
    """n_users nodes that each wait for the same n_deps nodes, the way every op of a
    training step built under control_dependencies(update_ops) waits for the updates."""
    m = Module()
    x = m.add_node("Parameter", [], {"index": 0}, [(gc.float32, (4,))]).outputs[0]
    deps = [m.add_node("Neg", [x], {}, [(gc.float32, (4,))]) for _ in range(n_deps)]
    users = [m.add_node("Exp", [x], {}, [(gc.float32, (4,))], control_deps=deps)
             for _ in range(n_users)]
    m.outputs = [u.outputs[0] for u in users]
    for d in deps:
        d.control_users = _ScannedList(d.control_users)
    return m, deps, users


def test_verify_reads_each_control_user_list_once():
    # a membership test per control edge made verify quadratic: 76 s of ResNet-50's
    # training step, whose ~4k gradient ops each wait for ~100 batch-norm updates
    m, deps, users = _module_with_shared_control_deps(200, 20)
    _ScannedList.scans = 0
    assert m.verify()
    assert _ScannedList.scans <= len(deps)
    # and it still finds a user its dep does not list
    deps[3].control_users.remove(users[150])
    with pytest.raises(AssertionError, match="does not list control user"):
        m.verify()


def test_removing_nodes_filters_each_control_user_list_once():
    m, deps, users = _module_with_shared_control_deps(200, 20)
    doomed = users[::2]
    m.outputs = [u.outputs[0] for u in users[1::2]]
    _ScannedList.scans = 0
    m.remove_nodes(doomed)
    assert _ScannedList.scans <= len(deps)
    assert all(d.control_users == users[1::2] for d in deps)
    assert m.nodes == [m.params[0]] + deps + users[1::2] and m.verify()


class _ScannedNodes(list):
    """A node list that counts its scans: searches, walks and inserts that shift it."""
    scans = 0

    def _scanned(self):
        type(self).scans += 1

    def __iter__(self):
        self._scanned()
        return super().__iter__()

    def __contains__(self, item):
        self._scanned()
        return super().__contains__(item)

    def index(self, *args):
        self._scanned()
        return super().index(*args)

    def insert(self, i, item):
        self._scanned()
        return super().insert(i, item)

    def remove(self, item):
        self._scanned()
        return super().remove(item)


def test_a_new_nodes_control_deps_are_deduplicated_without_scanning_them(monkeypatch):
    # a membership test per dep made lowering a train op (a NoOp waiting for every
    # variable's update) quadratic in the number of variables
    from graphc.compiler import ir

    class ScannedNode(ir.Node):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.control_deps = _ScannedList()
    monkeypatch.setattr(ir, "Node", ScannedNode)
    m = Module()
    updates = [m.add_node("NoOp", [], {}, []) for _ in range(300)]
    _ScannedList.scans = 0
    train = m.add_node("NoOp", [], {}, [], control_deps=updates + updates[::-2])
    assert _ScannedList.scans == 0
    assert train.control_deps == updates
    assert all(u.control_users == [train] for u in updates)


def test_replacing_a_node_walks_its_use_and_control_user_lists_once():
    # one list.remove per use made folding a value every update reads (the learning
    # rate) quadratic in the variables; so did one per control user
    m = Module()
    x = m.add_node("Parameter", [], {"index": 0}, [(gc.float32, (2,))]).outputs[0]
    rate = m.add_node("Neg", [m.add_constant(np.float32([0.5, 2]), before=None)], {},
                      [(gc.float32, (2,))])
    readers = [m.add_node("Mul", [x, rate.outputs[0]], {}, [(gc.float32, (2,))])
               for _ in range(300)]
    waiting = [m.add_node("Exp", [x], {}, [(gc.float32, (2,))], control_deps=[rate])
               for _ in range(300)]
    twice = m.add_node("AddN", [rate.outputs[0], x, rate.outputs[0]], {"N": 3},
                       [(gc.float32, (2,))])
    m.outputs = [n.outputs[0] for n in readers + waiting + [twice]]
    rate.outputs[0].uses = _ScannedList(rate.outputs[0].uses)
    rate.control_users = _ScannedList(rate.control_users)
    _ScannedList.scans = 0
    assert constant_folding.run(m)["folded"] == 1
    assert _ScannedList.scans <= 2
    folded = readers[0].inputs[1]
    assert all(r.inputs[1] is folded for r in readers) and twice.inputs == [folded, x, folded]
    assert folded.uses == readers + [twice, twice]
    assert all(w.control_deps == [folded.node] for w in waiting)
    assert folded.node.control_users == waiting and m.verify()
    np.testing.assert_array_equal(folded.node.attrs["value"], np.float32([-0.5, -2]))


def test_constant_folding_scans_the_node_list_a_bounded_number_of_times():
    # each fold searched the node list for the folded node (to insert its Const there)
    # and for each control user (to keep the order): quadratic in a deep training step
    n = 300
    m = Module()
    x = m.add_node("Parameter", [], {"index": 0}, [(gc.float32, (2,))]).outputs[0]
    folded, users = [], []
    for i in range(n):
        c = m.add_constant(np.float32([i, -i]), before=None)
        folded.append(m.add_node("Neg", [c], {}, [(gc.float32, (2,))]))
        users.append(m.add_node("Add", [x, folded[-1].outputs[0]], {}, [(gc.float32, (2,))]))
        users.append(m.add_node("Exp", [x], {}, [(gc.float32, (2,))],
                                control_deps=[folded[-1]]))
    m.outputs = [u.outputs[0] for u in users]
    m.nodes = _ScannedNodes(m.nodes)
    _ScannedNodes.scans = 0
    assert constant_folding.run(m)["folded"] == n
    assert _ScannedNodes.scans <= 6
    assert m.verify()
    consts = [add.inputs[1].node for add in users[0::2]]
    for i, (const, waiting) in enumerate(zip(consts, users[1::2])):
        assert const.type == "Const" and waiting.control_deps == [const]
        np.testing.assert_array_equal(const.attrs["value"], np.float32([-i, i]))
        assert m.nodes.index(const) < m.nodes.index(waiting)


def test_insertions_before_nodes_keep_list_insert_order_and_precedence():
    # the pending insertions must give the order list.insert(list.index(before)) gave,
    # and precedes() must agree with it before and after they are merged in
    rng = np.random.default_rng(3)
    m = Module()
    expected = []
    for step in range(400):
        if not expected or rng.random() < 0.3:
            before = None
        else:
            before = expected[rng.integers(len(expected))]
        node = m.add_node("NoOp", [], {}, [], before=before)
        if before is None:
            expected.append(node)
        else:
            expected.insert(expected.index(before), node)
        if step % 50 == 49:
            for _ in range(20):
                a, b = (expected[i] for i in rng.integers(len(expected), size=2))
                assert m.precedes(a, b) == (expected.index(a) < expected.index(b))
        if step % 120 == 119:
            assert m.nodes == expected
    assert m.nodes == expected
    assert all(m.precedes(a, b) for a, b in zip(expected, expected[1:]))


def test_inserting_before_a_node_not_in_the_module_is_an_error():
    m = Module()
    other = Module().add_node("NoOp", [], {}, [])
    m.add_node("NoOp", [], {}, [])
    m.add_node("NoOp", [], {}, [], before=other)
    with pytest.raises(ValueError, match="not in module"):
        m.nodes


# ---------------------------------------------------------------------------- lowering
def test_lowering_gives_dims_as_expressions_of_the_feed_symbols():
    x = gc.placeholder(gc.float32, [None, 4], name="x")
    w = gc.constant(np.ones((4, 3), np.float32))
    y = gc.matmul(x, w)                                # [x.0, 3]
    b = y + gc.constant(np.ones((1, 3), np.float32))   # broadcast with 1 keeps x.0
    s = gc.reduce_sum(b, axis=1)                       # [x.0]
    r = gc.reshape(b, [-1, 28])                        # 3*x.0 // 28, guarded divisible
    other = gc.placeholder(gc.float32, [None, 3], name="other")
    mixed = b + other                                  # guarded x.0 == other.0
    m = _lower([y, b, s, r, mixed], [x, other], shapes=[(28, 4), (28, 3)])
    dims = [_dims(v) for v in m.outputs]
    assert dims[:3] == [("x.0", "3"), ("x.0", "3"), ("x.0",)]
    assert dims[3] == ("floordiv(3*x.0, 28)", "28") and dims[4] == ("x.0", "3")
    assert m.symbols == {"x.0": (0, 0), "other.0": (1, 0)}
    for n in (28, 56):  # the interpreter checks every dim against the real shapes
        _run(m, [np.ones((n, 4), np.float32), np.ones((n, 3), np.float32)])
    with pytest.raises(ValueError, match="guards"):  # 3*30 is not a multiple of 28
        _run(m, [np.ones((30, 4), np.float32), np.ones((30, 3), np.float32)])


def test_lowering_a_fed_intermediate_cuts_the_graph():
    x = gc.placeholder(gc.float32, [3], name="x")
    h = gc.exp(x, name="h")
    y = h * 2.0
    m = _lower(y, [h])
    assert "Exp" not in _types(m) and m.params[0].name == "h:0"
    np.testing.assert_array_equal(_run(m, [np.ones(3, np.float32)])[0], [2, 2, 2])


def test_lowering_an_unfed_placeholder_raises_tf_error():
    x = gc.placeholder(gc.float32, [None, 2], name="x")
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"must feed a value for placeholder tensor 'x' with dtype "
                             r"float32 and shape \[\?,2\]"):
        _lower(x * 2.0)


# ------------------------------------------------------------------------------- prune
def test_prune_flattens_groups_and_keeps_effects():
    x = gc.placeholder(gc.float32, [2], name="x")
    v = gc.Variable(np.zeros(2, np.float32), name="v")
    a = v.assign_add(x)
    train = gc.group(a, gc.no_op())
    m = _lower([], [x], [train])
    stats = prune.run(m)
    assert "NoOp" not in _types(m) and stats["noops_removed"] == 2
    assert [n.type for n in m.roots] == ["AssignAdd"]
    variables = {"v": np.ones(2, np.float32)}
    _run(m, [np.full(2, 3, np.float32)], variables)
    np.testing.assert_array_equal(variables["v"], [4, 4])


def test_prune_deletes_what_nothing_needs_but_keeps_parameters():
    x = gc.placeholder(gc.float32, [2], name="x")
    unused = gc.placeholder(gc.float32, [2], name="unused")
    y = gc.exp(x)
    m = _lower(y, [x, unused])
    m.add_node("Neg", [m.params[0].outputs[0]], {}, [(gc.float32, (2,))])  # dead
    stats = prune.run(m)
    assert stats["nodes_removed"] == 1 and "Neg" not in _types(m)
    assert [p.name for p in m.params] == ["x:0", "unused:0"]


def test_effects_survive_when_their_value_is_no_longer_used():
    v = gc.Variable(1.0, name="v")
    out = gc.identity(v.assign_add(1.0))
    m = _lower(out)
    m.outputs = []  # as if a rewrite had dropped the only use of the assign's value
    prune.run(m)
    assert "AssignAdd" in _types(m)
    variables = {"v": np.float32(1.0)}
    _run(m, [], variables)
    assert variables["v"] == 2.0


# ------------------------------------------------------------------- constant folding
def test_constant_folding_folds_constant_subgraphs_into_one_const():
    a = gc.constant([1.0, 2.0, 3.0])
    b = gc.exp(a) * 2.0 + gc.reshape(gc.constant([[1.0, 1.0, 1.0]]), [3])
    x = gc.placeholder(gc.float32, [3], name="x")
    y = x + b
    m = _lower(y, [x])
    stats = constant_folding.run(m)
    assert stats["folded"] == 4
    assert _types(m) == ["Parameter", "Const", "Add"]
    folded = m.nodes[1].attrs["value"]
    np.testing.assert_array_equal(folded, np.exp(np.float32([1, 2, 3])) * 2 + 1)
    assert not folded.flags.writeable


def test_constant_folding_uses_static_shapes():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    s = gc.shape(x)          # not static: stays
    n = gc.size(x[0])        # [3]: static
    r = gc.rank(x)           # rank known
    m = _lower([s, n, r], [x])
    constant_folding.run(m)
    assert _count(m, "Shape") == 1 and "Size" not in _types(m) and "Rank" not in _types(m)
    got = _run(m, [np.ones((5, 3), np.float32)])
    assert list(got[0]) == [5, 3] and got[1] == 3 and got[2] == 2


def test_constant_folding_never_folds_through_placeholders_variables_or_random_ops():
    x = gc.placeholder(gc.float32, [2], name="x")
    v = gc.Variable(np.ones(2, np.float32), name="v")
    r = gc.random_normal([2], seed=1)
    c = gc.constant([1.0, 2.0])
    fetches = [x * c, v * c, r * c, gc.exp(v.value())]
    m = _lower(fetches, [x])
    assert constant_folding.run(m)["folded"] == 0
    assert _count(m, "RandomStandardNormal") == 1 and _count(m, "VariableV2") == 1
    assert _count(m, "Exp") == 1 and _count(m, "Mul") == 4  # random_normal's scale too


def test_constant_folding_respects_the_size_caps():
    big = np.ones(constant_folding.MAX_FOLDED_BYTES // 4 + 1, np.float32)
    too_big = gc.exp(gc.constant(big))                            # over the cap
    expansion = gc.fill([200, 200], 1.5)                          # 160 KB from 12 bytes
    small = gc.fill([10, 10], 1.5)                                # folded
    m = _lower([too_big, expansion, small])
    stats = constant_folding.run(m)
    assert stats["too_big"] == 2 and stats["folded"] == 1
    assert _count(m, "Exp") == 1 and _count(m, "Fill") == 1
    got = _run(m)
    assert got[1].shape == (200, 200) and got[2].shape == (10, 10)


def test_constant_folding_checks_the_size_before_running_the_kernel():
    huge = gc.fill([100000, 100000], 1.0)  # 40 GB if it ran
    m = _lower(huge)
    assert constant_folding.run(m)["too_big"] == 1 and _count(m, "Fill") == 1


def test_constant_folding_leaves_kernel_errors_for_run_time():
    bad = gc.gather(gc.constant([1.0, 2.0]), gc.constant([5]))  # index out of range
    m = _lower(bad)
    assert constant_folding.run(m)["kernel_errors"] == 1
    with pytest.raises(errors.InvalidArgumentError, match="GatherV2"):
        _run(m)


# ------------------------------------------------------------------ algebraic simplify
def _simplified(fetch, feeds, **kwargs):
    m = _lower(fetch, feeds)
    stats = algebraic_simplify.run(m, **kwargs)
    m.verify()
    return m, stats


def _feed(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("build", [
    lambda x: x * 1.0, lambda x: 1.0 * x, lambda x: x + 0.0, lambda x: 0.0 + x,
    lambda x: x - 0.0, lambda x: x / 1.0, lambda x: -(-x), lambda x: gc.identity(x),
    lambda x: gc.stop_gradient(x), lambda x: gc.cast(x, gc.float32),
    lambda x: x * gc.constant(np.ones((1, 3), np.float32)),
    lambda x: gc.transpose(gc.transpose(x)), lambda x: gc.transpose(x, [0, 1]),
    lambda x: gc.reshape(x, [-1, 3]), lambda x: gc.reshape(x, gc.shape(x)),
    lambda x: gc.broadcast_to(x, gc.shape(x)),
], ids=["x*1", "1*x", "x+0", "0+x", "x-0", "x/1", "--x", "identity", "stop_gradient",
        "cast_same", "x*ones_row", "transpose2", "transpose_identity", "reshape_same_dims",
        "reshape_to_own_shape", "broadcast_to_own_shape"])
def test_simplify_removes_identities(build):
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = build(x)
    m, _ = _simplified(y, [x])
    assert m.outputs[0] is m.params[0].outputs[0], m.to_text()
    feed = _feed(4, 3)
    np.testing.assert_array_equal(_run(m, [feed])[0], feed)


@pytest.mark.parametrize("build", [
    lambda x: x * gc.constant(np.ones((1, 3), np.float32)),   # broadcasts [?,1] to [?,3]
    lambda x: x + gc.zeros([2, 1, 1]),                        # adds a dimension
    lambda x: 0.0 - x,
    lambda x: x * 2.0,
    lambda x: gc.cast(x, gc.float64),
], ids=["x*1_broadcasting", "x+0_new_dim", "0-x", "x*2", "cast_other"])
def test_simplify_keeps_what_changes_the_result(build):
    x = gc.placeholder(gc.float32, [None, 1], name="x")
    y = build(x)
    m, stats = _simplified(y, [x])
    assert m.outputs[0] is not m.params[0].outputs[0]
    feed = _feed(4, 1)
    sess = gc.Session()
    np.testing.assert_array_equal(_run(m, [feed])[0], sess.run(y, {x: feed}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("piece", [0, 1, 2])
@pytest.mark.parametrize("split", ["Split", "SplitV"])
def test_simplify_computes_only_the_used_columns_of_a_split_product(split, piece, transpose_b,
                                                                     dtype):
    a_val = _feed(5, 7, dtype=dtype)
    b_val = _feed(*((9, 7) if transpose_b else (7, 9)), dtype=dtype)
    a = gc.placeholder(dtype, [None, 7], name="a")
    b = gc.placeholder(dtype, b_val.shape, name="b")
    product = gc.matmul(a, b, transpose_b=transpose_b)
    sizes = [3, 3, 3] if split == "Split" else [2, 3, 4]
    pieces = gc.split(product, 3 if split == "Split" else sizes, axis=-1)
    m, stats = _simplified(pieces[piece] * 2.0, [a, b])
    assert stats["split_of_product"] == 1
    (narrow,) = [n for n in m.nodes if n.type == "MatMul"]
    assert narrow.outputs[0].dims[1] == sizes[piece] and _count(m, split) == 0
    full = a_val @ (b_val.T if transpose_b else b_val)
    begin = sum(sizes[:piece])
    want = 2.0 * full[:, begin:begin + sizes[piece]]
    np.testing.assert_allclose(_run(m, [a_val, b_val])[0], want, rtol=1e-6)
    with gc.Session() as sess:  # compiled, through every pass
        got = sess.run(pieces[piece] * 2.0, {a: a_val, b: b_val})
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_simplify_keeps_a_split_product_whose_pieces_are_all_used():
    a = gc.placeholder(gc.float32, [4, 6], name="a")
    b = gc.placeholder(gc.float32, [6, 8], name="b")
    product = gc.matmul(a, b)
    left, right = gc.split(product, 2, axis=1)
    m, stats = _simplified(left + right, [a, b])
    assert "split_of_product" not in stats and _count(m, "Split") == 1
    m, stats = _simplified([left, product], [a, b])  # the whole product is fetched too
    assert "split_of_product" not in stats
    rows, _ = gc.split(product, 2, axis=0)  # rows are not columns
    m, stats = _simplified(rows, [a, b])
    assert "split_of_product" not in stats


def test_simplify_does_not_forward_a_node_with_control_dependencies():
    x = gc.placeholder(gc.float32, [2], name="x")
    v = gc.Variable(np.zeros(2, np.float32), name="v")
    with gc.control_dependencies([v.assign_add(x)]):
        y = gc.identity(x)
    m, stats = _simplified(y, [x])
    assert _count(m, "Identity") == 1 and "identity" not in stats


def test_simplify_composes_transposes_and_reshapes():
    x = gc.placeholder(gc.float32, [None, 3, 4], name="x")
    t = gc.transpose(gc.transpose(x, [0, 2, 1]), [2, 0, 1])
    r = gc.reshape(gc.reshape(x, [-1, 12]), [-1, 6])
    m, stats = _simplified([t, r], [x])
    assert stats["transpose_transpose"] == 1 and stats["reshape_reshape"] == 1
    assert _count(m, "Transpose") == 1 and _count(m, "Reshape") == 1
    transpose = next(n for n in m.nodes if n.type == "Transpose")
    assert transpose.inputs[0] is m.params[0].outputs[0]
    feed = _feed(2, 3, 4)
    got = _run(m, [feed])
    np.testing.assert_array_equal(got[0], feed.transpose(0, 2, 1).transpose(2, 0, 1))
    np.testing.assert_array_equal(got[1], feed.reshape(-1, 6))


def test_simplify_pow_to_mul_and_sqrt():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    m, stats = _simplified([gc.pow(x, 2.0), gc.pow(x, 0.5)], [x])
    assert stats["pow2_to_mul"] == 1 and stats["pow_half_to_sqrt"] == 1
    assert "Pow" not in _types(m)
    mul = m.outputs[0].node
    assert mul.type == "Mul" and mul.inputs == [m.params[0].outputs[0]] * 2
    assert m.outputs[1].node.type == "Sqrt"
    feed = np.abs(_feed(5, 3))
    got = _run(m, [feed])
    np.testing.assert_array_equal(got[0], feed * feed)
    np.testing.assert_array_equal(got[1], np.sqrt(feed))


def test_simplify_division_by_a_constant():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    fetches = [x / 4.0, x / 3.0, x / gc.constant([2.0, 0.5, 2.0 ** -100]),
               x / gc.constant([2.0, 2.0 ** -140, 4.0])]
    m, stats = _simplified(fetches, [x])
    assert stats["div_to_mul"] == 2  # 1/3 is not exact in binary; 2**140 overflows float32
    assert [v.node.type for v in m.outputs] == ["Mul", "RealDiv", "Mul", "RealDiv"]
    feed = _feed(5, 3)
    got = _run(m, [feed])
    np.testing.assert_array_equal(got[0], feed / np.float32(4))
    np.testing.assert_array_equal(got[2], feed / np.float32([2.0, 0.5, 2.0 ** -100]))
    m2, stats2 = _simplified(fetches, [x], exact_only=False)
    assert stats2["div_to_mul"] == 3  # 1/3 now too; an overflowing reciprocal never
    np.testing.assert_array_max_ulp(_run(m2, [feed])[1], feed / np.float32(3), maxulp=1)


def test_simplify_folds_a_broadcast_scalar_into_its_consumer():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = x * gc.fill(gc.shape(x), 2.0)
    z = x + gc.broadcast_to(gc.constant(1.0), [4, 3])  # [?,3] + [4,3]: the broadcast sets dim 0
    w = x - gc.constant(np.full((1, 3), 5.0, np.float32))
    u = gc.ones_like(x) + x
    m, stats = _simplified([y, z, w, u], [x])
    assert stats["splat_to_scalar"] == 3
    assert [m.outputs[i].node.inputs[1].dims for i in (0, 2)] == [(), ()]
    assert m.outputs[3].node.inputs[0].dims == ()
    assert "Fill" not in _types(m) and "OnesLike" not in _types(m)
    assert _count(m, "BroadcastTo") == 1
    feed = _feed(4, 3)
    got = _run(m, [feed])
    np.testing.assert_array_equal(got[0], feed * 2)
    np.testing.assert_array_equal(got[1], feed + 1)
    np.testing.assert_array_equal(got[2], feed - 5)
    np.testing.assert_array_equal(got[3], feed + 1)


# ------------------------------------------------------------------------------- CSE
def test_cse_merges_identical_ops_and_constants():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    a = gc.exp(x) * 2.0
    b = gc.exp(x) * 2.0
    m = _lower(a + b, [x])
    stats = cse.run(m)
    assert stats["merged"] == 3  # the Exp, the 2.0, the Mul
    assert _count(m, "Exp") == 1 and _count(m, "Mul") == 1
    add = m.outputs[0].node
    assert add.inputs[0] is add.inputs[1]


def test_cse_keeps_different_attrs_and_inputs_apart():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    fetches = [gc.reduce_sum(x, 1), gc.reduce_sum(x, 1, keepdims=True), gc.exp(x), gc.exp(-x),
               gc.constant(0.0), gc.constant(-0.0)]
    m = _lower(fetches, [x])
    assert cse.run(m)["merged"] == 1  # only the two `1` axis constants
    assert _count(m, "Sum") == 2 and _count(m, "Exp") == 2


def test_cse_never_merges_random_or_stateful_ops():
    gc.set_random_seed(3)
    r1 = gc.random_normal([4], seed=7)
    r2 = gc.random_normal([4], seed=7)   # same attrs, same inputs: still two draws
    v = gc.Variable(np.zeros(4, np.float32), name="v")
    a1, a2 = v.assign_add(r1), v.assign_add(r1)
    m = _lower([r1, r2, a1, a2])
    cse.run(m)
    assert _count(m, "RandomStandardNormal") == 2 and _count(m, "AssignAdd") == 2
    variables = {"v": np.zeros(4, np.float32)}
    got = _run(m, [], variables)
    np.testing.assert_array_equal(variables["v"], 2 * got[0])


# -------------------------------------------------------------------------- pipeline
def test_pipeline_runs_the_passes_in_order_and_can_switch_them_off(monkeypatch):
    loops = ["hoist_loop_gemms", "sink_loop_gemms", "hoist_loop_invariants"]
    assert PASS_NAMES == [
        "prune", "constant_folding", "algebraic_simplify", "batch_gemms"] + loops + [
        "cse", "shared_transposes"]
    assert STAGE_NAMES == PASS_NAMES + ["fusion", "memory_planning"]
    x = gc.placeholder(gc.float32, [2], name="x")
    y = x * (gc.constant(2.0) - 1.0)
    m = _lower(y, [x])
    stats = schedule_module(m, options=compile_options(disable=["cse"]))
    assert list(stats) == ["prune", "constant_folding", "algebraic_simplify", "batch_gemms"] + \
        loops + ["shared_transposes", "fusion", "memory_planning"]
    assert m.outputs[0] is m.params[0].outputs[0]  # folded to x*1, then simplified to x
    monkeypatch.setenv("GRAPHC_DISABLE_PASSES", "constant_folding, algebraic_simplify")
    m = _lower(y, [x])
    assert list(schedule_module(m)) == ["prune", "batch_gemms"] + loops + [
        "cse", "shared_transposes", "fusion", "memory_planning"]
    assert _count(m, "Mul") == 1
    m = _lower(y, [x])
    # the passes only: nothing scheduled
    assert list(optimize(m)) == ["prune", "batch_gemms"] + loops + ["cse",
                                                                   "shared_transposes"]
    assert getattr(m, "kernels", None) is None
    with pytest.raises(ValueError, match="Unknown compiler pass"):
        optimize(m, disable="fusion_typo")
    with pytest.raises(ValueError, match="Unknown compiler pass"):
        compile_options(disable="fusion_typo")


def test_dump_env_var_writes_the_ir_after_every_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_DUMP", str(tmp_path))
    monkeypatch.setenv("GRAPHC_DISABLE_PASSES", "cse")
    x = gc.placeholder(gc.float32, [None, 2], name="x")
    m = _lower(gc.exp(x) * 1.0, [x])
    schedule_module(m)
    folder = tmp_path / m.name
    assert sorted(os.listdir(folder)) == ["00-lowered.txt", "01-prune.txt",
                                          "02-constant_folding.txt", "03-algebraic_simplify.txt",
                                          "04-batch_gemms.txt", "05-hoist_loop_gemms.txt",
                                          "06-sink_loop_gemms.txt",
                                          "07-hoist_loop_invariants.txt",
                                          "09-shared_transposes.txt", "10-fusion.txt",
                                          "11-memory_planning.txt"]
    assert " Mul(" in (folder / "00-lowered.txt").read_text()
    assert " Mul(" not in (folder / "03-algebraic_simplify.txt").read_text()


# ------------------------------------------------------------------------ end to end
def test_elementwise_and_shape_graph_matches_session():
    x = gc.placeholder(gc.float32, [None, 6], name="x")
    y = gc.exp(gc.transpose(gc.transpose(x)) * 1.0) / 2.0 + gc.reduce_sum(
        gc.reshape(gc.reshape(x, [-1, 2, 3]), [-1, 6]) ** 2, axis=1, keepdims=True)
    z = gc.cast(gc.identity(y), gc.float32) - gc.zeros_like(y)
    m, stats = _check_same_as_session([y, z], {x: _feed(5, 6)})
    assert stats["algebraic_simplify"].get("identity", 0) >= 1


def test_seeded_random_graph_matches_session():
    gc.set_random_seed(1)
    x = gc.placeholder(gc.float32, [None, 4], name="x")
    noise = gc.random_normal([4], seed=2) + gc.random_uniform([4], seed=3)
    _check_same_as_session([x + noise, noise * 3.0], {x: _feed(3, 4)})


def test_mlp_training_step_matches_session_after_all_passes():
    gc.set_random_seed(0)
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    w1 = gc.Variable(gc.random_normal([8, 16], stddev=0.1), name="w1")
    b1 = gc.Variable(gc.zeros([16]), name="b1")
    w2 = gc.Variable(gc.random_normal([16, 5], stddev=0.1), name="w2")
    h = gc.nn.relu(gc.matmul(x, w1) + b1)
    logits = gc.matmul(h, w2)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    params = [w1, b1, w2]
    grads = gc.gradients(loss, params)
    train = gc.group(*[v.assign_sub(0.5 * g) for v, g in zip(params, grads)])
    feed = {x: _feed(7, 8), labels: RNG.integers(0, 5, 7).astype(np.int32)}
    m, stats = _check_same_as_session([loss], feed, [train])
    assert stats["cse"]["merged"] >= 1
    assert [n.type for n in m.roots] == ["AssignSub"] * 3
    # no pass at all gives the same too
    _check_same_as_session([loss], feed, [train], disable=PASS_NAMES)


def test_cnn_adam_dropout_step_matches_session_and_keeps_the_batch_symbol():
    gc.set_random_seed(0)
    x = gc.placeholder(gc.float32, [None, 6, 6, 1], name="x")
    labels = gc.placeholder(gc.int64, [None], name="labels")
    h = gc.layers.conv2d(x, 3, 3, padding="same", activation=gc.nn.relu)
    h = gc.layers.flatten(gc.layers.max_pooling2d(h, 2, 2))
    h = gc.layers.dropout(gc.layers.dense(h, 8, activation=gc.nn.relu), 0.5, training=True)
    logits = gc.layers.dense(h, 3)
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.AdamOptimizer(0.01).minimize(loss)
    feed = {x: _feed(5, 6, 6, 1), labels: RNG.integers(0, 3, 5)}
    m, stats = _check_same_as_session([loss, gc.nn.softmax(logits)], feed, [train])
    assert stats["constant_folding"]["folded"] > 0 and stats["cse"]["merged"] > 0
    # symbols trace through conv, pooling, flatten and dropout's random_uniform(shape(h))
    dropout_mask = next(n for n in m.nodes if n.type == "RandomUniform")
    assert _dims(dropout_mask.outputs[0]) == ("x.0", "8")
    assert _dims(m.outputs[1]) == ("x.0", "3")


def test_variables_are_read_when_their_consumers_run():
    v = gc.Variable(1.0, name="v")
    before = v * 10.0                  # runs before the assign: reads 1.0
    a = v.assign_add(1.0)
    with gc.control_dependencies([a]):
        after = v.read_value() * 10.0  # runs after it: reads 2.0
    m = _lower([before, after, v], targets=[a.op])
    reads = [n for n in m.nodes if n.type == "VariableV2"]
    assert len(reads) == 3 and all(n.name == "v" for n in reads)  # one per consumer + fetch
    assert m.nodes.index(reads[-1]) == len(m.nodes) - 1            # the fetch reads last
    assert [float(x) for x in _run(m, [], {"v": np.float32(1.0)})] == [10.0, 20.0, 2.0]
    m, _ = _check_same_as_session([before, after, v], targets=[a.op])
    assert _count(m, "VariableV2") == 2  # the last two reads have no update between them


def test_cse_merges_reads_of_a_variable_only_with_no_update_between_them():
    v = gc.Variable(np.ones(3, np.float32), name="v")
    w = gc.Variable(np.ones(3, np.float32), name="w")
    y1 = gc.exp(v.read_value()) * w.read_value()
    y2 = gc.exp(v.read_value()) * w.read_value()  # the same values read: y2 is y1
    step = w.assign_add(y1 + y2)                  # updates w, not v
    y3 = v.read_value() * w.read_value()          # w read again after its update
    m = _lower([y1, y2, y3], targets=[step.op])
    assert _count(m, "VariableV2") == 6
    stats = cse.run(m)
    assert stats["reads_merged"] == 3 and m.outputs[0] is m.outputs[1]
    assert [n.name for n in m.nodes if n.type == "VariableV2"] == ["v", "w", "w"]
    _check_same_as_session([y1, y2, y3], targets=[step.op])


def test_simplify_select_of_a_constant_condition_drops_the_other_branch():
    x = gc.placeholder(gc.float32, [None, 4], name="x")
    training = gc.placeholder_with_default(False, [], name="training")
    y = gc.layers.dropout(x, rate=0.5, training=training)  # Select(BroadcastTo(flag), ...)
    m = _lower(y, [x])
    optimize(m)
    assert _count(m, "Select") == 0 and m.outputs[0] is m.params[0].outputs[0]
    # the random op stays as an effect (it still advances its generator, as in the
    # reference executor), but nothing reads its values any more
