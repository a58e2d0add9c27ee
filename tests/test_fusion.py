"""The fusion pass: op kinds, kernel counts for known graphs, and that the kernel schedule
computes what the Session computes.

`simulate` below is an executor of its own for a kernel schedule (it does not use the
fusion code): kernels run in list order; each reads its variable inputs when it starts
(TF1 refs: a variable is read when its reader runs), runs its nodes with the reference
kernels, and only its `outputs` survive it. A schedule that reads a variable before or
after the wrong update, or a kernel that uses a value no earlier kernel wrote, fails.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower, optimize
from graphc.compiler.driver import compile_options, schedule_module
from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.op_kinds import shape_only_inputs
from graphc.compiler.schedule.kernel import kernels_to_text
from graphc.framework.op_def import KINDS, OP_DEFS, OP_KINDS
from graphc.framework.op_kernel import SessionState, run_kernel
from graphc.framework.symbolic import SymDim, evaluate_json

RNG = np.random.default_rng(0)


def scheduled_module(fetches, feed_dict, targets=(), disable=None):
    """The module through the passes and the schedule (the driver's stages before codegen)."""
    module = lower(list(feed_dict), list(fetches), list(targets),
                   [np.shape(a) for a in feed_dict.values()])
    schedule_module(module, options=compile_options(disable=disable))
    return module


def optimized_module(fetches, feed_dict, targets=()):
    """The module through the passes only: not yet scheduled."""
    module = lower(list(feed_dict), list(fetches), list(targets),
                   [np.shape(a) for a in feed_dict.values()])
    optimize(module)
    return module


def _dims(dims, symbols):
    return tuple(evaluate_json(d.to_json(), symbols) if isinstance(d, SymDim) else int(d)
                 for d in dims)


def _symbol_values(module, feeds):
    return {s: np.shape(feeds[i])[axis] for s, (i, axis) in module.symbols.items()}


def _shape_only_arg(node, slot, v, symbols):
    """What a reference kernel needs in a slot whose data compiled code never reads."""
    if v.node.type == "Const":
        return v.node.attrs["value"]
    if node.type in ("Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike"):
        return np.zeros(_dims(v.dims, symbols), v.dtype.np)
    return np.array(_dims(node.outputs[0].dims, symbols), v.dtype.np)


def simulate(module, feeds, variables):
    """Runs module.kernels; returns the fetched arrays (variables updated in place)."""
    state = SessionState()
    state.variables = variables
    symbols = _symbol_values(module, feeds)
    memory = {}          # Values written by kernels so far
    written_by = {v: i for i, k in enumerate(module.kernels) for v in k.outputs}
    for i, kernel in enumerate(module.kernels):
        local = {}
        aliases = getattr(module, "aliases", {})
        for alias in kernel.inputs:
            v = aliases.get(alias, alias)  # an alias (a reshape) reads its input's buffer
            node = v.node
            if node.type == PARAMETER:
                local[v] = np.asarray(feeds[node.attrs["index"]]).astype(v.dtype.np)
            elif node.type == "Const":
                local[v] = node.attrs["value"]
            elif node.type == "VariableV2" and v not in written_by:
                local[v] = state.variables[node.name]   # read when the kernel runs
            else:
                assert v in memory, f"{kernel.name} reads {v.ref} before it is written"
                local[v] = memory[v]
            local[alias] = np.reshape(local[v], _dims(alias.dims, symbols))
        for node in kernel.nodes:
            skip = shape_only_inputs(node)
            args = []
            for slot, v in enumerate(node.inputs):
                if not isinstance(v, Value):
                    args.append(None)
                elif v in local:
                    args.append(local[v])
                elif slot in skip or v.node.type == "Const":
                    args.append(_shape_only_arg(node, slot, v, symbols))
                else:
                    raise AssertionError(f"{kernel.name}: {node} reads {v.ref}, which is "
                                         f"neither computed in it nor one of its inputs")
            for v, arr in zip(node.outputs, run_kernel(node, args, state)):
                local[v] = arr
        for v in kernel.outputs:
            memory[v] = local[v]
    out = []
    for v in module.outputs:
        node = v.node
        if v in memory:
            out.append(memory[v])
        elif node.type == PARAMETER:
            out.append(np.asarray(feeds[node.attrs["index"]]))
        elif node.type == "Const":
            out.append(node.attrs["value"])
        else:
            assert node.type == "VariableV2", f"output {v.ref} was never written"
            out.append(state.variables[node.name])
    return out


def check_against_session(fetches, feed_dict=None, targets=(), steps=1, disable=None):
    """Compiles, then runs the kernel schedule `steps` times next to Session.run."""
    feed_dict = feed_dict or {}
    sess = gc.Session(config=gc.ConfigProto(backend="reference"))  # the oracle
    if gc.global_variables():
        sess.run(gc.global_variables_initializer())
    variables = {k: v.copy() for k, v in sess._state.variables.items()}
    module = scheduled_module(fetches, feed_dict, targets, disable)
    assert_schedule_is_valid(module)
    for _ in range(steps):
        got = simulate(module, list(feed_dict.values()), variables)
        want = sess.run(list(fetches) + list(targets), feed_dict)[:len(fetches)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
        for name, value in variables.items():
            np.testing.assert_allclose(value, sess._state.variables[name], rtol=1e-6,
                                       atol=1e-7, err_msg=name)
    return module


def assert_schedule_is_valid(module):
    """Each kernel's inputs are sources or earlier kernels' outputs; expensive nodes are
    computed once; every output value is written by exactly one kernel."""
    written = set()
    computed = {}
    aliases = getattr(module, "aliases", {})
    for k in module.kernels:
        for v in k.inputs:
            v = aliases.get(v, v)
            assert v.node.type in (PARAMETER, "Const", "VariableV2") or v in written, \
                f"{k.name} reads {v.ref} before any kernel writes it"
        for v in k.outputs:
            assert v not in written, f"{v.ref} is written twice"
            written.add(v)
        for n in k.nodes:
            computed[n] = computed.get(n, 0) + 1
    for n, count in computed.items():
        if OP_KINDS.get(n.type) not in ("elementwise", "index"):
            assert count == 1, f"{n} (expensive) is computed by {count} kernels"


def computing(module, tensor):
    """Indices of the kernels computing graph tensor `tensor` (IR nodes keep op names)."""
    return [i for i, k in enumerate(module.kernels)
            if any(n.name == tensor.op.name for n in k.nodes)]


def kinds(module):
    return [k.kind for k in module.kernels]


# ----------------------------------------------------------------------- op kinds
def test_every_registered_op_type_has_a_kind():
    missing = sorted(set(OP_DEFS) - set(OP_KINDS))
    assert not missing, f"op types without a kind in OP_KINDS: {missing}"
    assert set(OP_KINDS.values()) <= set(KINDS)
    assert sorted(set(OP_KINDS) - set(OP_DEFS)) == []  # no stale entries


# ----------------------------------------------------------------- kernel counts
def test_elementwise_chain_of_8_ops_is_one_kernel():
    x = gc.placeholder(gc.float32, [None, 16], name="x")
    y = x
    for f in (gc.exp, gc.negative, gc.tanh, gc.sigmoid, gc.abs, gc.square):
        y = f(y)
    y = (y + 1.5) * 0.25
    feeds = {x: RNG.standard_normal((7, 16)).astype(np.float32)}
    m = check_against_session([y], feeds)
    assert len(m.kernels) == 1 and m.kernels[0].kind == "loop"
    k = m.kernels[0]
    assert len(k.nodes) == 8 and k.outputs == m.outputs
    assert "kernel loop_0 loop" in kernels_to_text(m.kernels)


def test_dense_layer_with_bias_and_relu_is_one_gemm_kernel_with_epilogue():
    x = gc.placeholder(gc.float32, [None, 12], name="x")
    y = gc.layers.dense(x, 5, activation=gc.nn.relu, name="d")
    m = check_against_session([y], {x: RNG.standard_normal((9, 12)).astype(np.float32)})
    assert kinds(m) == ["gemm"]
    k = m.kernels[0]
    assert k.main.type == "MatMul" and [n.type for n in k.epilogue] == ["BiasAdd", "Relu"]
    assert k.outputs == m.outputs


def test_matmul_plus_broadcast_vector_then_tanh_is_an_epilogue():
    x = gc.placeholder(gc.float32, [None, 6], name="x")
    w = gc.constant(RNG.standard_normal((6, 4)).astype(np.float32))
    b = gc.constant(RNG.standard_normal((1, 4)).astype(np.float32))
    y = gc.tanh(gc.matmul(x, w) + b)
    m = check_against_session([y], {x: RNG.standard_normal((3, 6)).astype(np.float32)})
    assert kinds(m) == ["gemm"]
    assert [n.type for n in m.kernels[0].epilogue] == ["Add", "Tanh"]


def test_softmax_op_and_softmax_from_primitives_are_one_kernel_each():
    x = gc.placeholder(gc.float32, [None, 10], name="x")
    s1 = gc.nn.softmax(x)
    e = gc.exp(x - gc.reduce_max(x, axis=1, keepdims=True))
    s2 = e / gc.reduce_sum(e, axis=1, keepdims=True)
    feeds = {x: RNG.standard_normal((5, 10)).astype(np.float32)}
    for s in (s1, s2):
        m = check_against_session([s], feeds)
        assert len(m.kernels) <= 2
        assert len(m.kernels) == 1, kernels_to_text(m.kernels)


def test_log_softmax_with_its_gradient_fuses():
    x = gc.placeholder(gc.float64, [None, 7], name="x")
    y = gc.nn.log_softmax(x)
    g, = gc.gradients(gc.reduce_sum(y * gc.constant(np.arange(7.0))), [x])
    m = check_against_session([y, g], {x: RNG.standard_normal((4, 7))})
    assert len(m.kernels) <= 3, kernels_to_text(m.kernels)


def test_layer_norm_is_at_most_two_kernels():
    x = gc.placeholder(gc.float32, [None, 24], name="x")
    gamma = gc.constant(RNG.standard_normal(24).astype(np.float32))
    beta = gc.constant(RNG.standard_normal(24).astype(np.float32))
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    y = (x - mean) * gc.rsqrt(var + 1e-5) * gamma + beta
    m = check_against_session([y], {x: RNG.standard_normal((6, 24)).astype(np.float32)})
    assert len(m.kernels) <= 2, kernels_to_text(m.kernels)


def test_column_reduction_result_is_not_fused_into_its_consumer():
    # sum over the batch axis is indexed by the inner loop index: it cannot be hoisted
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    y = x - gc.reduce_sum(x, axis=0)
    m = check_against_session([y], {x: RNG.standard_normal((5, 8)).astype(np.float32)})
    assert len(m.kernels) == 2


def test_reduction_fuses_its_elementwise_producers_and_writes_several_outputs():
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    sq = gc.square(x) * 3.0
    total = gc.reduce_sum(sq, axis=0)
    m = check_against_session([sq, total], {x: RNG.standard_normal((5, 8)).astype(np.float32)})
    assert len(m.kernels) == 1 and len(m.kernels[0].outputs) == 2


def test_cheap_producer_is_duplicated_into_its_consumers_not_written():
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    t = gc.exp(x)
    a = gc.reduce_sum(t, axis=0)       # column sums: a kernel that t can fuse into
    b = gc.transpose(t) * 2.0          # another loop nest ([8, n])
    m = check_against_session([a, b], {x: RNG.standard_normal((3, 8)).astype(np.float32)})
    assert len(m.kernels) == 2
    assert all(v.node.name != t.op.name for k in m.kernels for v in k.outputs)
    assert len(computing(m, t)) == 2


def test_duplication_does_not_cascade_down_an_unrolled_recurrence():
    """Cheap groups are copied into their consumers at most once: an unrolled LSTM's step
    copying the previous step's copies grew the kernels' nodes (and the compile time,
    1.6 -> 115 CPU-s on lstm_train) with every step."""
    steps, batch, units = 12, 3, 4
    xs = [gc.placeholder(gc.float32, [batch, 5], name=f"x{t}") for t in range(steps)]
    cell = gc.nn.rnn_cell.BasicLSTMCell(units)
    outputs, _ = gc.nn.static_rnn(cell, xs, dtype=gc.float32)
    loss = gc.add_n([gc.reduce_sum(gc.square(o)) for o in outputs])
    grads = gc.gradients(loss, gc.trainable_variables())
    feed = {x: RNG.standard_normal((batch, 5)).astype(np.float32) for x in xs}
    m = scheduled_module([loss] + grads, feed)
    computed = sum(len(k.nodes) for k in m.kernels)
    assert computed <= 2 * len(m.nodes), (computed, len(m.nodes))


def test_gelu_forward_is_one_kernel_when_its_gradient_shares_its_tanh_chain():
    """BERT's gelu in a training step: the gradient's kernel copies the cheap h*cdf chain,
    so the forward's tanh group had no consumer of its own to merge into and was a kernel
    apart (its 4 bytes per element written, then read back by h*cdf)."""
    x = gc.placeholder(gc.float32, [None, 6], name="x")
    w = gc.Variable(RNG.standard_normal((6, 10)).astype(np.float32), name="w")
    w2 = gc.Variable(RNG.standard_normal((10, 3)).astype(np.float32), name="w2")
    h = gc.matmul(x, w) + gc.constant(RNG.standard_normal(10).astype(np.float32))
    cdf = 0.5 * (1.0 + gc.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * gc.pow(h, 3))))
    y = h * cdf
    loss = gc.reduce_sum(gc.square(gc.matmul(y, w2)))
    grads = gc.gradients(loss, [w, w2])
    m = check_against_session([loss] + grads, {x: RNG.standard_normal((5, 6)).astype(np.float32)})
    tanh = y.op.inputs[1].op.inputs[1].op.inputs[1].op
    assert tanh.type == "Tanh"
    forward = computing(m, y)
    assert len(forward) == 1 and m.kernels[forward[0]].kind == "loop"
    loops = [i for i, k in enumerate(m.kernels)
             if k.kind == "loop" and k.dims == m.kernels[forward[0]].dims]
    assert len(loops) == 2, kernels_to_text(m.kernels)  # the forward and the gradient
    # the gradient recomputes the tanh chain from h (step 2c): no kernel writes it
    assert computing(m, tanh.outputs[0]) == loops, kernels_to_text(m.kernels)
    assert not any(v.node.name == tanh.name for k in m.kernels for v in k.outputs)


