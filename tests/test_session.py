"""Session semantics: fetch structures, feeds, pruning, ordering, state, errors."""
import collections
import sys
import warnings

import numpy as np
import pytest

import graphc as gc


def test_nested_fetch_structures():
    a = gc.constant(1.0)
    b = gc.constant([2, 3])
    Pair = collections.namedtuple("Pair", "x y")
    noop = gc.no_op()
    with gc.Session() as sess:
        out = sess.run({"a": a, "rest": [b, (a, noop)], "p": Pair(a, b)})
    assert out["a"] == 1.0 and out["rest"][1][1] is None
    assert isinstance(out["rest"], list) and isinstance(out["rest"][1], tuple)
    np.testing.assert_array_equal(out["rest"][0], [2, 3])
    assert isinstance(out["p"], Pair) and out["p"].x == 1.0


def test_fetch_and_feed_by_name():
    x = gc.placeholder(gc.float32, [2], name="x")
    y = gc.identity(x, name="y")
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run("y:0", {"x:0": [1, 2]}), [1, 2])
        assert sess.run("y", {x: [1, 2]}) is None


def test_feeding_an_intermediate_tensor_skips_its_producers():
    x = gc.placeholder(gc.float32, [], name="x")
    mid = x * 2.0
    out = mid + 1.0
    with gc.Session() as sess:
        assert sess.run(out, {mid: 10.0}) == 11.0  # x is not needed


def test_pruning_runs_only_what_fetches_need():
    v = gc.Variable(0.0)
    bump = gc.assign_add(v, 1.0)
    other = gc.constant(5.0)
    with gc.Session() as sess:
        sess.run(v.initializer)
        sess.run(other)
        assert sess.run(v) == 0.0  # bump did not run
        sess.run(bump)
        sess.run(bump)
        assert sess.run(v) == 2.0  # state persists across runs


def test_control_dependencies_order_side_effects():
    v = gc.Variable(1.0)
    with gc.control_dependencies([gc.assign(v, 10.0)]):
        read = v.read_value() * 2.0
    with gc.Session() as sess:
        sess.run(v.initializer)
        assert sess.run(read) == 20.0


def test_uninitialized_variable_error_names_it_and_session_recovers():
    v = gc.Variable([1.0, 2.0], name="weights")
    with gc.Session() as sess:
        with pytest.raises(gc.errors.FailedPreconditionError, match="weights"):
            sess.run(v + 1.0)
        sess.run(gc.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(v + 1.0), [2.0, 3.0])


def test_unfed_placeholder_is_named():
    x = gc.placeholder(gc.float32, [None, 3], name="images")
    y = x * 2.0
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="images"):
            sess.run(y)
        assert sess.run(y, {x: np.ones((1, 3))}).shape == (1, 3)


def test_feed_shape_mismatch_is_value_error():
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    with gc.Session() as sess:
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(2, 4\) for Tensor 'x:0'"):
            sess.run(x, {x: np.ones((2, 4))})


def test_runtime_shape_error_is_invalid_argument_and_recoverable():
    x = gc.placeholder(gc.float32, [None], name="x")
    y = gc.reshape(x, [3, 2])
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="Reshape"):
            sess.run(y, {x: np.ones(5)})
        assert sess.run(y, {x: np.ones(6)}).shape == (3, 2)


def test_error_in_gradient_names_forward_op():
    x = gc.placeholder(gc.float64, [None], name="x")
    y = gc.reshape(x, [2, 3])  # forward op created on this line
    g = gc.gradients(gc.reduce_sum(y), x)[0]
    with gc.Session() as sess:
        # feeding y (the forward reshape's output) lets the forward pass succeed, the
        # gradient's reshape back to x's shape then fails: the error names the forward op
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(g, {x: np.ones(4), y: np.ones((2, 3))})
    assert "gradient of 'Reshape'" in str(e.value) and __file__ in str(e.value)


def test_fetch_from_other_graph_and_closed_session():
    g = gc.Graph()
    with g.as_default():
        other = gc.constant(1.0)
    sess = gc.Session()
    with pytest.raises(ValueError):
        sess.run(other)
    sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        sess.run(gc.constant(1.0))


def test_eval_and_run_with_default_session():
    x = gc.placeholder(gc.float32, [])
    y = x + 1.0
    v = gc.Variable(3.0)
    with gc.Session() as sess:
        v.initializer.run()
        assert y.eval({x: 1.0}) == 2.0 and v.eval() == 3.0
        v.load(7.0)
        assert sess.run(v) == 7.0
    with pytest.raises(ValueError, match="No default session"):
        y.eval({x: 1.0})


