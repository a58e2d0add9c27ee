"""gc.export -> runtime.load: same outputs as the Session, state kept, no compiler needed."""
import os
import time

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.export import export
from runtime import file_format
from tests.runtime_alone import run_without_graphc


def build_mlp(seed=0):
    rng = np.random.default_rng(seed)
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 6], name="x")
        w1 = gc.Variable(rng.standard_normal((6, 16)).astype(np.float32), name="w1")
        b1 = gc.Variable(rng.standard_normal(16).astype(np.float32), name="b1")
        w2 = gc.Variable(rng.standard_normal((16, 5)).astype(np.float32), name="w2")
        b2 = gc.Variable(np.zeros(5, np.float32), name="b2")
        hidden = gc.nn.relu(gc.matmul(x, w1) + b1)
        logits = gc.add(gc.matmul(hidden, w2), b2, name="logits")
        probs = gc.nn.softmax(logits, name="probs")
        labels = gc.placeholder(gc.int32, [None], name="labels")
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = gc.global_variables_initializer()
    return g, x, labels, probs, train, init


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    g, x, labels, probs, train, init = build_mlp()
    sess = gc.Session(graph=g)
    sess.run(init)
    rng = np.random.default_rng(1)
    for _ in range(3):  # the file must hold the trained values, not the initial ones
        sess.run(train, {x: rng.standard_normal((8, 6)).astype(np.float32),
                         labels: rng.integers(0, 5, 8).astype(np.int32)})
    path = str(tmp_path_factory.mktemp("export") / "mlp.gcx")
    export(sess, path, inputs={"x": x}, outputs={"probs": probs})
    return sess, x, probs, path


@pytest.mark.parametrize("batch", [1, 7, 33])
def test_loaded_model_matches_session(trained, batch):
    sess, x, probs, path = trained
    m = runtime.load(path)
    xv = np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32)
    out = m.run({"x": xv})["probs"]
    expected = sess.run(probs, {x: xv})
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    if sess.backend == "compiled":  # one executor: the same code gives the same bits
        np.testing.assert_array_equal(out, expected)


def test_session_is_compiled_for_bit_identity(trained):
    """Bit-identity above is only asserted when the Session runs compiled code."""
    sess = trained[0]
    if sess.backend != "compiled":
        pytest.skip("the Session runs the reference backend here: outputs were compared "
                    "within 1e-6, bit-identity needs the compiled backend")


def test_signature_and_contents(trained):
    path = trained[3]
    m = runtime.load(path)
    assert [(i.name, i.dtype, i.shape) for i in m.inputs] == [("x", np.float32, (None, 6))]
    assert [(o.name, o.dtype, o.shape) for o in m.outputs] == [("probs", np.float32, (None, 5))]
    assert m.state == {}  # every variable only read: frozen as constants
    h = file_format.read(path).header
    main = h["executables"][0]
    assert main["variables"] == []
    debug = main["debug"]
    assert debug["kernels"] and debug["graph_before"]["nodes"] and debug["graph_after"]
    assert "fusion" in debug["pass_counts"] and "fusion" in debug["pass_texts"]
    assert any(n["type"] == "Const" for n in debug["graph_before"]["nodes"])
    if main["guards"]:  # a batch of 1 has its own executable
        assert len(h["executables"]) == 2


def test_load_time(trained):
    path = trained[3]
    start = time.perf_counter()
    m = runtime.load(path)
    elapsed = time.perf_counter() - start
    print(f"\nload time of a small MLP file: {elapsed * 1e3:.1f} ms "
          f"(LLVM compile {m.compile_seconds * 1e3:.1f} ms)")
    assert elapsed < 5


