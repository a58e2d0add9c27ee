"""memory_planning: place every intermediate buffer of the kernel schedule in one arena.

Sets `module.memory_plan`, a MemoryPlan. Planned are the kernel outputs that are not
module outputs (those are written straight into the fetch arrays the runtime allocates);
feeds, constants and variables have their own memory. Sizes and offsets are ints or SymDim
expressions of the feed symbols, valid for every value of the symbols:
- size: dims product times the element size (bool is 1 byte), rounded up to 64 bytes;
  a stack growing during the run (compiler/regions.py) has its header here, its rows on
  the heap, live to the end of the schedule (the entry frees the rows it points to).
- liveness: from the kernel that writes the value to the last kernel that reads it
  (indices into module.kernels), or reads an alias of it (fusion's `module.aliases`).
- in place: an elementwise loop kernel (all its nodes elementwise) writes an output over
  an input buffer of the same dims and dtype when this kernel is that input's last use:
  element i of the input is read only to compute element i of the output, before it is
  stored. Such buffers share one storage (same offset): `inplace_of` names the input.
  Codegen must not mark two pointers of one storage noalias (they are one pointer).
- placement: storages biggest first, each at the lowest gap between the storages placed
  before it whose lives overlap its own (an interval index over the schedule finds those
  in O(log T + k); one sweep in offset order finds the gap), checked exactly (no two
  buffers live at the same time overlap for any symbol values), else on top of them.
  Static sizes are compared as ints; symbolic ones coefficient by coefficient.
- scratch: a kernel that needs temporary memory while it runs (on the CPU, a convolution's
  im2col columns) gets a buffer live during that kernel only, placed like the others;
  `memory_plan.scratch` = {kernel index: Buffer}. How much each kernel needs is the
  backend's to say: the `scratch_bytes(kernel) -> int | SymDim` it hands in (0: none).
- reuse=False (the "memory_planning" switch off, to rule the planner out when hunting a
  wrong number): every storage is placed as if live for the whole schedule, so no two
  share memory, and nothing is written in place.
The arena size is the max of offset + size. stats: "arena", "sum_of_buffers" (no reuse at
all), "lower_bound" (the peak of the bytes live at one time: no placement beats it).
Modules with data-dependent dims (not static-shaped) get no plan (memory_plan = None).
A step of the schedule stage, after fusion (it plans over `module.kernels`).
"""
import numpy as np

from graphc import errors
from graphc.compiler.op_kinds import kind_of
from graphc.compiler.regions import GROWABLE_HEADER_BYTES, growable
from graphc.compiler.schedule.kernel import dims_equal
from graphc.framework.symbolic import SymDim, as_expr, evaluate_json
from runtime import memory

ALIGNMENT = 64
FALLBACK_CANDIDATES = 8


class Buffer:
    __slots__ = ("offset", "size", "live", "inplace_of")

    def __init__(self, offset, size, live, inplace_of=None):
        self.offset = offset
        self.size = size
        self.live = live              # (first kernel index, last kernel index)
        self.inplace_of = inplace_of  # the input Value whose storage it reuses, or None

    def __repr__(self):
        extra = f" in place of {self.inplace_of.ref}" if self.inplace_of is not None else ""
        return f"<Buffer @{self.offset} {self.size} B live {self.live}{extra}>"


class MemoryPlan:
    def __init__(self, buffers, arena_bytes, stats):
        self.buffers = buffers        # Value -> Buffer, in order of definition
        self.arena_bytes = arena_bytes
        self.stats = stats

    def to_text(self):
        lines = [f"arena {self.arena_bytes} bytes (sum of buffers "
                 f"{self.stats['sum_of_buffers']}, peak live {self.stats['lower_bound']})"]
        for v, b in self.buffers.items():
            extra = f" in place of {b.inplace_of.ref}" if b.inplace_of is not None else ""
            lines.append(f"  {v.ref}: offset {b.offset} size {b.size} live "
                         f"{b.live[0]}..{b.live[1]}{extra}")
        for t, b in sorted(getattr(self, "scratch", {}).items()):
            lines.append(f"  scratch of kernel {t}: offset {b.offset} size {b.size}")
        return "\n".join(lines) + "\n"

    __str__ = to_text


