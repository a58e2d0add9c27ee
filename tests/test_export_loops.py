"""gc.export of loops whose arrays are sized by their trip count (raw_rnn's emitted outputs
and the values its gradient keeps: stacks growing on the heap, rows a run dim set during
the run), run by the standalone runtime with the values of the in-process run and of a
NumPy reference; a file whose run dims were tampered with is refused."""
import hashlib
import json
import os
import struct

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.export import export
from runtime import file_format
from tests.native_loops import np_raw_lstm, raw_lstm
from tests.runtime_alone import run_without_graphc
from tests.test_dynamic_rnn import weights

T, B, D, H = 7, 3, 4, 5
FLOATS = [np.float32, np.float64]
# the loop runs max(lengths) times: trip counts 0, 1 and 7
LENGTHS = {0: [0, 0, 0], 1: [1, 0, 1], 7: [7, 3, 0]}


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")


def tol(dtype):
    return dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def feeds(dtype, trips):
    xv = np.random.default_rng(trips).standard_normal((T, B, D)).astype(dtype)
    return {"x": xv, "lengths": np.array(LENGTHS[trips], np.int32)}


def session_and_weights(dtype):
    g = gc.Graph()
    with g.as_default():
        x, lengths, cell, loss, h = raw_lstm(dtype, (T, B, D), H)
        grads = gc.gradients(loss, [x] + cell.variables)
        sess = gc.Session(graph=g)
        sess.run(gc.global_variables_initializer())
        w = weights(sess, cell, "raw/rnn/basic_lstm_cell/")
    return sess, x, lengths, cell, loss, h, grads, w


@pytest.fixture(scope="module", params=FLOATS, ids=["f32", "f64"])
def exported(request, tmp_path_factory):
    """The forward and gradient files of raw_lstm in one dtype, with the Session."""
    dtype = request.param
    sess, x, lengths, cell, loss, h, grads, w = session_and_weights(dtype)
    folder = tmp_path_factory.mktemp("loops")
    inputs = {"x": x, "lengths": lengths}
    forward = export(sess, str(folder / "forward.gcx"), inputs, {"loss": loss, "h": h})
    gradient = export(sess, str(folder / "gradient.gcx"), inputs,
                      {"loss": loss, "dx": grads[0], "dkernel": grads[1], "dbias": grads[2]})
    return dtype, sess, (x, lengths), (loss, h, grads), w, forward, gradient


@pytest.mark.parametrize("trips", sorted(LENGTHS))
def test_raw_rnn_forward_file_matches_session_and_numpy(exported, trips):
    dtype, sess, (x, lengths), (loss, h, _), w, forward, _ = exported
    fed = feeds(dtype, trips)
    got = runtime.load(forward).run(fed)
    in_process = sess.run([loss, h], {x: fed["x"], lengths: fed["lengths"]})
    want_loss, want_h = np_raw_lstm(w, fed["x"], fed["lengths"])
    assert got["loss"].dtype == dtype and got["h"].shape == (B, H)
    np.testing.assert_allclose(got["loss"], in_process[0], **tol(dtype))
    np.testing.assert_allclose(got["h"], in_process[1], **tol(dtype))
    np.testing.assert_allclose(got["loss"], want_loss, **tol(dtype))
    np.testing.assert_allclose(got["h"], want_h, **tol(dtype))


