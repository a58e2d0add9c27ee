"""Device-side While loops on the GPU target (backends/gpu/device_loop.py): a loop whose
cond and body allow it runs as ONE kernel launch with no predicate read back, on the
emulated GPU, against values written with NumPy; which loops take that form (counted as
the host-driven tests count: launches and device->host copies per run), trip counts 0, 1,
7 and 1023, float32 and float64, gradients through such loops, ptxas on its PTX."""
import copy
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc.compiled_executor import compile_gpu_executable
from runtime.gpu import EmulatedDevice, GpuExecutable
from tests.gradcheck import check_gradients
from tests.native_loops import np_tanh_loop, tanh_loop

FLOATS = [np.float32, np.float64]
TRIPS = [0, 1, 7, 1023]
W = np.linspace(-0.5, 0.5, 16).reshape(4, 4)


@pytest.fixture(autouse=True)
def gpu_emulated(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "gpu_emulated")
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")  # a CPU fallback is an error
    monkeypatch.delenv("GRAPHC_GPU_DEVICE_LOOPS", raising=False)


def tol(dtype):
    return dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)


class Traffic:
    """Launches and copies of one sess.run on the emulated device."""

    def __init__(self, sess):
        self.sess = sess

    def run(self, fetches, feed):
        device = self.sess._gpu
        before = (device.launches, device.copies_in, device.copies_out) if device else None
        out = self.sess.run(fetches, feed)
        device = self.sess._gpu
        if before is None:
            return out, None
        return out, dict(zip(("launches", "copies_in", "copies_out"),
                             (now - then for now, then in zip(
                                 (device.launches, device.copies_in, device.copies_out),
                                 before))))


