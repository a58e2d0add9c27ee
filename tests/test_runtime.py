"""runtime.Executable on hand-written LLVM IR specs (no compiler involved)."""
import time

import numpy as np
import pytest

import runtime
from runtime import jit, shapes
from tests.runtime_alone import run_without_graphc

ENTRY_ARGS = "ptr %feeds, ptr %fetches, ptr %vars, ptr %consts, ptr %arena, ptr %syms"


def sym(name, coeff=1):
    """The SymDim.to_json form of coeff * name."""
    return [[coeff, [[name, 1]]]]


def const(value):
    return [[value, []]] if value else []


def make_spec(llvm_ir, feeds=(), fetches=(), variables=(), constants=(), symbols=(),
              guards=(), arena_bytes=0, error_sites=()):
    return {"format_version": 1, "entry": "graphc_main", "llvm_ir": llvm_ir,
            "target": jit.host_target(), "symbols": list(symbols), "guards": list(guards),
            "feeds": list(feeds), "fetches": list(fetches), "variables": list(variables),
            "constants": list(constants), "arena_bytes": arena_bytes,
            "error_sites": list(error_sites)}


# z = x + y over n = x.0 elements
ADD_IR = f"""
define i32 @graphc_main({ENTRY_ARGS}) {{
entry:
  %xp = load ptr, ptr %feeds
  %yq = getelementptr ptr, ptr %feeds, i64 1
  %yp = load ptr, ptr %yq
  %zp = load ptr, ptr %fetches
  %n = load i64, ptr %syms
  br label %check
check:
  %i = phi i64 [0, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %xa = getelementptr float, ptr %xp, i64 %i
  %ya = getelementptr float, ptr %yp, i64 %i
  %za = getelementptr float, ptr %zp, i64 %i
  %xv = load float, ptr %xa
  %yv = load float, ptr %ya
  %zv = fadd float %xv, %yv
  store float %zv, ptr %za
  %i1 = add i64 %i, 1
  br label %check
done:
  ret i32 0
}}
"""


def add_spec(**extra):
    n = sym("x.0")
    return make_spec(
        ADD_IR, symbols=[{"name": "x.0", "feed": 0, "axis": 0}],
        feeds=[{"name": "x:0", "dtype": "float32", "dims": [n]},
               {"name": "y:0", "dtype": "float32", "dims": [n]}],
        fetches=[{"name": "add:0", "dtype": "float32", "dims": [n], "source": "kernel",
                  "index": 0}], **extra)


@pytest.fixture(scope="module")
def add_exe():
    return runtime.Executable(add_spec(guards=[[sym("x.0"), "!=", const(1), True]]))


def test_add_binds_symbol_and_runs(add_exe):
    for n in (2, 7, 1001):
        x = np.arange(n, dtype=np.float32)
        y = np.full(n, 0.5, np.float32)
        (z,) = add_exe.run([x, y], {})
        np.testing.assert_array_equal(z, x + 0.5)
        assert z.dtype == np.float32 and z.shape == (n,)
    assert add_exe.compile_seconds > 0


def test_add_copies_non_contiguous_feeds(add_exe):
    x = np.arange(14, dtype=np.float32)[::2]
    y = np.ones(7, np.float32)
    (z,) = add_exe.run([x, y], {})
    np.testing.assert_array_equal(z, x + 1)


def test_guard_failure(add_exe):
    one = np.ones(1, np.float32)
    with pytest.raises(runtime.GuardFailure, match=r"x\.0 != 1.*x\.0=1") as info:
        add_exe.run([one, one], {})
    assert info.value.guard[1] == "!="


def test_feed_dim_mismatch_is_guard_failure(add_exe):
    with pytest.raises(runtime.GuardFailure, match="feed y:0 has shape"):
        add_exe.run([np.ones(3, np.float32), np.ones(4, np.float32)], {})