@pytest.mark.parametrize("trips", sorted(LENGTHS))
def test_raw_rnn_gradient_file_matches_session_and_differences(exported, trips):
    """The gradient's loop reads the stacks the forward loop grew; d loss / d x against
    central differences of the NumPy loss (float64)."""
    dtype, sess, (x, lengths), (loss, _, grads), w, _, gradient = exported
    fed = feeds(dtype, trips)
    got = runtime.load(gradient).run(fed)
    in_process = sess.run([loss] + grads, {x: fed["x"], lengths: fed["lengths"]})
    for name, want in zip(["loss", "dx", "dkernel", "dbias"], in_process):
        np.testing.assert_allclose(got[name], want, **tol(dtype))
    if dtype != np.float64:
        return
    eps, xv = 1e-6, fed["x"]
    numeric = np.zeros_like(xv)
    for i in np.ndindex(xv.shape):
        up, down = xv.copy(), xv.copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (np_raw_lstm(w, up, fed["lengths"])[0] -
                      np_raw_lstm(w, down, fed["lengths"])[0]) / (2 * eps)
    np.testing.assert_allclose(got["dx"], numeric, rtol=1e-6, atol=1e-8)
    if trips == 0:  # no step reads x
        assert not got["dx"].any()


@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_training_step_file_updates_its_state_as_the_session(dtype, tmp_path):
    """A gradient-descent step exported: the cell's variables are the file's state, each
    run one step, as the Session's steps."""
    g = gc.Graph()
    with g.as_default():
        x, lengths, cell, loss, _ = raw_lstm(dtype, (T, B, D), H)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        with gc.control_dependencies([train]):
            stepped = gc.identity(loss)
        sess = gc.Session(graph=g)
        sess.run(gc.global_variables_initializer())
    path = export(sess, str(tmp_path / "step.gcx"), {"x": x, "lengths": lengths},
                  {"loss": stepped})
    m = runtime.load(path)
    names = [v.op.name for v in cell.variables]
    assert sorted(m.state) == sorted(names)
    for trips in (7, 0, 1):
        fed = feeds(dtype, trips)
        got = m.run(fed)["loss"]
        want = sess.run(stepped, {x: fed["x"], lengths: fed["lengths"]})
        np.testing.assert_allclose(got, want, **tol(dtype))
        for v, name in zip(sess.run(cell.variables), names):
            np.testing.assert_allclose(m.state[name], v, **tol(dtype))


def test_files_run_where_graphc_cannot_be_imported(exported, tmp_path):
    """The forward and gradient files, each trip count, in a process where graphc,
    kernels and networkx cannot be imported."""
    dtype, sess, (x, lengths), (loss, h, grads), _, forward, gradient = exported
    cases = []
    for trips in sorted(LENGTHS):
        fed = feeds(dtype, trips)
        values = sess.run([loss, h] + grads, {x: fed["x"], lengths: fed["lengths"]})
        for path, names, want in ((forward, ["loss", "h"], values[:2]),
                                  (gradient, ["loss", "dx", "dkernel", "dbias"],
                                   values[:1] + values[2:])):
            case = str(tmp_path / f"case_{len(cases)}.npz")
            np.savez(case, **{"in_" + k: v for k, v in fed.items()},
                     **{"out_" + n: v for n, v in zip(names, want)})
            cases.append((path, case))
    out = run_without_graphc(f"""
        import numpy as np
        import runtime
        for path, case in {cases!r}:
            data = np.load(case)
            m = runtime.load(path)
            out = m.run({{k[3:]: data[k] for k in data.files if k.startswith("in_")}})
            for k in data.files:
                if k.startswith("out_"):
                    np.testing.assert_allclose(out[k[4:]], data[k], **{tol(dtype)!r})
        print("ok", len({cases!r}))
    """, tmp_path, timeout=300)
    assert out.strip() == f"ok {len(cases)}"