def test_layer_norm_gradients_read_the_incoming_gradient_once():
    """A post-LN block's backward: beta's gradient (a column sum of the incoming gradient
    g), gamma's (a column sum of g * x_hat) and the input's gradient (row sums of g)
    all read g; they were three kernels, each reading g from memory."""
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    w = gc.Variable(RNG.standard_normal((8, 8)).astype(np.float32), name="w")
    wc = gc.Variable(RNG.standard_normal((8, 5)).astype(np.float32), name="wc")
    gamma = gc.Variable(RNG.standard_normal(8).astype(np.float32), name="gamma")
    beta = gc.Variable(RNG.standard_normal(8).astype(np.float32), name="beta")
    h = x + gc.matmul(x, w)
    mean, var = gc.nn.moments(h, axes=[1], keep_dims=True)
    y = (h - mean) * gc.rsqrt(var + 1e-5) * gamma + beta
    loss = gc.reduce_sum(gc.square(gc.matmul(y, wc)))
    grads = gc.gradients(loss, [w, wc, gamma, beta])
    m = check_against_session([loss] + grads, {x: RNG.standard_normal((6, 8)).astype(np.float32)})
    incoming = [k.outputs[0] for k in m.kernels if k.kind == "gemm" and
                k.main.attrs.get("transpose_b") and k.dims[-1] == 8]
    assert len(incoming) == 1, kernels_to_text(m.kernels)  # dL/dy = dL/dlogits . wc^T
    readers = [k for k in m.kernels if incoming[0] in k.inputs]
    assert [k.kind for k in readers] == ["loop"], kernels_to_text(m.kernels)
    assert {computing(m, t)[0] for t in grads[2:]} == {m.kernels.index(readers[0])}


