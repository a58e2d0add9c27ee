"""Large outputs no later kernel reads are written with nontemporal stores
(backends/cpu/loop_kernel.py streamed_storages decides, loops/emitter.py _emit_streaming
emits): whole aligned lines stored at once, the elements before the first aligned line
and after the last whole one stored as usual.

The values must not change: every size (0, 1, 7, 1023, around the threshold, 2**22+3),
every misalignment of the output, float32 and float64, one or two threads, and the GPU
backend (which never streams) agree with NumPy. The structure: a large elementwise
kernel's IR has nontemporal stores; a small one and one whose output a later kernel reads
have none.
"""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import loop_kernel
from graphc.compiler.loops.emitter import PEEL_BYTES
from runtime.executable import Executable

NT = "!nontemporal"


def executables(sess):
    stages = [st for exe in sess._cache.values() for st in getattr(exe, "stages", ())]
    return [st.variants.last for st in stages
            if getattr(st, "variants", None) is not None and st.variants.last is not None]


def data(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 3).astype(dtype) for _ in range(3)]


def w1(a, b, c):
    return gc.nn.relu(a * b + c) * 0.5 + gc.sigmoid(a) - c * c


def w1_numpy(a, b, c):
    a, b, c = (x.astype(np.float64) for x in (a, b, c))
    return np.maximum(a * b + c, 0) * 0.5 + 1 / (1 + np.exp(-a)) - c * c


def run_w1(arrays, threads=None, extra=None):
    """W1 over Variables holding `arrays` (static sizes, as peers_bench's W1): (the
    fetched results, the Session's optimized IR). extra(out) -> more fetches."""
    g = gc.Graph()
    with g.as_default():
        a, b, c = (gc.Variable(x) for x in arrays)
        out = w1(a, b, c)
        fetches = [out] + (extra(out) if extra else [])
        init = gc.global_variables_initializer()
    config = gc.ConfigProto(intra_op_parallelism_threads=threads) if threads else None
    with gc.Session(graph=g, config=config) as sess:
        sess.run(init)
        got = sess.run(fetches)
        again = sess.run(fetches)  # the reused fetch array is written the same way
        ir = "\n".join(e.optimized_ir() for e in executables(sess)
                       if hasattr(e, "optimized_ir"))
    for x, y in zip(got, again):
        np.testing.assert_array_equal(x, y)
    return got, ir


