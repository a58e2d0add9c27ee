"""A direct conv kernel's images on the thread team as a library function of the conv's
shape, which runtime/library_cache.py compiles once per machine.

conv_kernel.py's "direct" lowering pads each image into scratch and calls conv_direct's
register-tiled function on it. On the team (conv_team.py) that was two functions of each
kernel, a chunk body and a task claiming chunks, compiled anew for every graph: LLVM spends
5-7 ms on each such function whatever its size, and they were 38 of resnet_train's 224.
When a chunk's work is only those calls (no epilogue fused into each chunk), the task
here does it itself:

    task(ptr data) -> void     data: LAYOUT (filled by conv_team.emit_images)
        allocates its scratch (cache-line aligned); claims units (runs of chunks) from
        the shared counter; pads each image of its chunks and calls the direct function on
        it: the filter gradient's unit u sums into its own partial filter, out + u *
        stride bytes; then counts itself (kernels/parallel.py's task counter, whose
        address the kernel passes: a library function refers to no global)

Its text is a function of `Images` alone, which its name spells out (two kernels of one
shape share it). The sizes are constants in it, so LLVM propagates them into the direct
function's loops as it did from the chunk body (library_cache.specialize says why that
matters), while the buffers and the counts of chunks and units come in `data`. Each image
is padded and convolved by the same calls as in the chunk body, so the results are the
same bits. The kernel keeps the rest of the team's work: the team size, the partial
filters and their fold, and the input gradient's flipped filter (conv_direct's flip
function, once per run: the input gradient of a stride-1 conv is a conv of dy, whose task
is the forward conv's of those sizes).
"""
from typing import NamedTuple

from llvmlite import ir

from graphc.compiler.backends.cpu import conv_direct, parallel
from graphc.compiler.backends.cpu.conv_team import claim_loop
from kernels import dtypes as kd
from kernels import parallel as kp
from kernels.loops import I64, PTR, for_range

NAME_PREFIX = "graphc_conv_images_"
# src, w, out (the filter gradient's: its partial filters), the task counter, chunks,
# chunks per unit, units, next unit (the shared counter), scratch bytes, bytes between two
# units' partial filters
LAYOUT = parallel.Layout(ir.LiteralStructType([PTR] * 4 + [I64] * 6))


class Images(NamedTuple):
    """The per-image work of a direct conv kernel: everything its task's text depends on.

    op: "conv" (out[image] = conv(pad(src[image]), w); the input gradient's too, of dy and
    the flipped filter) or "filter" (out += conv of pad(src[image]) with w[image], w being
    dy); block, channels (in) and stride (of the width):
    conv_direct.declare_or_emit's; out_channels, source (h, w of an image of src), padded
    (hp, wp), at (where src's cell (0, 0) lands in the padded copy), size (the rows and
    columns of an image of out, or of dy for "filter": their width picks the direct
    function's tiles), taps and row_stride: the direct function's sizes; images: per
    chunk."""
    dtype: str
    op: str
    block: int
    channels: int
    stride: int
    out_channels: int
    source: tuple
    padded: tuple
    at: tuple
    size: tuple
    taps: tuple
    row_stride: int
    images: int

    def name(self):
        numbers = (self.block, self.channels, self.stride, self.out_channels,
                   *self.source, *self.padded, *self.at, *self.size, *self.taps,
                   self.row_stride, self.images)
        return NAME_PREFIX + "_".join([self.op, self.dtype] +
                                      [str(n) if n >= 0 else f"m{-n}" for n in numbers])

    def per_source(self):
        return self.source[0] * self.source[1] * self.channels

    def per_out(self):
        return self.size[0] * self.size[1] * self.out_channels

    def filter_elements(self):
        return self.taps[0] * self.taps[1] * self.channels * self.out_channels


def task_function(module, images):
    """The team task of `images` in `module`, emitted once per module."""
    name = images.name()
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, kp.TASK_TYPE, name)   # not internal: kernels pass its address
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    _Task(b, fn.args[0], images).emit()
    b.ret_void()
    return fn


