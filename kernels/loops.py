"""Loop templates for generated kernels: counted loops, reduction accumulators.

Codegen (graphc/compiler/codegen) builds every loop kernel out of these pieces, so the
loop shape LLVM sees is always the same simple one: an i64 induction variable counting
from 0 up by 1 (a phi in the header), a body, one exit. O3 rotates, vectorizes and
unrolls that form; accumulators live in entry-block allocas that SROA turns into phis.

Reductions combine with `combine_reduction`: float sums and products carry the
`reassoc` flag so the loop vectorizer may keep several partial accumulators (vector
lanes, interleaved) instead of one serial chain; max/min use llvm.maximum/minimum,
which propagate NaN as NumPy's max and TF's reduce_max do.
"""
from contextlib import contextmanager

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

# Reduction kinds: how to start and how to fold one more element in.
REDUCTION_KINDS = ("sum", "prod", "max", "min", "any", "all")


@contextmanager
def for_range(builder, stop, start=None, name="i"):
    """`for (i = start; i < stop; ++i) { body }`; yields i (i64). The builder is left
    after the loop when the with-block ends."""
    start = ir.Constant(I64, 0) if start is None else start
    pre = builder.block
    header = builder.append_basic_block(f"{name}.header")
    body = builder.append_basic_block(f"{name}.body")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, pre)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, done)
    builder.position_at_end(body)
    yield index
    following = builder.add(index, ir.Constant(I64, 1), name=f"{name}.next", flags=("nsw",))
    index.add_incoming(following, builder.block)
    builder.branch(header)
    builder.position_at_end(done)


class CarriedLoop:
    """for_range's loop with values carried from one iteration to the next as phis (the
    accumulator registers of a register tile: built as SSA, LLVM has no stack slots to
    promote, which made most of its time on such functions); `start` and `step` (i64
    values, 0 and 1 if None) make it any strided loop (a GPU grid-stride loop).

        loop = CarriedLoop(b, stop, values, name)
        with loop as (i, values):
            ...
            loop.carry(new_values)   # values not carried stay as they are
        loop.results    # the values after the last iteration"""

    def __init__(self, b, stop, values, name, start=None, step=None):
        self.b, self.stop, self.values, self.name = b, stop, list(values), name
        self.start = ir.Constant(I64, 0) if start is None else start
        self.step = ir.Constant(I64, 1) if step is None else step
        self.carried = None

    def __enter__(self):
        b = self.b
        pre = b.block
        self.header = b.append_basic_block(f"{self.name}.header")
        body = b.append_basic_block(f"{self.name}.body")
        self.done = b.append_basic_block(f"{self.name}.done")
        b.branch(self.header)
        b.position_at_end(self.header)
        self.index = b.phi(I64, name=self.name)
        self.index.add_incoming(self.start, pre)
        self.results = []
        for value in self.values:
            phi = b.phi(value.type)
            phi.add_incoming(value, pre)
            self.results.append(phi)
        b.cbranch(b.icmp_signed("<", self.index, self.stop), body, self.done)
        b.position_at_end(body)
        return self.index, list(self.results)

    def carry(self, values):
        self.carried = list(values)

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        b = self.b
        following = b.add(self.index, self.step, flags=("nsw",))
        self.index.add_incoming(following, b.block)
        carried = self.results if self.carried is None else self.carried
        for phi, value in zip(self.results, carried):
            phi.add_incoming(value, b.block)
        b.branch(self.header)
        b.position_at_end(self.done)
        return False


def entry_alloca(builder, type_, name=""):
    """A stack slot in the function's entry block (where SROA promotes it to registers)."""
    fn_entry = builder.function.entry_basic_block
    saved = builder.block
    if fn_entry.instructions:
        builder.position_before(fn_entry.instructions[0])
    else:
        builder.position_at_end(fn_entry)
    slot = builder.alloca(type_, name=name)
    builder.position_at_end(saved)
    return slot


def reduction_identity(kind, type_, is_float, is_signed=True):
    """The starting value of a reduction: the identity of its combining operation
    (-inf/+inf or the integer limits for max/min, as the NumPy reference kernels use)."""
    if kind == "sum" or kind == "any":
        return ir.Constant(type_, 0.0 if is_float else 0)
    if kind == "prod" or kind == "all":
        return ir.Constant(type_, 1.0 if is_float else 1)
    if is_float:
        return ir.Constant(type_, float("-inf") if kind == "max" else float("inf"))
    bits = type_.width
    if is_signed:
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        low, high = 0, (1 << bits) - 1
    return ir.Constant(type_, low if kind == "max" else high)


def combine_reduction(builder, kind, acc, x, is_float, is_signed=True):
    """acc (+) x for reduction `kind`."""
    if kind in ("any", "all"):
        return builder.or_(acc, x) if kind == "any" else builder.and_(acc, x)
    if kind == "sum":
        return builder.fadd(acc, x, flags=("reassoc", "nsz")) if is_float else builder.add(acc, x)
    if kind == "prod":
        return builder.fmul(acc, x, flags=("reassoc", "nsz")) if is_float else builder.mul(acc, x)
    if is_float:
        name = "llvm.maximum" if kind == "max" else "llvm.minimum"
        fn = builder.module.declare_intrinsic(name, [acc.type],
                                              ir.FunctionType(acc.type, [acc.type, acc.type]))
        return builder.call(fn, [acc, x])
    op = (">" if kind == "max" else "<")
    cmp = builder.icmp_signed(op, x, acc) if is_signed else builder.icmp_unsigned(op, x, acc)
    return builder.select(cmp, x, acc)


def arg_better(builder, kind, x, best, is_float, is_signed=True):
    """Whether x replaces best in an argmax/argmin scan (first occurrence wins ties).

    Floats follow NumPy's argmax/argmin: the first NaN wins over everything."""
    op = ">" if kind == "argmax" else "<"
    if not is_float:
        return builder.icmp_signed(op, x, best) if is_signed else builder.icmp_unsigned(op, x, best)
    strictly = builder.fcmp_ordered(op, x, best)
    x_nan = builder.fcmp_unordered("uno", x, x)
    best_num = builder.fcmp_ordered("ord", best, best)
    return builder.or_(strictly, builder.and_(x_nan, best_num))
