"""The GPU runtime (runtime/gpu/) and its wiring, checked on the emulated device.

No GPU is used here: GpuExecutable runs on runtime.gpu.EmulatedDevice (host memory, the
spec's emulation functions), which exercises everything but the pycuda calls of
CudaDevice (runtime/gpu/cuda.py), which these machines cannot run."""
import collections
import copy
import importlib.util
import os
import random
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc import compiled_executor, session as session_module
from graphc.export import export
from runtime import file_format as ff
from runtime.gpu import (DeviceVariables, EmulatedDevice, GpuExecutable, GpuUnavailable,
                         open_device)
from tests.test_file_format import header_of, rewrite, with_header
from tests.test_runtime import sym

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_PYCUDA = importlib.util.find_spec("pycuda") is not None


# ------------------------------------------------------- hand-written specs
def emulate_ir(name, nargs, body):
    """`name.emulate`: every thread of the grid in turn, each taking the elements
    i = thread, thread + threads, ... below n = syms[0]; `body` (straight-line IR) sees
    %a0.., %syms, %status, %i."""
    params = ", ".join(f"ptr %a{k}" for k in range(nargs))
    return f"""
define void @"{name}.emulate"({params}, ptr %syms, ptr %status, i64 %grid, i64 %block) {{
entry:
  %n = load i64, ptr %syms
  %total = mul i64 %grid, %block
  br label %thread
thread:
  %t = phi i64 [0, %entry], [%t1, %next]
  %tmore = icmp slt i64 %t, %total
  br i1 %tmore, label %elem, label %done
elem:
  %i = phi i64 [%t, %thread], [%i1, %body]
  %imore = icmp slt i64 %i, %n
  br i1 %imore, label %body, label %next
body:
{textwrap.indent(textwrap.dedent(body).strip(), "  ")}
  %i1 = add i64 %i, %total
  br label %elem
next:
  %t1 = add i64 %t, 1
  br label %thread
done:
  ret void
}}
"""


FAIL_IF = """
define void @fail_if(i1 %bad, ptr %status, ptr %slot, i64 %value) {
entry:
  br i1 %bad, label %fail, label %ok
fail:
  %old = cmpxchg ptr %status, i32 0, i32 1 monotonic monotonic
  %won = extractvalue { i32, i1 } %old, 1
  br i1 %won, label %detail, label %ok
detail:
  store i64 %value, ptr %slot
  br label %ok
ok:
  ret void
}
"""

KERNELS = {  # name: (number of buffer args, body)
    "k_add": (3, """
        %xa = getelementptr float, ptr %a0, i64 %i
        %ya = getelementptr float, ptr %a1, i64 %i
        %ta = getelementptr float, ptr %a2, i64 %i
        %xv = load float, ptr %xa
        %yv = load float, ptr %ya
        %s = fadd float %xv, %yv
        store float %s, ptr %ta"""),
    "k_scale": (3, """
        %ta = getelementptr float, ptr %a0, i64 %i
        %tv = load float, ptr %ta
        %wv = load float, ptr %a1
        %zv = fmul float %tv, %wv
        %za = getelementptr float, ptr %a2, i64 %i
        store float %zv, ptr %za"""),
    "k_bump": (1, """
        %first = icmp eq i64 %i, 0
        %inc = select i1 %first, float 1.0, float 0.0
        %old = load float, ptr %a0
        %new = fadd float %old, %inc
        store float %new, ptr %a0"""),
    "k_check": (1, """
        %xa = getelementptr float, ptr %a0, i64 %i
        %xv = load float, ptr %xa
        %bad = fcmp olt float %xv, -100.0
        %slot = getelementptr i64, ptr %syms, i64 1
        call void @fail_if(i1 %bad, ptr %status, ptr %slot, i64 %i)"""),
}


def stub_ptx(kernels):
    """PTX with an .entry per kernel (never launched here: the file checks read it)."""
    parts = [".version 7.0", ".target sm_80", ".address_size 64"]
    for name, (nargs, _) in kernels.items():
        params = ",\n".join(f"\t.param .u64 {name}_param_{k}" for k in range(nargs + 2))
        parts.append(f".visible .entry {name}(\n{params}\n)\n{{\n\tret;\n}}")
    return "\n".join(parts) + "\n"


