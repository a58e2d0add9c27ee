"""Index-set splitting: the innermost loop cut where a concatenation changes pieces.

A concatenation along the last axis is a chain of selects on the loop index
(op_lowering._stitch: `i < 256 ? f(i) : i < 512 ? g(i - 256) : ...`), each piece's load
index clamped into its part. Emitted as one loop, every element computes every piece
and the clamped loads are gathers, so LSTM's gate gradients (four pieces) cost four
times their work and do not vectorize. Cut into one loop per piece, each over a static
range, the comparisons are constants there: the selects fold to the one piece, the
clamps to the plain index (interval arithmetic proves them no-ops), and each loop is a
plain contiguous one.

`breakpoints` finds where to cut (comparisons of the loop variable with a constant);
`specialize` rebuilds expressions for the variable limited to [lo, hi). Reductions are
kept as they are (their bodies run over their own loops, hoisted elsewhere).

`cuts` decides for a loop at any depth: the innermost with up to MAX_PIECES pieces as
before, and any loop, over any number of pieces, whose pieces' code together stays within
CODE_GROWTH times the uncut loop's (a concatenation of T steps along an outer axis, where
each piece is a plain copy of its step; runs of steps alike, slices of one tensor or
buffers of one layout, are one piece already: op_lowering._pieces). Uncut, a join of many pieces is a bisection of
branches (op_lowering._choose_piece), which LLVM's vectorizer if-converts back into
selects over every piece's address: O(pieces) per row, O(pieces^2) per join.
"""

from graphc.compiler.loops.expr import BRANCH

# More pieces than this stay one loop unless their code stays within CODE_GROWTH of the
# loop's: each piece is a copy of the loop's code.
MAX_PIECES = 16
CODE_GROWTH = 2
# A cut makes at most this many loops: LLVM's time over one function grows faster than
# its loops (a concatenation of 600 two-element pieces cut into 600 loops took 17 s of
# LLVM, of 1200 pieces 71 s; of 300, 1.4 s). Past it, neighbouring pieces share a loop,
# which keeps the bisection among its own pieces only (1200 pieces in 64 loops: 2 s).
MAX_LOOPS = 64
_OPAQUE = ("reduce", "argreduce")


