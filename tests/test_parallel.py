"""Large loops on a thread team (graphc/compiler/backends/cpu/parallel.py, runtime/jit.py).

Results must not depend on the team: elementwise kernels bit-identical with 1 and 2
threads, row reductions (softmax, layer norm, xent) deterministic and identical too (a
row never spans two threads); the thread count is honoured (the runtime's task counter:
one task per thread per split loop); the serial shim (no libgomp) gives the same bits;
run-time errors name the same first bad element as a serial run.
"""
import contextlib

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.compiler.backends.cpu import parallel as cg_parallel
from kernels import parallel as kp
from runtime import jit
from runtime import team as team_runtime
from runtime.executable import Executable

BIG = (1001, 263)   # 263k elements: above parallel.MIN_WORK for any nonempty kernel
FLAT = 300_001      # a 1-d loop: chunks are whole blocks of 64 elements


def executables(sess):
    stages = [st for exe in sess._cache.values() for st in getattr(exe, "stages", ())]
    return [st.variants.last for st in stages
            if getattr(st, "variants", None) is not None and st.variants.last is not None]


def run_with(threads, build, feeds_of):
    """Builds a graph, runs it on a Session with `threads`; returns (outputs, sessions'
    executables)."""
    g = gc.Graph()
    with g.as_default():
        fetches, placeholders = build()
    sess = gc.Session(graph=g, config=gc.ConfigProto(intra_op_parallelism_threads=threads))
    init = [v.initializer for v in g.get_collection(gc.GraphKeys.GLOBAL_VARIABLES)]
    if init:
        sess.run(init)
    out = sess.run(fetches, feeds_of(placeholders))
    return out, sess


def on_the_team():
    """Meanwhile every region runs on as many threads as it asks for, whatever the timing:
    its caller waits for the workers to join (runtime/team.py Team.gathered). Libgomp runs
    every thread of a region anyway; the serial shim none."""
    team = jit.thread_team()
    return team.gathered() if team is not None else contextlib.nullcontext()


def left_alone():
    """Meanwhile no worker joins a region: each runs on its caller alone, as when the
    workers are asleep or preempted (Team.held)."""
    team = jit.thread_team()
    return team.held() if team is not None else contextlib.nullcontext()


def rng_array(shape, seed=0, dtype=np.float32, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def elementwise():
    a = gc.placeholder(gc.float32, [None, None])
    b = gc.placeholder(gc.float32, [None, None])
    y = gc.nn.relu(a * b + 1.5) * 0.5 + gc.sigmoid(a) - gc.tanh(b) * gc.exp(-a * a)
    return y, (a, b)


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (1, FLAT), BIG])
def test_elementwise_bit_identical_across_thread_counts(shape):
    feeds = lambda ph: {ph[0]: rng_array(shape, 1), ph[1]: rng_array(shape, 2)}  # noqa
    outs = [run_with(t, elementwise, feeds)[0] for t in (1, 2, 3)]
    a, b = rng_array(shape, 1).astype(np.float64), rng_array(shape, 2).astype(np.float64)
    expect = np.maximum(a * b + 1.5, 0) * 0.5 + 1 / (1 + np.exp(-a)) - np.tanh(b) * np.exp(-a * a)
    np.testing.assert_allclose(outs[0], expect, rtol=1e-5, atol=1e-5)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def row_reductions():
    x = gc.placeholder(gc.float32, [None, None])
    labels = gc.placeholder(gc.int32, [None])
    sm = gc.nn.softmax(x)
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    ln = (x - mean) * gc.rsqrt(var + 1e-5)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=x))
    grad = gc.gradients(loss, x)[0]
    total = gc.reduce_sum(x * x)
    return [sm, ln, loss, grad, total], (x, labels)


