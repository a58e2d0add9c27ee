"""runtime.signature.Signature: the CPU and the GPU executables hold the same signature logic
(feeds, guards, symbol values, error sites), so the same feeds get the same answers and the
same errors from both."""
import numpy as np
import pytest

import graphc as gc
from graphc.compiler.driver import compile_signature, gpu_target
from runtime import errors
from runtime.executable import Executable
from runtime.gpu import EmulatedDevice, GpuExecutable
from runtime.signature import Signature


def _both(feeds, fetches, shapes, values=None):
    """(CPU Executable, GPU executable on the emulated device) of one run signature."""
    cpu = compile_signature(feeds, fetches, [], shapes, values).spec
    gpu = compile_signature(feeds, fetches, [], shapes, values,
                            target=gpu_target(ptx=False)).spec
    return Executable(cpu), GpuExecutable(gpu, EmulatedDevice())


def _message(call):
    with pytest.raises(errors.RuntimeFailure) as e:
        call()
    return type(e.value), str(e.value)


def test_gpu_executable_composes_the_signature_it_shares_with_the_cpu_one():
    assert not issubclass(GpuExecutable, Executable)
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    y = gc.reduce_sum(gc.exp(x) + gc.constant(np.float32([1, -2, 0.5])), axis=1)
    cpu, gpu = _both([x], [y], [(4, 3)])
    assert isinstance(cpu.signature, Signature) and isinstance(gpu.signature, Signature)
    for exe in (cpu, gpu):
        assert exe.feeds is exe.signature.feeds and exe.fetches is exe.signature.fetches
    for n in (0, 4, 7):
        xv = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        want = (np.exp(xv.astype(np.float64)) + [1, -2, 0.5]).sum(axis=1)
        for exe in (cpu, gpu):
            np.testing.assert_allclose(exe.run([xv], {})[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("feeds,error", [
    ([np.zeros((4, 3, 1), np.float32)], errors.GuardFailure),   # rank
    ([np.zeros((4, 5), np.float32)], errors.GuardFailure),      # a static dim
    ([np.zeros((1, 3), np.float32)], errors.GuardFailure),      # a guard on the batch
    ([np.zeros((4, 3), np.float64)], errors.FeedError),         # dtype
    ([], errors.FeedError),                                     # count
])
def test_cpu_and_gpu_refuse_the_same_feeds_with_the_same_words(feeds, error):
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    b = gc.placeholder(gc.float32, [3], name="b")
    y = gc.exp(x) + b * 2.0   # a batch of 1 broadcasts otherwise: the code is guarded
    cpu, gpu = _both([x, b], [y], [(4, 3), (3,)])
    feeds = feeds + [np.ones(3, np.float32)] if feeds else feeds  # [] tests the count
    got_cpu, got_gpu = _message(lambda: cpu.run(feeds, {})), _message(lambda: gpu.run(feeds, {}))
    assert got_cpu == got_gpu and got_cpu[0] is error


def test_cpu_and_gpu_report_the_same_error_site():
    params = gc.placeholder(gc.float32, [None, 2], name="params")
    indices = gc.placeholder(gc.int32, [None], name="indices")
    y = gc.gather(params, indices)
    cpu, gpu = _both([params, indices], [y], [(3, 2), (4,)])
    p = np.arange(6, dtype=np.float32).reshape(3, 2)
    good = np.int32([2, 0, 1, 2])
    for exe in (cpu, gpu):
        np.testing.assert_array_equal(exe.run([p, good], {})[0], p[good])
    bad = np.int32([0, 7, 1, 2])
    got_cpu = _message(lambda: cpu.run([p, bad], {}))
    got_gpu = _message(lambda: gpu.run([p, bad], {}))
    assert got_cpu == got_gpu and got_cpu[0] is errors.KernelFailure
    assert "7" in got_cpu[1]
