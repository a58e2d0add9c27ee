"""Loops whose stacks grow during the run, on the GPU target (run here on the emulated
device): a while_loop with a data-dependent trip count kept for its gradient, a loop
appending to a dynamic_size TensorArray, raw_rnn. Their launches are driven from the host
and their stacks live in device buffers the runtime owns (runtime/gpu/grown.py: doubled
on the device before an iteration past their rows, freed when the run ends). Each native
case runs with the While and If host kernels made to fail (conftest's `native`) and no
CPU fallback (GRAPHC_GPU_STRICT), against NumPy written here, for 0, 1, 7 and 1023 trips
(past several doublings), float32 and float64, gradients against central differences in
float64; the device's counters show what moves per iteration; the spec passes
runtime/verify.py and a corrupted one is refused; the PTX assembles with ptxas."""
import copy

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.compiler.driver import compile_signature, gpu_target
from runtime.gpu import EmulatedDevice, GpuExecutable
from runtime.verify import InvalidSpec, verify_spec
from tests.gradcheck import check_gradients
from tests.native_loops import (assert_raw_lstm_losses, np_raw_lstm_gradients, raw_lstm,
                                raw_lstm_weights, run_in_one_stage)
from tests.test_gpu_codegen import PTXAS, _ptxas_report

FLOATS = [np.float32, np.float64]
TRIPS = [0, 1, 7, 1023]


@pytest.fixture(autouse=True)
def gpu_emulated(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "gpu_emulated")
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")  # a CPU fallback is an error


def tol(dtype):
    return dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


# ------------------------------------------------- a loop with no bound on its trips
def sine_loop(v0, w, b, limit):
    """v <- sin(w * v) + b while a float counter (a vector: the cond gives no bound) stays
    below `limit`: ceil(limit) trips, known only when the loop runs."""
    def body(c, v):
        return c + 1, gc.sin(w * v) + b
    return gc.while_loop(lambda c, v: gc.reduce_sum(c) < limit, body,
                         [gc.zeros([1], dtype=v0.dtype), v0])[1]


def np_sine_loop(v0, w, b, trips, r):
    """(v after `trips` iterations, d sum(v * r) / d (v0, w, b))."""
    vs = [v0]
    for _ in range(trips):
        vs.append(np.sin(w * vs[-1]) + b)
    g, gw, gb = r.copy(), np.zeros_like(w), np.zeros_like(b)
    for k in reversed(range(trips)):
        d = g * np.cos(w * vs[k])
        gw, gb, g = gw + d * vs[k], gb + g, d * w
    return vs[-1], (g, gw, gb)


def sine_loop_and_grads(dtype, n=5):
    v0, w, b = (gc.placeholder(dtype, [n]) for _ in range(3))
    limit = gc.placeholder(dtype, [])
    r = np.linspace(-1.0, 1.5, n).astype(dtype)
    v = sine_loop(v0, w, b, limit)
    return (v0, w, b, limit), r, [v] + gc.gradients(gc.reduce_sum(v * r), [v0, w, b])


def sine_feed(placeholders, dtype, trips, n=5):
    rng = np.random.default_rng(trips)
    v0, w, b, limit = placeholders
    return {v0: rng.uniform(-1, 1, n).astype(dtype), w: rng.uniform(-0.9, 0.9, n).astype(dtype),
            b: rng.uniform(-0.5, 0.5, n).astype(dtype), limit: dtype(trips)}


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_loop_without_a_bound_and_its_gradient_run_on_the_device(native, dtype):
    placeholders, r, fetches = sine_loop_and_grads(dtype)
    feed_list = [sine_feed(placeholders, dtype, trips) for trips in TRIPS + [7]]
    got = run_in_one_stage(fetches, feed_list, "gpu_emulated", compiles=None)
    for trips, feed, run in zip(TRIPS + [7], feed_list, got):
        v0, w, b, _ = (feed[p].astype(np.float64) for p in placeholders)
        want_v, want_grads = np_sine_loop(v0, w, b, trips, r.astype(np.float64))
        for g, want in zip(run, [want_v, *want_grads]):
            assert g.dtype == dtype
            np.testing.assert_allclose(g, want, **tol(dtype))


