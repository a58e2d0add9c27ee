"""The loop emitter, shared by the backends: a kernel's store targets -> loop nests -> LLVM.

Each store target (a kernel output into its buffer, an assign into its variable) is an
Expr of the target's index. Targets are grouped into loop nests (group_nests): a target
whose dims are a prefix of a nest's dims (a keep-dims or trailing reduction result) joins
that nest and is stored at the loop level of its last index variable; other shapes get
their own nest. Within a nest (Emitter.emit_nest), reductions are hoisted to the outermost
loop level where all their free loop variables are defined (so a softmax row max is
computed once per row), values are computed before any store of the same level (an
assign may overwrite what another target of the same iteration reads), and the innermost
loop runs over the last, contiguous dim.

The emitter writes into whatever function its builder is in: the CPU's kernel functions
(backends/cpu/loop_kernel.py, which hands in a `loop_splitter` so that the outermost loops
run on the thread team) and the GPU's thread programs (backends/gpu/loop.py, which
subclasses it to flatten the parallel loops over threads and fold with atomics).
"""
from contextlib import contextmanager

from llvmlite import ir

from graphc.compiler.loops import pieces
from graphc.compiler.loops.expr import BRANCH, dims_key, loaded_storages, walk
from graphc.compiler.loops.program import MAX_ERROR_DETAILS
from graphc.framework.op_def import OpTypes
from kernels import dtypes as kd
from kernels.loops import (I32, I64, arg_better, combine_reduction, entry_alloca, for_range,
                           reduction_identity)

# whole-variable updates: a loop kernel writes the variable's buffer (the row scatters are
# opaque kernels of their own)
_ASSIGNS = OpTypes(lambda d: d.kind == "state" and d.updates_variable is not None)
# expression kinds whose operands are emitted inside a loop of their own
_OWN_LOOPS = ("reduce", "argreduce")
# A streamed target is written in whole cache lines of this many bytes, each at an
# address that is a multiple of it (Emitter._emit_streaming).
LINE_BYTES = 64
# A streamed range needing elements stored one by one before its first line or after its
# last is streamed only from this many bytes of the lead target on (_first_aligned).
PEEL_BYTES = 64 << 10


def _i64(value):
    return ir.Constant(I64, value) if isinstance(value, int) else value


def _emitted_first(e):
    """The operands emitted before `e` itself: none of a reduction (its body belongs inside
    its loop), only the condition of a branching select (each arm inside its branch)."""
    if e.kind in _OWN_LOOPS:
        return ()
    if e.kind == "select" and e.data == BRANCH:
        return e.args[:1]
    return e.args


class StoreTarget:
    """Store `value_of(index)` into every element of a buffer of `dims`.

    An accumulating target (`accumulate` = a reduction kind) instead runs over the loop
    nest of `loop_dims`: `place(nest index) -> (value, position)` says what to fold into
    which element (a column sum accumulates over the rows of the loop that computes its
    input, rather than reading that input column by column). A scatter's place may also
    give the row (of the buffer's first axis) that each element goes to, as a third item
    (`row`): a thread team may then split the nest by windows of rows (CPU parallel.py)."""

    def __init__(self, storage, dims, dtype, value_of, accumulate=None, loop_dims=None,
                 place=None):
        self.storage = storage
        self.dims = dims
        self.dtype = dtype
        self.value_of = value_of
        self.accumulate = accumulate
        self.loop_dims = loop_dims
        self.place = place
        self.index = None    # index Exprs, set when placed in a nest
        self.expr = None
        self.position = None
        self.row = None


class Nest:
    def __init__(self, views, dims):
        self.dims = dims
        self.key = dims_key(dims)
        self.vars, self.index = [], []
        for d in dims:
            var, e = views.x.var(views.x.dim(d), "i")
            self.vars.append(var)
            self.index.append(e)
        self.targets = []

    def fit(self, target):
        """The target's index in this nest's variables, or None if it does not fit."""
        key = dims_key(target.dims)
        trimmed = len(key)
        while trimmed and key[trimmed - 1] == 1:
            trimmed -= 1
        if trimmed > len(self.key) or key[:trimmed] != self.key[:trimmed]:
            return None
        return self.index[:trimmed] + [None] * (len(key) - trimmed)