def _rewrite_header(path, out, change):
    """A copy of file `path` at `out` whose header JSON `change` edited (kept to its size,
    padded with spaces) and whose checksum is made anew: damage on purpose, which only
    the verifier can catch."""
    data = bytearray(open(path, "rb").read())
    size = struct.unpack_from("<Q", data, 16)[0]
    header = json.loads(bytes(data[24:24 + size]))
    change(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= size
    data[24:24 + size] = text + b" " * (size - len(text))
    body = bytes(data[:-file_format.CHECKSUM_BYTES])
    open(out, "wb").write(body + hashlib.sha256(body).digest())
    return out


def test_a_file_with_its_run_dims_tampered_with_is_refused(exported, tmp_path):
    """The trip count's slot is part of the interface the code was compiled for: a
    header claiming fewer run dims (the code would write its trip count past the
    array the runtime gives it) is refused before anything runs."""
    forward = exported[5]
    specs = file_format.read(forward).header["executables"]
    assert [s["run_dims"] for s in specs] == [1]  # the loop's trip count
    bad = _rewrite_header(forward, str(tmp_path / "bad.gcx"),
                          lambda h: h["executables"][0].__setitem__("run_dims", 0))
    with pytest.raises(file_format.FileFormatError, match="run_dims"):
        runtime.load(bad)
    untouched = _rewrite_header(forward, str(tmp_path / "same.gcx"), lambda h: None)
    runtime.load(untouched).run(feeds(exported[0], 1))  # the rewrite alone is no damage


def test_gpu_file_of_raw_rnn_runs_emulated(native, tmp_path):
    sess, x, lengths, cell, loss, h, grads, w = session_and_weights(np.float32)
    path = export(sess, str(tmp_path / "gpu.gcx"), {"x": x, "lengths": lengths},
                  {"loss": loss, "dx": grads[0]}, target="gpu")
    m = runtime.load(path, device="emulated")
    for trips in sorted(LENGTHS):
        fed = feeds(np.float32, trips)
        got = m.run(fed)
        want = sess.run([loss, grads[0]], {x: fed["x"], lengths: fed["lengths"]})
        np.testing.assert_allclose(got["loss"], want[0], **tol(np.float32))
        np.testing.assert_allclose(got["dx"], want[1], **tol(np.float32))


def test_a_fetched_stack_names_the_loop_and_the_line(tmp_path):
    """The emitted outputs themselves have the trip count for rows, which the runtime
    would need before the run to size the fetch: refused, naming the op and line."""
    sess, x, lengths, *_ = session_and_weights(np.float32)
    stacked = sess.graph.get_tensor_by_name("TensorArrayStack:0")
    # the line that made the stack: raw_lstm's emit_ta.stack(), in tests/native_loops.py
    with pytest.raises(ValueError, match=r"(?s)raw/rnn/while.*TensorArrayStack.*"
                                         r"native_loops.py\", line \d+, in raw_lstm"):
        export(sess, str(tmp_path / "a.gcx"), {"x": x, "lengths": lengths},
               {"outputs": stacked})
    assert not os.path.exists(tmp_path / "a.gcx")


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_loop_over_an_input_of_unknown_dims_unstacked_exports(dtype, tmp_path):
    """TensorArray(size=n).unstack(x) for x [None, None, 3]: the array takes its element
    dims from x at run time (a tensor of them), so the loop reading it is native and the
    file runs any batch and length, its gradient too."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(dtype, [None, None, 3], name="x")
        n = gc.shape(x)[0]
        ta = gc.TensorArray(dtype, size=n).unstack(x)
        _, acc = gc.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + gc.tanh(ta.read(i))),
                               [gc.constant(0), gc.zeros_like(x[0])])
        out = gc.reduce_sum(acc * acc)
        dx = gc.gradients(out, [x])[0]
        sess = gc.Session(graph=g)
    m = runtime.load(export(sess, str(tmp_path / "sum.gcx"), {"x": x}, {"out": out, "dx": dx}))
    for shape in [(7, 2, 3), (1, 4, 3), (1, 1, 3)]:
        xv = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
        got = m.run({"x": xv})
        x64 = xv.astype(np.float64)
        acc64 = np.tanh(x64).sum(0)
        np.testing.assert_allclose(got["out"], (acc64 * acc64).sum(), **tol(dtype))
        np.testing.assert_allclose(got["dx"], 2 * acc64 * (1 - np.tanh(x64) ** 2), **tol(dtype))
        np.testing.assert_allclose(got["dx"], sess.run(dx, {x: xv}), **tol(dtype))