@pytest.mark.parametrize("x, y, error, pattern", [
    (np.ones(3, np.float64), np.ones(3, np.float32), runtime.FeedError,
     "feed x:0 must be float32, got float64"),
    (np.ones(3, np.float32), np.ones((3, 1), np.float32), runtime.GuardFailure,
     "feed y:0 has rank 2"),
    (np.ones(3, np.float32), None, runtime.FeedError, "expected 2 feeds"),
])
def test_feed_errors(add_exe, x, y, error, pattern):
    feeds = [x] if y is None else [x, y]
    with pytest.raises(error, match=pattern):
        add_exe.run(feeds, {})


def test_wrapper_and_direct_call_agree():
    direct = runtime.Executable(add_spec(), use_wrapper=False)
    x = np.arange(9, dtype=np.float32)
    (z,) = direct.run([x, x], {})
    np.testing.assert_array_equal(z, 2 * x)


def test_accessors(add_exe):
    assert "graphc_main" in add_exe.optimized_ir()
    assert "graphc_main" in add_exe.asm()


# out = concat(2 * x via an arena temporary, y): exercises fetch dim expressions and the arena
CONCAT_IR = f"""
define i32 @graphc_main({ENTRY_ARGS}) {{
entry:
  %xp = load ptr, ptr %feeds
  %yq = getelementptr ptr, ptr %feeds, i64 1
  %yp = load ptr, ptr %yq
  %op = load ptr, ptr %fetches
  %n = load i64, ptr %syms
  br label %c1
c1:
  %i = phi i64 [0, %entry], [%i1, %b1]
  %m1 = icmp slt i64 %i, %n
  br i1 %m1, label %b1, label %c2pre
b1:
  %xa = getelementptr float, ptr %xp, i64 %i
  %xv = load float, ptr %xa
  %tv = fmul float %xv, 2.0
  %ta = getelementptr float, ptr %arena, i64 %i
  store float %tv, ptr %ta
  %i1 = add i64 %i, 1
  br label %c1
c2pre:
  br label %c2
c2:
  %j = phi i64 [0, %c2pre], [%j1, %b2]
  %m2 = icmp slt i64 %j, %n
  br i1 %m2, label %b2, label %done
b2:
  %ta2 = getelementptr float, ptr %arena, i64 %j
  %tv2 = load float, ptr %ta2
  %oa = getelementptr float, ptr %op, i64 %j
  store float %tv2, ptr %oa
  %ya = getelementptr float, ptr %yp, i64 %j
  %yv = load float, ptr %ya
  %jn = add i64 %j, %n
  %ob = getelementptr float, ptr %op, i64 %jn
  store float %yv, ptr %ob
  %j1 = add i64 %j, 1
  br label %c2
done:
  ret i32 0
}}
"""


def test_arena_reuse_and_fetch_dim_expressions():
    n = sym("x.0")
    spec = make_spec(
        CONCAT_IR, symbols=[{"name": "x.0", "feed": 0, "axis": 0}],
        feeds=[{"name": "x:0", "dtype": "float32", "dims": [n]},
               {"name": "y:0", "dtype": "float32", "dims": [n]}],
        fetches=[{"name": "concat:0", "dtype": "float32", "dims": [sym("x.0", 2)],
                  "source": "kernel", "index": 0}],
        arena_bytes=sym("x.0", 4))
    exe = runtime.Executable(spec)
    sizes_and_arenas = []
    for n in (64, 16, 64, 300, 7):
        x = np.arange(n, dtype=np.float32)
        y = -np.arange(n, dtype=np.float32)
        (out,) = exe.run([x, y], {})
        np.testing.assert_array_equal(out, np.concatenate([2 * x, y]))
        sizes_and_arenas.append((n, exe._arena))
    arenas = [a for _, a in sizes_and_arenas]
    assert arenas[0] is arenas[1] is arenas[2]  # big enough: reused
    assert arenas[3] is not arenas[2] and arenas[3] is arenas[4]  # grown once, then reused
    assert arenas[0].ctypes.data % 64 == 0 and arenas[3].nbytes >= 4 * 300


