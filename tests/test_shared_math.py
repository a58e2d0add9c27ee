"""A small kernel's exp, tanh, sigmoid, log, log1p, expm1 and softplus are calls of one
function per op and dtype that the module shares, with vector variants LLVM's loop
vectorizer calls (backends/cpu/math_library.py): each is defined once however many
kernels call it, the vectorized loops call its variants (also when the module is compiled
in parts: runtime/module_split.py), the values are those of NumPy at the edges and bit
for bit those of the inline code, and big kernels keep the inline code."""
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import graphc as gc
from graphc.compiler import lower
from graphc.compiler.backends import cpu as cpu_backend
from graphc.compiler.backends.cpu import math_library
from graphc.compiler.driver import schedule_module
from runtime import jit, module_split


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                        np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


# op -> (graphc function, NumPy in float64 or better)
_OPS = {
    "Exp": (gc.exp, np.exp),
    "Sigmoid": (gc.sigmoid, _sigmoid),
    "Tanh": (gc.tanh, np.tanh),
    "Log": (gc.log, np.log),
    "Log1p": (gc.log1p, np.log1p),
    "Expm1": (gc.expm1, np.expm1),
    "Softplus": (gc.nn.softplus, lambda x: np.logaddexp(0, x)),
}
_EDGES = {
    np.float32: [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -3e-39, 1e-8,
                 -1e-8, 0.5, -0.5, -1.0, 20.0, -20.0, 88.5, 89.0, -87.0, -103.0, -104.5,
                 1e30, -1e30, 3.4e38, -3.4e38],
    np.float64: [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, -2e-308,
                 1e-17, -1e-17, 0.5, -0.5, -1.0, 20.0, -20.0, 709.0, 710.0, -700.0, -745.0,
                 -746.0, 1e300, -1e300, 1.7e308, -1.7e308],
}


def _inputs(np_dtype, size):
    """The edge values first, then spread values: a size past the vector width runs the
    vectorized loop (the variants) and its scalar remainder (the scalar function)."""
    rng = np.random.default_rng(size)
    spread = rng.standard_normal(size) * rng.choice([1e-3, 1.0, 10.0, 100.0], size)
    values = np.concatenate([np.array(_EDGES[np_dtype]), spread])[:size]
    return values.astype(np_dtype)


def _run(op, np_dtype, xv):
    fn, _ = _OPS[op]
    with gc.Graph().as_default():
        x = gc.placeholder(gc.as_dtype(np_dtype), [len(xv)])
        with gc.Session() as sess:
            return sess.run(fn(x), {x: xv})


def _assert_close(got, want, np_dtype):
    ulp = np.finfo(np_dtype).eps
    with np.errstate(over="ignore"):
        want = want.astype(np_dtype)
    assert got.dtype == np_dtype
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    tiny = np.finfo(np_dtype).tiny  # results in the subnormals: an absolute bound
    np.testing.assert_allclose(got[finite], want[finite], rtol=4 * ulp, atol=4 * tiny * ulp)


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
@pytest.mark.parametrize("size", [0, 1, 25, 1000])
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(_OPS))
def test_values_match_numpy_at_the_edges(backend, op, np_dtype, size):
    xv = _inputs(np_dtype, size)
    with np.errstate(all="ignore"):
        want = _OPS[op][1](xv.astype(np.float64 if np_dtype == np.float32 else np.longdouble))
    _assert_close(_run(op, np_dtype, xv), want, np_dtype)


@pytest.mark.parametrize("size", [25, 1000])
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(_OPS))
def test_calls_give_the_inline_codes_bits(monkeypatch, op, np_dtype, size):
    xv = _inputs(np_dtype, size)
    shared = _run(op, np_dtype, xv)
    monkeypatch.setattr(math_library, "SHARED_OPS", {})
    inline = _run(op, np_dtype, xv)
    bits = np.int32 if np_dtype == np.float32 else np.int64
    assert np.array_equal(shared.view(bits), inline.view(bits))


def _llvm_ir(build, shapes):
    """The CPU module's LLVM IR of build() -> (feeds, fetches) at the feeds' shapes."""
    with gc.Graph().as_default():
        feeds, fetches = build()
        module = lower(feeds, fetches, [], shapes)
        schedule_module(module)
        return jit.link_parallel_runtime(cpu_backend.generate(module)["llvm_ir"])


def _gates(count, width=64, batch=32):
    """`count` gates sigmoid(x) * tanh(x) of inputs of their own widths (multiples of 64
    floats: vector loops with no scalar remainder): `count` loop kernels that no other
    kernel's code serves (kernel_reuse)."""
    shapes = [(batch, width * (k + 1)) for k in range(count)]

    def build():
        xs = [gc.placeholder(gc.float32, list(shape)) for shape in shapes]
        return xs, [gc.sigmoid(x) * gc.tanh(x) for x in xs]
    return build, shapes


def _optimized(text):
    jit.initialize()
    tm = jit.target_machine()
    module = jit._parse(text)
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    jit._optimize(module, tm)
    return str(module)


_DEFINE = r'^define [^\n]*@"?{name}"?\('
_SCALAR_CALL = re.compile(r'call float @"?graphc\.math\.(sigmoid|tanh)\.float32"?\(')
_VECTOR_CALL = re.compile(r'call <\d+ x float> @"?graphc\.math\.(sigmoid|tanh)\.float32\.v\d+')