@pytest.mark.parametrize("shape", [(7, 5), (1001, 263), (3, 50_001)])
def test_reductions_deterministic_and_independent_of_threads(shape):
    x = rng_array(shape, 3)
    lab = np.random.default_rng(4).integers(0, shape[1], shape[0]).astype(np.int32)
    feeds = lambda ph: {ph[0]: x, ph[1]: lab}  # noqa: E731
    runs = [run_with(t, row_reductions, feeds)[0] for t in (2, 2, 1)]
    for other in runs[1:]:
        for got, first in zip(other, runs[0]):
            np.testing.assert_array_equal(got, first)
    sm, ln, loss, grad, total = runs[0]
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(sm, p, rtol=1e-4, atol=1e-6)
    centered = x64 - x64.mean(1, keepdims=True)
    np.testing.assert_allclose(ln, centered / np.sqrt((centered ** 2).mean(1, keepdims=True)
                                                      + 1e-5), rtol=1e-3, atol=1e-3)
    xent = -np.log(p[np.arange(shape[0]), lab])
    np.testing.assert_allclose(loss, xent.mean(), rtol=1e-4)
    onehot = np.zeros(shape)
    onehot[np.arange(shape[0]), lab] = 1
    np.testing.assert_allclose(grad, (p - onehot) / shape[0], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(total, (x64 ** 2).sum(), rtol=1e-4)


@pytest.fixture
def split_everything(monkeypatch):
    """Every safe loop splits, however small (codegen reads this when it compiles)."""
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (2, 129)])
def test_tiny_loops_split_across_threads(split_everything, shape):
    """Tiny odd sizes split into chunks of a row (or a 64-element block) still give the
    bits of a serial run: elementwise and row reductions alike."""
    x = rng_array(shape, 3)
    lab = np.random.default_rng(4).integers(0, shape[1], shape[0]).astype(np.int32)
    feeds = lambda ph: {ph[0]: x, ph[1]: lab}  # noqa: E731
    one, _ = run_with(1, row_reductions, feeds)
    two, sess = run_with(2, row_reductions, feeds)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    if jit.parallel_runtime() and shape[0] > 1:
        exe = executables(sess)[0]
        before = exe.parallel_tasks
        with on_the_team():
            exe.run([x, lab])
        assert exe.parallel_tasks - before >= 2  # a team ran


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_count_is_honoured(threads, monkeypatch):
    monkeypatch.delenv("GRAPHC_PARALLEL_MIN_WORK", raising=False)
    _, sess = run_with(threads, elementwise,
                       lambda ph: {ph[0]: rng_array(BIG, 1), ph[1]: rng_array(BIG, 2)})
    (exe,) = executables(sess)
    assert exe.num_threads == threads
    before = exe.parallel_tasks
    with on_the_team():
        y = exe.run([rng_array(BIG, 5), rng_array(BIG, 6)])
    assert exe.parallel_tasks - before == (threads if jit.parallel_runtime() else 1)
    # small inputs are not worth a team: one serial task
    before = exe.parallel_tasks
    exe.run([rng_array((3, 5), 5), rng_array((3, 5), 6)])
    assert exe.parallel_tasks - before == 1
    assert y[0].shape == BIG


def test_default_thread_count_is_the_available_cores(monkeypatch):
    import os
    monkeypatch.delenv("GRAPHC_NUM_THREADS", raising=False)
    assert jit.default_num_threads() == len(os.sched_getaffinity(0))
    _, sess = run_with(0, elementwise, lambda ph: {ph[0]: rng_array((3, 3)),
                                                   ph[1]: rng_array((3, 3))})
    assert executables(sess)[0].num_threads == len(os.sched_getaffinity(0))
    monkeypatch.setenv("GRAPHC_NUM_THREADS", "3")
    assert jit.default_num_threads() == 3


def test_serial_shim_without_libgomp(monkeypatch):
    """GRAPHC_OPENMP=0 JIT-compiles the serial shim (what runs where libgomp is missing):
    same bits, one task per loop whatever the thread setting."""
    feeds = lambda ph: {ph[0]: rng_array(BIG, 1), ph[1]: rng_array(BIG, 2)}  # noqa: E731
    team, _ = run_with(2, elementwise, feeds)
    monkeypatch.setenv("GRAPHC_OPENMP", "0")
    assert jit.openmp_library() is None and jit.parallel_runtime() is None
    serial, sess = run_with(2, elementwise, feeds)
    np.testing.assert_array_equal(serial, team)
    (exe,) = executables(sess)
    assert "GOMP_parallel" not in exe.optimized_ir()
    assert "graphc_team_parallel" not in exe.optimized_ir()
    before = exe.parallel_tasks
    exe.run([rng_array(BIG, 1), rng_array(BIG, 2)])
    assert exe.parallel_tasks - before == 1