class _Task:
    def __init__(self, b, data, images):
        self.b, self.images = b, images
        self.elem = kd.memory_type(images.dtype)
        src, w, out, tasks, n_chunks, unit, n_units = (LAYOUT.load(b, data, k)
                                                       for k in range(7))
        self.src, self.w, self.out, self.tasks = src, w, out, tasks
        self.n_chunks, self.unit, self.n_units = n_chunks, unit, n_units
        self.counter = LAYOUT.address(b, data, 7)
        self.scratch_bytes, self.stride = LAYOUT.load(b, data, 8), LAYOUT.load(b, data, 9)

    def c(self, n):
        return ir.Constant(I64, n)

    def at(self, base, index, per):
        return self.b.gep(base, [self.b.mul(index, self.c(per))], source_etype=self.elem)

    def emit(self):
        b, m = self.b, self.images
        raw, scratch = parallel.aligned_malloc(b, self.scratch_bytes)
        direct = conv_direct.declare_or_emit(b.module, m.dtype, m.block, m.channels, m.stride,
                                             m.op == "filter", width=m.size[1])
        sizes = [self.c(n) for n in (m.padded[1], *m.size, m.out_channels, *m.taps,
                                     m.row_stride)]
        with claim_loop(b, self.counter, self.n_units) as u:
            lo = b.mul(u, self.unit)
            hi = b.add(lo, self.unit)
            hi = b.select(b.icmp_signed("<", hi, self.n_chunks), hi, self.n_chunks)
            out = self.out
            if m.op == "filter":   # unit u sums into its own partial filter, zeroed first
                out = b.gep(out, [b.mul(u, self.stride)], source_etype=ir.IntType(8))
                conv_direct.memset0(b, out, self.c(m.filter_elements() *
                                                   kd.itemsize(m.dtype)))
            per_chunk = self.c(m.images)
            with for_range(b, b.mul(hi, per_chunk), start=b.mul(lo, per_chunk),
                           name="image") as i:
                conv_direct.emit_pad(b, m.dtype, self.at(self.src, i, m.per_source()),
                                     scratch, *(self.c(n) for n in (
                                         *m.source, m.channels, *m.padded, *m.at)))
                if m.op == "filter":
                    b.call(direct, [scratch, self.at(self.w, i, m.per_out()), out] + sizes)
                else:
                    b.call(direct, [scratch, self.w, self.at(out, i, m.per_out())] + sizes)
        b.call(parallel.libc(b.module, "free"), [raw])
        b.atomic_rmw("add", self.tasks, self.c(1), "monotonic")


def fold_function(module, dtype):
    """The filter gradient's fold of its units' partial filters, emitted once per module:

        fn(ptr partials, i64 units, i64 stride, ptr out, i64 elems) -> void
        out[e] = 0 + partial 0 [e] + ... + partial units-1 [e], in unit order, partial u
        at partials + u * stride bytes

    (the order and the bits of the kernel's fold into its zeroed result). Its sizes are
    arguments: as the kernel's own loops, fills and folds were a quarter of its LLVM
    time."""
    name = f"graphc_conv_fold_{dtype}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, PTR, I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for k in (0, 3):
        fn.args[k].add_attribute("noalias")
    partials, units, stride, out, elems = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    elem = kd.memory_type(dtype)
    conv_direct.memset0(b, out, b.mul(elems, ir.Constant(I64, kd.itemsize(dtype))))
    with for_range(b, units, name="unit") as u:
        partial = b.gep(partials, [b.mul(u, stride)], source_etype=ir.IntType(8))
        with for_range(b, elems, name="e") as e:
            at = b.gep(out, [e], source_etype=elem)
            b.store(b.fadd(b.load(at, typ=elem),
                           b.load(b.gep(partial, [e], source_etype=elem), typ=elem)), at)
    b.ret_void()
    return fn