def test_each_function_is_defined_once_and_vectorized_loops_call_its_variants():
    text = _llvm_ir(*_gates(4))
    for name in ("graphc.math.sigmoid.float32", "graphc.math.tanh.float32"):
        assert len(re.findall(_DEFINE.format(name=re.escape(name)), text, re.M)) == 1
    bodies = _kernel_bodies(text)
    assert sum("graphc.math.sigmoid" in b for b in bodies.values()) == 4
    assert not any("0x3ff7154760000000" in b for b in bodies.values())  # exp's log2(e)
    optimized = _optimized(text)
    assert _VECTOR_CALL.search(optimized)
    assert not _SCALAR_CALL.search(optimized)


def test_a_module_in_parts_declares_the_variants_where_it_calls_the_function():
    text = _llvm_ir(*_gates(6))
    parts = module_split.split(text, [0, 0])
    assert parts is not None and len(parts) == 2
    defined = [n for p in parts for n in module_split.defined_functions(p)]
    assert sorted(defined) == sorted(module_split.defined_functions(text))
    calling = [p for p in parts if re.search(r'call float @"graphc\.math\.sigmoid', p)]
    assert calling
    for part in calling:
        for lanes in math_library.LANES["float32"]:
            assert f'@"graphc.math.sigmoid.float32.v{lanes}"(' in part
        llvm.parse_assembly(part).verify()
        optimized = _optimized(part)
        assert _VECTOR_CALL.search(optimized) and not _SCALAR_CALL.search(optimized)


def _kernel_bodies(text):
    return {m.group(1): text[m.end():text.find("\n}\n", m.end())]
            for m in re.finditer(r'^define i32 @"(kernel_\d+_\w+)"', text, re.M)}


@pytest.mark.parametrize("dims,shared", [
    ((256, 256), True),            # 65536 elements: the most a kernel shares
    ((257, 256), False),
    ((None, 8), False),            # known at run time only
])
def test_only_kernels_of_bounded_static_size_call_the_shared_functions(dims, shared):
    def build():
        x = gc.placeholder(gc.float32, list(dims))
        return [x], [gc.tanh(x) + 1.0]
    text = _llvm_ir(build, [tuple(d or 3 for d in dims)])
    (body,) = [b for b in _kernel_bodies(text).values() if "fadd" in b]
    assert ('@"graphc.math.tanh.float32"' in body) == shared
    assert ("0xc032800000000000" in body) != shared  # tanh's inline clamp (-18.5)


def test_a_softmax_counts_its_exp_of_each_input_element():
    def build(rows):
        def graph():
            x = gc.placeholder(gc.float32, [rows, 1024])
            return [x], [gc.nn.softmax(x)]
        return graph
    small = _llvm_ir(build(64), [(64, 1024)])
    big = _llvm_ir(build(65), [(65, 1024)])  # one Softmax node: 66560 exps a run
    assert "graphc.math.exp.float32.nonpositive_True" in small
    assert "graphc.math.exp" not in big


def test_a_gemm_epilogue_keeps_the_inline_code():
    def build():
        x = gc.placeholder(gc.float32, [8, 16])
        w = gc.constant(np.full((16, 32), 0.1, np.float32))
        return [x], [gc.sigmoid(gc.matmul(x, w))]
    text = _llvm_ir(build, [(8, 16)])
    assert "graphc.math" not in text
    assert "0x3ff7154760000000" in text  # exp's log2(e), inline in the epilogue


def _lstm_gates(count, batch=32):
    """`count` LSTM cell updates (BasicLSTMCell's split, bias, sigmoid, tanh) of their own
    widths: `count` loop kernels that call the shared sigmoid and tanh, more callers than
    module_split.SHARED_MAX (the functions then do not tie them into one part)."""
    widths = [64 * (k + 1) for k in range(count)]
    shapes = [(batch, 4 * w) for w in widths] + [(batch, w) for w in widths]

    def build():
        gates = [gc.placeholder(gc.float32, [batch, 4 * w]) for w in widths]
        cells = [gc.placeholder(gc.float32, [batch, w]) for w in widths]
        outs = []
        for g, c, w in zip(gates, cells, widths):
            i, j, f, o = gc.split(gc.nn.bias_add(g, gc.constant(np.ones(4 * w, np.float32))),
                                  4, axis=1)
            new_c = c * gc.sigmoid(f + 1.0) + gc.sigmoid(i) * gc.tanh(j)
            outs.append(gc.tanh(new_c) * gc.sigmoid(o))
        return gates + cells, outs
    return build, shapes


def test_a_module_in_parts_keeps_the_math_functions_with_their_callers():
    # in a part of their own (called by more than module_split.SHARED_MAX kernels), the
    # callers' part called them once per element: an LSTM's gate loops ran about 6x
    # slower than the module compiled whole, also with the variants declared there
    text = _llvm_ir(*_lstm_gates(6))
    assert _VECTOR_CALL.search(_optimized(text))
    parts = module_split.split(text, [0, 0]) or [text]
    calling = [p for p in parts if re.search(r'call float @"graphc\.math\.(sigmoid|tanh)', p)]
    assert calling
    for part in calling:
        for fn in ("sigmoid", "tanh"):
            if re.search(rf'call float @"graphc\.math\.{fn}\.float32"', part):
                assert re.search(rf'^define [^\n]*@"graphc\.math\.{fn}\.float32"\(', part,
                                 re.M), f"a part calls {fn} and does not define it"
        llvm.parse_assembly(part).verify()
        optimized = _optimized(part)
        assert _VECTOR_CALL.search(optimized) and not _SCALAR_CALL.search(optimized)
