"""Loop rules of windowed ops: convolutions (direct form), pooling and their gradients,
MirrorPadGrad and InvertPermutation.

Each rule computes one output element as a reduction over a small window (see
op_lowering's docstring for the toolkit). Gradients that scatter in the reference
(MaxPoolGrad, AvgPoolGrad, Conv2DBackpropInput, MirrorPadGrad) are written here in
*gather* form: an input element sums the output windows that cover it (at most
ceil(k / stride) per axis), so every element is computed independently and nothing is
accumulated in memory. Padding cells are never read: indices are clamped and the value
is selected away.

Conv2D and its backprops on float32/float64 take the im2col + BLAS template
(conv_kernel.py); these direct rules are the other dtypes' lowering, and that of a
Conv2D with few taps (DIRECT_CONV_TAPS). Small windows (UNROLL_CELLS) are unrolled
into straight-line code so that the loop over channels around them vectorizes.
"""
import numpy as np

from graphc.compiler.loops.expr import dim_key
from graphc.compiler.loops.views import LoweringError
from graphc.framework.op_def import OpTypes
from graphc.framework.symbolic import SymDim

CONV_TYPES = OpTypes(lambda d: d.kind == "conv")


def _accumulator(dtype):
    return "float32" if dtype == "float16" else dtype


