"""One compile path (graphc/compiler/driver.py): switching passes off does the same in a
Session (CPU and gpu_emulated) and in gc.export, and the exported file computes the same
numbers as the Session and as NumPy."""
import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.compiler.backends import cpu as cpu_backend
from graphc.compiler.backends import gpu as gpu_backend
from graphc.export import export
from graphc.framework.symbolic import evaluate_json
from runtime import file_format

SWITCHES = ["", "fusion", "memory_planning", "fusion,memory_planning"]
# Exp, Mul, Add, MatMul, Tanh: two kernels fused (a loop, a gemm with a tanh epilogue), so
# that a buffer is planned between them; five with fusion off
FUSED, UNFUSED = 2, 5


def _graph():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 5], name="x")
        w = gc.constant(_weights())
        y = gc.tanh(gc.matmul(gc.exp(x) * 0.5 + 1.0, w), name="y")
    return g, x, y


def _weights():
    return np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)


def _expected(xv):
    return np.tanh((np.exp(xv.astype(np.float64)) * 0.5 + 1.0) @ _weights())


def _data(rows=7):
    return np.random.default_rng(rows).standard_normal((rows, 5)).astype(np.float32)


@pytest.fixture(autouse=True)
def no_spec_cache(monkeypatch):
    """Every run compiles: a cached spec would skip the codegen that the tests count."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")


def _spy_kernel_counts(monkeypatch, package, name):
    """Patches package.name (a codegen entry taking the scheduled module first) to record
    len(module.kernels) of each module it generates."""
    counts = []
    original = getattr(package, name)

    def spy(module, *args, **kwargs):
        counts.append(len(module.kernels))
        return original(module, *args, **kwargs)
    monkeypatch.setattr(package, name, spy)
    return counts


def _session_run(backend, xv):
    g, x, y = _graph()
    with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
        return sess.run(y, {x: xv})


def _export(tmp_path, target):
    g, x, y = _graph()
    path = str(tmp_path / f"m_{target}.gcx")
    with gc.Session(graph=g) as sess:
        export(sess, path, inputs={"x": x}, outputs={"y": y}, target=target)
    return path


def _kernels(switches):
    return UNFUSED if "fusion" in switches.split(",") else FUSED


# (backend of the Session, its code generator's module and function, export target,
# runtime device)
TARGETS = {"cpu": ("compiled", cpu_backend, "generate", "cpu", None),
           "gpu": ("gpu_emulated", gpu_backend, "generate_gpu", "gpu", "emulated")}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("switches", SWITCHES)
def test_session_and_export_schedule_alike(switches, target, monkeypatch, tmp_path):
    backend, generator, generate, export_target, device = TARGETS[target]
    monkeypatch.setenv("GRAPHC_DISABLE_PASSES", switches)
    counts = _spy_kernel_counts(monkeypatch, generator, generate)
    xv = _data()
    out = _session_run(backend, xv)
    assert counts == [_kernels(switches)]
    np.testing.assert_allclose(out, _expected(xv), rtol=2e-6, atol=1e-6)

    path = _export(tmp_path, export_target)
    main = file_format.read(path).header["executables"][0]
    assert len(main["debug"]["kernels"]) == _kernels(switches)
    device_kw = {} if device is None else {"device": device}
    loaded = runtime.load(path, **device_kw).run({"x": xv})["y"]
    np.testing.assert_array_equal(loaded, out)  # one executor: the same code, same bits


@pytest.mark.parametrize("switches", ["fusion", "fusion,memory_planning"])
def test_memory_planning_switched_off_gives_every_buffer_its_own_memory(switches,
                                                                        monkeypatch,
                                                                        tmp_path):
    # unfused, four intermediates (Exp, Mul, Add, MatMul). Planned, Mul and Add write over
    # their input's last use; switched off, no two buffers share memory.
    monkeypatch.setenv("GRAPHC_DISABLE_PASSES", switches)
    plan = file_format.read(_export(tmp_path, "cpu")).header["executables"][0]["debug"][
        "memory_plan"]
    rows = {"x.0": 13}
    buffers = [(evaluate_json(b["offset"], rows), evaluate_json(b["size"], rows), b)
               for b in plan["buffers"]]
    assert len(buffers) == 4
    arena = evaluate_json(plan["arena_bytes"], rows)
    if "memory_planning" in switches:
        assert all(b["inplace_of"] is None for _, _, b in buffers)
        ends = 0
        for offset, size, _ in sorted(buffers, key=lambda t: t[0]):
            assert offset >= ends
            ends = offset + size
        assert arena == ends == sum(size for _, size, _ in buffers)
    else:
        assert sum(b["inplace_of"] is not None for _, _, b in buffers) == 2
        assert arena < sum(size for _, size, _ in buffers)


def _count_prunes(monkeypatch):
    """Counts the calls of the subgraph walker `prune`, wherever a graphc module holds it."""
    import sys
    import types
    from graphc.framework.subgraph import prune
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return prune(*args, **kwargs)
    for name, module in list(sys.modules.items()):
        if name.startswith("graphc") and isinstance(module, types.ModuleType) \
                and getattr(module, "prune", None) is prune:
            monkeypatch.setattr(module, "prune", counted)
    return calls


@pytest.mark.parametrize("backend", ["compiled", "gpu_emulated"])
def test_a_signature_is_pruned_once_for_all_its_compiles(backend, monkeypatch):
    import graphc.compiled_executor  # noqa: F401 (holds prune too: patched below)
    calls = _count_prunes(monkeypatch)
    g, x, y = _graph()
    with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
        for rows in (7, 1, 3):   # a batch of 1 breaks a guard: a second compile
            np.testing.assert_allclose(sess.run(y, {x: _data(rows)}), _expected(_data(rows)),
                                       rtol=2e-6, atol=1e-6)
        assert sess.compile_count == 2
    assert len(calls) == 1