def test_sharing_a_scalar_does_not_merge_same_shaped_updates():
    """Siblings merge over a value of their loop's dims only: a learning rate is read by
    every variable's update, and merging those would make one kernel of a deep model's
    same-shaped layers."""
    lr = gc.placeholder(gc.float32, [], name="lr")
    ws = [gc.Variable(RNG.standard_normal((4, 3)).astype(np.float32), name=f"w{i}")
          for i in range(3)]
    loss = gc.add_n([gc.reduce_sum(gc.square(w)) for w in ws])
    train = gc.train.GradientDescentOptimizer(lr).minimize(loss)
    m = check_against_session([loss], {lr: np.float32(0.1)}, [train])
    updating = [k for k in m.kernels if k.updates]
    assert len(updating) == 3, kernels_to_text(m.kernels)


def _bag_step(lr=0.1):
    table = gc.Variable(RNG.standard_normal((7, 4)).astype(np.float32), name="table")
    w = gc.Variable(RNG.standard_normal((4, 5)).astype(np.float32), name="w")
    ids = gc.placeholder(gc.int32, [None, 3], name="ids")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    pooled = gc.reduce_mean(gc.nn.embedding_lookup(table, ids), axis=1)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=gc.matmul(pooled, w)))
    train = gc.train.GradientDescentOptimizer(lr).minimize(loss)
    feeds = {ids: np.array([[1, 1, 3], [6, 1, 0]], np.int32),  # 1 thrice, in two bags
             labels: np.array([2, 4], np.int32)}
    return loss, train, feeds