def test_interactive_session_is_default():
    sess = gc.InteractiveSession()
    try:
        assert gc.constant(2.0).eval() == 2.0
    finally:
        sess.close()


def test_fetched_arrays_do_not_alias_variable_state():
    v = gc.Variable(np.zeros(3, np.float32))
    with gc.Session() as sess:
        sess.run(v.initializer)
        got = sess.run(v)
        got[0] = 5.0
        np.testing.assert_array_equal(sess.run(v), [0, 0, 0])


def test_graph_growth_in_loop_warns_once():
    x = gc.placeholder(gc.float32, [])
    with gc.Session() as sess:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(8):
                sess.run(x * 2.0, {x: 1.0})  # a new op every step: the classic TF1 bug
        growth = [m for m in w if "training loop" in str(m.message)]
        assert len(growth) == 1
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = x * 3.0
            for _ in range(8):
                sess.run(y, {x: 1.0})
        assert not [m for m in w if "training loop" in str(m.message)]


def test_ops_added_after_a_run_are_seen():
    a = gc.constant(1.0)
    with gc.Session() as sess:
        sess.run(a)
        b = a + 1.0
        assert sess.run(b) == 2.0


def test_random_ops_follow_seeds_across_sessions():
    def draw():
        g = gc.Graph()
        with g.as_default():
            gc.set_random_seed(42)
            r = gc.random_normal([3])
            u = gc.random_uniform([2], seed=7)
            with gc.Session() as sess:
                return sess.run([r, u]), sess.run(r)
    (r1, u1), r1b = draw()
    (r2, u2), r2b = draw()
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(u1, u2)
    np.testing.assert_array_equal(r1b, r2b)
    assert not np.array_equal(r1, r1b)  # a new draw on each run


def test_truncated_normal_bounds_and_uniform_range():
    t = gc.truncated_normal([1000], stddev=2.0, seed=1)
    u = gc.random_uniform([1000], minval=-3, maxval=5, seed=2)
    i = gc.random_uniform([1000], minval=2, maxval=9, dtype=gc.int32, seed=3)
    with gc.Session() as sess:
        tv, uv, iv = sess.run([t, u, i])
    assert np.abs(tv).max() <= 4.0 and uv.min() >= -3 and uv.max() < 5
    assert iv.dtype == np.int32 and iv.min() >= 2 and iv.max() <= 8


def test_check_numerics_reports_nan():
    x = gc.placeholder(gc.float32, [2])
    y = gc.debugging.check_numerics(gc.log(x), "log went bad")
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="log went bad"):
            sess.run(y, {x: [-1.0, 1.0]})
        np.testing.assert_allclose(sess.run(y, {x: [1.0, 1.0]}), [0, 0])


def test_initialized_value_chains_initializers():
    a = gc.Variable(gc.random_normal([3], seed=1))
    b = gc.Variable(a.initialized_value() * 2.0)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        av, bv = sess.run([a, b])
    np.testing.assert_allclose(bv, av * 2.0)
    assert gc.report_uninitialized_variables().dtype == gc.string


# ------------------------------------------------- feed and fetch misuse: TF's classes
def test_feed_dict_must_be_a_dictionary():
    x = gc.placeholder(gc.float32, [2], name="x")
    with gc.Session() as sess:
        for bad in ([1, 2], (x, [1.0, 2.0]), np.ones(2)):
            with pytest.raises(TypeError, match="input must be a dictionary"):
                sess.run(x * 2.0, bad)
        np.testing.assert_array_equal(sess.run(x * 2.0, {x: [1.0, 2.0]}), [2.0, 4.0])


def test_feed_dict_key_errors_are_type_errors():
    x = gc.placeholder(gc.float32, [2], name="x")
    y = gc.identity(x, name="y")
    with gc.Session() as sess:
        for key, why in [("nope:0", "refers to a Tensor which does not exist"),
                         ("x:3", "only has 1 outputs"),
                         ("x", "refers to an Operation, not a Tensor"),
                         (y.op, "Can not convert a Operation into a Tensor"),
                         (7, "Can not convert a int into a Tensor")]:
            with pytest.raises(TypeError, match="Cannot interpret feed_dict key as Tensor: .*"
                                                + why):
                sess.run(y, {key: [1.0, 2.0]})
        np.testing.assert_array_equal(sess.run(y, {"x:0": [1.0, 2.0]}), [1.0, 2.0])