@pytest.mark.parametrize("trips", [1, 7, 40])
def test_the_gradient_against_central_differences(native, trips):
    rng = np.random.default_rng(trips)
    inputs = [rng.uniform(-1, 1, 4), rng.uniform(-0.9, 0.9, 4), rng.uniform(-0.5, 0.5, 4)]
    check_gradients(lambda v0, w, b: sine_loop(v0, w, b, np.float64(trips)), inputs,
                    rtol=1e-6, atol=1e-9)


def test_a_counter_against_a_limit_carried_by_the_loop_grows_its_stacks(native):
    """`i < x` where x is a loop variable (its value is the data's: no bound the cond
    gives before the loop runs), with the gradient through the loop's cosines."""
    v0 = gc.placeholder(gc.float64, [3])
    n = gc.placeholder(gc.int32, [])
    _, _, v = gc.while_loop(lambda i, x, v: i < x,
                            lambda i, x, v: (i + 1, x, gc.cos(v) * 1.1), [0, n, v0])
    dv = gc.gradients(gc.reduce_sum(v), v0)[0]
    x0 = np.array([0.3, -1.2, 2.0])
    got = run_in_one_stage([v, dv], [{v0: x0, n: k} for k in TRIPS], "gpu_emulated",
                           compiles=None)
    for k, (got_v, got_dv) in zip(TRIPS, got):
        want, chain = x0, np.ones(3)
        for _ in range(k):
            want, chain = np.cos(want) * 1.1, chain * -np.sin(want) * 1.1
        np.testing.assert_allclose(got_v, want, rtol=1e-13)
        np.testing.assert_allclose(got_dv, chain, rtol=1e-12, atol=1e-300)


def test_stacks_of_empty_rows_grow_too(native):
    """An empty state (rows of 0 bytes) through 0, 5 and 40 trips, and an array of
    empty elements appended to: empty values, the size the trip count."""
    placeholders, _, fetches = sine_loop_and_grads(np.float64, n=0)
    (x, limit), appended, _ = appending_loop(np.float64, n=0)
    for trips in (0, 5, 40):
        (run,) = run_in_one_stage(fetches, [sine_feed(placeholders, np.float64, trips, n=0)],
                                  "gpu_emulated", compiles=None)
        assert [g.shape for g in run] == [(0,)] * 4
        (run,) = run_in_one_stage(appended, [{x: np.zeros(0), limit: float(trips)}],
                                  "gpu_emulated", compiles=None)
        assert run[0].shape == (0,) and run[1] == trips and run[2].shape == (0,)


