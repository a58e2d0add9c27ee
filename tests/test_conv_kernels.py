"""Compiled conv/pool kernels against the reference backend: chunked im2col + gemm (several
chunks, per-chunk epilogue, arena scratch), the direct small-filter Conv2D, and the
straight-line pooling windows (NaN and ties routed as the reference does)."""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.cpu import conv_kernel

F32_TOL = dict(rtol=2e-5, atol=2e-5)


def run_both(build, arrays):
    """build(*placeholders) -> list of tensors, run on both backends."""
    results = []
    for backend in ("compiled", "reference"):
        g = gc.Graph()
        with g.as_default():
            phs = [gc.placeholder(gc.as_dtype(a.dtype), a.shape) for a in arrays]
            outs = build(*phs)
            with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
                results.append(sess.run(outs, dict(zip(phs, arrays))))
    return results


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def conv_block(x, w, b, stride, padding, fmt="NHWC"):
    strides = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
    y = gc.nn.relu(gc.nn.bias_add(gc.nn.conv2d(x, w, strides, padding, data_format=fmt), b,
                                  data_format=fmt))
    loss = gc.reduce_sum(y * y)
    return [y] + gc.gradients(loss, [x, w, b])


@pytest.mark.parametrize("chunk", [1, 2, 3, 6])
@pytest.mark.parametrize("stride,padding", [(1, "SAME"), (2, "VALID"), (2, "SAME")])
def test_conv_train_step_matches_reference_in_chunks(monkeypatch, chunk, stride, padding):
    """The batch of 6 in chunks of `chunk` images."""
    monkeypatch.setattr(conv_kernel.ConvShape, "_chunk", lambda self: chunk)
    x, w, b = rand(6, 9, 7, 5), rand(3, 3, 5, 4, seed=1), rand(4, seed=2)
    got, want = run_both(lambda *a: conv_block(*a, stride, padding), [x, w, b])
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, **F32_TOL)


def lowered(build, shapes):
    """The optimized (fused, planned) module of build(*float32 placeholders)."""
    from graphc.compiler.driver import schedule_module
    from graphc.compiler.lower import lower
    g = gc.Graph()
    with g.as_default():
        phs = [gc.placeholder(gc.float32, s) for s in shapes]
        outs = build(*phs)
    module = lower(phs, outs, [], shapes)
    schedule_module(module)
    return module


