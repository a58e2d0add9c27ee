"""Max error of the inline transcendentals (kernels/math_approx.py) against high-precision
NumPy, per function and dtype: `python tools/transcendental_accuracy.py`.

Also home of `jit_elementwise`, a tiny JIT harness (llvmlite MCJIT, host CPU, O3 with the
new pass builder) compiling `out[i] = op(a[i], b[i], ...)` with kernels.scalar_ops; the
tests use it too.
"""
import ctypes
import math
import os
import sys

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels.dtypes import element_pointer, llvm_type, load_scalar, store_scalar  # noqa: E402
from kernels.scalar_ops import emit_scalar  # noqa: E402

_STATE = {}


def _jit():
    """(target machine, MCJIT engine) for the host CPU, created once."""
    if not _STATE:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                          features=llvm.get_host_cpu_features().flatten(),
                                          opt=3)
        backing = llvm.parse_assembly("")
        _STATE["tm"] = tm
        _STATE["engine"] = llvm.create_mcjit_compiler(backing, tm)
        _STATE["cache"] = {}
    return _STATE["tm"], _STATE["engine"]


def build_loop_module(op_type, in_dtypes, out_dtype, attrs=None, name="kernel"):
    """LLVM module with `void kernel(ptr out, ptr in0, ..., i64 n, ptr err)`: out[i] =
    op(in0[i], ...); err (an i8) is set to 1 if any element's error condition fired."""
    module = ir.Module(name=f"{op_type}_module")
    module.triple = llvm.get_process_triple()
    ptr, i64, i8 = ir.PointerType(), ir.IntType(64), ir.IntType(8)
    arg_types = [ptr] + [ptr] * len(in_dtypes) + [i64, ptr]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), name)
    for a in fn.args:
        if a.type == ptr:
            a.add_attribute("noalias")
    out_ptr, in_ptrs, n, err_ptr = fn.args[0], fn.args[1:-2], fn.args[-2], fn.args[-1]
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    err = b.phi(ir.IntType(1))
    i.add_incoming(ir.Constant(i64, 0), entry)
    err.add_incoming(ir.Constant(ir.IntType(1), 0), entry)
    args = [load_scalar(b, element_pointer(b, p, i, dt), dt) for p, dt in zip(in_ptrs, in_dtypes)]
    errors = []
    value = emit_scalar(b, op_type, args, in_dtypes, out_dtype, attrs, on_error=errors.append)
    store_scalar(b, value, element_pointer(b, out_ptr, i, out_dtype), out_dtype)
    new_err = err
    for cond in errors:
        new_err = b.or_(new_err, cond)
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, b.block)
    err.add_incoming(new_err, b.block)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    final = b.phi(ir.IntType(1))
    final.add_incoming(ir.Constant(ir.IntType(1), 0), entry)
    final.add_incoming(new_err, loop)
    with b.if_then(final):
        b.store(ir.Constant(i8, 1), err_ptr)
    b.ret_void()
    return module


def optimize(module_ir):
    """Parsed, verified and O3-optimized llvmlite.binding module (new pass builder)."""
    tm, _ = _jit()
    mod = llvm.parse_assembly(str(module_ir))
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def jit_elementwise(op_type, in_dtypes, out_dtype, attrs=None):
    """A Python function (*arrays) -> (out array, error flag) running the native loop.
    Compiled once per (op, dtypes, attrs)."""
    in_dtypes = tuple(np.dtype(d).name for d in in_dtypes)
    out_dtype = np.dtype(out_dtype).name
    key = (op_type, in_dtypes, out_dtype, repr(sorted((attrs or {}).items())))
    tm, engine = _jit()
    cache = _STATE["cache"]
    if key not in cache:
        name = f"k{len(cache)}"
        mod = optimize(build_loop_module(op_type, in_dtypes, out_dtype, attrs, name))
        engine.add_module(mod)
        engine.finalize_object()
        address = engine.get_function_address(name)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (1 + len(in_dtypes))),
                                 ctypes.c_int64, ctypes.c_void_p)
        cfunc = proto(address)

        def run(*arrays):
            arrays = [np.ascontiguousarray(a, dtype=d) for a, d in zip(arrays, in_dtypes)]
            n = arrays[0].size
            out = np.empty(arrays[0].shape, dtype=out_dtype)
            err = np.zeros(1, dtype=np.int8)
            cfunc(out.ctypes.data, *[a.ctypes.data for a in arrays], n, err.ctypes.data)
            return out, bool(err[0])
        cache[key] = run
    return cache[key]


# --------------------------------------------------------------------------- accuracy
def _erf_ref(x):
    return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, dtype=np.float64))


def _sigmoid_ref(x):
    x = x.astype(np.longdouble)
    return 1 / (1 + np.exp(-x))