def test_two_growing_loops_with_a_branch_in_one_run(native):
    """Two loops without a bound, each with its own trip count (run dim), the first
    saving a cond's taken branch each iteration, the second reading the first's result:
    values against NumPy, the gradient against central differences of it."""
    x = gc.placeholder(gc.float64, [4])
    lim = gc.placeholder(gc.float64, [])

    def first(c, v):
        return c + 1, gc.cond(gc.reduce_sum(c) > 2.0, lambda: gc.sin(v) * 1.3,
                              lambda: v * v * 0.5 + 0.1)
    _, y = gc.while_loop(lambda c, v: gc.reduce_sum(c) < lim, first,
                         [gc.zeros([1], gc.float64), x])
    _, z = gc.while_loop(lambda c, v: gc.reduce_sum(c) < lim * 2.0,
                         lambda c, v: (c + 1, gc.tanh(v * y + 0.2)),
                         [gc.zeros([1], gc.float64), y])
    loss = gc.reduce_sum(z * z)
    dx = gc.gradients(loss, x)[0]

    def np_loss(xv, trips):
        v = xv
        for k in range(trips):
            v = np.sin(v) * 1.3 if k > 2 else v * v * 0.5 + 0.1
        y, z = v, v
        for _ in range(2 * trips):
            z = np.tanh(z * y + 0.2)
        return np.sum(z * z)
    xv = np.array([0.1, -0.4, 0.7, 1.2])
    trip_counts = [0, 1, 3, 30]
    got = run_in_one_stage([loss, dx], [{x: xv, lim: float(t)} for t in trip_counts],
                           "gpu_emulated", compiles=None)
    eps = 1e-6
    for trips, (got_loss, got_dx) in zip(trip_counts, got):
        np.testing.assert_allclose(got_loss, np_loss(xv, trips), rtol=1e-12)
        numeric = [(np_loss(xv + eps * e, trips) - np_loss(xv - eps * e, trips)) / (2 * eps)
                   for e in np.eye(4)]
        np.testing.assert_allclose(got_dx, numeric, rtol=1e-6, atol=1e-9)


class _Counting:
    """Wraps a device's alloc and free: the sizes allocated, the frees."""

    def __init__(self, device, monkeypatch):
        self.sizes, self.frees = [], 0
        alloc, free = device.alloc, device.free

        def counted_alloc(nbytes):
            self.sizes.append(int(nbytes))
            return alloc(nbytes)

        def counted_free(address):
            self.frees += 1
            return free(address)
        monkeypatch.setattr(device, "alloc", counted_alloc)
        monkeypatch.setattr(device, "free", counted_free)


def test_the_stacks_grow_by_doubling_on_the_device_and_are_freed(native, monkeypatch):
    """Per iteration only the predicate leaves the device and nothing goes in; the two
    stacks (5 float64 a row) are allocated at 16 rows and doubled up to 1024 for 1023
    trips (7 allocations each, not one per row), and every one is freed by the run."""
    monkeypatch.setenv("GRAPHC_GPU_DEVICE_LOOPS", "0")  # the backward loop host-driven too
    placeholders, _, fetches = sine_loop_and_grads(np.float64)
    with gc.Session() as sess:
        sess.run(fetches, sine_feed(placeholders, np.float64, 3))
        device = sess._gpu
        counting = _Counting(device, monkeypatch)
        traffic = {}
        for trips in (7, 8, 1023):
            before = (device.copies_in, device.copies_out, len(counting.sizes), counting.frees)
            sess.run(fetches, sine_feed(placeholders, np.float64, trips))
            traffic[trips] = [now - then for now, then in zip(
                (device.copies_in, device.copies_out, len(counting.sizes), counting.frees),
                before)]
        assert sess.compile_count == 1
    copies_in, copies_out, allocs, frees = (traffic[8][k] - traffic[7][k] for k in range(4))
    assert copies_in == 0    # the run dim is set once, when the loop leaves
    assert copies_out == 2   # a predicate per iteration: one of the forward loop, one back
    assert allocs == frees == 0
    assert traffic[7][2] == traffic[7][3] == 2   # one buffer of 16 rows a stack, freed
    row = 5 * 8
    grown = sorted(s for s in counting.sizes[-traffic[1023][2]:])
    assert grown == sorted([16 * row * 2 ** k for k in range(7)] * 2)
    assert traffic[1023][3] == traffic[1023][2]