def test_chunks_divide_the_batch_and_fit_the_budget():
    # 60 output channels are no whole number of vectors: im2col + gemm
    module = lowered(lambda x, w: [gc.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")],
                     [(64, 14, 14, 32), (3, 3, 32, 60)])
    node = next(n for n in module.nodes if n.type == "Conv2D")
    shape = conv_kernel.ConvShape(node)
    assert 64 % shape.chunk == 0 and 1 < shape.chunk < 64
    assert shape.scratch_bytes() == shape.chunk * 196 * 288 * 4 <= conv_kernel.SCRATCH_BUDGET


def conv_kernel_of(x_shape, w_shape, strides=(1, 1), padding="SAME", dilations=(1, 1),
                   fmt="NHWC", dtype=gc.float32, op="Conv2D"):
    """The kernel of the conv op `op` in the graph of a conv's output and gradients."""
    from graphc.compiler.driver import schedule_module
    from graphc.compiler.lower import lower
    g = gc.Graph()
    with g.as_default():
        x, w = gc.placeholder(dtype, x_shape), gc.placeholder(dtype, w_shape)
        s = [1, *strides, 1] if fmt == "NHWC" else [1, 1, *strides]
        d = [1, *dilations, 1] if fmt == "NHWC" else [1, 1, *dilations]
        y = gc.nn.conv2d(x, w, s, padding, data_format=fmt, dilations=d)
        outs = [y] + gc.gradients(gc.reduce_sum(y * y), [x, w])
    module = lower([x, w], outs, [], [x_shape, w_shape])
    schedule_module(module)
    return next(k for k in module.kernels
                if k.kind == "conv" and conv_kernel._conv_node(k).type == op)


def test_few_channel_nhwc_conv_is_direct_and_others_are_not():
    """Channels in whole vectors, at most MAX_CHANNELS inputs: no im2col columns; its
    scratch is one padded image (a chunk is one image: each is a unit for the team)."""
    k = conv_kernel_of((8, 10, 9, 16), (3, 3, 16, 32))
    assert conv_kernel.lowering_of(k) == "direct"
    shape = conv_kernel.ConvShape(conv_kernel._conv_node(k))
    assert shape.padded == (12, 11) and shape.chunk == 1
    assert shape.scratch_bytes() == 12 * 11 * 16 * 4
    assert conv_kernel.lowering_of(conv_kernel_of((8, 10, 9, 16), (3, 3, 16, 24),
                                                  dtype=gc.float64)) == "direct"
    for args in [((8, 10, 9, 16), (3, 3, 16, 60)),                # no whole vectors
                 ((8, 10, 9, 72), (3, 3, 72, 32)),                # many input channels
                 ((8, 10, 9, 16), (1, 1, 16, 32)),                # pointwise: no columns
                 ((8, 16, 10, 9), (3, 3, 16, 32), (1, 1), "SAME", (1, 1), "NCHW")]:
        assert conv_kernel.lowering_of(conv_kernel_of(*args)) != "direct", args
    assert conv_kernel.lowering_of(conv_kernel_of((8, 10, 9, 16), (3, 3, 16, 32),
                                                  dilations=(2, 2))) != "direct"


def test_stride_one_input_gradient_is_direct():
    """dx of a stride-1 conv: the direct conv of dy (its channels the inputs) with the
    flipped filter, which the scratch holds after the padded images."""
    grad = dict(op="Conv2DBackpropInput")
    k = conv_kernel_of((8, 10, 9, 16), (3, 3, 16, 40), padding="VALID", **grad)
    assert conv_kernel.lowering_of(k) == "direct"
    shape = conv_kernel.ConvShape(conv_kernel._conv_node(k))
    assert shape.padded == (12, 11) and shape.flipped_filter() == 3 * 3 * 40 * 16
    assert shape.scratch_bytes() == (shape.chunk * 12 * 11 * 40 + 3 * 3 * 40 * 16) * 4
    for args in [((8, 10, 9, 16), (3, 3, 16, 40), (2, 2)),       # strided
                 ((8, 10, 9, 24), (3, 3, 24, 40), (1, 1)),       # 24 outputs: no vectors
                 ((8, 10, 9, 16), (3, 3, 16, 80), (1, 1))]:      # many dy channels
        assert conv_kernel.lowering_of(conv_kernel_of(*args, **grad)) != "direct", args


def ref_conv(x, w, strides, padding):
    """NHWC conv from TF's documented geometry, summed in float64."""
    from tests.test_conv_ops import ref_geometry
    n, h, wd, _ = x.shape
    kh, kw, _, co = w.shape
    oh, pt = ref_geometry(h, kh, strides[0], 1, padding)
    ow, pl = ref_geometry(wd, kw, strides[1], 1, padding)
    xp = np.zeros((n, h + kh + strides[0] * oh, wd + kw + strides[1] * ow, x.shape[3]))
    xp[:, pt:pt + h, pl:pl + wd] = x
    y = np.zeros((n, oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            cells = xp[:, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
            y += cells[:, :oh, :ow] @ w[i, j].astype(np.float64)
    return y


DIRECT_CASES = [  # x shape, filter shape, strides, padding
    ((3, 9, 7, 16), (3, 3, 16, 16), (1, 1), "SAME"),
    ((2, 11, 13, 5), (3, 2, 5, 32), (2, 2), "VALID"),
    ((5, 8, 17, 16), (3, 3, 16, 48), (2, 1), "SAME"),
    ((2, 7, 6, 64), (2, 3, 64, 64), (1, 2), "SAME"),
    ((1, 4, 4, 3), (5, 5, 3, 16), (1, 1), "SAME"),          # filter larger than the image
    ((2, 6, 5, 9), (3, 3, 9, 16), (3, 3), "VALID"),         # unread last rows
    ((2, 7, 9, 32), (3, 3, 32, 16), (1, 1), "VALID"),       # direct input gradients:
    ((3, 5, 6, 16), (2, 4, 16, 8), (1, 1), "SAME"),         # uneven pads,
    ((2, 3, 4, 16), (5, 5, 16, 24), (1, 1), "SAME"),        # filter over the image
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", DIRECT_CASES)
@pytest.mark.parametrize("chunk", [1, 2])
def test_direct_conv_matches_numpy(monkeypatch, case, dtype, chunk):
    """The direct lowering (with a bias + relu epilogue and in chunks) against NumPy,
    its gradients against the reference backend."""
    monkeypatch.setattr(conv_kernel.ConvShape, "_chunk", lambda self: chunk
                        if dim_n(self) % chunk == 0 else 1)
    x_shape, w_shape, strides, padding = case
    x, w, b = rand(*x_shape, dtype=dtype), rand(*w_shape, seed=1, dtype=dtype), \
        rand(w_shape[3], seed=2, dtype=dtype)
    lanes = 64 // np.dtype(dtype).itemsize
    for op, c_in, c_out, direct in [
            ("Conv2D", x_shape[3], w_shape[3], True),
            ("Conv2DBackpropInput", w_shape[3], x_shape[3], strides == (1, 1)),
            ("Conv2DBackpropFilter", x_shape[3], w_shape[3], True)]:
        k = conv_kernel_of(x_shape, w_shape, strides, padding, dtype=gc.as_dtype(dtype),
                           op=op)
        direct = direct and c_out % lanes == 0 and c_in <= 64
        assert (conv_kernel.lowering_of(k) == "direct") == direct, op

    def build(xp, wp, bp):
        y = gc.nn.relu(gc.nn.bias_add(gc.nn.conv2d(xp, wp, [1, *strides, 1], padding), bp))
        return [y] + gc.gradients(gc.reduce_sum(y * y), [xp, wp, bp])
    got, want = run_both(build, [x, w, b])
    eps = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], np.maximum(ref_conv(x, w, strides, padding) + b, 0),
                               rtol=eps, atol=eps)
    for g_, w_ in zip(got, want):   # sums of hundreds of terms: relative to their scale
        np.testing.assert_allclose(g_, w_, rtol=eps, atol=eps * np.abs(w_).max())


def dim_n(shape):
    from graphc.compiler.loops.expr import dim_key
    return dim_key(shape.g.n)


def test_direct_conv_empty_batch_and_unknown_batch():
    w, b = rand(3, 3, 16, 16, seed=1), rand(16, seed=2)
    for backend in ("compiled", "reference"):
        g = gc.Graph()
        with g.as_default():
            xp = gc.placeholder(gc.float32, [None, 6, 5, 16])
            y = gc.nn.relu(gc.nn.conv2d(xp, gc.constant(w), [1, 1, 1, 1], "SAME") + b)
            with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
                for n in (0, 3):
                    x = rand(n, 6, 5, 16, seed=n)
                    np.testing.assert_allclose(
                        sess.run(y, {xp: x}),
                        np.maximum(ref_conv(x, w, (1, 1), "SAME") + b, 0), **F32_TOL)


def test_nchw_and_unknown_batch_stay_per_image():
    x, w, b = rand(3, 5, 6, 7), rand(3, 3, 5, 4, seed=1), rand(4, seed=2)
    got, want = run_both(lambda *a: conv_block(*a, 1, "SAME", fmt="NCHW"), [x, w, b])
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, **F32_TOL)
    results = []
    for backend in ("compiled", "reference"):
        g = gc.Graph()
        with g.as_default():
            xp = gc.placeholder(gc.float32, [None, 6, 7, 5])
            outs = conv_block(xp, gc.constant(rand(3, 3, 5, 4, seed=1)),
                              gc.constant(rand(4, seed=2)), 1, "SAME")
            with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
                results.append([sess.run(outs, {xp: rand(n, 6, 7, 5, seed=n)})
                                for n in (4, 3)])
    for got_n, want_n in zip(*results):
        for g_, w_ in zip(got_n, want_n):
            np.testing.assert_allclose(g_, w_, **F32_TOL)


@pytest.mark.parametrize("channels", [1, 2])
def test_direct_small_filter_conv(channels):
    """3x3 over one or two channels: the unrolled direct rule, with its epilogue."""
    x, w, b = rand(4, 8, 7, channels), rand(3, 3, channels, 6, seed=1), rand(6, seed=2)
    got, want = run_both(lambda *a: conv_block(*a, 1, "SAME"), [x, w, b])
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, **F32_TOL)


def test_memory_plan_gives_conv_kernels_arena_scratch():
    def build(x):
        y = gc.nn.relu(gc.nn.conv2d(x, gc.constant(rand(3, 3, 4, 8)), [1, 1, 1, 1], "SAME"))
        return [y] + gc.gradients(gc.reduce_sum(y), [x])
    module = lowered(build, [(8, 10, 10, 4)])
    plan = module.memory_plan
    convs = [t for t, k in enumerate(module.kernels) if k.kind == "conv"]
    assert convs and set(plan.scratch) == set(convs)
    for t, s in plan.scratch.items():
        assert s.size >= conv_kernel.scratch_bytes(module.kernels[t])
        for b in plan.buffers.values():   # clear of every buffer live in its kernel
            if b.live[0] <= t <= b.live[1]:
                assert s.offset + s.size <= b.offset or b.offset + b.size <= s.offset
        assert s.offset + s.size <= plan.arena_bytes


@pytest.mark.parametrize("k,stride,padding", [(2, 2, "VALID"), (3, 2, "SAME"), (2, 1, "SAME")])
def test_max_pool_and_grad_with_ties_and_nan(k, stride, padding):
    x = np.round(rand(3, 7, 9, 5) * 2).astype(np.float32)   # many ties
    x[0, 1, 1, 0] = np.nan
    x[1, 2:4, 2:4, 1] = np.nan
    x[2, :, :, 2] = -np.inf

    def build(a):
        y = gc.nn.max_pool2d(a, k, stride, padding)
        dy = gc.constant(rand(*y.shape.as_list(), seed=3))
        return [y, gc.gradients(y, [a], grad_ys=[dy])[0]]
    got, want = run_both(build, [x])
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", DIRECT_CASES)
@pytest.mark.parametrize("chunk", [1, 2])
def test_direct_conv_on_the_thread_team(monkeypatch, case, dtype, chunk):
    """Every conv split (GRAPHC_PARALLEL_MIN_WORK=0): no epilogue, so each direct kernel's
    task is conv_images' library function (chunks of 1 or 2 images, the filter gradient
    summed in per-unit partial filters), against NumPy and the reference."""
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    monkeypatch.setattr(conv_kernel.ConvShape, "_chunk", lambda self: chunk
                        if dim_n(self) % chunk == 0 else 1)
    x_shape, w_shape, strides, padding = case
    x, w = rand(*x_shape, dtype=dtype), rand(*w_shape, seed=1, dtype=dtype)

    def build(xp, wp):
        y = gc.nn.conv2d(xp, wp, [1, *strides, 1], padding)
        return [y] + gc.gradients(gc.reduce_sum(y * y), [xp, wp])
    got, want = run_both(build, [x, w])
    eps = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], ref_conv(x, w, strides, padding), rtol=eps, atol=eps)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=eps, atol=eps * np.abs(w_).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_conv_tasks_give_the_same_bits_with_any_team(monkeypatch, dtype):
    """conv_images' tasks on 1, 2 and 3 threads: each image by the same calls, the filter
    gradient's partial filters folded in unit order, so the same bits."""
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")
    x_shape, w_shape, strides, padding = DIRECT_CASES[0]
    x, w = rand(5, *x_shape[1:], dtype=dtype), rand(*w_shape, seed=1, dtype=dtype)
    outs = []
    for threads in (1, 2, 3):
        g = gc.Graph()
        with g.as_default():
            xp, wp = gc.placeholder(gc.as_dtype(dtype), x.shape), \
                gc.placeholder(gc.as_dtype(dtype), w.shape)
            y = gc.nn.conv2d(xp, wp, [1, *strides, 1], padding)
            fetches = [y] + gc.gradients(gc.reduce_sum(y * y), [xp, wp])
            config = gc.ConfigProto(intra_op_parallelism_threads=threads)
            with gc.Session(graph=g, config=config) as sess:
                outs.append(sess.run(fetches, {xp: x, wp: w}))
    for got in outs[1:]:
        for a, b in zip(got, outs[0]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(outs[0][0], ref_conv(x, w, strides, padding),
                               rtol=2e-5 if dtype == np.float32 else 1e-12,
                               atol=2e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("x_shape", [(0, 6, 5, 16), (2, 0, 5, 16), (2, 4, 0, 16)])
def test_direct_conv_zero_sizes(x_shape):
    """No pixels: an empty output and input gradient, a zero filter gradient."""
    assert conv_kernel.lowering_of(conv_kernel_of(x_shape, (3, 3, 16, 16),
                                                  op="Conv2DBackpropFilter")) == "direct"
    w = rand(3, 3, 16, 16, seed=1)

    def build(xp):
        y = gc.nn.conv2d(xp, gc.constant(w), [1, 1, 1, 1], "SAME")
        return [y] + gc.gradients(gc.reduce_sum(y * y), [xp])
    x = rand(*x_shape)
    got, want = run_both(build, [x])
    for g_, w_ in zip(got, want):
        assert g_.shape == w_.shape == x_shape
    g = gc.Graph()
    with g.as_default():
        xp, wp = gc.placeholder(gc.float32, x_shape), gc.placeholder(gc.float32, w.shape)
        dw = gc.gradients(gc.reduce_sum(gc.nn.conv2d(xp, wp, [1, 1, 1, 1], "SAME")), [wp])[0]
        with gc.Session(graph=g) as sess:
            np.testing.assert_array_equal(sess.run(dw, {xp: x, wp: w}), np.zeros(w.shape))


def _compiled_pad(dtype):
    """conv_direct's pad function of `dtype`, compiled alone and callable on arrays."""
    import ctypes

    from llvmlite import ir

    from graphc.compiler.backends.cpu import conv_direct
    from runtime import jit
    module = ir.Module("pad")
    fn = conv_direct.declare_or_emit_pad(module, dtype)
    fn.linkage = "external"   # so that the test can look it up
    compiled = jit.CompiledModule(str(module), None)
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                            *[ctypes.c_int64] * 7)(compiled.address(fn.name))

    def pad(src, hp, wp, top, left):
        dst = np.full((hp, wp, src.shape[2]), np.nan, src.dtype)  # every cell must be set
        call(src.ctypes.data, dst.ctypes.data, *src.shape, hp, wp, top, left)
        return dst
    pad.compiled = compiled  # keeps the code alive
    return pad


def _numpy_pad(src, hp, wp, top, left):
    h, w, c = src.shape
    out = np.zeros((hp, wp, c), src.dtype)
    for r in range(hp):
        for q in range(wp):
            if 0 <= r - top < h and 0 <= q - left < w:
                out[r, q] = src[r - top, q - left]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("h,w,c,hp,wp,top,left", [
    (5, 4, 3, 7, 6, 1, 1),      # SAME 3x3
    (5, 7, 2, 8, 11, 1, 2),     # uneven pads, past the end on both sides
    (6, 5, 16, 4, 3, 0, 0),     # VALID: unread last rows and columns
    (3, 4, 1, 5, 2, -1, -2),    # negative offsets: first rows and columns unread
    (2, 2, 3, 9, 9, 4, 5),      # padding wider than the image
    (0, 4, 3, 3, 6, 1, 1),      # an empty image: all zeros
    (4, 0, 3, 6, 2, 1, 1),
    (4, 5, 2, 0, 7, 1, 1),      # nothing to fill
    (4, 5, 2, 6, 0, 1, 1),
])
def test_direct_pad_function_matches_numpy(dtype, h, w, c, hp, wp, top, left):
    src = rand(h, w, c, seed=h * 7 + w, dtype=dtype)
    got = _compiled_pad(np.dtype(dtype).name)(src, hp, wp, top, left)
    np.testing.assert_array_equal(got, _numpy_pad(src, hp, wp, top, left))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kh,kw,ci,co", [(3, 3, 16, 32), (1, 2, 3, 5), (5, 4, 1, 1),
                                         (0, 3, 2, 2), (2, 2, 0, 3), (2, 3, 4, 0)])
