"""A "conv" kernel -> one LLVM function: im2col + one BLAS gemm per chunk of images,
with the epilogue applied to each chunk while it is in cache.

The batch is cut into chunks of B images (K = KH*KW*CI taps, P = OH*OW output positions;
NHWC: a chunk of images is one [B*P, ...] matrix):
  Conv2D               cols[B*P, K] = im2col(x[chunk]);  y[chunk] = cols @ W    ([B*P, CO])
  Conv2DBackpropFilter cols[B*P, K] = im2col(x[chunk]);  dW += cols^T @ dy[chunk] (dW zeroed first)
  Conv2DBackpropInput  dcols[B*P, K] = dy[chunk] @ W^T;  dx[chunk] = col2im(dcols)
NCHW keeps B = 1 (an image is [CO, P]: a chunk of them is no single matrix):
y[n] = W^T @ cols^T, dW += cols^T @ dy[n]^T, dcols = dy[n]^T @ W^T.
B is the largest divisor of the batch whose columns fit SCRATCH_BUDGET (so they stay in
cache); an unknown batch size gets B = 1. im2col is an index-remap copy (padding cells
read as 0) and col2im a gather (each input cell sums the taps that cover it): in NHWC with
every size but the batch known, one size-generic function each per dtype (generic_copy,
called per image), else loops of the loop machinery (window_rules.Window.tap). The scratch
buffer is placed in the arena by the memory planner (scratch.py); without a plan the
kernel mallocs it per call. A pointwise convolution (1x1, stride 1, no padding) in NHWC
needs no im2col: the batch is one [N*P, CI] matrix and one gemm does it all.
Chunks beat both per-image gemms and one gemm over the whole batch (whose columns fall
out of cache), and im2col + gemm beats the direct loop rules at every channel count that
has a BLAS type; fewer, larger gemm calls also spare a multithreaded BLAS on a loaded
machine from spin-waiting for cores (the conv_train workload of tools/bench.py measures
this kernel).
The epilogue (bias add, activation) runs per chunk over the chunk's rows of the result
(in place, as in gemm_kernel.py), while they are in cache; an epilogue of other dims runs
once after the last chunk. Types without BLAS (float16, integers) use the direct loop
rules (window_rules.py) through the loop kernel template, and so does an NHWC Conv2D
with few taps (a 3x3 filter over one channel: DIRECT_CONV_TAPS), unrolled and vectorized
over the output channels (there the columns would cost more than the taps); its
filter gradient is a direct folding loop (lowering_of says which lowering a kernel gets).
With few input channels (ResNet's 16-64) the columns cost as much as the products: an
NHWC Conv2D, its filter gradient and a stride-1 input gradient whose channels fit
conv_direct.py's register tiles copy each image zero-padded into the scratch instead
(conv_direct's pad function) and call that kernel ("direct"; the input gradient pads dy and flips the
filter into the scratch after the image). On the thread team, such a kernel whose chunks
do nothing else (no epilogue) runs conv_images.py's task, a library function of its shape.
"""
from contextlib import nullcontext

from llvmlite import ir

from graphc.compiler.backends.cpu import conv_direct, conv_images, conv_team, parallel
from graphc.compiler.backends.cpu.gemm_kernel import BLAS_DTYPES
from graphc.compiler.backends.cpu.loop_kernel import emit_loop_function, lower_loop_kernel
from graphc.compiler.loops.emitter import (Emitter, Nest, StoreTarget, kernel_targets,
                                           group_nests, storages_used)
from graphc.compiler.loops.expr import Expr, dim_key, dims_key
from graphc.compiler.loops.products import product_buffer
from graphc.compiler.loops.views import KernelViews, LoweringError
from graphc.compiler.loops.window_rules import (CONV_TYPES, UNROLL_CELLS, Window,
                                                direct_conv_taps)
from graphc.framework.symbolic import SymDim
from kernels import dtypes as kd
from kernels import gemm
from kernels.loops import I32, I64, PTR, for_range
from runtime import jit

SCRATCH = ("scratch", "cols")
IMAGE = ("image", "out")   # the current chunk of the conv's result (a pointer in C)
FILTER = ("scratch", "filter")  # the flipped, transposed filter after the padded images
# Bytes of im2col columns per chunk: about half the per-core L2 of the machines measured,
# so the columns written by im2col are still in cache when the gemm reads them.
SCRATCH_BUDGET = 1 << 20


def _conv_node(kernel):
    main = getattr(kernel, "main", None)
    if main is not None and main.type in CONV_TYPES:
        return main
    for node in kernel.nodes:
        if node.type in CONV_TYPES:
            return node
    raise LoweringError(f"conv kernel without a convolution: {kernel.nodes}")


def lower_conv_kernel(program, kernel, name, scalar_ops, rules):
    node = _conv_node(kernel)
    how = lowering_of(kernel)
    if how == "direct_filter_gradient":
        return _lower_direct_filter_gradient(program, kernel, node, name, scalar_ops, rules)
    if how == "loop":
        return lower_loop_kernel(program, kernel, name, scalar_ops, rules)
    return _ConvLowering(program, kernel, node, name, scalar_ops, rules).lower()


