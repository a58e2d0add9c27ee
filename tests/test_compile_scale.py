"""A deep graph compiles within the suite's time, and computes what NumPy computes.

No timing assertions: a compiler stage that turns superlinear again (memory planning's
all-pairs checks, fusion's rebuilds per merge) shows as a slow suite. The MLP training step
at depth 128 is about 1.7k ops with its gradients; its numbers are checked against a NumPy
forward and backward pass written here, in float64, and against the reference backend.
"""
import numpy as np

import graphc as gc

DEPTH, WIDTH, BATCH, CLASSES, LR = 128, 16, 8, 5, 0.05


def _weights(rng):
    shapes = [(WIDTH, WIDTH)] * DEPTH + [(WIDTH, CLASSES)]
    ws = [rng.standard_normal(s) * np.sqrt(2.0 / s[0]) for s in shapes]
    bs = [rng.standard_normal(s[1]) * 0.1 for s in shapes]
    return ws, bs


def _numpy_step(x, y, ws, bs):
    """Loss and gradients of the mean sparse softmax cross entropy of the relu MLP."""
    hs, zs = [x], []
    for w, b in zip(ws[:-1], bs[:-1]):
        zs.append(hs[-1] @ w + b)
        hs.append(np.maximum(zs[-1], 0.0))
    logits = hs[-1] @ ws[-1] + bs[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(len(y)), y].mean()
    d = np.exp(logp)
    d[np.arange(len(y)), y] -= 1.0
    d /= len(y)
    dws, dbs = [None] * len(ws), [None] * len(bs)
    for i in reversed(range(len(ws))):
        dws[i], dbs[i] = hs[i].T @ d, d.sum(axis=0)
        if i:
            d = (d @ ws[i].T) * (zs[i - 1] > 0)
    return loss, dws, dbs


def _graph(ws, bs, dtype, batch=None):
    x = gc.placeholder(dtype, [batch, WIDTH], name="x")
    y = gc.placeholder(gc.int32, [batch], name="y")
    wv = [gc.Variable(w.astype(dtype.as_numpy_dtype), name=f"w{i}") for i, w in enumerate(ws)]
    bv = [gc.Variable(b.astype(dtype.as_numpy_dtype), name=f"b{i}") for i, b in enumerate(bs)]
    h = x
    for w, b in zip(wv[:-1], bv[:-1]):
        h = gc.nn.relu(gc.matmul(h, w) + b)
    logits = gc.matmul(h, wv[-1]) + bv[-1]
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train = gc.train.GradientDescentOptimizer(LR).minimize(loss)
    return x, y, loss, train, wv + bv


def test_depth_128_mlp_training_step_compiles_and_matches_numpy():
    rng = np.random.default_rng(0)
    ws, bs = _weights(rng)
    xs = rng.standard_normal((BATCH, WIDTH))
    ys = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    want_loss, dws, dbs = _numpy_step(xs, ys, ws, bs)
    for dtype, rtol in ((gc.float64, 1e-9), (gc.float32, 2e-3)):
        with gc.Graph().as_default():
            x, y, loss, train, variables = _graph(ws, bs, dtype)
            got = {}
            for backend in ("compiled", "reference"):
                sess = gc.Session(config=gc.ConfigProto(backend=backend))
                sess.run(gc.global_variables_initializer())
                feed = {x: xs.astype(dtype.as_numpy_dtype), y: ys}
                got[backend] = (sess.run([loss, train], feed)[0], sess.run(variables))
        for backend, (l, values) in got.items():
            np.testing.assert_allclose(l, want_loss, rtol=rtol, err_msg=backend)
            for v, old, grad in zip(values, ws + bs, dws + dbs):
                # the step itself, to the scale of the largest gradient entry; TF1 makes
                # the learning rate a float32 tensor and casts it to the variable's dtype
                lr = float(np.float32(LR))
                np.testing.assert_allclose(v - old, -lr * grad, rtol=0,
                                           atol=rtol * lr * (np.abs(grad).max() + 1e-30),
                                           err_msg=backend)
        for a, b in zip(got["compiled"][1], got["reference"][1]):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-3)