@pytest.mark.parametrize("first_line", ["declare", "other"])
def test_linking_drops_exactly_the_team_declarations(first_line):
    """link_parallel_runtime drops the lines _OMP_DECLARE matches, found from each
    `declare` line rather than by the pattern over the whole module: a declaration of a
    team function (quoted or not, the first line or the last without its newline) goes,
    a call, a comment or another declaration of the same line stays."""
    team_fns = [kp.PARALLEL_FN, kp.THREAD_NUM_FN, kp.NUM_THREADS_FN, kp.RUN_BEGIN_FN,
                kp.RUN_END_FN]
    lines = [f"declare void @{team_fns[0]}(ptr, ptr, i32)",
             "; ModuleID = 'm'",
             f'declare i32 @"{team_fns[1]}"()',
             "declare double @exp(double)",
             f"  call void @{team_fns[0]}(ptr @t, ptr %d, i32 2)",
             f"; declare i32 @{team_fns[2]}()",
             f"declare i32 @{team_fns[2]}",  # no parameter list: not the pattern
             f"declare void @{team_fns[3]}() nounwind",
             "define void @f() {\n  ret void\n}",
             f"declare void @{team_fns[4]}()"]
    if first_line != "declare":
        lines.insert(0, "target triple = \"x86_64-unknown-linux-gnu\"")
    text = "\n".join(lines)
    expected = jit._OMP_DECLARE.sub("", text)
    linked = jit.link_parallel_runtime(text)
    assert linked.startswith(expected) and linked != expected  # the shim follows
    assert [line for line in expected.splitlines() if line.startswith("declare")] == \
        ["declare double @exp(double)", f"declare i32 @{team_fns[2]}"]


def test_the_team_or_libgomp_is_used_when_present():
    """Linux: the process's own team (runtime/team.py); elsewhere libgomp when found."""
    import sys
    kind = jit.parallel_runtime()
    if sys.platform.startswith("linux"):
        assert kind == "team"
    if kind is None:
        pytest.skip("no thread team on this machine: the serial shim is what runs")
    _, sess = run_with(2, elementwise, lambda ph: {ph[0]: rng_array(BIG),
                                                   ph[1]: rng_array(BIG)})
    code = executables(sess)[0].optimized_ir()
    assert ("graphc_team_parallel" if kind == "team" else "GOMP_parallel") in code



def test_libgomp_is_found_without_a_subprocess(monkeypatch):
    """The loader finds libgomp by its soname: find_library (which runs `ldconfig -p`, a
    process started in every warm first run) is the fallback only."""
    if jit.openmp_library() is None:
        pytest.skip("no libgomp on this machine: the serial shim is what runs")
    import ctypes.util

    def no_subprocess(name):
        raise AssertionError(f"find_library({name!r}) was called")
    monkeypatch.setattr(ctypes.util, "find_library", no_subprocess)
    monkeypatch.setattr(jit, "_gomp_path", False)  # not looked for yet
    assert jit.openmp_library() is not None

def gather_build():
    params = gc.placeholder(gc.float32, [None, None])
    idx = gc.placeholder(gc.int32, [None])
    return gc.gather(params, idx) * 2.0 + 1.0, (params, idx)


@pytest.mark.parametrize("threads", [1, 2])
def test_errors_report_the_first_bad_index(threads):
    """Bad indices in two chunks: the message names the first, as a serial run does."""
    params = rng_array((50, 5001), 7)
    idx = np.arange(999, dtype=np.int32) % 50
    idx[700] = 77   # in a late chunk
    idx[400] = -3   # the first bad one
    with pytest.raises(gc.errors.InvalidArgumentError) as err:
        run_with(threads, gather_build, lambda ph: {ph[0]: params, ph[1]: idx})
    assert "-3" in str(err.value) and "77" not in str(err.value)
    ok = idx.copy()
    ok[[400, 700]] = [1, 2]
    out, _ = run_with(threads, gather_build, lambda ph: {ph[0]: params, ph[1]: ok})
    np.testing.assert_array_equal(out, params[ok] * np.float32(2) + np.float32(1))