def test_scatter_computes_its_updates_instead_of_reading_them():
    # the mean's gradient broadcast over the bag, times the learning rate: computed in the
    # ScatterSub's loop, never written
    loss, train, feeds = _bag_step()
    m = check_against_session([loss], feeds, [train], steps=2)
    (scatter,) = [k for k in m.kernels if k.main is not None and k.main.type == "ScatterSub"]
    updates = scatter.main.inputs[2]
    assert updates.node in scatter.nodes, kernels_to_text(m.kernels)
    assert {"BroadcastTo", "Mul"} <= {n.type for n in scatter.nodes}
    assert all(updates not in k.outputs for k in m.kernels)


def test_scatter_updates_reading_the_scattered_variable_stay_apart():
    # with repeated ids, computing them in the scatter's loop would read rows it has
    # already written: they are computed (from the old rows) first
    ref = gc.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="ref")
    ids = gc.placeholder(gc.int32, [None], name="ids")
    step = gc.scatter_sub(ref, ids, gc.gather(ref, ids) * 0.5 + 1.0)
    m = check_against_session([], {ids: np.array([2, 0, 2], np.int32)}, [step.op], steps=2)
    (scatter,) = [k for k in m.kernels if k.main is not None and k.main.type == "ScatterSub"]
    assert scatter.nodes == [scatter.main], kernels_to_text(m.kernels)


