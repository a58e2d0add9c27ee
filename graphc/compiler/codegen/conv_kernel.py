"""A "conv" kernel -> one LLVM function: im2col + BLAS gemm per image, then the epilogue.

For each image n (K = KH*KW*CI taps, P = OH*OW output positions):
  Conv2D               cols[P, K] = im2col(x[n]);  y[n] = cols @ W          (NHWC: [P, CO])
                                                   y[n] = W^T @ cols^T      (NCHW: [CO, P])
  Conv2DBackpropFilter cols[P, K] = im2col(x[n]);  dW += cols^T @ dy[n]     (dW zeroed first)
  Conv2DBackpropInput  dcols[P, K] = dy[n] @ W^T;  dx[n] = col2im(dcols)
im2col is an index-remap loop (window_rules.Window.tap: padding cells read as 0) and
col2im a gather (each input cell sums the taps that cover it), both emitted through the
loop machinery into a per-image scratch buffer (malloc'd once per call: P*K elements, so
it stays small and in cache whatever the batch). A pointwise convolution (1x1, stride 1,
no padding) in NHWC needs no im2col: the batch itself is one [N*P, CI] matrix, and one
gemm does it all.
Measured (2-core x86, single-threaded OpenBLAS, forward / forward+both gradients): the
direct loop rules never won; e.g. 32x14x14x16 * 3x3x16x32: 0.57 / 2.8 ms here vs 7.2 /
38 ms direct; 16x32x32x32 * 3x3x32x32: 3.7 / 16 ms vs 31 / 830 ms; a 4x6x6x3 * 3x3x3x4
toy: a tie (0.013 ms). With multithreaded OpenBLAS on a loaded machine, many small gemm
calls can be 10-100x slower (threads spin-waiting for cores).
The result is then finished by the epilogue (bias add, activation) in place, as in
gemm_kernel.py. Types without BLAS (float16, integers) use the direct loop rules
(window_rules.py) through the loop kernel template.
"""
from contextlib import nullcontext

from llvmlite import ir

from graphc.compiler.codegen.expr import Expr
from graphc.compiler.codegen.gemm_kernel import BLAS_DTYPES, _product_buffer
from graphc.compiler.codegen.loop_kernel import (StoreTarget, _Emitter, kernel_targets,
                                                 lower_loop_kernel, plan_nests, storages_used)
from graphc.compiler.codegen.views import KernelViews, LoweringError
from graphc.compiler.codegen.window_rules import CONV_TYPES, Window
from kernels import dtypes as kd
from kernels import gemm
from kernels.loops import I32, I64, PTR

SCRATCH = ("scratch", "cols")
IMAGE = ("image", "out")   # the current image of the conv's result (a pointer in C)


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
    if node.outputs[0].dtype.name not in BLAS_DTYPES:
        return lower_loop_kernel(program, kernel, name, scalar_ops, rules)
    return _ConvLowering(program, kernel, node, name, scalar_ops, rules).lower()