class _CountedWalks(list):
    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


def _generated(depth):
    """The module and spec of the MLP step at `depth`; module.nodes counts its walks."""
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    rng = np.random.default_rng(1)
    ws, bs = _weights(rng)
    ws, bs = ws[:depth] + ws[-1:], bs[:depth] + bs[-1:]
    with gc.Graph().as_default():
        x, y, loss, train, _ = _graph(ws, bs, gc.float32)
        module = lower([x, y], [loss], [train], [(BATCH, WIDTH), (BATCH,)])
        schedule_module(module)
        module.nodes = _CountedWalks(module.nodes)
        spec = generate(module)
    return module, spec


def _llvm_functions(depth):
    module, spec = _generated(depth)
    return len(module.kernels), spec["llvm_ir"].count("\ndefine ")


def test_codegen_walks_the_module_a_bounded_number_of_times():
    # the spec's variable entries walked all nodes once per variable (quadratic)
    shallow, deep = _generated(4)[0], _generated(12)[0]
    assert len(deep.variables) >= len(shallow.variables) + 16
    assert deep.nodes.walks == shallow.nodes.walks


def test_repeated_layers_share_one_llvm_function_per_distinct_kernel():
    # LLVM's time grew with the number of kernels, most of them copies of a layer's
    kernels8, functions8 = _llvm_functions(8)
    kernels16, functions16 = _llvm_functions(16)
    assert kernels16 > kernels8 + 30
    assert functions16 == functions8 < kernels8


def test_same_shaped_fed_initializers_compile_once_and_keep_their_own_values(monkeypatch):
    """A deep model's variables initialized from fed placeholders (peers_bench's way) lower
    to the same code: it is compiled once per process, and each variable still gets the
    value fed to its own initializer."""
    from runtime import compile_cache
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    rng = np.random.default_rng(1)
    n = 6
    for dtype in (gc.float32, gc.float64):
        values = [rng.standard_normal((7, 3)).astype(dtype.as_numpy_dtype) for _ in range(n)]
        phs = [gc.placeholder(dtype, [7, 3]) for _ in range(n)]
        vs = [gc.Variable(ph) for ph in phs]
        with gc.Session() as sess:
            before = dict(compile_cache.memory_stats)
            for v, ph, val in zip(vs, phs, values):
                sess.run(v.initializer, {ph: val})
            stores = compile_cache.memory_stats["stores"] - before["stores"]
            hits = compile_cache.memory_stats["hits"] - before["hits"]
            got = sess.run(vs)
        assert stores <= 1 and hits >= n - 1  # 0 stores when an earlier test made it
        for g, want in zip(got, values):
            assert g.dtype == want.dtype
            np.testing.assert_array_equal(g, want)


def test_entry_has_one_failure_exit_for_all_its_calls():
    # a return block per kernel call (each restoring BLAS's threads) was most of the
    # entry's IR, and grew with the depth
    import re
    _, spec = _generated(8)
    entry = spec["llvm_ir"][spec["llvm_ir"].index('@"graphc_main"'):]
    entry = entry[:entry.index("\n}\n")]
    assert len(re.findall(r"\n\s*ret i32", entry)) == 2
    assert entry.count("call i32 @\"kernel_") > 30


STEPS = 7


def _unrolled_rnn(dtype):
    """A static_rnn-style loop: each step reads its own row of the stacked input (the same
    kernel but for the row's offset)."""
    x = gc.placeholder(dtype, [3, STEPS, 4], name="x")
    w = gc.placeholder(dtype, [4, 4], name="w")
    h = gc.zeros([3, 4], dtype=dtype)
    for t in range(STEPS):
        h = gc.tanh(gc.matmul(x[:, t, :] * 2.0 + 1.0, w) + 0.5 * h)
    return x, w, h