def _mlp(hidden=16, classes=5, features=12):
    x = gc.placeholder(gc.float32, [None, features], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.dense(x, hidden, activation=gc.nn.relu, name="h1")
    logits = gc.layers.dense(h, classes, name="logits")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.AdamOptimizer(1e-2).minimize(loss)
    feeds = {x: RNG.standard_normal((8, features)).astype(np.float32),
             labels: RNG.integers(0, classes, 8).astype(np.int32)}
    return loss, train, feeds


def test_mlp_training_step_kernels_and_results():
    loss, train, feeds = _mlp()
    m = check_against_session([loss], feeds, [train.op if hasattr(train, "op") else train],
                              steps=3)
    counts = {kind: kinds(m).count(kind) for kind in set(kinds(m))}
    assert counts["gemm"] == 5          # 2 forward, 3 gradient products
    assert len(m.kernels) <= 16, kernels_to_text(m.kernels)
    first = m.kernels[0]
    assert [n.type for n in first.epilogue] == ["BiasAdd", "Relu"]
    # each Adam update is one loop kernel writing its three variables
    updaters = [k for k in m.kernels if len(k.updates) == 3]
    assert len(updaters) == 4


def test_fusion_disabled_gives_one_kernel_per_node_and_same_results():
    loss, train, feeds = _mlp()
    m = check_against_session([loss], feeds, [train], disable=["fusion"])
    assert all(len(k.nodes) == 1 for k in m.kernels)
    assert m.memory_plan is not None


def test_cnn_training_step_conv_epilogue_and_results():
    x = gc.placeholder(gc.float32, [None, 8, 8, 2], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.conv2d(x, 4, 3, padding="same", activation=gc.nn.relu, name="c1")
    h = gc.layers.max_pooling2d(h, 2, 2)
    logits = gc.layers.dense(gc.reshape(h, [-1, 4 * 4 * 4]), 3, name="out")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
    feeds = {x: RNG.standard_normal((3, 8, 8, 2)).astype(np.float32),
             labels: np.array([0, 2, 1], np.int32)}
    m = check_against_session([loss], feeds, [train], steps=2)
    conv = next(k for k in m.kernels if k.kind == "conv" and k.main.type == "Conv2D")
    assert [n.type for n in conv.epilogue] == ["BiasAdd", "Relu"]


# ------------------------------------------------------------------ stateful order
def test_reads_before_and_after_an_assign_see_the_old_and_new_values():
    v = gc.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="v")
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    before = v * 2.0 + x[:1]
    step = v.assign_add(x[:2] * 10.0)
    with gc.control_dependencies([step]):
        after = gc.identity(v) + 1.0
    feeds = {x: RNG.standard_normal((2, 3)).astype(np.float32)}
    m = check_against_session([before, after], feeds, [step.op], steps=2)
    upd = next(i for i, k in enumerate(m.kernels) if k.updates)
    assert computing(m, before)[0] <= upd < computing(m, after)[0]


def test_transposed_read_is_not_fused_with_the_update_of_its_variable():
    v = gc.Variable(RNG.standard_normal((3, 3)).astype(np.float32), name="v")
    new = gc.transpose(v) * 0.5          # element (i, j) reads v[j, i]
    step = gc.assign(v, new)
    m = check_against_session([], {}, [step.op], steps=2)
    assert len(m.kernels) == 2           # computed into a buffer, then assigned


def test_elementwise_read_modify_write_is_one_kernel():
    v = gc.Variable(RNG.standard_normal((4, 5)).astype(np.float32), name="v")
    step = gc.assign(v, gc.sqrt(gc.abs(v)) * 0.5 + v)
    m = check_against_session([], {}, [step.op], steps=2)
    assert len(m.kernels) == 1 and len(m.kernels[0].updates) == 1


def test_fetching_a_variable_read_before_its_update_copies_it_first():
    v = gc.Variable(np.ones(4, np.float32), name="v")
    r = gc.identity(v)
    with gc.control_dependencies([r]):
        step = v.assign_add(np.full(4, 2.0, np.float32))
    m = check_against_session([r], {}, [step.op], steps=2)
    copy = [i for i, k in enumerate(m.kernels) if any(n.type == "VariableV2" for n in k.nodes)]
    assert copy and copy[0] < computing(m, step)[0]  # the fetched value is a copy


@pytest.mark.parametrize("n", [1, 7])
def test_random_ops_are_computed_once(n):
    x = gc.placeholder(gc.float32, [None, n], name="x")
    noise = gc.random_uniform(gc.shape(x), seed=3)
    a = x + noise
    b = gc.transpose(noise) * 3.0
    m = check_against_session([a, b], {x: RNG.standard_normal((4, n)).astype(np.float32)})
    assert sum(n.type == "RandomUniform" for k in m.kernels for n in k.nodes) == 1


# ------------------------------------------------------------- scaling with the graph
def _kernel_graph(f):
    """The kernel graph by its definition (fusion.py's module docstring): ga -> gb for
    each node edge a -> b, a in ga, b in gb, except a data edge whose producer gb
    computes itself."""
    succ = {g: set() for g in f.groups}
    for a, b, data in f.edges:
        for gb in f.group_of[b]:
            if data and a in f.groups[gb].nodes:
                continue
            for ga in f.group_of[a]:
                if ga != gb:
                    succ[ga].add(gb)
    return succ


def _unrolled_rnn_step(steps):
    x = gc.placeholder(gc.float32, [None, steps, 6], name="x")
    w = gc.Variable(RNG.standard_normal((6 + 5, 5)).astype(np.float32) * 0.3, name="w")
    b = gc.Variable(np.zeros(5, np.float32), name="b")
    h = gc.zeros_like(x[:, 0, :5])
    outs = []
    for t in range(steps):
        h = gc.tanh(gc.matmul(gc.concat([x[:, t, :], h], 1), w) + b) * 0.5 + h * 0.5
        outs.append(gc.nn.softmax(h))
    loss = gc.reduce_mean(gc.square(gc.stack(outs, 1)))
    train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return loss, train, {x: RNG.standard_normal((3, steps, 6)).astype(np.float32)}


def test_kernel_graph_is_built_once_then_updated_at_each_merge(monkeypatch):
    # rebuilding the whole kernel graph after each merge made fusion quadratic in the graph
    from graphc.compiler.schedule import fusion
    loss, train, feeds = _unrolled_rnn_step(6)
    module = optimized_module([loss], feeds, [train])
    rebuilds, updates = [0], [0]
    rebuild, update = fusion.Fusion._rebuild_edges, fusion.Fusion._update_edges

    def counted_rebuild(self):
        rebuilds[0] += 1
        rebuild(self)

    def checked_update(self, changed, removed=(), joined=False):
        updates[0] += 1
        update(self, changed, removed, joined)
        want = _kernel_graph(self)
        assert self.succ == want
        assert self.pred == {g: {p for p in want if g in want[p]} for g in want}
    def numbered(change):
        def checked(self, *args):
            done = change(self, *args)
            # the numbering that bounds the searches for cycles stays topological
            assert set(self.order) == set(self.groups)
            assert all(self.order[a] < self.order[b] for a in self.succ for b in self.succ[a])
            return done
        return checked
    monkeypatch.setattr(fusion.Fusion, "_rebuild_edges", counted_rebuild)
    monkeypatch.setattr(fusion.Fusion, "_update_edges", checked_update)
    monkeypatch.setattr(fusion.Fusion, "_merge", numbered(fusion.Fusion._merge))
    monkeypatch.setattr(fusion.Fusion, "_apply_duplication",
                        numbered(fusion.Fusion._apply_duplication))
    fusion.run(module)
    assert rebuilds[0] == 1 and updates[0] > 20, (rebuilds, updates)
    assert_schedule_is_valid(module)


def test_unrolled_rnn_training_step_fuses_and_matches_the_session():
    loss, train, feeds = _unrolled_rnn_step(6)
    m = check_against_session([loss], feeds, [train], steps=2)
    assert len(m.kernels) < sum(len(k.nodes) for k in m.kernels) / 2


class _CountedLookups(dict):
    lookups = 0

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)