def lowering_of(kernel):
    """How a conv kernel is lowered: "gemm" (im2col + BLAS), "direct" (an NHWC Conv2D, its
    filter gradient, or the input gradient of a stride-1 one, whose channels fit
    conv_direct.py's register tiles: a zero-padded copy of each image and that kernel, no
    columns), "loop" (the direct rules of window_rules: types without BLAS, and an NHWC
    Conv2D with few taps, where a gemm with so short an inner dimension runs far below
    peak) or "direct_filter_gradient" (an NHWC filter gradient with few taps and no
    epilogue: a gemm with so few rows runs far below peak too)."""
    node = _conv_node(kernel)
    if node.outputs[0].dtype.name not in BLAS_DTYPES:
        return "loop"
    nhwc = node.attrs.get("data_format", "NHWC") == "NHWC"
    few_taps = nhwc and direct_conv_taps(Window(node)) is not None
    if node.type == "Conv2D" and few_taps:
        return "loop"
    if node.type == "Conv2DBackpropFilter" and few_taps and len(kernel.nodes) == 1:
        return "direct_filter_gradient"
    if direct_block(node) is not None:
        return "direct"
    return "gemm"


def direct_block(node):
    """conv_direct's channel block for a conv it can compute, else None: NHWC, no
    dilation, every size but the batch known, few input channels (there im2col's copies
    cost as much as the products; with many, the gemm's panels amortize them) and output
    channels in whole vectors. A Conv2D, its Conv2DBackpropFilter (conv_direct's filter
    tiles over the same padded images), or a stride-1 Conv2DBackpropInput: the forward
    conv of its padded dy with the flipped filter, dy's channels its input channels. A
    pointwise conv needs no columns: it stays one gemm."""
    if node.type not in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter") or \
            node.outputs[0].dtype.name not in ("float32", "float64"):
        return None
    g = Window(node)
    if g.fmt != "NHWC" or g.dilations != (1, 1) or ConvShape.is_pointwise(g):
        return None
    sizes = [dim_key(d) for d in (g.h, g.w, g.c, g.oh, g.ow, g.oc)]
    if not all(isinstance(d, int) for d in sizes):
        return None
    c_in, c_out = sizes[2], sizes[5]
    if node.type == "Conv2DBackpropInput":
        if g.strides != (1, 1):
            return None
        c_in, c_out = c_out, c_in
    if not 0 < c_in <= conv_direct.MAX_CHANNELS:
        return None
    return conv_direct.block_of(node.outputs[0].dtype.name, c_out)


def _lower_direct_filter_gradient(program, kernel, node, name, scalar_ops, rules):
    """dW[kh, kw, ci, co] = sum over (n, oh, ow) of x[n, tap(oh, kh), tap(ow, kw), ci] *
    dy[n, oh, ow, co]: one accumulating target per (kh, kw, ci), all in the nest over
    dy's dims (vectorized over the output channels), after a nest filling dW with zeros:
    with one input channel, cheaper than building the columns for a gemm."""
    g = Window(node)
    x_in, _, dy = node.inputs
    out = node.outputs[0]
    dtype = out.dtype.name
    views = KernelViews(set(), program.storage_of, program.error_site, rules)
    x = views.x
    stores = program.stores_of(out)
    zero = x.const(0, dtype)
    fills, folds = [], []

    def placer(kh, kw, ci):
        def place(index):
            n, oh, ow, co = index
            hi, in_h = g.tap(views, 0, oh, x.const(kh))
            wi, in_w = g.tap(views, 1, ow, x.const(kw))
            cell = x.select(x.logical("and", in_h, in_w),
                            views.view(x_in, [n, hi, wi, x.const(ci)]), zero)
            value = x.op("Mul", [cell, views.view(dy, [n, oh, ow, co])], dtype)
            return value, x.linear([x.const(kh), x.const(kw), x.const(ci), co], out.dims)
        return place
    kh_taps, kw_taps, channels = direct_conv_taps(g)
    for storage in stores:
        fills.append(StoreTarget(storage, out.dims, dtype, lambda index: zero))
        for kh in range(kh_taps):
            for kw in range(kw_taps):
                for ci in range(channels):
                    folds.append(StoreTarget(storage, out.dims, dtype, None, accumulate="sum",
                                             loop_dims=list(dy.dims),
                                             place=placer(kh, kw, ci)))
    nests = group_nests(views, fills) + group_nests(views, folds)
    storages = storages_used(nests)
    fn = emit_loop_function(program.llvm, name, views, nests, storages, program.emit_dim,
                            scalar_ops)
    return fn, storages