def test_feed_value_errors_follow_tf():
    x = gc.placeholder(gc.float32, [2], name="x")
    i = gc.placeholder(gc.int32, [], name="i")
    with gc.Session() as sess:
        with pytest.raises(ValueError, match=r"Cannot feed value of shape \(3,\) for Tensor "
                                             r"'x:0', which has shape '\(2,\)'"):
            sess.run(x, {x: [1.0, 2.0, 3.0]})
        with pytest.raises(TypeError, match="The value of a feed cannot be a gc.Tensor"):
            sess.run(x, {x: gc.constant([1.0, 2.0])})
        with pytest.raises(ValueError, match="Cannot feed value 'abc' for Tensor 'x:0'"):
            sess.run(x, {x: "abc"})  # NumPy's ValueError, as in TF
        for big in (2 ** 31, -2 ** 31 - 1):
            with pytest.raises(TypeError, match=f"Type of feed value {big} with type <class "
                                                "'int'> is not compatible with Tensor type"):
                sess.run(i + 1, {i: big})
        assert sess.run(i + 1, {i: 2 ** 31 - 2}) == 2 ** 31 - 1
        assert sess.run(i + 1, {i: 5}) == 6  # the fast path checks too
        with pytest.raises(TypeError, match="not compatible with Tensor type"):
            sess.run(i + 1, {i: 2 ** 40})


def test_tuple_feed_keys_feed_their_tensors():
    a = gc.placeholder(gc.float32, [], name="a")
    b = gc.placeholder(gc.float32, [], name="b")
    with gc.Session() as sess:
        assert sess.run(a - b, {(a, b): (5.0, 3.0)}) == 2.0
        with pytest.raises(ValueError, match="Key had 2 elements, but value had 3"):
            sess.run(a - b, {(a, b): (5.0, 3.0, 1.0)})


def test_unknown_fetch_is_value_error():
    x = gc.constant(1.0, name="x")
    with gc.Session() as sess:
        with pytest.raises(ValueError, match=r"Argument `fetch` = nope:0 cannot be interpreted "
                                             r"as a Tensor. \(The name 'nope:0' refers to a "
                                             "Tensor which does not exist"):
            sess.run("nope:0")
        with pytest.raises(ValueError, match="cannot be interpreted as a Tensor"):
            sess.run("nope")
        with pytest.raises(TypeError, match='Argument `fetch` = None has invalid type "NoneType"'):
            sess.run([x, None])
        with pytest.raises(TypeError, match='has invalid type "int" must be a string or Tensor'):
            sess.run(3)
        assert sess.run("x:0") == 1.0 and sess.run("x") is None