def test_unrolled_steps_share_one_function_taking_the_step_offset():
    # an unrolled RNN's step kernels differ only in the row each reads: LLVM compiled a
    # copy per step (a 32-step LSTM's LLVM time was mostly those copies)
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    rng = np.random.default_rng(2)
    xs, ws = rng.standard_normal((3, STEPS, 4)), rng.standard_normal((4, 4)) * 0.5
    want = np.zeros((3, 4))
    for t in range(STEPS):
        want = np.tanh((xs[:, t, :] * 2.0 + 1.0) @ ws + 0.5 * want)
    for dtype, rtol in ((gc.float64, 1e-12), (gc.float32, 1e-5)):
        with gc.Graph().as_default():
            x, w, h = _unrolled_rnn(dtype)
            feed = {x: xs.astype(dtype.as_numpy_dtype), w: ws.astype(dtype.as_numpy_dtype)}
            for backend in ("compiled", "reference"):
                sess = gc.Session(config=gc.ConfigProto(backend=backend))
                np.testing.assert_allclose(sess.run(h, feed), want, rtol=rtol, atol=rtol,
                                           err_msg=backend)
            module = lower([x, w], [h], [], [(3, STEPS, 4), (4, 4)])
            schedule_module(module)
            ir = generate(module)["llvm_ir"]
        kernel_functions = ir.count('\ndefine i32 @"kernel_')
        assert len(module.kernels) >= STEPS
        assert kernel_functions < STEPS


def _random_init_functions(n, dtype):
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    with gc.Graph().as_default():
        gc.set_random_seed(3)
        vs = [gc.Variable(gc.random_uniform((8, 30), dtype=dtype)) for _ in range(n)]
        init = gc.global_variables_initializer()
        module = lower([], [], [init], [])
        schedule_module(module)
        ir = generate(module)["llvm_ir"]
        values = {}
        for backend in ("compiled", "reference"):
            sess = gc.Session(config=gc.ConfigProto(backend=backend))
            sess.run(init)
            values[backend] = sess.run(vs)
    return ir.count("\ndefine "), values


def test_same_shaped_random_initializers_on_a_thread_team_share_their_functions(monkeypatch):
    # a kernel split across the thread team names its blocks after itself, and its random
    # fill has a wrapper that counts the run: identical initializers (ResNet-50's 428)
    # were all compiled, as their texts differed in those names
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")  # split however small
    for dtype in (gc.float32, gc.float64):
        functions2, _ = _random_init_functions(2, dtype)
        functions4, values = _random_init_functions(4, dtype)
        assert functions4 == functions2
        for got, want in zip(values["compiled"], values["reference"]):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == dtype.as_numpy_dtype and 0 <= got.min() and got.max() < 1
        assert len({v.tobytes() for v in values["compiled"]}) == 4  # each its own draw


def test_entry_is_left_unoptimized():
    # O3 over the entry (a call and a branch per kernel) cost about a second of a
    # ResNet-50 step's LLVM time and saves nanoseconds per run
    _, spec = _generated(8)
    define = next(line for line in spec["llvm_ir"].splitlines()
                  if line.startswith('define i32 @"graphc_main"'))
    assert "optnone" in define and "noinline" in define


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _lstm_steps(steps, dtype, rng):
    """A static_rnn BasicLSTMCell over the unstacked steps of x [batch, steps, 3] with
    the gradients of its last output's weighted sum; the arrays and the NumPy loss."""
    xs = rng.standard_normal((2, steps, 3))
    r = rng.standard_normal((2, 4))
    x = gc.placeholder(dtype, (2, steps, 3))
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    outputs, _ = gc.nn.static_rnn(cell, gc.unstack(x, axis=1), dtype=dtype)
    loss = gc.reduce_sum(outputs[-1] * r.astype(dtype.as_numpy_dtype))
    kernel, bias = cell.weights
    grads = gc.gradients(loss, [x, kernel, bias])

    def numpy_loss(w, b):
        c = h = np.zeros((2, 4))
        for t in range(steps):
            i, j, f, o = np.split(np.concatenate([xs[:, t], h], 1) @ w + b, 4, axis=1)
            c = c * _sigmoid(f + 1.0) + _sigmoid(i) * np.tanh(j)
            h = np.tanh(c) * _sigmoid(o)
        return float((h * r).sum())
    return x, xs, loss, grads, (kernel, bias), numpy_loss