def test_in_place_variable_update_splits():
    """An SGD update reads and writes the variable at the same element: split, exact."""
    w0 = rng_array(BIG, 8)
    g0 = rng_array(BIG, 9)

    def build():
        w = gc.Variable(w0)
        grad = gc.placeholder(gc.float32, BIG)
        return [w.assign_sub(grad * 0.25)], (grad,)

    for threads in (1, 2):
        out, _ = run_with(threads, build, lambda ph: {ph[0]: g0})
        np.testing.assert_array_equal(out[0], w0 - g0 * np.float32(0.25))


def test_scan_along_the_outer_axis_is_not_split():
    """cumsum over axis 0 reads the row before: such a loop stays serial, exact."""
    x = rng_array((2001, 130), 10)

    def build():
        ph = gc.placeholder(gc.float32, [None, None])
        return gc.cumsum(ph, axis=0), (ph,)

    out, _ = run_with(2, build, lambda ph: {ph[0]: x})
    np.testing.assert_array_equal(out, np.cumsum(x, axis=0))


def column_folds():
    """Reductions over the outer axis (folds: accumulating targets), beside an
    elementwise output of the same loop (a relu gradient with its bias gradient)."""
    x = gc.placeholder(gc.float32, [None, None])
    n = gc.placeholder(gc.int32, [None, None])
    masked = gc.where(x > 0.5, x * 3.0, gc.zeros_like(x))
    return [gc.reduce_sum(x, axis=0), gc.reduce_max(x * 2.0, axis=0), masked,
            gc.reduce_sum(masked, axis=0), gc.reduce_max(n, axis=0),
            gc.reduce_any(n > 7, axis=0)], (x, n)


@pytest.mark.parametrize("shape", [(3001, 97), (1, 5), (40_001, 3)])
def test_column_sums_split_into_fixed_chunks(shape, monkeypatch):
    """Folds split across the team into chunks fixed by the size alone (partials folded
    in chunk order): the same bits with 1, 2 and 3 threads, and right."""
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    x = rng_array(shape, 11)
    n = np.random.default_rng(12).integers(-50, 10, shape).astype(np.int32)
    feeds = lambda ph: {ph[0]: x, ph[1]: n}  # noqa: E731
    runs = [run_with(t, column_folds, feeds) for t in (1, 2, 3)]
    for out, _ in runs[1:]:
        for got, first in zip(out, runs[0][0]):
            np.testing.assert_array_equal(got, first)
    s, m, masked, ms, nmax, nany = runs[0][0]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(s, x64.sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(m, (x * 2).max(0))
    want = np.where(x > 0.5, x * np.float32(3), 0)
    np.testing.assert_array_equal(masked, want)
    np.testing.assert_allclose(ms, want.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(nmax, n.max(0))
    np.testing.assert_array_equal(nany, (n > 7).any(0))
    if jit.parallel_runtime() and shape[0] > 1:
        exe = executables(runs[1][1])[0]
        before = exe.parallel_tasks
        with on_the_team():
            exe.run([x, n])
        assert exe.parallel_tasks - before >= 2  # a team ran the folds


def test_column_sum_with_nan_keeps_it():
    """A NaN in one chunk reaches the folded max and sum (partials keep it)."""
    x = rng_array((5000, 33), 13)
    x[4321, 7] = np.nan

    def build():
        ph = gc.placeholder(gc.float32, [None, None])
        return [gc.reduce_sum(ph, axis=0), gc.reduce_max(ph, axis=0)], (ph,)

    (s, m), _ = run_with(2, build, lambda ph: {ph[0]: x})
    assert np.isnan(s[7]) and np.isnan(m[7])
    np.testing.assert_array_equal(np.isnan(s), np.isnan(x.sum(0)))


def test_standalone_runtime_runs_parallel_code(tmp_path):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 263], name="x")
        y = gc.identity(gc.tanh(x) * 3.0 + x, name="y")
    sess = gc.Session(graph=g)
    path = str(tmp_path / "m.gcx")
    gc.export(sess, path, inputs={"x": x}, outputs={"y": y})
    m = runtime.load(path)
    xv = rng_array((1001, 263), 12)
    np.testing.assert_array_equal(m.run({"x": xv})["y"], sess.run(y, {x: xv}))