N = sym("x.0")
LAUNCH = {"grid": [[1, [[["floordiv", [[1, [["x.0", 1]]], [3, []]], [[4, []]]], 1]]]],
          "block": 4, "shared_bytes": 0}  # (n + 3) // 4 blocks of 4 threads


def hand_spec():
    """t = x + y (arena); z = t * w (w a variable); w += 1; fails when some x < -100."""
    return {
        "format_version": 1, "target": {"kind": "gpu", "arch": "sm_80"},
        "symbols": [{"name": "x.0", "feed": 0, "axis": 0}],
        "guards": [[N, "==", 1, False]], "value_guards": [],
        "feeds": [{"name": "x:0", "dtype": "float32", "dims": [N]},
                  {"name": "y:0", "dtype": "float32", "dims": [N]}],
        "fetches": [{"name": "z:0", "dtype": "float32", "dims": [N], "source": "kernel",
                     "index": 0},
                    {"name": "w:0", "dtype": "float32", "dims": [1], "source": "variable",
                     "index": 0}],
        "variables": [{"name": "w", "dtype": "float32", "dims": [1], "written": True,
                       "read": True}],
        "constants": [], "arena_bytes": [[4, [["x.0", 1]]]],
        "error_sites": [{"class": "InvalidArgumentError", "message": "x[{0}] is below -100",
                         "op": "node check (defined at model.py:3)", "args": ["int"]}],
        "error_detail_slots": 1,
        "ptx": stub_ptx(KERNELS),
        "emulation_ir": FAIL_IF + "".join(emulate_ir(k, n, body)
                                          for k, (n, body) in KERNELS.items()),
        "launches": [dict(LAUNCH, kernel="k_check", args=[["feed", 0]]),
                     dict(LAUNCH, kernel="k_add", args=[["feed", 0], ["feed", 1],
                                                        ["arena", 0]]),
                     dict(LAUNCH, kernel="k_scale", args=[["arena", 0], ["var", 0],
                                                          ["fetch", 0]]),
                     dict(LAUNCH, kernel="k_bump", args=[["var", 0]])],
    }


@pytest.fixture(scope="module")
def hand_exe():
    return GpuExecutable(hand_spec(), EmulatedDevice())


def _xy(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)]


def test_hand_written_spec_runs_with_unknown_batch(hand_exe):
    store = DeviceVariables(hand_exe.device, {"w": np.array([2.0], np.float32)})
    for n, w in ((5, 2.0), (3, 3.0), (64, 4.0)):
        x, y = _xy(n, seed=n)
        z, w_fetched = hand_exe.run([x, y], store)
        np.testing.assert_array_equal(z, (x + y) * np.float32(w))
        assert w_fetched.tolist() == [w + 1]  # the value after the run's update


def test_empty_batch_launches_no_grid_of_zero_blocks():
    """CUDA refuses a launch of 0 blocks, and so does the emulated device; the executable
    leaves out the launches whose grid is 0 (here all four: each grid is (n + 3) // 4)."""
    device = EmulatedDevice()
    exe = GpuExecutable(hand_spec(), device)
    store = {"w": np.array([2.0], np.float32)}
    z, w = exe.run(_xy(0), store)
    assert z.shape == (0,) and w.tolist() == [2.0] and device.launches == 0
    with pytest.raises(RuntimeError, match="launch of 0 blocks"):
        device.launch(lambda *args: pytest.fail("a grid of 0 blocks ran"), [0], 0, 0, 0, 4, 0)


def test_arena_grows_for_a_bigger_batch():
    exe = GpuExecutable(hand_spec(), EmulatedDevice())
    store = {"w": np.array([1.0], np.float32)}
    exe.run(_xy(4), store)
    small = exe._arena_bytes
    exe.run(_xy(4000), store)
    assert exe._arena_bytes > small + 4 * 4000 * 3  # planned buffer, two feeds, one fetch
    big = exe._arena_bytes
    exe.run(_xy(7), store)
    assert exe._arena_bytes == big  # reused, not shrunk