# v += x (in place); w = x + c (w only written); fetches v, x, c and w
VARIABLE_IR = f"""
define i32 @graphc_main({ENTRY_ARGS}) {{
entry:
  %xp = load ptr, ptr %feeds
  %vp = load ptr, ptr %vars
  %wq = getelementptr ptr, ptr %vars, i64 1
  %wp = load ptr, ptr %wq
  %cp = load ptr, ptr %consts
  br label %check
check:
  %i = phi i64 [0, %entry], [%i1, %body]
  %more = icmp slt i64 %i, 4
  br i1 %more, label %body, label %done
body:
  %xa = getelementptr float, ptr %xp, i64 %i
  %va = getelementptr float, ptr %vp, i64 %i
  %wa = getelementptr float, ptr %wp, i64 %i
  %ca = getelementptr float, ptr %cp, i64 %i
  %xv = load float, ptr %xa
  %vv = load float, ptr %va
  %cv = load float, ptr %ca
  %sum = fadd float %vv, %xv
  store float %sum, ptr %va
  %wv = fadd float %xv, %cv
  store float %wv, ptr %wa
  %i1 = add i64 %i, 1
  br label %check
done:
  ret i32 0
}}
"""
CONST = np.array([10, 20, 30, 40], np.float32)


@pytest.fixture(scope="module")
def var_exe():
    spec = make_spec(
        VARIABLE_IR,
        feeds=[{"name": "x:0", "dtype": "float32", "dims": [4]}],
        fetches=[{"name": "v:0", "dtype": "float32", "dims": [4], "source": "variable",
                  "index": 0},
                 {"name": "x:0", "dtype": "float32", "dims": [4], "source": "feed",
                  "index": 0},
                 {"name": "c:0", "dtype": "float32", "dims": [4], "source": "constant",
                  "index": 0}],
        variables=[{"name": "v", "dtype": "float32", "dims": [4], "written": True,
                    "read": True},
                   {"name": "w", "dtype": "float32", "dims": [4], "written": True,
                    "read": False}],
        constants=[{"dtype": "float32", "shape": [4], "data": CONST.tobytes()}])
    return runtime.Executable(spec)


def test_variable_updated_in_place_and_copied_fetches(var_exe):
    v = np.zeros(4, np.float32)
    store = {"v": v}
    x = np.array([1, 2, 3, 4], np.float32)
    for step in (1, 2):
        v_out, x_out, c_out = var_exe.run([x, ], store)
        np.testing.assert_array_equal(store["v"], step * x)
        assert store["v"] is v  # updated in place
        np.testing.assert_array_equal(v_out, step * x)
        assert v_out is not v and x_out is not x  # fetches are copies
        np.testing.assert_array_equal(x_out, x)
        np.testing.assert_array_equal(c_out, CONST)
    np.testing.assert_array_equal(store["w"], x + CONST)  # only-written: allocated
    store["v"] = np.full(4, 100, np.float32)  # a new array in the store is bound again
    var_exe.run([x], store)
    np.testing.assert_array_equal(store["v"], 100 + x)


def test_uninitialized_variable(var_exe):
    with pytest.raises(runtime.UninitializedVariable, match="uninitialized value v"):
        var_exe.run([np.ones(4, np.float32)], {})


def test_variable_dtype_mismatch(var_exe):
    with pytest.raises(runtime.VariableMismatch, match="variable v holds a float64"):
        var_exe.run([np.ones(4, np.float32)], {"v": np.zeros(4)})