def cuts(x, roots, var, innermost):
    """[(lo, hi, roots specialized to [lo, hi))] covering var's range, or None to keep one
    loop. Each piece is specialized and measured in turn, stopping at the budget, so a cut
    refused costs no more than the budget."""
    points = breakpoints(x, roots, var, limit=None)
    if not points:
        return None
    if len(points) >= MAX_LOOPS:
        step = -(-(len(points) + 1) // MAX_LOOPS)
        points = points[step - 1::step]
    few = innermost and len(points) < MAX_PIECES
    budget = CODE_GROWTH * _code_size(roots)
    result, size = [], 0
    for lo, hi in ranges(points, x.const_value(var.extent)):
        narrowed = specialize(x, roots, var, lo, hi)
        size += _code_size(narrowed)
        if size > budget and not few:
            return None
        result.append((lo, hi, narrowed))
    return result


def _code_size(roots):
    """Distinct expressions a loop over `roots` emits (a reduction's body is emitted once,
    outside the loop, however many pieces use it)."""
    stack, seen = list(roots), set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if e.kind not in _OPAQUE:
            stack.extend(e.args)
    return len(seen)


def breakpoints(x, roots, var, limit=MAX_PIECES):
    """Sorted cut points strictly inside (0, extent) of the loop variable `var` (static
    extent), from comparisons `var op constant` under `roots`; [] when there are none
    or `limit` pieces or more."""
    if not var.extent.is_const:
        return []
    extent = x.const_value(var.extent)
    points = set()
    stack, seen = list(roots), set()
    while stack:
        e = stack.pop()
        if id(e) in seen or e.kind in _OPAQUE:
            continue
        seen.add(id(e))
        if e.kind == "icmp" and e.data in ("lt", "le", "gt", "ge"):
            a, b = e.args
            if _is_var(a, var) and b.is_const:
                # var < c and var >= c change at c; var <= c and var > c at c + 1
                points.add(x.const_value(b) + (e.data in ("le", "gt")))
        stack.extend(e.args)
    points = sorted(p for p in points if 0 < p < extent)
    return points if limit is None or len(points) < limit else []


def ranges(points, extent):
    bounds = [0] + list(points) + [extent]
    return list(zip(bounds[:-1], bounds[1:]))


def specialize(x, roots, var, lo, hi):
    """`roots` rebuilt for `var` in [lo, hi): comparisons, mins and maxes that the
    ranges decide become constants or their deciding operand."""
    memo, spans = {}, {}

    def span(e):
        """(least, greatest) value of index expr e, or None when unknown."""
        if id(e) in spans:
            return spans[id(e)]
        s = None
        if e.is_const and isinstance(x.const_value(e), int):
            s = (x.const_value(e),) * 2
        elif e.kind == "var":
            v = x.vars[e.data]
            if v is var:
                s = (lo, hi - 1)
            elif v.extent.is_const:
                s = (0, x.const_value(v.extent) - 1)
        elif e.kind in ("add", "sub", "min", "max"):
            a, b = (span(arg) for arg in e.args)
            if a is not None and b is not None:
                s = {"add": (a[0] + b[0], a[1] + b[1]), "sub": (a[0] - b[1], a[1] - b[0]),
                     "min": (min(a[0], b[0]), min(a[1], b[1])),
                     "max": (max(a[0], b[0]), max(a[1], b[1]))}[e.kind]
        spans[id(e)] = s
        return s

    # operands before their users by an explicit stack: the expressions of a long
    # elementwise chain nest deeper than Python's recursion limit. A select's condition
    # goes first: when the range decides it, only the arm taken is visited, so a piece of
    # a bisection over T pieces costs log T, not T.
    stack = [(r, _VISIT) for r in roots]
    while stack:
        e, state = stack.pop()
        if state == _VISIT and id(e) in memo:
            continue
        if not e.args or e.kind in _OPAQUE:
            memo[id(e)] = e
        elif state == _VISIT and e.kind == "select":
            stack.append((e, _CONDITION_DONE))
            stack.append((e.args[0], _VISIT))
        elif state == _CONDITION_DONE:
            cond = memo[id(e.args[0])]
            if cond.is_const:
                taken = e.args[1] if x.const_value(cond) else e.args[2]
                stack.append((e, ("taken", taken)))
                stack.append((taken, _VISIT))
            else:
                stack.append((e, _READY))
                stack.extend((a, _VISIT) for a in e.args[1:])
        elif isinstance(state, tuple):
            memo[id(e)] = memo[id(state[1])]
        elif state == _READY:
            memo[id(e)] = _fold(x, e, [memo[id(a)] for a in e.args], span)
        else:
            stack.append((e, _READY))
            stack.extend((a, _VISIT) for a in e.args)
    return [memo[id(r)] for r in roots]


_VISIT, _CONDITION_DONE, _READY = "visit", "condition done", "ready"


def _fold(x, e, args, span):
    if e.kind == "icmp" and e.data in ("lt", "le", "gt", "ge"):
        decided = _decide(e.data, span(args[0]), span(args[1]))
        if decided is not None:
            return x.const(decided, "bool")
    elif e.kind == "select":
        return x.select(*args, branch=e.data == BRANCH)
    elif e.kind in ("and", "or"):
        return x.logical(e.kind, *args)
    elif e.kind in ("min", "max"):
        a, b = span(args[0]), span(args[1])
        if a is not None and b is not None:
            first_smaller = a[1] <= b[0]
            if first_smaller or b[1] <= a[0]:
                keep_first = first_smaller == (e.kind == "min")
                return args[0] if keep_first else args[1]
    elif e.kind in ("add", "sub", "mul"):
        return getattr(x, e.kind)(*args)
    if all(a is b for a, b in zip(args, e.args)):
        return e
    return x.with_args(e, args)


def _decide(op, a, b):
    """The comparison's outcome when the spans decide it, else None."""
    if a is None or b is None:
        return None
    if op in ("gt", "ge"):
        return _decide({"gt": "lt", "ge": "le"}[op], b, a)
    if op == "lt":
        return True if a[1] < b[0] else False if a[0] >= b[1] else None
    return True if a[1] <= b[0] else False if a[0] > b[1] else None  # le


def _is_var(e, var):
    return e.kind == "var" and e.data == var.id