def traffic_by_trips(fetch, feed_of, trips_list):
    """{trips: (result, traffic)} of the second run of each feed (the first may compile:
    a scalar int feed's value can be part of the compile key)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            runs = Traffic(sess)
            out = {}
            for t in trips_list:
                sess.run(fetch, feed_of(t))
                out[t] = runs.run(fetch, feed_of(t))
            return out


def rnn_cell_loop(dtype, rows=2):
    return tanh_loop(dtype, W, rows)


def np_rnn_cell(xv, trips):
    return np_tanh_loop(xv, W, trips)


def x_value(dtype, rows=2):
    return (np.arange(rows * 4, dtype=dtype).reshape(rows, 4) - 3) / 5


# ----------------------------------------------------------------------- eligibility
def test_a_counter_loop_is_one_launch_with_nothing_read_back(native):
    n = gc.placeholder(gc.int32, [])
    i, s = gc.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + 2 * i + 1), [0, 0])
    runs = traffic_by_trips([i, s], lambda t: {n: t}, [1, 7, 1023])
    for t, ((got_i, got_s), _) in runs.items():
        assert (got_i, got_s) == (t, t * t)
    # per run: the one loop launch; out: the status and the two fetches, whatever the trips
    assert runs[1][1] == runs[7][1] == runs[1023][1]
    assert runs[1023][1]["launches"] == 1
    assert runs[1023][1]["copies_out"] == 3


@pytest.mark.parametrize("dtype", FLOATS)
def test_an_rnn_cell_loop_reads_nothing_back_per_iteration(native, dtype):
    x, n, i, h = rnn_cell_loop(dtype)
    xv = x_value(dtype)
    runs = traffic_by_trips(h, lambda t: {x: xv, n: t}, [1, 7, 1023])
    for t, (got, _) in runs.items():
        np.testing.assert_allclose(got, np_rnn_cell(xv, t), **tol(dtype))
    assert runs[1][1] == runs[1023][1]
    assert runs[1023][1]["copies_out"] == 2  # the status and h


def test_the_host_driven_form_when_device_loops_are_off(native, monkeypatch):
    """The same graph with GRAPHC_GPU_DEVICE_LOOPS=0: a predicate per iteration, the
    cond's and the body's launches per iteration (what the device form saves)."""
    monkeypatch.setenv("GRAPHC_GPU_DEVICE_LOOPS", "0")
    x, n, _, h = rnn_cell_loop(np.float64)
    xv = x_value(np.float64)
    runs = traffic_by_trips(h, lambda t: {x: xv, n: t}, [1, 7])
    np.testing.assert_allclose(runs[7][0], np_rnn_cell(xv, 7), **tol(np.float64))
    assert runs[7][1]["copies_out"] - runs[1][1]["copies_out"] == 6
    assert runs[7][1]["launches"] - runs[1][1]["launches"] > 6


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_state_larger_than_the_block_rounds_stays_host_driven(native, dtype):
    """32 rounds of a 256-thread block: 8192 elements. A [128, 128] state needs the grid
    (no grid-wide barrier in one launch): the runtime takes the host-driven form; a
    [64, 128] one, the device loop."""
    for rows, predicates in ((128, 6), (64, 0)):
        with gc.Graph().as_default():
            x = gc.placeholder(dtype, [rows, 128])
            n = gc.placeholder(gc.int32, [])
            _, h = gc.while_loop(lambda i, h: i < n,
                                 lambda i, h: (i + 1, gc.sin(h) * 0.9 + x), [0, x])
            xv = np.linspace(-1, 1, rows * 128).reshape(rows, 128).astype(dtype)
            runs = traffic_by_trips(h, lambda t: {x: xv, n: t}, [1, 7])
        want = xv
        for _ in range(7):
            want = np.sin(want) * dtype(0.9) + xv
        np.testing.assert_allclose(runs[7][0], want, **tol(dtype))
        assert runs[7][1]["copies_out"] - runs[1][1]["copies_out"] == predicates


def _while_steps(steps):
    for step in steps:
        if "while" in step:
            yield step
            for key in ("cond", "body"):
                yield from _while_steps(step[key]["steps"])
        elif "if" in step:
            for key in ("then", "else"):
                yield from _while_steps(step[key]["steps"])


def gpu_spec(feeds, fetches, shapes, arch="sm_80"):
    from graphc.compiler.driver import compile_signature, gpu_target
    return compile_signature(feeds, fetches, [], shapes, target=gpu_target(arch)).spec


def test_which_loops_have_a_device_form():
    """A nested loop's outer loop (a While in its body): host-driven, its inner loop a
    device loop; a loop and its gradient's loop: device loops, the forward one writing
    its stacks."""
    x = gc.placeholder(gc.float64, [3])
    n = gc.placeholder(gc.int32, [])

    def outer(i, h):
        _, inner = gc.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s * 0.5), [0, h])
        return i + 1, inner + 1.0
    _, h = gc.while_loop(lambda i, h: i < n, outer, [0, x])
    spec = gpu_spec([x, n], [h], [(3,), ()])
    outer_step, inner_step = list(_while_steps(spec["launches"]))
    assert "device_loop" not in outer_step and "device_loop" in inner_step

    with gc.Graph().as_default():
        x = gc.placeholder(gc.float64, [3])
        _, h = gc.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, gc.sin(h)), [0, x])
        g = gc.gradients(gc.reduce_sum(h), x)[0]
        steps = list(_while_steps(gpu_spec([x], [g], [(3,)])["launches"]))
        assert len(steps) == 2
        forward, backward = steps if steps[0]["stacks"] else steps[::-1]
        assert forward["stacks"] and "device_loop" in forward
        assert not backward["stacks"] and "device_loop" in backward


# --------------------------------------------------------------------------- results
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", TRIPS)
def test_rnn_cell_results(native, dtype, trips):
    x, n, i, h = rnn_cell_loop(dtype, rows=3)
    out = gc.reduce_sum(h, axis=1) * 2.0  # device code after the loop too
    xv = x_value(dtype, rows=3)
    want = np_rnn_cell(xv, trips)
    with gc.Session() as sess:
        got_i, got_h, got_out = sess.run([i, h, out], {x: xv, n: trips})
    assert got_i == trips and got_h.dtype == dtype
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    np.testing.assert_allclose(got_out, want.sum(1) * 2.0, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", TRIPS)
def test_row_softmax_recurrence_and_a_data_dependent_stop(native, dtype, trips):
    """Row reductions in the body (the row template) and in the cond (a sum), with the
    loop stopping on whichever comes first: the trip count or the state's total."""
    x = gc.placeholder(dtype, [5, 7])
    n = gc.placeholder(gc.int32, [])
    limit = gc.placeholder(dtype, [])
    i, p = gc.while_loop(lambda i, p: gc.logical_and(i < n, gc.reduce_sum(p) < limit),
                         lambda i, p: (i + 1, gc.nn.softmax(p * 3.0 + x) + p),
                         [0, gc.zeros_like(x)])
    xv = np.sin(np.arange(35, dtype=dtype).reshape(5, 7))
    for bound in (1e9, 12.5):
        want, k = np.zeros_like(xv), 0
        while k < trips and want.sum() < bound:
            z = want * 3 + xv
            e = np.exp(z - z.max(1, keepdims=True))
            want, k = e / e.sum(1, keepdims=True) + want, k + 1
        with gc.Session() as sess:
            got_i, got_p = sess.run([i, p], {x: xv, n: trips, limit: bound})
        assert got_i == k
        np.testing.assert_allclose(got_p, want, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rows", [0, 1, 7, 1023])
def test_scan_over_rows(native, dtype, rows):
    """tf.scan: a loop reading row i of its input and writing row i of its output
    (TensorArray moves in the body) with a running state."""
    x = gc.placeholder(dtype, [rows, 3])
    y = gc.scan(lambda acc, r: acc * 0.5 + gc.cos(r), x, initializer=gc.zeros([3], dtype))
    xv = np.arange(rows * 3, dtype=dtype).reshape(rows, 3) / 3
    want, acc = np.zeros_like(xv), np.zeros(3, dtype)
    for k in range(rows):
        acc = acc * dtype(0.5) + np.cos(xv[k])
        want[k] = acc
    runs = traffic_by_trips(y, lambda _: {x: xv}, [0, 1])
    np.testing.assert_allclose(runs[1][0], want, **tol(dtype))
    assert runs[1][1]["copies_out"] == (2 if rows else 1)  # the status, y: no predicate


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_device_loop_inside_a_host_driven_loop(native, dtype):
    """The outer loop's body holds a region (host-driven), the inner loop is one launch
    per outer iteration, its buffers in the outer body's frame."""
    x = gc.placeholder(dtype, [3])
    n = gc.placeholder(gc.int32, [])

    def outer(i, h):
        _, inner = gc.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, gc.sin(s) + h),
                                 [0, h * 0.5])
        return i + 1, inner
    _, h = gc.while_loop(lambda i, h: i < n, outer, [0, x])
    xv = np.array([0.25, -1.0, 2.0], dtype)
    for trips in (0, 1, 7):
        want = xv
        for i in range(trips):
            s = want * dtype(0.5)
            for _ in range(i):
                s = np.sin(s) + want
            want = s
        with gc.Session() as sess:
            np.testing.assert_allclose(sess.run(h, {x: xv, n: trips}), want, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", TRIPS)
def test_a_cond_inside_a_device_loop(native, dtype, trips):
    """tf.cond in the body branches on the device (the loop stays one launch): odd
    iterations take one branch, even ones the other, and a branch returning its input
    unchanged (a copy)."""
    x = gc.placeholder(dtype, [2, 3])
    n = gc.placeholder(gc.int32, [])

    def body(i, h):
        odd = gc.equal(gc.floormod(i, 2), 1)
        h = gc.cond(odd, lambda: gc.tanh(h * 1.5 - x), lambda: h * 0.5 + 0.25)
        return i + 1, gc.cond(gc.reduce_sum(h) > 100.0, lambda: h * 0.0, lambda: h)
    i, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    xv = np.linspace(-1, 1, 6).reshape(2, 3).astype(dtype)
    want = xv
    for k in range(trips):
        want = np.tanh(want * dtype(1.5) - xv) if k % 2 else want * dtype(0.5) + dtype(0.25)
    runs = traffic_by_trips([i, h], lambda t: {x: xv, n: t}, [1, trips])
    got_i, got_h = runs[trips][0]
    assert got_i == trips
    np.testing.assert_allclose(got_h, want, **tol(dtype))
    assert runs[1][1] == runs[trips][1] and runs[trips][1]["launches"] == 1


@pytest.mark.parametrize("dtype", FLOATS)
def test_gradient_through_a_cond_inside_a_device_loop(native, dtype):
    """The If's saved intermediates (the taken branch's; the other's zeroed) kept per
    iteration in the forward loop's stacks, read back by the backward loop."""
    x = gc.placeholder(dtype, [3])
    _, h = gc.while_loop(lambda i, h: i < 5,
                         lambda i, h: (i + 1, gc.cond(gc.reduce_sum(h) > 0.0,
                                                      lambda: gc.sin(h) * h,
                                                      lambda: gc.exp(h) - 1.5)), [0, x])
    g = gc.gradients(gc.reduce_sum(h), x)[0]
    xv = np.array([0.3, -0.2, 0.6], dtype)
    state, grad = xv, np.ones(3, dtype)
    jacobians = []
    for _ in range(5):
        if state.sum() > 0:
            jacobians.append(np.cos(state) * state + np.sin(state))
            state = np.sin(state) * state
        else:
            jacobians.append(np.exp(state))
            state = np.exp(state) - dtype(1.5)
    for jac in reversed(jacobians):
        grad = grad * jac
    with gc.Session() as sess:
        got_h, got_g = sess.run([h, g], {x: xv})
    np.testing.assert_allclose(got_h, state, **tol(dtype))
    np.testing.assert_allclose(got_g, grad, **tol(dtype))
    steps = list(_while_steps(gpu_spec([x], [h, g], [(3,)])["launches"]))
    assert len(steps) == 2 and all("device_loop" in step for step in steps)


def test_body_outputs_no_kernel_computes(native):
    """A body returning its input, a constant and a captured feed: copies in the kernel."""
    x = gc.placeholder(gc.float32, [3])
    c = gc.placeholder(gc.float32, [3])
    n = gc.placeholder(gc.int32, [])
    i, a, b, k = gc.while_loop(lambda i, a, b, k: i < n,
                               lambda i, a, b, k: (i + 1, a, c, gc.constant([7.0, 8.0, 9.0])),
                               [0, x, x, x])
    xv, cv = np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0, 6.0], np.float32)
    with gc.Session() as sess:
        for trips in (0, 1, 7):
            got = sess.run([i, a, b, k], {x: xv, c: cv, n: trips})
            assert got[0] == trips
            np.testing.assert_array_equal(got[1], xv)
            np.testing.assert_array_equal(got[2], cv if trips else xv)
            np.testing.assert_array_equal(got[3], [7.0, 8.0, 9.0] if trips else xv)