def _downstream(succ, src, skip):
    """Groups reachable from src other than through its direct edge to skip."""
    seen, stack = set(), [s for s in dict.__getitem__(succ, src) if s != skip]
    while stack:
        g = stack.pop()
        if g not in seen:
            seen.add(g)
            stack.extend(dict.__getitem__(succ, g))
    return seen


def test_cycle_checks_search_between_the_pair_only(monkeypatch):
    # searching everything downstream of both groups for each candidate merge was
    # quadratic in a deep graph; the topological numbering bounds the search
    from graphc.compiler.schedule import fusion
    x = gc.placeholder(gc.float32, [None, 4], name="x")
    h = x
    for i in range(24):
        h = gc.layers.dense(h, 4, activation=gc.nn.tanh, name=f"h{i}")
    train = gc.train.GradientDescentOptimizer(0.1).minimize(gc.reduce_mean(gc.square(h)))
    module = optimized_module([h], {x: np.zeros((2, 4), np.float32)}, [train])
    check = fusion.Fusion._creates_cycle
    visits = {"bounded": 0, "downstream": 0}

    def compared(self, a, b):
        if not isinstance(self.succ, _CountedLookups):
            self.succ = _CountedLookups(self.succ)
        after_a, after_b = _downstream(self.succ, a, b), _downstream(self.succ, b, a)
        visits["downstream"] += len(after_a) + len(after_b)
        before = self.succ.lookups
        cycle = check(self, a, b)
        visits["bounded"] += self.succ.lookups - before
        assert cycle == (b in after_a or a in after_b)
        return cycle
    monkeypatch.setattr(fusion.Fusion, "_creates_cycle", compared)
    fusion.run(module)
    assert visits["bounded"] < visits["downstream"] / 4, visits


