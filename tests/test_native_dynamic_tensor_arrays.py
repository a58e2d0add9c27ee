"""TensorArrays that grow (dynamic_size=True), appended to by a while_loop (`ta.write(i,
x)` at a counter from 0, raw_rnn's emitted arrays), compiled natively on the CPU: the
array after the loop is a stack of one element per iteration growing on the heap
(graphc/compiler/regions.py appended_arrays), its rows the loop's trip count, known only
during the run; the stack, gathers and reductions of it after the loop compile too
(backends/cpu/entry.py hands them the rows). Each native case runs with the While and If
host kernels made to fail (conftest's `native`), against values written here with NumPy
and against the reference executor, for 0, 1, 7 and 1023 elements (past several
doublings of the rows), float32 and float64; gradients against central differences in
float64. The emulated GPU gives the same numbers (tests/test_gpu_growable_stacks.py)."""

import numpy as np
import pytest

import graphc as gc
from tests.native_loops import (assert_raw_lstm_losses, np_raw_lstm_gradients, raw_lstm,
                                raw_lstm_weights, run_in_one_stage)
from tests.test_dynamic_rnn import weights
from tests.test_native_unbounded_stacks import _rss_bytes

FLOATS = [np.float32, np.float64]
ELEMENTS = [0, 1, 7, 1023]


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "compiled")


def tol(dtype):
    return dict(rtol=2e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)


def run_all(fetches, feed_list, backend="compiled", monkeypatch=None, compiles=1):
    return run_in_one_stage(fetches, feed_list, backend, monkeypatch, initialize=True,
                            compiles=compiles)


# ------------------------------------------------------- a loop appending to an array
def appending_loop(dtype, n=3):
    """v <- tanh(0.9 v + 0.1) while a float counter (no bound the cond gives) stays below
    `limit`, writing 2v to a dynamic_size array each iteration; then the array's stack
    reduced, its size, and a gather of its first and last elements."""
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
    fetches = [gc.reduce_sum(stacked * stacked, axis=0), gc.reduce_max(stacked), size, v]
    return (x, limit), fetches, ta.read(size - 1) * 1.0


def np_appending_loop(x0, elements):
    dtype = x0.dtype.type
    v, rows = x0, []
    for _ in range(elements):
        v = np.tanh(v * dtype(0.9) + dtype(0.1))
        rows.append(v * dtype(2.0))
    stacked = np.array(rows, x0.dtype).reshape(-1, len(x0))
    top = stacked.max() if elements else None
    return (stacked * stacked).sum(0), top, elements, v


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_loop_appending_to_a_growing_array_runs_natively(native, monkeypatch, dtype):
    (x, limit), fetches, _ = appending_loop(dtype)
    x0 = np.array([-0.7, 0.2, 1.3], dtype)
    feed_list = [{x: x0, limit: dtype(k)} for k in ELEMENTS]
    got = run_all(fetches[:1] + fetches[2:], feed_list)
    reference = run_all(fetches[:1] + fetches[2:], feed_list, "reference", monkeypatch)
    for k, g, r in zip(ELEMENTS, got, reference):
        squares, _, size, v = np_appending_loop(x0, k)
        np.testing.assert_allclose(g[0], squares, **tol(dtype))
        assert g[1] == size == r[1]
        np.testing.assert_allclose(g[2], v, **tol(dtype))
        np.testing.assert_allclose(g[0], r[0], **tol(dtype))


def test_the_stack_feeds_further_kernels_natively(native):
    """The stack's max (a reduction over all its rows) and a read of its last element
    (an index computed from its size), after the loop, in the same native stage."""
    (x, limit), fetches, last = appending_loop(np.float64)
    x0 = np.array([-0.7, 0.2, 1.3])
    got = run_all([fetches[1], last], [{x: x0, limit: float(k)} for k in (1, 7, 1023)])
    for k, g in zip((1, 7, 1023), got):
        _, top, _, v = np_appending_loop(x0, k)
        np.testing.assert_allclose(g[0], top, rtol=1e-13)
        np.testing.assert_allclose(g[1], 2 * v, rtol=1e-13)