# ------------------------------------------------------------ TF1's config messages
def test_config_proto_accepts_tf1_fields():
    """The lines popular TF1 repositories write; they change nothing in the results."""
    config = gc.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                            inter_op_parallelism_threads=2, intra_op_parallelism_threads=1,
                            gpu_options=gc.GPUOptions(per_process_gpu_memory_fraction=0.5))
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = "0"
    config.graph_options.optimizer_options.global_jit_level = gc.OptimizerOptions.ON_1
    assert config.gpu_options.per_process_gpu_memory_fraction == 0.5
    assert config.graph_options.optimizer_options.global_jit_level == 1
    x = gc.placeholder(gc.float32, [2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session(config=config) as sess:
            np.testing.assert_array_equal(sess.run(x * 2.0, {x: [1.0, 2.0]}), [2.0, 4.0])
            assert sess.num_threads == 1


def test_config_proto_rejects_unknown_fields_as_protobuf():
    with pytest.raises(ValueError, match='Protocol message ConfigProto has no "allow_growth" '
                                         'field'):
        gc.ConfigProto(allow_growth=True)
    config = gc.ConfigProto()
    with pytest.raises(AttributeError, match='no field "alow_growth"'):
        config.gpu_options.alow_growth = True
    with pytest.raises(AttributeError, match='Assignment not allowed to field "gpu_options"'):
        config.gpu_options = gc.GPUOptions()
    config.device_count["GPU"] = 0  # map fields are mutated in place, as protobuf's
    assert gc.ConfigProto(device_count={"GPU": 0}) == config


def test_config_settings_graphc_does_not_honour_warn():
    for config, what in [(gc.ConfigProto(device_count={"CPU": 4}), "one CPU device"),
                         (gc.ConfigProto(operation_timeout_in_ms=100), "not cancelled"),
                         (gc.ConfigProto(gpu_options=gc.GPUOptions(visible_device_list="1")),
                          "GPU 0 only")]:
        with pytest.warns(RuntimeWarning, match=what):
            gc.Session(config=config)
    a = gc.constant(1.0) + 1.0
    with gc.Session() as sess:
        metadata = gc.RunMetadata()
        with pytest.warns(RuntimeWarning, match="trace_level"):
            assert sess.run(a, options=gc.RunOptions(trace_level=gc.RunOptions.FULL_TRACE),
                            run_metadata=metadata) == 2.0
        with pytest.warns(RuntimeWarning, match="timeout_in_ms"):
            sess.run(a, options=gc.RunOptions(timeout_in_ms=5))


def test_device_count_without_gpus_runs_gpu_placements_on_the_cpu():
    with gc.device("/gpu:0"):
        y = gc.constant([1.0, 2.0]) * 3.0
    config = gc.ConfigProto(device_count={"GPU": 0}, allow_soft_placement=False)
    with pytest.raises(gc.errors.InvalidArgumentError, match="Cannot assign a device"):
        gc.Session(config=config).run(y)
    config = gc.ConfigProto(device_count={"GPU": 0})
    with pytest.warns(RuntimeWarning, match="soft placement"):
        np.testing.assert_array_equal(gc.Session(config=config).run(y), [3.0, 6.0])


def _warned_here(record, match):
    """(filename, lineno) of each warning whose message contains `match`."""
    return [(r.filename, r.lineno) for r in record if match in str(r.message)]


def test_warnings_name_the_users_line():
    """Every warning graphc raises is attributed to the user's call, as TF's are, not to
    graphc/session.py (stacklevel computed from the first frame outside graphc)."""
    here = __file__
    with gc.device("/gpu:0"):
        y = gc.constant([1.0, 2.0]) * 3.0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sess = gc.Session(config=gc.ConfigProto(device_count={"GPU": 0}))
        sess.run(y); line_run = sys._getframe().f_lineno  # noqa: E702
        gc.Session(config=gc.ConfigProto(operation_timeout_in_ms=5)); line_cfg = sys._getframe().f_lineno  # noqa: E501,E702
        sess.run(y, options=gc.RunOptions(timeout_in_ms=5)); line_opt = sys._getframe().f_lineno  # noqa: E501,E702
        for _ in range(7):
            sess.run(y + 1.0); line_grow = sys._getframe().f_lineno  # noqa: E702
    assert _warned_here(record, "soft placement") == [(here, line_run)]
    assert _warned_here(record, "operation_timeout_in_ms") == [(here, line_cfg)]
    assert _warned_here(record, "RunOptions.timeout_in_ms") == [(here, line_opt)]
    assert _warned_here(record, "The graph grew") == [(here, line_grow)]


def test_indexed_slices_warning_names_the_users_line():
    params = gc.Variable(np.ones((4, 3), np.float32))
    idx = gc.placeholder(gc.int32, [None])
    grad = gc.gradients(gc.reduce_sum(gc.gather(params, idx)), params)[0]
    grad = gc.IndexedSlices(grad.values, grad.indices, gc.shape(idx))  # shape unknown
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gc.convert_to_tensor(grad); line = sys._getframe().f_lineno  # noqa: E702
    assert _warned_here(record, "IndexedSlices") == [(__file__, line)]


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_run_time_errors_end_at_the_users_call(backend, monkeypatch):
    """The traceback of a run-time error is the user's frames and Session.run, not the
    executor's and compiler's; the message names the op and the line that created it.
    GRAPHC_TRACEBACK=1 keeps graphc's frames for debugging graphc itself."""
    import traceback
    params = gc.constant([1.0, 2.0, 3.0])
    idx = gc.placeholder(gc.int32, [None])
    out = gc.gather(params, idx); line = sys._getframe().f_lineno  # noqa: E702
    sess = gc.Session(config=gc.ConfigProto(backend=backend))
    feed = {idx: np.array([0, 5], np.int32)}
    for _ in range(2):  # the first run compiles, the second takes the fast path
        with pytest.raises(gc.errors.InvalidArgumentError) as info:
            sess.run(out, feed)
        frames = traceback.extract_tb(info.value.__traceback__)
        assert [f.filename for f in frames] == [__file__, gc.Session.run.__code__.co_filename]
        assert frames[-1].name == "run" and info.value.__cause__ is None
        assert f'File "{__file__}", line {line}' in str(info.value)
        assert "GatherV2" in str(info.value)
    monkeypatch.setenv("GRAPHC_TRACEBACK", "1")
    with pytest.raises(gc.errors.InvalidArgumentError) as info:
        sess.run(out, feed)
    assert len(traceback.extract_tb(info.value.__traceback__)) > 2


@pytest.mark.backends("compiled", "gpu_emulated")
def test_a_signature_is_planned_and_keyed_once_for_its_variants(backend, monkeypatch):
    """Feeds of new shapes (a batch of 1, an empty one) compile new variants of the
    signature's stage; its stages are planned, and the graph walked for the spec cache's
    key, once."""
    from graphc import compiled_executor
    from graphc.compiler import spec_cache
    plans = []
    original = compiled_executor._plan_stages
    monkeypatch.setattr(compiled_executor, "_plan_stages",
                        lambda *a, **k: plans.append(1) or original(*a, **k))
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [None, 3])
        y = gc.reduce_sum(x * x, axis=1) + gc.reduce_max(x)
    walks = spec_cache.stats["graph_summaries"]
    with gc.Session(graph=g) as sess:
        for rows in (4, 1, 0, 7):
            a = np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) / 5 - 1
            expected = (a * a).sum(axis=1) + (a.max() if rows else 0.0)  # 0 rows: empty
            np.testing.assert_allclose(sess.run(y, {x: a}), expected, rtol=1e-12)
        assert sess.compile_count >= 2
    assert len(plans) == 1
    assert spec_cache.stats["graph_summaries"] == walks + 1