def test_control_edges_an_input_already_implies_are_not_kernel_graph_edges():
    """Every op of a chain built under control_dependencies(updates) waits for every
    update (TF1's graph, and graphc's, give each op the block's control inputs); an op
    whose input's producer already waits for an update needs no edge of its own, or the
    kernel graph has ops x updates edges (ResNet-50: 380k). The chain still runs after
    the updates: its values see them."""
    from graphc.compiler.schedule import fusion
    n_vars, depth = 8, 40
    x = gc.placeholder(gc.float64, [3], name="x")
    vs = [gc.Variable(np.float64(i)) for i in range(n_vars)]
    updates = [gc.assign_add(v, 1.0) for v in vs]
    with gc.control_dependencies(updates):
        h = x + gc.add_n([v.read_value() for v in vs])
        for i in range(depth):
            h = h * 0.5 + float(i)
    m = lower([x], [h], [], [(3,)])
    optimize(m)
    f = fusion.Fusion(m, fuse=False)
    update_nodes = {n for n in m.nodes if n.type == "AssignAdd"}
    control_edges = [(a, b) for a, b, data in f.edges if not data and a in update_nodes]
    # the reads and the chain's start wait for each update, not the 2 x 40 ops after them
    assert len(control_edges) <= (n_vars + 2) * n_vars
    xv = np.array([1.0, -2.0, 0.25])
    want = xv + sum(float(i) + 1.0 for i in range(n_vars))
    for i in range(depth):
        want = want * 0.5 + i
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        np.testing.assert_allclose(sess.run(h, {x: xv}), want, rtol=1e-12)
        np.testing.assert_allclose(sess.run(vs), np.arange(n_vars) + 1.0)