# ---------------------------------------------------------------- geometry
class ConvShape:
    """The gemm view of one conv node: P, K, pointwise, and the chunk size B."""

    def __init__(self, node):
        g = self.g = Window(node)
        self.dtype = node.outputs[0].dtype.name
        self.pointwise = self.is_pointwise(g)
        self.P = _dim_product([g.oh, g.ow])
        self.K = _dim_product([g.taps[0], g.taps[1], g.c])
        self.direct = direct_block(node)
        if self.direct is not None:
            self._direct_geometry(node)
        self.chunk = self._chunk()

    def _direct_geometry(self, node):
        """The direct conv's view: channels in and out, output size, strides, and its
        zero-padded input image (only the rows and columns some output reads: a VALID
        conv may leave the last ones unread)."""
        g = self.g
        self.flipped = node.type == "Conv2DBackpropInput"
        if self.flipped:   # over dy, each output cell of dx
            self.direct_in, self.direct_out = dim_key(g.oc), dim_key(g.c)
            self.direct_size, self.direct_strides = (dim_key(g.h), dim_key(g.w)), (1, 1)
        else:
            self.direct_in, self.direct_out = dim_key(g.c), dim_key(g.oc)
            self.direct_size, self.direct_strides = (dim_key(g.oh), dim_key(g.ow)), g.strides
        self.padded = tuple(max(0, (o - 1) * s + k) if o else 0 for o, s, k in
                            zip(self.direct_size, self.direct_strides, g.taps))
        # The image the padded copy is made of ([h, w, direct_in] a batch entry) and where
        # its cell (0, 0) lands in the copy: x at the pads; for the input gradient dy,
        # since dx[h] = sum over j of dyp[h + j] w[K-1-j] with dyp[p] = dy[p + pad - (K-1)]
        pads = [dim_key(p) for p in g.pads]
        if self.flipped:
            self.source = node.inputs[2]
            self.source_size = (dim_key(g.oh), dim_key(g.ow))
            self.source_at = tuple(k - 1 - p for k, p in zip(g.taps, pads))
        else:
            self.source = node.inputs[0]
            self.source_size = (dim_key(g.h), dim_key(g.w))
            self.source_at = tuple(pads)

    @staticmethod
    def is_pointwise(g):
        return (g.fmt == "NHWC" and g.taps == (1, 1) and g.strides == (1, 1)
                and all(isinstance(p, int) and p == 0 for p in g.pads))

    def _per_image(self):
        """Elements of one image's scratch: its columns, or its padded copy (direct)."""
        if self.direct is not None:
            return self.padded[0] * self.padded[1] * self.direct_in
        return _const(self.P * self.K)

    def _chunk(self):
        n, per_image = dim_key(self.g.n), self._per_image()
        # direct: one image a chunk. Its kernel runs image by image anyway, so larger
        # chunks only took units from the thread team (ResNet's last stage was 1 chunk)
        if self.g.fmt != "NHWC" or self.pointwise or not isinstance(n, int) or \
                per_image is None or n <= 1 or self.direct is not None:
            return 1
        per_image *= kd.itemsize(self.dtype)
        fits = [b for b in range(1, n + 1) if n % b == 0 and b * per_image <= SCRATCH_BUDGET]
        return max(fits, default=1)

    def scratch_bytes(self):
        """Bytes of im2col columns (or padded images) the kernel needs (0: none), an int
        or a SymDim."""
        if self.pointwise or self.dtype not in BLAS_DTYPES:
            return 0
        if self.direct is not None:
            return (self.chunk * self._per_image() + self.flipped_filter()) * \
                kd.itemsize(self.dtype)
        n = self.chunk * self.P * self.K * kd.itemsize(self.dtype)
        c = _const(n)
        return n if c is None else c


    def flipped_filter(self):
        """Elements of the input gradient's flipped filter [kh, kw, co, ci] (else 0)."""
        if self.direct is None or not self.flipped:
            return 0
        return self.g.taps[0] * self.g.taps[1] * self.direct_in * self.direct_out


def scratch_bytes(kernel):
    """The scratch request of a conv kernel (scratch.py asks it for the memory plan)."""
    try:
        if lowering_of(kernel) not in ("gemm", "direct"):
            return 0
    except LoweringError:
        return 0
    return ConvShape(_conv_node(kernel)).scratch_bytes()


def _dim_product(dims):
    out = 1
    for d in dims:
        out = out * d
    return out


def _const(x):
    if isinstance(x, SymDim):
        return x.constant()
    return int(x)