def _step_with_a_counter(depth=6):
    """A training step of a `depth`-layer tanh MLP that also counts its runs with an
    Assign: (graph, x, loss, train, counter assign, the initial weights)."""
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal((4, 4)) / 2 for _ in range(depth)]
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [None, 4], name="x")
        h = x
        for w in weights:
            h = gc.tanh(gc.matmul(h, gc.Variable(w)))
        loss = gc.reduce_mean(h * h)
        train = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
        runs = gc.Variable(np.zeros((), np.float64), name="runs")
        count = gc.assign(runs, runs + 1.0, name="count")
    return g, x, loss, train, count, weights


def _mlp_loss(a, weights):
    h = a
    for w in weights:
        h = np.tanh(h @ w)
    return np.mean(h * h)


@pytest.mark.backends("compiled")
def test_planning_a_native_step_asks_is_host_op_only_of_the_types_it_decides(monkeypatch):
    """Whether a signature is one native stage reads every op's dtypes at once; only the
    ops whose type is_host_op decides by more than dtypes (an Assign here) are asked it
    (it was asked of every op: a warm first run's plan of a deep model)."""
    from graphc import compiled_executor
    asked = []
    original = compiled_executor.is_host_op
    monkeypatch.setattr(compiled_executor, "is_host_op",
                        lambda op, *a, **k: asked.append(op.name) or original(op, *a, **k))
    g, x, loss, train, count, weights = _step_with_a_counter()
    a = np.linspace(-1, 1, 12).reshape(3, 4)
    with gc.Session(graph=g) as sess:
        sess.run(gc.global_variables_initializer())
        asked.clear()
        got, _, runs = sess.run([loss, train, count], {x: a})
        np.testing.assert_allclose(got, _mlp_loss(a, weights), rtol=1e-12)
        assert runs == 1.0
    assert asked == ["count"]


@pytest.mark.backends("compiled", "reference")
def test_a_fed_string_read_by_a_numeric_op_makes_a_host_stage(backend):
    # no op's output is a string: only an input says Shape runs on the host
    g = gc.Graph()
    with g.as_default():
        s = gc.placeholder(gc.string, [None], name="s")
        v = gc.placeholder(gc.float64, [None], name="v")
        y = gc.cast(gc.shape(s)[0], gc.float64) * gc.reduce_sum(v * v)
    with gc.Session(graph=g) as sess:
        got = sess.run(y, {s: np.array([b"a", b"bc", b""], object),
                           v: np.array([1.0, 2.0, 0.5])})
    assert got == 3 * 5.25


def test_pruning_reads_the_inputs_of_ops_without_variable_references_as_they_are(
        monkeypatch):
    """prune asks value_inputs only of the ops that may take a variable by reference
    (their OpDef's ref inputs, or the attr a While or If lists them in); a variable
    only assigned is not in the pruned ops, one read is."""
    from graphc.framework import subgraph
    asked = []
    original = subgraph.value_inputs
    monkeypatch.setattr(subgraph, "value_inputs",
                        lambda op: asked.append(op.name) or original(op))
    g, x, loss, train, count, _ = _step_with_a_counter()
    with g.as_default():
        w = gc.Variable(np.ones(2), name="w")
        only_assigned = gc.assign(w, [2.0, 3.0], name="only_assigned")
    pruned = subgraph.prune([loss], [count.op, only_assigned.op], [x])
    names = {op.name for op in pruned}
    assert {"count", "only_assigned", "runs"} <= names and "w" not in names
    assert sorted(asked) == ["count", "only_assigned"]
    assert [op.name for op in pruned] == \
        [op.name for op in sorted(pruned, key=lambda op: op._id)]