def test_an_error_in_the_loop_after_its_stacks_grew_names_the_op_and_frees_them(
        native, monkeypatch):
    """A gather past its table's 600 rows in iteration 600 (the stacks grown to 1024 rows)
    fails naming the gather and the user's line, and frees every grown buffer; the
    Session then runs a loop that stays inside the table."""
    table = gc.constant(np.linspace(0.0, 1.0, 600 * 4).reshape(600, 4))
    v0 = gc.placeholder(gc.float64, [4])
    limit = gc.placeholder(gc.float64, [])

    def body(c, v):
        row = gc.gather(table, gc.cast(c[0], gc.int32))  # the line the error names
        return c + 1, gc.tanh(v * row + 0.1)
    v = gc.while_loop(lambda c, v: gc.reduce_sum(c) < limit, body,
                      [gc.zeros([1], gc.float64), v0])[1]
    dv = gc.gradients(gc.reduce_sum(v), v0)[0]
    feed = {v0: np.full(4, 0.5)}
    with gc.Session() as sess:
        sess.run([v, dv], {**feed, limit: 2.0})
        counting = _Counting(sess._gpu, monkeypatch)
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run([v, dv], {**feed, limit: 700.0})
        assert "GatherV2" in str(e.value) and "test_gpu_growable_stacks.py" in str(e.value)
        assert len(counting.sizes) == counting.frees > 0
        good = sess.run([v, dv], {**feed, limit: 19.0})
    want, chain = np.full(4, 0.5), np.ones(4)
    rows = np.linspace(0.0, 1.0, 600 * 4).reshape(600, 4)
    for k in range(19):
        want = np.tanh(want * rows[k] + 0.1)
        chain = chain * (1 - want ** 2) * rows[k]
    np.testing.assert_allclose(good[0], want, rtol=1e-13)
    np.testing.assert_allclose(good[1], chain, rtol=1e-12)


# ----------------------------------------------------- a loop appending to an array
def appending_loop(dtype, n=3):
    """v <- tanh(0.9 v + 0.1) while a float counter stays below `limit`, writing 2v to a
    dynamic_size array each iteration; after the loop the array's stack (its rows the
    trip count) feeds a reduction, and its size and last element are read."""
    x = gc.placeholder(dtype, [n])
    limit = gc.placeholder(dtype, [])
    ta = gc.TensorArray(dtype, size=0, dynamic_size=True, element_shape=[n])

    def body(i, c, v, ta):
        v = gc.tanh(v * 0.9 + 0.1)
        return i + 1, c + 1, v, ta.write(i, v * 2.0)
    _, _, v, ta = gc.while_loop(lambda i, c, v, ta: gc.reduce_sum(c) < limit, body,
                                [gc.constant(0), gc.zeros([1], dtype), x, ta])
    stacked = ta.stack()
    size = ta.size()
    return (x, limit), [gc.reduce_sum(stacked * stacked, axis=0), size, v], \
        ta.read(size - 1) * 1.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_loop_appending_to_a_growing_array_runs_on_the_device(native, dtype):
    (x, limit), fetches, last = appending_loop(dtype)
    x0 = np.array([-0.7, 0.2, 1.3], dtype)
    got = run_in_one_stage(fetches, [{x: x0, limit: dtype(k)} for k in TRIPS],
                           "gpu_emulated", compiles=None)
    lasts = run_in_one_stage([last], [{x: x0, limit: dtype(k)} for k in TRIPS[1:]],
                             "gpu_emulated", compiles=None)
    for k, run in zip(TRIPS, got):
        v, rows = x0.astype(np.float64), []
        for _ in range(k):
            v = np.tanh(v * 0.9 + 0.1)
            rows.append(2 * v)
        squares = np.sum(np.square(rows), axis=0) if rows else np.zeros(3)
        np.testing.assert_allclose(run[0], squares, **tol(dtype))
        assert run[1] == k
        np.testing.assert_allclose(run[2], v, **tol(dtype))
        if k:
            np.testing.assert_allclose(lasts[TRIPS[1:].index(k)][0], 2 * v, **tol(dtype))


# ------------------------------------------------------------------------- raw_rnn
T, B, D, H = 6, 3, 4, 5
LENGTHS = [[0, 0, 0], [1, 1, 1], [6, 3, 0], [2, 5, 4]]


