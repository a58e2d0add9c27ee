"""GPU codegen: the GPU executable spec (docs/gpu_contract.md) of small graphs, its
launches run through the emulation functions (tests/gpu_emulation.py) against the
reference executor at several launch shapes, and its PTX assembled by ptxas.

No GPU is used here: the PTX is only assembled, never launched."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import graphc as gc
from graphc.compiler.backends.gpu import generate_gpu
from graphc.compiler.driver import gpu_target, schedule_module
from graphc.compiler.lower import lower
from tests.gpu_emulation import EmulatedGpu


def _ptxas():
    for path in (shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if path and os.path.exists(path):
            return path
    return None


PTXAS = _ptxas()
LAUNCHES = [None, (1, 1), (3, 32), (2, 5)]  # (blocks, threads per block); None: the spec's


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
    """(graph, feeds, fetches, arrays, fused planned module)."""
    g = gc.Graph()
    with g.as_default():
        feeds, fetches, arrays = make(n)
    module = lower(feeds, fetches, [], [a.shape for a in arrays])
    schedule_module(module, gpu_target())
    return g, feeds, fetches, arrays, module


def _reference(g, feeds, fetches, arrays):
    with gc.Session(graph=g, config=gc.ConfigProto(backend="reference")) as sess:
        return sess.run(fetches, dict(zip(feeds, arrays)))


# ---------------------------------------------------------- CPU emulation
@pytest.fixture(scope="module")
def compiled():
    """(make, n) -> (graph, feeds, fetches, arrays, EmulatedGpu), compiled once."""
    cache = {}

    def get(make, n):
        if (make, n) not in cache:
            g, feeds, fetches, arrays, module = _module(make, n)
            cache[make, n] = g, feeds, fetches, arrays, EmulatedGpu(generate_gpu(module).spec())
        return cache[make, n]
    return get


@pytest.mark.parametrize("n", [1, 7, 1023])
@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_emulated_kernels_match_reference(compiled, make, n):
    g, feeds, fetches, arrays, gpu = compiled(make, n)
    want = _reference(g, feeds, fetches, arrays)
    for launch in LAUNCHES:
        grid, block = launch or (None, None)
        got = gpu.run(list(arrays), grid=grid, block=block)
        for x, w in zip(got, want):
            assert x.shape == np.shape(w)
            np.testing.assert_allclose(x, w, rtol=2e-5, atol=2e-5, err_msg=str(launch))


def softmax_any_batch(n):
    x = gc.placeholder(gc.float32, [None, 9])
    return [x], [gc.nn.softmax(x), gc.reduce_max(x, axis=1) * 2.0], [_rand(n, 9) * 3]


def test_symbolic_batch_one_spec_for_every_size():
    g, feeds, fetches, arrays, module = _module(softmax_any_batch, 5)
    spec = generate_gpu(module).spec()
    assert any(not isinstance(l["grid"], int) for l in spec["launches"])
    gpu = EmulatedGpu(spec)
    for n in (1, 5, 300):
        arrays = [_rand(n, 9) * 3]
        for x, w in zip(gpu.run(arrays), _reference(g, feeds, fetches, arrays)):
            np.testing.assert_allclose(x, w, rtol=2e-5, atol=2e-5)


def test_spec_follows_the_contract():
    module = _module(mlp_without_matmul, 7)[-1]
    gpu = generate_gpu(module)
    spec = gpu.spec("sm_90")
    assert "entry" not in spec and "llvm_ir" not in spec
    assert spec["target"] == {"kind": "gpu", "arch": "sm_90"}
    assert ".target sm_90" in spec["ptx"]
    for field in ("format_version", "symbols", "guards", "value_guards", "feeds", "fetches",
                  "variables", "constants", "arena_bytes", "error_sites",
                  "error_detail_slots"):
        assert field in spec
    json.dumps(spec, default=lambda b: b.hex())  # plain data but the constants' bytes
    kinds = set()
    for launch in spec["launches"]:
        assert set(launch) == {"kernel", "args", "grid", "block", "shared_bytes"}
        assert f".entry {launch['kernel']}(" in spec["ptx"]
        assert f'define void @"{launch["kernel"]}.emulate"(' in spec["emulation_ir"]
        kinds |= {kind for kind, _ in launch["args"]}
    assert {"arena", "const", "feed", "fetch"} <= kinds


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
    for launch in gpu.launches:
        assert f".entry {launch.name}(" in ptx
    assert "%ctaid.x" in ptx and "%tid.x" in ptx
    assert not re.search(r"call\.uni[^;]*\b(expf|logf|exp|log|tanhf|powf)\b", ptx)
    for arch in ("sm_80", "sm_90"):
        _ptxas_report(ptx, arch, tmp_path)


# -------------------------------------------------------------- runtime
def test_load_gpu_module_says_what_is_missing():
    import importlib.util

    from runtime.gpu import GpuUnavailable, load_gpu_module
    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("pycuda is installed here")
    with pytest.raises(GpuUnavailable, match="needs pycuda, which is not installed"):
        load_gpu_module(".version 7.0\n")
