"""A big module compiled in parts at once (runtime/module_split.py, runtime/jit.py):
each function defined once across the parts, the parts linked into one engine that
computes what the whole module's code computes, cached and exported as before."""
import collections
import ctypes
import re
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.export import export
from runtime import compile_cache, jit, module_split

_GLOBAL_DEFINITION = re.compile(r'^@("[^"]+"|[-\w$.]+) = (?![^\n]*\bexternal\b)', re.M)


def _mlp_ir(depth):
    """The linked LLVM IR of an MLP training step of `depth` distinct layers (each its
    own width, so that no two layers share a kernel's code)."""
    from graphc.compiler import lower
    from graphc.compiler.backends.cpu import generate
    from graphc.compiler.driver import schedule_module
    rng = np.random.default_rng(0)
    widths = [5 + k for k in range(depth + 1)]
    with gc.Graph().as_default():
        x = gc.placeholder(gc.float32, [None, widths[0]])
        h = x
        for k in range(depth):
            w = gc.Variable(rng.standard_normal(widths[k:k + 2]).astype(np.float32))
            h = gc.tanh(gc.matmul(h, w))
        loss = gc.reduce_mean(h * h)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        module = lower([x], [loss], [train], [(3, widths[0])])
        schedule_module(module)
        return jit.link_parallel_runtime(generate(module)["llvm_ir"])


def _global_definitions(text):
    return [m.group(1).strip('"') for m in _GLOBAL_DEFINITION.finditer(text)]


@pytest.mark.parametrize("count", [2, 3])
def test_a_big_module_is_cut_into_parts_that_define_each_function_once(count):
    whole = _mlp_ir(6)
    parts = module_split.split(whole, [0] * count)
    assert parts is not None and len(parts) == count
    defined = collections.Counter(n for p in parts for n in module_split.defined_functions(p))
    assert sorted(defined) == sorted(module_split.defined_functions(whole))
    assert set(defined.values()) == {1}
    # every global variable defined once (in part 0), declared where it is used
    assert sorted(_global_definitions(parts[0])) == sorted(_global_definitions(whole))
    assert all(not _global_definitions(p) for p in parts[1:])
    jit.initialize()
    for part in parts:
        llvm.parse_assembly(part).verify()
    # the entry (optnone: nothing inlined into it) does not pull its kernels along
    entry = [p for p in parts if "graphc_main" in module_split.defined_functions(p)]
    assert len(entry) == 1
    # a kernel's thread-team task stays beside the kernel that starts it
    for part in parts:
        for name in module_split.defined_functions(part):
            if name.endswith(".task"):
                kernel = name.split(".")[0]
                assert kernel in module_split.defined_functions(part), name


def test_small_modules_stay_whole():
    whole = _mlp_ir(2)
    assert module_split.split(whole, [0, 0], jit.SPLIT_MIN_WEIGHT) is None
    assert module_split.split(whole, [0]) is None  # one part asked for


def test_what_the_splitter_does_not_read_stays_whole():
    # an alias would have to follow its function into a part
    ir = textwrap.dedent("""
        define i64 @f(i64 %x) {
          ret i64 %x
        }
        define i64 @g(i64 %x) {
          ret i64 %x
        }
        @h = alias i64 (i64), ptr @f
    """)
    assert module_split.split(ir, [0, 0]) is None
    assert module_split.split(ir.replace("@h = alias i64 (i64), ptr @f", ""),
                              [0, 0]) is not None


def _two_function_ir(second_body="%y = add i64 %x, 2"):
    # two independent functions, the first the larger one (a part is dealt the largest
    # first: part 0, compiled in this process, gets it)
    return textwrap.dedent(f"""
        @counter = internal global i64 0, align 8
        define i64 @first(i64 %x) {{
          %a = add i64 %x, 1
          %b = mul i64 %a, 3
          %c = sub i64 %b, 1
          store i64 %c, ptr @counter
          ret i64 %c
        }}
        define i64 @second(i64 %x) {{
          {second_body}
          %z = load i64, ptr @counter
          %w = add i64 %y, %z
          ret i64 %w
        }}
    """)