def run(module, scratch_bytes, reuse=True):
    """Sets module.memory_plan for the schedule in module.kernels; scratch_bytes: the
    backend's scratch memory per kernel."""
    if not module.is_static_shaped():
        module.memory_plan = None
        return {"buffers": 0, "reused": 0}
    plan = module.memory_plan = plan_memory(module.kernels, module.outputs,
                                            getattr(module, "aliases", None), scratch_bytes,
                                            reuse)
    _refuse_oversized(list(plan.buffers) + list(module.outputs))
    return {"buffers": len(plan.buffers),
            "reused": sum(b.inplace_of is not None for b in plan.buffers.values())}


def _refuse_oversized(values):
    """ResourceExhaustedError naming the op of a buffer or fetch that the sizes of the run
    being compiled make larger than the machine's memory: refused before native code runs
    (a huge value that fusion keeps out of memory, e.g. broadcast then reduced, is fine)."""
    for v in values:
        if v.node.type in _OWN_MEMORY:
            continue
        message = memory.oom_message([d.hint if isinstance(d, SymDim) else d for d in v.dims],
                                     v.dtype.np)
        if message is not None:
            raise errors.ResourceExhaustedError(
                None, None, f"{message}\n\t [[node {v.node.describe()}]]")


_OWN_MEMORY = ("Parameter", "Const", "VariableV2")  # feeds, constants, variables


def plan_memory(kernels, fetched, aliases, scratch_bytes, reuse=True):
    fetched = set(fetched)
    aliases = aliases or {}
    first, last = {}, {}
    for t, k in enumerate(kernels):
        for v in k.inputs:
            v = aliases.get(v, v)  # a reader of an alias reads its input's buffer
            if v in first:
                last[v] = t
        for v in k.outputs:
            if v not in fetched:
                first[v] = last[v] = t
    for v in first:
        if growable(v):  # the entry empties its header before the first kernel (no value
            # before it may share the header's place) and frees its rows after the last
            first[v], last[v] = 0, len(kernels) - 1
    hints = symbol_hints(first)
    size = {v: buffer_bytes(v, hints) for v in first}
    inplace = _inplace_pairs(kernels, first, last) if reuse else {}
    # storages: a value and the values written in place over it
    root = {}
    for v in first:
        root[v] = root[inplace[v]] if v in inplace else v
    span = {}
    for v in first:
        r = root[v]
        lo, hi = span.get(r, (first[v], last[v]))
        span[r] = (min(lo, first[v]), max(hi, last[v]))
    scratch = _scratch_requests(kernels, scratch_bytes, hints)
    for key, nbytes in scratch.items():
        span[key], size[key] = (key[1], key[1]), nbytes
    everything = (0, max(len(kernels) - 1, 0))
    offset = _place(span if reuse else {r: everything for r in span}, size, hints)
    arena = exact_max([offset[r] + size[r] for r in span])
    buffers = {v: Buffer(offset[root[v]], size[v], (first[v], last[v]), inplace.get(v))
               for v in sorted(first, key=first.get)}
    peak = _peak_live(span, size, len(kernels))
    stats = {"arena": arena, "sum_of_buffers": _sum(size.values()), "lower_bound": peak}
    plan = MemoryPlan(buffers, arena, stats)
    plan.scratch = {key[1]: Buffer(offset[key], size[key], span[key]) for key in scratch}
    return plan


def _scratch_requests(kernels, scratch_bytes, hints):
    """{("scratch", kernel index): bytes} of the kernels that need scratch memory while
    they run (the backend's scratch_bytes says how much)."""
    out = {}
    for t, k in enumerate(kernels):
        n = _plain(scratch_bytes(k))
        if isinstance(n, SymDim) or n > 0:
            out[("scratch", t)] = _round_bytes(n, hints)
    return out