def test_lstm_training_step_lowers_as_many_kernels_at_any_number_of_steps(monkeypatch):
    """An unrolled LSTM's step kernels differ only in the row of the stacked input they
    read (kernel_reuse.py lowers one and moves the row's pointer for the others): the
    kernels codegen lowers do not grow with the steps, and the loss and gradients match
    NumPy and the reference backend in float64 and float32."""
    from graphc.compiler.backends.cpu import kernel_reuse
    lowered = []
    made = []
    init = kernel_reuse.KernelReuse.__init__

    def spy(self, program):
        init(self, program)
        made.append((self, program))
    monkeypatch.setattr(kernel_reuse.KernelReuse, "__init__", spy)
    # both past shared_transposes.MIN_PRODUCTS recurrent products: one Transpose kernel
    # more is that pass's threshold, not growth
    for steps in (9, 13):
        for dtype, rtol in ((gc.float64, 1e-10), (gc.float32, 1e-4)):
            rng = np.random.default_rng(steps)
            with gc.Graph().as_default():
                gc.set_random_seed(1)  # the same initial weights in both sessions
                x, xs, loss, grads, weights, numpy_loss = _lstm_steps(steps, dtype, rng)
                feed = {x: xs.astype(dtype.as_numpy_dtype)}
                got = {}
                for backend in ("compiled", "reference"):
                    sess = gc.Session(config=gc.ConfigProto(backend=backend))
                    sess.run(gc.global_variables_initializer())
                    got[backend] = sess.run([loss] + grads, feed)
                    w, b = sess.run(weights)
                    if backend == "compiled" and dtype == gc.float64:
                        reuse, program = max(made, key=lambda m: len(m[1].module.kernels))
                        lowered.append(len(program.module.kernels) - reuse.reused)
                    made.clear()
            w64, b64 = w.astype(np.float64), b.astype(np.float64)
            np.testing.assert_allclose(got["compiled"][0], numpy_loss(w64, b64),
                                       rtol=rtol, atol=rtol)
            for a, want in zip(got["compiled"], got["reference"]):
                np.testing.assert_allclose(a, want, rtol=rtol, atol=rtol)
    assert lowered[0] == lowered[1], lowered


def test_lstm_gradient_emits_as_many_loops_at_any_number_of_steps():
    """The joins of an unrolled LSTM's steps (batch_gemms' stacked input rows and its
    weight gradient's [x_t, h_t] rows and gate gradients) are one loop nest each, not one
    loop per step: T copies of a loop were most of a 32-step LSTM's LLVM time. Its values
    are checked by the test above."""
    import re
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    loops = []
    for steps in (12, 16):  # both past shared_transposes.MIN_PRODUCTS (see the test above)
        with gc.Graph().as_default():
            x, _, _, grads, _, _ = _lstm_steps(steps, gc.float32, np.random.default_rng(0))
            module = lower([x], grads, [], [(2, steps, 3)])
            schedule_module(module)
            assert sum(n.type == "ConcatV2" and len(n.inputs) > steps
                       for n in module.nodes) >= 3  # the joins this is about are there
            ir = generate(module)["llvm_ir"]
        loops.append(len(re.findall(r"^[\w.]*header[\w.]*:", ir, re.M)))
    assert loops[0] == loops[1], loops


def test_lstm_kernels_share_one_function_per_activation_at_any_number_of_steps():
    """An unrolled LSTM's sigmoid and tanh are calls of one function each that the module
    defines (backends/cpu/math_library.py), not an inline copy per use in each step
    kernel: the functions and their callers do not grow with the steps, and no kernel
    holds exp's code. Its values are checked by the tests above and tests/test_shared_math.py."""
    import re
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    counts = []
    for steps in (12, 16):
        with gc.Graph().as_default():
            x, _, _, grads, _, _ = _lstm_steps(steps, gc.float32, np.random.default_rng(0))
            module = lower([x], grads, [], [(2, steps, 3)])
            schedule_module(module)
            ir = generate(module)["llvm_ir"]
        kernels = [ir[m.end():ir.find("\n}\n", m.end())]
                   for m in re.finditer(r'^define i32 @"kernel_\w+"', ir, re.M)]
        assert not any("0x3ff7154760000000" in k for k in kernels)  # exp's log2(e)
        defined = {name: len(re.findall(rf'^define [^\n]*@"graphc\.math\.{name}\.float32"\(',
                                        ir, re.M)) for name in ("sigmoid", "tanh")}
        assert defined == {"sigmoid": 1, "tanh": 1}
        counts.append(sum("@\"graphc.math." in k for k in kernels))
    assert counts[0] == counts[1] > 0, counts