# out[i] = params[clamp(indices[i])]; an index outside [0, n) fires error site 0
GATHER_IR = f"""
define i32 @graphc_main({ENTRY_ARGS}) {{
entry:
  %pp = load ptr, ptr %feeds
  %iq = getelementptr ptr, ptr %feeds, i64 1
  %ip = load ptr, ptr %iq
  %op = load ptr, ptr %fetches
  %n = load i64, ptr %syms
  %mq = getelementptr i64, ptr %syms, i64 1
  %m = load i64, ptr %mq
  br label %check
check:
  %i = phi i64 [0, %entry], [%i1, %body]
  %bad = phi i1 [false, %entry], [%bad1, %body]
  %more = icmp slt i64 %i, %m
  br i1 %more, label %body, label %done
body:
  %ia = getelementptr i32, ptr %ip, i64 %i
  %iv = load i32, ptr %ia
  %k = sext i32 %iv to i64
  %inside = icmp ult i64 %k, %n
  %kc = select i1 %inside, i64 %k, i64 0
  %outside = xor i1 %inside, true
  %bad1 = or i1 %bad, %outside
  %pa = getelementptr float, ptr %pp, i64 %kc
  %pv = load float, ptr %pa
  %oa = getelementptr float, ptr %op, i64 %i
  store float %pv, ptr %oa
  %i1 = add i64 %i, 1
  br label %check
done:
  %rc = select i1 %bad, i32 1, i32 0
  ret i32 %rc
}}
"""


def test_error_site_maps_to_kernel_failure():
    spec = make_spec(
        GATHER_IR,
        symbols=[{"name": "p.0", "feed": 0, "axis": 0}, {"name": "i.0", "feed": 1, "axis": 0}],
        feeds=[{"name": "params:0", "dtype": "float32", "dims": [sym("p.0")]},
               {"name": "indices:0", "dtype": "int32", "dims": [sym("i.0")]}],
        fetches=[{"name": "gather:0", "dtype": "float32", "dims": [sym("i.0")],
                  "source": "kernel", "index": 0}],
        error_sites=[{"class": "InvalidArgumentError", "message": "indices out of range",
                      "op": "node gather (defined at model.py:12)"}])
    exe = runtime.Executable(spec)
    params = np.array([5, 6, 7], np.float32)
    (out,) = exe.run([params, np.array([2, 0, 1, 2], np.int32)], {})
    np.testing.assert_array_equal(out, [7, 5, 6, 7])
    with pytest.raises(runtime.KernelFailure, match="indices out of range") as info:
        exe.run([params, np.array([0, 3], np.int32)], {})
    assert info.value.class_name == "InvalidArgumentError"
    assert info.value.op_text == "node gather (defined at model.py:12)"


def sgemm_ir():
    """c[m, n] = a[m, k] @ b[k, n] through CBLAS (row major, no transposes)."""
    name, bits = jit.blas_symbol("cblas_sgemm"), jit.blas_int_bits()
    it = f"i{bits}"
    dims = []
    for s, idx in (("m", 0), ("k", 1), ("n", 2)):  # syms are i64; an LP64 BLAS takes i32
        dims.append(f"  %{s}q = getelementptr i64, ptr %syms, i64 {idx}\n"
                    f"  %{s}64 = load i64, ptr %{s}q\n")
        narrow = f"add i64 %{s}64, 0" if bits == 64 else f"trunc i64 %{s}64 to i32"
        dims.append(f"  %{s} = {narrow}\n")
    return f"""
declare void @{name}(i32, i32, i32, {it}, {it}, {it}, float, ptr, {it}, ptr, {it}, float, ptr, {it})

define i32 @graphc_main({ENTRY_ARGS}) {{
entry:
  %ap = load ptr, ptr %feeds
  %bq = getelementptr ptr, ptr %feeds, i64 1
  %bp = load ptr, ptr %bq
  %cp = load ptr, ptr %fetches
{''.join(dims)}
  call void @{name}(i32 101, i32 111, i32 111, {it} %m, {it} %n, {it} %k, float 1.0, ptr %ap, {it} %k, ptr %bp, {it} %n, float 0.0, ptr %cp, {it} %n)
  ret i32 0
}}
"""