@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_on_variable_lengths_runs_on_the_device(native, dtype):
    x, lengths, cell, loss, _ = raw_lstm(dtype, (T, B, D), H)
    rng = np.random.default_rng(4)
    feed_list = [{x: rng.standard_normal((T, B, D)).astype(dtype),
                  lengths: np.array(lv, np.int32)} for lv in LENGTHS]
    got = run_in_one_stage([loss], feed_list, "gpu_emulated", initialize=True, compiles=None)
    assert_raw_lstm_losses(got, feed_list, x, lengths, raw_lstm_weights(cell), tol(dtype))


def raw_lstm_gradients():
    x, lengths, cell, loss, _ = raw_lstm(np.float64, (T, B, D), H)
    return x, lengths, cell, gc.gradients(loss, [x] + cell.variables)


def test_raw_rnn_gradient_against_central_differences(native):
    """d loss / d (inputs, kernel, bias) in float64 on the GPU target, in one native
    stage, against central differences of the NumPy loss."""
    x, lengths, cell, grads = raw_lstm_gradients()
    xv = np.random.default_rng(5).standard_normal((T, B, D))
    feed_list = [{x: xv, lengths: np.array(lv, np.int32)} for lv in LENGTHS[1:]]
    got = run_in_one_stage(grads, feed_list, "gpu_emulated", initialize=True, compiles=None)
    w = raw_lstm_weights(cell)
    for feed, run in zip(feed_list, got):
        for g, numeric in zip(run, np_raw_lstm_gradients(xv, w, feed[lengths])):
            np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-8)


def test_raw_rnn_gradient_loops_are_launched_on_the_device():
    """Both loops are GPU code: the forward loop's launches are driven from the host, its
    stacks in grown device buffers; the backward loop reads them, and the emitted array's
    gradient, as inputs (while_v2._while_grad captures the array's gradient rather than
    carrying it), so what it carries has fixed sizes and it has a device loop (one kernel
    for the whole loop, runtime/gpu/control_flow.py, where its launches fit a block)."""
    x, lengths, cell, grads = raw_lstm_gradients()
    spec = compile_signature([x, lengths], grads, [], [(T, B, D), (B,)],
                             variable_shapes={v.op.name: tuple(v.shape.as_list())
                                              for v in cell.variables},
                             target=gpu_target("sm_80")).spec
    verify_spec(spec)
    forward, backward = [s for s in spec["launches"] if "while" in s]
    assert forward["trips_dim"] == 0 and "device_loop" not in forward
    stacks = {s["grown"] for s in forward["stacks"]}
    assert None not in stacks
    assert backward.get("device_loop") and "trips_dim" not in backward
    read = {i[1] for i in backward["inputs"] if i[0] == "grown"}
    assert read & stacks
    # the emitted array's gradient: a row of B x H float64 per forward trip, an input
    (array_grad,) = read - stacks
    assert spec["grown"][array_grad]["bytes"] == [[[B * H * 8, [["raw/rnn/while:trips", 1]]]]]
    # what the backward loop carries has sizes known before it runs
    assert all(isinstance(v["bytes"], int) for v in backward["vars"])


# --------------------------------------------------------------- the spec and files
@pytest.fixture(scope="module")
def sine_spec():
    """The GPU spec (with PTX) of the loop without a bound and its gradient."""
    with gc.Graph().as_default():
        placeholders, _, fetches = sine_loop_and_grads(np.float64)
        return compile_signature(list(placeholders), fetches, [], [(5,), (5,), (5,), ()],
                                 target=gpu_target("sm_80")).spec


def test_the_spec_names_its_grown_buffers_and_passes_the_verifier(sine_spec):
    spec = sine_spec
    verify_spec(spec)
    assert spec["run_dim_names"] == ["while:trips"] and spec["run_dims"] == 1
    assert len(spec["grown"]) == 2 and all(g["first_rows"] == 16 for g in spec["grown"])
    forward, backward = [s for s in spec["launches"] if "while" in s]
    assert forward["trips_dim"] == 0 and "device_loop" not in forward
    assert [s["grown"] for s in forward["stacks"]] == [0, 1]
    assert ["grown", 0] in backward["inputs"] and ["grown", 1] in backward["inputs"]