def test_guard_and_feed_errors_match_the_cpu_runtime(hand_exe):
    store = {"w": np.array([1.0], np.float32)}
    with pytest.raises(runtime.GuardFailure, match=r"guard failed: not \(x.0 == 1\)"):
        hand_exe.run(_xy(1), store)
    with pytest.raises(runtime.GuardFailure, match=r"feed y:0 has shape \[4\], the code "
                                                   r"was compiled for \[x.0\]"):
        hand_exe.run([_xy(3)[0], _xy(4)[1]], store)
    with pytest.raises(runtime.FeedError, match="feed x:0 must be float32, got int64"):
        hand_exe.run([np.arange(3), _xy(3)[1]], store)
    with pytest.raises(runtime.FeedError, match="expected 2 feeds"):
        hand_exe.run([_xy(3)[0]], store)
    with pytest.raises(runtime.UninitializedVariable, match="uninitialized value w"):
        hand_exe.run(_xy(3), {})
    with pytest.raises(runtime.VariableMismatch, match="variable w holds a float64"):
        hand_exe.run(_xy(3), {"w": np.array([1.0])})


def test_error_site_raises_kernel_failure_with_details(hand_exe):
    x, y = _xy(9)
    x[6] = -500
    with pytest.raises(runtime.KernelFailure, match=r"x\[6\] is below -100") as info:
        hand_exe.run([x, y], {"w": np.array([1.0], np.float32)})
    assert info.value.class_name == "InvalidArgumentError"
    assert info.value.op_text == "node check (defined at model.py:3)"
    z, _ = hand_exe.run(_xy(9), {"w": np.array([1.0], np.float32)})  # status was reset
    assert z.shape == (9,)


def test_variables_stay_on_the_device_between_runs():
    device = EmulatedDevice()
    exe = GpuExecutable(hand_spec(), device)
    store = DeviceVariables(device, {"w": np.array([0.0], np.float32)})
    exe.run(_xy(8), store)
    ins, outs = device.copies_in, device.copies_out
    for _ in range(5):
        exe.run(_xy(8), store)
    # per run: status+syms and two feeds in; status, z and the fetched w out. w itself
    # is never copied in again: it lives on the device
    assert device.copies_in - ins == 5 * 3 and device.copies_out - outs == 5 * 3
    assert store.on_device("w")
    assert store["w"].tolist() == [6.0]  # the host asks: copied out, current
    assert not store.on_device("w") or store._place["w"] != "device"
    store["w"] = np.array([100.0], np.float32)  # host code assigns: copied in next run
    z, w = exe.run(_xy(8, seed=3), store)
    np.testing.assert_array_equal(z, (_xy(8, seed=3)[0] + _xy(8, seed=3)[1]) * 100)
    assert w.tolist() == [101.0]


def test_plain_dict_store_is_updated_in_place(hand_exe):
    w = np.array([1.0], np.float32)
    store = {"w": w}
    hand_exe.run(_xy(3), store)
    hand_exe.run(_xy(3), store)
    assert store["w"] is w and w.tolist() == [3.0]


@pytest.mark.parametrize("edit, pattern", [
    (lambda s: s["launches"][0].update(kernel="nope"), "no .entry in the PTX"),
    (lambda s: s["launches"][1]["args"].pop(), "takes 5 parameters in the PTX"),
    (lambda s: s["launches"][1]["args"].__setitem__(0, ["feed", 2]), "feed 2 does not exist"),
    (lambda s: s["launches"][2]["args"].__setitem__(2, ["fetch", 1]), "not a fetch computed"),
    (lambda s: s["launches"][2]["args"].__setitem__(1, ["var", 1]), "var 1 does not exist"),
    (lambda s: s["launches"][0].update(block=0), r"block 0 is not an integer in \[1, 1024\]"),
    (lambda s: s["launches"][0].update(shared_bytes=1 << 30), "shared_bytes"),
    (lambda s: s.update(target={"kind": "gpu", "arch": "80"}), "not a GPU target"),
    (lambda s: s.update(emulation_ir=s["emulation_ir"].replace("k_bump.emulate", "k_b.e")),
     "no function k_bump.emulate"),
])
def test_bad_specs_are_rejected(edit, pattern):
    spec = hand_spec()
    edit(spec)
    with pytest.raises(ValueError, match=pattern):
        GpuExecutable(spec, EmulatedDevice())


