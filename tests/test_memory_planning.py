"""The memory planning pass, checked by an independent checker.

`check_plan` does not use the planner's code: it recomputes each buffer's life from the
kernel schedule, then evaluates every offset and size (SymDim expressions) at several
symbol values and checks that buffers alive at the same time never overlap (except an
output written in place over an input at that input's last use), that all fit in the
arena, and that sizes hold the value and offsets are 64-byte aligned.
"""
import itertools

import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower, optimize
from graphc.compiler.backends.cpu import CpuBackend
from graphc.compiler.driver import compile_options, schedule_module
from graphc.framework.op_def import OP_KINDS
from graphc.framework.symbolic import SymDim, evaluate_json

RNG = np.random.default_rng(1)
SYMBOL_VALUES = [2, 3, 17, 64, 1000]


def _eval(expr, env):
    return evaluate_json(expr.to_json(), env) if isinstance(expr, SymDim) else int(expr)


def _nbytes(value, env):
    n = 1 if value.dtype.name == "bool" else value.dtype.np.itemsize
    for d in value.dims:
        n *= _eval(d, env)
    return n


def _environments(module):
    symbols = sorted(module.symbols)
    if not symbols:
        return [{}]
    combos = itertools.product(SYMBOL_VALUES, repeat=len(symbols)) if len(symbols) <= 2 \
        else [tuple(RNG.choice(SYMBOL_VALUES, len(symbols))) for _ in range(25)]
    return [dict(zip(symbols, map(int, c))) for c in combos]


def expected_lives(module):
    """{value: (writer kernel, last reader kernel)} for every kernel output not fetched."""
    fetched = set(module.outputs)
    lives = {}
    for t, k in enumerate(module.kernels):
        for v in k.outputs:
            if v not in fetched:
                lives[v] = [t, t]
    aliases = getattr(module, "aliases", {})
    for t, k in enumerate(module.kernels):
        for v in k.inputs:
            v = aliases.get(v, v)  # reading an alias (a reshape) reads its input's buffer
            if v in lives:
                assert lives[v][0] < t, f"{k.name} reads {v.ref} before it is written"
                lives[v][1] = max(lives[v][1], t)
    return {v: tuple(life) for v, life in lives.items()}


def _inplace_ok(a, b, pa, pb):
    """b written over a: a's last use is b's writer, an elementwise loop kernel."""
    return pb.inplace_of is a and pa.live[1] == pb.live[0] and a.dtype == b.dtype


def check_plan(module):
    plan = module.memory_plan
    lives = expected_lives(module)
    assert set(plan.buffers) == set(lives)
    for v, b in plan.buffers.items():
        assert b.live == lives[v], v
        if b.inplace_of is not None:
            k = module.kernels[b.live[0]]
            assert k.kind == "loop" and all(OP_KINDS[n.type] == "elementwise" for n in k.nodes)
            assert b.inplace_of in k.inputs and v in k.outputs
    buffers = list(plan.buffers.items())
    for env in _environments(module):
        arena = _eval(plan.arena_bytes, env)
        place = {}
        for v, b in buffers:
            off, size = _eval(b.offset, env), _eval(b.size, env)
            assert off % 64 == 0 and size % 64 == 0, (v, env)
            assert size >= _nbytes(v, env), (v, env)
            assert 0 <= off and off + size <= arena, (v, env, off, size, arena)
            place[v] = (off, size)
        for (a, pa), (b, pb) in itertools.combinations(buffers, 2):
            if pa.live[1] < pb.live[0] or pb.live[1] < pa.live[0]:
                continue
            (oa, sa), (ob, sb) = place[a], place[b]
            if _inplace_ok(a, b, pa, pb) or _inplace_ok(b, a, pb, pa):
                assert oa == ob and sa == sb
                continue
            assert oa + sa <= ob or ob + sb <= oa, \
                f"{a.ref} [{oa},{oa + sa}) and {b.ref} [{ob},{ob + sb}) overlap at {env}"
        stats = {k: _eval(x, env) for k, x in plan.stats.items()}
        assert stats["arena"] == arena
        assert stats["lower_bound"] <= arena <= stats["sum_of_buffers"]
        peak = max([sum(place[v][1] for v, b in buffers if b.live[0] <= t <= b.live[1]
                        and not any(b2.inplace_of is v and b2.live[0] == t
                                    for _, b2 in buffers))
                    for t in range(len(module.kernels))] or [0])
        assert stats["lower_bound"] == peak
    return plan


