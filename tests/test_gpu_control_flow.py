"""What only the GPU target's While and If have (backends/gpu/control_flow.py,
runtime/gpu/control_flow.py), run here on the emulated GPU: the device's copy counters show
that only the predicate leaves the device per iteration, a loop array written a row per
iteration keeps one buffer, the bodies' PTX assembles with ptxas, a spec's regions are
checked, and a body without GPU code keeps only its loop on the host. Their numbers on both
targets: tests/test_native_control_flow.py (ON_BOTH_TARGETS)."""
import copy

import numpy as np
import pytest

import graphc as gc
from graphc.compiled_executor import compile_gpu_executable
from runtime.gpu import EmulatedDevice, GpuExecutable
from tests.test_gpu_codegen import PTXAS, _ptxas_report
from tests.test_native_control_flow import np_tanh_loop, tanh_loop


@pytest.fixture(autouse=True)
def gpu_emulated(monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", "gpu_emulated")
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")  # a CPU fallback is an error


# ------------------------------------------------------------------ device traffic
def test_only_the_predicate_leaves_the_device_per_iteration(native, monkeypatch):
    # the host-driven form (a loop this small otherwise runs as one device kernel:
    # test_gpu_device_loops.py)
    monkeypatch.setenv("GRAPHC_GPU_DEVICE_LOOPS", "0")
    x, n, _, h = tanh_loop(np.float32)
    xv = np.ones((4, 3), np.float32)
    with gc.Session() as sess:
        sess.run(h, {x: xv, n: 0})
        device = sess._gpu
        counts = {}
        for trips in (1, 7):
            before = (device.copies_in, device.copies_out, device.launches)
            np.testing.assert_allclose(sess.run(h, {x: xv, n: trips}),
                                       np_tanh_loop(xv, trips), rtol=2e-6, atol=1e-6)
            counts[trips] = [now - then for now, then in zip(
                (device.copies_in, device.copies_out, device.launches), before)]
    copies_in, copies_out, launches = (counts[7][k] - counts[1][k] for k in range(3))
    assert copies_in == 0       # nothing goes in per iteration: the state stays there
    assert copies_out == 6      # one predicate (with the status) per iteration
    assert launches > 6         # the cond's and the body's kernels ran on the device


# ------------------------------------------------------------------------------ PTX
def _loops_spec():
    """The GPU spec (with PTX) of a nested loop with a branch and a gradient."""
    x = gc.placeholder(gc.float32, [None, 3])
    n = gc.placeholder(gc.int32, [])

    def body(i, h):
        _, inner = gc.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s * 0.5), [0, h],
                                   maximum_iterations=5)
        return i + 1, gc.cond(i > 1, lambda: gc.tanh(inner + h), lambda: inner * 2.0)
    _, h = gc.while_loop(lambda i, h: i < n, body, [0, x], maximum_iterations=n)
    loss = gc.reduce_sum(h * h)
    fetches = [loss, gc.gradients(loss, x)[0]]
    exe = compile_gpu_executable([x, n], fetches, [], [(2, 3), ()],
                                 [np.zeros((2, 3), np.float32), np.array(3, np.int32)],
                                 device=EmulatedDevice())
    return exe.spec


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_loop_bodies_ptx_assembles(tmp_path):
    from graphc.compiler.driver import compile_signature, gpu_target
    x = gc.placeholder(gc.float32, [None, 3])
    n = gc.placeholder(gc.int32, [])
    _, h = gc.while_loop(lambda i, h: i < n,
                         lambda i, h: (i + 1, gc.cond(i > 1, lambda: gc.tanh(h), lambda: h * 2.0)),
                         [0, x])
    spec = compile_signature([x, n], [h], [], [(2, 3), ()], target=gpu_target("sm_80")).spec
    steps = [s for s in spec["launches"] if "while" in s]
    assert len(steps) == 1
    names = [launch["kernel"] for launch in _launches(steps[0]["body"]["steps"])]
    assert names and all(f".entry {name}(" in spec["ptx"] for name in names)
    for arch in ("sm_80", "sm_90"):
        _ptxas_report(spec["ptx"], arch, tmp_path)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (on PATH or /usr/local/cuda/bin)")
def test_tensor_array_and_rnn_gradient_ptx_assembles(monkeypatch, tmp_path):
    """dynamic_rnn's forward and backward loops with their TensorArrays, and a gather's
    gradient (atomic float64 adds), through ptxas."""
    from graphc.compiler.driver import compile_signature, gpu_target
    from graphc.ops import rnn
    monkeypatch.setattr(rnn, "UNROLL_MAX_STEPS", 0)
    x = gc.placeholder(gc.float64, [2, 5, 3])
    cell = gc.nn.rnn_cell.BasicLSTMCell(4)
    out, _ = gc.nn.dynamic_rnn(cell, x, dtype=gc.float64)
    rows = gc.TensorArray(gc.float64, size=5, element_shape=[3]).unstack(x[0])
    loss = gc.reduce_sum(out * out) + gc.reduce_sum(rows.gather([1, 1, 2]))
    grads = gc.gradients(loss, [x] + cell.variables)
    spec = compile_signature([x], [loss] + grads, [], [(2, 5, 3)],
                             target=gpu_target("sm_80")).spec
    assert sum("while" in s for s in spec["launches"]) == 2  # forward and backward
    assert "atom.global.add.f64" in spec["ptx"]
    for arch in ("sm_80", "sm_90"):
        _ptxas_report(spec["ptx"], arch, tmp_path)