def test_emulated_copies_are_bounds_checked():
    device = EmulatedDevice()
    address = device.alloc(16)
    device.copy_in(address + 8, np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="outside every allocation"):
        device.copy_in(address + 8, np.zeros(3, np.float32))
    device.free(address)
    with pytest.raises(RuntimeError, match="outside every allocation"):
        device.copy_out(np.zeros(1, np.float32), address)


# --------------------------------------------------------- generated specs
def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 6], name="x")
        labels = gc.placeholder(gc.int32, [None], name="labels")
        w1 = gc.Variable(rng.standard_normal((6, 16)).astype(np.float32) * 0.5, name="w1")
        b1 = gc.Variable(np.zeros(16, np.float32), name="b1")
        w2 = gc.Variable(rng.standard_normal((16, 5)).astype(np.float32) * 0.5, name="w2")
        logits = gc.matmul(gc.nn.relu(gc.matmul(x, w1) + b1), w2)
        probs = gc.nn.softmax(logits, name="probs")
        loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train = gc.train.AdamOptimizer(0.05).minimize(loss)
        init = gc.global_variables_initializer()
    return g, x, labels, probs, loss, train, init


def _data(n=32, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 6)).astype(np.float32), rng.integers(0, 5, n).astype(np.int32)


def _train(backend, steps=40):
    g, x, labels, probs, loss, train, init = _mlp()
    sess = gc.Session(graph=g, config=gc.ConfigProto(backend=backend))
    sess.run(init)
    xs, ys = _data()
    losses = [sess.run([loss, train], {x: xs, labels: ys})[0] for _ in range(steps)]
    return sess, g, losses


def test_session_gpu_emulated_trains_to_the_cpu_loss():
    _, _, cpu = _train("compiled")
    sess, g, gpu = _train("gpu_emulated")
    assert gpu[-1] < 0.5 * gpu[0]
    np.testing.assert_allclose(gpu, cpu, rtol=2e-4, atol=1e-5)
    store = sess._state.variables
    assert isinstance(store, DeviceVariables)
    assert all(store.on_device(n) for n in ("w1", "b1", "w2"))


def test_optimizer_step_updates_variables_on_the_device():
    g, x, labels, probs, loss, train, init = _mlp()
    sess = gc.Session(graph=g, config=gc.ConfigProto(backend="gpu_emulated"))
    sess.run(init)
    xs, ys = _data()
    sess.run(train, {x: xs, labels: ys})
    device = sess._gpu
    outs = device.copies_out
    for _ in range(3):
        sess.run(train, {x: xs, labels: ys})
    assert device.copies_out - outs == 3  # the status only: no variable leaves the device
    w1 = g.get_tensor_by_name("w1:0")
    before = sess.run(w1)
    sess.run(train, {x: xs, labels: ys})
    assert not np.array_equal(sess.run(w1), before)


def test_saver_and_variable_load_see_device_values(tmp_path):
    sess, g, _ = _train("gpu_emulated", steps=3)
    with g.as_default():
        saver = gc.train.Saver()
    w1 = g.get_tensor_by_name("w1:0")
    trained = sess.run(w1)
    prefix = saver.save(sess, str(tmp_path / "ckpt"))
    with g.as_default():
        var = [v for v in gc.global_variables() if v.op.name == "w1"][0]
    var.load(np.zeros((6, 16), np.float32), sess)
    assert not sess.run(w1).any()
    saver.restore(sess, prefix)
    np.testing.assert_array_equal(sess.run(w1), trained)


def test_generated_error_site_is_invalid_argument_as_on_cpu():
    def message(backend):
        g = gc.Graph()
        with g.as_default():
            params = gc.placeholder(gc.float32, [None])
            idx = gc.placeholder(gc.int32, [None])
            out = gc.gather(params, idx)
        with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
            assert sess.run(out, {params: [1, 2, 3], idx: [2, 0]}).tolist() == [3, 1]
            with pytest.raises(gc.errors.InvalidArgumentError) as info:
                sess.run(out, {params: [1, 2, 3], idx: [0, 7]})
        return str(info.value)
    gpu = message("gpu_emulated")
    assert "7" in gpu and "[0,3)" in gpu.replace(" ", "")
    assert gpu == message("compiled")


