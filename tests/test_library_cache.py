"""The per-machine cache of graph-independent library functions (runtime/library_cache.py):
a conv module's microkernels are compiled once, kept on disk and in memory, and linked with
each new graph's code; values against an independent NumPy convolution."""
import ctypes
import os
import textwrap

import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.export import export
from runtime import jit, library_cache, module_split
from tests.runtime_alone import run_without_graphc

TOL = {np.float32: dict(rtol=2e-4, atol=2e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(d))
    library_cache.forget_memory()
    yield d
    library_cache.forget_memory()


def numpy_conv_step(x, w, r, pad):
    """y = conv2d(x, w) (NHWC, stride 1, zero padding `pad` each side), and the gradients
    of sum(y * r) with respect to x and w, by loops over the filter taps."""
    n, h, wd, ci = x.shape
    kh, kw, _, co = w.shape
    xp = np.zeros((n, h + 2 * pad, wd + 2 * pad, ci), x.dtype)
    xp[:, pad:pad + h, pad:pad + wd] = x
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, oh, ow, co), x.dtype)
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i:i + oh, j:j + ow]
            y += window @ w[i, j]
            dw[i, j] = np.einsum("nhwc,nhwk->ck", window, r)
            dxp[:, i:i + oh, j:j + ow] += r @ w[i, j].T
    return y, dxp[:, pad:pad + h, pad:pad + wd], dw


