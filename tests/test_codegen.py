"""Codegen: compiled results against the reference executor.

Each test builds a graph, lowers it for one run signature, runs the pass pipeline (which
sets module.kernels and module.memory_plan once fusion and memory planning are in it;
until then a stand-in schedule of one kernel per node with a no-reuse plan), generates
the spec and runs it through runtime.Executable, comparing with
Session(config=ConfigProto(backend="reference")).
"""
import re
import types

import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import generate
from graphc.compiler.driver import compile_options, schedule_module
from graphc.compiler.ir import PARAMETER
from graphc.compiler.lower import lower
from graphc.compiler.pipeline import optimize
from graphc.compiler.schedule.kernel import Kernel
from runtime.executable import Executable

RTOL = {np.float32: 2e-5, np.float64: 1e-12}
SOURCES = (PARAMETER, "Const", "VariableV2")


def build(feeds, fetches, targets, feed_arrays, fused=True):
    module = lower(feeds, fetches, targets, [np.shape(a) for a in feed_arrays])
    schedule_module(module, options=compile_options(disable=None if fused else ["fusion"]))
    return Executable(generate(module))


def reference(graph, fetches, feed_dict, variables=None):
    with gc.Session(graph=graph, config=gc.ConfigProto(backend="reference")) as sess:
        return sess.run(fetches, feed_dict)


def check(graph, feeds, fetches, feed_arrays, rtol=2e-5, atol=1e-6, fused=True):
    exe = build(feeds, fetches, [], feed_arrays, fused)
    got = exe.run(list(feed_arrays), {})
    want = reference(graph, fetches, dict(zip(feeds, feed_arrays)))
    for g, w in zip(got, want):
        assert g.shape == np.shape(w)
        assert g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return exe


def rand(*shape, dtype=np.float32, seed=0):
    return np.asarray(np.random.RandomState(seed + sum(shape)).randn(*shape), dtype=dtype)


# ------------------------------------------------------------ elementwise
@pytest.mark.parametrize("n", [1, 7, 1023])
def test_elementwise_chain(n):
    g = gc.Graph()
    with g.as_default():
        a, b, c = (gc.placeholder(gc.float32, [n]) for _ in range(3))
        y = gc.nn.relu(a * b + c) * 0.5 + gc.sigmoid(a) - c * c
        z = gc.tanh(a) / (1.0 + gc.abs(b)) + gc.exp(-gc.square(c))
    check(g, [a, b, c], [y, z], [rand(n), rand(n, seed=1), rand(n, seed=2)])


@pytest.mark.parametrize("shapes", [([7, 1], [1, 5]), ([3, 1, 5], [4, 1]), ([1023], [])])
def test_broadcasting(shapes):
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.float32, shapes[0])
        b = gc.placeholder(gc.float32, shapes[1])
        y = gc.maximum(a, b) - a * b
        cmp = gc.greater(a, b)
    check(g, [a, b], [y, cmp], [rand(*shapes[0]), rand(*shapes[1], seed=3)])


def test_integer_and_bool_ops():
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.int32, [7])
        b = gc.placeholder(gc.int32, [7])
        q = gc.floordiv(a, b) + gc.floormod(a, b)
        m = gc.logical_and(gc.less(a, b), gc.not_equal(a, 0))
        f = gc.cast(a, gc.float64) * 0.5
    rs = np.random.RandomState(0)
    check(g, [a, b], [q, m, f], [rs.randint(-9, 9, 7).astype(np.int32),
                                 rs.randint(1, 5, 7).astype(np.int32)])


def test_non_contiguous_feed():
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.float32, [None, 5])
        y = a * 2.0 + 1.0
    full = rand(5, 14)
    check(g, [a], [y], [full.T[::2]])  # a strided, transposed view


def test_unknown_batch_reuses_compile():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 33])
        w = gc.placeholder(gc.float32, [33])
        y = gc.reduce_sum(gc.nn.relu(x * w), axis=1)
        sm = gc.nn.softmax(x)
    exe = check(g, [x, w], [y, sm], [rand(5, 33), rand(33, seed=1)])
    for batch in (17, 2):
        feeds = [rand(batch, 33, seed=batch), rand(33, seed=1)]
        got = exe.run(feeds, {})
        want = reference(g, [y, sm], dict(zip([x, w], feeds)))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