def _mlp_module(depth, batch=BATCH):
    """The lowered (unoptimized) training step of the MLP's first `depth` layers and its
    classifier, batch fed as BATCH rows (`batch`: the graph's static batch, or None)."""
    from graphc.compiler import lower
    ws, bs = _weights(np.random.default_rng(1))
    with gc.Graph().as_default():
        x, y, loss, train, _ = _graph(ws[:depth] + ws[-1:], bs[:depth] + bs[-1:],
                                      gc.float32, batch=batch)
        return lower([x, y], [loss], [train], [(BATCH, WIDTH), (BATCH,)])


def _fusion_stats(depth):
    from graphc.compiler.driver import schedule_module
    return schedule_module(_mlp_module(depth))["fusion"]


def test_fusion_searches_for_paths_grow_linearly_with_depth():
    # each layer's bias gradient merges into its update at the end of the step, and each
    # layer's ReluGrad reads the same zeros (a constant of the static batch's shape):
    # searching every group between the two (the rest of the backward pass) made fusion
    # quadratic in depth
    shallow, deep = _fusion_stats(16), _fusion_stats(64)
    assert deep["kernels"] > 3 * shallow["kernels"]
    assert 0 < deep["groups_searched"] <= 5 * shallow["groups_searched"], (shallow, deep)


class _CountedReads(list):
    """A list counting the elements read by its scans and membership tests."""
    reads = 0

    def __iter__(self):
        self.reads += len(self)
        return super().__iter__()

    def __contains__(self, item):
        self.reads += len(self)
        return super().__contains__(item)


def _roots_read_by_batch_gemms(depth):
    from graphc.compiler.passes import batch_gemms
    module = _mlp_module(depth)
    assert len(module.roots) > depth  # an update per variable
    roots = module.roots = _CountedReads(module.roots)
    batch_gemms.run(module)
    return roots.reads


def test_batch_gemms_reads_the_roots_a_bounded_number_of_times():
    # each product asked whether it is one of the module's roots: a scan of the list of a
    # training step's updates per product was quadratic in depth
    shallow, deep = _roots_read_by_batch_gemms(16), _roots_read_by_batch_gemms(64)
    assert deep <= 5 * shallow, (shallow, deep)


def _verifications(monkeypatch, every_stage):
    from graphc.compiler import ir
    from graphc.compiler.driver import schedule_module
    if every_stage:
        monkeypatch.setenv("GRAPHC_VERIFY_PASSES", "1")
    else:
        monkeypatch.delenv("GRAPHC_VERIFY_PASSES", raising=False)
    calls = []
    verify = ir.Module.verify
    monkeypatch.setattr(ir.Module, "verify", lambda self: calls.append(self) or verify(self))
    schedule_module(_mlp_module(4, batch=None))
    return len(calls)


def test_a_compile_verifies_the_module_once_unless_asked_after_every_stage(monkeypatch):
    # each verification walks the whole module: one after every pass and schedule step
    # was a tenth of a deep MLP's compile; the suite asks for them (conftest)
    from graphc.compiler.pipeline import STAGE_NAMES
    assert _verifications(monkeypatch, every_stage=False) == 1
    assert _verifications(monkeypatch, every_stage=True) == len(STAGE_NAMES)


