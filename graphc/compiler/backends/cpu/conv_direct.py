"""A direct NHWC convolution of one zero-padded image: register tiles of output pixels x
output channels, no im2col columns and no BLAS packing.

    fn(ptr xp, ptr w, ptr out, i64 wp, i64 oh, i64 ow, i64 co, i64 kh, i64 kw, i64 sh)
       -> void    (the input channels ci, the width stride sw and how rows of ow pixels
                   split into tiles are the function's own)
    xp [hp, wp, ci] (already padded: the conv is VALID over it), w [kh, kw, ci, co],
    out [oh, ow, co] = sum over (kh, kw, ci) of xp[oh*sh + kh, ow*sw + kw, ci] * w[kh, kw, ci]

With few channels (ResNet's 16-64) im2col + gemm wrote each input cell KH*KW times into the
columns and OpenBLAS copied them once more into its packed panels, while the product
per pixel is only K*CO multiply-adds: the copies cost as much as the arithmetic. Here a
tile of TILE pixels x BLOCK vectors of output channels stays in registers while the
(kh, kw, ci) loop broadcasts one input cell per pixel against a vector of filter taps.

The sizes are run-time arguments, so one function serves every conv shape of a dtype,
channel block, input channel count, width stride and split of the rows into tiles
(compile time: ResNet's convs differ mostly in their image sizes). The input channels and the width stride are constants so
that every input cell of a tile is one base register plus a constant displacement (with
them run-time values LLVM kept one pointer per pixel, and spilled them). The output channels
must be a multiple of BLOCK * VECTOR_BYTES worth of elements (block_of says which block
fits, or None). Each tile size is a function of its own ("<name>.tile<size>"), called by
the loops over rows, channel blocks and tiles: inside them, LLVM's loop passes went over
the tile's multiply-adds once per enclosing loop (ResNet's six variants: 0.82 -> 0.39
CPU-s of O3; the calls cost nothing measurable next to a tile's KH*KW*CI steps), and only
the tile sizes the rows need are emitted (row_tiles).
"""
from llvmlite import ir

from kernels import dtypes as kd
from kernels.loops import I64, PTR, CarriedLoop, for_range

# One AVX-512 register; on narrower targets LLVM splits each vector (still correct).
VECTOR_BYTES = 64
# Pixels per tile by the tile's vectors of output channels: at most 16 accumulator
# registers of 32 (the rest hold filter vectors), and at least 8 independent
# multiply-add chains to cover the FMA latency with two FMA ports.
TILE = {1: 16, 2: 8, 3: 5, 4: 4}
MAX_BLOCK = 4
MAX_CHANNELS = 64
# Input channels per step of the channel loop (the rest are unrolled after it): a loop
# body that stays in the decoded-instruction cache. 4 rather than 8: the same GFLOP/s on
# ResNet's shapes and less LLVM time (its loop passes dominate these functions' compile).
# The rest tile of 2 pays on W6's 14-pixel rows (3 tiles of 4 and 2 pixels).
UNROLL = 4
# After the full tiles, the rest of a row in tiles of these sizes.
REST_TILES = (4, 2, 1)


def lanes(dtype):
    return VECTOR_BYTES // kd.itemsize(dtype)


def block_of(dtype, out_channels):
    """Vectors of output channels per tile (the largest divisor of the vector count up
    to MAX_BLOCK), or None when the output channels are no whole number of vectors."""
    if not isinstance(out_channels, int) or out_channels <= 0:
        return None
    n_vectors, rest = divmod(out_channels, lanes(dtype))
    if rest:
        return None
    return max(b for b in range(1, MAX_BLOCK + 1) if n_vectors % b == 0)


def tile_of(block):
    return TILE[block]


def row_tiles(block, width):
    """The tile sizes a row of `width` output pixels splits into, largest first: full
    tiles of TILE[block], then the rest in REST_TILES (each size as often as it fits)."""
    tile = tile_of(block)
    sizes = [tile] if width >= tile else []
    rest = width % tile
    for size in REST_TILES:
        if size < tile and rest >= size:
            sizes.append(size)
            rest %= size
    return tuple(sizes)


def function_name(dtype, block, channels, stride, filter_gradient=False, tiles=()):
    if filter_gradient:
        return f"graphc_conv_filter_gradient_{dtype}_b{block}_c{channels}_s{stride}"
    sizes = "_".join(map(str, tiles)) or "none"
    return f"graphc_conv_direct_{dtype}_b{block}_c{channels}_s{stride}_t{sizes}"