def tolerance(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def threshold_elements(itemsize):
    """The fewest elements of W1 (3 inputs + 1 output) streamed on this machine."""
    return -(-loop_kernel.stream_threshold() // (4 * itemsize))


# ------------------------------------------------------------------ structure
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_output_is_streamed_small_is_not(dtype):
    size = np.dtype(dtype).itemsize
    n = threshold_elements(size)
    (got,), ir = run_w1(data(n + 5, dtype))
    assert NT in ir and "fence seq_cst" in ir
    np.testing.assert_allclose(got, w1_numpy(*data(n + 5, dtype)), **tolerance(dtype))
    (got,), ir = run_w1(data(n - 64, dtype))
    assert NT not in ir
    np.testing.assert_allclose(got, w1_numpy(*data(n - 64, dtype)), **tolerance(dtype))


def test_output_a_later_kernel_reads_is_not_streamed():
    """Fetched and also read by a product (a kernel of its own): that kernel finds the
    lines that are still cached."""
    n = 2 * threshold_elements(4) // 64 * 64
    arrays = data(n, np.float32)
    weights = np.linspace(-1, 1, 64 * 3).reshape(64, 3).astype(np.float32)
    (got, product), ir = run_w1(
        arrays, extra=lambda out: [gc.matmul(gc.reshape(out, [-1, 64]), weights)])
    assert NT not in ir
    want = w1_numpy(*arrays)
    np.testing.assert_allclose(got, want, **tolerance(np.float32))
    np.testing.assert_allclose(product, want.reshape(-1, 64) @ weights, rtol=1e-4,
                               atol=1e-3)


def test_output_the_kernel_reads_back_is_not_streamed(monkeypatch):
    """A variable updated in place is read by its own kernel: its lines are cached by
    that read, a streamed store would gain nothing (and only fetches stream)."""
    monkeypatch.setenv("GRAPHC_STREAM_BYTES", "0")
    g = gc.Graph()
    with g.as_default():
        v = gc.Variable(np.ones(4099, np.float32))
        step = gc.assign_sub(v, v * 0.5)
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        sess.run(step.op)
        got = sess.run(v)
        ir = "\n".join(e.optimized_ir() for e in executables(sess))
    assert NT not in ir
    np.testing.assert_array_equal(got, np.full(4099, 0.5, np.float32))


# ------------------------------------------------------------------ values
@pytest.mark.backends("compiled", "reference", "gpu_emulated")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 1023, 2 ** 22 + 3])
def test_values_at_odd_sizes(backend, dtype, n, monkeypatch):
    """Streamed from 0 bytes on (GRAPHC_STREAM_BYTES=0): the sizes whose loop is shorter
    than PEEL_BYTES are stored as usual, the largest runs every part."""
    monkeypatch.setenv("GRAPHC_STREAM_BYTES", "0")
    arrays = data(n, dtype, seed=n)
    (got,), ir = run_w1(arrays)
    assert got.dtype == dtype and got.shape == (n,)
    np.testing.assert_allclose(got, w1_numpy(*arrays), **tolerance(dtype))
    if backend == "compiled":  # streamed where the loop spans PEEL_BYTES
        assert (NT in ir) == (n * np.dtype(dtype).itemsize >= PEEL_BYTES)
    if backend == "gpu_emulated":
        assert NT not in ir


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_around_the_threshold(dtype):
    size = np.dtype(dtype).itemsize
    edge = threshold_elements(size)
    for n in (edge - 17, edge - 1, edge, edge + 1, edge + 15, edge + 16):
        arrays = data(n, dtype, seed=n)
        (got,), ir = run_w1(arrays)
        assert (NT in ir) == (n >= edge), n
        np.testing.assert_allclose(got, w1_numpy(*arrays), **tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_and_two_threads_give_the_same_bits(dtype, monkeypatch):
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    arrays = data(3 * threshold_elements(np.dtype(dtype).itemsize) + 7, dtype)
    (one,), ir = run_w1(arrays, threads=1)
    (two,), _ = run_w1(arrays, threads=2)
    assert NT in ir
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, w1_numpy(*arrays), **tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_misalignment_of_the_output(dtype, monkeypatch):
    """The fetch array at each offset from a line (multiples of the element size: the
    head loop runs up to the first line; else no element starts a line and all of them
    are stored as usual), each on one thread and on two (each chunk aligns itself, and a
    chunk shorter than PEEL_BYTES that would need a head or a tail is stored as usual)."""
    size = np.dtype(dtype).itemsize
    monkeypatch.setenv("GRAPHC_STREAM_BYTES", "0")
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    n = 2 * PEEL_BYTES // size + 11  # chunks of the team: some streamed, some too short
    arrays = data(n, dtype)
    want = w1_numpy(*arrays)
    offsets = list(range(0, 64, size)) + [size // 2]
    arrays_at = {}

    def fetch_at(self, fetch_alloc):
        outs = []
        for shape, dt in fetch_alloc:
            raw = np.empty(int(np.prod(shape)) * dt.itemsize + 128, np.uint8)
            start = (-raw.ctypes.data) % 64 + arrays_at["offset"]
            outs.append(raw[start:start + int(np.prod(shape)) * dt.itemsize]
                        .view(dt).reshape(shape))
        return outs

    monkeypatch.setattr(Executable, "_fetch_arrays", fetch_at)
    for threads in (1, 2):
        for offset in offsets:
            arrays_at["offset"] = offset
            (got,), ir = run_w1(arrays, threads=threads)
            assert NT in ir
            np.testing.assert_allclose(got, want, **tolerance(dtype),
                                       err_msg=f"offset {offset}, {threads} threads")


@pytest.mark.parametrize("offset", [0, 4, 36])
def test_long_rows_and_outputs_of_two_element_sizes(offset, monkeypatch):
    """A 2-d nest streams each row that spans PEEL_BYTES (16411 columns: every row starts
    at another place in its line), and a kernel storing a float32 and a float64 output
    lines up its lines on the float32 one (the lead) and stores the float64 one's, twice
    as long, as aligned as its element size guarantees."""
    monkeypatch.setenv("GRAPHC_STREAM_BYTES", "0")
    columns = PEEL_BYTES // 4 + 27
    x = data((5, columns), np.float32)[0]
    bias = np.linspace(-1, 1, columns).astype(np.float32)

    def fetch_at(self, fetch_alloc):
        outs = []
        for shape, dt in fetch_alloc:
            nbytes = int(np.prod(shape)) * dt.itemsize
            raw = np.empty(nbytes + 128, np.uint8)
            start = (-raw.ctypes.data) % 64 + offset
            outs.append(raw[start:start + nbytes].view(dt).reshape(shape))
        return outs

    monkeypatch.setattr(Executable, "_fetch_arrays", fetch_at)
    g = gc.Graph()
    with g.as_default():
        v = gc.Variable(x)
        y = gc.tanh(v + bias) * 3.0
        wide = gc.cast(y, gc.float64) * 0.25 + 1.0
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        got, got_wide = sess.run([y, wide])
        ir = "\n".join(e.optimized_ir() for e in executables(sess))
    assert "store <16 x float>" in ir and "store <16 x double>" in ir and NT in ir
    want = np.tanh(x.astype(np.float64) + bias) * 3.0
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_wide, got.astype(np.float64) * 0.25 + 1.0, rtol=1e-15)


def test_short_rows_are_not_streamed(monkeypatch):
    """Rows of 1024 floats (layer norm's) are not: numpy puts a large fetch array 16
    bytes past a line, and each row's elements outside whole lines, stored one by one,
    cost what the streamed lines saved."""
    monkeypatch.setenv("GRAPHC_STREAM_BYTES", "0")
    x = data((64, 1024), np.float32)[0]
    g = gc.Graph()
    with g.as_default():
        y = gc.sigmoid(gc.Variable(x)) * 2.0
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        got = sess.run(y)
        ir = "\n".join(e.optimized_ir() for e in executables(sess))
    assert NT not in ir
    np.testing.assert_allclose(got, 2 / (1 + np.exp(-x.astype(np.float64))), rtol=2e-6)


@pytest.mark.parametrize("read_first", [False, True])
def test_equal_kernels_stream_only_the_unread_output(read_first):
    """Two kernels equal up to their buffers, one output fetched only, the other also
    read by a product: kernel reuse (kernel_reuse.py) asks Program.unread_stores again
    for the second, so the one read later never runs the first one's streaming code, nor
    the other way round."""
    n = 2 * threshold_elements(4) // 64 * 64
    first, second = data(n, np.float32, seed=1), data(n, np.float32, seed=2)
    weights = np.linspace(-1, 1, 64 * 3).reshape(64, 3).astype(np.float32)
    g = gc.Graph()
    with g.as_default():
        outs = [w1(*(gc.Variable(x) for x in arrays)) for arrays in (first, second)]
        read = outs[0] if read_first else outs[1]
        product = gc.matmul(gc.reshape(read, [-1, 64]), weights)
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        got = sess.run(outs + [product])
        ir = "\n".join(e.optimized_ir() for e in executables(sess))
    bodies = [f for f in ir.split("\ndefine ")[1:] if "_loop_" in f.split("(")[0]]
    streaming = [f for f in bodies if NT in f]
    plain = [f for f in bodies if NT not in f and "fmul" in f]
    assert streaming and plain
    wants = [w1_numpy(*first), w1_numpy(*second)]
    for out, want in zip(got[:2], wants):
        np.testing.assert_allclose(out, want, **tolerance(np.float32))
    np.testing.assert_allclose(got[2], wants[0 if read_first else 1].reshape(-1, 64) @ weights,
                               rtol=1e-4, atol=1e-3)
