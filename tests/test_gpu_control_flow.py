"""While and If on the GPU target (backends/gpu/control_flow.py, runtime/gpu/control_flow.py):
the bodies' kernels launched from the host on device buffers, run here on the emulated GPU
against values written with NumPy, with the ops' host kernels made to fail so that a pass
proves no iteration ran in Python; trip counts 0, 1, 7 and data-dependent ones, float32
and float64. The device's copy counters show that only the predicate leaves the device
per iteration, and the bodies' PTX assembles with ptxas."""
import copy
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc.compiled_executor import compile_gpu_executable
from graphc.framework.op_def import get_op_def
from runtime.gpu import EmulatedDevice, GpuExecutable
from tests.test_native_control_flow import np_tanh_loop_gradients

FLOATS = [np.float32, np.float64]
W = np.linspace(-0.5, 0.5, 9).reshape(3, 3)


@pytest.fixture(autouse=True)
def gpu_emulated(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "gpu_emulated")
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")  # a CPU fallback is an error


@pytest.fixture
def native(monkeypatch):
    """The host kernels of While and If fail: what passes ran on the (emulated) GPU."""
    def host_kernel(*args, **kwargs):
        raise AssertionError("a While or If ran on the host")
    for op_type in ("While", "If"):
        monkeypatch.setattr(get_op_def(op_type), "kernel", host_kernel)


def tol(dtype):
    return dict(rtol=2e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)