def test_flip_function_matches_numpy(dtype, kh, kw, ci, co):
    """conv_direct's flip: out[j, i, o, c] = w[kh-1-j, kw-1-i, c, o], every cell set."""
    import ctypes

    from llvmlite import ir

    from graphc.compiler.backends.cpu import conv_direct
    from runtime import jit
    module = ir.Module("flip")
    fn = conv_direct.declare_or_emit_flip(module, np.dtype(dtype).name)
    fn.linkage = "external"   # so that the test can look it up
    compiled = jit.CompiledModule(str(module), None)
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                            *[ctypes.c_int64] * 4)(compiled.address(fn.name))
    w = rand(kh, kw, ci, co, dtype=dtype)
    out = np.full((kh, kw, co, ci), np.nan, dtype)
    call(w.ctypes.data, out.ctypes.data, kh, kw, ci, co)
    np.testing.assert_array_equal(out, w[::-1, ::-1].transpose(0, 1, 3, 2))


def _llvm_ir(build, shapes, dtype=gc.float32):
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    from graphc.compiler.lower import lower
    g = gc.Graph()
    with g.as_default():
        phs = [gc.placeholder(dtype, s) for s in shapes]
        outs = build(*phs)
    module = lower(phs, outs, [], shapes)
    schedule_module(module)
    return module, generate(module)["llvm_ir"]


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_direct_convs_of_every_shape_share_one_pad_function(dtype, monkeypatch):
    """The zero-padded copies of every direct conv of a dtype that pads in its own code
    (here: the serial kernels, GRAPHC_PARALLEL=0) are one function taking the sizes: a
    copy loop per conv shape made each conv kernel a function of its own for LLVM."""
    monkeypatch.setenv("GRAPHC_PARALLEL", "0")
    module, ir_text = _llvm_ir(_two_convs_step, [(2, 9, 7, 16), (3, 3, 16, 16),
                                                 (2, 2, 16, 32)], dtype)
    directs = [k for k in module.kernels
               if k.kind == "conv" and conv_kernel.lowering_of(k) == "direct"]
    assert len({conv_kernel._conv_node(k).type for k in directs}) == 3
    assert ir_text.count(f'\ndefine internal void @"graphc_conv_pad_{dtype.name}"') == 1
    assert ir_text.count(f'call void @"graphc_conv_pad_{dtype.name}"') >= len(directs)