class _ConvLowering:
    def __init__(self, program, kernel, node, name, scalar_ops, rules):
        self.program, self.kernel, self.node, self.name = program, kernel, node, name
        self.scalar_ops = scalar_ops
        self.rules = rules
        self.g = Window(node)
        self.dtype = node.outputs[0].dtype.name
        self.product = node.outputs[0]
        self.epilogue = [n for n in kernel.nodes if n is not node]
        self.c_key, self.extra = _product_buffer(program, self.product, self.epilogue)
        computed = {v for n in self.epilogue for v in n.outputs}

        def storage_of(value):
            return self.c_key if value is self.product else program.storage_of(value)
        self.views = KernelViews(computed, storage_of, program.error_site, rules)
        g = self.g
        self.pointwise = (g.fmt == "NHWC" and g.taps == (1, 1) and g.strides == (1, 1)
                          and all(isinstance(p, int) and p == 0 for p in g.pads))

    # ------------------------------------------------------------- structure
    def lower(self):
        v, node = self.views, self.node
        outputs = [o for o in self.kernel.outputs if o is not self.product]
        self.epilogue_nests = plan_nests(v, kernel_targets(self.program, v, outputs,
                                                           self.epilogue, self.extra))
        self.n_var, self.n = v.x.var(v.x.dim(self.g.n), "n")
        if self.pointwise:  # one gemm for the whole batch: no image loop
            self.n_var, self.n = None, v.x.const(0)
        if self.n_var is not None:
            # The image loop encloses the per-image nests: for them n is a constant, so
            # its expr claims no free loop variable (the nests place work by their own).
            self.n = Expr("var", "int64", self.n_var.id, (), frozenset())
        self.per_image = self._per_image_nests()
        self.zero = []
        if node.type == "Conv2DBackpropFilter":
            zero = v.x.const(0, self.dtype)
            self.zero = plan_nests(v, [StoreTarget(self.c_key, self.product.dims, self.dtype,
                                                   lambda index: zero)])
        operands = [self.program.storage_of(i) for i in self._gemm_inputs()]
        used = storages_used(self.zero + self.per_image + self.epilogue_nests)
        storages = [s for s in dict.fromkeys([self.c_key] + operands + used)
                    if s not in (SCRATCH, IMAGE)]
        return self._emit(storages), storages

    def _gemm_inputs(self):
        ins = self.node.inputs
        return ins[1:3] if self.node.type == "Conv2DBackpropInput" else [ins[0], ins[-1]]

    def _per_image_nests(self):
        """im2col into SCRATCH (Conv2D, the filter gradient), or col2im from it into the
        current image of the result (the input gradient), for image self.n."""
        g, v, x = self.g, self.views, self.views.x
        if self.node.type == "Conv2DBackpropInput":
            if self.pointwise:
                return []
            dims = g.join(1, g.h, g.w, g.c)[1:]
            return plan_nests(v, [StoreTarget(IMAGE, dims, self.dtype, self._col2im)])
        if self.pointwise:
            return []
        dims = [g.oh, g.ow, g.taps[0], g.taps[1], g.c]
        source = self.node.inputs[0]

        def im2col(index):
            oh, ow, kh, kw, ci = index
            hi, in_h = g.tap(v, 0, oh, kh)
            wi, in_w = g.tap(v, 1, ow, kw)
            inside = x.logical("and", in_h, in_w)
            return x.select(inside, v.view(source, g.join(self.n, hi, wi, ci)),
                            x.const(0, self.dtype))
        return plan_nests(v, [StoreTarget(SCRATCH, dims, self.dtype, im2col)])

    def _col2im(self, index):
        """dx[n, h, w, ci] = sum of the dcols taps that read (h, w)."""
        g, v, x = self.g, self.views, self.views.x
        h, w, ci = (index if g.fmt == "NHWC" else [index[1], index[2], index[0]])
        loop_vars, (kh, kw) = v.fresh_vars(g.taps)
        oh, ok_h = g.source(v, 0, h, kh)
        ow, ok_w = g.source(v, 1, w, kw)
        position = x.linear([oh, ow, kh, kw, ci], [g.oh, g.ow, g.taps[0], g.taps[1], g.c])
        tap = x.load(SCRATCH, position, self.dtype)
        body = x.select(x.logical("and", ok_h, ok_w), tap, x.const(0, self.dtype))
        return x.reduce("sum", loop_vars, body, self.dtype)

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
        em = _Emitter(b, self.views, buffers, syms, program.emit_dim, self.scalar_ops)
        self.b, self.em, self.buffers = b, em, buffers
        g = self.g
        dim = lambda d: program.emit_dim(b, d, syms)  # noqa: E731
        elem = kd.memory_type(self.dtype)
        self.P = b.mul(dim(g.oh), dim(g.ow))
        if self.pointwise:  # the batch is one [N*H*W, CI] matrix
            self.P = b.mul(self.P, dim(g.n))
        self.K = b.mul(b.mul(dim(g.taps[0]), dim(g.taps[1])), dim(g.c))
        self.HWC = b.mul(b.mul(dim(g.h), dim(g.w)), dim(g.c))
        self.PCO = b.mul(self.P, dim(g.oc))
        self.CO, self.CI = dim(g.oc), dim(g.c)
        scratch = None
        if not self.pointwise:
            nbytes = b.mul(b.mul(self.P, self.K), ir.Constant(I64, kd.itemsize(self.dtype)))
            scratch = b.call(_libc(program.llvm, "malloc"), [nbytes])
            buffers[SCRATCH] = scratch
        for nest in self.zero:
            em.emit_nest(nest)
        gemm_fn = gemm.declare_gemm(program.llvm, _blas(BLAS_DTYPES[self.dtype]), self.dtype,
                                    _blas_bits())
        loop = em._loop(self.n_var) if self.n_var is not None else nullcontext()
        with loop:
            n = em.value(self.n)
            self._image(gemm_fn, n, elem)
        if scratch is not None:
            b.call(_libc(program.llvm, "free"), [scratch])
        for nest in self.epilogue_nests:
            em.emit_nest(nest)
        b.ret(em.status())
        return fn

    def _at(self, key, n, size, elem):
        return self.b.gep(self.buffers[key], [self.b.mul(n, size)], source_etype=elem)

    def _image(self, gemm_fn, n, elem):
        """The work of image n."""
        b, em, g, t = self.b, self.em, self.g, self.node.type
        nhwc = g.fmt == "NHWC"
        call = lambda ta, tb, m, nn, k, a, bb, c, beta=0.0: gemm.call_gemm(  # noqa: E731
            b, gemm_fn, self.dtype, ta, tb, m, nn, k, a, bb, c, beta)
        ins = self.node.inputs
        if t == "Conv2DBackpropInput":
            w = self.buffers[self.program.storage_of(ins[1])]
            dy = self._at(self.program.storage_of(ins[2]), n, self.PCO, elem)
            image = self._at(self.c_key, n, self.HWC, elem)
            target = image if self.pointwise else self.buffers[SCRATCH]
            call(not nhwc, True, self.P, self.K, self.CO, dy, w, target)
            self.buffers[IMAGE] = image
            for nest in self.per_image:
                em.emit_nest(nest)
            return
        for nest in self.per_image:
            em.emit_nest(nest)
        x_image = self._at(self.program.storage_of(ins[0]), n, self.HWC, elem)
        cols = x_image if self.pointwise else self.buffers[SCRATCH]
        if t == "Conv2D":
            w = self.buffers[self.program.storage_of(ins[1])]
            out = self._at(self.c_key, n, self.PCO, elem)
            if nhwc:
                call(False, False, self.P, self.CO, self.K, cols, w, out)
            else:
                call(True, True, self.CO, self.P, self.K, w, cols, out)
        else:  # Conv2DBackpropFilter
            dy = self._at(self.program.storage_of(ins[2]), n, self.PCO, elem)
            dw = self.buffers[self.c_key]
            call(True, not nhwc, self.K, self.CO, self.P, cols, dy, dw, beta=1.0)


def _libc(module, name):
    fn = module.globals.get(name)
    if fn is None:
        ty = ir.FunctionType(PTR, [I64]) if name == "malloc" else \
            ir.FunctionType(ir.VoidType(), [PTR])
        fn = ir.Function(module, ty, name)
    return fn


def _blas(routine):
    from runtime import jit
    return jit.blas_symbol(routine)


def _blas_bits():
    from runtime import jit
    return jit.blas_int_bits()