def _lstm_fusion(steps, spy_check):
    """Schedules the 4-unit LSTM gradient of `steps` steps with spy_check(the check)
    called at each of fusion's loop checks before it runs; fusion's stats."""
    from graphc.compiler import lower
    from graphc.compiler.driver import schedule_module
    from graphc.compiler.schedule import fusion
    check = fusion._LoopCheck.dims

    def spied(self):
        spy_check(self)
        return check(self)
    with gc.Graph().as_default():
        x, _, _, grads, _, _ = _lstm_steps(steps, gc.float32, np.random.default_rng(0))
        module = lower([x], grads, [], [(2, steps, 3)])
    fusion._LoopCheck.dims = spied
    try:
        return schedule_module(module)["fusion"]
    finally:
        fusion._LoopCheck.dims = check


def _longest_path(f, nodes):
    length = {}
    for n in sorted(nodes, key=f.pos.__getitem__):
        length[n] = 1 + max((length.get(v.node, 0) for _, v in f.data_in(n)), default=0)
    return max(length.values())


def test_fusion_keeps_each_groups_facts_without_walking_its_nodes(monkeypatch):
    """Each loop check of a merge gets the merged group's facts (a bound on its longest
    path, whether it is plain) and its outputs combined from its parts' (their outputs,
    not their nodes): these hold at every check, no path is measured in an LSTM's step
    kernels (all within MAX_CHAIN nodes), and most checks get their outputs from their
    parts' rather than from the merged nodes, each of which every check walked before."""
    from graphc.compiler.schedule import fusion
    measured, checked, given = [], [], []

    def spy_check(check):
        f, nodes, facts = check.f, check.set, check.facts
        assert _longest_path(f, nodes) <= max(facts.chain or 0, len(nodes))
        assert facts.plain == all(f.plain_node(n) for n in nodes)
        if check.outputs is not None:
            assert check.outputs == f.outputs_of(nodes, check.copies)
            given.append(len(nodes))
        checked.append(len(nodes))
        if len(checked) % 25 == 0:
            for g in f.groups.values():
                assert g.facts.cheap == all(
                    f.kind(n) in fusion.CHEAP_KINDS and not set(n.outputs) & f.fetched
                    for n in g.nodes)
    chain_length = fusion._LoopCheck._chain_length

    def measure(self):
        measured.append(len(self.nodes))
        return chain_length(self)
    monkeypatch.setattr(fusion._LoopCheck, "_chain_length", measure)
    _lstm_fusion(12, spy_check)
    assert len(checked) > 100 and max(checked) > 10, checked
    assert measured == []
    assert len(given) > 0.9 * len(checked), (len(given), len(checked))


def _compile_peak(depth):
    """(ops, the Python heap's peak rise over the first run's compile, in bytes) of the
    float32 training step at `depth`, compiled from nothing."""
    import tracemalloc
    rng = np.random.default_rng(0)
    shapes = [(WIDTH, WIDTH)] * depth + [(WIDTH, CLASSES)]
    ws = [rng.standard_normal(s) for s in shapes]
    bs = [rng.standard_normal(s[1]) for s in shapes]
    with gc.Graph().as_default() as g:
        x, y, loss, train, _ = _graph(ws, bs, gc.float32)
        sess = gc.Session()
        sess.run(gc.global_variables_initializer())
        feed = {x: np.ones((BATCH, WIDTH), np.float32), y: np.zeros(BATCH, np.int32)}
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            sess.run([loss, train], feed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return len(g.get_operations()), peak - base


def test_a_compiles_peak_memory_grows_linearly_with_the_graph(monkeypatch):
    """The Python heap a compile peaks at (the lowered module, the passes' and the
    schedule's structures, the generated IR, garbage the compile leaves to the collector)
    costs the same per added op from depth 8 to 56, and a few KB: a structure over all
    pairs of nodes or buffers would raise it with depth. LLVM's own memory is not traced
    here; tools/compile_time.py --scale and the compile's log line report the process's
    peak."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    (ops_a, peak_a), (ops_b, peak_b), (ops_c, peak_c) = map(_compile_peak, (8, 24, 56))
    per_op_low = (peak_b - peak_a) / (ops_b - ops_a)
    per_op_high = (peak_c - peak_b) / (ops_c - ops_b)
    assert 0 < per_op_high < 1.3 * per_op_low, (per_op_low, per_op_high)
    assert per_op_high < 16 * 1024, per_op_high  # about 4.3 KB per op (November 2026)