# A region of the team (graphc_omp_parallel) whose task counts itself in the region's
# own counter and records which thread numbers ran it, a worker then sleeping nap_us (a
# worker the OS took off its core); and the run's start and end.
TEAM_PROBE_IR = f"""
@probe.tasks = global i64 0
@probe.threads = global i64 0
@probe.nap_us = global i32 0
@probe.size = global i32 0
declare i32 @usleep(i32)
declare i32 @{kp.NUM_THREADS_FN}()
declare void @{kp.PARALLEL_FN}(ptr, ptr, i32)
declare i32 @{kp.THREAD_NUM_FN}()
declare void @{kp.RUN_BEGIN_FN}()
declare void @{kp.RUN_END_FN}()

define void @probe.task(ptr %count) {{
  %n = atomicrmw add ptr @probe.tasks, i64 1 monotonic
  %mine = atomicrmw add ptr %count, i64 1 monotonic
  %tid = call i32 @{kp.THREAD_NUM_FN}()
  %tid.64 = zext i32 %tid to i64
  %bit = shl i64 1, %tid.64
  %was = atomicrmw or ptr @probe.threads, i64 %bit monotonic
  %size = call i32 @{kp.NUM_THREADS_FN}()
  %size.was = atomicrmw max ptr @probe.size, i32 %size monotonic
  %worker = icmp ne i32 %tid, 0
  br i1 %worker, label %nap, label %out
nap:
  %us = load i32, ptr @probe.nap_us
  %rc = call i32 @usleep(i32 %us)
  br label %out
out:
  ret void
}}

define i64 @probe.region(ptr %count, i32 %threads) {{
  %before = load atomic i64, ptr @probe.tasks monotonic, align 8
  call void @{kp.PARALLEL_FN}(ptr @probe.task, ptr %count, i32 %threads)
  %after = load atomic i64, ptr @probe.tasks monotonic, align 8
  %ran = sub i64 %after, %before
  ret i64 %ran
}}

define void @probe.begin() {{
  call void @{kp.RUN_BEGIN_FN}()
  ret void
}}

define void @probe.end() {{
  call void @{kp.RUN_END_FN}()
  ret void
}}
"""


class TeamProbe:
    """The probe module: region(threads) -> (tasks run, the region's own counter)."""

    def __init__(self, threads=2):
        import ctypes
        self.team = jit.thread_team()
        if self.team is None:
            pytest.skip("regions go to libgomp or run serially here: no team protocol")
        jit.ensure_team_workers(threads)
        self.module = jit.CompiledModule(TEAM_PROBE_IR)
        self._region = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32)(
            self.module.address("probe.region"))
        self.begin = ctypes.CFUNCTYPE(None)(self.module.address("probe.begin"))
        self.end = ctypes.CFUNCTYPE(None)(self.module.address("probe.end"))
        self.alone = ctypes.c_int64.from_address(
            self.module.global_address(jit.TEAM_ALONE_GLOBAL))
        self.threads = ctypes.c_int64.from_address(self.module.global_address("probe.threads"))
        self.nap_us = ctypes.c_int32.from_address(self.module.global_address("probe.nap_us"))
        self.size = ctypes.c_int32.from_address(self.module.global_address("probe.size"))

    def region(self, threads, count=None):
        import ctypes
        count = ctypes.c_int64(0) if count is None else count
        return self._region(ctypes.addressof(count), threads), count