def scheduled_module(fetches, feed_dict, targets=(), disable=None):
    """The module through the passes and the schedule (the driver's stages before codegen)."""
    module = lower(list(feed_dict), list(fetches), list(targets),
                   [np.shape(a) for a in feed_dict.values()])
    schedule_module(module, options=compile_options(disable=disable))
    return module


# ------------------------------------------------------------- example-like graphs
def mlp_train_step():
    x = gc.placeholder(gc.float32, [None, 12], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.dense(x, 16, activation=gc.nn.relu, name="h1")
    h = gc.layers.dense(h, 16, activation=gc.nn.relu, name="h2")
    logits = gc.layers.dense(h, 5, name="logits")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.AdamOptimizer(1e-3).minimize(loss)
    return [loss], {x: np.zeros((8, 12), np.float32), labels: np.zeros(8, np.int32)}, [train]


def cnn_train_step():
    x = gc.placeholder(gc.float32, [None, 8, 8, 1], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    h = gc.layers.conv2d(x, 4, 3, padding="same", activation=gc.nn.relu, name="c1")
    h = gc.layers.max_pooling2d(h, 2, 2)
    h = gc.layers.conv2d(h, 8, 3, padding="valid", activation=gc.nn.relu, name="c2")
    logits = gc.layers.dense(gc.reshape(h, [-1, 2 * 2 * 8]), 3, name="out")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, logits)
    train = gc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    return [loss], {x: np.zeros((4, 8, 8, 1), np.float32), labels: np.zeros(4, np.int32)}, \
        [train]


def softmax_xent_with_gradient():
    logits = gc.placeholder(gc.float32, [None, 10], name="logits")
    onehot = gc.placeholder(gc.float32, [None, 10], name="onehot")
    loss = gc.reduce_mean(gc.nn.softmax_cross_entropy_with_logits_v2(labels=onehot,
                                                                     logits=logits))
    g, = gc.gradients(loss, [logits])
    return [loss, g], {logits: np.zeros((6, 10), np.float32),
                       onehot: np.zeros((6, 10), np.float32)}, []


def layer_norm_gelu():
    x = gc.placeholder(gc.float32, [None, 32], name="x")
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    y = gc.nn.gelu((x - mean) * gc.rsqrt(var + 1e-5))
    w = gc.constant(RNG.standard_normal((32, 32)).astype(np.float32))
    z = gc.nn.gelu(gc.matmul(y, w), approximate=True)
    g, = gc.gradients(gc.reduce_sum(z), [x])
    return [z, g], {x: np.zeros((5, 32), np.float32)}, []


def static_mlp_forward():
    x = gc.placeholder(gc.float32, [4, 12], name="x")
    h = gc.layers.dense(x, 16, activation=gc.nn.relu, name="h1")
    y = gc.nn.softmax(gc.layers.dense(h, 5, name="out"))
    return [y], {x: np.zeros((4, 12), np.float32)}, []


GRAPHS = [mlp_train_step, cnn_train_step, softmax_xent_with_gradient, layer_norm_gelu,
          static_mlp_forward]


@pytest.mark.parametrize("build", GRAPHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_plans_of_example_graphs_pass_the_independent_checker(build, fused):
    fetches, feeds, targets = build()
    module = scheduled_module(fetches, feeds, targets, disable=None if fused else ["fusion"])
    plan = check_plan(module)
    assert plan.buffers or build is static_mlp_forward
    if build is static_mlp_forward:
        assert isinstance(plan.arena_bytes, int)


def test_arena_reuses_memory_of_dead_buffers():
    fetches, feeds, targets = mlp_train_step()
    module = scheduled_module(fetches, feeds, targets)
    plan = check_plan(module)
    env = {s: 64 for s in module.symbols}
    stats = {k: _eval(x, env) for k, x in plan.stats.items()}
    assert stats["arena"] < stats["sum_of_buffers"]


def test_elementwise_kernel_writes_in_place_over_its_last_use_input():
    x = gc.placeholder(gc.float32, [None, 8], name="x")
    w1 = gc.constant(RNG.standard_normal((8, 16)).astype(np.float32))
    w2 = gc.constant(RNG.standard_normal((16, 4)).astype(np.float32))
    h = gc.matmul(x, w1)
    u = gc.sin(h) * 2.0                      # a loop kernel reading h for the last time
    y = gc.matmul(u, w2)
    module = scheduled_module([y], {x: np.zeros((3, 8), np.float32)})
    plan = check_plan(module)
    inplace = [(v, b) for v, b in plan.buffers.items() if b.inplace_of is not None]
    assert len(inplace) == 1
    v, b = inplace[0]
    assert b.inplace_of.node.type == "MatMul" and v.node.type == "Mul"
    assert b.offset == plan.buffers[b.inplace_of].offset
    assert module.memory_plan.to_text().count("in place of") == 1


def test_sizes_are_rounded_up_to_64_bytes():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    w = gc.constant(np.ones((3, 3), np.float32))
    y = gc.matmul(gc.exp(gc.matmul(x, w)), w)
    module = scheduled_module([y], {x: np.zeros((5, 3), np.float32)})
    plan = check_plan(module)
    for b in plan.buffers.values():
        for n in (1, 5, 7, 1001):
            env = {s: n for s in module.symbols}
            assert _eval(b.size, env) % 64 == 0


# ------------------------------------------------------------- scaling with the graph
def deep_mlp_train_step(depth, batch=None):
    x = gc.placeholder(gc.float32, [batch, 8], name="x")
    labels = gc.placeholder(gc.int32, [batch], name="labels")
    h = x
    for i in range(depth):
        h = gc.layers.dense(h, 8, activation=gc.nn.relu, name=f"h{i}")
    loss = gc.losses.sparse_softmax_cross_entropy(labels, gc.layers.dense(h, 3, name="out"))
    train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return [loss], {x: np.zeros((4, 8), np.float32), labels: np.zeros(4, np.int32)}, [train]


def _planned(depth, batch, monkeypatch, count):
    """The module of a deep MLP step planned with the planner's `count` function counted."""
    from graphc.compiler.schedule import fusion, memory_planning
    with gc.Graph().as_default():
        fetches, feeds, targets = deep_mlp_train_step(depth, batch)
        module = lower(list(feeds), fetches, targets, [np.shape(a) for a in feeds.values()])
    optimize(module)
    fusion.run(module)
    calls = [0]
    original = getattr(memory_planning, count)

    def counted(*args):
        calls[0] += 1
        return original(*args)
    monkeypatch.setattr(memory_planning, count, counted)
    memory_planning.run(module, CpuBackend.scratch_bytes)
    monkeypatch.setattr(memory_planning, count, original)
    return module, calls[0]


def test_static_sizes_are_planned_with_ints_only(monkeypatch):
    # static shapes compare as ints: no symbolic expression (nor exact check) is built,
    # where all-pairs checks built millions at depth 64
    module, checks = _planned(24, 4, monkeypatch, "_provably_le")
    assert checks == 0
    plan = check_plan(module)
    assert isinstance(plan.arena_bytes, int) and plan.arena_bytes < plan.stats["sum_of_buffers"]


def _overlapping_pairs(plan):
    lives = sorted(b.live for b in plan.buffers.values())
    return sum(1 for i, (lo, hi) in enumerate(lives) for lo2, _ in lives[i + 1:] if lo2 <= hi)


def test_exact_checks_stay_proportional_to_overlapping_lives(monkeypatch):
    # a symbolic batch: each buffer is checked against each buffer alive with it a bounded
    # number of times (all candidate offsets against all rivals was cubic: depth^3)
    ratios = {}
    for depth in (8, 32):
        module, checks = _planned(depth, None, monkeypatch, "_provably_le")
        plan = check_plan(module) if depth == 8 else module.memory_plan
        ratios[depth] = checks / (_overlapping_pairs(plan) + len(plan.buffers))
    assert ratios[32] <= 6 and ratios[32] <= 1.5 * ratios[8], ratios


def test_each_update_runs_once_its_gradient_is_ready():
    # TF1's executor applies a weight's gradient as soon as it is computed; a schedule in
    # module order ran every update at the end of the step, so every weight gradient was
    # live at once (the deep MLP's arena was all of them: 64 MB at depth 256)
    depth, width, batch = 24, 64, 4
    with gc.Graph().as_default():
        x = gc.placeholder(gc.float32, [batch, width], name="x")
        labels = gc.placeholder(gc.int32, [batch], name="labels")
        h = x
        for i in range(depth):
            h = gc.layers.dense(h, width, activation=gc.nn.relu, name=f"h{i}")
        loss = gc.losses.sparse_softmax_cross_entropy(labels, gc.layers.dense(h, 3))
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        module = scheduled_module([loss], {x: np.zeros((batch, width), np.float32),
                                           labels: np.zeros(batch, np.int32)}, [train])
    plan = check_plan(module)
    gradient_bytes = width * width * 4
    assert plan.stats["sum_of_buffers"] > depth * gradient_bytes
    assert plan.arena_bytes < 4 * gradient_bytes + 4 * depth * batch * width * 4, plan.stats