# ------------------------------------------------------------- reductions
@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                "reduce_prod"])
@pytest.mark.parametrize("axis,keep", [(None, False), (0, False), (1, True), ([0, 2], False)])
def test_reductions(op, axis, keep):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [3, 7, 5])
        y = getattr(gc, op)(x, axis=axis, keepdims=keep)
    data = rand(3, 7, 5) * (0.3 if op == "reduce_prod" else 1.0)
    check(g, [x], [y], [data], rtol=1e-4, atol=1e-5)


def test_reductions_nan_and_int():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [4, 7])
        i = gc.placeholder(gc.int32, [4, 7])
        b = gc.placeholder(gc.bool, [4, 7])
        outs = [gc.reduce_max(x, 1), gc.reduce_min(x, 0), gc.argmax(x, 1), gc.argmin(x, 0),
                gc.reduce_sum(i, 1), gc.reduce_mean(i, 0), gc.reduce_max(i, 1),
                gc.argmax(i, 1), gc.reduce_any(b, 1), gc.reduce_all(b, 0)]
    data = rand(4, 7)
    data[1, 3] = np.nan
    data[2, 0] = np.nan
    rs = np.random.RandomState(0)
    check(g, [x, i, b], outs, [data, rs.randint(-50, 50, (4, 7)).astype(np.int32),
                               rs.rand(4, 7) > 0.3])


def test_large_sum_accuracy():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [1023, 513])
        y = gc.reduce_sum(x, axis=1)
        z = gc.reduce_sum(x, axis=0)
    check(g, [x], [y, z], [rand(1023, 513)], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------- nn patterns
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (4, 3, 1023)])
def test_softmax_log_softmax(shape):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, shape)
        outs = [gc.nn.softmax(x), gc.nn.log_softmax(x)]
    check(g, [x], outs, [rand(*shape) * 4])


def test_layer_norm_gelu():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 67])
        gamma = gc.placeholder(gc.float32, [67])
        beta = gc.placeholder(gc.float32, [67])
        mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
        y = (x - mean) * gc.rsqrt(var + 1e-5) * gamma + beta
        out = gc.nn.gelu(y, approximate=True)
        exact = gc.nn.gelu(y)
    check(g, [x, gamma, beta], [out, exact], [rand(9, 67), rand(67, seed=1),
                                              rand(67, seed=2)], rtol=1e-4, atol=1e-5)


def test_sparse_xent_and_gradient():
    g = gc.Graph()
    with g.as_default():
        logits = gc.placeholder(gc.float32, [None, 10])
        labels = gc.placeholder(gc.int32, [None])
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        grad, = gc.gradients(loss, [logits])
    rs = np.random.RandomState(0)
    check(g, [logits, labels], [loss, grad], [rand(13, 10), rs.randint(0, 10, 13).astype(np.int32)])


def test_sparse_xent_bad_label_is_an_error_site():
    g = gc.Graph()
    with g.as_default():
        logits = gc.placeholder(gc.float32, [3, 4])
        labels = gc.placeholder(gc.int32, [3])
        loss = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    exe = build([logits, labels], [loss], [], [rand(3, 4), np.zeros(3, np.int32)])
    from runtime.errors import KernelFailure
    with pytest.raises(KernelFailure, match="valid range"):
        exe.run([rand(3, 4), np.array([0, 7, 1], np.int32)], {})


# ------------------------------------------------------------------ gemm
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes(ta, tb):
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.float32, [7, 5] if ta else [5, 7])
        b = gc.placeholder(gc.float32, [3, 7] if tb else [7, 3])
        y = gc.nn.relu(gc.matmul(a, b, transpose_a=ta, transpose_b=tb) + 0.5)
    check(g, [a, b], [y], [rand(*([7, 5] if ta else [5, 7])), rand(*([3, 7] if tb else [7, 3]))],
          rtol=1e-4, atol=1e-5)