def test_a_region_in_a_run_goes_to_the_team():
    """Inside a run, a region asking for 2 (3) threads runs its task on the caller as
    thread 0 and on worker 1 (and 2), each once, and none is counted as run alone; a
    thread outside any region sees a team of 1."""
    probe = TeamProbe(threads=3)
    with probe.team.gathered():
        assert probe.team.runs.value >= 1  # gathered() is a run: the workers stay awake
        tasks, count = probe.region(2)
        assert (tasks, count.value, probe.threads.value) == (2, 2, 0b11)
        probe.threads.value = 0
        tasks, count = probe.region(3)
        assert (tasks, count.value, probe.threads.value) == (3, 3, 0b111)
        assert probe.size.value == 3  # every thread of the region sees its team's size
        probe.threads.value = 0
        tasks, count = probe.region(1)  # a team of 1: the caller alone, not counted
        assert (tasks, probe.threads.value) == (1, 0b1)
    assert probe.alone.value == 0
    import ctypes
    size = ctypes.CFUNCTYPE(ctypes.c_int32)(probe.module.address(jit.NUM_THREADS_FN))
    assert size() == 1


def test_a_worker_that_never_arrives_does_not_hang_the_caller():
    """No worker joins (asleep, preempted: held): the caller runs every unit itself and
    returns; the region counts as run alone. A worker that comes later never runs a
    region that closed: the next region's task runs twice, the closed one's stays 1."""
    probe = TeamProbe()
    probe.begin()
    try:
        with probe.team.held():
            tasks, closed = probe.region(2)
            assert (tasks, closed.value, probe.threads.value) == (1, 1, 0b1)
            assert probe.alone.value == 1
    finally:
        probe.end()
    with probe.team.gathered():
        tasks, count = probe.region(2)
    assert (tasks, count.value, closed.value) == (2, 2, 1)
    assert probe.alone.value == 1


def test_a_region_that_waited_for_its_worker_makes_the_next_ones_run_alone():
    """A caller that waited at the close far longer than it worked (its worker asleep
    holding the task: preempted on a loaded machine) runs the next 2 regions alone, then
    opens the gate again; 2 losses in a row: the next 4."""
    probe = TeamProbe()
    team = probe.team
    team.rest.value = team.misses.value = 0
    try:
        probe.nap_us.value = 100_000
        with team.gathered():
            assert probe.region(2)[0] == 2
        assert (team.misses.value, team.rest.value) == (1, 2)
        probe.nap_us.value = 0
        probe.begin()
        try:
            assert [probe.region(2)[0] for _ in range(2)] == [1, 1]
            assert probe.alone.value == 2 and team.rest.value == 0
        finally:
            probe.end()
        probe.nap_us.value = 100_000
        with team.gathered():
            assert probe.region(2)[0] == 2
        assert (team.misses.value, team.rest.value) == (2, 4)
    finally:
        probe.nap_us.value = 0
        team.rest.value = team.misses.value = 0


def test_runs_begin_and_end_with_the_entry():
    """The entry of code with team regions tells the team a run started and ended, on
    success and on a failing run alike (else the workers would spin forever); runs
    nest (two Python threads' runs at once: the count goes back to 0 after both)."""
    team = jit.thread_team()
    if team is None:
        pytest.skip("regions go to libgomp or run serially here: runs tell it nothing")
    feeds = lambda ph: {ph[0]: rng_array(BIG), ph[1]: rng_array(BIG)}  # noqa: E731
    _, sess = run_with(2, elementwise, feeds)
    code = executables(sess)[0].optimized_ir()
    assert "graphc_team_run_begin" in code and "graphc_team_run_end" in code
    assert team.runs.value == 0
    g = gc.Graph()
    with g.as_default():
        params, idx = gc.placeholder(gc.float32, [None, None]), gc.placeholder(gc.int32, [None])
        y = [gc.gather(params, idx) * 2.0 + 1.0, gc.tanh(params) * 3.0 - params]
        with gc.Session(config=gc.ConfigProto(intra_op_parallelism_threads=2)) as sess:
            with pytest.raises(gc.errors.InvalidArgumentError):
                sess.run(y, {params: rng_array(BIG), idx: np.array([0, 5000], np.int32)})
    assert team.runs.value == 0
    probe = TeamProbe()
    probe.begin()
    probe.begin()
    probe.end()
    assert team.runs.value == 1
    probe.end()
    assert team.runs.value == 0