def place_target(t, index):
    """Sets a placed target's expr, position and row (if its place gives one) at `index`,
    its nest's index."""
    placed = t.place(index)
    t.expr, t.position = placed[:2]
    t.row = placed[2] if len(placed) > 2 else None


def group_nests(views, targets):
    """Targets grouped into nests (largest rank first); fills target.index/expr."""
    nests = []
    for t in [t for t in targets if t.place is not None]:
        nest = next((n for n in nests if n.key == dims_key(t.loop_dims)), None)
        if nest is None:
            nest = Nest(views, t.loop_dims)
            nests.append(nest)
        place_target(t, nest.index)
        nest.targets.append(t)
    for t in sorted((t for t in targets if t.place is None), key=lambda t: -len(t.dims)):
        for nest in nests:
            index = nest.fit(t)
            if index is not None:
                break
        else:
            nest = Nest(views, t.dims)
            nests.append(nest)
            index = nest.fit(t)
        t.index = [views.x.const(0) if e is None else e for e in index]
        t.expr = t.value_of(t.index)
        t.position = views.x.linear(t.index, t.dims)
        nest.targets.append(t)
    return nests


def storages_used(nests):
    """Every storage key loaded or stored, in first-use order."""
    seen = {}
    roots = []
    for nest in nests:
        for t in nest.targets:
            seen.setdefault(t.storage, None)
            roots += [t.expr, t.position]
    for e in walk(roots):
        for storage in loaded_storages(e):
            seen.setdefault(storage, None)
    return list(seen)


def targets_by_level(nest):
    """{loop level: the nest's targets stored there} (level -1: above every loop): a
    target is stored at the level of its innermost free loop variable."""
    levels = {v.id: i for i, v in enumerate(nest.vars) if v is not None}
    by_level = {}
    for t in nest.targets:
        free = t.expr.free | t.position.free
        if t.place is not None:
            # every iteration of the nest folds (or scatters) one more term in, also the
            # loops its value does not depend on (a broadcast input summed back)
            free = set(levels)
        level = max((levels[v] for v in free), default=-1)
        by_level.setdefault(level, []).append(t)
    return by_level