def session_run(fetches, feed=None):
    """The fetches of one run compiled once, as one stage (no host stage, no fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            before = sess.compile_count
            out = sess.run(fetches, feed)
            assert sess.compile_count - before == 1
            for exe in sess._cache.values():
                assert [type(s).__name__ for s in getattr(exe, "stages", ["x"])] in (
                    ["NativeStage"], ["x"])
    return out


def tanh_loop(dtype):
    x = gc.placeholder(dtype, [None, 3])
    n = gc.placeholder(gc.int32, [])
    w = gc.constant(W.astype(dtype))
    i, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [gc.constant(0), x * 0.5])
    return x, n, i, h


def np_tanh_loop(xv, trips):
    want = xv * 0.5
    for _ in range(trips):
        want = np.tanh(want @ W.astype(xv.dtype) + xv)
    return want


# ------------------------------------------------------------------------ while_loop
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_while_loop_over_a_run_time_trip_count(native, dtype, trips):
    x, n, i, h = tanh_loop(dtype)
    out = gc.reduce_sum(h, axis=1) * 2.0  # device code after the loop too
    xv = np.arange(-6, 9, dtype=dtype).reshape(5, 3) / 4
    want = np_tanh_loop(xv, trips)
    got_i, got_h, got_out = session_run([i, h, out], {x: xv, n: trips})
    assert got_i == trips and got_h.dtype == dtype
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    np.testing.assert_allclose(got_out, want.sum(1) * 2.0, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_data_dependent_trip_count_and_batch_sizes(native, dtype):
    x = gc.placeholder(dtype, [None])
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 100.0, lambda v: v * 1.5 + 1.0, [x])
    with gc.Session() as sess:
        for xv in (np.array([1.0, 2.0], dtype), np.array([3.0, -1.0, 0.5, 2.0], dtype),
                   np.array([200.0, 1.0, 2.0], dtype), np.array([-4.0, 10.0], dtype)):
            want = xv.copy()
            while want.sum() < 100.0:
                want = want * dtype(1.5) + dtype(1.0)
            np.testing.assert_allclose(sess.run(y, {x: xv}), want, **tol(dtype))
        assert sess.compile_count == 1


def test_maximum_iterations_and_counter(native):
    x = gc.placeholder(gc.float64, [2])
    i, h = gc.while_loop(lambda i, h: i < 10, lambda i, h: (i + 1, gc.sin(h) * 1.5),
                         [0, x], maximum_iterations=3)
    xv = np.array([0.4, -1.1])
    want = xv
    for _ in range(3):
        want = np.sin(want) * 1.5
    got_i, got_h = session_run([i, h], {x: xv})
    assert got_i == 3
    np.testing.assert_allclose(got_h, want, rtol=1e-14)


def test_nested_loops_with_an_inner_trip_count_set_by_the_outer_loop(native):
    n = gc.placeholder(gc.int32, [])

    def outer(i, total):
        _, inner = gc.while_loop(lambda j, s: j < i,
                                 lambda j, s: (j + 1, s + gc.cast(j, gc.float64)),
                                 [0, gc.constant(0.0, gc.float64)])
        return i + 1, total + inner
    _, total = gc.while_loop(lambda i, t: i < n, outer, [0, gc.constant(0.0, gc.float64)])
    for nv in (0, 1, 7):
        assert session_run(total, {n: nv}) == sum(sum(range(i)) for i in range(nv))


def test_variable_reads_and_assigns_in_the_body_in_tf1_order(native):
    v = gc.Variable(1.0, dtype=gc.float64)
    before = v.read_value() * 1.0

    def body(i, acc):
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return i + 1, acc + v.read_value()
    _, acc = gc.while_loop(lambda i, a: i < 4, body, [0, gc.constant(0.0, gc.float64)])
    with gc.control_dependencies([acc]):
        after = v.read_value() * 1.0
    assert tuple(session_run([before, acc, after])) == (1.0, 2.0 + 3.0 + 4.0 + 5.0, 5.0)


def test_loop_outputs_that_the_body_does_not_compute(native):
    """A body returning its input, a constant or a captured feed: copies on the device."""
    x = gc.placeholder(gc.float32, [3])
    c = gc.placeholder(gc.float32, [3])
    i, a, b, k = gc.while_loop(lambda i, a, b, k: i < 5,
                               lambda i, a, b, k: (i + 1, a, c, gc.constant([7.0, 8.0, 9.0])),
                               [0, x, x, x])
    xv, cv = np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0, 6.0], np.float32)
    got = session_run([i, a, b, k], {x: xv, c: cv})
    assert got[0] == 5
    np.testing.assert_array_equal(got[1], xv)
    np.testing.assert_array_equal(got[2], cv)
    np.testing.assert_array_equal(got[3], [7.0, 8.0, 9.0])


def test_empty_loop_variables_and_branch_outputs(native):
    x = gc.placeholder(gc.float32, [0])
    y = gc.while_loop(lambda v: gc.reduce_sum(v) > 1.0, lambda v: v * 2.0, [x])
    z = gc.cond(gc.size(x) > 0, lambda: x + 1.0, lambda: x * 3.0)
    got_y, got_z = session_run([y, z], {x: np.zeros([0], np.float32)})
    assert got_y.shape == (0,) and got_z.shape == (0,)


def test_error_inside_a_loop_names_the_op_and_line_and_stops_it(native):
    """The failed check stops the loop at once (its status is read with the predicate):
    the cond below would never end on the garbage a failed gather leaves."""
    table = gc.constant([1.0, 2.0, 3.0])
    n = gc.placeholder(gc.int32, [])
    _, s = gc.while_loop(lambda i, s: gc.logical_or(i < n, s > 1e30),
                         lambda i, s: (i + 1, s + gc.gather(table, i, name="lookup")),
                         [0, 0.0])
    with gc.Session() as sess:
        assert sess.run(s, {n: 3}) == 6.0
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(s, {n: 5})
        assert sess.run(s, {n: 2}) == 3.0  # the status was reset
    assert "lookup" in str(e.value) and "test_gpu_control_flow.py" in str(e.value)
    assert 'gc.gather(table, i, name="lookup")' in str(e.value)


# ----------------------------------------------------------------------------- cond
@pytest.mark.parametrize("dtype", FLOATS)
def test_cond_runs_only_the_taken_branch(native, dtype):
    x = gc.placeholder(dtype, [None, 3])
    p = gc.placeholder(gc.bool, [])
    v = gc.Variable(0.0, dtype=dtype)

    def then():
        with gc.control_dependencies([gc.assign_add(v, 1.0)]):
            return gc.exp(x) * 2.0, gc.reduce_sum(x, axis=0)

    def other():
        with gc.control_dependencies([gc.assign_add(v, 10.0)]):
            return x - 1.0, gc.reduce_max(x, axis=0)
    a, b = gc.cond(p, then, other)
    xv = np.linspace(-1, 1, 12).astype(dtype).reshape(4, 3)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got_a, got_b = sess.run([a, b], {x: xv, p: True})
        np.testing.assert_allclose(got_a, np.exp(xv) * 2.0, **tol(dtype))
        np.testing.assert_allclose(got_b, xv.sum(0), **tol(dtype))
        got_a, got_b = sess.run([a, b], {x: xv, p: False})
        np.testing.assert_allclose(got_a, xv - 1.0, **tol(dtype))
        np.testing.assert_allclose(got_b, xv.max(0), **tol(dtype))
        assert sess.compile_count == 2  # the initializer's run and this one's
        assert sess.run(v) == 11.0  # each branch's assign ran once, when it was taken


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_cond_inside_a_loop_and_a_loop_inside_cond(native, dtype, trips):
    n = gc.placeholder(gc.int32, [])
    x = gc.placeholder(dtype, [2])

    def body(i, h):
        return i + 1, gc.cond(gc.equal(i % 2, 0), lambda: h * 2.0, lambda: h - 1.0)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    y = gc.cond(n > 3, lambda: gc.while_loop(lambda v: gc.reduce_sum(v) < 50.0,
                                             lambda v: v + 3.0, [h]),
                lambda: h * 0.5)
    xv = np.array([1.5, -0.5], dtype)
    want = xv.copy()
    for i in range(trips):
        want = want * 2 if i % 2 == 0 else want - 1
    got_h, got_y = session_run([h, y], {n: trips, x: xv})
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    if trips > 3:
        while want.sum() < 50.0:
            want = want + 3
    else:
        want = want * 0.5
    np.testing.assert_allclose(got_y, want, **tol(dtype))


# ---------------------------------------------------------------------- gradients
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("limit,stop", [(0, 9), (1, 9), (7, 9), (9, 4)])
def test_while_loop_gradient_with_maximum_iterations(native, dtype, limit, stop):
    """The forward loop writes row k of its stacks in iteration k on the device; the
    backward loop reads them back in reverse."""
    x = gc.placeholder(dtype, [None, 3])
    n = gc.placeholder(gc.int32, [])
    m = gc.placeholder(gc.int32, [])
    wv = W.astype(dtype)
    w = gc.Variable(wv)
    _, h = gc.while_loop(lambda i, h: i < m, lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [0, x * 0.5], maximum_iterations=n)
    loss = gc.reduce_sum(h * h)
    grads = gc.gradients(loss, [x, w])
    xv = np.arange(-6, 9, dtype=dtype).reshape(5, 3) / 4
    got = session_run([loss] + grads, {x: xv, n: limit, m: stop})
    for g, want in zip(got, np_tanh_loop_gradients(xv, wv, limit, stop)):
        np.testing.assert_allclose(g, want, **tol(dtype))


def test_cond_gradient_takes_only_the_taken_branch(native):
    x = gc.placeholder(gc.float64, [3])
    p = gc.placeholder(gc.bool, [])
    y = gc.cond(p, lambda: gc.sin(x) * x, lambda: gc.exp(x))
    g = gc.gradients(gc.reduce_sum(y), x)[0]
    xv = np.array([0.3, -1.2, 2.0])
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(g, {x: xv, p: True}),
                                   np.cos(xv) * xv + np.sin(xv), rtol=1e-13)
        np.testing.assert_allclose(sess.run(g, {x: xv, p: False}), np.exp(xv), rtol=1e-13)


# ------------------------------------------------------------------ device traffic
def test_only_the_predicate_leaves_the_device_per_iteration(native):
    x, n, _, h = tanh_loop(np.float32)
    xv = np.ones((4, 3), np.float32)
    with gc.Session() as sess:
        sess.run(h, {x: xv, n: 0})
        device = sess._gpu
        counts = {}
        for trips in (1, 7):
            before = (device.copies_in, device.copies_out, device.launches)
            np.testing.assert_allclose(sess.run(h, {x: xv, n: trips}),
                                       np_tanh_loop(xv, trips), rtol=2e-6, atol=1e-6)
            counts[trips] = [now - then for now, then in zip(
                (device.copies_in, device.copies_out, device.launches), before)]
    copies_in, copies_out, launches = (counts[7][k] - counts[1][k] for k in range(3))
    assert copies_in == 0       # nothing goes in per iteration: the state stays there
    assert copies_out == 6      # one predicate (with the status) per iteration
    assert launches > 6         # the cond's and the body's kernels ran on the device


# ------------------------------------------------------------------------------ PTX
def _ptxas():
    for path in (shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if path and os.path.exists(path):
            return path
    return None


def _loops_spec():
    """The GPU spec (with PTX) of a nested loop with a branch and a gradient."""
    x = gc.placeholder(gc.float32, [None, 3])
    n = gc.placeholder(gc.int32, [])

    def body(i, h):
        _, inner = gc.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s * 0.5), [0, h],
                                   maximum_iterations=5)
        return i + 1, gc.cond(i > 1, lambda: gc.tanh(inner + h), lambda: inner * 2.0)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x], maximum_iterations=n)
    loss = gc.reduce_sum(h * h)
    fetches = [loss, gc.gradients(loss, x)[0]]
    exe = compile_gpu_executable([x, n], fetches, [], [(2, 3), ()],
                                 [np.zeros((2, 3), np.float32), np.array(3, np.int32)],
                                 device=EmulatedDevice())
    return exe.spec


@pytest.mark.skipif(_ptxas() is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_loop_bodies_ptx_assembles(tmp_path):
    from graphc.compiler.driver import compile_signature, gpu_target
    x = gc.placeholder(gc.float32, [None, 3])
    n = gc.placeholder(gc.int32, [])
    _, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.cond(i > 1, lambda: gc.tanh(h), lambda: h * 2.0)),
                         [0, x])
    spec = compile_signature([x, n], [h], [], [(2, 3), ()], target=gpu_target("sm_80")).spec
    steps = [s for s in spec["launches"] if "while" in s]
    assert len(steps) == 1
    names = [launch["kernel"] for launch in _launches(steps[0]["body"]["steps"])]
    assert names and all(f".entry {name}(" in spec["ptx"] for name in names)
    src = tmp_path / "loop.ptx"
    src.write_text(spec["ptx"])
    for arch in ("sm_80", "sm_90"):
        out = subprocess.run([_ptxas(), f"-arch={arch}", str(src), "-o",
                              str(tmp_path / f"loop_{arch}.cubin")], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr


@pytest.mark.skipif(_ptxas() is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_tensor_array_and_rnn_gradient_ptx_assembles(monkeypatch, tmp_path):
    """dynamic_rnn's forward and backward loops with their TensorArrays, and a gather's
    gradient (atomic float64 adds), through ptxas."""
    from graphc.compiler.driver import compile_signature, gpu_target
    from graphc.ops import rnn
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    x = gc.placeholder(gc.float64, [2, 5, 3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float64)
    rows = gc.TensorArray(gc.float64, size=5, element_shape=[3]).unstack(x[0])
    loss = gc.reduce_sum(out * out) + gc.reduce_sum(rows.gather([1, 1, 2]))
    grads = gc.gradients(loss, [x] + cell.variables)
    spec = compile_signature([x], [loss] + grads, [], [(2, 5, 3)],
                             target=gpu_target("sm_80")).spec
    assert sum("while" in s for s in spec["launches"]) == 2  # forward and backward
    assert "atom.global.add.f64" in spec["ptx"]
    src = tmp_path / "rnn.ptx"
    src.write_text(spec["ptx"])
    for arch in ("sm_80", "sm_90"):
        out = subprocess.run([_ptxas(), f"-arch={arch}", str(src), "-o",
                              str(tmp_path / f"rnn_{arch}.cubin")], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr


def _launches(steps):
    for step in steps:
        if "while" in step:
            for key in ("cond", "body"):
                yield from _launches(step[key]["steps"])
        elif "if" in step:
            for key in ("then", "else"):
                yield from _launches(step[key]["steps"])
        else:
            yield step


def test_spec_with_regions_is_checked():
    """A spec whose loop body names a fetch or a copy source its frame lacks, or that
    lacks a body, is refused before anything runs, with the field named."""
    spec = _loops_spec()
    assert any("while" in s for s in spec["launches"])
    bad = copy.deepcopy(spec)
    step = next(s for s in bad["launches"] if "while" in s)
    launch = next(iter(_launches(step["body"]["steps"])))
    launch["args"][0] = ["fetch", 99]
    with pytest.raises(ValueError, match="fetch 99"):
        GpuExecutable(bad, EmulatedDevice())
    bad = copy.deepcopy(spec)
    step = next(s for s in bad["launches"] if "while" in s)
    step["body"]["fetches"][0].update(source="feed", index=99)
    with pytest.raises(ValueError, match="is not a fetch source"):
        GpuExecutable(bad, EmulatedDevice())
    bad = copy.deepcopy(spec)
    next(s for s in bad["launches"] if "while" in s).pop("cond")
    with pytest.raises(ValueError, match="cond.*missing"):
        GpuExecutable(bad, EmulatedDevice())
    GpuExecutable(spec, EmulatedDevice())  # the spec as compiled passes


def test_gpu_file_with_a_loop_and_a_branch_runs_standalone(native, tmp_path):
    import runtime
    from graphc.export import export
    x = gc.placeholder(gc.float32, [None], name="x")
    y = gc.while_loop(lambda v: gc.reduce_sum(v) < 100.0, lambda v: v * 2.0, [x])
    z = gc.cond(gc.reduce_sum(y) > 150.0, lambda: y - 1.0, lambda: y + 1.0)
    with gc.Session() as sess:
        path = export(sess, str(tmp_path / "loop.gcx"), {"x": x}, {"z": z}, target="gpu")
    model = runtime.load(path, device="emulated")
    for xv, want in (([1.0, 2.0, 3.0], [31.0, 63.0, 95.0]), ([60.0], [121.0]),
                     ([10.0, 20.0], [41.0, 81.0])):
        np.testing.assert_array_equal(model.run({"x": np.array(xv, np.float32)})["z"], want)


# ----------------------------------------------------------------------- TensorArray
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_tensor_array_written_in_a_loop_of_run_time_length(native, dtype, trips):
    x = gc.placeholder(dtype, [None, 2])  # rows: the trip count
    n = gc.shape(x)[0]
    inputs = gc.TensorArray(dtype, size=n, element_shape=[2]).unstack(x)
    outputs = gc.TensorArray(dtype, size=n, element_shape=[2])

    def body(i, acc, ta):
        acc = acc * 0.5 + inputs.read(i)
        return i + 1, acc, ta.write(i, acc * 3.0)
    _, last, ta = gc.while_loop(lambda i, acc, ta: i < n, body,
                                [0, gc.zeros([2], dtype), outputs])
    stacked, size = ta.stack(), ta.size()
    xv = np.arange(2 * trips, dtype=dtype).reshape(trips, 2) - 3
    acc, want = np.zeros(2, dtype), []
    for row in xv:
        acc = acc * dtype(0.5) + row
        want.append(acc * 3)
    got_last, got_stacked, got_size = session_run([last, stacked, size], {x: xv})
    np.testing.assert_allclose(got_last, acc, **tol(dtype))
    np.testing.assert_allclose(got_stacked, np.reshape(want, (trips, 2)), **tol(dtype))
    assert got_size == trips and got_stacked.dtype == dtype


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_map_fn_scan_and_foldl(native, dtype, rows):
    x = gc.placeholder(dtype, [None, 3])
    doubled = gc.map_fn(lambda r: gc.tanh(r) * 2.0, x)
    running = gc.scan(lambda a, row: a * 0.9 + row, x, initializer=gc.zeros([3], dtype))
    total = gc.foldl(lambda a, row: a + row * row, x, initializer=gc.zeros([3], dtype))
    xv = np.linspace(-1, 1, 3 * rows).astype(dtype).reshape(rows, 3)
    want, a = [], np.zeros(3, dtype)
    for row in xv:
        a = a * dtype(0.9) + row
        want.append(a)
    got_doubled, got_running, got_total = session_run([doubled, running, total], {x: xv})
    np.testing.assert_allclose(got_doubled, np.tanh(xv) * 2, **tol(dtype))
    np.testing.assert_allclose(got_running, np.reshape(want, (rows, 3)), **tol(dtype))
    np.testing.assert_allclose(got_total, (xv * xv).sum(0), **tol(dtype))


def test_nested_loops_writing_tensor_arrays(native):
    n = gc.placeholder(gc.int32, [])
    outer = gc.TensorArray(gc.float64, size=n, element_shape=[3])

    def outer_body(i, ta):
        row = gc.TensorArray(gc.float64, size=3, element_shape=[])
        _, row = gc.while_loop(
            lambda j, r: j < 3,
            lambda j, r: (j + 1, r.write(j, gc.cast(i * 10 + j, gc.float64))), [0, row])
        return i + 1, ta.write(i, row.stack())
    _, outer = gc.while_loop(lambda i, ta: i < n, outer_body, [0, outer])
    for nv in (0, 1, 4):
        want = np.array([[i * 10 + j for j in range(3)] for i in range(nv)],
                        np.float64).reshape(nv, 3)
        np.testing.assert_array_equal(session_run(outer.stack(), {n: nv}), want)


def test_tensor_array_errors_name_the_op_and_line(native):
    n = gc.placeholder(gc.int32, [])
    ta = gc.TensorArray(gc.float32, size=3, element_shape=[])
    _, ta = gc.while_loop(lambda i, ta: i < n,
                          lambda i, ta: (i + 1, ta.write(i // 2, 1.0, name="twice")), [0, ta])
    with gc.Session() as sess:
        np.testing.assert_array_equal(sess.run(ta.stack(), {n: 1}), [1.0, 0.0, 0.0])
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(ta.stack(), {n: 2})
        assert "index 0 because it has already been written" in str(e.value)
        assert "twice" in str(e.value) and "test_gpu_control_flow.py" in str(e.value)
        past_end = gc.TensorArray(gc.float32, size=3, element_shape=[]).write(n, 1.0)
        with pytest.raises(gc.errors.InvalidArgumentError, match="index 3 but array is not "
                                                                 "resizeable and size is: 3"):
            sess.run(past_end.stack(), {n: 3})
        with pytest.raises(gc.errors.InvalidArgumentError, match="read from index 5 but "
                                                                 "array size is: 3"):
            sess.run(past_end.read(5), {n: 0})


@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_array_gradients(native, dtype):
    """gather's gradient adds the rows it read (twice here), scatter's zeroes the rows
    it overwrote."""
    x = gc.placeholder(dtype, [4, 2])
    ta = gc.TensorArray(dtype, size=4, element_shape=[2]).unstack(x)
    picked = ta.gather([3, 1, 3])
    loss = gc.reduce_sum(picked * picked * gc.constant([[1.0], [2.0], [3.0]], dtype))
    g = gc.gradients(loss, x)[0]
    xv = np.arange(8, dtype=dtype).reshape(4, 2) - 2.5
    want = np.zeros_like(xv)
    for weight, row in zip((1.0, 2.0, 3.0), (3, 1, 3)):
        want[row] += 2 * weight * xv[row]
    np.testing.assert_allclose(session_run(g, {x: xv}), want, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("steps", [0, 1, 7])
def test_dynamic_rnn_inference(native, monkeypatch, dtype, steps):
    from graphc.ops import rnn
    from tests.test_dynamic_rnn import np_dynamic_lstm
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)  # time unknown: never unrolled
    rng = np.random.default_rng(steps)
    x = gc.placeholder(dtype, [None, None, 3])
    lengths = gc.placeholder(gc.int32, [None])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, state = gc.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=dtype)
    xv = rng.standard_normal((3, steps, 3)).astype(dtype)
    lv = np.array([steps, steps // 2, 0], np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = {v.op.name[len("rnn/basic_lstm_cell/"):]: sess.run(v) for v in cell.variables}
        before = sess.compile_count
        got_out, got_c, got_h = sess.run([out, state.c, state.h], {x: xv, lengths: lv})
        assert sess.compile_count - before == 1
    zeros = np.zeros((3, 4), dtype)
    want_out, want_c, want_h = np_dynamic_lstm(w, xv, lv, zeros, zeros)
    loose = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else tol(dtype)
    np.testing.assert_allclose(got_out, want_out, **loose)
    np.testing.assert_allclose(got_c, want_c, **loose)
    np.testing.assert_allclose(got_h, want_h, **loose)


def test_a_loop_reading_its_array_around_a_write(native):
    """Reads of the array before and after this step's write, in both orders of the
    ops: the write happens in place only where no later kernel reads the old array."""
    n = gc.placeholder(gc.int32, [])
    ta = gc.TensorArray(gc.float64, size=n + 1, element_shape=[]).write(0, 1.0)

    def body(i, ta, total):
        new = ta.write(i + 1, ta.read(i) * 2.0)
        return i + 1, new, total + ta.read(i) + new.read(i + 1) * 0.5
    _, ta, total = gc.while_loop(lambda i, ta, t: i < n, body,
                                 [0, ta, gc.constant(0.0, gc.float64)])
    for nv in (0, 1, 7):
        values = [2.0 ** k for k in range(nv + 1)]
        want_total = sum(values[k] + values[k + 1] * 0.5 for k in range(nv))
        got_values, got_total = session_run([ta.stack(), total], {n: nv})
        np.testing.assert_array_equal(got_values, values)
        assert got_total == want_total


def test_an_array_written_a_row_per_iteration_keeps_one_buffer(native):
    """A TensorArray flow whose row the body writes, and that nothing reads after, is
    written in place: the loop does not copy the whole array every iteration."""
    x = gc.placeholder(gc.float32, [None, 2])
    n = gc.shape(x)[0]
    out = gc.TensorArray(gc.float32, size=n, element_shape=[2])
    _, out = gc.while_loop(lambda i, ta: i < n,
                           lambda i, ta: (i + 1, ta.write(i, gc.gather(x, i) * 2.0)), [0, out])
    y = out.stack()
    exe = compile_gpu_executable([x], [y], [], [(5, 2)], [np.zeros((5, 2), np.float32)],
                                 device=EmulatedDevice())
    step = next(s for s in exe.spec["launches"] if "while" in s)
    # the counter, then the array's two flows (values and written flags)
    assert [v["in_place"] for v in step["vars"]] == [False, True, True]
    xv = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(exe.run([xv])[0], xv * 2.0)


@pytest.mark.parametrize("lengths", [None, [3, 1]])
def test_dynamic_rnn_training_gradients_against_finite_differences(native, monkeypatch,
                                                                   lengths):
    """The forward loop keeps its stacks on the device (rows: the time steps), the
    backward loop reads them back; d/dx, d/dh0 and d/dweights against central
    differences."""
    from graphc.ops import rnn
    from tests.gradcheck import check_gradients
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)

    class Cell(gc.nn.rnn_cell.RNNCell):
        state_size = output_size = 2

        def __init__(self, wx, wh):
            super().__init__()
            self.wx, self.wh = wx, wh

        def call(self, inputs, state):
            h = gc.tanh(gc.matmul(inputs, self.wx) + gc.matmul(state, self.wh))
            return h, h

    def fn(x, h0, wx, wh):
        out, state = gc.nn.dynamic_rnn(Cell(wx, wh), x, initial_state=h0,
                                       sequence_length=lengths)
        return gc.concat([gc.reshape(out, [-1]), gc.reshape(state, [-1])], 0)
    rng = np.random.default_rng(7)
    check_gradients(fn, [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2)),
                         rng.standard_normal((2, 2)) * 0.6, rng.standard_normal((2, 2)) * 0.6])


def test_a_body_without_gpu_code_keeps_its_loop_on_the_host(monkeypatch):
    """A kernel of a body the GPU codegen cannot lower puts that loop on the host between
    GPU stages (as before loops compiled for the GPU), not the whole run on CPU code."""
    from graphc.compiler.backends.gpu import GpuCodegenNotImplemented, kinds
    launches_of = kinds.kernel_launches

    def no_sin(program, kernel, name, block):
        if any(n.type == "Sin" for n in kernel.nodes):
            raise GpuCodegenNotImplemented("no GPU codegen for Sin (this test)")
        return launches_of(program, kernel, name, block)
    monkeypatch.setattr(kinds, "kernel_launches", no_sin)
    x = gc.placeholder(gc.float64, [3])
    _, h = gc.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, gc.sin(h) + 1.0), [0, x * 2.0])
    y = gc.exp(h)
    xv = np.array([0.1, -0.7, 1.3])
    want = xv * 2.0
    for _ in range(4):
        want = np.sin(want) + 1.0
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), np.exp(want), rtol=1e-13)
        stages = [type(s).__name__ for e in sess._cache.values()
                  for s in e.stages[0]._unlowered.stages]
    assert stages == ["NativeStage", "HostStage", "NativeStage"]