# -------------------------------------------------------------------- lowering
class _ConvLowering:
    def __init__(self, program, kernel, node, name, scalar_ops, rules):
        self.program, self.kernel, self.node, self.name = program, kernel, node, name
        self.scalar_ops = scalar_ops
        self.rules = rules
        self.shape = ConvShape(node)
        self.g = self.shape.g
        self.B = self.shape.chunk
        self.pointwise = self.shape.pointwise
        self.direct = self.shape.direct
        self.dtype = node.outputs[0].dtype.name
        self.product = node.outputs[0]
        self.epilogue = [n for n in kernel.nodes if n is not node]
        self.c_key, self.extra = product_buffer(program, self.product, self.epilogue)
        computed = {v for n in self.epilogue for v in n.outputs}

        def storage_of(value):
            return self.c_key if value is self.product else program.storage_of(value)
        self.views = KernelViews(computed, storage_of, program.error_site, rules)

    # ------------------------------------------------------------- structure
    def lower(self):
        v, node = self.views, self.node
        outputs = [o for o in self.kernel.outputs if o is not self.product]
        targets = kernel_targets(self.program, v, outputs, self.epilogue, self.extra)
        self.n_var, self.chunk = None, v.x.const(0)
        if not self.pointwise:   # pointwise: one gemm for the whole batch, no chunk loop
            n_chunks = self.g.n // self.B if self.B > 1 else self.g.n
            self.n_var, _ = v.x.var(v.x.dim(n_chunks), "chunk")
        if self.n_var is not None:
            # The chunk loop encloses the per-chunk nests: for them the chunk is a
            # constant, so its expr claims no free loop variable (the nests place work
            # by their own variables).
            self.chunk = Expr("var", "int64", self.n_var.id, (), frozenset())
        self.chunk_epilogue = []
        self.epilogue_nests = []
        if targets and node.type != "Conv2DBackpropFilter" and self.n_var is not None:
            self.chunk_epilogue = self._chunk_nests(targets)
        if targets and not self.chunk_epilogue:
            self.epilogue_nests = group_nests(v, targets)
        self.generic_args = self._generic_args()
        self.per_chunk = self._per_chunk_nests()
        self.zero = []
        if node.type == "Conv2DBackpropFilter":
            zero = v.x.const(0, self.dtype)
            self.zero = group_nests(v, [StoreTarget(self.c_key, self.product.dims, self.dtype,
                                                   lambda index: zero)])
        operands = [self.program.storage_of(i) for i in self._gemm_inputs()]
        used = storages_used(self.zero + self.per_chunk + self.chunk_epilogue +
                             self.epilogue_nests)
        self.scratch_key = self._arena_scratch()
        storages = [s for s in dict.fromkeys([self.c_key] + operands + used)
                    if s not in (SCRATCH, IMAGE, FILTER)]
        if self.scratch_key is not None and self.scratch_key not in storages:
            storages.append(self.scratch_key)
        return self._emit(storages), storages

    def _generic_args(self):
        """The sizes generic_copy's im2col or col2im takes, when this kernel uses it (an
        NHWC im2col + gemm conv of sizes known but the batch), else None."""
        g = self.g
        if self.pointwise or self.direct is not None or g.fmt != "NHWC" or \
                self.dtype not in BLAS_DTYPES:
            return None
        sizes = [dim_key(d) for d in (g.h, g.w, g.c, g.oh, g.ow)] + list(g.taps) + \
            list(g.strides) + [dim_key(p) for p in g.pads] + list(g.dilations)
        if not all(isinstance(d, int) for d in sizes):
            return None
        return sizes

    def _generic_copies(self, image, cols, elem):
        """generic_copy's im2col or col2im over each image of the current chunk: image
        and cols the chunk's first image and its columns."""
        b, args = self.b, self.generic_args
        const = lambda value: ir.Constant(I64, value)  # noqa: E731
        kind = "col2im" if self.node.type == "Conv2DBackpropInput" else "im2col"
        fn = generic_copy(self.program.llvm, self.dtype, kind)
        h, w, c, oh, ow, kh, kw = args[:7]
        with for_range(b, const(self.B), name="image") as i:
            b.call(fn, [b.gep(image, [b.mul(i, const(h * w * c))], source_etype=elem),
                        b.gep(cols, [b.mul(i, const(oh * ow * kh * kw * c))],
                              source_etype=elem)] + [const(a) for a in args])

    def _arena_scratch(self):
        """The storage key of this kernel's arena scratch buffer, or None (malloc)."""
        if self.pointwise:
            return None
        return self.program.scratch_of(self.kernel)

    def _gemm_inputs(self):
        ins = self.node.inputs
        return ins[1:3] if self.node.type == "Conv2DBackpropInput" else [ins[0], ins[-1]]

    def _image(self, b):
        """The batch index of image b of the current chunk."""
        x = self.views.x
        return x.add(x.mul(self.chunk, x.const(self.B)), b)

    def _chunk_nests(self, targets):
        """The epilogue as one nest over the current chunk's images ([B, ...] dims), or []
        when some target is not of the product's dims."""
        v = self.views
        dims = list(self.product.dims)
        key = dims_key(dims)
        if any(dims_key(t.dims) != key for t in targets):
            return []
        nest = Nest(v, [self.B] + dims[1:])
        nest.key = key
        nest.index = [self._image(nest.index[0])] + nest.index[1:]
        for t in targets:
            t.index = list(nest.index)
            t.expr = t.value_of(t.index)
            t.position = v.x.linear(t.index, t.dims)
            nest.targets.append(t)
        return [nest]

    def _per_chunk_nests(self):
        """im2col into SCRATCH (Conv2D, the filter gradient), or col2im from it into the
        current chunk of the result (the input gradient), for the current chunk."""
        g, v, x = self.g, self.views, self.views.x
        if self.pointwise or self.generic_args is not None:
            return []
        if self.direct is not None:
            return self._direct_nests()
        if self.node.type == "Conv2DBackpropInput":
            dims = [self.B] + g.join(1, g.h, g.w, g.c)[1:]
            return group_nests(v, [StoreTarget(IMAGE, dims, self.dtype, self._col2im)])
        source = self.node.inputs[0]
        dims = [self.B, g.oh, g.ow, g.taps[0], g.taps[1], g.c]

        def im2col(index):
            b, oh, ow, kh, kw, ci = index
            hi, in_h = g.tap(v, 0, oh, kh)
            wi, in_w = g.tap(v, 1, ow, kw)
            inside = x.logical("and", in_h, in_w)
            return x.select(inside, v.view(source, g.join(self._image(b), hi, wi, ci)),
                            x.const(0, self.dtype))
        return group_nests(v, [StoreTarget(SCRATCH, dims, self.dtype, im2col)])

    def _direct_nests(self):
        """The input gradient's flipped filter into FILTER (the padded images are
        conv_direct's pad function's, called per image in _direct_chunk)."""
        v, shape = self.views, self.shape
        if not shape.flipped:
            return []
        kh, kw = self.g.taps
        return group_nests(v, [
            StoreTarget(FILTER, [kh, kw, shape.direct_in, shape.direct_out], self.dtype,
                        self._flipped_tap)])

    def _flipped_tap(self, index):
        """w'[j, i, co, ci] = w[KH-1-j, KW-1-i, ci, co]."""
        g, v, x = self.g, self.views, self.views.x
        j, i, co, ci = index
        return v.view(self.node.inputs[1], [x.sub(x.const(g.taps[0] - 1), j),
                                            x.sub(x.const(g.taps[1] - 1), i), ci, co])

    def _col2im(self, index):
        """dx[n, h, w, ci] = sum of the dcols taps that read (h, w)."""
        g, v, x = self.g, self.views, self.views.x
        b, rest = index[0], index[1:]
        h, w, ci = (rest if g.fmt == "NHWC" else [rest[1], rest[2], rest[0]])
        def tap(kh, kw):
            oh, ok_h = g.source(v, 0, h, kh)
            ow, ok_w = g.source(v, 1, w, kw)
            position = x.linear([b, oh, ow, kh, kw, ci],
                                [self.B, g.oh, g.ow, g.taps[0], g.taps[1], g.c])
            value = x.load(SCRATCH, position, self.dtype)
            return x.select(x.logical("and", ok_h, ok_w), value, x.const(0, self.dtype))
        if g.taps[0] * g.taps[1] <= UNROLL_CELLS:
            # straight-line code, so that the channel loop around it vectorizes
            total = None
            for kh in range(g.taps[0]):
                for kw in range(g.taps[1]):
                    term = tap(x.const(kh), x.const(kw))
                    total = term if total is None else x.op("Add", [total, term], self.dtype)
            return total
        loop_vars, (kh, kw) = v.fresh_vars(g.taps)
        return x.reduce("sum", loop_vars, tap(kh, kw), self.dtype)

    # ------------------------------------------------------------------ code
    def _emit(self, storages):
        program = self.program
        fn = ir.Function(program.llvm, ir.FunctionType(I32, [PTR] * (len(storages) + 1)),
                         self.name)
        fn.attributes.add("nounwind")
        for arg in fn.args[:-1]:
            arg.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        syms = fn.args[-1]
        buffers = dict(zip(storages, fn.args))
        em = Emitter(b, self.views, buffers, syms, program.emit_dim, self.scalar_ops)
        self.b, self.em, self.buffers = b, em, buffers
        self.storages = storages
        self._sizes(syms)
        images = self._images()
        on_images_team = images is not None and conv_team.available()
        for nest in [] if on_images_team else self.zero:   # (there the fold sets dW)
            em.emit_nest(nest)
        self.gemm_fn = gemm.declare_gemm(program.llvm, _blas(BLAS_DTYPES[self.dtype]),
                                         self.dtype, _blas_bits())
        if on_images_team:
            src, w, out = self._images_buffers()
            flipped = None
            if self.shape.flipped:
                flipped, w = self._flipped_filter(w)
            conv_team.emit_images(self, conv_images.task_function(program.llvm, images),
                                  conv_images.LAYOUT, src, w, out,
                                  conv_images.fold_function(program.llvm, self.dtype)
                                  if images.op == "filter" else None)
            if flipped is not None:
                b.call(parallel.libc(program.llvm, "free"), [flipped])
        else:
            if self.direct is not None:
                self.direct_fn = conv_direct.declare_or_emit(
                    program.llvm, self.dtype, self.direct, self.shape.direct_in,
                    self.shape.direct_strides[1], self.node.type == "Conv2DBackpropFilter",
                    width=self.shape.direct_size[1])
                self.pad_fn = conv_direct.declare_or_emit_pad(program.llvm, self.dtype)
            if self.n_var is not None and conv_team.available():
                conv_team.emit(self, self._team_chunks)
            else:
                self._serial_chunks()
        for nest in self.epilogue_nests:
            em.emit_nest(nest)
        b.ret(em.status())
        return fn

    def _images(self):
        """conv_images' description of a direct kernel's chunk work, or None when it is no
        direct kernel or its chunks do more than their images' calls (an epilogue)."""
        shape = self.shape
        if self.direct is None or self.chunk_epilogue:
            return None
        op = "filter" if self.node.type == "Conv2DBackpropFilter" else "conv"
        return conv_images.Images(
            self.dtype, op, self.direct, shape.direct_in, shape.direct_strides[1],
            shape.direct_out, shape.source_size, shape.padded,
            shape.source_at, shape.direct_size, tuple(self.g.taps),
            shape.direct_strides[0], self.B)

    def _images_buffers(self):
        """(src, w, out) of conv_images' task: the images padded, the filter (dy for the
        filter gradient: the operand read per image) and the product."""
        ins = self.node.inputs
        src, w = (ins[2], ins[1]) if self.shape.flipped else \
            (ins[0], ins[2]) if self.node.type == "Conv2DBackpropFilter" else (ins[0], ins[1])
        return (self.buffers[self.program.storage_of(src)],
                self.buffers[self.program.storage_of(w)], self.buffers[self.c_key])

    def _flipped_filter(self, w):
        """(the malloc'd pointer to free, the input gradient's filter w flipped into it)."""
        b, shape = self.b, self.shape
        kh, kw = self.g.taps
        const = lambda value: ir.Constant(I64, value)  # noqa: E731
        raw, flipped = parallel.aligned_malloc(
            b, const(shape.flipped_filter() * kd.itemsize(self.dtype)))
        b.call(conv_direct.declare_or_emit_flip(self.program.llvm, self.dtype),
               [w, flipped, const(kh), const(kw), const(shape.direct_out),
                const(shape.direct_in)])
        return raw, flipped

    def _sizes(self, syms):
        """The gemm sizes of one chunk as i64 values of the current function."""
        b, g = self.b, self.g
        dim = lambda d: self.program.emit_dim(b, d, syms)  # noqa: E731
        self.P = b.mul(dim(g.oh), dim(g.ow))
        if self.pointwise:  # the batch is one [N*H*W, CI] matrix
            self.P = b.mul(self.P, dim(g.n))
        self.K = b.mul(b.mul(dim(g.taps[0]), dim(g.taps[1])), dim(g.c))
        chunk = ir.Constant(I64, self.B)
        self.rows = b.mul(self.P, chunk)                     # gemm rows of one chunk
        self.HWC = b.mul(b.mul(b.mul(dim(g.h), dim(g.w)), dim(g.c)), chunk)
        self.PCO = b.mul(self.rows, dim(g.oc))
        self.CO = dim(g.oc)

    def scratch_bytes_value(self):
        """Bytes of one chunk's im2col columns (i64)."""
        if self.pointwise:
            return ir.Constant(I64, 0)
        if self.direct is not None:
            return ir.Constant(I64, self.shape.scratch_bytes())
        b = self.b
        return b.mul(b.mul(self.rows, self.K), ir.Constant(I64, kd.itemsize(self.dtype)))

    def work_value(self):
        """Multiply-adds of the whole conv (i64), to decide whether a team pays."""
        b = self.b
        return b.mul(b.mul(b.mul(self.rows, self.K), self.CO), self.chunk_count())

    def chunk_count(self):
        """The number of chunks (i64; a batch of one chunk has no chunk variable)."""
        return ir.Constant(I64, 1) if self.n_var is None else self.em.value(self.n_var.extent)

    def _serial_chunks(self):
        b, em, buffers = self.b, self.em, self.buffers
        allocated = None
        if self.scratch_key is not None:
            buffers[SCRATCH] = buffers[self.scratch_key]
        elif not self.pointwise:
            allocated = b.call(parallel.libc(self.program.llvm, "malloc"), [self.scratch_bytes_value()])
            buffers[SCRATCH] = allocated
        elem = kd.memory_type(self.dtype)
        loop = em.loop(self.n_var) if self.n_var is not None else nullcontext()
        with loop:
            self._chunk_work(self.gemm_fn, em.value(self.chunk), elem)
            for nest in self.chunk_epilogue:
                em.emit_nest(nest)
        if allocated is not None:
            b.call(parallel.libc(self.program.llvm, "free"), [allocated])

    def _team_chunks(self, b, child, syms, lo, hi, scratch):
        """Chunks lo..hi-1 into a conv_team body: builder b, emitter child."""
        saved = (self.b, self.em, self.buffers, self.P, self.K, self.rows, self.HWC,
                 self.PCO, self.CO)
        self.b, self.em, self.buffers = b, child, child.buffers
        self._sizes(syms)
        child.buffers[SCRATCH] = scratch
        elem = kd.memory_type(self.dtype)
        var = self.n_var
        with for_range(b, hi, start=lo, name="chunk") as c:
            child.var_values[var.id] = c
            child.defined.add(var.id)
            child.scopes.append({})
            self._chunk_work(self.gemm_fn, c, elem)
            for nest in self.chunk_epilogue:
                child.emit_nest(nest)
            child.scopes.pop()
            child.defined.discard(var.id)
        (self.b, self.em, self.buffers, self.P, self.K, self.rows, self.HWC, self.PCO,
         self.CO) = saved

    def _at(self, key, n, size, elem):
        return self.b.gep(self.buffers[key], [self.b.mul(n, size)], source_etype=elem)

    def _chunk_work(self, gemm_fn, n, elem):
        """The work of chunk n (images n*B .. n*B+B-1)."""
        b, em, g, t = self.b, self.em, self.g, self.node.type
        nhwc = g.fmt == "NHWC"
        call = lambda ta, tb, m, nn, k, a, bb, c, beta=0.0: gemm.call_gemm(  # noqa: E731
            b, gemm_fn, self.dtype, ta, tb, m, nn, k, a, bb, c, beta)
        ins = self.node.inputs
        if self.direct is not None:
            self._direct_chunk(n, elem)
            return
        if t == "Conv2DBackpropInput":
            w = self.buffers[self.program.storage_of(ins[1])]
            dy = self._at(self.program.storage_of(ins[2]), n, self.PCO, elem)
            image = self._at(self.c_key, n, self.HWC, elem)
            target = image if self.pointwise else self.buffers[SCRATCH]
            call(not nhwc, True, self.rows, self.K, self.CO, dy, w, target)
            self.buffers[IMAGE] = image
            if self.generic_args is not None:
                self._generic_copies(image, self.buffers[SCRATCH], elem)
            for nest in self.per_chunk:
                em.emit_nest(nest)
            return
        for nest in self.per_chunk:
            em.emit_nest(nest)
        x_image = self._at(self.program.storage_of(ins[0]), n, self.HWC, elem)
        if self.generic_args is not None:
            self._generic_copies(x_image, self.buffers[SCRATCH], elem)
        cols = x_image if self.pointwise else self.buffers[SCRATCH]
        if t == "Conv2D":
            w = self.buffers[self.program.storage_of(ins[1])]
            out = self._at(self.c_key, n, self.PCO, elem)
            if nhwc:
                call(False, False, self.rows, self.CO, self.K, cols, w, out)
            else:
                call(True, True, self.CO, self.rows, self.K, w, cols, out)
        else:  # Conv2DBackpropFilter
            dy = self._at(self.program.storage_of(ins[2]), n, self.PCO, elem)
            dw = self.buffers[self.c_key]
            call(True, not nhwc, self.K, self.CO, self.rows, cols, dy, dw, beta=1.0)


    def _direct_chunk(self, n, elem):
        """conv_direct's kernel over each image of chunk n, padded into the scratch by
        conv_direct's pad function."""
        b, g, shape = self.b, self.g, self.shape
        const = lambda value: ir.Constant(I64, value)  # noqa: E731
        hp, wp = shape.padded
        per_image = hp * wp * shape.direct_in
        if shape.flipped:
            self.buffers[FILTER] = b.gep(self.buffers[SCRATCH], [const(self.B * per_image)],
                                         source_etype=elem)
        for nest in self.per_chunk:
            self.em.emit_nest(nest)
        if shape.flipped:
            w = self.buffers[FILTER]
            out = self._at(self.c_key, n, self.HWC, elem)
        elif self.node.type == "Conv2DBackpropFilter":   # dy's images, all into dw
            w = self._at(self.program.storage_of(self.node.inputs[2]), n, self.PCO, elem)
            out = self.buffers[self.c_key]
        else:
            w = self.buffers[self.program.storage_of(self.node.inputs[1])]
            out = self._at(self.c_key, n, self.PCO, elem)
        oh, ow = shape.direct_size
        per_out = const(oh * ow * shape.direct_out)
        sizes = [const(wp), const(oh), const(ow), const(shape.direct_out),
                 const(g.taps[0]), const(g.taps[1]), const(shape.direct_strides[0])]
        gradient = self.node.type == "Conv2DBackpropFilter"
        (h, w_), (top, left) = shape.source_size, shape.source_at
        per_source = h * w_ * shape.direct_in
        source = self._at(self.program.storage_of(shape.source), n,
                          const(self.B * per_source), elem)
        with for_range(b, const(self.B), name="image") as i:
            image = b.gep(self.buffers[SCRATCH], [b.mul(i, const(per_image))],
                          source_etype=elem)
            b.call(self.pad_fn, [b.gep(source, [b.mul(i, const(per_source))],
                                       source_etype=elem), image,
                                 const(h), const(w_), const(shape.direct_in), const(hp),
                                 const(wp), const(top), const(left)])
            if gradient:
                dy = b.gep(w, [b.mul(i, per_out)], source_etype=elem)
                b.call(self.direct_fn, [image, dy, out] + sizes)
            else:
                result = b.gep(out, [b.mul(i, per_out)], source_etype=elem)
                b.call(self.direct_fn, [image, w, result] + sizes)