def conv_step(shape, co, dtype, backend="compiled", seed=0):
    """Runs y, dx, dw of a SAME 3x3 conv in a new graph; returns (got, NumPy's)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((3, 3, shape[-1], co)).astype(dtype)
    r = rng.standard_normal(shape[:-1] + (co,)).astype(dtype)
    g = gc.Graph()
    with g.as_default():
        xt = gc.placeholder(gc.as_dtype(dtype), shape)
        wt = gc.placeholder(gc.as_dtype(dtype), w.shape)
        rt = gc.placeholder(gc.as_dtype(dtype), r.shape)
        y = gc.nn.conv2d(xt, wt, [1, 1, 1, 1], "SAME")
        dx, dw = gc.gradients(gc.reduce_sum(y * rt), [xt, wt])
        with gc.Session(graph=g, config=gc.ConfigProto(backend=backend)) as sess:
            got = sess.run([y, dx, dw], {xt: x, wt: w, rt: r})
    return got, numpy_conv_step(x, w, r, 1)


def check(got, want, dtype):
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, **TOL[dtype])


def counts():
    return dict(library_cache.stats)


def delta(before):
    return {k: library_cache.stats[k] - v for k, v in before.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_second_graph_finds_the_library_on_disk(cache_dir, dtype):
    """A different conv graph (another batch: the same conv functions, specialized on the
    same image sizes) compiles no library function: they come from the disk (the
    process's copies dropped first)."""
    before = counts()
    got, want = conv_step((2, 8, 8, 16), 16, dtype)
    check(got, want, dtype)
    assert delta(before)["compiled"] > 0
    assert os.listdir(cache_dir / "library")
    library_cache.forget_memory()
    before = counts()
    got, want = conv_step((3, 8, 8, 16), 16, dtype, seed=1)
    check(got, want, dtype)
    assert delta(before)["compiled"] == 0 and delta(before)["disk_hits"] > 0


def test_second_graph_in_a_process_uses_its_memory_with_the_cache_off(monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    library_cache.forget_memory()
    assert library_cache.cache_dir() is None
    before = counts()
    check(*conv_step((1, 5, 7, 16), 16, np.float32), np.float32)
    assert delta(before)["compiled"] > 0 and delta(before)["disk_hits"] == 0
    before = counts()
    check(*conv_step((2, 5, 7, 16), 16, np.float32, seed=2), np.float32)
    assert delta(before) == {"compiled": 0, "memory_hits": delta(before)["memory_hits"],
                             "disk_hits": 0}
    assert delta(before)["memory_hits"] > 0


DAMAGES = ["flip", "truncate", "empty"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_corrupt_entry_is_rejected_and_rebuilt(cache_dir, damage):
    # graphs of their own (batch sizes no other test compiles): a module this process
    # compiled before comes from its memory, without asking the library cache
    batch = 4 + 2 * DAMAGES.index(damage)
    check(*conv_step((batch, 5, 8, 16), 16, np.float32), np.float32)
    entries = sorted((cache_dir / "library").iterdir())
    good = {p.name: p.read_bytes() for p in entries}
    for p in entries:
        blob = p.read_bytes()
        if damage == "flip":
            blob = blob[:-20] + bytes([blob[-20] ^ 0xFF]) + blob[-19:]
        elif damage == "truncate":
            blob = blob[:len(blob) // 2]
        else:
            blob = b""
        p.write_bytes(blob)
    library_cache.forget_memory()
    rejected = library_cache.disk_stats["rejected"]
    before = counts()
    check(*conv_step((batch + 1, 5, 8, 16), 16, np.float32, seed=3), np.float32)
    assert library_cache.disk_stats["rejected"] - rejected == len(entries)
    assert delta(before)["compiled"] == len(entries) and delta(before)["disk_hits"] == 0
    rebuilt = {p.name: p.read_bytes() for p in (cache_dir / "library").iterdir()}
    assert rebuilt == good


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,co", [((2, 8, 8, 16), 16), ((1, 5, 3, 16), 32),
                                      ((0, 4, 4, 16), 16), ((2, 4, 4, 3), 5)])
def test_conv_values_match_numpy(backend, dtype, shape, co):
    """Direct convs (16 input channels, whole vectors of output channels), an empty batch
    and a gemm conv (3 -> 5 channels) against NumPy."""
    check(*conv_step(shape, co, dtype, backend), dtype)


def test_module_keeps_library_groups_whole_and_calls_them_directly():
    """separate() takes out each closed group (a conv function with its tiles) and leaves
    the graph's functions calling them by name (one engine links the objects); a wanted
    function that reads a global stays."""
    text = textwrap.dedent("""\
        @g = global double 3.0
        declare double @llvm.fabs.f64(double)
        define internal void @graphc_conv_a(ptr %p) {
          call void @graphc_conv_a.tile1(ptr %p)
          ret void
        }
        define internal void @graphc_conv_a.tile1(ptr %p) {
          %x = load double, ptr %p
          %y = call double @llvm.fabs.f64(double %x)
          store double %y, ptr %p
          ret void
        }
        define internal void @graphc_conv_reads_global(ptr %p) {
          %v = load double, ptr @g
          %x = load double, ptr %p
          %y = fadd double %x, %v
          store double %y, ptr %p
          ret void
        }
        define void @kernel(ptr %p) {
          call void @graphc_conv_a(ptr %p)
          call void @graphc_conv_reads_global(ptr %p)
          ret void
        }
        """)
    rest, groups = library_cache.separate(text)
    assert module_split.defined_functions(rest) == ["graphc_conv_reads_global", "kernel"]
    assert "declare void @graphc_conv_a(ptr %p)" in rest
    assert [module_split.defined_functions(g) for g in groups] == \
        [["graphc_conv_a", "graphc_conv_a.tile1"]]
    # the entry point is called across objects; its tile, only within the group
    assert "define void @graphc_conv_a(ptr %p)" in groups[0]
    assert "define internal void @graphc_conv_a.tile1(ptr %p)" in groups[0]
    assert groups[0].startswith("declare double @llvm.fabs")
    compiled = jit.CompiledModule(text)
    cell = (ctypes.c_double * 1)(-2.5)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address("kernel"))(
        ctypes.addressof(cell))
    assert compiled.parts == 2 and cell[0] == 5.5  # |-2.5| + 3


def test_other_image_sizes_compile_their_own_specialization(cache_dir):
    before = counts()
    check(*conv_step((1, 6, 8, 16), 16, np.float32), np.float32)
    first = delta(before)["compiled"]
    before = counts()
    check(*conv_step((1, 9, 8, 16), 16, np.float32, seed=5), np.float32)
    assert first > 0 and delta(before)["compiled"] > 0


def test_entry_points_take_the_constants_every_call_passes():
    group = textwrap.dedent("""\
        define void @f(ptr %p, i64 %n, i64 %m) {
          %a = add i64 %n, %m
          %nn = mul i64 %n, %n
          store i64 %a, ptr %p
          ret void
        }
        """)
    same = "call void @f(ptr %a, i64 7, i64 1)\ncall void @f(ptr %b, i64 7, i64 2)\n"
    sites = library_cache.CallSites
    got = library_cache.specialize(group, sites("declare void @f(ptr %p, i64 %n, i64 %m)\n"
                                                + same))
    assert "%a = add i64 7, %m" in got and "%nn = mul i64 7, 7" in got
    assert got.startswith("define void @f(ptr %p, i64 %n, i64 %m) {")
    differ = "call void @f(ptr %a, i64 7, i64 1)\ncall void @f(ptr %b, i64 8, i64 2)\n"
    assert library_cache.specialize(group, sites(differ)) == group
    # a use of its address besides the calls: left generic
    assert library_cache.specialize(group, sites(same + "store ptr @f, ptr %q\n")) == group


def test_an_entry_point_the_group_calls_too_keeps_the_sizes_its_calls_differ_in():
    """f is called by the graph with n = 7 and by g, in f's own group, with n = 5: its
    code must serve both, so only m (1 at every call) becomes a constant."""
    group = textwrap.dedent("""\
        define void @f(ptr %p, i64 %n, i64 %m) {
          %a = add i64 %n, %m
          store i64 %a, ptr %p
          ret void
        }
        define void @g(ptr %p) {
          call void @f(ptr %p, i64 5, i64 1)
          ret void
        }
        """)
    rest = ("declare void @f(ptr %p, i64 %n, i64 %m)\ndeclare void @g(ptr %p)\n"
            "call void @f(ptr %a, i64 7, i64 1)\ncall void @g(ptr %b)\n")
    got = library_cache.specialize(group, library_cache.CallSites(rest))
    assert "%a = add i64 %n, 1" in got
    # its address taken inside the group: left generic
    taken = group + "define void @h(ptr %q) {\n  store ptr @f, ptr %q\n  ret void\n}\n"
    assert "%a = add i64 %n, %m" in library_cache.specialize(
        taken, library_cache.CallSites(rest))


def test_exported_conv_file_runs_in_the_runtime_alone(tmp_path):
    """A file of a conv graph verifies and runs where graphc cannot be imported, its
    library functions compiled into, then read from, the library cache."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 6, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    g = gc.Graph()
    with g.as_default():
        xt = gc.placeholder(gc.float32, x.shape, name="x")
        y = gc.nn.conv2d(xt, gc.constant(w), [1, 1, 1, 1], "SAME", name="y")
        sess = gc.Session(graph=g)
        path = str(tmp_path / "conv.gcx")
        export(sess, path, inputs={"x": xt}, outputs={"y": y})
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "expected.npy", numpy_conv_step(x, w, np.zeros((2, 6, 6, 16),
                                                                       np.float32), 1)[0])
    script = f"""
        import numpy as np
        import runtime
        from runtime import library_cache
        m = runtime.load({path!r})
        out = m.run({{"x": np.load({str(tmp_path / 'x.npy')!r})}})["y"]
        np.testing.assert_allclose(out, np.load({str(tmp_path / 'expected.npy')!r}),
                                   rtol=2e-4, atol=2e-4)
        print(library_cache.stats["compiled"], library_cache.stats["disk_hits"])
    """
    runs = []
    for _ in range(2):
        runs.append(run_without_graphc(script, tmp_path,
                                       env={"GRAPHC_CACHE_DIR": str(tmp_path / "cache")}).split())
        for entry in (tmp_path / "cache").iterdir():  # the module's entry: LLVM runs again
            if entry.is_file():
                entry.unlink()
    (compiled, hits), (compiled_again, hits_again) = [map(int, r) for r in runs]
    assert compiled > 0 and hits == 0
    assert compiled_again == 0 and hits_again == compiled