def test_duplications_against_the_numbering_renumber_locally(monkeypatch):
    # a batch-norm training step under control_dependencies(UPDATE_OPS): copying a cheap
    # group into the gradient kernels that wait for the moving-average updates gives
    # edges against fusion's numbering; each such copy sorted all kernels again (108
    # times in a ResNet-50 step). The schedule still computes what the Session does.
    from graphc.compiler.schedule import fusion
    sorts = []
    full_sort = fusion.Fusion._topological_order
    monkeypatch.setattr(fusion.Fusion, "_topological_order",
                        lambda self: sorts.append(1) or full_sort(self))
    gc.set_random_seed(1)
    x = gc.placeholder(gc.float64, [6, 3, 3, 2])
    y = gc.placeholder(gc.int32, [6])
    h = x
    for _ in range(3):
        h = gc.layers.conv2d(h, 4, 3, padding="same", use_bias=False)
        h = gc.nn.relu(gc.layers.batch_normalization(h, axis=3, training=True, fused=True))
    h = gc.layers.max_pooling2d(h, 3, 2, padding="same")
    logits = gc.layers.dense(gc.reduce_mean(h, axis=[1, 2]), 3)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    with gc.control_dependencies(gc.get_collection(gc.GraphKeys.UPDATE_OPS)):
        train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    feed = {x: RNG.standard_normal((6, 3, 3, 2)), y: RNG.integers(0, 3, 6).astype(np.int32)}
    check_against_session([loss], feed, [train], steps=2)
    assert len(sorts) == 2  # to number the kernels, then to schedule them