def _two_convs_step(x, w1, w2):
    y = gc.nn.conv2d(x, w1, [1, 1, 1, 1], "SAME")
    z = gc.nn.conv2d(gc.nn.relu(y), w2, [1, 2, 2, 1], "VALID")
    return [z] + gc.gradients(gc.reduce_sum(z * z), [x, w1, w2])


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_direct_convs_on_the_team_have_library_tasks_of_their_shape(dtype, monkeypatch):
    """On the team, a direct conv kernel whose chunks only pad and convolve images is one
    function of the graph: its task is a library function named by its shape (LLVM
    spent 5-7 ms on each chunk body and task of every graph), which the library cache
    takes out of the graph's module with the direct functions it calls. Only y, whose
    chunks apply its relu epilogue, keeps a chunk body and task of its own."""
    from graphc.compiler.backends.cpu import conv_images, conv_team
    from runtime import library_cache
    monkeypatch.setattr(conv_team, "available", lambda: True)
    shapes = [(2, 9, 7, 16), (3, 3, 16, 16), (2, 2, 16, 32)]
    module, ir_text = _llvm_ir(_two_convs_step, shapes, dtype)
    tasks = [k for k in module.kernels if k.kind == "conv" and
             conv_kernel.lowering_of(k) == "direct" and len(k.nodes) == 1]
    # y's input and filter gradients, z and its filter gradient
    assert len(tasks) == 4
    functions = _defined(ir_text)
    library = sorted(n for n in functions if n.startswith(conv_images.NAME_PREFIX))
    assert len(library) == 4
    # the input gradient's task is a conv's: the kernel flips the filter for it
    assert sorted(n.split("_")[3] for n in library) == ["conv", "conv", "filter", "filter"]
    assert ir_text.count(f'call void @"graphc_conv_flip_{dtype.name}"(') == 1
    for name in library:   # started on the team, or called alone
        assert ir_text.count(f'@"{name}"') == 3
        assert "graphc_conv_pad_" not in functions[name]
    rest, groups = library_cache.separate(ir_text)
    graph_functions = module_split_names(rest)
    assert not [n for n in graph_functions if n.startswith("graphc_conv_")]
    assert len([n for n in graph_functions if ".chunks" in n]) == 2   # y's body and task
    assert sorted(n for g in groups for n in module_split_names(g)
                  if n.startswith(conv_images.NAME_PREFIX)) == library