class Emitter:
    """Emits expressions and loop nests with one builder.

    What the backends call: emit_nest (a whole nest), emit_level (a nest from one loop
    level down: a split loop's body, a GPU thread's share), hoist (emit the reductions
    that expressions need, where they are defined), loop (one sequential loop),
    value, store_target, ensure_error_slot / ensure_detail_slots (the status and the
    run-time error values a failing check writes) and status.

    loop_splitter: None, or an object whose `emit_loop(emitter, nest, level, by_level,
    deepest) -> bool` may emit a nest's outermost loop itself (the CPU's thread team:
    backends/cpu/parallel.ParallelLoops) and says whether it did; otherwise the loop is
    emitted here, sequentially.

    piecewise: a loop is cut where a concatenation changes pieces (loops/pieces.py), each
    piece its own loop with its selects folded away.

    streamed: the storages whose stores bypass the caches (the CPU's choice:
    backends/cpu/loop_kernel.py), each a target over its whole nest."""

    def __init__(self, builder, views, buffers, syms, dim_emitter, scalar_ops,
                 loop_splitter=None, piecewise=False, streamed=frozenset()):
        self.b = builder
        self.views = views
        self.x = views.x
        self.buffers = buffers
        self.syms = syms
        self.dim_emitter = dim_emitter
        self.scalar = scalar_ops
        self.scopes = [{}]
        self.var_values = {}
        self.defined = set()
        self.error_slot = None
        self.detail_slots = None
        self.detail_base = views.detail_base
        self.loop_splitter = loop_splitter
        self.piecewise = piecewise
        self.streamed = streamed
        self.staged = {}  # streamed storage -> (its line's block, the element's slot)
        self.looping = False  # inside a loop emitted by emit_loop

    def fork(self, builder, buffers, syms):
        """An emitter of the same kernel's views into another function (a split loop's
        body), with no values emitted yet and no splitter (the body's loops are inner)."""
        return Emitter(builder, self.views, buffers, syms, self.dim_emitter, self.scalar,
                       piecewise=self.piecewise, streamed=self.streamed)

    # ---------------------------------------------------------------- nests
    def emit_nest(self, nest):
        by_level = targets_by_level(nest)
        deepest = max(by_level, default=-1)
        self.emit_level(nest, -1, by_level, deepest)

    def emit_level(self, nest, level, by_level, deepest):
        pending = [t for lv, ts in by_level.items() if lv >= level for t in ts]
        self.hoist([e for t in pending for e in (t.expr, t.position)],
                   checks=self._loops_run(nest, level, deepest))
        here = by_level.get(level, [])
        values = [(t, self.value(t.expr), self.value(t.position)) for t in here]
        for t, value, position in values:
            self.store_target(t, value, position)
        nxt = level + 1
        if nxt > deepest:
            return
        var = nest.vars[nxt]
        if var is None:
            self.emit_level(nest, nxt, by_level, deepest)
            return
        if self.loop_splitter is not None and all(v is None for v in nest.vars[:nxt]) and \
                self.loop_splitter.emit_loop(self, nest, nxt, by_level, deepest):
            return  # the outermost loop, run by a thread team
        self.emit_loop(nest, nxt, by_level, deepest)

    def emit_loop(self, nest, level, by_level, deepest, start=None, stop=None):
        """Loop `level` of `nest` over [start, stop) (i64 values; None: its whole range),
        with what is inside it. Piecewise, it is cut into one loop per concatenated piece
        where loops/pieces.py finds that pays, each clipped to [start, stop) (and then
        not streamed: three loops a piece)."""
        outermost = not self.looping
        self.looping = True
        cut = self._cut(nest, level, by_level, deepest) if self.piecewise else None
        if cut is None:
            self._emit_range(nest, level, by_level, deepest, start, stop, self.streamed)
        for lo, hi, narrowed in cut or ():
            lo, hi = ir.Constant(I64, lo), ir.Constant(I64, hi)
            if start is not None:
                lo = self.b.select(self.b.icmp_signed(">", start, lo), start, lo)
            if stop is not None:
                hi = self.b.select(self.b.icmp_signed("<", stop, hi), stop, hi)
            self._emit_range(nest, level, narrowed, deepest, lo, hi, frozenset())
        self.looping = not outermost
        if outermost and self.streamed and any(
                t.storage in self.streamed for ts in by_level.values() for t in ts):
            # nontemporal stores are weakly ordered: they reach memory before whatever
            # follows the loop (the team's join, the next kernel) reads them
            self.b.fence("seq_cst")

    def _emit_range(self, nest, level, by_level, deepest, start, stop, streamed):
        streamed = [t for t in by_level.get(level, ()) if t.storage in streamed]
        if streamed and level == deepest:
            self._emit_streaming(nest, level, by_level, streamed, start, stop)
            return
        with self.loop(nest.vars[level], start, stop):
            self.emit_level(nest, level, by_level, deepest)

    # ------------------------------------------------------------- streaming
    def _emit_streaming(self, nest, level, by_level, streamed, start, stop):
        """The innermost loop with the `streamed` targets written by nontemporal stores of
        whole lines: a plain store first reads the line it writes into the cache (a
        fourth stream of memory traffic for out = f(a, b, c)) and then evicts lines that
        are still to be read. A line is computed element by element into a block on the
        stack (LLVM vectorizes that loop and keeps the block in a register), then stored
        at once. The elements before the lead target's first aligned line and after its
        last whole one are stored as usual; so are all of them when its address is not a
        multiple of its element size. emit_loop fences after the outermost loop."""
        var = nest.vars[level]
        start = ir.Constant(I64, 0) if start is None else _i64(start)
        stop = self.value(var.extent) if stop is None else _i64(stop)
        lead = min(streamed, key=lambda t: kd.itemsize(t.dtype))
        width = LINE_BYTES // kd.itemsize(lead.dtype)
        first = self._first_aligned(nest, level, lead, start, stop, width)
        lines = self.b.udiv(self.b.sub(stop, first), ir.Constant(I64, width))
        end = self.b.add(first, self.b.mul(lines, ir.Constant(I64, width)))
        with self.loop(var, start, first):
            self.emit_level(nest, level, by_level, level)
        blocks = {t.storage: self._line_block(t, width) for t in streamed}
        with for_range(self.b, lines, name="line") as line:
            at = self.b.add(first, self.b.mul(line, ir.Constant(I64, width)))
            with self._line_loop(var, at, width) as slot:
                self.staged = {storage: (block, slot) for storage, block in blocks.items()}
                self.emit_level(nest, level, by_level, level)
                self.staged = {}
            for t in streamed:
                self._store_line(t, nest, level, blocks[t.storage], at, width, t is lead)
        with self.loop(var, end, stop):
            self.emit_level(nest, level, by_level, level)

    @contextmanager
    def _line_loop(self, var, at, width):
        """`var` over [at, at + width), counted from 0 so that LLVM sees the constant trip
        count (and vectorizes the loop into one vector); yields the count."""
        with for_range(self.b, ir.Constant(I64, width), name="lane") as slot:
            self.var_values[var.id] = self.b.add(at, slot, flags=("nsw",))
            self.defined.add(var.id)
            self.scopes.append({})
            yield slot
            self.scopes.pop()
            self.defined.discard(var.id)

    def _address_at(self, t, nest, level, at):
        """The address of target t's element where loop `level`'s variable is `at` (an
        i64 value), through a variable of its own: values cached for the loop's variable
        belong to its iterations."""
        var, e = self.x.var(self.x.dim(nest.dims[level]), "at")
        self.var_values[var.id] = at
        index = list(t.index)
        index[level] = e
        position = self.value(self.x.linear(index, t.dims))
        return kd.element_pointer(self.b, self.buffers[t.storage], position, t.dtype)

    def _first_aligned(self, nest, level, lead, start, stop, width):
        """The first index in [start, stop] whose element of `lead` starts a line, or stop
        (all of the range stored as usual) when none does, or when the range is shorter
        than PEEL_BYTES and would need elements stored as usual before or after its lines:
        those run one at a time, and a misaligned row of 1024 floats (layer norm's, in a
        fetch array 16 bytes past a line) ran its 12 + 4 of them about as long as its 64
        lines took."""
        size = kd.itemsize(lead.dtype)
        address = self.b.ptrtoint(self._address_at(lead, nest, level, start), I64)
        gap = self.b.and_(self.b.neg(address), ir.Constant(I64, LINE_BYTES - 1))
        first = self.b.add(start, self.b.udiv(gap, ir.Constant(I64, size)))
        whole = self.b.icmp_signed("==", self.b.and_(address, ir.Constant(I64, size - 1)),
                                   ir.Constant(I64, 0))
        first = self.b.select(self.b.icmp_signed("<", first, stop), first, stop)
        clean = self.b.and_(
            self.b.icmp_signed("==", first, start),
            self.b.icmp_signed("==", self.b.urem(self.b.sub(stop, first),
                                                 ir.Constant(I64, width)),
                               ir.Constant(I64, 0)))
        long = self.b.icmp_signed(">=", self.b.sub(stop, start),
                                  ir.Constant(I64, PEEL_BYTES // size))
        return self.b.select(self.b.and_(whole, self.b.or_(clean, long)), first, stop)

    def _line_block(self, t, width):
        fn_entry = self.b.function.entry_basic_block
        saved = self.b.block
        self.b.position_before(fn_entry.instructions[0])
        block = self.b.alloca(kd.memory_type(t.dtype), size=width, name="line")
        block.align = LINE_BYTES
        self.b.position_at_end(saved)
        return block

    def _store_line(self, t, nest, level, block, at, width, aligned):
        """Stores target t's computed block at its element `at`: aligned to a line where
        t is the lead target, else only as its element size guarantees."""
        vector = ir.VectorType(kd.memory_type(t.dtype), width)
        size = kd.itemsize(t.dtype)
        values = self.b.load(block, typ=vector, align=LINE_BYTES)
        store = self.b.store(values, self._address_at(t, nest, level, at),
                             align=LINE_BYTES if aligned else size)
        store.set_metadata("nontemporal", self.b.module.add_metadata([ir.Constant(I32, 1)]))

    def _cut(self, nest, level, by_level, deepest):
        """[(lo, hi, by_level with the targets inside the loop specialized to [lo, hi))],
        or None: one loop."""
        inside = [(lv, t) for lv, ts in by_level.items() if lv >= level for t in ts]
        if not inside:
            return None
        roots = [e for _, t in inside for e in (t.expr, t.position)]
        cut = pieces.cuts(self.x, roots, nest.vars[level], innermost=level == deepest)
        if cut is None:
            return None
        result = []
        for lo, hi, specialized in cut:
            narrowed = {lv: ts for lv, ts in by_level.items() if lv < level}
            for k, (lv, t) in enumerate(inside):
                copy = StoreTarget(t.storage, t.dims, t.dtype, t.value_of, t.accumulate,
                                   t.loop_dims, t.place)
                copy.index = t.index
                copy.expr, copy.position = specialized[2 * k:2 * k + 2]
                narrowed.setdefault(lv, []).append(copy)
            result.append((lo, hi, narrowed))
        return result

    def store_target(self, t, value, position):
        """Stores (or folds, for an accumulating target) one element of target t. A placed
        (scattered) target whose buffer may be empty stores only when it is not: its
        position is an index check's, clamped into [0, size), and no clamp puts an index
        inside a buffer of size 0 (the check has recorded the error the run fails with)."""
        empty = self._maybe_empty(t) if t.place is not None else None
        if empty is None:
            self.store_element(t, value, position)
            return
        with self.b.if_then(self.b.not_(empty), likely=True):
            self.store_element(t, value, position)

    def _maybe_empty(self, t):
        """An i1 true when target t's buffer has no elements, or None when its dims are
        all known to be positive."""
        empty = None
        for d in t.dims:
            extent = self.x.dim(d)
            if extent.is_const and self.x.const_value(extent) > 0:
                continue
            zero = self.b.icmp_signed("<=", self.value(extent), ir.Constant(I64, 0))
            empty = zero if empty is None else self.b.or_(empty, zero)
        return empty

    def store_element(self, t, value, position):
        """Stores or folds one element (the GPU codegen overrides this to fold with
        atomics)."""
        staged = self.staged.get(t.storage)
        if staged is not None:  # a streamed target: into its line's block (_emit_streaming)
            block, slot = staged
            kd.store_scalar(self.b, value, kd.element_pointer(self.b, block, slot, t.dtype),
                            t.dtype)
            return
        ptr = kd.element_pointer(self.b, self.buffers[t.storage], position, t.dtype)
        if t.accumulate:
            old = kd.load_scalar(self.b, ptr, t.dtype)
            value = combine_reduction(self.b, t.accumulate, old, value, kd.is_float(t.dtype),
                                      not kd.is_unsigned(t.dtype))
        kd.store_scalar(self.b, value, ptr, t.dtype)

    @contextmanager
    def loop(self, var, start=None, stop=None):
        """A counted loop over `var` (or over [start, stop) of its range: ints or i64
        values), with its own scope of emitted values."""
        stop = self.value(var.extent) if stop is None else _i64(stop)
        start = None if start is None else _i64(start)
        with for_range(self.b, stop, start, name=var.name) as iv:
            self.var_values[var.id] = iv
            self.defined.add(var.id)
            self.scopes.append({})
            yield
            self.scopes.pop()
            self.defined.discard(var.id)

    def _loops_run(self, nest, level, deepest):
        """Whether every loop of `nest` below `level` surely runs (static extents > 0):
        only then does an index check hoisted to `level` fire exactly when the
        unhoisted one would have."""
        for var in nest.vars[level + 1:deepest + 1]:
            if var is not None and not (var.extent.is_const and
                                        self.x.const_value(var.extent) > 0):
                return False
        return True

    def hoist(self, roots, checks=False):
        """Emits (now) every reduction under `roots` that only needs defined variables,
        innermost first, so loops below reuse it. With `checks`, also the index checks
        outside reductions that only need defined variables: a check (a label's range)
        recorded in an inner loop makes its status a loop-carried value that keeps LLVM
        from vectorizing that loop."""
        order, seen, stack = [], set(), [(e, False) for e in roots]
        while stack:
            e, done = stack.pop()
            if done:
                order.append(e)
                continue
            if id(e) in seen:
                continue
            seen.add(id(e))
            stack.append((e, True))
            stack.extend((a, False) for a in e.args)
        outside = _checks_outside_reductions(roots) if checks else set()
        for e in order:
            wanted = e.kind in ("reduce", "argreduce") or id(e) in outside
            if wanted and e.free <= self.defined and self._cached(e) is None:
                self.value(e)

    # --------------------------------------------------------------- values
    def _cached(self, e):
        for scope in reversed(self.scopes):
            v = scope.get(e)
            if v is not None:
                return v
        return None

    def value(self, e):
        v = self._cached(e)
        if v is None:
            # operands first, by an explicit stack: an expression may nest as deep as the
            # graph is long (a concat of 1000 pieces is 1000 nested selects), deeper than
            # Python's recursion limit
            for d in self._uncached_operands(e):
                self.scopes[-1][d] = getattr(self, "_emit_" + d.kind)(d)
            v = self.scopes[-1][e] = getattr(self, "_emit_" + e.kind)(e)
        return v

    def _uncached_operands(self, e):
        """The operands under `e` not emitted yet, each after its own operands, left to
        right as the recursive emission would reach them. Not below a reduction: its body
        belongs inside the reduction's loop."""
        order, seen = [], {id(e)}
        stack = [(a, False) for a in reversed(_emitted_first(e))]
        while stack:
            d, done = stack.pop()
            if done:
                order.append(d)
                continue
            if id(d) in seen or self._cached(d) is not None:
                continue
            seen.add(id(d))
            stack.append((d, True))
            stack.extend((a, False) for a in reversed(_emitted_first(d)))
        return order

    def _emit_const(self, e):
        value = self.x.const_value(e)
        return ir.Constant(kd.llvm_type(e.dtype), int(value) if e.dtype == "bool" else value)

    def _emit_var(self, e):
        return self.var_values[e.data]

    def _emit_dim(self, e):
        return self.dim_emitter(self.b, self.x.dim_value(e), self.syms)

    def _binary(self, e):
        return self.value(e.args[0]), self.value(e.args[1])

    def _emit_add(self, e):
        return self.b.add(*self._binary(e))

    def _emit_sub(self, e):
        return self.b.sub(*self._binary(e))

    def _emit_mul(self, e):
        return self.b.mul(*self._binary(e))

    def _emit_floordiv(self, e):
        return self.b.sdiv(*self._binary(e))

    def _emit_mod(self, e):
        return self.b.srem(*self._binary(e))

    def _emit_min(self, e):
        a, b = self._binary(e)
        return self.b.select(self.b.icmp_signed("<", a, b), a, b)

    def _emit_max(self, e):
        a, b = self._binary(e)
        return self.b.select(self.b.icmp_signed(">", a, b), a, b)

    _ICMP = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "ge": ">=", "gt": ">"}

    def _emit_icmp(self, e):
        return self.b.icmp_signed(self._ICMP[e.data], *self._binary(e))

    def _emit_and(self, e):
        return self.b.and_(*self._binary(e))

    def _emit_or(self, e):
        return self.b.or_(*self._binary(e))

    def _emit_select(self, e):
        if e.data == BRANCH:
            return self._emit_branch(e)
        c, a, b = (self.value(x) for x in e.args)
        return self.b.select(c, a, b)

    def _emit_branch(self, e):
        """A select that computes only the arm it takes: each arm in its own block and
        scope (its values do not dominate the other arm or what follows)."""
        cond = self.value(e.args[0])
        arms = []
        with self.b.if_else(cond) as (then, otherwise):
            for block, arm in ((then, e.args[1]), (otherwise, e.args[2])):
                with block:
                    self.scopes.append({})
                    arms.append((self.value(arm), self.b.block))
                    self.scopes.pop()
        phi = self.b.phi(arms[0][0].type)
        for value, block in arms:
            phi.add_incoming(value, block)
        return phi

    def _emit_load(self, e):
        ptr = kd.element_pointer(self.b, self.buffers[e.data], self.value(e.args[0]), e.dtype)
        return kd.load_scalar(self.b, ptr, e.dtype)

    def _emit_load_one_of(self, e):
        """The buffer chosen by a chain of selects on the piece's number: it depends on
        the loops outside the piece's rows only, so LLVM hoists it out of the innermost
        loop, which stays a plain contiguous one."""
        which = self.value(e.args[1])
        base = self.buffers[e.data[0]]
        for k, storage in enumerate(e.data[1:], 1):
            chosen = self.b.icmp_signed("==", which, ir.Constant(I64, k))
            base = self.b.select(chosen, self.buffers[storage], base)
        ptr = kd.element_pointer(self.b, base, self.value(e.args[0]), e.dtype)
        return kd.load_scalar(self.b, ptr, e.dtype)

    def _emit_op(self, e):
        op_type, in_dtypes, _, site = e.data
        args = [self.value(a) for a in e.args]
        on_error = None if site is None else (lambda bad: self._record_error(bad, site))
        return self.scalar.emit_scalar(self.b, op_type, args, list(in_dtypes), e.dtype,
                                       self.x.attrs_of(e), on_error)

    def _record_error(self, bad, site, details=()):
        """Status := 1 + site where `bad` (i1) holds and no error was recorded before (the
        first failure is reported, as the reference kernels do), with its run-time values
        `details` (i64); the computation goes on clamped."""
        slot = self.ensure_error_slot()
        status = self.b.load(slot, typ=I32)
        first = self.b.and_(bad, self.b.icmp_signed("==", status, ir.Constant(I32, 0)))
        self.b.store(self.b.select(first, ir.Constant(I32, site + 1), status), slot)
        for k, value in enumerate(details[:len(self.ensure_detail_slots())]):
            dslot = self.ensure_detail_slots()[k]
            self.b.store(self.b.select(first, value, self.b.load(dslot, typ=I64)), dslot)

    def ensure_detail_slots(self):
        if self.detail_slots is None:
            self.detail_slots = []
            if self.detail_base is not None:
                for _ in range(MAX_ERROR_DETAILS):
                    slot = entry_alloca(self.b, I64, "detail")
                    saved = self.b.block
                    self.b.position_after(slot)
                    self.b.store(ir.Constant(I64, 0), slot)
                    self.b.position_at_end(saved)
                    self.detail_slots.append(slot)
        return self.detail_slots

    def _emit_check(self, e):
        index, size = (self.value(a) for a in e.args[:2])
        details = [index, size] + [self.value(a) for a in e.args[2:]]
        zero = ir.Constant(I64, 0)
        bad = self.b.or_(self.b.icmp_signed("<", index, zero),
                         self.b.icmp_signed(">=", index, size))
        self._record_error(bad, e.data, details)
        top = self.b.sub(size, ir.Constant(I64, 1))
        clamped = self.b.select(self.b.icmp_signed(">", index, top), top, index)
        return self.b.select(self.b.icmp_signed("<", clamped, zero), zero, clamped)

    def ensure_error_slot(self):
        if self.error_slot is None:
            self.error_slot = entry_alloca(self.b, I32, "status")
            saved = self.b.block
            self.b.position_after(self.error_slot)
            self.b.store(ir.Constant(I32, 0), self.error_slot)
            self.b.position_at_end(saved)
        return self.error_slot

    def status(self):
        if self.error_slot is None:
            return ir.Constant(I32, 0)
        for k, slot in enumerate(self.detail_slots or ()):  # for the runtime's message
            ptr = self.b.gep(self.syms, [ir.Constant(I64, self.detail_base + k)],
                             source_etype=I64)
            self.b.store(self.b.load(slot, typ=I64), ptr)
        return self.b.load(self.error_slot, typ=I32)

    # ------------------------------------------------------------ reductions
    def _reduction_loops(self, var_ids, body_fn):
        """Nested loops over var_ids calling body_fn() innermost (reductions that depend
        on the variables opened so far are hoisted as each opens)."""
        if not var_ids:
            body_fn()
            return
        with self.loop(self.x.vars[var_ids[0]]):
            self._reduction_loops(var_ids[1:], body_fn)

    def _emit_reduce(self, e):
        kind, ids = e.data
        body = e.args[0]
        self.hoist([body])
        ty = kd.llvm_type(e.dtype)
        is_float = kd.is_float(e.dtype)
        signed = not kd.is_unsigned(e.dtype)
        acc = entry_alloca(self.b, ty, "acc")
        self.b.store(reduction_identity(kind, ty, is_float, signed), acc)

        def step():
            self.hoist([body])
            x = self.value(body)
            self.b.store(combine_reduction(self.b, kind, self.b.load(acc, typ=ty), x, is_float,
                                           signed), acc)
        self._reduction_loops(list(ids), step)
        return self.b.load(acc, typ=ty)

    def _emit_argreduce(self, e):
        kind, var_id = e.data
        body = e.args[0]
        self.hoist([body])
        ty = kd.llvm_type(body.dtype)
        is_float = kd.is_float(body.dtype)
        signed = not kd.is_unsigned(body.dtype)
        best = entry_alloca(self.b, ty, "best")
        where = entry_alloca(self.b, I64, "where")
        first = entry_alloca(self.b, kd.I1, "first")
        self.b.store(ir.Constant(I64, 0), where)
        self.b.store(ir.Constant(kd.I1, 1), first)
        self.b.store(ir.Constant(ty, None), best)

        def step():
            self.hoist([body])
            x = self.value(body)
            old = self.b.load(best, typ=ty)
            take = self.b.or_(self.b.load(first, typ=kd.I1),
                              arg_better(self.b, kind, x, old, is_float, signed))
            self.b.store(self.b.select(take, x, old), best)
            position = self.b.select(take, self.var_values[var_id], self.b.load(where, typ=I64))
            self.b.store(position, where)
            self.b.store(ir.Constant(kd.I1, 0), first)
        self._reduction_loops([var_id], step)
        return self.b.load(where, typ=I64)


def _checks_outside_reductions(roots):
    """ids of the index checks under `roots` reached without entering a reduction (whose
    loops may run zero times, so that a check inside one may never fire)."""
    found, seen, stack = set(), set(), list(roots)
    while stack:
        e = stack.pop()
        if id(e) in seen or e.kind in ("reduce", "argreduce"):
            continue
        seen.add(id(e))
        if e.kind == "check":
            found.add(id(e))
        stack.extend(e.args)
    return found


def kernel_targets(program, views, kernel_outputs, nodes, extra_stores=()):
    """Store targets of a kernel: each of its outputs into its buffers (fetch, arena),
    and each assign among `nodes` into its variable. Values the kernel computes but does
    not list as outputs (cheap nodes duplicated into several kernels) are never written:
    their buffer, if any, belongs to the kernel that owns them."""
    targets = []

    def add(storage, value, dims, dtype):
        targets.append(StoreTarget(storage, dims, dtype,
                                   lambda index, v=value: views.view(v, index)))

    for value in kernel_outputs:
        for storage in program.stores_of(value):
            add(storage, value, value.dims, value.dtype.name)
    for node in nodes:
        if node.type in _ASSIGNS:
            ref = node.inputs[0]
            add(("var", ref.name), node.outputs[0], ref.dims, ref.dtype.name)
    for storage, value in extra_stores:
        add(storage, value, value.dims, value.dtype.name)
    return targets


def main_node(kernel, op_type):
    """The node of type `op_type` a kernel is built around (fusion's `main`, else the
    first such node)."""
    main = getattr(kernel, "main", None)
    if main is not None and main.type == op_type:
        return main
    return next(n for n in kernel.nodes if n.type == op_type)