def test_batched_and_integer_matmul():
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.float64, [2, 1, 3, 4])
        b = gc.placeholder(gc.float64, [5, 4, 6])
        y = gc.matmul(a, b)
        i = gc.placeholder(gc.int32, [3, 4])
        j = gc.placeholder(gc.int32, [4, 2])
        k = gc.matmul(i, j)
    rs = np.random.RandomState(0)
    check(g, [a, b, i, j], [y, k], [rand(2, 1, 3, 4, dtype=np.float64),
                                    rand(5, 4, 6, dtype=np.float64),
                                    rs.randint(-5, 5, (3, 4)).astype(np.int32),
                                    rs.randint(-5, 5, (4, 2)).astype(np.int32)],
          rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------ index ops
def test_index_ops():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [4, 6])
        idx = gc.placeholder(gc.int32, [5])
        outs = [gc.transpose(x), gc.reshape(x, [3, 8]), gc.reshape(x, [2, 2, 6]),
                gc.expand_dims(x, 1), x[1:3, ::2], x[::-1, 2], gc.slice(x, [1, 2], [2, 3]),
                gc.pad(x, [[1, 0], [2, 3]]), gc.concat([x, x * 2.0], axis=1),
                gc.stack([x, -x], axis=1), gc.tile(x, [2, 1]), gc.gather(x, idx),
                gc.gather(x, idx, axis=1), gc.one_hot(idx, 4), gc.broadcast_to(x[0], [3, 6]),
                gc.squeeze(gc.expand_dims(x, 0)), gc.range(0, 7, 2),
                gc.zeros_like(x), gc.fill([2, 3], 1.5)]
        outs += gc.unstack(x, axis=1)[:2] + gc.split(x, 2, axis=1)
    check(g, [x, idx], outs, [rand(4, 6), np.array([3, 0, 1, 1, 2], np.int32)])


def test_gather_out_of_range_is_an_error():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [4, 6])
        idx = gc.placeholder(gc.int32, [2])
        y = gc.gather(x, idx)
    exe = build([x, idx], [y], [], [rand(4, 6), np.array([0, 1], np.int32)])
    from runtime.errors import KernelFailure
    with pytest.raises(KernelFailure, match=r"indices\[1\] = 4 is not in \[0, 4\)"):
        exe.run([rand(4, 6), np.array([0, 4], np.int32)], {})


# ------------------------------------------------------------- training
def _mlp(g, hidden=(33, 17), classes=5, features=11):
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, features])
        y = gc.placeholder(gc.int32, [None])
        h = x
        init = gc.random_normal_initializer(stddev=0.3, seed=1)
        for i, n in enumerate(hidden):
            h = gc.layers.dense(h, n, activation=gc.nn.relu, kernel_initializer=init,
                                name=f"d{i}")
        logits = gc.layers.dense(h, classes, kernel_initializer=init, name="out")
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        init_op = gc.global_variables_initializer()
    return x, y, loss, train, init_op


@pytest.mark.parametrize("fused", [True, False])
def test_mlp_training_steps_match_reference(fused):
    g = gc.Graph()
    x, y, loss, train, init_op = _mlp(g)
    rs = np.random.RandomState(0)
    batches = [(rs.randn(n, 11).astype(np.float32), rs.randint(0, 5, n).astype(np.int32))
               for n in (16, 16, 7)]
    ref = gc.Session(graph=g, config=gc.ConfigProto(backend="reference"))
    ref.run(init_op)
    state = {k: np.array(v) for k, v in ref._state.variables.items()} \
        if hasattr(ref, "_state") else None
    if state is None:
        pytest.skip("reference Session keeps no inspectable variable store")
    exe = build([x, y], [loss], [train], batches[0], fused)
    for bx, by in batches:
        got, = exe.run([bx, by], state)
        want = ref.run([loss, train], {x: bx, y: by})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for name, arr in ref._state.variables.items():
        np.testing.assert_allclose(state[name], arr, rtol=1e-4, atol=1e-5, err_msg=name)


# -------------------------------------------------------------------- IR
def test_fused_elementwise_kernel_is_vectorized():
    g = gc.Graph()
    with g.as_default():
        a, b, c = (gc.placeholder(gc.float32, [None]) for _ in range(3))
        y = gc.nn.relu(a * b + c) * 0.5 + gc.sigmoid(a) - c * c
    feeds = [rand(1023), rand(1023, seed=1), rand(1023, seed=2)]
    module = lower([a, b, c], [y], [], [f.shape for f in feeds])
    optimize(module)
    nodes = [n for n in module.nodes if n.type not in SOURCES]
    module.kernels = [Kernel("loop", nodes, [], list(module.outputs), module.outputs[0].dims,
                             "fused")]
    module.memory_plan = types.SimpleNamespace(buffers={}, arena_bytes=0)
    exe = Executable(generate(module))
    assert re.search(r"<(4|8|16) x float>", exe.optimized_ir())
    got, = exe.run(feeds, {})
    want, = reference(g, [y], dict(zip([a, b, c], feeds)))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)