def module_split_names(text):
    from runtime import module_split
    return module_split.defined_functions(text)


def _defined(ir_text):
    """{name: body} of the functions the module's text defines."""
    import re
    return {m.group(1): m.group(2) for m in re.finditer(
        r'^define [^\n]*@"?([-\w$.]+)"?\([^\n]*\n?\{\n(.*?)\n\}$', ir_text, re.M | re.S)}


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
def test_direct_conv_tiles_are_functions_of_their_own(dtype):
    """Each direct conv function (and each filter gradient's) calls one function per tile
    size, which holds all of its multiply-adds (inside the loops over rows, channel blocks
    and tiles, LLVM's loop passes went over them once per enclosing loop), and a direct
    conv's has only the tile sizes its rows split into."""
    from graphc.compiler.backends.cpu import conv_direct

    def build(x, w1, w2):
        y = gc.nn.conv2d(x, w1, [1, 1, 1, 1], "SAME")
        z = gc.nn.conv2d(gc.nn.relu(y), w2, [1, 2, 2, 1], "VALID")
        return [z] + gc.gradients(gc.reduce_sum(z * z), [x, w1, w2])
    _, ir_text = _llvm_ir(build, [(2, 9, 7, 16), (3, 3, 16, 16), (2, 2, 16, 32)], dtype)
    functions = _defined(ir_text)
    # y, its input gradient (both rows of 7) and the filter gradient; z (rows of 3) and
    # its filter gradient (z's input gradient, of stride 2, is a gemm)
    variants = [(conv_direct.block_of(dtype.name, 16), 1, 7),
                (conv_direct.block_of(dtype.name, 32), 2, 3)]
    expected = set()
    for gradient in (False, True):
        for block, stride, width in variants:
            if gradient:
                sizes = [conv_direct.filter_tile_of(block, 16)]
                name = conv_direct.function_name(dtype.name, block, 16, stride, True)
            else:
                sizes = conv_direct.row_tiles(block, width)
                name = conv_direct.function_name(dtype.name, block, 16, stride, tiles=sizes)
            tiles = sorted(n for n in functions if n.startswith(name + "."))
            assert tiles == sorted(f"{name}.tile{size}" for size in sizes), name
            assert "llvm.fma" not in functions[name]
            for tile in tiles:
                assert f'call void @"{tile}"' in functions[name]
                assert "llvm.fma" in functions[tile]
            expected |= {name, *tiles}
    assert {n for n in functions if n.startswith(("graphc_conv_direct_",
                                                  "graphc_conv_filter_gradient_"))} == expected