def test_regions_run_alone_give_the_bits_of_the_team():
    """A region no worker joined runs every unit and chunk on the caller: row
    reductions, a full sum and a gradient equal the bits of 2 threads and of 1."""
    x = rng_array((1001, 263), 3)
    lab = np.random.default_rng(4).integers(0, 263, 1001).astype(np.int32)
    feeds = lambda ph: {ph[0]: x, ph[1]: lab}  # noqa: E731
    one, _ = run_with(1, row_reductions, feeds)
    two, sess = run_with(2, row_reductions, feeds)
    if jit.thread_team() is None:
        pytest.skip("regions go to libgomp or run serially here: none runs alone")
    (exe,) = executables(sess)
    before, alone = exe.parallel_tasks, exe.team_regions_alone
    with left_alone():
        got = exe.run([x, lab])
    regions = exe.team_regions_alone - alone
    assert regions >= 2 and exe.parallel_tasks - before == regions
    with on_the_team():
        both = exe.run([x, lab])
    for a, b, c, d in zip(got, two, one, both):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, d)


def test_names_agree_between_codegen_and_runtime():
    from graphc.compiler.loops.program import MAX_ERROR_DETAILS
    for name in ("PARALLEL_FN", "THREAD_NUM_FN", "NUM_THREADS_FN", "THREADS_GLOBAL",
                 "TASKS_GLOBAL"):
        assert getattr(kp, name) == getattr(jit, name)
    assert cg_parallel._DETAILS == MAX_ERROR_DETAILS
    assert (kp.RUN_BEGIN_FN, kp.RUN_END_FN) == (jit.RUN_BEGIN_FN, jit.RUN_END_FN)
    assert team_runtime.MAX_THREADS == kp.MAX_THREADS  # the team's worker numbers index the slots


def test_bad_thread_count_rejected():
    _, sess = run_with(1, elementwise, lambda ph: {ph[0]: rng_array((2, 2)),
                                                   ph[1]: rng_array((2, 2))})
    exe = executables(sess)[0]
    assert isinstance(exe, Executable)
    with pytest.raises(ValueError):
        exe.set_num_threads(-2)


def test_forked_child_runs_serially():
    """The team's workers do not exist in a forked child (libgomp's team would hang
    there): the child's executables run their loops on one thread, with the same
    results; and a region that still asks for 2 threads there runs on its caller (the
    child's team has no workers) instead of waiting for one."""
    import os
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    feeds = lambda ph: {ph[0]: rng_array(BIG, 1), ph[1]: rng_array(BIG, 2)}  # noqa: E731
    expect, sess = run_with(2, elementwise, feeds)
    (exe,) = executables(sess)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report (tasks in one run, bits equal) through the pipe
        try:
            before = exe.parallel_tasks
            out = exe.run([rng_array(BIG, 1), rng_array(BIG, 2)])[0]
            ok = np.array_equal(out, expect)
            tasks = exe.parallel_tasks - before
            if jit.thread_team() is not None:
                exe._threads.value = 2
                before = exe.parallel_tasks
                with on_the_team():  # would wait for a worker if the child had one
                    out = exe.run([rng_array(BIG, 1), rng_array(BIG, 2)])[0]
                ok = ok and np.array_equal(out, expect) and exe.parallel_tasks - before == 1
            os.write(write, f"{tasks} {int(ok)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    got = os.read(read, 100).decode().split()
    os.close(read)
    assert status == 0 and got == ["1", "1"]
    assert exe._threads is None or exe._threads.value == 2  # the parent is unchanged


def conv_layer():
    """A conv layer's forward pass and both gradients (im2col + gemm chunks on the team:
    graphc/compiler/backends/cpu/conv_team.py)."""
    x = gc.placeholder(gc.float32, [40, 16, 16, 8])
    w = gc.constant(rng_array((3, 3, 8, 16), 14, scale=0.3))
    y = gc.nn.relu(gc.nn.conv2d(x, w, [1, 1, 1, 1], "SAME") + 0.1)
    loss = gc.reduce_sum(y * y)
    dx, dw = gc.gradients(loss, [x, w])
    return [y, dx, dw], (x,)


def test_conv_chunks_on_the_team_same_bits(split_everything):
    x = rng_array((40, 16, 16, 8), 15)
    runs = [run_with(t, conv_layer, lambda ph: {ph[0]: x}) for t in (1, 2, 3)]
    for out, _ in runs[1:]:
        for got, first in zip(out, runs[0][0]):
            np.testing.assert_array_equal(got, first)
    ref = gc.Session(graph=runs[0][1].graph, config=gc.ConfigProto(backend="reference"))
    g = runs[0][1].graph
    fetches = [op.outputs[0] for op in g.get_operations() if op.type in
               ("Relu", "Conv2DBackpropInput", "Conv2DBackpropFilter")]
    assert len(fetches) == 3
    x_ph = g.get_operations()[0].outputs[0]
    want = ref.run(fetches, {x_ph: x})
    got = runs[0][1].run(fetches, {x_ph: x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)
    if jit.parallel_runtime():
        exe = executables(runs[1][1])[0]
        before = exe.parallel_tasks
        with on_the_team():
            exe.run([x])
        assert exe.parallel_tasks - before >= 2  # a team ran the chunks


def test_blas_threads_restored_when_a_later_kernel_fails():
    """A run that fails after its gemm (an out-of-range gather) leaves through the entry's
    one failure exit, which restores BLAS's thread count as the normal return does."""
    import ctypes
    names = jit.blas_thread_symbols()
    if names is None:
        pytest.skip("the BLAS library offers no thread-count control")
    get_threads = getattr(ctypes.CDLL(jit.blas_library()), names[1])
    before = get_threads()
    a, w = rng_array((30, 40), 18), rng_array((40, 50), 19, scale=0.1)
    x = gc.placeholder(gc.float32, [30, 40])
    i = gc.placeholder(gc.int32, [2])
    y = gc.gather(gc.nn.relu(gc.matmul(x, gc.constant(w))), i)
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: a, i: [0, 29]}),
                                   np.maximum(a @ w, 0)[[0, 29]], rtol=1e-4, atol=1e-4)
        with pytest.raises(gc.errors.InvalidArgumentError, match="GatherV2|Gather"):
            sess.run(y, {x: a, i: [0, 30]})
    assert get_threads() == before