def _blas(routine):
    return jit.blas_symbol(routine)


def _blas_bits():
    return jit.blas_int_bits()


# ------------------------------------------------------- size-generic image copies
# im2col and col2im of one NHWC image as one function per dtype and module, its sizes
# arguments: as loop nests of each kernel's constant sizes they were a function per conv
# shape for LLVM to optimize (ResNet-50's many shapes). Both take
#     (ptr image, ptr cols, i64 h, w, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
# with image [h, w, c], cols [oh, ow, kh, kw, c], strides sh sw, pads before ph pw and
# dilations dh dw.
GENERIC_ARGS = 13


def generic_copy(module, dtype, kind):
    """graphc_conv_<kind>_<dtype> (kind "im2col" or "col2im") of `module`, emitted once."""
    name = f"graphc_conv_{kind}_{dtype}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR] + [I64] * GENERIC_ARGS),
                     name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args[:2]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    (_im2col if kind == "im2col" else _col2im_sum)(b, kd.memory_type(dtype), *fn.args)
    b.ret_void()
    return fn


def _cell(b, elem, base, index, c):
    return b.gep(base, [b.mul(index, c)], source_etype=elem)


def _im2col(b, elem, image, cols, h, w, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """cols[r, q, i, j, :] = image[r*sh + i*dh - ph, q*sw + j*dw - pw, :], 0 outside."""
    zero = ir.Constant(I64, 0)
    with for_range(b, oh, name="r") as r, for_range(b, ow, name="q") as q, \
            for_range(b, kh, name="i") as i:
        hi = b.sub(b.add(b.mul(r, sh), b.mul(i, dh)), ph)
        in_h = b.and_(b.icmp_signed(">=", hi, zero), b.icmp_signed("<", hi, h))
        with for_range(b, kw, name="j") as j:
            wi = b.sub(b.add(b.mul(q, sw), b.mul(j, dw)), pw)
            inside = b.and_(in_h, b.and_(b.icmp_signed(">=", wi, zero),
                                         b.icmp_signed("<", wi, w)))
            tap = b.add(b.mul(b.add(b.mul(b.add(b.mul(r, ow), q), kh), i), kw), j)
            dst = _cell(b, elem, cols, tap, c)
            with b.if_else(inside) as (copy, fill):
                with copy:
                    src = _cell(b, elem, image, b.add(b.mul(hi, w), wi), c)
                    with for_range(b, c, name="e") as e:
                        b.store(b.load(b.gep(src, [e], source_etype=elem), typ=elem),
                                b.gep(dst, [e], source_etype=elem))
                with fill:
                    with for_range(b, c, name="e") as e:
                        b.store(ir.Constant(elem, 0.0), b.gep(dst, [e], source_etype=elem))


def _source(b, p, pad, k, dil, stride, size):
    """(output position, valid) of the window whose tap k covers input position p."""
    zero = ir.Constant(I64, 0)
    t = b.sub(b.add(p, pad), b.mul(k, dil))
    tc = b.select(b.icmp_signed("<", t, zero), zero, t)
    o = b.sdiv(tc, stride)
    valid = b.and_(b.icmp_signed(">=", t, zero), b.icmp_signed("<", o, size))
    return o, b.and_(valid, b.icmp_signed("==", b.srem(tc, stride), zero))


def _col2im_sum(b, elem, image, cols, h, w, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """image[y, x, :] = the sum over the taps (i, j) whose window covers (y, x) of
    cols[window, i, j, :], taps in order (as the loop rules' col2im summed them)."""
    with for_range(b, h, name="y") as y, for_range(b, w, name="x") as x:
        dst = _cell(b, elem, image, b.add(b.mul(y, w), x), c)
        with for_range(b, c, name="e") as e:
            b.store(ir.Constant(elem, 0.0), b.gep(dst, [e], source_etype=elem))
        with for_range(b, kh, name="i") as i:
            o_h, valid_h = _source(b, y, ph, i, dh, sh, oh)
            with for_range(b, kw, name="j") as j:
                o_w, valid_w = _source(b, x, pw, j, dw, sw, ow)
                with b.if_then(b.and_(valid_h, valid_w)):
                    tap = b.add(b.mul(b.add(b.mul(b.add(b.mul(o_h, ow), o_w), kh), i), kw), j)
                    src = _cell(b, elem, cols, tap, c)
                    with for_range(b, c, name="e") as e:
                        at = b.gep(dst, [e], source_etype=elem)
                        b.store(b.fadd(b.load(at, typ=elem),
                                       b.load(b.gep(src, [e], source_etype=elem), typ=elem)),
                                at)
