"""Every GPU kernel kind, run through the emulation of its PTX kernel (tests/gpu_emulation.py)
against the reference executor: reductions, products, convolutions, scans, scatters,
random ops, float16, and whole training steps (an MLP, a small CNN) checked against the
compiled CPU backend. No GPU is used: the PTX of every graph here is assembled by
ptxas for sm_80 and sm_90 (skipped where ptxas is absent), never launched."""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.gpu import generate_gpu
from graphc.compiler.driver import gpu_target, schedule_module
from graphc.compiler.lower import lower
from tests.gpu_emulation import EmulatedGpu
from tests.test_gpu_codegen import PTXAS, _ptxas_report

LAUNCHES = [None, (1, 1), (3, 32), (2, 5)]


def _rand(*shape, seed=0, dtype=np.float32):
    return np.random.RandomState(seed + 7 * sum(shape)).randn(*shape).astype(dtype)


def _planned(feeds, fetches, targets, arrays, variable_shapes=None, gpu=True):
    """The module through the driver's stages before codegen, for the GPU or the CPU."""
    module = lower(feeds, fetches, targets, [np.shape(a) for a in arrays],
                   variable_shapes=variable_shapes)
    schedule_module(module, gpu_target() if gpu else None)
    return module


def _compile_gpu_spec(feeds, fetches, arrays, targets=(), variables=None, block=256):
    """The GPU spec (sm_80) of the run, after checking that ptxas assembles its PTX for
    sm_80 and sm_90 (when ptxas is here)."""
    shapes = {k: np.shape(v) for k, v in (variables or {}).items()}
    module = _planned(feeds, fetches, list(targets), arrays, shapes)
    gpu = generate_gpu(module, block=block)
    if PTXAS is not None:
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as tmp:
            for arch in ("sm_80", "sm_90"):
                _ptxas_report(gpu.ptx(arch), arch, Path(tmp))
    return gpu.spec("sm_80")


def _reference(g, feeds, fetches, arrays):
    with gc.Session(graph=g, config=gc.ConfigProto(backend="reference")) as sess:
        return sess.run(fetches, dict(zip(feeds, arrays)))


def check_graph(build, launches=LAUNCHES, rtol=2e-5, atol=2e-5, block=256):
    """build() -> (feeds, fetches, arrays) in a fresh graph; every launch shape."""
    g = gc.Graph()
    with g.as_default():
        feeds, fetches, arrays = build()
    want = _reference(g, feeds, fetches, arrays)
    gpu = EmulatedGpu(_compile_gpu_spec(feeds, fetches, arrays, block=block))
    for launch in launches:
        grid, blk = launch or (None, None)
        got = gpu.run(list(arrays), grid=grid, block=blk)
        for x, w in zip(got, want):
            assert x.shape == np.shape(w), launch
            np.testing.assert_allclose(x, w, rtol=rtol, atol=atol, err_msg=str(launch))
    return gpu


# ------------------------------------------------------------- reductions
@pytest.mark.parametrize("n", [1, 7, 1023])
def test_row_and_column_reductions(n):
    def build():
        x = gc.placeholder(gc.float32, [3, n])
        fetches = [gc.reduce_sum(x, axis=1), gc.reduce_max(x, axis=1),
                   gc.reduce_min(x, axis=1, keepdims=True), gc.argmax(x, axis=1),
                   gc.argmin(x, axis=1), gc.reduce_sum(x, axis=0), gc.reduce_mean(x),
                   gc.nn.softmax(x), gc.nn.log_softmax(x)]
        return [x], fetches, [_rand(3, n)]
    check_graph(build, rtol=1e-4, atol=1e-4)


def test_reductions_propagate_nan_as_the_cpu_kernels():
    def build():
        x = gc.placeholder(gc.float32, [4, 300])
        return [x], [gc.reduce_max(x, axis=1), gc.reduce_min(x, axis=1), gc.argmax(x, axis=1),
                     gc.argmin(x, axis=1), gc.reduce_sum(x, axis=1)], [data]
    data = _rand(4, 300)
    data[1, 17] = np.nan
    data[2, 250] = np.nan
    data[2, 3] = np.nan
    data[3, :] = 5.0  # ties: the first index wins
    check_graph(build, rtol=1e-4, atol=1e-4)