@pytest.mark.parametrize("block,width,sizes", [
    (1, 32, (16,)), (1, 48, (16,)), (1, 7, (4, 2, 1)), (1, 31, (16, 4, 2, 1)),
    (1, 12, (4,)), (2, 14, (8, 4, 2)), (4, 14, (4, 2)), (4, 8, (4,)), (4, 3, (2, 1)),
    (3, 7, (5, 2)), (4, 0, ()),
])
def test_direct_conv_row_tiles(block, width, sizes):
    """A row's split into tiles: full tiles, then the rest largest first."""
    from graphc.compiler.backends.cpu import conv_direct
    assert conv_direct.row_tiles(block, width) == sizes


def test_direct_convs_of_widths_with_one_split_share_a_function():
    """Rows of 16 and of 32 pixels both split into tiles of 16: one function, called with
    each conv's own width, both results NumPy's."""
    from graphc.compiler.backends.cpu import conv_direct
    x1, x2 = rand(2, 5, 16, 3), rand(1, 4, 32, 3, seed=3)
    w = rand(3, 3, 3, 16, seed=1)

    def build(a, b, f):
        return [gc.nn.conv2d(a, f, [1, 1, 1, 1], "SAME"), gc.nn.conv2d(b, f, [1, 1, 1, 1],
                                                                        "SAME")]
    _, ir_text = _llvm_ir(build, [x1.shape, x2.shape, w.shape])
    name = conv_direct.function_name("float32", 1, 3, 1, tiles=(16,))
    functions = _defined(ir_text)
    assert [n for n in functions if n.startswith("graphc_conv_direct_")] == \
        [name, name + ".tile16"]
    assert ir_text.count(f'call void @"{name}"(') == 2
    got, _ = run_both(build, [x1, x2, w])
    for g_, x in zip(got, (x1, x2)):
        np.testing.assert_allclose(g_, ref_conv(x, w, (1, 1), "SAME"), **F32_TOL)


