"""Random ops in compiled code: Philox4x32-10 samples computed per element in loop kernels.

Element i of a random op in its r-th run is a pure function of (key, r, i) (kernels/philox.py;
the reference kernels in graphc/ops/random_ops.py compute the same function in NumPy), so a
random op is an ordinary loop rule and fuses like an elementwise op.

The key and the run counter live in the Session state next to the variables, as an int64
array [k0, k1, runs] (graphc/framework/random_state.py), created on first use by either
backend. Lowering declares it as a variable of the module and names it in the node's
attrs[ir.STATE_VARIABLE] (`state_storage`); the rule loads it, and the kernel computing
the op counts the run (`count_runs`: a wrapper calling the kernel function, then adding 1
to each of its ops' counters), so the reference and the compiled backend continue each
other's stream.
"""
from llvmlite import ir

from graphc.compiler.ir import STATE_VARIABLE
from graphc.framework.op_def import RANDOM_OP_TYPES
from kernels import philox
from kernels.loops import I32, I64, PTR

SAMPLE_OP = "PhiloxSample"  # the scalar op of one random element (emitted by this module)


def state_storage(node):
    """The storage key of a random node's [k0, k1, runs] state variable."""
    return ("var", node.attrs[STATE_VARIABLE])


def _state(v, node, slot):
    return v.load(state_storage(node), [v.x.const(slot)], (3,), "int64")


def random_rule(v, node, k, index):
    """Output element `index` of a random op: its Philox sample (see kernels/philox.py)."""
    out = node.outputs[0]
    position = v.x.linear(index, out.dims)
    args = [position, _state(v, node, 0), _state(v, node, 1), _state(v, node, 2)]
    site = None
    if node.type == "RandomUniformInt":
        lo, hi = (v.x.cast(v.view(t, []), "int64") for t in node.inputs[1:3])
        args += [lo, hi]
        site = v.site(node, "Need minval < maxval")
    return v.x.op(SAMPLE_OP, args, out.dtype.name, {"op": node.type}, site)


LOOP_RULES = {t: random_rule for t in RANDOM_OP_TYPES}


class ScalarOpsWithRandom:
    """kernels.scalar_ops plus the Philox sample op (what loop kernels emit scalars with)."""

    def __init__(self, scalar_ops):
        self._base = scalar_ops

    def __getattr__(self, name):
        return getattr(self._base, name)

    def emit_scalar(self, builder, op_type, args, in_dtypes, out_dtype, attrs=None,
                    on_error=None):
        if op_type != SAMPLE_OP:
            return self._base.emit_scalar(builder, op_type, args, in_dtypes, out_dtype, attrs,
                                          on_error)
        out_dtype = getattr(out_dtype, "name", out_dtype)
        lo = hi = None
        if len(args) > 4:
            lo, hi = args[4], args[5]
            if on_error is not None:
                on_error(builder.icmp_signed(">=", lo, hi))
        return philox.sample(builder, attrs["op"], args[0], args[1], args[2], args[3],
                             out_dtype, lo, hi)


def count_runs(program, kernel, name, fn, storages):
    """(fn, storages), wrapped so that the kernel's random ops count the run (their
    counters + 1 after the kernel function returns) when the kernel has any."""
    randoms = [n for n in kernel.nodes if n.type in RANDOM_OP_TYPES]
    if not randoms:
        return fn, storages
    keys = list(storages)
    for n in randoms:
        key = state_storage(n)
        if key not in keys:
            keys.append(key)
    wrapper = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * (len(keys) + 1)),
                          name + "_counted")
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))
    args = dict(zip(keys, wrapper.args))
    status = b.call(fn, [args[k] for k in storages] + [wrapper.args[-1]])
    for n in randoms:
        ptr = b.gep(args[state_storage(n)], [ir.Constant(I64, 2)],
                    source_etype=I64)
        b.store(b.add(b.load(ptr, typ=I64), ir.Constant(I64, 1)), ptr)
    b.ret(status)
    return wrapper, keys


def with_random(lower):
    """A kernel lowering that also emits random ops and counts their runs."""
    def lower_with_random(program, kernel, name, scalar_ops, rules):
        fn, storages = lower(program, kernel, name, ScalarOpsWithRandom(scalar_ops), rules)
        return count_runs(program, kernel, name, fn, storages)
    lower_with_random.__name__ = getattr(lower, "__name__", "lower") + "_with_random"
    return lower_with_random