@pytest.fixture
def split_everything(monkeypatch):
    """Every module of at least two groups of functions is compiled in two parts."""
    monkeypatch.setattr(jit, "SPLIT_MIN_WEIGHT", 0)
    monkeypatch.setattr(jit, "WORKER_START_WEIGHT", 0)
    monkeypatch.setenv("GRAPHC_COMPILE_PARTS", "2")
    monkeypatch.setenv("GRAPHC_COMPILE_WORKER", "1")
    monkeypatch.setattr(compile_cache, "memory_load", lambda key: None)
    linked = []
    engine_of_objects = jit._engine_of_objects

    def counted(objects, tm):
        linked.append(len(objects))
        return engine_of_objects(objects, tm)
    monkeypatch.setattr(jit, "_engine_of_objects", counted)
    return linked


def _call(compiled, name, x):
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.address(name))(x)


def test_parts_link_into_one_engine_and_share_globals(split_everything, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    compiled = jit.CompiledModule(_two_function_ir())
    assert compiled.parts == 2 and split_everything == [2]
    assert _call(compiled, "first", 4) == 14
    assert _call(compiled, "second", 1) == 3 + 14  # reads the global `first` stored
    assert compiled.global_address("counter") is not None


def test_a_failing_part_reports_the_error_of_the_whole_module(split_everything,
                                                              monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    replies = []
    worker_compile = jit._CompileWorker.compile

    def spied(self, *args):
        replies.append(worker_compile(self, *args))
        return replies[-1]
    monkeypatch.setattr(jit._CompileWorker, "compile", spied)
    bad = _two_function_ir("%y = add i32 %x, 2")  # %x is an i64
    with pytest.raises(RuntimeError, match="'%x' defined with type 'i64'"):
        jit.CompiledModule(bad)
    # a worker compiled the bad part and said it failed (in a process past its in-process
    # compiles, the workers compile the good part and the whole module again too)
    assert None in replies and all(r is None or r.startswith(b"\x7fELF") for r in replies)


def test_a_dead_worker_costs_a_compile_in_process(split_everything, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")

    def dies(self, *args):
        raise OSError("the compile worker exited")
    monkeypatch.setattr(jit._CompileWorker, "compile", dies)
    compiled = jit.CompiledModule(_two_function_ir("%y = add i64 %x, 5"))
    assert compiled.parts == 1 and split_everything == []
    assert _call(compiled, "second", 1) == 6


def test_a_split_module_is_one_cache_entry(split_everything, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    ir = _two_function_ir("%y = add i64 %x, 7")
    first = jit.CompiledModule(ir)
    assert first.parts == 2 and not first.cache_hit
    entries = compile_cache.ObjectCache(str(tmp_path)).entries()
    assert len(entries) == 1
    again = jit.CompiledModule(ir)
    assert again.cache_hit and again.parts == 2 and split_everything == [2, 2]
    assert _call(again, "first", 0) == 2 and _call(again, "second", 0) == 9


def test_object_bundles_round_trip():
    objects = [b"\x7fELF one", b"", b"\x7fELF three"]
    packed = compile_cache.pack_objects(objects)
    assert packed.startswith(compile_cache.BUNDLE_MAGIC)
    assert compile_cache.unpack_objects(packed) == objects
    assert compile_cache.unpack_objects(b"\x7fELF alone") == [b"\x7fELF alone"]
    with pytest.raises(ValueError, match="do not add up"):
        compile_cache.unpack_objects(packed[:-1])


def _numpy_mlp_step(xv, ws):
    """Loss and the weights after one step of gradient descent (learning rate 0.1) on
    mean(tanh(...tanh(x w0)... w_{n-1})^2)."""
    hs = [xv]
    for w in ws:
        hs.append(np.tanh(hs[-1] @ w))
    loss = np.mean(hs[-1] ** 2)
    d = 2 * hs[-1] / hs[-1].size
    new = [None] * len(ws)
    for k in reversed(range(len(ws))):
        d = d * (1 - hs[k + 1] ** 2)
        new[k] = ws[k] - 0.1 * (hs[k].T @ d)
        d = d @ ws[k].T
    return loss, new


def _run_mlp(dtype, xv, ws):
    with gc.Graph().as_default():
        x = gc.placeholder(dtype, [None, xv.shape[1]])
        wv = [gc.Variable(w) for w in ws]
        h = x
        for w in wv:
            h = gc.tanh(gc.matmul(h, w))
        loss = gc.reduce_mean(h * h)
        train = gc.train.GradientDescentOptimizer(0.1).minimize(loss)
        sess = gc.Session()
        sess.run(gc.global_variables_initializer())
        got = sess.run(loss, {x: xv})
        sess.run(train, {x: xv})
        return got, sess.run(wv)


@pytest.mark.backends("compiled", "gpu_emulated")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_build_computes_what_the_whole_build_computes(backend, dtype, monkeypatch):
    rng = np.random.default_rng(3)
    widths = [7, 9, 1, 6, 5]  # a layer one wide among them
    ws = [rng.standard_normal(widths[k:k + 2]).astype(dtype) for k in range(4)]
    xv = rng.standard_normal((4, 7)).astype(dtype)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    monkeypatch.setenv("GRAPHC_COMPILE_PARTS", "1")
    whole = _run_mlp(dtype, xv, ws)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jit, "SPLIT_MIN_WEIGHT", 0)
        mp.setattr(jit, "WORKER_START_WEIGHT", 0)
        mp.setenv("GRAPHC_COMPILE_PARTS", "2")
        mp.setattr(compile_cache, "memory_load", lambda key: None)
        linked = []
        engine_of_objects = jit._engine_of_objects
        mp.setattr(jit, "_engine_of_objects",
                   lambda objects, tm: linked.append(len(objects)) or
                   engine_of_objects(objects, tm))
        split = _run_mlp(dtype, xv, ws)
    assert linked and set(linked) == {2}
    np.testing.assert_array_equal(split[0], whole[0])
    for a, b in zip(split[1], whole[1]):
        np.testing.assert_array_equal(a, b)
    want_loss, want_ws = _numpy_mlp_step(xv.astype(np.float64),
                                         [w.astype(np.float64) for w in ws])
    rtol = 1e-4 if dtype == np.float32 else 1e-8
    np.testing.assert_allclose(split[0], want_loss, rtol=rtol)
    for a, b in zip(split[1], want_ws):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


def test_export_and_load_of_a_split_module(split_everything, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((6, 8), (8, 3))]
    xv = rng.standard_normal((5, 6)).astype(np.float32)
    with gc.Graph().as_default():
        x = gc.placeholder(gc.float32, [None, 6], name="x")
        h = x
        for w in ws:
            h = gc.tanh(gc.matmul(h, gc.Variable(w)))
        probs = gc.nn.softmax(h, name="probs")
        sess = gc.Session()
        sess.run(gc.global_variables_initializer())
        expected = sess.run(probs, {x: xv})
        path = str(tmp_path / "split.gcx")
        export(sess, path, inputs={"x": x}, outputs={"probs": probs})
    linked_by_session = len(split_everything)
    out = runtime.load(path).run({"x": xv})["probs"]
    assert len(split_everything) > linked_by_session  # the loaded file's code was split
    np.testing.assert_array_equal(out, expected)
    h = xv.astype(np.float64)
    for w in ws:
        h = np.tanh(h @ w)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


# ------------------------------------------------------------------ entry segments
def _chain(x, idx):
    """Kernels in a row (a reduction, a gather whose index is checked at run time, a
    reduction after it): with SEGMENT_CALLS = 1 each runs in a segment of its own."""
    h = gc.tanh(x) * 2.0
    h = gc.reduce_sum(h, axis=1) + 1.0
    h = gc.exp(h * 0.1)
    picked = gc.gather(h, idx)
    return gc.reduce_sum(gc.sqrt(picked * picked + 1.0)) * 3.0


def _numpy_chain(xv, iv):
    h = (np.tanh(xv.astype(np.float64)) * 2.0).sum(axis=1) + 1.0
    picked = np.exp(h * 0.1)[iv]
    return np.sqrt(picked * picked + 1.0).sum() * 3.0


def _run_chain(dtype, xv, iv):
    with gc.Graph().as_default():
        x = gc.placeholder(dtype, [None, 3])
        idx = gc.placeholder(gc.int32, [None])
        out = _chain(x, idx)
        sess = gc.Session()
        value = sess.run(out, {x: xv, idx: iv})
        try:
            sess.run(out, {x: xv, idx: np.array([0, len(xv)], np.int32)})
        except Exception as e:  # noqa: BLE001 -- compared below, with and without segments
            error = (type(e), str(e))
        else:
            error = None
        return value, error


@pytest.mark.backends("compiled", "gpu_emulated")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_long_entry_runs_its_calls_through_segments(backend, dtype, monkeypatch):
    from graphc.compiler.backends.cpu import entry
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    xv = np.linspace(-2, 2, 15).reshape(5, 3).astype(dtype)
    iv = np.array([4, 0, 2, 2], np.int32)
    calls = []
    emit_calls = entry._emit_calls
    monkeypatch.setattr(entry, "_emit_calls", lambda program, fn, c, *a, **k:
                        calls.append((fn.name, len(c))) or emit_calls(program, fn, c, *a, **k))
    monkeypatch.setattr(entry, "SEGMENT_CALLS", 10**6)
    whole = _run_chain(dtype, xv, iv)
    monkeypatch.setattr(entry, "SEGMENT_CALLS", 1)
    del calls[:]
    segmented = _run_chain(dtype, xv, iv)
    if backend == "compiled":
        segments = [count for name, count in calls if ".segment" in name]
        assert len(segments) >= 2 and set(segments) == {1}
    np.testing.assert_array_equal(segmented[0], whole[0])
    assert segmented[1] == whole[1] and whole[1] is not None  # the same error, raised
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(segmented[0], _numpy_chain(xv, iv), rtol=rtol)


def test_the_dump_follows_an_entry_through_its_segments():
    from graphc.dump import model
    functions = {"graphc_main": 'call i32 @"graphc_main.segment0"(ptr %a)\n'
                                'call i32 @"graphc_main.segment1"(ptr %a)',
                 "graphc_main.segment0": 'call i32 @"kernel_0_loop_0"(ptr %a)\n'
                                         'call i32 @"kernel_1_loop_1"(ptr %a)',
                 "graphc_main.segment1": 'call i32 @"kernel_0_loop_0"(ptr %a)'}
    code = model._entry_code(functions, "graphc_main")
    assert model._kernel_calls(code, 3) == ["kernel_0_loop_0", "kernel_1_loop_1",
                                            "kernel_0_loop_0"]


def test_a_long_entry_is_cut_from_the_kernels():
    whole = _mlp_ir(6)
    optnone = [n for n in module_split.defined_functions(whole)
               if re.search(r'^define [^\n]*@"?%s"?\([^\n]*optnone' % re.escape(n), whole,
                            re.M)]
    assert "graphc_main" in optnone
    rest, entry = module_split.cut_optnone(whole, 0)
    assert module_split.defined_functions(entry) == optnone
    assert sorted(module_split.defined_functions(rest) + optnone) == \
        sorted(module_split.defined_functions(whole))
    assert sorted(_global_definitions(rest)) == sorted(_global_definitions(whole))
    assert not _global_definitions(entry)
    jit.initialize()
    for part in (rest, entry):
        llvm.parse_assembly(part).verify()
    entry_bytes = sum(len(m.group(0)) for m in re.finditer(
        r'^define [^\n]*optnone[^\n]*\n\{\n.*?\n\}\n', whole, re.M | re.S))
    assert module_split.cut_optnone(whole, entry_bytes + 1) is None  # short: stays
    assert module_split.cut_optnone(_two_function_ir(), 0) is None  # no entry at all


@pytest.mark.parametrize("parts, worker_due", [("1", False), ("2", False), ("1", True)])
def test_a_long_entry_is_emitted_at_o0_beside_the_kernels(parts, worker_due, monkeypatch):
    """The entry's part alone is emitted at LLVM's code generation level 0, with no
    optimization pipeline, by this process (also past its in-process optimizations: a
    worker then optimizes the kernels); one engine links the parts."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    monkeypatch.setattr(jit, "_worker_due", lambda: worker_due)
    monkeypatch.setenv("GRAPHC_COMPILE_PARTS", parts)
    monkeypatch.setattr(jit, "SPLIT_MIN_WEIGHT", 0)
    monkeypatch.setattr(jit, "WORKER_START_WEIGHT", 0)
    monkeypatch.setattr(jit, "ENTRY_PART_BYTES", 0)
    monkeypatch.setattr(compile_cache, "memory_load", lambda key: None)
    levels, optimized = [], []
    target_machine, optimize = jit.target_machine, jit._optimize

    def machine(target=None, for_jit=True, opt=3):
        levels.append(opt)
        return target_machine(target, for_jit, opt)

    def spied(module, tm, speed_level=3):
        optimized.append([f.name for f in module.functions if not f.is_declaration])
        return optimize(module, tm, speed_level)
    monkeypatch.setattr(jit, "target_machine", machine)
    monkeypatch.setattr(jit, "_optimize", spied)
    compiled = jit.CompiledModule(_two_function_ir("%y = add i64 %x, 7")
                                  + _ENTRY_IR)
    kernels = 1 if parts == "1" else 2  # the second part's, if any, in a worker
    assert compiled.parts == kernels + 1
    assert levels.count(0) == 1
    assert all("entry" not in names for names in optimized)
    assert (optimized == []) == worker_due  # the kernels' part went to a worker
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.address("entry"))
    first = (1 + 1) * 3 - 1
    assert entry(1) == first + (1 + 7 + first)  # second reads what first stored


_ENTRY_IR = """
define i64 @entry(i64 %x) noinline optnone {
  %a = call i64 @first(i64 %x)
  %b = call i64 @second(i64 %x)
  %c = add i64 %a, %b
  ret i64 %c
}
"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_entry_emitted_apart_computes_what_the_whole_module_computes(dtype, monkeypatch):
    """Values and the error a bad index raises (the entry's failure exit) are the same
    with the entry emitted at O0 in a part of its own."""
    from graphc.compiler.backends.cpu import entry
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    monkeypatch.setenv("GRAPHC_COMPILE_PARTS", "1")
    monkeypatch.setattr(compile_cache, "memory_load", lambda key: None)
    monkeypatch.setattr(entry, "SEGMENT_CALLS", 1)  # segments: optnone functions too
    xv = np.linspace(-2, 2, 15).reshape(5, 3).astype(dtype)
    iv = np.array([4, 0, 2, 2], np.int32)
    monkeypatch.setattr(jit, "ENTRY_PART_BYTES", 1 << 40)
    whole = _run_chain(dtype, xv, iv)
    cuts = []
    cut_optnone = module_split.cut_optnone
    monkeypatch.setattr(module_split, "cut_optnone", lambda text, min_bytes: cuts.append(
        cut_optnone(text, min_bytes)) or cuts[-1])
    monkeypatch.setattr(jit, "ENTRY_PART_BYTES", 0)
    apart = _run_chain(dtype, xv, iv)
    assert cuts and all(c is not None for c in cuts)
    assert any("graphc_main.segment1" in module_split.defined_functions(c[1]) for c in cuts)
    np.testing.assert_array_equal(apart[0], whole[0])
    assert apart[1] == whole[1] and whole[1] is not None
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(apart[0], _numpy_chain(xv, iv), rtol=rtol)


def test_a_whole_module_is_verified_once(monkeypatch):
    """Verified before O3, then emitted by the target machine: MCJIT's code generator
    verified the optimized module twice more (about 1.3% of a module's LLVM time)."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    monkeypatch.setattr(compile_cache, "memory_load", lambda key: None)
    monkeypatch.setattr(jit, "_worker_due", lambda: False)  # compiled in this process
    jit.initialize()
    llvm.set_time_passes(True)
    try:
        compiled = jit.CompiledModule(_two_function_ir("%y = add i64 %x, 9"))
    finally:
        report = llvm.report_and_reset_timings()
        llvm.set_time_passes(False)
    assert compiled.parts == 1 and not compiled.cache_hit and not compiled.memory_hit
    assert "Instruction Selection" in report  # its code generation was timed
    assert "Module Verifier" not in report
    assert _call(compiled, "second", 1) == 10
    assert "define" in compiled.optimized_ir()