def _place(span, size, hints):
    """Offsets for storages with lives `span` and sizes `size`: the biggest first (by the
    sizes at the hints), each at the lowest offset (at the hints) that provably keeps it
    clear of every storage placed before it whose life overlaps, else on top of them (at
    a max-free upper bound of their ends, so that offsets stay small expressions).

    The rivals (placed storages whose lives overlap) come from an interval index over the
    schedule, and the lowest gap from one sweep over them in offset order: O(k log k) for
    k rivals, where comparing each candidate with each rival was O(k^2) exact checks."""
    if not any(isinstance(n, SymDim) for n in size.values()):
        return _place_static(span, size)
    offset = {}
    index = _LifeIndex(1 + max((hi for _, hi in span.values()), default=0))
    for r in sorted(span, key=lambda r: (-_hint(size[r]), span[r][0])):
        lo, hi = span[r]
        rivals = index.overlapping(lo, hi)
        offset[r] = _lowest_gap(size[r], [(offset[p], size[p]) for p in rivals], hints)
        index.add(r, lo, hi)
    return offset


def _place_static(span, size):
    """_place for int sizes, its sweep in numpy: in offset order, the gap before a rival
    starts at the running max of the ends before it; the first rival starting at least
    `size` above that closes the lowest gap (else the top of them all)."""
    order = sorted(span, key=lambda r: (-size[r], span[r][0]))
    starts = np.zeros(len(order), np.int64)
    ends = np.zeros(len(order), np.int64)
    index = _LifeIndex(1 + max((hi for _, hi in span.values()), default=0))
    offset = {}
    for i, r in enumerate(order):
        lo, hi = span[r]
        rivals = np.array(index.overlapping(lo, hi), np.int64)
        c = 0
        if len(rivals):
            by_start = rivals[np.argsort(starts[rivals], kind="stable")]
            reach = np.maximum(np.maximum.accumulate(ends[by_start]), 0)
            before = np.concatenate(([0], reach[:-1]))
            fits = np.flatnonzero(starts[by_start] >= before + size[r])
            c = int(before[fits[0]]) if len(fits) else int(reach[-1])
        starts[i], ends[i] = c, c + size[r]
        offset[r] = c
        index.add(i, lo, hi)
    return offset


def _lowest_gap(nbytes, taken, hints):
    """The lowest offset (at the hints) where `nbytes` provably fits clear of each
    (offset, size) of `taken`, else a max-free upper bound of their ends."""
    c = 0
    for off, n in sorted(taken, key=lambda t: _hint(t[0])):
        if _hint(off) >= _hint(c) + _hint(nbytes):
            break  # this one and all after it start above the gap at the hints
        if _hint(off) + _hint(n) > _hint(c):
            c = _plain(off + n)
    if not any(isinstance(x, SymDim) for x in (c, nbytes)) and \
            not any(isinstance(off, SymDim) or isinstance(n, SymDim) for off, n in taken):
        return c  # all ints: the sweep is exact
    ends = sorted((_plain(off + n) for off, n in taken), key=_hint)
    # the hint sweep's gap may not be provable for all symbol values: a few candidates
    # above it, then the top; each check is O(k), so the count is bounded
    higher = [e for e in ends if _hint(e) > _hint(c)][:FALLBACK_CANDIDATES]
    for cand in [c] + higher:
        if all(_disjoint(cand, nbytes, off, n) for off, n in taken):
            return cand
    return upper_max(ends, hints)