def test_host_stage_between_gpu_stages():
    """Where's indices form runs on the host; the GPU stages before and after it get and
    give host arrays through the framework."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None])
        idx = gc.where(x * 2.0 > 1.0)
        total = gc.reduce_sum(gc.cast(idx, gc.float32) + 1.0)
    with gc.Session(graph=g, config=gc.ConfigProto(backend="gpu_emulated")) as sess:
        out = sess.run(total, {x: np.array([0, 1, 0, 3, 2], np.float32)})
    assert out == (1 + 1) + (3 + 1) + (4 + 1)


def test_gpu_specs_are_cached_on_disk_with_their_target():
    from graphc.compiler import spec_cache

    def run(backend):
        g = gc.Graph()
        with g.as_default():
            x = gc.placeholder(gc.float32, [None, 3])
            y = gc.nn.softmax(x * 3.0 + 1.0)
        with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
            return sess.run(y, {x: np.ones((2, 3), np.float32)})
    before = dict(spec_cache.stats)
    run("gpu_emulated")
    run("compiled")  # the same module for the CPU target: its own entry
    assert spec_cache.stats["misses"] - before["misses"] == 2
    hits = spec_cache.stats["hits"]
    np.testing.assert_allclose(run("gpu_emulated"), np.full((2, 3), 1 / 3), rtol=1e-6)
    assert spec_cache.stats["hits"] == hits + 1


# -------------------------------------------------------------- selection
def test_gpu_placement_selects_the_gpu_when_the_session_has_one(monkeypatch):
    device = EmulatedDevice()
    monkeypatch.setattr(session_module, "_find_gpu", lambda: device)
    x = gc.placeholder(gc.float32, [None, 2])
    with gc.device("/gpu:0"):
        w = gc.Variable([[1.0], [2.0]])
        y = gc.matmul(x, w)
    z = gc.constant(3.0) * 2.0  # unplaced: the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = gc.Session()
        sess.run(w.initializer)
        assert sess.run(y, {x: [[1.0, 1.0]]}).tolist() == [[3.0]]
        assert sess.run(z) == 6.0
    assert device.launches > 0 and sess._state.variables.on_device(w.op.name)
    cpu_only = [e for e in sess._cache.values() if e.device is None]
    assert len(cpu_only) == 1  # z's signature


def test_gpu_placement_without_a_gpu_keeps_soft_placement(monkeypatch):
    monkeypatch.setattr(session_module, "_find_gpu", lambda: None)
    with gc.device("/gpu:0"):
        a = gc.constant([1.0, 2.0])
        b = gc.reduce_sum(a)
    with pytest.warns(RuntimeWarning, match="run on the CPU"):
        assert gc.Session().run(b) == 3.0


@pytest.mark.skipif(HAVE_PYCUDA, reason="pycuda is installed here")
def test_gpu_backend_without_pycuda_says_so(monkeypatch):
    with pytest.raises(GpuUnavailable, match="needs pycuda, which is not installed"):
        gc.Session(config=gc.ConfigProto(backend="gpu"))
    monkeypatch.setenv("GRAPHC_BACKEND", "gpu")
    with pytest.raises(GpuUnavailable, match=r"pip install graphc\[gpu\]"):
        gc.Session()
    with pytest.raises(GpuUnavailable):
        open_device("cuda")


def test_unknown_backend():
    with pytest.raises(ValueError, match="Unknown backend 'tpu'.*'gpu_emulated'"):
        gc.Session(config=gc.ConfigProto(backend="tpu")).run(gc.constant(1.0))


def test_fallback_to_cpu_code_is_counted_and_can_be_strict(monkeypatch):
    from graphc.compiler.backends.gpu import GpuCodegenNotImplemented

    def not_yet(*args, **kwargs):
        raise GpuCodegenNotImplemented("no GPU codegen for 'sort' kernels (TopK)")
    monkeypatch.setattr(compiled_executor, "compile_gpu_executable", not_yet)
    monkeypatch.setattr(compiled_executor, "_warned_fallbacks", set())
    monkeypatch.setattr(compiled_executor, "GPU_FALLBACKS", collections.Counter())
    x = gc.placeholder(gc.float32, [3])
    y = x * 2.0
    sess = gc.Session(config=gc.ConfigProto(backend="gpu_emulated"))
    with pytest.warns(compiled_executor.GpuFallbackWarning, match="'sort' kernels"):
        assert sess.run(y, {x: [1, 2, 3]}).tolist() == [2, 4, 6]
    assert compiled_executor.GPU_FALLBACKS == {"no GPU codegen for 'sort' kernels": 1}
    monkeypatch.setenv("GRAPHC_GPU_STRICT", "1")
    with pytest.raises(gc.errors.UnimplementedError, match="'sort' kernels"):
        gc.Session(config=gc.ConfigProto(backend="gpu_emulated")).run(y, {x: [1, 2, 3]})


# ------------------------------------------------------------------ export
@pytest.fixture(scope="module")
def gpu_file(tmp_path_factory):
    g, x, labels, probs, loss, train, init = _mlp()
    sess = gc.Session(graph=g, config=gc.ConfigProto(backend="gpu_emulated"))
    sess.run(init)
    xs, ys = _data()
    for _ in range(3):
        sess.run(train, {x: xs, labels: ys})
    path = str(tmp_path_factory.mktemp("gpu_export") / "mlp_gpu.gcx")
    export(sess, path, inputs={"x": x}, outputs={"probs": probs}, target="gpu")
    return sess, x, probs, path


@pytest.mark.parametrize("batch", [1, 7, 33])
def test_gpu_file_round_trip_is_bit_identical_to_the_session(gpu_file, batch):
    sess, x, probs, path = gpu_file
    m = runtime.load(path, device="emulated")
    xv = np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32)
    np.testing.assert_array_equal(m.run({"x": xv})["probs"], sess.run(probs, {x: xv}))


def test_gpu_file_contents_and_devices(gpu_file, tmp_path):
    path = gpu_file[3]
    h = ff.read(path).header
    assert h["target"] == {"kind": "gpu", "arch": "sm_80"}
    spec = h["executables"][0]
    assert ".entry" in spec["ptx"] and ".emulate" in spec["emulation_ir"]
    assert spec["launches"] and "llvm_ir" not in spec
    if not HAVE_PYCUDA:
        with pytest.raises(GpuUnavailable, match="pycuda"):
            runtime.load(path)
    with pytest.raises(ValueError, match="holds GPU code"):
        runtime.load(path, device="cpu")
    g = gc.Graph()
    with g.as_default():
        a = gc.placeholder(gc.float32, [2], name="a")
        b = a * 2.0
        sess = gc.Session(graph=g)
        cpu_path = export(sess, str(tmp_path / "cpu.gcx"), {"a": a}, {"b": b})
    with pytest.raises(ValueError, match="holds CPU code"):
        runtime.load(cpu_path, device="emulated")
    assert runtime.load(cpu_path).run({"a": np.ones(2, np.float32)})["b"].tolist() == [2, 2]


def test_graphc_dump_reads_a_gpu_file(gpu_file, capsys):
    from graphc.dump.cli import main
    main([gpu_file[3]])
    assert "target: GPU sm_80" in capsys.readouterr().out
    main([gpu_file[3], "--code", "0"])
    code = capsys.readouterr().out      # the PTX the GPU runs, not the CPU emulation
    assert code.startswith(".visible .entry kernel_0_") and ".emulate" not in code


def test_gpu_model_state_stays_on_the_device(tmp_path):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [3], name="x")
        acc = gc.Variable(np.zeros(3, np.float32), name="acc")
        out = gc.assign_add(acc, x * 2.0)
        sess = gc.Session(graph=g, config=gc.ConfigProto(backend="gpu_emulated"))
        sess.run(acc.initializer)
    path = export(sess, str(tmp_path / "acc.gcx"), {"x": x}, {"acc": out}, target="gpu")
    m = runtime.load(path, device="emulated")
    for k in range(3):
        got = m.run({"x": np.ones(3, np.float32)})["acc"]
    assert got.tolist() == [6.0] * 3
    assert isinstance(m.state, DeviceVariables) and m.state.on_device("acc")
    assert m.state["acc"].tolist() == [6.0] * 3


# -------------------------------------------------------------- bad files
def _gpu_hand_file(path):
    signature = {
        "inputs": [{"name": "x", "tensor": "x:0", "dtype": "float32", "dims": [N]},
                   {"name": "y", "tensor": "y:0", "dtype": "float32", "dims": [N]}],
        "outputs": [{"name": "z", "tensor": "z:0", "dtype": "float32", "dims": [N]},
                    {"name": "w", "tensor": "w:0", "dtype": "float32", "dims": [1]}]}
    spec = hand_spec()
    return ff.write(path, signature, [spec], state={"w": np.array([1.0], np.float32)},
                    target=spec["target"])


@pytest.fixture
def gpu_hand_file(tmp_path):
    return _gpu_hand_file(str(tmp_path / "hand_gpu.gcx"))


def test_hand_written_gpu_file_runs(gpu_hand_file):
    m = runtime.load(gpu_hand_file, device="emulated")
    x, y = _xy(6)
    out = m.run({"x": x, "y": y})
    np.testing.assert_array_equal(out["z"], x + y)
    assert out["w"].tolist() == [2.0]


def test_gpu_file_has_the_onnx_runtime_api(gpu_hand_file):
    """A GPU file's Model takes the same run(output_names, feeds) and refuses a float64
    feed for a float32 input as a CPU file's (one Model class for both)."""
    m = runtime.load(gpu_hand_file, device="emulated")
    x, y = _xy(5)
    assert [i.name for i in m.get_inputs()] == ["x", "y"]
    assert [o.name for o in m.get_outputs()] == ["z", "w"]
    z, w = m.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(z, x + y)
    assert w.tolist() == [2.0]
    # the file's variable doubles each run and scales z: a fresh Model for each form
    m = runtime.load(gpu_hand_file, device="emulated")
    np.testing.assert_array_equal(m.run(["z"], {"x": x, "y": y})[0], x + y)
    with pytest.raises(runtime.FeedError, match="input 'x' is float32 but was fed a float64"):
        m.run(["z"], {"x": x.astype(np.float64), "y": y})