def test_the_grown_arrays_are_freed_after_each_run(native):
    """200 runs appending 1023 elements of 512 float64 (4 MiB of rows, the stack and the
    squares computed of it after the loop as much again): a run that kept them would
    hold 8 MiB more each; the process grows by a fraction of one."""
    (x, limit), fetches, _ = appending_loop(np.float64, n=512)
    feed = {x: np.linspace(-1, 1, 512), limit: 1023.0}
    with gc.Session() as sess:
        for _ in range(10):
            sess.run(fetches[:1], feed)
        before = _rss_bytes()
        for _ in range(200):
            sess.run(fetches[:1], feed)
        grown = _rss_bytes() - before
        assert sess.compile_count == 1
    assert grown < 16 * 2 ** 20, f"the process grew by {grown} bytes over 200 runs"


def test_reading_past_the_size_names_the_op_and_the_line(native):
    """A read at the array's size (known only during the run) fails in native code with
    the reference kernel's message, naming the read and the user's line."""
    x = gc.placeholder(gc.float64, [2])
    limit = gc.placeholder(gc.float64, [])
    ta = gc.TensorArray(gc.float64, size=0, dynamic_size=True, element_shape=[2])
    def body(i, c, ta):
        return i + 1, c + 1, ta.write(i, x * gc.cast(i, gc.float64))
    _, _, ta = gc.while_loop(lambda i, c, ta: gc.reduce_sum(c) < limit, body,
                             [gc.constant(0), gc.zeros([1], gc.float64), ta])
    past = ta.read(ta.size())  # the line the error names
    with gc.Session() as sess:
        with pytest.raises(gc.errors.InvalidArgumentError) as e:
            sess.run(gc.reduce_sum(past), {x: [1.0, 2.0], limit: 5.0})
        assert "Tried to read from index 5 but array size is: 5" in str(e.value)
        assert "test_native_dynamic_tensor_arrays.py" in str(e.value)
        assert sess.compile_count == 1


def test_writing_an_element_of_the_wrong_shape_fails_where_the_write_is():
    ta = gc.TensorArray(gc.float64, size=0, dynamic_size=True, element_shape=[2])
    with pytest.raises(ValueError, match="Inconsistent shapes"):
        gc.while_loop(lambda i, ta: i < 3,
                      lambda i, ta: (i + 1, ta.write(i, gc.zeros([3], gc.float64))),
                      [gc.constant(0), ta])


def test_a_fetched_stack_keeps_the_host_path():
    """A fetch is sized by the runtime before the run: a stack whose rows the loop sets
    cannot be one, so the loop runs on the host (regions.py); same numbers."""
    (x, limit), fetches, _ = appending_loop(np.float64)
    x0 = np.array([-0.7, 0.2, 1.3])
    ta_stack = fetches[1].op.inputs[0]  # reduce_max's input
    with gc.Session() as sess:
        for k in (0, 7):
            got = sess.run(ta_stack, {x: x0, limit: float(k)})
            v, rows = x0, []
            for _ in range(k):
                v = np.tanh(v * 0.9 + 0.1)
                rows.append(2 * v)
            np.testing.assert_allclose(got, np.array(rows).reshape(-1, 3), rtol=1e-13)