class _LifeIndex:
    """Storages by their lives [lo, hi] over the schedule's T steps, answering "which
    overlap [lo, hi]" in O(log T + answer): those alive at lo (a segment tree of lives,
    each stored at O(log T) nodes covering it), plus those starting in (lo, hi] (a
    segment tree of start points, each stored at its O(log T) ancestors)."""

    def __init__(self, steps):
        self.n = 1 << max(steps - 1, 0).bit_length()
        self.cover = {}
        self.starts = {}

    def add(self, item, lo, hi):
        a, b = lo + self.n, hi + self.n + 1
        while a < b:
            if a & 1:
                self.cover.setdefault(a, []).append(item)
                a += 1
            if b & 1:
                b -= 1
                self.cover.setdefault(b, []).append(item)
            a, b = a >> 1, b >> 1
        i = lo + self.n
        while i:
            self.starts.setdefault(i, []).append(item)
            i >>= 1

    def overlapping(self, lo, hi):
        out = []
        i = lo + self.n
        while i:
            out.extend(self.cover.get(i, ()))
            i >>= 1
        a, b = lo + 1 + self.n, hi + self.n + 1
        while a < b:
            if a & 1:
                out.extend(self.starts.get(a, ()))
                a += 1
            if b & 1:
                b -= 1
                out.extend(self.starts.get(b, ()))
            a, b = a >> 1, b >> 1
        return out


def _disjoint(a, a_size, b, b_size):
    """True when [a, a+a_size) and [b, b+b_size) provably do not overlap."""
    return _provably_le(a + a_size, b) or _provably_le(b + b_size, a)


def _provably_le(x, y):
    """x <= y for all non-negative symbol values: y - x, compared coefficient by
    coefficient (no expression is built)."""
    if not isinstance(x, SymDim) and not isinstance(y, SymDim):
        return x <= y
    diff = dict(_terms(y))
    for m, c in _terms(x).items():
        diff[m] = diff.get(m, 0) - c
    return all(c >= 0 for c in diff.values()) and all(
        _nonnegative_atom(atom) for m, c in diff.items() if c for atom, _ in m)


def _terms(x):
    if isinstance(x, SymDim):
        return x.terms
    return {(): int(x)} if x else {}


def _hint(x):
    return x.hint if isinstance(x, SymDim) else x


def _inplace_pairs(kernels, first, last):
    """{output: input} for outputs written over an input buffer at its last use."""
    pairs = {}
    for t, k in enumerate(kernels):
        if k.kind != "loop" or not all(kind_of(n) == "elementwise" for n in k.nodes):
            continue
        taken = set()
        for o in k.outputs:
            if o not in first or not dims_equal(o.dims, k.dims):
                continue
            for x in k.inputs:
                if x in first and last[x] == t and x not in taken and x.dtype == o.dtype \
                        and dims_equal(x.dims, o.dims):
                    pairs[o] = x
                    taken.add(x)
                    break
    return pairs


def buffer_bytes(value, hints=None):
    """The value's size in bytes rounded up to a multiple of ALIGNMENT: an int, or a SymDim.

    A symbolic size is rounded term by term: each coefficient up to a multiple of 64 (at
    most 63 bytes per row more than exact, and sizes stay linear in the symbols' monomials,
    so that the planner can compare them). `hints` ({symbol: hint}) gives the rounded
    expression its exact hint (its size for the feeds the module was compiled for)."""
    if growable(value):  # its rows live on the heap, found through a header here
        return _round_up(GROWABLE_HEADER_BYTES)
    n = value.dtype.np.itemsize if value.dtype.name != "bool" else 1
    for d in value.dims:
        n = n * (SymDim.symbol(d, 1) if isinstance(d, str) else d)
    return _round_bytes(n, hints)


def _round_bytes(n, hints):
    n = _plain(n)
    if not isinstance(n, SymDim):
        return _round_up(n)
    if _nonnegative(n):
        rounded = SymDim({m: _round_up(c) for m, c in n.terms.items()}, 0)
    else:
        # A term of negative value (8 * -floordiv(-h, 2) * w: a SAME output's ceil(h / 2)
        # rows) rounds its coefficient up towards 0, below its size: round the whole.
        rounded = (n + (ALIGNMENT - 1)) // ALIGNMENT * ALIGNMENT
    try:
        rounded.hint = evaluate_json(rounded.to_json(), hints or {})
    except KeyError:  # a symbol without a hint: an upper bound will do for sorting
        rounded.hint = _round_up(n.hint) * 2
    return rounded