GEMM_CASES = [  # x shape, filter shape, strides, padding: im2col + gemm (channels no vectors)
    ((2, 9, 7, 5), (3, 3, 5, 6), (1, 1), "SAME"),
    ((3, 11, 8, 3), (5, 2, 3, 7), (2, 3), "VALID"),
    ((2, 6, 9, 70), (3, 3, 70, 16), (2, 2), "SAME"),        # more channels than direct's
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_convs_share_size_generic_im2col_and_col2im(dtype):
    """The im2col and col2im of every NHWC gemm conv of a dtype are one function each,
    taking the sizes (a loop nest per conv shape before), and compute what NumPy does."""
    name = np.dtype(dtype).name
    for x_shape, w_shape, strides, padding in GEMM_CASES:
        def build(xp, wp):
            y = gc.nn.conv2d(xp, wp, [1, *strides, 1], padding)
            return [y] + gc.gradients(gc.reduce_sum(y * y), [xp, wp])
        module, ir_text = _llvm_ir(build, [x_shape, w_shape], gc.as_dtype(dtype))
        gemms = {conv_kernel._conv_node(k).type for k in module.kernels
                 if k.kind == "conv" and conv_kernel.lowering_of(k) == "gemm"}
        assert gemms == {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
        for kind in ("im2col", "col2im"):
            assert ir_text.count(f'\ndefine internal void @"graphc_conv_{kind}_{name}"') == 1
        x, w = rand(*x_shape, dtype=dtype), rand(*w_shape, seed=1, dtype=dtype)
        got, want = run_both(build, [x, w])
        eps = 2e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got[0], ref_conv(x, w, strides, padding), rtol=eps,
                                   atol=eps)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=eps, atol=eps * np.abs(w_).max())