def test_an_error_inside_a_device_loop_names_the_op_and_stops_it(native):
    """A gather whose index runs out of range in iteration 3: the kernel stops the loop
    at the failed check (it would spin otherwise: the cond never turns false)."""
    table = gc.constant(np.arange(3.0))
    _, s = gc.while_loop(lambda i, s: i >= 0,
                         lambda i, s: (i + 1, s + gc.gather(table, i)),
                         [0, gc.constant(0.0, gc.float64)])
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError, match="GatherV2") as info:
            sess.run(s)
    assert "test_gpu_device_loops.py" in str(info.value)


# -------------------------------------------------------------------------- gradients
def np_rnn_cell_gradients(xv, wv, trips):
    """(loss, d loss / d x, d loss / d w) of loss = sum(h**2) after `trips` steps of
    h <- tanh(h @ w + x) from h = x / 2, by backpropagation written out."""
    hs = [xv * 0.5]
    for _ in range(trips):
        hs.append(np.tanh(hs[-1] @ wv + xv))
    dh, dx, dw = 2 * hs[-1], np.zeros_like(xv), np.zeros_like(wv)
    for h_prev, h_next in zip(hs[-2::-1], hs[:0:-1]):
        da = dh * (1 - h_next ** 2)
        dw, dx, dh = dw + h_prev.T @ da, dx + da, da @ wv.T
    return (hs[-1] ** 2).sum(), dx + 0.5 * dh, dw


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trips", [0, 1, 7])
def test_gradient_through_a_device_loop(native, dtype, trips):
    """The forward loop writes its stacks, the backward loop reads them: both device
    loops; the gradient matches backpropagation written out."""
    x = gc.placeholder(dtype, [2, 4])
    w = gc.Variable(W.astype(dtype))
    _, h = gc.while_loop(lambda i, h: i < trips,
                         lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)), [0, x * 0.5])
    loss = gc.reduce_sum(h * h)
    gx, gw = gc.gradients(loss, [x, w])
    xv, wv = x_value(dtype), W.astype(dtype)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        got = sess.run([loss, gx, gw], {x: xv})
    for g, want in zip(got, np_rnn_cell_gradients(xv, wv, trips)):
        np.testing.assert_allclose(g, want, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_training_step_through_loops_reads_nothing_back_per_iteration(native, dtype):
    """maximum_iterations fed (it sizes the stacks) and a cond stopping first: the
    forward and the backward loop are one launch each whatever the trip count."""
    x = gc.placeholder(dtype, [2, 4])
    n = gc.placeholder(gc.int32, [])
    m = gc.placeholder(gc.int32, [])
    w = gc.Variable(W.astype(dtype))
    _, h = gc.while_loop(lambda i, h: i < m, lambda i, h: (i + 1, gc.tanh(gc.matmul(h, w) + x)),
                         [0, x * 0.5], maximum_iterations=n)
    loss = gc.reduce_sum(h * h)
    grads = gc.gradients(loss, [x, w])
    xv, wv = x_value(dtype), W.astype(dtype)
    runs = traffic_by_trips([loss] + grads, lambda t: {x: xv, n: 9, m: t}, [1, 7, 1023])
    for t, (got, _) in runs.items():
        for g, want in zip(got, np_rnn_cell_gradients(xv, wv, min(t, 9))):
            np.testing.assert_allclose(g, want, **tol(dtype))
    assert runs[1][1] == runs[7][1] == runs[1023][1]


def test_gradient_of_a_device_loop_against_finite_differences(native):
    def fn(x, y):
        _, h, g = gc.while_loop(lambda i, h, g: i < 6,
                                lambda i, h, g: (i + 1, gc.sin(h) * g + 0.1, g * 0.9 + h * 0.1),
                                [0, x, y])
        return h * g
    check_gradients(fn, [np.array([[0.3, -0.7, 1.1]]), np.array([[0.5, 0.2, -0.4]])])


# ------------------------------------------------------------------------------ PTX
def _ptxas():
    for path in (shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if path and os.path.exists(path):
            return path
    return None


@pytest.mark.skipif(_ptxas() is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_device_loop_ptx_assembles(tmp_path):
    """The loop kernels of an RNN cell (tiled product, row softmax) in a branch of a cond,
    and of a scan."""
    x = gc.placeholder(gc.float32, [None, 4])
    n = gc.placeholder(gc.int32, [])
    def body(i, h):
        return i + 1, gc.cond(i > 2, lambda: h * 0.5,
                              lambda: gc.nn.softmax(gc.matmul(h, W.astype(np.float32)) + x))
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x])
    y = gc.scan(lambda acc, r: acc * 0.5 + r, gc.cast(x, gc.float64))
    for arch in ("sm_80", "sm_90"):
        spec = gpu_spec([x, n], [h, y], [(2, 4), ()], arch)
        loops = [s["device_loop"] for s in _while_steps(spec["launches"])]
        assert len(loops) == 2 and all(loop is not None for loop in loops)
        for loop in loops:
            assert f".entry {loop['kernel']}(" in spec["ptx"]
        assert "bar.sync" in spec["ptx"]
        src = tmp_path / f"loop_{arch}.ptx"
        src.write_text(spec["ptx"])
        out = subprocess.run([_ptxas(), f"-arch={arch}", str(src), "-o",
                              str(tmp_path / f"loop_{arch}.cubin")], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------ spec
def test_a_bad_device_loop_in_a_spec_is_refused():
    x = gc.placeholder(gc.float32, [3])
    _, h = gc.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, h * 2.0), [0, x])
    exe = compile_gpu_executable([x], [h], [], [(3,)], [np.zeros(3, np.float32)],
                                 device=EmulatedDevice())
    spec = exe.spec
    GpuExecutable(spec, EmulatedDevice())  # as compiled, it passes
    for change, message in ((lambda loop: loop["args"].__setitem__(0, ["a", 9]), "names no a"),
                            (lambda loop: loop["args"].__setitem__(0, ["arena", "x"]),
                             "arena"),
                            (lambda loop: loop["args"].append(["input", 0]), "taking 12 pointers"),
                            (lambda loop: loop.update(grid=4), "grid"),
                            (lambda loop: loop.pop("max_threads"), "max_threads")):
        bad = copy.deepcopy(spec)
        change(next(_while_steps(bad["launches"]))["device_loop"])
        with pytest.raises(ValueError, match=message):
            GpuExecutable(bad, EmulatedDevice())