def _corrupt(spec, change):
    spec = copy.deepcopy(spec)
    change(spec)
    return spec


def _forward(spec):
    return next(s for s in spec["launches"] if "while" in s)


def _backward_input(spec):
    step = [s for s in spec["launches"] if "while" in s][1]
    return step["inputs"].index(["grown", 0])


CORRUPTIONS = {
    "a key past the grown buffers": (
        lambda s: [s for s in s["launches"] if "while" in s][1]["inputs"].__setitem__(
            _backward_input(s), ["grown", 7]),
        "grown buffer 7 does not exist"),
    "a trips_dim past the run dims": (
        lambda s: _forward(s).__setitem__("trips_dim", 3), "trips_dim: 3 names no run dim"),
    "a grown stack without its trip count": (
        lambda s: _forward(s).pop("trips_dim"), "the loop sets no trips_dim"),
    "a stack growing in another buffer than its output's": (
        lambda s: _forward(s)["stacks"][0].__setitem__("grown", 1), "grows in buffer 1"),
    "run dim names that are not the run dims": (
        lambda s: s.__setitem__("run_dim_names", []), "run_dim_names"),
    "a grown buffer with no first rows": (
        lambda s: s["grown"][0].__setitem__("first_rows", 0), "first_rows 0"),
    "a grown size negative for every dim": (
        lambda s: s["grown"][0].__setitem__("bytes", [-8]), "grown 0 bytes 0: is negative"),
    "a grown size naming an unknown dim": (
        lambda s: s["grown"][0].__setitem__("bytes", [[[8, [["nothing:trips", 1]]]]]),
        "unknown symbol 'nothing:trips'"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_corrupted_grown_field_is_refused_before_anything_runs(sine_spec, name):
    change, message = CORRUPTIONS[name]
    bad = _corrupt(sine_spec, change)
    with pytest.raises(InvalidSpec, match=message):
        verify_spec(bad)
    if "unknown symbol" in message or "negative" in message:
        return  # the executable checks structure, not symbols or bounds (the run does)
    with pytest.raises(ValueError, match=message):
        GpuExecutable(bad, EmulatedDevice())


def test_an_exported_gpu_file_grows_its_stacks_standalone(native, tmp_path):
    """The file's spec (verified by runtime.load) runs the loop and its gradient on the
    emulated device through the runtime alone, for trip counts it never saw."""
    placeholders, r, fetches = sine_loop_and_grads(np.float64)
    names = ["v0", "w", "b", "limit"]
    path = str(tmp_path / "grown.gcx")
    with gc.Session() as sess:
        sess.run(fetches, sine_feed(placeholders, np.float64, 2))
        gc.export(sess, path, dict(zip(names, placeholders)),
                  dict(zip(["v", "dv0", "dw", "db"], fetches)), target="gpu")
    loaded = runtime.load(path, device="emulated")
    for trips in (0, 33, 300):
        feed = sine_feed(placeholders, np.float64, trips)
        got = loaded.run({n: feed[p] for n, p in zip(names, placeholders)})
        v0, w, b, _ = (feed[p] for p in placeholders)
        want_v, want_grads = np_sine_loop(v0, w, b, trips, r)
        for key, want in zip(["v", "dv0", "dw", "db"], [want_v, *want_grads]):
            np.testing.assert_allclose(got[key], want, **tol(np.float64))


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_the_growing_loops_ptx_assembles(sine_spec, tmp_path):
    spec = sine_spec
    assert [s for s in spec["launches"] if "while" in s][0]["trips_dim"] == 0
    for arch in ("sm_80", "sm_90"):
        _ptxas_report(spec["ptx"], arch, tmp_path)