def _softplus_ref(x):
    x = x.astype(np.longdouble)
    return np.logaddexp(np.longdouble(0), x)


def _log_uniform(rng, lo, hi, n):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _inputs(rng, kind, dtype, n):
    f64 = dtype == np.float64
    if kind == "exp":
        return [rng.uniform(-745, 709, n) if f64 else rng.uniform(-103, 88.7, n)]
    if kind == "expm1":
        return [np.concatenate([rng.uniform(-50, 50, n // 2),
                                rng.uniform(-1, 1, n // 4) * 10.0 ** rng.uniform(-30, 0, n // 4)])]
    if kind == "log":
        lo, hi = (1e-300, 1e300) if f64 else (1e-37, 1e37)
        return [np.concatenate([_log_uniform(rng, lo, hi, n // 2),
                                rng.uniform(0.5, 2.0, n // 2)])]
    if kind == "log1p":
        tiny = rng.uniform(-1, 1, n // 4) * 10.0 ** rng.uniform(-30, 0, n // 4)
        return [np.concatenate([rng.uniform(-0.999, 1, n // 4), tiny,
                                _log_uniform(rng, 1, 1e30, n // 2)])]
    if kind == "tanh":
        return [np.concatenate([rng.uniform(-20, 20, n // 2),
                                rng.uniform(-1, 1, n // 2) * 10.0 ** rng.uniform(-20, 0, n // 2)])]
    if kind == "sigmoid":
        return [rng.uniform(-700, 700, n) if f64 else rng.uniform(-87, 87, n)]
    if kind == "softplus":
        return [rng.uniform(-50, 50, n)]
    if kind == "trig":
        return [np.concatenate([rng.uniform(-1e4, 1e4, n // 2), rng.uniform(-4, 4, n // 2)])]
    if kind == "erf":
        return [np.concatenate([rng.uniform(-6, 6, n // 2),
                                rng.uniform(-1, 1, n // 2) * 10.0 ** rng.uniform(-10, 0, n // 2)])]
    if kind == "pow":
        x = _log_uniform(rng, 1e-3, 1e3, n)
        limit = 700 if f64 else 85
        y = rng.uniform(-1, 1, n) * limit / np.abs(np.log(x))
        y = np.clip(y, -300, 300)
        return [x, y]
    raise ValueError(kind)


# op type: (input kind, reference on long double / float64 arrays)
FUNCTIONS = {
    "Exp": ("exp", np.exp),
    "Expm1": ("expm1", np.expm1),
    "Log": ("log", np.log),
    "Log1p": ("log1p", np.log1p),
    "Tanh": ("tanh", np.tanh),
    "Sigmoid": ("sigmoid", _sigmoid_ref),
    "Softplus": ("softplus", _softplus_ref),
    "Sin": ("trig", np.sin),
    "Cos": ("trig", np.cos),
    "Erf": ("erf", _erf_ref),
    "Pow": ("pow", np.power),
}


def measure(op_type, dtype, n=20001, seed=0):
    """(max error in ulps of the result dtype, max relative error) over the op's range."""
    dtype = np.dtype(dtype)
    kind, ref_fn = FUNCTIONS[op_type]
    rng = np.random.default_rng(seed)
    inputs = [a.astype(dtype) for a in _inputs(rng, kind, dtype, n)]
    got, _ = jit_elementwise(op_type, [dtype] * len(inputs), dtype)(*inputs)
    with np.errstate(all="ignore"):
        ref = ref_fn(*[a.astype(np.longdouble) for a in inputs])
    ref = np.asarray(ref, dtype=np.longdouble)
    ref_rounded = ref.astype(dtype)
    finite = np.isfinite(ref_rounded) & (ref_rounded != 0)
    ulp = np.spacing(np.abs(ref_rounded[finite])).astype(np.longdouble)
    diff = np.abs(got[finite].astype(np.longdouble) - ref[finite])
    ulps = float(np.max(diff / ulp)) if diff.size else 0.0
    # relative error over normal results (subnormals have fewer significant bits)
    normal = np.abs(ref_rounded[finite]) >= np.finfo(dtype).tiny
    rel = float(np.max(diff[normal] / np.abs(ref[finite][normal]))) if normal.any() else 0.0
    exact_specials = np.array_equal(got[~finite], ref_rounded[~finite], equal_nan=True)
    return ulps, rel, exact_specials


def main():
    print(f"{'op':<10}{'dtype':<9}{'max ulp':>10}{'max rel':>12}  specials")
    for op_type in FUNCTIONS:
        for dtype in ("float32", "float64"):
            ulps, rel, specials = measure(op_type, dtype)
            print(f"{op_type:<10}{dtype:<9}{ulps:>10.2f}{rel:>12.2e}  "
                  f"{'exact' if specials else 'DIFFER'}")


if __name__ == "__main__":
    main()