def declare_or_emit(module, dtype, block, channels, stride, filter_gradient=False, width=0):
    """The direct conv function (or its filter gradient's) of (dtype, block, input
    channels, width stride) in `module`, emitted once per module. The direct conv's
    serves rows of `width` output pixels and every width that splits into the same tiles
    (row_tiles: ResNet's rows are whole tiles, so only the full tile's function is
    emitted, not the rest tiles' too); the filter gradient's, any width."""
    tiles = () if filter_gradient else row_tiles(block, width)
    name = function_name(dtype, block, channels, stride, filter_gradient, tiles)
    if name in module.globals:
        return module.globals[name]
    fnty = ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR] + [I64] * 7)
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args[:3]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if filter_gradient:
        _FilterTiles(b, fn.args, dtype, block, channels, stride).emit()
    else:
        _Tiles(b, fn.args, dtype, block, channels, stride).emit(tiles)
    b.ret_void()
    return fn


def _fma(module, vec, suffix):
    name = f"llvm.fma.{suffix}"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(vec, [vec] * 3), name)


class _Tiles:
    """The conv of one padded image: tiles of pixels x output-channel vectors."""

    def __init__(self, b, args, dtype, block, channels, stride):
        self.b = b
        self.xp, self.w, self.out = args[:3]
        self.wp, self.oh, self.ow, self.co, self.kh, self.kw, self.sh = args[3:]
        self.channels, self.stride = channels, stride
        self.ci, self.sw = ir.Constant(I64, channels), ir.Constant(I64, stride)
        self.dtype = dtype
        self.block = block
        self.elem = kd.memory_type(dtype)
        self.lanes = lanes(dtype)
        self.vec = ir.VectorType(self.elem, self.lanes)
        self.fma = _fma(b.module, self.vec, f"v{self.lanes}f{kd.bits(dtype)}")
        self.tile = tile_of(block)

    def c(self, n):
        return ir.Constant(I64, n)

    def emit(self, sizes):
        """The rows in tiles of `sizes` pixels (row_tiles of the width)."""
        b = self.b
        step = self.block * self.lanes
        n_blocks = b.sdiv(self.co, self.c(step))
        cell = self.c(self.stride * self.channels)   # from one pixel's cells to the next's
        start = self.c(0)
        for size in sizes:
            # A nest of its own per tile size: with the sizes' loops one after another in
            # one nest, LLVM unswitched each loop's test for being empty (invariant in the
            # rows and blocks) into a copy of the nest per combination, 2**3 of them.
            tile = self._tile_function(size)
            count = b.sdiv(b.sub(self.ow, start), self.c(size))
            with for_range(b, self.oh, name="oh") as oh:
                x_row = b.gep(self.xp, [b.mul(b.mul(b.mul(oh, self.sh), self.wp), self.ci)],
                              source_etype=self.elem)
                out_row = b.gep(self.out, [b.mul(b.mul(oh, self.ow), self.co)],
                                source_etype=self.elem)
                with for_range(b, n_blocks, name="cob") as cob:
                    co0 = b.mul(cob, self.c(step))
                    w_at = b.gep(self.w, [co0], source_etype=self.elem)
                    with for_range(b, count, name=f"ow{size}") as t:
                        ow0 = b.add(start, b.mul(t, self.c(size)))
                        x_at = b.gep(x_row, [b.mul(ow0, cell)], source_etype=self.elem)
                        out_at = b.gep(out_row, [b.add(b.mul(ow0, self.co), co0)],
                                       source_etype=self.elem)
                        b.call(tile, [x_at, w_at, out_at, self.wp, self.co, self.kh, self.kw])
            start = b.add(start, b.mul(count, self.c(size)))

    def _tile_function(self, pixels):
        """The tile of `pixels` pixels, called once per tile:
        fn(ptr x, ptr w, ptr out, i64 wp, i64 co, i64 kh, i64 kw) -> void, x at the tile's
        first input cell, w and out at its first output channel (out also at its pixel)."""
        return self._own_function(f"tile{pixels}", ("xp", "w", "out", "wp", "co", "kh", "kw"),
                                  lambda: self._tile(pixels))

    def _own_function(self, suffix, fields, emit):
        """A function of the module named after the current one + suffix, whose arguments
        are the attributes `fields` (three pointers, then i64 sizes) while emit() builds
        its body. Inside the loops over rows, channel blocks and tiles, LLVM's loop passes
        went over a tile's multiply-adds once per enclosing loop (six deep), most of these
        functions' compile time; in a function of their own, two or three."""
        outer = self.b.function
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * 3 + [I64] * (len(fields) - 3))
        fn = ir.Function(outer.module, fnty, f"{outer.name}.{suffix}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for arg in fn.args[:3]:
            arg.add_attribute("noalias")
        saved = {field: getattr(self, field) for field in ("b",) + fields}
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        for field, arg in zip(fields, fn.args):
            setattr(self, field, arg)
        emit()
        self.b.ret_void()
        for field, value in saved.items():
            setattr(self, field, value)
        return fn

    def _tile(self, pixels):
        b = self.b
        zero = ir.Constant(self.vec, [ir.Constant(self.elem, 0.0)] * self.lanes)
        acc = [zero] * (pixels * self.block)   # acc[p * block + v]
        rows = CarriedLoop(b, self.kh, acc, "kh")
        with rows as (kh, acc):
            cols = CarriedLoop(b, self.kw, acc, "kw")
            with cols as (kw, acc):
                cell = b.mul(b.add(b.mul(kh, self.wp), kw), self.ci)
                x_base = b.gep(self.xp, [cell], source_etype=self.elem)
                taps = b.mul(b.add(b.mul(kh, self.kw), kw), self.ci)
                w_base = b.gep(self.w, [b.mul(taps, self.co)], source_etype=self.elem)
                cols.carry(self._channels(pixels, x_base, w_base, acc))
            rows.carry(cols.results)
        acc = rows.results
        for p in range(pixels):
            for v in range(self.block):
                at = b.add(b.mul(self.c(p), self.co), self.c(v * self.lanes))
                ptr = b.gep(self.out, [at], source_etype=self.elem)
                b.store(acc[p * self.block + v], ptr, align=kd.itemsize(self.dtype))

    def _channels(self, pixels, x_base, w_base, acc):
        """The tile's multiply-adds over the input channels: a loop of UNROLL channels a
        step, then the rest, each channel's cells at constant displacements."""
        b = self.b
        steps, rest = divmod(self.channels, UNROLL)
        if steps:
            loop = CarriedLoop(b, self.c(steps), acc, "cis")
            with loop as (k, acc):
                first = b.mul(k, self.c(UNROLL))
                x_at = b.gep(x_base, [first], source_etype=self.elem)
                w_at = b.gep(w_base, [b.mul(first, self.co)], source_etype=self.elem)
                for ci in range(UNROLL):
                    acc = self._step(pixels, x_at, w_at, ci, acc)
                loop.carry(acc)
            acc = loop.results
        x_at = b.gep(x_base, [self.c(steps * UNROLL)], source_etype=self.elem)
        w_at = b.gep(w_base, [b.mul(self.c(steps * UNROLL), self.co)], source_etype=self.elem)
        for ci in range(rest):
            acc = self._step(pixels, x_at, w_at, ci, acc)
        return acc

    def _step(self, pixels, x_base, w_base, ci, acc):
        """acc[p][v] + xp[pixel p, ci] * w[ci, vector v] for the tile's pixels."""
        b = self.b
        size = kd.itemsize(self.dtype)
        w_row = b.gep(w_base, [b.mul(self.c(ci), self.co)], source_etype=self.elem)
        taps = [b.load(b.gep(w_row, [self.c(v * self.lanes)], source_etype=self.elem),
                       typ=self.vec, align=size) for v in range(self.block)]
        out = []
        for p in range(pixels):
            at = self.c(p * self.stride * self.channels + ci)
            splat = _splat(b, self.vec, b.load(b.gep(x_base, [at], source_etype=self.elem),
                                               typ=self.elem))
            out += [b.call(self.fma, [splat, taps[v], acc[p * self.block + v]])
                    for v in range(self.block)]
        return out


def filter_tile_of(block, channels):
    """Input channels per filter-gradient tile: the largest divisor of the channels that
    fits TILE[block] (so the channel tiles need no remainder)."""
    return max(t for t in range(1, TILE[block] + 1) if channels % t == 0)


def _splat(b, vec, x):
    undef = ir.Constant(vec, ir.Undefined)
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return b.shuffle_vector(b.insert_element(undef, x, ir.Constant(I64, 0)), undef, zeros)


class _FilterTiles(_Tiles):
    """The filter gradient's share of one image, added into dw:

        fn(ptr xp, ptr dy, ptr dw, i64 wp, i64 oh, i64 ow, i64 co, i64 kh, i64 kw, i64 sh)
        dw[kh, kw, ci, co] += sum over (oh, ow) of xp[oh*sh + kh, ow*sw + kw, ci] * dy[oh, ow, co]

    A tile is TILE channels x BLOCK vectors of output channels of one tap (kh, kw), held in
    registers over every pixel of the image (an outer product per pixel), which replaces
    the columns and the gemm's packing of them as in the forward conv."""

    def __init__(self, b, args, dtype, block, channels, stride):
        super().__init__(b, args, dtype, block, channels, stride)
        self.dy, self.dw = self.w, self.out
        self.tile = filter_tile_of(block, channels)

    def emit(self):
        b = self.b
        step = self.block * self.lanes
        n_blocks = b.sdiv(self.co, self.c(step))
        tile = self._tile_function(self.tile)
        with for_range(b, self.kh, name="kh") as kh:
            with for_range(b, self.kw, name="kw") as kw:
                with for_range(b, self.c(self.channels // self.tile), name="cit") as cit:
                    ci0 = b.mul(cit, self.c(self.tile))
                    cell = b.add(b.mul(b.add(b.mul(kh, self.wp), kw), self.ci), ci0)
                    x_at = b.gep(self.xp, [cell], source_etype=self.elem)
                    tap = b.add(b.mul(b.add(b.mul(kh, self.kw), kw), self.ci), ci0)
                    dw_row = b.gep(self.dw, [b.mul(tap, self.co)], source_etype=self.elem)
                    with for_range(b, n_blocks, name="cob") as cob:
                        co0 = b.mul(cob, self.c(step))
                        dy_at = b.gep(self.dy, [co0], source_etype=self.elem)
                        dw_at = b.gep(dw_row, [co0], source_etype=self.elem)
                        b.call(tile, [x_at, dy_at, dw_at, self.wp, self.co, self.oh,
                                      self.ow, self.sh])

    def _tile_function(self, channels):
        """The tile of `channels` input channels of one tap, called once per tile:
        fn(ptr x, ptr dy, ptr dw, i64 wp, i64 co, i64 oh, i64 ow, i64 sh) -> void, x at
        the tap's cell of pixel (0, 0) and the tile's first channel, dy and dw at its first
        output channel (dw also at its tap and channel)."""
        return self._own_function(f"tile{channels}",
                                  ("xp", "dy", "dw", "wp", "co", "oh", "ow", "sh"),
                                  self._filter_tile)

    def _dw_at(self, t, v):
        at = self.c(v * self.lanes)
        if t:
            at = self.b.add(self.b.mul(self.c(t), self.co), at)
        return self.b.gep(self.dw, [at], source_etype=self.elem)

    def _filter_tile(self):
        b = self.b
        size = kd.itemsize(self.dtype)
        acc = [b.load(self._dw_at(t, v), typ=self.vec, align=size)
               for t in range(self.tile) for v in range(self.block)]   # acc[t * block + v]
        rows = CarriedLoop(b, self.oh, acc, "oh")
        with rows as (oh, acc):
            x_row = b.gep(self.xp, [b.mul(b.mul(b.mul(oh, self.sh), self.wp), self.ci)],
                          source_etype=self.elem)
            dy_row = b.gep(self.dy, [b.mul(b.mul(oh, self.ow), self.co)],
                           source_etype=self.elem)
            cols = CarriedLoop(b, self.ow, acc, "ow")
            with cols as (ow, acc):
                x_at = b.gep(x_row, [b.mul(ow, self.c(self.stride * self.channels))],
                             source_etype=self.elem)
                dy_at = b.gep(dy_row, [b.mul(ow, self.co)], source_etype=self.elem)
                grads = [b.load(b.gep(dy_at, [self.c(v * self.lanes)], source_etype=self.elem),
                                typ=self.vec, align=size) for v in range(self.block)]
                new = []
                for t in range(self.tile):
                    x = b.load(b.gep(x_at, [self.c(t)], source_etype=self.elem), typ=self.elem)
                    splat = _splat(b, self.vec, x)
                    new += [b.call(self.fma, [splat, grads[v], acc[t * self.block + v]])
                            for v in range(self.block)]
                cols.carry(new)
            rows.carry(cols.results)
        for t in range(self.tile):
            for v in range(self.block):
                b.store(rows.results[t * self.block + v], self._dw_at(t, v), align=size)


def declare_or_emit_pad(module, dtype):
    """The zero-padded copy of one image that the direct convs of `dtype` read, emitted
    once per module:

        fn(ptr src, ptr dst, i64 h, i64 w, i64 c, i64 hp, i64 wp, i64 top, i64 left) -> void
        dst[r, q, :] = src[r - top, q - left, :] where that cell is inside src [h, w, c],
        else 0, for dst [hp, wp, c]; top and left may be negative (rows of src unread)

    The sizes are arguments so that every conv kernel of a module calls this one function:
    as a loop nest of each kernel's constant sizes it was one vectorized copy per conv
    shape, and LLVM's passes over those copies were a fifth of a ResNet's compile. A row
    is a memset, a memcpy of its inside cells and a memset."""
    name = f"graphc_conv_pad_{dtype}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR] + [I64] * 7), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args[:2]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    emit_pad(b, dtype, *fn.args)
    b.ret_void()
    return fn


def emit_pad(b, dtype, src, dst, h, w, c, hp, wp, top, left):
    """The pad function's copy at the builder (conv_images.py's tasks pad each image
    themselves: a call of the one shared function would tie every library group that
    makes it into one group)."""
    size = ir.Constant(I64, kd.itemsize(dtype))
    zero = ir.Constant(I64, 0)
    first = _clamp(b, left, zero, wp)                     # the columns src covers
    end = _clamp(b, b.add(left, w), first, wp)
    with for_range(b, hp, name="row") as r:
        s = b.sub(r, top)
        inside = b.and_(b.icmp_signed(">=", s, zero), b.icmp_signed("<", s, h))
        lo, hi = b.select(inside, first, wp), b.select(inside, end, wp)
        row = b.gep(dst, [b.mul(b.mul(r, wp), c)], source_etype=kd.memory_type(dtype))
        s = b.select(inside, s, zero)   # a row outside copies nothing: keep its address in src
        cells = b.gep(src, [b.mul(b.add(b.mul(s, w), b.sub(lo, left)), c)],
                      source_etype=kd.memory_type(dtype))
        at = lambda column: b.gep(row, [b.mul(column, c)],   # noqa: E731
                                  source_etype=kd.memory_type(dtype))
        bytes_of = lambda columns: b.mul(b.mul(columns, c), size)   # noqa: E731
        memset0(b, row, bytes_of(lo))
        _memcpy(b, at(lo), cells, bytes_of(b.sub(hi, lo)))
        memset0(b, at(hi), bytes_of(b.sub(wp, hi)))


def declare_or_emit_flip(module, dtype):
    """The input gradient's filter, flipped, emitted once per module:

        fn(ptr w, ptr out, i64 kh, i64 kw, i64 ci, i64 co) -> void
        out[j, i, o, c] = w[kh-1-j, kw-1-i, c, o] for w [kh, kw, ci, co], out [kh, kw, co, ci]

    (the input gradient of a stride-1 conv is the conv of dy, co its input channels, with
    this filter). Once per run of a kernel on the team, so its sizes are arguments: as
    loops of each conv's constant sizes inside conv_images.py's tasks, LLVM spent 20 ms
    more on each of them."""
    name = f"graphc_conv_flip_{dtype}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR] + [I64] * 4), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args[:2]:
        arg.add_attribute("noalias")
    w, out, kh, kw, ci, co = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    elem = kd.memory_type(dtype)
    one = ir.Constant(I64, 1)
    taps = b.mul(ci, co)
    with for_range(b, kh, name="j") as j, for_range(b, kw, name="i") as i:
        tap = b.add(b.mul(b.sub(b.sub(kh, one), j), kw), b.sub(b.sub(kw, one), i))
        source = b.gep(w, [b.mul(tap, taps)], source_etype=elem)
        target = b.gep(out, [b.mul(b.add(b.mul(j, kw), i), taps)], source_etype=elem)
        with for_range(b, co, name="o") as o:
            row = b.gep(target, [b.mul(o, ci)], source_etype=elem)
            with for_range(b, ci, name="c") as c:
                value = b.load(b.gep(source, [b.add(b.mul(c, co), o)], source_etype=elem),
                               typ=elem)
                b.store(value, b.gep(row, [c], source_etype=elem))
    b.ret_void()
    return fn


def _clamp(b, x, lo, hi):
    x = b.select(b.icmp_signed("<", x, lo), lo, x)
    return b.select(b.icmp_signed(">", x, hi), hi, x)


def memset0(b, ptr, nbytes):
    name = "llvm.memset.p0.i64"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), [PTR, ir.IntType(8), I64, ir.IntType(1)]), name)
    b.call(fn, [ptr, ir.Constant(ir.IntType(8), 0), nbytes, ir.Constant(ir.IntType(1), 0)])


def _memcpy(b, dst, src, nbytes):
    name = "llvm.memcpy.p0.p0.i64"
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)]), name)
    b.call(fn, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])