def _launch(h, k=0):
    return h["executables"][0]["launches"][k]


@pytest.mark.parametrize("edit, pattern", [
    (lambda h: h["target"].update(arch=7), "'arch' is missing or not a string"),
    (lambda h: h.update(target={"kind": "gpu", "arch": "sm_80", "x": 1}),
     "target differs from the file's target"),
    (lambda h: h["executables"][0].update(ptx=None), "ptx: is missing or not a string"),
    (lambda h: h["executables"][0].pop("launches"), "launches: is missing"),
    (lambda h: _launch(h).update(kernel="k_gone"), "k_gone.*no .entry in the PTX"),
    (lambda h: _launch(h).update(kernel=["k_add"]), "'kernel' is missing or not a string"),
    (lambda h: _launch(h, 1)["args"].append(["feed", 0]), "takes 5 parameters"),
    (lambda h: _launch(h, 1)["args"].__setitem__(2, ["arena", [[1, [["nope", 1]]]]]),
     "unknown symbol 'nope'"),
    (lambda h: _launch(h, 1)["args"].__setitem__(2, ["arena", [[1, [["x.0", 99]]]]]),
     "integer"),
    (lambda h: _launch(h, 1)["args"].__setitem__(0, ["feed", -1]), "feed -1 does not exist"),
    (lambda h: _launch(h, 1)["args"].__setitem__(0, ["stack", 0]), "not a storage key"),
    (lambda h: _launch(h, 2)["args"].__setitem__(2, ["fetch", 1]), "not a fetch computed"),
    (lambda h: _launch(h, 2)["args"].__setitem__(1, ["const", 0]), "const 0 does not exist"),
    (lambda h: _launch(h).update(grid="all"), "grid: malformed"),
    (lambda h: _launch(h).update(block=4096), r"block 4096 is not an integer in \[1, 1024\]"),
    (lambda h: _launch(h).update(block=True), "block True is not an integer"),
    (lambda h: _launch(h).update(shared_bytes=-1), "shared_bytes -1"),
    (lambda h: h["executables"][0].update(
        emulation_ir=h["executables"][0]["emulation_ir"].replace(
            "ptr %a2, ptr %syms", "ptr %syms")), "emulation IR has no function k_add.emulate"),
])
def test_bad_gpu_fields_get_file_format_errors(gpu_hand_file, edit, pattern):
    with open(gpu_hand_file, "rb") as f:
        h = header_of(f.read())
        f.seek(0)
        data = f.read()
    edit(h)
    rewrite(gpu_hand_file, with_header(data, h))
    with pytest.raises(ff.FileFormatError, match=pattern):
        runtime.load(gpu_hand_file, device="emulated")


