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
    module = lowered(lambda x, w: [gc.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")],
                     [(64, 14, 14, 32), (3, 3, 32, 64)])
    node = next(n for n in module.nodes if n.type == "Conv2D")
    shape = conv_kernel.ConvShape(node)
    assert 64 % shape.chunk == 0 and 1 < shape.chunk < 64
    assert shape.scratch_bytes() == shape.chunk * 196 * 288 * 4 <= conv_kernel.SCRATCH_BUDGET


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
