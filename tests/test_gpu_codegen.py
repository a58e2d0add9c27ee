"""GPU codegen (first step): loop kernels -> PTX (assembled by ptxas) and the same kernels
run on the CPU by the block/thread emulation, against the reference executor.

No GPU is used here: the PTX is only assembled, never launched."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import graphc as gc
from graphc.compiler.codegen_gpu import GpuCodegenNotImplemented, generate_gpu
from graphc.compiler.lower import lower
from graphc.compiler.pipeline import optimize
from runtime.executable import Executable


def _ptxas():
    for path in (shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if path and os.path.exists(path):
            return path
    return None


PTXAS = _ptxas()
LAUNCHES = [(1, 1), (3, 32), (2, 5)]  # (blocks, threads per block)


def _rand(*shape, seed=0):
    return np.random.RandomState(seed + sum(shape)).randn(*shape).astype(np.float32)


# ------------------------------------------------------------------ graphs
def elementwise(n):
    a = gc.placeholder(gc.float32, [n, 1])
    b = gc.placeholder(gc.float32, [3])
    c = gc.placeholder(gc.float32, [n, 3])
    y = gc.nn.relu(a * b + c) * 0.5 + gc.sigmoid(a) - gc.tanh(c) / (1.0 + gc.abs(b))
    z = gc.exp(-gc.square(c - a))
    return [a, b, c], [y, z], [_rand(n, 1), _rand(3, seed=1), _rand(n, 3, seed=2)]


def softmax(n):
    x = gc.placeholder(gc.float32, [n, 9])
    return [x], [gc.nn.softmax(x), gc.nn.log_softmax(x)], [_rand(n, 9) * 3]


def layer_norm(n):
    x = gc.placeholder(gc.float32, [n, 11])
    gamma = gc.placeholder(gc.float32, [11])
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    y = (x - mean) * gc.rsqrt(var + 1e-5) * gamma + 0.25
    return [x, gamma], [y], [_rand(n, 11), _rand(11, seed=4)]


def mlp_without_matmul(n):
    """Dense layers as broadcast products summed over the input axis (loop kernels)."""
    x = gc.placeholder(gc.float32, [n, 5])
    w1 = gc.constant(_rand(5, 6, seed=7))
    w2 = gc.constant(_rand(6, 3, seed=8))
    h = gc.nn.relu(gc.reduce_sum(gc.expand_dims(x, 2) * w1, axis=1) + 0.1)
    logits = gc.reduce_sum(gc.expand_dims(h, 2) * w2, axis=1)
    return [x], [gc.nn.softmax(logits), gc.reduce_sum(logits, axis=0)], [_rand(n, 5)]


GRAPHS = [elementwise, softmax, layer_norm, mlp_without_matmul]


def _module(make, n):
    g = gc.Graph()
    with g.as_default():
        feeds, fetches, arrays = make(n)
    module = lower(feeds, fetches, [], [a.shape for a in arrays])
    optimize(module)
    if getattr(module, "kernels", None) is None:
        from graphc.compiler.passes import fusion
        fusion.run(module)
    if getattr(module, "memory_plan", None) is None:
        from graphc.compiler.passes import memory_planning
        memory_planning.run(module)
    return g, feeds, fetches, arrays, module


def _reference(g, feeds, fetches, arrays):
    with gc.Session(graph=g, config=gc.ConfigProto(backend="reference")) as sess:
        return sess.run(fetches, dict(zip(feeds, arrays)))


# ---------------------------------------------------------- CPU emulation
@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda l: f"grid{l[0]}x{l[1]}")
@pytest.mark.parametrize("n", [1, 7, 1023])
@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_emulated_kernels_match_reference(make, n, launch):
    g, feeds, fetches, arrays, module = _module(make, n)
    gpu = generate_gpu(module, grid=launch[0], block=launch[1])
    got = Executable(gpu.emulation_spec).run(list(arrays), {})
    want = _reference(g, feeds, fetches, arrays)
    for x, w in zip(got, want):
        assert x.shape == np.shape(w)
        np.testing.assert_allclose(x, w, rtol=2e-5, atol=2e-5)


# ------------------------------------------------------------------- PTX
def _ptxas_report(ptx, arch, tmp_path):
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    out = subprocess.run([PTXAS, f"-arch={arch}", "-v", str(src), "-o",
                          str(tmp_path / f"k_{arch}.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_ptx_assembles(make, tmp_path):
    module = _module(make, 7)[-1]
    gpu = generate_gpu(module)
    ptx = gpu.ptx("sm_80")
    assert ".version 7.0" in ptx and ".target sm_80" in ptx
    for k in gpu.kernels:
        assert f".entry {k.name}(" in ptx
    # the thread indices come from the special registers: a grid-stride loop
    assert "%ctaid.x" in ptx and "%nctaid.x" in ptx and "%tid.x" in ptx
    for arch in ("sm_80", "sm_90"):
        report = _ptxas_report(ptx, arch, tmp_path)
        for name, regs in re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers",
                                     report, re.S):
            spills = re.search(rf"'{name}'.*?(\d+) bytes spill stores", report, re.S)
            print(f"{make.__name__} {arch} {name}: {regs} registers, "
                  f"{spills.group(1) if spills else '?'} bytes spill stores")


def test_kernels_are_grid_parallel_where_safe():
    module = _module(softmax, 7)[-1]
    gpu = generate_gpu(module)
    assert all(not k.serial_nests for k in gpu.kernels)


# ---------------------------------------------------------- not done yet
def test_gemm_kernels_are_not_implemented():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [4, 5])
        w = gc.constant(_rand(5, 3))
        y = gc.nn.relu(gc.matmul(x, w))
    module = lower([x], [y], [], [(4, 5)])
    optimize(module)
    if getattr(module, "kernels", None) is None:
        from graphc.compiler.passes import fusion, memory_planning
        fusion.run(module)
        memory_planning.run(module)
    with pytest.raises(NotImplementedError, match="'gemm' kernels is not implemented"):
        generate_gpu(module)


# -------------------------------------------------------------- runtime
def test_load_gpu_module_says_what_is_missing():
    import importlib.util

    from runtime.gpu import GpuUnavailable, load_gpu_module
    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("pycuda is installed here")
    with pytest.raises(GpuUnavailable, match="needs pycuda, which is not installed"):
        load_gpu_module(".version 7.0\n")