def symbol_hints(values):
    """{symbol: hint} from the dims of `values` that are a lone symbol."""
    hints = {}
    for v in values:
        for d in v.dims:
            if isinstance(d, SymDim) and len(d.terms) == 1:
                (mono, coeff), = d.terms.items()
                if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and \
                        isinstance(mono[0][0], str):
                    hints[mono[0][0]] = d.hint
    return hints


def _round_up(n):
    return -(-n // ALIGNMENT) * ALIGNMENT


def _sum(values):
    total = 0
    for v in values:
        total = total + v
    return _plain(total)


def _plain(x):
    if isinstance(x, SymDim) and x.constant() is not None:
        return x.constant()
    return x


def _peak_live(span, size, steps):
    """The max over the schedule's steps of the bytes live at that step: one sweep of
    running sums (a storage's size added at its first step, taken off after its last)."""
    delta = [0] * (steps + 1)
    for r, (lo, hi) in span.items():
        delta[lo] = delta[lo] + size[r]
        delta[hi + 1] = delta[hi + 1] - size[r]
    live, sums = 0, []
    for t in range(steps):
        live = _plain(live + delta[t])
        sums.append(live)
    return exact_max(sums)


def exact_max(exprs):
    """max of ints and SymDims: those provably below another are dropped, the rest make a
    balanced tree of max atoms (usually none are left). The ints reduce to their max first, and
    each expression is compared with the kept ones only (a handful, not all pairs)."""
    exprs = [_plain(e) for e in exprs]
    ints = [e for e in exprs if not isinstance(e, SymDim)]
    kept = [max(ints)] if ints else []
    for e in exprs:
        if not isinstance(e, SymDim) or any(_provably_le(e, f) for f in kept):
            continue
        kept = [f for f in kept if not _provably_le(f, e)] + [e]
    if not kept:
        return 0
    # pairwise, as a balanced tree: a chain of n max atoms nests n deep, and files (and
    # their verifier's depth limit) carry these expressions
    while len(kept) > 1:
        kept = [sym_max(*kept[i:i + 2]) if i + 1 < len(kept) else kept[i]
                for i in range(0, len(kept), 2)]
    return kept[0]


def upper_max(exprs, hints):
    """A max-free expression provably >= 0 and >= each of exprs: the coefficient-wise
    max of the polynomials (exact for ints)."""
    exprs = [_plain(e) for e in exprs]
    if not any(isinstance(e, SymDim) for e in exprs):
        return max(exprs, default=0)
    terms = {}
    for e in exprs:
        for m, c in as_expr(e).terms.items():
            terms[m] = max(terms.get(m, 0), c)
    result = SymDim(terms, 0)
    try:
        result.hint = evaluate_json(result.to_json(), hints)
    except KeyError:
        result.hint = max(_hint(e) for e in exprs)
    return result


def sym_max(a, b):
    """max(a, b) for ints and SymDims; the larger one when that holds for all symbol values
    (their difference is a constant, or a sum of provably non-negative terms)."""
    a, b = _plain(a), _plain(b)
    if not isinstance(a, SymDim) and not isinstance(b, SymDim):
        return max(a, b)
    d = as_expr(a) - as_expr(b)
    if _nonnegative(d):
        return a
    if _nonnegative(-d):
        return b
    return as_expr(a).maximum(b)


def _nonnegative(e):
    """True when expression e is >= 0 for all non-negative symbol values."""
    return all(c >= 0 for c in e.terms.values()) and all(
        _nonnegative_atom(atom) for mono in e.terms for atom, _ in mono)


def _nonnegative_atom(atom):
    if isinstance(atom, str):
        return True
    op, a, b = atom
    a, b = SymDim(dict(a), 0), SymDim(dict(b), 0)
    if op == "max":
        return _nonnegative(a) or _nonnegative(b)
    return _nonnegative(a) and _nonnegative(b)  # floordiv, mod of non-negatives