def _optimized_ir_of_run(fetches, feeds):
    """(the optimized LLVM IR of the Session's compiled run of `fetches`, its results)."""
    with gc.Session() as sess:
        got = sess.run(fetches, feeds)
        stages = [st for exe in sess._cache.values() for st in getattr(exe, "stages", ())]
        exes = [st.variants.last for st in stages if getattr(st, "variants", None)]
    return "\n".join(e.optimized_ir() for e in exes if e is not None), got


def test_sparse_xent_gradient_loop_is_vectorized():
    """The label's range check runs once per row, not in the loop over the classes: its
    first-failure status carried through that loop kept LLVM from vectorizing it."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 1000])
        y = gc.placeholder(gc.int32, [None])
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=x))
        grad, = gc.gradients(loss, [x])
        logits, labels = rand(37, 1000), (np.arange(37) * 27 % 1000).astype(np.int32)
        ir, (got,) = _optimized_ir_of_run([grad], {x: logits, y: labels})
    assert re.search(r"store <(4|8|16) x float>", ir)
    shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
    prob = np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)
    prob[np.arange(37), labels] -= 1
    np.testing.assert_allclose(got, prob / 37, rtol=1e-5, atol=1e-8)


def test_bad_label_still_fails_with_the_check_hoisted():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 1000])
        y = gc.placeholder(gc.int32, [None])
        grad, = gc.gradients(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                            logits=x), [x])
        with gc.Session() as sess, pytest.raises(gc.errors.InvalidArgumentError,
                                                 match="label value of 1000"):
            sess.run(grad, {x: rand(3, 1000), y: np.array([0, 1000, 5], np.int32)})


def test_mean_over_a_middle_axis_runs_the_kept_axis_innermost():
    """An embedding bag's mean over the ids ([batch, ids, dim] -> [batch, dim]) folds each
    looked-up row into the output row (a vector add over dim), then divides by the count,
    instead of reducing over the ids for every output element (column reads, scalar)."""
    g = gc.Graph()
    with g.as_default():
        table = gc.placeholder(gc.float32, [50, 64])
        ids = gc.placeholder(gc.int32, [None, 3])
        pooled = gc.reduce_mean(gc.nn.embedding_lookup(table, ids), axis=1)
        t, i = rand(50, 64), (np.arange(33).reshape(11, 3) * 7 % 50).astype(np.int32)
        ir, (got,) = _optimized_ir_of_run([pooled], {table: t, ids: i})
    assert re.search(r"fadd (reassoc nsz )?<(4|8|16) x float>", ir)
    np.testing.assert_array_equal(got, (t[i[:, 0]] + t[i[:, 1]] + t[i[:, 2]]) / np.float32(3))

def test_spec_is_plain_data():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3])
        y = gc.reduce_sum(x * 2.0, axis=1)
    module = lower([x], [y], [], [(4, 3)])
    schedule_module(module)
    spec = generate(module)
    import json
    json.dumps({k: v for k, v in spec.items() if k != "constants"})
    assert spec["entry"] == "graphc_main"
    assert spec["symbols"] == [{"name": "Placeholder.0", "feed": 0, "axis": 0}]
    assert isinstance(spec["fetches"][0]["dims"][0], list)  # a SymDim expression


def test_more_index_ops_and_strided_slice_grad():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [5, 7])
        y = x[1:5:2, ::-2]
        dx, = gc.gradients(gc.reduce_sum(y * y), [x])
        outs = [y, dx, gc.pad(x, [[2, 1], [0, 3]], mode="REFLECT"),
                gc.pad(x, [[1, 1], [2, 0]], mode="SYMMETRIC"), x[None, 2, 1:],
                gc.concat([x[:, :2], x[:, 5:], x], axis=1)]
        outs += list(gc.shape_n([x, y]))
    check(g, [x], outs, [rand(5, 7, dtype=np.float64)], rtol=1e-12, atol=1e-12)


def test_integer_division_by_zero_is_an_error():
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.int32, [3])
        b = gc.placeholder(gc.int32, [3])
        y = gc.floordiv(a, b)
    exe = build([a, b], [y], [], [np.ones(3, np.int32), np.ones(3, np.int32)])
    from runtime.errors import KernelFailure
    with pytest.raises(KernelFailure, match="division by zero"):
        exe.run([np.ones(3, np.int32), np.array([1, 0, 2], np.int32)], {})


def test_fetches_of_every_source_and_assign():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [3])
        v = gc.Variable(np.arange(3, dtype=np.float32), name="v")
        c = gc.constant([1.0, 2.0], name="c")
        y = x * 2.0
        update = gc.assign_add(v, y)
    variables = {"v": np.arange(3, dtype=np.float32)}
    exe = build([x], [y, y, x, c, update], [], [np.ones(3, np.float32)])
    got = exe.run([np.ones(3, np.float32)], variables)
    np.testing.assert_array_equal(got[0], [2, 2, 2])
    np.testing.assert_array_equal(got[1], [2, 2, 2])
    np.testing.assert_array_equal(got[2], [1, 1, 1])
    np.testing.assert_array_equal(got[3], [1, 2])
    np.testing.assert_array_equal(got[4], [2, 3, 4])
    np.testing.assert_array_equal(variables["v"], [2, 3, 4])


def test_compile_signature_runs_and_updates_the_variables():
    from graphc.compiler.driver import compile_signature
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 4])
        w = gc.Variable(np.ones((4, 3), np.float32), name="w")
        y = gc.nn.softmax(gc.matmul(x, w) + 1.0)
        step = gc.assign_sub(w, 0.5 * gc.ones_like(w))
    variables = {"w": np.ones((4, 3), np.float32)}
    data = rand(5, 4)
    spec = compile_signature([x], [y], [step.op], [data.shape], [data],
                             {"w": (4, 3)}).spec
    out, = Executable(spec).run([data], variables)
    np.testing.assert_allclose(out, np.full((5, 3), 1 / 3), rtol=1e-6)
    np.testing.assert_array_equal(variables["w"], np.full((4, 3), 0.5, np.float32))


def test_float16_elementwise_and_sum():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float16, [7, 9])
        y = gc.nn.relu(x * 2.0 + 1.0)
        s = gc.reduce_sum(x, axis=1)
        m = gc.reduce_max(x, axis=0)
    check(g, [x], [y, s, m], [rand(7, 9, dtype=np.float16)], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("fused", [True, False])
def test_column_reductions_fused_with_their_producer(fused):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 37])
        b = gc.placeholder(gc.float32, [1, 37])
        h = gc.nn.relu(x * 3.0 - 1.0)
        outs = [h, gc.reduce_sum(h, axis=0), gc.reduce_max(h, axis=0, keepdims=True),
                gc.gradients(gc.reduce_sum(gc.nn.bias_add(x, b[0]) * x), [b])[0]]
    exe = check(g, [x, b], outs, [rand(129, 37), rand(1, 37, seed=1)], rtol=1e-4, atol=1e-4,
                fused=fused)
    feeds = [rand(3, 37, seed=5), rand(1, 37, seed=1)]
    for got, want in zip(exe.run(feeds, {}), reference(g, outs, dict(zip([x, b], feeds)))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dense_bias_is_the_start_of_c_not_a_pass_over_the_product():
    """A MatMul's bias add fills C's block before each BLAS call, which adds the product
    into it (beta = 1): no epilogue loop reads and writes all of C again. The product
    needed elsewhere (fetched) keeps the epilogue."""
    x = gc.placeholder(gc.float32, [None, 64], name="x")
    w = gc.Variable(np.ones((64, 300), np.float32), name="w")
    b = gc.Variable(np.ones(300, np.float32), name="b")
    product = gc.matmul(x, w)
    for fetches, folded in [([product + b], True), ([product, product + b], False)]:
        module = lower([x], fetches, [], [(500, 64)])
        schedule_module(module)
        assert [k.kind for k in module.kernels] == ["gemm"]
        ir_text = generate(module)["llvm_ir"]
        gemm_calls = [line for line in ir_text.splitlines() if "call void @" in line and
                      "sgemm" in line]
        assert gemm_calls, ir_text
        one = "float 0x3ff0000000000000, ptr"  # alpha = 1, then beta before C's pointer
        assert all((line.count(one) == 2) == folded for line in gemm_calls), gemm_calls
        assert ("llvm.memcpy" in ir_text) == folded
        assert (" fadd " in ir_text) != folded