def test_an_array_appended_to_in_a_loop_body_keeps_the_host_path(monkeypatch):
    """An appending loop nested in another loop's body: its rows would outlive the body's
    entry that frees them, so it runs on the host; same numbers as the reference."""
    x = gc.placeholder(gc.float64, [2])

    def outer(j, acc):
        ta = gc.TensorArray(gc.float64, size=0, dynamic_size=True, element_shape=[2])
        _, ta = gc.while_loop(lambda i, ta: i < j + 1,
                              lambda i, ta: (i + 1, ta.write(i, x * gc.cast(i + 1, gc.float64))),
                              [gc.constant(0), ta])
        return j + 1, acc + gc.reduce_sum(ta.stack(), axis=0)
    y = gc.while_loop(lambda j, acc: j < 3, outer, [gc.constant(0), gc.zeros([2], gc.float64)])[1]
    feed = [{x: np.array([0.5, -2.0])}]
    got = run_all([y], feed, compiles=1)
    reference = run_all([y], feed, "reference", monkeypatch)
    np.testing.assert_allclose(got[0][0], np.array([0.5, -2.0]) * (1 + 3 + 6), rtol=1e-13)
    np.testing.assert_allclose(got[0][0], reference[0][0], rtol=1e-13)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_emulated_gpu_gives_the_same_numbers(monkeypatch, dtype):
    """The GPU target grows the appended array in a device buffer, which the kernels
    after the loop read (tests/test_gpu_growable_stacks.py)."""
    (x, limit), fetches, _ = appending_loop(dtype)
    x0 = np.array([-0.7, 0.2, 1.3], dtype)
    feed_list = [{x: x0, limit: dtype(k)} for k in (0, 7, 40)]
    cpu = run_all(fetches, feed_list)
    gpu = run_all(fetches, feed_list, "gpu_emulated", monkeypatch, compiles=None)
    for c_run, g_run in zip(cpu, gpu):
        for c, g in zip(c_run, g_run):
            np.testing.assert_allclose(g, c, **tol(dtype))


# ------------------------------------------------------------------------- raw_rnn
T, B, D, H = 6, 3, 4, 5


LENGTHS = [[0, 0, 0], [1, 1, 1], [6, 3, 0], [2, 5, 4]]


@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_with_an_lstm_on_variable_lengths_runs_natively(native, monkeypatch, dtype):
    x, lengths, cell, loss, _ = raw_lstm(dtype, (T, B, D), H)
    rng = np.random.default_rng(4)
    feed_list = [{x: rng.standard_normal((T, B, D)).astype(dtype), lengths: np.array(lv, np.int32)}
                 for lv in LENGTHS]
    got = run_all([loss], feed_list, compiles=None)
    with gc.Session() as sess:  # the lengths are data: their values compile nothing more
        sess.run(gc.global_variables_initializer())
        sess.run(loss, feed_list[0])
        before = sess.compile_count
        for feed in feed_list[1:]:
            sess.run(loss, feed)
        assert sess.compile_count == before
    reference = run_all([loss], feed_list, "reference", monkeypatch)
    assert_raw_lstm_losses(got, feed_list, x, lengths, raw_lstm_weights(cell), tol(dtype))
    for g, r in zip(got, reference):
        np.testing.assert_allclose(g[0], r[0], **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_raw_rnn_over_an_array_of_known_elements_is_one_native_stage(native, dtype):
    """With the inputs' element shape given, the unstack, the loop and the stack of its
    outputs are one native stage: the stack's size (a Shape of the emitted array, the
    loop's trip count) and its Range run after the loop that sets that count."""
    x, lengths, cell, loss, _ = raw_lstm(dtype, (T, B, D), H, element_shape=[B, D])
    rng = np.random.default_rng(6)
    feed_list = [{x: rng.standard_normal((T, B, D)).astype(dtype), lengths: np.array(lv, np.int32)}
                 for lv in LENGTHS]
    got = run_all([loss], feed_list)
    assert_raw_lstm_losses(got, feed_list, x, lengths, raw_lstm_weights(cell), tol(dtype))


@pytest.mark.parametrize("lv", LENGTHS)
def test_raw_rnn_gradient_against_central_differences(lv):
    """d loss / d (inputs, kernel, bias) in float64 against central differences of the
    NumPy loss."""
    x, lengths, cell, loss, _ = raw_lstm(np.float64, (T, B, D), H)
    grads = gc.gradients(loss, [x] + cell.variables)
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((T, B, D))
    lv = np.array(lv, np.int32)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        w = weights(sess, cell, "raw/rnn/basic_lstm_cell/")
        got = sess.run(grads, {x: xv, lengths: lv})
    for g, numeric in zip(got, np_raw_lstm_gradients(xv, w, lv)):
        np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-8)