def test_layer_norm_rows():
    def build():
        x = gc.placeholder(gc.float32, [5, 1023])
        mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
        return [x], [(x - mean) * gc.rsqrt(var + 1e-5)], [_rand(5, 1023)]
    check_graph(build, rtol=1e-4, atol=1e-4)


def _row_graph():
    """Row reductions of every kind over run-time row lengths (so that even 1-element
    rows go through the row template), in float32, float64 (64-bit shuffles: two
    halves) and int64 (value and position both 64-bit)."""
    x = gc.placeholder(gc.float32, [4, None])
    d = gc.placeholder(gc.float64, [4, None])
    i = gc.placeholder(gc.int64, [4, None])
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    fetches = [gc.reduce_sum(x, axis=1), gc.reduce_max(x, axis=1), gc.reduce_min(x, axis=1),
               gc.argmax(x, axis=1), gc.argmin(x, axis=1), gc.nn.softmax(x),
               (x - mean) * gc.rsqrt(var + 1e-5), gc.reduce_sum(d, axis=1),
               gc.argmax(d, axis=1), gc.argmin(i, axis=1), gc.reduce_max(i, axis=1)]
    return [x, d, i], fetches


def _row_data(n):
    """Rows: random; NaNs (max/min/argmax propagate the first one); all equal (ties:
    the first index wins); random with the extreme near the end."""
    x = _rand(4, n)
    x[2] = 5.0
    if n > 1:
        x[1, n // 3] = np.nan
        x[1, n - 1] = np.nan
    x[3, n - 1] = 9.0
    ints = np.random.RandomState(n).randint(-3, 3, size=(4, n)).astype(np.int64)
    return [x, x.astype(np.float64) * 1.5, ints]


# (threads per block the kernels are compiled for, blocks the emulation launches them
# with: warp multiples and partial warps, down to one thread)
ROW_BLOCKS = {32: [32, 1, 5, 17], 96: [96, 64, 33, 45], 256: [256, 100, 255, 7]}


@pytest.mark.parametrize("compiled", sorted(ROW_BLOCKS))
def test_row_reductions_at_any_block_size(compiled):
    """The row template's warp shuffles (and shared-memory step between warps) against
    the reference at row lengths 1, 7, 33, 1023, blocks of full and partial warps."""
    g = gc.Graph()
    with g.as_default():
        feeds, fetches = _row_graph()
    module = _planned(feeds, fetches, [], _row_data(7))
    gpu = generate_gpu(module, block=compiled)
    assert all(launch.template.__name__ == "emit_row_launch" and launch.block == compiled
               for launch in gpu.launches)
    emulated = EmulatedGpu(gpu.spec("sm_80", ptx=False))
    for n in (1, 7, 33, 1023):
        arrays = _row_data(n)
        want = _reference(g, feeds, fetches, arrays)
        for block in ROW_BLOCKS[compiled]:
            for grid in (None, 3):  # one block per row; blocks striding over rows
                got = emulated.run(arrays, grid=grid, block=block)
                for k, (x, w) in enumerate(zip(got, want)):
                    msg = f"n={n} block={block} grid={grid} fetch {k}"
                    assert x.shape == np.shape(w), msg
                    if np.asarray(w).dtype.kind in "iu":
                        np.testing.assert_array_equal(x, w, err_msg=msg)
                    else:
                        np.testing.assert_allclose(x, w, rtol=1e-4, atol=1e-4, err_msg=msg)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
@pytest.mark.parametrize("compiled", [32, 96, 256])
def test_row_reduction_ptx_shuffles_and_assembles(compiled, tmp_path):
    """Every row kernel combines within warps by shfl.sync.down (f64 and i64 as two
    32-bit shuffles), takes two barriers per reduction (one when the block is a single
    warp) and one per row, and assembles for sm_80 and sm_90."""
    import re
    g = gc.Graph()
    with g.as_default():
        feeds, fetches = _row_graph()
    gpu = generate_gpu(_planned(feeds, fetches, [], _row_data(7)), block=compiled)
    ptx = gpu.ptx("sm_80")
    for launch in gpu.launches:
        body = ptx[ptx.index(f".entry {launch.name}("):]
        body = body[:body.index("\n}\n")]
        steps = len([k for k in (16, 8, 4, 2, 1) if k < min(compiled, 32)]) + \
            len([k for k in (16, 8, 4, 2, 1) if k < (compiled + 31) // 32])
        # shuffles a step: one per 32 bits of the value, and two for a position
        per_step = 0
        for e in launch.details["reductions"]:
            wide = (e.args[0].dtype if e.kind == "argreduce" else e.dtype) in ("float64",
                                                                              "int64")
            per_step += (2 if wide else 1) + (2 if e.kind == "argreduce" else 0)
        assert len(re.findall(r"shfl\.sync\.down\.b32", body)) == steps * per_step, \
            launch.name
        barriers = len(re.findall(r"\bbar\.sync\b", body))
        per_reduction = 1 if compiled <= 32 else 2
        assert barriers == per_reduction * len(launch.details["reductions"]) + 1, launch.name
    for arch in ("sm_80", "sm_90"):
        _ptxas_report(gpu.ptx(arch), arch, tmp_path)


def test_shuffle_down_emulation_is_shfl_down():
    """The thread layer's shuffle in the emulation: thread t receives the value of lane
    t % 32 + k of its warp, or keeps its own where that lane does not exist (past 32 or
    past a partial last warp), for 32-bit and 64-bit slots; also two shuffles in a row
    (the second reads what the first received)."""
    import ctypes
    from llvmlite import ir
    from graphc.compiler.backends.gpu.threads import thread_program
    from kernels.loops import I64
    from runtime.jit import CompiledModule
    f64, f32 = ir.DoubleType(), ir.FloatType()
    module = ir.Module(name="shuffle")
    t = thread_program(module, "shuffle", 2, nvptx=False)
    b = t.b
    mine = [t.private(f64, "f64"), t.private(f32, "f32")]
    got = [t.private(f64, "f64.got"), t.private(f32, "f32.got")]
    again = [t.private(f64, "f64.again"), t.private(f32, "f32.again")]

    def store(slots, k):
        with t.threads() as tid:
            at = b.add(b.mul(ir.Constant(I64, k), t.ntid), tid)
            for slot, out in zip(slots, t.args):
                b.store(b.load(slot.at(tid), typ=slot.ty), b.gep(out, [at], source_etype=slot.ty))
        t.barrier()

    with t.threads() as tid:
        b.store(b.uitofp(tid, f64), mine[0].at(tid))
        b.store(b.fadd(b.uitofp(tid, f32), ir.Constant(f32, 0.5)), mine[1].at(tid))
    offsets = (16, 5, 1)
    for k, offset in enumerate(offsets):
        t.shuffle_down(mine, offset, got)
        store(got, k)
    t.shuffle_down(mine, 3, got)
    t.shuffle_down(got, 2, again)
    store(again, len(offsets))
    t.finish()
    code = CompiledModule(str(module))
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4, ctypes.c_int64, ctypes.c_int64)(
        code.address("shuffle.emulate"))
    for block in (1, 5, 31, 32, 45, 64, 100):
        out64 = np.zeros((len(offsets) + 1, block))
        out32 = np.zeros((len(offsets) + 1, block), np.float32)
        status = np.zeros(1, np.int32)
        fn(out64.ctypes.data, out32.ctypes.data, 0, status.ctypes.data, 1, block)
        tids = np.arange(block)
        warp_end = np.minimum((tids // 32 + 1) * 32, block)

        def source(offset):
            return np.where(tids + offset < warp_end, tids + offset, tids)
        want = [source(offset) for offset in offsets] + [source(3)[source(2)]]
        for k, lanes in enumerate(want):
            np.testing.assert_array_equal(out64[k], lanes, err_msg=f"{block} {k}")
            np.testing.assert_array_equal(out32[k], lanes + 0.5, err_msg=f"{block} {k}")


def test_shuffle_must_be_followed_in_its_own_uniform_block():
    """The emulation copies a shuffle's slots in the next region's thread loop; a
    shuffle whose next region lies past the end of a uniform loop is refused (the copy
    would run once after the loop instead of once per iteration)."""
    from llvmlite import ir
    from graphc.compiler.backends.gpu.threads import thread_program
    from kernels.loops import I64, for_range
    t = thread_program(ir.Module(name="bad"), "bad", 1, nvptx=False)
    mine, got = t.private(I64, "mine"), t.private(I64, "got")
    with for_range(t.b, ir.Constant(I64, 3), name="step"):
        with t.threads() as tid:
            t.b.store(tid, mine.at(tid))
        t.shuffle_down([mine], 1, [got])
    with pytest.raises(AssertionError, match="not followed"):
        with t.threads():
            pass


# ---------------------------------------------------------------- products
@pytest.mark.parametrize("m,k,n", [(1, 7, 1023), (65, 33, 17), (7, 1, 1), (1023, 5, 3)])
def test_matmul_shapes(m, k, n):
    def build():
        a = gc.placeholder(gc.float32, [m, k])
        b = gc.placeholder(gc.float32, [k, n])
        return [a, b], [gc.matmul(a, b)], [_rand(m, k), _rand(k, n, seed=1)]
    check_graph(build, launches=[None, (1, 1), (3, 64)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_transposes_with_epilogue(ta, tb, dtype):
    m, k, n = 33, 19, 45

    def build():
        a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
        gdt = gc.as_dtype(dtype)
        a, b = gc.placeholder(gdt, a_shape), gc.placeholder(gdt, b_shape)
        bias = gc.placeholder(gdt, [n])
        y = gc.nn.relu(gc.nn.bias_add(gc.matmul(a, b, transpose_a=ta, transpose_b=tb), bias))
        return [a, b, bias], [y], [_rand(*a_shape, dtype=dtype),
                                   _rand(*b_shape, seed=1, dtype=dtype),
                                   _rand(n, seed=2, dtype=dtype)]
    check_graph(build, launches=[None, (2, 64)], rtol=1e-4, atol=1e-4)


def test_batched_matmul_broadcast():
    def build():
        a = gc.placeholder(gc.float32, [2, 3, 17, 9])
        b = gc.placeholder(gc.float32, [3, 9, 20])
        return [a, b], [gc.matmul(a, b), gc.matmul(a, a, transpose_b=True)], \
            [_rand(2, 3, 17, 9), _rand(3, 9, 20, seed=1)]
    check_graph(build, launches=[None, (1, 32)], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------- convolution
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv_and_its_gradients(fmt):
    def build():
        shape = [2, 9, 8, 3] if fmt == "NHWC" else [2, 3, 9, 8]
        x = gc.placeholder(gc.float32, shape)
        w = gc.constant(_rand(3, 3, 3, 4, seed=3))
        y = gc.nn.conv2d(x, w, strides=[1, 2, 2, 1] if fmt == "NHWC" else [1, 1, 2, 2],
                         padding="SAME", data_format=fmt)
        loss = gc.reduce_sum(gc.square(gc.nn.relu(y)))
        dx, dw = gc.gradients(loss, [x, w])
        return [x], [y, dx, dw], [_rand(*shape)]
    check_graph(build, launches=[None, (2, 32)], rtol=1e-4, atol=1e-4)


def test_pooling_and_gradients():
    def build():
        x = gc.placeholder(gc.float32, [2, 7, 7, 3])
        y = gc.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        z = gc.nn.avg_pool(x, [1, 3, 3, 1], [1, 1, 1, 1], "VALID")
        gx = gc.gradients(gc.reduce_sum(y * y) + gc.reduce_sum(z), [x])[0]
        return [x], [y, z, gx], [_rand(2, 7, 7, 3)]
    check_graph(build, launches=[None, (3, 32)])


# --------------------------------------------------------- opaque templates
def test_cumsum_forward_and_reverse():
    def build():
        x = gc.placeholder(gc.float32, [5, 300])
        return [x], [gc.cumsum(x, axis=1), gc.cumsum(x, axis=0, exclusive=True, reverse=True)], \
            [_rand(5, 300)]
    check_graph(build, launches=[None, (2, 32)], rtol=1e-4, atol=1e-4)


SCAN_DTYPES = {"float32": gc.float32, "float64": gc.float64, "int32": gc.int32}
# (exclusive, reverse) per dtype: every combination in float32, two in the others
SCAN_MODES = {"float32": [(False, False), (True, False), (False, True), (True, True)],
              "float64": [(True, True), (False, False)], "int32": [(True, False), (False, True)]}


def _scan_graph():
    """Cumsums over axis 0, 1 and -1 of rank-3 feeds of run-time dims (one compile for
    every line length), in each dtype's (exclusive, reverse) modes."""
    feeds, fetches = [], []
    for name, dtype in SCAN_DTYPES.items():
        for axis in (0, 1, -1):
            x = gc.placeholder(dtype, [None, None, None])
            feeds.append(x)
            fetches += [gc.cumsum(x, axis=axis, exclusive=e, reverse=r)
                        for e, r in SCAN_MODES[name]]
    return feeds, fetches


def _scan_data(n):
    arrays = []
    for k, name in enumerate(SCAN_DTYPES):
        for shape in ((n, 3, 2), (2, n, 3), (3, 2, n)):
            rng = np.random.RandomState(n + k)
            if name == "int32":  # (wrapping past 2**31: integer scans are exact)
                arrays.append(rng.randint(-2**30, 2**30, size=shape).astype(np.int32))
            else:
                arrays.append(rng.randn(*shape).astype(name))
    return arrays


# threads per block the scan kernels are compiled for, blocks the emulation runs them with
SCAN_BLOCKS = {1: [1], 32: [32, 5], 96: [96, 33], 256: [256, 100]}


@pytest.mark.parametrize("compiled", sorted(SCAN_BLOCKS))
def test_cumsum_block_scan_at_any_block_size(compiled):
    """The scan template (one block per line, chunks of warp shuffles up and warp totals,
    a carry from chunk to chunk) against the reference: lines of 1, 7 and 1023 elements
    along axis 0, 1 and -1, exclusive and reverse, int32 exactly, floats within rounding
    (another summation order), full and partial warps, one block per line or fewer."""
    g = gc.Graph()
    with g.as_default():
        feeds, fetches = _scan_graph()
    module = _planned(feeds, fetches, [], _scan_data(7))
    gpu = generate_gpu(module, block=compiled)
    assert [launch.template.__name__ for launch in gpu.launches] == \
        ["emit_scan_launch"] * len(fetches)
    emulated = EmulatedGpu(gpu.spec("sm_80", ptx=False))
    for n in (1, 7, 1023):
        arrays = _scan_data(n)
        want = _reference(g, feeds, fetches, arrays)
        for block in SCAN_BLOCKS[compiled]:
            for grid in (None, 2):
                got = emulated.run(arrays, grid=grid, block=block)
                for k, (x, w) in enumerate(zip(got, want)):
                    msg = f"n={n} block={block} grid={grid} fetch {k}"
                    assert x.dtype == np.asarray(w).dtype and x.shape == np.shape(w), msg
                    if x.dtype.kind in "iu":
                        np.testing.assert_array_equal(x, w, err_msg=msg)
                    else:
                        tol = 1e-4 if x.dtype == np.float32 else 1e-10
                        np.testing.assert_allclose(x, w, rtol=tol, atol=tol, err_msg=msg)


def test_cumsum_is_block_parallel():
    """A scan is no longer run by global thread 0: one launch per Cumsum, one block per
    line (up to the grid cap), a block of the line's length in warps, at most the
    codegen's block; float16 keeps the CPU template's per-element prefix sums."""
    from graphc.compiler.backends.gpu.launches import loaded_elsewhere
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [5, 300])
        h = gc.placeholder(gc.float16, [4, 9])
        fetches = [gc.cumsum(x, axis=1), gc.cumsum(x, axis=0, reverse=True),
                   gc.cumsum(h, axis=1)]
    module = _planned([x, h], fetches, [], [_rand(5, 300), _rand(4, 9).astype(np.float16)])
    gpu = generate_gpu(module, block=256)
    shapes = [(launch.template.__name__, launch.grid, launch.block) for launch in gpu.launches]
    assert shapes[:2] == [("emit_scan_launch", 5, 256), ("emit_scan_launch", 300, 32)]
    assert all(not loaded_elsewhere(nest) for launch in gpu.launches for nest in launch.nests)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
@pytest.mark.parametrize("compiled", [1, 32, 256])
def test_scan_ptx_shuffles_up_and_assembles(compiled, tmp_path):
    """Every scan kernel adds within warps by shfl.sync.up (f64 as two 32-bit halves; one
    step more for an exclusive scan), takes one barrier per chunk, and assembles for
    sm_80 and sm_90 without spilling."""
    import re
    g = gc.Graph()
    with g.as_default():
        feeds, fetches = _scan_graph()
    gpu = generate_gpu(_planned(feeds, fetches, [], _scan_data(7)), block=compiled)
    ptx = gpu.ptx("sm_80")
    modes = [m for name in SCAN_DTYPES for _ in range(3) for m in SCAN_MODES[name]]
    wide = [name == "float64" for name in SCAN_DTYPES for _ in range(3)
            for _ in SCAN_MODES[name]]
    for launch, (exclusive, _), is_wide in zip(gpu.launches, modes, wide):
        body = ptx[ptx.index(f".entry {launch.name}("):]
        body = body[:body.index("\n}\n")]
        steps = len([k for k in (1, 2, 4, 8, 16) if k < min(compiled, 32)]) + exclusive
        assert len(re.findall(r"shfl\.sync\.up\.b32", body)) == steps * (2 if is_wide else 1), \
            launch.name
        assert len(re.findall(r"\bbar\.sync\b", body)) == 1, launch.name
    for arch in ("sm_80", "sm_90"):
        report = _ptxas_report(gpu.ptx(arch), arch, tmp_path)
        assert "0 bytes spill stores, 0 bytes spill loads" in report
        assert not re.search(r"[1-9]\d* bytes spill", report), report


def test_shuffle_up_emulation_is_shfl_up():
    """The thread layer's shuffle up in the emulation: thread t receives the value of
    lane t % 32 - k of its warp, or keeps its own in lanes below k, in 64-bit and 32-bit
    slots, also in place (source and received one slot) and twice in a row."""
    import ctypes
    from llvmlite import ir
    from graphc.compiler.backends.gpu.threads import thread_program
    from kernels.loops import I64
    from runtime.jit import CompiledModule
    module = ir.Module(name="shuffle_up")
    t = thread_program(module, "up", 1, nvptx=False)
    b = t.b
    mine, got, inplace = (t.private(I64, name) for name in ("mine", "got", "inplace"))
    offsets = (1, 5, 16)

    def store(slot, k):
        with t.threads() as tid:
            at = b.add(b.mul(ir.Constant(I64, k), t.ntid), tid)
            b.store(b.load(slot.at(tid), typ=I64), b.gep(t.args[0], [at], source_etype=I64))
        t.barrier()

    with t.threads() as tid:
        b.store(tid, mine.at(tid))
        b.store(tid, inplace.at(tid))
    for k, offset in enumerate(offsets):
        t.shuffle_up([mine], offset, [got])
        store(got, k)
    t.shuffle_up([inplace], 3, [inplace])
    t.shuffle_up([inplace], 2, [inplace])
    store(inplace, len(offsets))
    t.finish()
    code = CompiledModule(str(module))
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, ctypes.c_int64, ctypes.c_int64)(
        code.address("up.emulate"))
    for block in (1, 5, 31, 32, 45, 64, 100):
        out = np.zeros((len(offsets) + 1, block), np.int64)
        status = np.zeros(1, np.int32)
        fn(out.ctypes.data, 0, status.ctypes.data, 1, block)
        tids = np.arange(block)

        def source(offset):
            return np.where(tids % 32 >= offset, tids - offset, tids)
        want = [source(offset) for offset in offsets] + [source(3)[source(2)]]
        for k, lanes in enumerate(want):
            np.testing.assert_array_equal(out[k], lanes, err_msg=f"{block} {k}")


def test_gather_gradient_adds_repeated_indices():
    def build():
        params = gc.placeholder(gc.float32, [10, 6])
        ids = gc.constant(np.array([1, 3, 1, 9, 1, 0], np.int32))
        y = gc.gather(params, ids)
        g = gc.gradients(gc.reduce_sum(y * y), [params])[0]
        return [params], [gc.convert_to_tensor(g)], [_rand(10, 6)]
    check_graph(build, launches=[None, (3, 32)])


# -------------------------------------------------------- random, float16
def test_random_ops_draw_the_reference_numbers():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [7, 33])
        u = gc.random_uniform([7, 33], seed=3) + x
        r = gc.random_normal([1023], seed=4)
        d = gc.nn.dropout(x, keep_prob=0.5, seed=5)
    arrays = [_rand(7, 33)]
    with gc.Session(graph=g, config=gc.ConfigProto(backend="reference")) as sess:
        sess.run([u, r, d], {x: arrays[0]})  # creates the states
        state = {k: v.copy() for k, v in sess._state.variables.items()}
        want = [sess.run([u, r, d], {x: arrays[0]}) for _ in range(2)]
    gpu = EmulatedGpu(_compile_gpu_spec([x], [u, r, d], arrays, variables=state))
    for run in want:  # the second run draws new numbers: the kernels count the runs
        for got, w in zip(gpu.run(arrays, state), run):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_float16_is_computed_in_float32():
    def build():
        x = gc.placeholder(gc.float16, [7, 300])
        y = gc.nn.softmax(x) * gc.cast(2.5, gc.float16) + gc.tanh(x)
        return [x], [y, gc.reduce_sum(x, axis=1)], [_rand(7, 300, dtype=np.float16)]
    check_graph(build, launches=[None, (2, 32)], rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------- training steps
def _train_and_compare(build, arrays, steps=2, rtol=2e-4, atol=1e-4):
    """A training step on the GPU spec (emulated) vs the compiled CPU backend, from the
    same variable values, for `steps` steps. (Sums run in another order on the GPU; Adam
    turns a gradient's last-bit difference near 0 into up to lr * 1e-2.)"""
    g = gc.Graph()
    with g.as_default():
        feeds, loss, train = build()
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        start = {k: v.copy() for k, v in sess._state.variables.items()}
        want = [sess.run([loss, train], dict(zip(feeds, arrays)))[0] for _ in range(steps)]
        want_vars = {k: v.copy() for k, v in sess._state.variables.items()}
    spec = _compile_gpu_spec(feeds, [loss], arrays, targets=[train], variables=start)
    gpu = EmulatedGpu(spec)
    variables = {k: v.copy() for k, v in start.items()}
    for step in range(steps):
        got = gpu.run(arrays, variables)[0]
        np.testing.assert_allclose(got, want[step], rtol=rtol, atol=atol)
    for name, value in want_vars.items():
        np.testing.assert_allclose(variables[name], value, rtol=rtol, atol=atol, err_msg=name)
    return spec


def test_mlp_training_step():
    def build():
        x = gc.placeholder(gc.float32, [None, 20])
        labels = gc.placeholder(gc.int32, [None])
        h = gc.layers.dense(x, 64, activation=gc.nn.relu)
        logits = gc.layers.dense(h, 10)
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train = gc.train.AdamOptimizer(0.01).minimize(loss)
        return [x, labels], loss, train
    rs = np.random.RandomState(0)
    _train_and_compare(build, [rs.randn(33, 20).astype(np.float32),
                               rs.randint(0, 10, 33).astype(np.int32)])


def test_cnn_training_step():
    def build():
        x = gc.placeholder(gc.float32, [None, 12, 12, 1])
        labels = gc.placeholder(gc.int32, [None])
        h = gc.layers.conv2d(x, 4, 3, padding="same", activation=gc.nn.relu)
        h = gc.layers.max_pooling2d(h, 2, 2)
        h = gc.layers.conv2d(h, 6, 3, activation=gc.nn.relu)
        logits = gc.layers.dense(gc.layers.flatten(h), 10)
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        return [x, labels], loss, train
    rs = np.random.RandomState(1)
    _train_and_compare(build, [rs.randn(5, 12, 12, 1).astype(np.float32),
                               rs.randint(0, 10, 5).astype(np.int32)])


# ------------------------------------------------------- one definition per op
def test_gpu_and_cpu_lower_through_the_same_op_definitions(monkeypatch):
    """Redefining one scalar op in kernels.scalar_ops changes the CPU kernels and the GPU
    kernels alike: the GPU path has no copy of any op's math."""
    from graphc.compiler.backends import cpu as cpu_backend
    from kernels import scalar_ops
    from runtime.executable import Executable
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [7, 300])
        fetches = [gc.sigmoid(x) + 1.0, gc.reduce_sum(gc.sigmoid(x), axis=1)]
    arrays = [_rand(7, 300)]
    monkeypatch.setitem(scalar_ops.SCALAR_OPS, "Sigmoid", scalar_ops.SCALAR_OPS["Neg"])
    want = [-arrays[0] + 1.0, (-arrays[0]).sum(axis=1)]
    cpu_module = _planned([x], fetches, [], arrays, gpu=False)
    cpu = Executable(cpu_backend.generate(cpu_module)).run(arrays, {})
    module = _planned([x], fetches, [], arrays)
    gpu = generate_gpu(module)
    assert all(launch.views is None or launch.views.rules is cpu_backend.LOOP_RULES
               for launch in gpu.launches)
    got = EmulatedGpu(gpu.spec()).run(arrays)
    for c, gp, w in zip(cpu, got, want):
        np.testing.assert_allclose(c, w, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(gp, w, rtol=1e-5, atol=1e-4)