def test_blas_threads_pinned_during_runs_and_restored():
    """Inside a run BLAS is single-threaded (our team splits the products); after runs,
    overlapping ones from several Python threads included, its setting is as it was."""
    import ctypes
    import threading
    names = jit.blas_thread_symbols()
    if names is None:
        pytest.skip("the BLAS library offers no thread-count control")
    lib = ctypes.CDLL(jit.blas_library())
    get_threads = getattr(lib, names[1])
    before = get_threads()
    a = rng_array((300, 400), 16)

    def build():
        x = gc.placeholder(gc.float32, [None, 400])
        w = gc.constant(rng_array((400, 500), 17, scale=0.1))
        return gc.nn.relu(gc.matmul(x, w)), (x,)

    outs = {}

    def worker(k):
        outs[k] = [run_with(2, build, lambda ph: {ph[0]: a})[0] for _ in range(3)]
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert get_threads() == before
    want = np.maximum(a @ rng_array((400, 500), 17, scale=0.1), 0)
    for runs in outs.values():
        for got in runs:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(got, outs[0][0])


EXIT_SCRIPT = """
import numpy as np
import graphc as gc
from runtime import jit
x = gc.placeholder(gc.float32, [None, None])
y = gc.tanh(x) * 2.0 + x
with gc.Session(config=gc.ConfigProto(intra_op_parallelism_threads=2)) as sess:
    out = sess.run(y, {x: np.ones((1001, 263), np.float32)})
team = jit.thread_team()
print(float(out[0, 0]), 0 if team is None else len(team.threads))
"""


def test_process_exits_while_the_workers_spin():
    """A process that ends right after a run (its workers still spinning, GRACE_NS) exits
    with status 0 and does not hang: the workers are told to quit at exit and joined
    while the engine holding their code is alive (libgomp's threads spinning in an
    unloaded library were a segfault at exit)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], cwd=root, timeout=120,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        value, workers = done.stdout.split()
        np.testing.assert_allclose(float(value), np.tanh(1.0) * 2 + 1, rtol=1e-6)
        assert int(workers) == (1 if jit.thread_team() is not None else 0)