def _launches(steps):
    for step in steps:
        if "while" in step:
            for key in ("cond", "body"):
                yield from _launches(step[key]["steps"])
        elif "if" in step:
            for key in ("then", "else"):
                yield from _launches(step[key]["steps"])
        else:
            yield step


def test_spec_with_regions_is_checked():
    """A spec whose loop body names a fetch or a copy source its frame lacks, or that
    lacks a body, is refused before anything runs, with the field named."""
    spec = _loops_spec()
    assert any("while" in s for s in spec["launches"])
    bad = copy.deepcopy(spec)
    step = next(s for s in bad["launches"] if "while" in s)
    launch = next(iter(_launches(step["body"]["steps"])))
    launch["args"][0] = ["fetch", 99]
    with pytest.raises(ValueError, match="fetch 99"):
        GpuExecutable(bad, EmulatedDevice())
    bad = copy.deepcopy(spec)
    step = next(s for s in bad["launches"] if "while" in s)
    step["body"]["fetches"][0].update(source="feed", index=99)
    with pytest.raises(ValueError, match="is not a fetch source"):
        GpuExecutable(bad, EmulatedDevice())
    bad = copy.deepcopy(spec)
    next(s for s in bad["launches"] if "while" in s).pop("cond")
    with pytest.raises(ValueError, match="cond.*missing"):
        GpuExecutable(bad, EmulatedDevice())
    GpuExecutable(spec, EmulatedDevice())  # the spec as compiled passes


# ----------------------------------------------------------------------- TensorArray
def test_an_array_written_a_row_per_iteration_keeps_one_buffer(native):
    """A TensorArray flow whose row the body writes, and that nothing reads after, is
    written in place: the loop does not copy the whole array every iteration."""
    x = gc.placeholder(gc.float32, [None, 2])
    n = gc.shape(x)[0]
    out = gc.TensorArray(gc.float32, size=n, element_shape=[2])
    _, out = gc.while_loop(lambda i, ta: i < n,
                           lambda i, ta: (i + 1, ta.write(i, gc.gather(x, i) * 2.0)), [0, out])
    y = out.stack()
    exe = compile_gpu_executable([x], [y], [], [(5, 2)], [np.zeros((5, 2), np.float32)],
                                 device=EmulatedDevice())
    step = next(s for s in exe.spec["launches"] if "while" in s)
    # the counter, then the array's two flows (values and written flags)
    assert [v["in_place"] for v in step["vars"]] == [False, True, True]
    xv = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(exe.run([xv])[0], xv * 2.0)


def test_a_body_without_gpu_code_keeps_its_loop_on_the_host(monkeypatch):
    """A kernel of a body the GPU codegen cannot lower puts that loop on the host between
    GPU stages (as before loops compiled for the GPU), not the whole run on CPU code."""
    from graphc.compiler.backends.gpu import GpuCodegenNotImplemented, kinds
    launches_of = kinds.kernel_launches

    def no_sin(program, kernel, name, block):
        if any(n.type == "Sin" for n in kernel.nodes):
            raise GpuCodegenNotImplemented("no GPU codegen for Sin (this test)")
        return launches_of(program, kernel, name, block)
    monkeypatch.setattr(kinds, "kernel_launches", no_sin)
    x = gc.placeholder(gc.float64, [3])
    _, h = gc.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, gc.sin(h) + 1.0), [0, x * 2.0])
    y = gc.exp(h)
    xv = np.array([0.1, -0.7, 1.3])
    want = xv * 2.0
    for _ in range(4):
        want = np.sin(want) + 1.0
    with gc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), np.exp(want), rtol=1e-13)
        stages = [type(s).__name__ for e in sess._cache.values()
                  for s in e.stages[0]._unlowered.stages]
    assert stages == ["NativeStage", "HostStage", "NativeStage"]


# ------------------------------------------------- stacks a product after the loop reads
@pytest.mark.parametrize("device_loops", ["1", "0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_rows_a_loop_did_not_write_are_zeros_to_the_product_after_it(
        native, monkeypatch, device_loops, dtype):
    """sink_loop_gemms' stacks (the product after the loop reads every row): the spec
    asks the runtime to zero the rows past the trip count, which the host-driven form
    does after the loop and the device loop before its launch. A full run first leaves
    its values in the rows that the shorter runs do not write."""
    from tests.test_loop_gemms import B, M, N, T, AccumulatingCase
    monkeypatch.setenv("GRAPHC_GPU_DEVICE_LOOPS", device_loops)
    case = AccumulatingCase(dtype, seed=3)
    loose = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12,
                                                                       atol=1e-12)
    with gc.Session() as sess:
        launches = {}
        for trips in (T, 0, 1, 4, T):
            before = sess._gpu.launches if sess._gpu else 0
            got_acc, got_h = sess.run([case.acc, case.h], case.feed(trips))
            launches[trips] = sess._gpu.launches - before
            case.check(got_acc, got_h, trips, loose)
    exe = compile_gpu_executable([case.xs, case.w, case.n], [case.acc, case.h], [],
                                 [(T, B, M), (M, N), ()],
                                 [case.xv, case.wv, np.array(T, np.int32)],
                                 device=EmulatedDevice())
    step = next(s for s in exe.spec["launches"] if "while" in s)
    assert [s["zeroed_past_trips"] for s in step["stacks"]] == [True, True]
    # the form each setting gives: one launch for the loop whatever its trips, or the
    # cond's and the body's per iteration
    assert (launches[1] == launches[4]) == (device_loops == "1")