def test_sgemm_through_blas():
    spec = make_spec(
        sgemm_ir(),
        symbols=[{"name": "a.0", "feed": 0, "axis": 0}, {"name": "a.1", "feed": 0, "axis": 1},
                 {"name": "b.1", "feed": 1, "axis": 1}],
        feeds=[{"name": "a:0", "dtype": "float32", "dims": [sym("a.0"), sym("a.1")]},
               {"name": "b:0", "dtype": "float32", "dims": [sym("a.1"), sym("b.1")]}],
        fetches=[{"name": "mm:0", "dtype": "float32", "dims": [sym("a.0"), sym("b.1")],
                  "source": "kernel", "index": 0}])
    exe = runtime.Executable(spec)
    rng = np.random.default_rng(0)
    for m, k, n in ((1, 1, 1), (7, 5, 3), (33, 17, 65)):
        a = rng.standard_normal((m, k), np.float32)
        b = rng.standard_normal((k, n), np.float32)
        (c,) = exe.run([a, b], {})
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
    with pytest.raises(runtime.GuardFailure, match="feed b:0 has shape"):
        exe.run([np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], {})


def test_blas_names():
    names = jit.blas_names()
    assert {"cblas_sgemm", "cblas_dgemm"} <= set(names)
    with pytest.raises(runtime.BlasUnavailable):
        jit.blas_symbol("cblas_nonexistent")


def test_shape_expressions():
    env = {"a": 7, "b": 3}
    floordiv = [[1, [[["floordiv", sym("a"), sym("b")], 1]]]]
    assert shapes.evaluate(floordiv, env) == 2
    assert shapes.evaluate([[2, [["a", 2]]], [-1, []]], env) == 97
    assert shapes.evaluate([[1, [[["max", sym("a"), const(9)], 1]]]], env) == 9
    assert shapes.evaluate([[1, [[["mod", sym("a"), sym("b")], 1]]]], env) == 1
    assert shapes.evaluate(5, env) == 5
    with pytest.raises(runtime.ShapeError):
        shapes.evaluate_dims([[[1, [["a", 1]]], [-10, []]]], env)
    assert shapes.guard_text([sym("a"), "<", const(4), False], env) == "not (a < 4) with a=7"


def test_spec_validation():
    with pytest.raises(ValueError, match="format version 2"):
        runtime.Executable(dict(add_spec(), format_version=2))
    bad_const = add_spec(constants=[{"dtype": "float32", "shape": [3], "data": b"\0" * 8}])
    with pytest.raises(ValueError, match="constant 0"):
        runtime.Executable(bad_const)
    with pytest.raises(runtime.TargetMismatch, match="lacks"):
        jit.check_target({"triple": jit.host_target()["triple"], "features": "+no-such-feature"})


def test_per_run_overhead(add_exe):
    x = np.ones(4, np.float32)
    feeds = [x, x]
    for _ in range(1000):
        add_exe.run(feeds, {})
    runs = 20000
    start = time.perf_counter()
    for _ in range(runs):
        add_exe.run(feeds, {})
    per_run = (time.perf_counter() - start) / runs
    print(f"\nper-run overhead of a tiny add executable: {per_run * 1e6:.2f} us")


def test_runtime_imports_without_compiler(tmp_path):
    out = run_without_graphc(f"""
        import numpy as np
        import runtime
        spec = {{"format_version": 1, "entry": "graphc_main", "llvm_ir": {ADD_IR!r},
                "target": runtime.host_target(),
                "symbols": [{{"name": "x.0", "feed": 0, "axis": 0}}], "guards": [],
                "feeds": [{{"name": "x:0", "dtype": "float32", "dims": [[[1, [["x.0", 1]]]]]}},
                          {{"name": "y:0", "dtype": "float32", "dims": [[[1, [["x.0", 1]]]]]}}],
                "fetches": [{{"name": "z:0", "dtype": "float32", "dims": [[[1, [["x.0", 1]]]]],
                            "source": "kernel", "index": 0}}],
                "variables": [], "constants": [], "arena_bytes": 0, "error_sites": []}}
        (z,) = runtime.Executable(spec).run([np.ones(3, np.float32)] * 2, {{}})
        assert z.tolist() == [2.0, 2.0, 2.0]
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"