_GPU_ABSURD = [-1, 0, 1 << 40, 1 << 63, "x", None, True, 1.5, [], {}, ["feed"],
               ["arena", -(1 << 62)], ["var", 7], ["fetch", 0], [[1, [["x.0", 9]]]],
               "k_add", "sm_80", ".entry k_add(", {"kind": "gpu"}]


def test_fuzz_gpu_fields(gpu_hand_file, tmp_path):
    """Hostile edits of the GPU fields (with valid checksums): every one is rejected with
    a FileFormatError or loads; what loads runs (on the emulated device, in a child
    process so that a crash would show as such) or fails with a runtime error."""
    with open(gpu_hand_file, "rb") as f:
        original = f.read()
    header = header_of(original)
    rng = random.Random(99)
    outcomes, accepted = {"rejected": 0, "accepted": 0}, []
    for case in range(1500):
        h = copy.deepcopy(header)
        spec = h["executables"][0]
        for _ in range(rng.randint(1, 2)):
            if not (isinstance(spec["launches"], list) and spec["launches"]
                    and all(isinstance(x, dict) for x in spec["launches"])):
                break
            launch = rng.choice(spec["launches"])
            where = rng.choice(["kernel", "grid", "block", "shared_bytes", "args", "arg",
                                "target", "launches"])
            value = copy.deepcopy(rng.choice(_GPU_ABSURD))
            if where == "arg" and isinstance(launch.get("args"), list) and launch["args"]:
                launch["args"][rng.randrange(len(launch["args"]))] = value
            elif where == "target":
                h["target"][rng.choice(["kind", "arch"])] = value
                spec["target"] = copy.deepcopy(h["target"])
            elif where == "arg":
                continue
            elif where == "launches":
                spec["launches"] = value if rng.random() < 0.5 else spec["launches"][::-1]
            else:
                launch[where] = value
        path = str(tmp_path / f"case{case % 50}.gcx")
        rewrite(path, with_header(original, h))
        try:
            ff.read(path)
        except ff.FileFormatError:
            outcomes["rejected"] += 1
        else:
            outcomes["accepted"] += 1
            if len(accepted) < 20:
                accepted.append(path)
                rewrite(path + ".ok", with_header(original, h))
    assert outcomes["rejected"] > 1000, outcomes
    script = textwrap.dedent(f"""
        import sys, numpy as np, runtime
        for path in sys.argv[1:]:
            try:
                m = runtime.load(path + ".ok", device="emulated")
                m.run({{"x": np.ones(5, np.float32), "y": np.ones(5, np.float32)}})
            except (runtime.RuntimeFailure, ValueError):
                pass
        print("ran", len(sys.argv) - 1)
    """)
    out = subprocess.run([sys.executable, "-c", script] + accepted, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    print(f"\ngpu fuzz: {outcomes}, {out.stdout.strip()}")


# ----------------------------------------------------------------- imports
def test_runtime_gpu_imports_without_pycuda_or_graphc():
    code = ("import sys, runtime, runtime.gpu; "
            "assert 'graphc' not in sys.modules and 'pycuda' not in sys.modules; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_specs_for_the_emulation_alone_need_no_ptx_but_files_do():
    """The gpu_emulated Session compiles no PTX (spec "ptx": None); a device that runs
    PTX, and every compiled file, still require it."""
    from runtime.gpu.spec import check_gpu_fields
    spec = {"target": {"kind": "gpu", "arch": "sm_80"}, "ptx": None, "emulation_ir": "",
            "launches": []}
    problems = []
    check_gpu_fields(spec, lambda where, problem: problems.append((where, problem)),
                     lambda e, where: None, need_ptx=False)
    assert problems == []
    with pytest.raises(ValueError, match="ptx: is missing or not a string"):
        def fail(where, problem):
            raise ValueError(f"{where}: {problem}")
        check_gpu_fields(spec, fail, lambda e, where: None)