def test_assigned_variables_are_state(tmp_path):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [3], name="x")
        total = gc.Variable(np.zeros(3, np.float32), name="total")
        scale = gc.Variable(np.float32(2.0), name="scale")
        acc = gc.assign_add(total, x * scale)
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        sess.run(acc, {x: np.ones(3, np.float32)})
        path = export(sess, str(tmp_path / "acc.gcx"), {"x": x}, {"total": acc})
    m = runtime.load(path)
    assert set(m.state) == {"total"}  # scale is only read: frozen
    np.testing.assert_array_equal(m.state["total"], [2, 2, 2])  # the value at export time
    out = m.run({"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(out["total"], [4, 6, 8])
    m.run({"x": np.array([1, 1, 1], np.float32)})
    np.testing.assert_array_equal(m.state["total"], [6, 8, 10])


def test_export_errors(tmp_path):
    g, x, labels, probs, train, init = build_mlp()
    sess = gc.Session(graph=g)
    with pytest.raises(gc.errors.FailedPreconditionError, match="uninitialized value"):
        export(sess, str(tmp_path / "a.gcx"), {"x": x}, {"probs": probs})
    sess.run(init)
    with pytest.raises(ValueError, match="unknown target 'gpu9'"):
        export(sess, str(tmp_path / "a.gcx"), {"x": x}, {"probs": probs}, target="gpu9")
    with pytest.raises(TypeError, match="must be a dict"):
        export(sess, str(tmp_path / "a.gcx"), [x], {"probs": probs})
    with pytest.raises(ValueError, match="outputs is empty"):
        export(sess, str(tmp_path / "a.gcx"), {"x": x}, {})
    with gc.Graph().as_default():
        other = gc.placeholder(gc.float32, [None, 6])
    with pytest.raises(ValueError, match="not in the session's graph"):
        export(sess, str(tmp_path / "a.gcx"), {"x": other}, {"probs": probs})
    assert not os.path.exists(tmp_path / "a.gcx")


def test_runtime_alone_loads_and_runs_the_file(trained, tmp_path):
    """A process where graphc, kernels and networkx cannot be imported runs the file."""
    sess, x, probs, path = trained
    xv = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", xv)
    np.save(tmp_path / "expected.npy", sess.run(probs, {x: xv}))
    out = run_without_graphc(f"""
        import numpy as np
        import runtime
        m = runtime.load({path!r})
        out = m.run({{"x": np.load({str(tmp_path / 'x.npy')!r})}})["probs"]
        np.testing.assert_allclose(out, np.load({str(tmp_path / 'expected.npy')!r}),
                                   rtol=1e-6, atol=1e-7)
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory):
    """doubled = 2x (float32 [None, 3]), total = sum over axis 1 of x + k (k int64)."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3], name="x")
        k = gc.placeholder(gc.int64, [], name="k")
        doubled = gc.multiply(x, 2.0, name="doubled")
        total = gc.add(gc.reduce_sum(x, 1), gc.cast(k, gc.float32), name="total")
    sess = gc.Session(graph=g)
    path = str(tmp_path_factory.mktemp("ort") / "two.gcx")
    export(sess, path, inputs={"x": x, "k": k},
           outputs={"doubled": doubled, "total": total})
    return path


@pytest.mark.parametrize("batch", [0, 1, 7])
def test_run_with_output_names_returns_a_list(two_outputs, batch):
    m = runtime.load(two_outputs)
    xv = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
    feeds = {"x": xv, "k": np.int64(3)}
    doubled, total = xv * np.float32(2), xv.sum(axis=1, dtype=np.float32) + np.float32(3)
    out = m.run(None, feeds)
    assert isinstance(out, list) and len(out) == 2
    np.testing.assert_array_equal(out[0], doubled)
    np.testing.assert_allclose(out[1], total, rtol=1e-6)
    only = m.run(["total"], feeds)
    assert len(only) == 1
    np.testing.assert_allclose(only[0], total, rtol=1e-6)
    swapped = m.run(["total", "doubled"], feeds)
    np.testing.assert_array_equal(swapped[1], doubled)
    as_dict = m.run(feeds)  # the dict form is unchanged
    assert list(as_dict) == ["doubled", "total"]
    np.testing.assert_array_equal(as_dict["doubled"], doubled)


def test_run_rejects_unknown_output_names(two_outputs):
    m = runtime.load(two_outputs)
    feeds = {"x": np.zeros((2, 3), np.float32), "k": np.int64(0)}
    with pytest.raises(runtime.FeedError, match="unknown output.*'nope'.*'doubled', 'total'"):
        m.run(["nope"], feeds)
    with pytest.raises(runtime.FeedError, match="list of output names"):
        m.run("total", feeds)
    with pytest.raises(runtime.FeedError, match=r"run\(output_names, feeds\).*got list"):
        m.run(["total"])


def test_get_inputs_and_outputs(two_outputs):
    m = runtime.load(two_outputs)
    inputs, outputs = m.get_inputs(), m.get_outputs()
    assert [(i.name, i.dtype, i.shape) for i in inputs] == [
        ("x", np.float32, (None, 3)), ("k", np.int64, ())]
    assert [i.type for i in inputs] == ["tensor(float)", "tensor(int64)"]
    assert [(o.name, o.shape) for o in outputs] == [("doubled", (None, 3)),
                                                    ("total", (None,))]
    assert repr(inputs[0]) == "TensorInfo(name='x', dtype=float32, shape=[None, 3])"
    assert repr(outputs[1]) == "TensorInfo(name='total', dtype=float32, shape=[None])"


def test_feeds_that_would_lose_values_are_refused(two_outputs):
    m = runtime.load(two_outputs)
    x64 = np.full((2, 3), 0.1, np.float64)
    with pytest.raises(runtime.FeedError, match="input 'x' is float32 but was fed a float64"):
        m.run({"x": x64, "k": np.int64(1)})
    with pytest.raises(runtime.FeedError, match="input 'x'"):
        m.run(None, {"x": np.ones((2, 3), np.int32), "k": np.int64(1)})
    with pytest.raises(runtime.FeedError, match="input 'k'"):
        m.run(None, {"x": np.ones((2, 3), np.float32), "k": 1.5})
    # lossless conversions and plain Python values still work, as with feed_dict
    out = m.run(["total"], {"x": np.ones((2, 3), np.float16), "k": np.int32(2)})
    np.testing.assert_array_equal(out[0], np.array([5, 5], np.float32))
    out = m.run(["total"], {"x": [[0.5, 0.25, 0.25]], "k": 1})
    np.testing.assert_array_equal(out[0], np.array([2], np.float32))