# ------------------------------------- guards on a trip count (checked before the run)
def test_comparisons_a_dims_sign_decides_record_no_guard():
    """The trip count is known only during the run: a guard on it sends the loop to the
    host. A sum of dims with coefficients of one sign is never negative (or positive):
    range(0, trips)'s `0 > trips` and the like need no guard."""
    from graphc.framework.symbolic import GuardSet, SymDim
    n, m = SymDim.symbol("n", 5), SymDim.symbol("m", 3)
    with GuardSet() as guards:
        assert not (0 > n) and not (n < 0) and (n + 2 * m >= 0) and (-n <= 0)
        assert not (n * m + 1 < 0)
        assert guards.guards == []
        assert (n > 2) is True  # decided on the hint: a guard
        assert len(guards.guards) == 1


def test_broadcasting_a_run_dim_against_one_records_no_guard():
    """A dim against itself, or a loop's trip count against the number 1 (a missing
    leading dim of a lower rank value: a stack's rows times an element), is the result
    whatever its value: no guard, which could only be checked once the loop has run. A
    feed's dim against 1 keeps its guard (a batch of 1 runs code of its own)."""
    from graphc.framework.symbolic import GuardSet, SymDim
    from graphc.framework.tensor_shape import broadcast_shapes
    from graphc.compiler.regions import trips_symbol
    n, trips = SymDim.symbol("n", 5), SymDim.symbol(trips_symbol("while"), 16)
    with GuardSet() as guards:
        assert broadcast_shapes([n, 3], [n, 3]).as_list() == [n, 3]
        assert broadcast_shapes([trips, 3], [3]).as_list() == [trips, 3]
        assert broadcast_shapes([1, 3], [trips + 1, 1]).as_list() == [trips + 1, 3]
        assert guards.guards == []
        assert broadcast_shapes([n, 3], [3]).as_list() == [n, 3]  # n against 1
        assert len(guards.guards) == 1


def test_no_value_before_the_loop_shares_a_growing_arrays_header():
    """The entry empties each header before the first kernel: a value computed before
    the loop, dead by then, placed over the header would leave its numbers there for the
    loop to take for a heap pointer. The header's life starts at the first kernel."""
    from graphc.compiler.regions import growable
    from tests.test_memory_planning import scheduled_module
    x = gc.placeholder(gc.float64, [8, 8])
    limit = gc.placeholder(gc.float64, [])
    a = gc.matmul(x, x) + 3.0  # dead once b is made
    b = gc.reduce_sum(gc.matmul(a, a), axis=0)
    ta = gc.TensorArray(gc.float64, size=0, dynamic_size=True, element_shape=[8])
    def body(i, c, ta):
        return i + 1, c + 1, ta.write(i, b * gc.cast(i, gc.float64))
    _, _, ta = gc.while_loop(lambda i, c, ta: gc.reduce_sum(c) < limit, body,
                             [gc.constant(0), gc.zeros([1], gc.float64), ta])
    module = scheduled_module([gc.reduce_sum(ta.stack())], {x: np.ones((8, 8)), limit: 3.0})
    headers = [b for v, b in module.memory_plan.buffers.items() if growable(v)]
    assert headers and all(b.live == (0, len(module.kernels) - 1) for b in headers)


def test_an_exported_file_appends_to_its_arrays_standalone(native, tmp_path):
    """The file runs the loop, its array and what is computed of it through runtime.load
    alone, for element counts it never saw."""
    import runtime
    (x, limit), fetches, _ = appending_loop(np.float64)
    path = str(tmp_path / "appending.gcf")
    with gc.Session() as sess:
        gc.export(sess, path, {"x": x, "limit": limit},
                  {"squares": fetches[0], "size": fetches[2]})
    loaded = runtime.load(path)
    x0 = np.array([-0.7, 0.2, 1.3])
    for k in (0, 5, 300):
        got = loaded.run({"x": x0, "limit": np.float64(k)})
        squares, _, size, _ = np_appending_loop(x0, k)
        np.testing.assert_allclose(got["squares"], squares, rtol=1e-12, atol=1e-13)
        assert got["size"] == size