# ------------------------------------------------------------------ geometry
class Window:
    """The NHWC view of one conv/pool node: image dims (n, h, w, c) of the input side and
    (oh, ow) of the output side, window taps, strides, dilations, pads before."""

    def __init__(self, node):
        a = node.attrs
        self.fmt = a.get("data_format", "NHWC")
        if self.fmt not in ("NHWC", "NCHW"):
            raise LoweringError(f"data_format {self.fmt} of {node.describe()}")
        t, ins, out = node.type, node.inputs, node.outputs[0]
        if t == "Conv2D":
            x_dims, y_dims, taps = ins[0].dims, out.dims, ins[1].dims[:2]
        elif t == "Conv2DBackpropInput":
            x_dims, y_dims, taps = out.dims, ins[2].dims, ins[1].dims[:2]
        elif t == "Conv2DBackpropFilter":
            x_dims, y_dims, taps = ins[0].dims, ins[2].dims, out.dims[:2]
        elif t in ("MaxPool", "AvgPool", "MaxPoolGradGrad"):
            x_dims, y_dims, taps = ins[0].dims, out.dims, self.hw(a["ksize"])
        elif t == "MaxPoolGrad":
            x_dims, y_dims, taps = ins[0].dims, ins[2].dims, self.hw(a["ksize"])
        elif t == "AvgPoolGrad":
            x_dims, y_dims, taps = out.dims, ins[1].dims, self.hw(a["ksize"])
        else:
            raise LoweringError(f"no window geometry for {t}")
        if any(dim_key(d) is None or not isinstance(dim_key(d), int) for d in taps):
            raise LoweringError(f"window size of {node.describe()} must be known at compile "
                                f"time, got {list(taps)}")
        self.n, self.h, self.w, self.c = self.split(x_dims)
        _, self.oh, self.ow, self.oc = self.split(y_dims)
        self.taps = tuple(int(dim_key(d)) for d in taps)
        self.strides = tuple(int(s) for s in self.hw(a["strides"]))
        self.dilations = tuple(int(d) for d in self.hw(a.get("dilations") or [1, 1, 1, 1]))
        self.pads = tuple(self._pad_before(axis, a) for axis in range(2))

    def hw(self, values):
        values = list(values)
        return (values[1], values[2]) if self.fmt == "NHWC" else (values[2], values[3])

    def split(self, values):
        """(n, h, w, c) of a 4-list in this layout."""
        n, a, b, c = values
        return (n, a, b, c) if self.fmt == "NHWC" else (n, b, c, a)

    def join(self, n, h, w, c):
        """A 4-list in this layout from (n, h, w, c)."""
        return [n, h, w, c] if self.fmt == "NHWC" else [n, c, h, w]

    @property
    def in_size(self):
        return (self.h, self.w)

    @property
    def out_size(self):
        return (self.oh, self.ow)

    def _pad_before(self, axis, a):
        padding = a["padding"]
        if padding == "VALID":
            return 0
        if padding == "EXPLICIT":
            pads = list(a["explicit_paddings"])
            pairs = self.hw([pads[0:2], pads[2:4], pads[4:6], pads[6:8]])
            return int(pairs[axis][0])
        eff = (self.taps[axis] - 1) * self.dilations[axis] + 1
        total = (self.out_size[axis] - 1) * self.strides[axis] + eff - self.in_size[axis]
        if isinstance(total, SymDim):
            c = total.constant()
            if c is None:
                return total.maximum(0) // 2
            total = c
        return max(int(total), 0) // 2

    # ------------------------------------------------------------ index maps
    def tap(self, v, axis, o, k):
        """(clamped input position, inside) of tap k of output position o on `axis`."""
        x = v.x
        p = x.sub(x.add(x.mul(o, x.const(self.strides[axis])),
                        x.mul(k, x.const(self.dilations[axis]))), x.dim(self.pads[axis]))
        size = x.dim(self.in_size[axis])
        inside = x.logical("and", x.compare("ge", p, x.const(0)), x.compare("lt", p, size))
        return clamp(v, p, size), inside

    def source(self, v, axis, p, k):
        """(clamped output position, valid) of the window whose tap k covers input
        position p on `axis` (valid: such a window exists)."""
        x = v.x
        t = x.sub(x.add(p, x.dim(self.pads[axis])), x.mul(k, x.const(self.dilations[axis])))
        tc = x.max(t, x.const(0))
        s = x.const(self.strides[axis])
        o = x.floordiv(tc, s)
        out = x.dim(self.out_size[axis])
        valid = x.logical("and", x.compare("ge", t, x.const(0)), x.compare("lt", o, out))
        valid = x.logical("and", valid, x.compare("eq", x.mod(tc, s), x.const(0)))
        return clamp(v, o, out), valid

    def covering(self, v, axis, p, j):
        """(clamped output position, valid) of the j-th window (ascending) of a
        stride-s, undilated window of taps k that covers input position p; j ranges
        over candidates(axis)."""
        x = v.x
        k, s = self.taps[axis], self.strides[axis]
        pp = x.add(p, x.dim(self.pads[axis]))
        lo = x.floordiv(x.add(x.max(x.sub(pp, x.const(k - 1)), x.const(0)), x.const(s - 1)),
                        x.const(s))
        o = x.add(lo, j)
        out = x.dim(self.out_size[axis])
        valid = x.logical("and", x.compare("le", x.mul(o, x.const(s)), pp),
                          x.compare("lt", o, out))
        return clamp(v, o, out), valid

    def candidates(self, axis):
        return -(-self.taps[axis] // self.strides[axis])

    def window_count(self, v, o_h, o_w):
        """How many real (unpadded) cells the window at (o_h, o_w) covers, as int64."""
        x = v.x
        count = x.const(1)
        for axis, o in enumerate((o_h, o_w)):
            start = x.sub(x.mul(o, x.const(self.strides[axis])), x.dim(self.pads[axis]))
            end = x.min(x.add(start, x.const(self.taps[axis])), x.dim(self.in_size[axis]))
            count = x.mul(count, x.sub(end, x.max(start, x.const(0))))
        return count


def clamp(v, j, size):
    x = v.x
    return x.max(x.min(j, x.sub(size, x.const(1))), x.const(0))


def _and(v, *conds):
    out = v.x.const(True, "bool")
    for c in conds:
        out = v.x.logical("and", out, c)
    return out


def _lowest(dtype):
    if dtype.startswith("float"):
        return -np.inf
    return np.iinfo(dtype).min


def _sum(v, loop_vars, body, acc, dtype):
    return v.x.cast(v.x.reduce("sum", loop_vars, body, acc), dtype)


# --------------------------------------------------------------- convolutions
def conv2d(v, node, k, index):
    g = Window(node)
    x, w = node.inputs
    dtype = node.outputs[0].dtype.name
    acc = _accumulator(dtype)
    n, oh, ow, co = g.split(index)

    def term(kh, kw, ci):
        hi, in_h = g.tap(v, 0, oh, kh)
        wi, in_w = g.tap(v, 1, ow, kw)
        xv = v.x.select(_and(v, in_h, in_w), v.x.cast(v.view(x, g.join(n, hi, wi, ci)), acc),
                        v.x.const(0, acc))
        return v.x.op("Mul", [xv, v.x.cast(v.view(w, [kh, kw, ci, co]), acc)], acc)
    if direct_conv_taps(g) is not None:
        # straight-line code: the output-channel loop vectorizes (a broadcast input cell
        # times a row of filter taps per term)
        c = v.x.const
        terms = [term(c(kh), c(kw), c(ci)) for kh in range(g.taps[0])
                 for kw in range(g.taps[1]) for ci in range(direct_conv_taps(g)[2])]
        if not terms:  # no input channels: every output is an empty sum
            return v.x.const(0, dtype)
        total = terms[0]
        for t in terms[1:]:
            total = v.x.op("Add", [total, t], acc)
        return v.x.cast(total, dtype)
    loop_vars, (kh, kw, ci) = v.fresh_vars([g.taps[0], g.taps[1], g.c])
    return _sum(v, loop_vars, term(kh, kw, ci), acc, dtype)


# Conv2D with at most this many taps (KH*KW*CI, e.g. a 3x3 filter over one channel) is
# computed directly (unrolled, vectorized over the output channels) rather than by
# im2col + gemm: a gemm with so short an inner dimension runs far below peak.
DIRECT_CONV_TAPS = 16


def direct_conv_taps(g):
    """(KH, KW, CI) when a Conv2D of geometry g is small enough to unroll, else None."""
    c = dim_key(g.c)
    if isinstance(c, int) and g.taps[0] * g.taps[1] * c <= DIRECT_CONV_TAPS:
        return (g.taps[0], g.taps[1], c)
    return None


def conv2d_backprop_input(v, node, k, index):
    g = Window(node)
    _, w, dy = node.inputs
    dtype = node.outputs[0].dtype.name
    acc = _accumulator(dtype)
    n, h, wd, ci = g.split(index)
    loop_vars, (kh, kw, co) = v.fresh_vars([g.taps[0], g.taps[1], g.oc])
    oh, ok_h = g.source(v, 0, h, kh)
    ow, ok_w = g.source(v, 1, wd, kw)
    prod = v.x.op("Mul", [v.x.cast(v.view(dy, g.join(n, oh, ow, co)), acc),
                          v.x.cast(v.view(w, [kh, kw, ci, co]), acc)], acc)
    body = v.x.select(_and(v, ok_h, ok_w), prod, v.x.const(0, acc))
    return _sum(v, loop_vars, body, acc, dtype)


def conv2d_backprop_filter(v, node, k, index):
    g = Window(node)
    x, _, dy = node.inputs
    dtype = node.outputs[0].dtype.name
    acc = _accumulator(dtype)
    kh, kw, ci, co = index
    loop_vars, (n, oh, ow) = v.fresh_vars([g.n, g.oh, g.ow])
    hi, in_h = g.tap(v, 0, oh, kh)
    wi, in_w = g.tap(v, 1, ow, kw)
    xv = v.x.select(_and(v, in_h, in_w), v.x.cast(v.view(x, g.join(n, hi, wi, ci)), acc),
                    v.x.const(0, acc))
    prod = v.x.op("Mul", [xv, v.x.cast(v.view(dy, g.join(n, oh, ow, co)), acc)], acc)
    return _sum(v, loop_vars, prod, acc, dtype)


# -------------------------------------------------------------------- pooling
def max_pool(v, node, k, index):
    g = Window(node)
    x = node.inputs[0]
    dtype = node.outputs[0].dtype.name
    acc = _accumulator(dtype)
    n, oh, ow, c = g.split(index)
    if _unrolled(g):  # straight-line code: the channel loop vectorizes
        cells = [cell for _, _, cell in _window_cells(v, g, x, n, oh, ow, c)]
        best = cells[0]
        for cell in cells[1:]:
            best = v.x.op("Maximum", [best, cell], acc)
        return v.x.cast(best, dtype)
    loop_vars, (kh, kw) = v.fresh_vars(g.taps)
    hi, in_h = g.tap(v, 0, oh, kh)
    wi, in_w = g.tap(v, 1, ow, kw)
    body = v.x.select(_and(v, in_h, in_w), v.x.cast(v.view(x, g.join(n, hi, wi, c)), acc),
                      v.x.const(_lowest(acc), acc))
    return v.x.cast(v.x.reduce("max", loop_vars, body, acc), dtype)


def avg_pool(v, node, k, index):
    g = Window(node)
    x = node.inputs[0]
    dtype = node.outputs[0].dtype.name
    # windows are small: a double sum makes the mean correctly rounded in practice (the
    # reference's float32 sum can lose digits to cancellation)
    acc = "float64" if dtype.startswith("float") else dtype
    n, oh, ow, c = g.split(index)
    loop_vars, (kh, kw) = v.fresh_vars(g.taps)
    hi, in_h = g.tap(v, 0, oh, kh)
    wi, in_w = g.tap(v, 1, ow, kw)
    body = v.x.select(_and(v, in_h, in_w), v.x.cast(v.view(x, g.join(n, hi, wi, c)), acc),
                      v.x.const(0, acc))
    total = v.x.reduce("sum", loop_vars, body, acc)
    count = v.x.cast(g.window_count(v, oh, ow), acc)
    return v.x.cast(v.x.op("RealDiv", [total, count], acc), dtype)


def _first_max(v, g, x, n, oh, ow, c):
    """(h, w) input position of the first maximum of window (oh, ow) in row-major window
    order, never a padding cell (as the reference: a padding cell could tie only when
    every real cell is the lowest value; then the first real cell)."""
    if _unrolled(g):
        return _first_max_unrolled(v, g, x, n, oh, ow, c)
    kw_taps = g.taps[1]
    dtype = x.dtype.name
    acc = _accumulator(dtype)
    var, t = v.x.var(v.x.const(g.taps[0] * kw_taps), "t")
    kh, kw = v.x.floordiv(t, v.x.const(kw_taps)), v.x.mod(t, v.x.const(kw_taps))
    hi, in_h = g.tap(v, 0, oh, kh)
    wi, in_w = g.tap(v, 1, ow, kw)
    body = v.x.select(_and(v, in_h, in_w), v.x.cast(v.view(x, g.join(n, hi, wi, c)), acc),
                      v.x.const(_lowest(acc), acc))
    best = v.x.argreduce("argmax", var, body)
    bh, bw = v.x.floordiv(best, v.x.const(kw_taps)), v.x.mod(best, v.x.const(kw_taps))
    h, ok_h = g.tap(v, 0, oh, bh)
    w, ok_w = g.tap(v, 1, ow, bw)
    real = _and(v, ok_h, ok_w)
    first_h, _ = g.tap(v, 0, oh, v.x.const(0))   # clamped: the first real row/column
    first_w, _ = g.tap(v, 1, ow, v.x.const(0))
    return v.x.select(real, h, first_h), v.x.select(real, w, first_w)


# Windows up to this many cells are scanned in straight-line code (no inner loop), so
# that the channel loop around them vectorizes: a 2x2 pool is 4 loads and 3 compares per
# element (with an inner loop, the argmax loop per input cell of MaxPoolGrad ran scalar;
# tools/bench.py's conv_train workload times both).
UNROLL_CELLS = 16


def _unrolled(g):
    return g.taps[0] * g.taps[1] <= UNROLL_CELLS


def _window_cells(v, g, x, n, oh, ow, c):
    """[(kh, kw, value)] of window (oh, ow) in row-major window order; a padding cell
    reads as the lowest value (in the accumulator type)."""
    acc = _accumulator(x.dtype.name)
    out = []
    for kh in range(g.taps[0]):
        hi, in_h = g.tap(v, 0, oh, v.x.const(kh))
        for kw in range(g.taps[1]):
            wi, in_w = g.tap(v, 1, ow, v.x.const(kw))
            cell = v.x.select(_and(v, in_h, in_w),
                              v.x.cast(v.view(x, g.join(n, hi, wi, c)), acc),
                              v.x.const(_lowest(acc), acc))
            out.append((kh, kw, cell))
    return out


def _first_max_unrolled(v, g, x, n, oh, ow, c):
    """_first_max as a straight-line scan: a cell replaces the best so far when it is
    larger, or NaN while the best is not (NumPy's argmax: the first NaN wins)."""
    x_ = v.x
    cells = _window_cells(v, g, x, n, oh, ow, c)
    acc = cells[0][2].dtype
    kh0, kw0, best = cells[0]
    bh, bw = x_.const(kh0), x_.const(kw0)
    for kh, kw, cell in cells[1:]:
        larger = x_.op("Greater", [cell, best], "bool")
        if acc.startswith("float"):
            nan_first = x_.logical("and", x_.op("NotEqual", [cell, cell], "bool"),
                                   x_.op("Equal", [best, best], "bool"))
            larger = x_.logical("or", larger, nan_first)
        best = x_.select(larger, cell, best)
        bh = x_.select(larger, x_.const(kh), bh)
        bw = x_.select(larger, x_.const(kw), bw)
    h, ok_h = g.tap(v, 0, oh, bh)
    w, ok_w = g.tap(v, 1, ow, bw)
    real = _and(v, ok_h, ok_w)
    first_h, _ = g.tap(v, 0, oh, x_.const(0))
    first_w, _ = g.tap(v, 1, ow, x_.const(0))
    return x_.select(real, h, first_h), x_.select(real, w, first_w)


def max_pool_grad(v, node, k, index):
    g = Window(node)
    x, _, dy = node.inputs
    dtype = node.outputs[0].dtype.name
    acc = "float64" if dtype.startswith("float") else dtype  # the reference sums in double
    if g.candidates(0) * g.candidates(1) == 1:
        acc = dtype  # one window covers each cell (stride >= window): nothing to sum
    n, h, w, c = g.split(index)
    loop_vars, (jh, jw) = v.fresh_vars([g.candidates(0), g.candidates(1)], "j")
    oh, ok_h = g.covering(v, 0, h, jh)
    ow, ok_w = g.covering(v, 1, w, jw)
    wh, ww = _first_max(v, g, x, n, oh, ow, c)
    mine = _and(v, ok_h, ok_w, v.x.compare("eq", wh, h), v.x.compare("eq", ww, w))
    body = v.x.select(mine, v.x.cast(v.view(dy, g.join(n, oh, ow, c)), acc), v.x.const(0, acc))
    return _sum(v, loop_vars, body, acc, dtype)


def max_pool_grad_grad(v, node, k, index):
    g = Window(node)
    x, _, grad = node.inputs
    n, oh, ow, c = g.split(index)
    wh, ww = _first_max(v, g, x, n, oh, ow, c)
    return v.view(grad, g.join(n, wh, ww, c))


def avg_pool_grad(v, node, k, index):
    g = Window(node)
    dy = node.inputs[1]
    dtype = node.outputs[0].dtype.name
    acc = "float64"  # the reference divides and sums in double
    n, h, w, c = g.split(index)
    loop_vars, (jh, jw) = v.fresh_vars([g.candidates(0), g.candidates(1)], "j")
    oh, ok_h = g.covering(v, 0, h, jh)
    ow, ok_w = g.covering(v, 1, w, jw)
    share = v.x.op("RealDiv", [v.x.cast(v.view(dy, g.join(n, oh, ow, c)), acc),
                               v.x.cast(g.window_count(v, oh, ow), acc)], acc)
    body = v.x.select(_and(v, ok_h, ok_w), share, v.x.const(0, acc))
    return _sum(v, loop_vars, body, acc, dtype)


# ----------------------------------------------------------- MirrorPadGrad
def mirror_pad_grad(v, node, k, index):
    """Element t of an axis of size d gets g at t + b, and its mirror images in the
    before (b + skip - 1 - t) and after (b + 2d - 1 - skip - t) paddings when they exist."""
    grad, paddings = node.inputs
    out = node.outputs[0]
    dtype = out.dtype.name
    acc = _accumulator(dtype)
    pads = np.reshape(v.constant(paddings), (-1, 2))
    skip = 1 if node.attrs["mode"] == "REFLECT" else 0
    x = v.x
    loop_vars, g_index, valid = [], [], x.const(True, "bool")
    for t, (b, e), d, gd in zip(index, pads, out.dims, grad.dims):
        b, e = int(b), int(e)
        center = x.add(t, x.const(b))
        if not b and not e:
            g_index.append(center)
            continue
        var, which = x.var(x.const(3), "m")
        loop_vars.append(var)
        size = x.dim(d)
        left = x.sub(x.const(b + skip - 1), t)
        right = x.sub(x.sub(x.add(x.const(b), x.add(size, size)), x.const(1 + skip)), t)
        ok_left = x.logical("and", x.compare("ge", left, x.const(0)),
                            x.compare("lt", left, x.const(b)))
        ok_right = x.logical("and", x.compare("ge", right, x.add(x.const(b), size)),
                             x.compare("lt", right, x.dim(gd)))
        is0, is1 = x.compare("eq", which, x.const(0)), x.compare("eq", which, x.const(1))
        pos = x.select(is0, center, x.select(is1, left, right))
        ok = x.select(is0, x.const(True, "bool"), x.select(is1, ok_left, ok_right))
        valid = x.logical("and", valid, ok)
        g_index.append(clamp(v, pos, x.dim(gd)))
    body = x.select(valid, x.cast(v.view(grad, g_index), acc), x.const(0, acc))
    return _sum(v, loop_vars, body, acc, dtype)


# -------------------------------------------------------- InvertPermutation
def invert_permutation(v, node, k, index):
    """out[i] = the j with x[j] == i (a search: permutations are short); an i that no
    element names means x is not a permutation, an error site."""
    x = node.inputs[0]
    size = v.x.dim(x.dims[0])
    var, j = v.x.var(size, "j")
    i = index[0]
    hit = v.x.compare("eq", v.x.cast(v.view(x, [j]), "int64"), i)
    pos = v.x.argreduce("argmax", var, v.x.select(hit, v.x.const(1, "int32"),
                                                  v.x.const(0, "int32")))
    found = v.x.compare("eq", v.x.cast(v.view(x, [pos]), "int64"), i)
    site = v.site(node, f"x is not a permutation of [0, {x.dims[0]})")
    pos = v.x.check(v.x.select(found, pos, v.x.const(-1)), size, site)
    return v.x.cast(pos, node.outputs[0].dtype.name)


LOOP_RULES = {
    "Conv2D": conv2d, "Conv2DBackpropInput": conv2d_backprop_input,
    "Conv2DBackpropFilter": conv2d_backprop_filter,
    "MaxPool": max_pool, "AvgPool": avg_pool, "MaxPoolGrad": max_pool_grad,
    "MaxPoolGradGrad": max_pool_grad_grad, "AvgPoolGrad": avg_pool_grad,
    "MirrorPadGrad": mirror_pad_grad, "InvertPermutation": invert_permutation,
}
