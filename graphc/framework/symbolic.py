"""Symbolic dimensions for compiling graphs whose feeds have unknown (None) dims.

When the compiler lowers a graph, each unknown dim of a feed becomes a `SymDim`: a
polynomial over symbols (e.g. `x.0`, dim 0 of feed x) that also carries a *hint*, its
value for the feeds of the run being compiled. The ops' own shape inference then runs
unchanged on shapes holding SymDims, so every intermediate dim becomes an expression of
the feed dims, which the compiled code computes at run time.

Shape inference branches on dims (`d == 1`, `a != b`, `int(d)`). Each such decision is
taken on the hints and recorded as a *guard*; an executable is reused only for feeds
whose dims satisfy all its guards (torch.compile's dynamic shapes work the same way).
Typical guards are "x.0 != 1" (no broadcasting of the batch), so a new batch size, e.g.
the last partial batch of an epoch, reuses the code.
Outside a GuardSet (passes comparing IR dims) `==`/`!=` are structural: expressions that
differ are unequal, whatever their hints; `check_guards(guards, env)` tests new sizes.

Expressions are sums of integer-coefficient monomials over atoms; an atom is a symbol or
an opaque floordiv/mod/max of expressions. `to_json()` gives a plain-data form that the
runtime evaluates without importing graphc.
"""
import threading

# The plain-data form is evaluated by the runtime's evaluator (graphc may import runtime,
# not the reverse): one implementation for compiled code's shapes and the compiler's.
from runtime.shapes import evaluate as evaluate_json
from runtime.shapes import guard_holds

import numpy as np

_local = threading.local()


class GuardSet:
    """Collects the decisions made on hints while a compile is in progress."""

    def __init__(self):
        self.guards = []  # (lhs json, op, rhs json, outcome)

    def __enter__(self):
        self._outer = getattr(_local, "guards", None)
        _local.guards = self
        return self

    def __exit__(self, *exc):
        _local.guards = self._outer

    def record(self, lhs, op, rhs, outcome):
        entry = (as_expr(lhs).to_json(), op, as_expr(rhs).to_json(), bool(outcome))
        if entry not in self.guards:
            self.guards.append(entry)


def _record(lhs, op, rhs, outcome):
    gs = getattr(_local, "guards", None)
    if gs is not None:
        gs.record(lhs, op, rhs, outcome)
    return outcome


class SymDim:
    """A dim known at run time: `terms` maps monomials to int coefficients; a monomial is
    a sorted tuple of (atom, power), an atom a symbol name or an opaque (op, a, b) tuple."""

    __slots__ = ("terms", "hint", "_key")

    def __init__(self, terms, hint):
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self.hint = int(hint)
        self._key = None

    @staticmethod
    def symbol(name, hint):
        return SymDim({((name, 1),): 1}, hint)

    # ------------------------------------------------------------ structure
    @property
    def key(self):
        if self._key is None:
            self._key = tuple(sorted(self.terms.items(), key=repr))
        return self._key

    def constant(self):
        """The int value when the expression has no symbols, else None."""
        if not self.terms:
            return 0
        if list(self.terms) == [()]:
            return self.terms[()]
        return None

    def symbols(self):
        out = set()
        for mono in self.terms:
            for atom, _ in mono:
                out |= _atom_symbols(atom)
        return out

    # ----------------------------------------------------------- arithmetic
    def __add__(self, other):
        if not _dimlike(other):
            return NotImplemented
        other = as_expr(other)
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return simplify(SymDim(terms, self.hint + other.hint))

    __radd__ = __add__

    def __neg__(self):
        return SymDim({m: -c for m, c in self.terms.items()}, -self.hint)

    def __sub__(self, other):
        if not _dimlike(other):
            return NotImplemented
        return self + (-as_expr(other))

    def __rsub__(self, other):
        if not _dimlike(other):
            return NotImplemented
        return as_expr(other) + (-self)

    def __mul__(self, other):
        if not _dimlike(other):
            return NotImplemented
        other = as_expr(other)
        terms = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return simplify(SymDim(terms, self.hint * other.hint))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not _dimlike(other):
            return NotImplemented
        other = as_expr(other)
        exact = _exact_div(self, other)
        if exact is not None:
            return exact
        return _opaque("floordiv", self, other, self.hint // other.hint)

    def __rfloordiv__(self, other):
        if not _dimlike(other):
            return NotImplemented
        return as_expr(other) // self

    def __truediv__(self, other):  # shape code sometimes divides sizes that divide evenly
        if not _dimlike(other):
            return NotImplemented
        other = as_expr(other)
        _record(self % other, "==", 0, self.hint % other.hint == 0)
        return self // other

    def __mod__(self, other):
        if not _dimlike(other):
            return NotImplemented
        other = as_expr(other)
        if _exact_div(self, other) is not None:
            return as_expr(0)
        return _opaque("mod", self, other, self.hint % other.hint)

    def __rmod__(self, other):
        if not _dimlike(other):
            return NotImplemented
        return as_expr(other) % self

    @staticmethod
    def from_json(expr, hint=0):
        """The SymDim of a `to_json()` form (the hint is not part of it)."""
        terms = {}
        for coeff, mono in expr:
            m = tuple(sorted(((_atom_from_json(a), p) for a, p in mono), key=repr))
            terms[m] = terms.get(m, 0) + coeff
        return SymDim(terms, hint)

    def evaluate(self, env):
        """The value for symbol values `env` ({symbol: int})."""
        return evaluate_json(self.to_json(), env)

    def __abs__(self):  # decided on the hint, as int(d) is: a guard on the sign
        return -self if self < 0 else self

    def maximum(self, other):
        other = as_expr(other)
        return _opaque("max", self, other, max(self.hint, other.hint))

    # ----------------------------------------------------------- decisions
    def _decide(self, op, other, outcome):
        other_e = as_expr(other)
        diff = (self - other_e).constant()
        if diff is not None:  # decided by structure alone: no guard needed
            return {"==": diff == 0, "!=": diff != 0, "<": diff < 0, "<=": diff <= 0,
                    ">": diff > 0, ">=": diff >= 0}[op]
        sign = _sign(self - other_e)
        proven = _PROVEN_BY_SIGN.get((op, sign))
        if proven is None and sign * (self - other_e).terms.get((), 0) > 0:
            # dims past a constant of their sign (a dim and -1: reshape's "infer this
            # dim") are never 0: a dim no guard may read (unguardable) compares too
            proven = _PROVEN_NONZERO[(op, sign)]
        if proven is not None:  # a dim is never negative: no guard needed either
            return proven
        if op in ("==", "!=") and getattr(_local, "guards", None) is None:
            # Outside a compile (passes comparing IR dims, dict lookups) equality is
            # structural: deciding on hints there would hold for this run's feeds only.
            return op == "!="
        return _record(self, op, other_e, outcome)

    def __eq__(self, other):
        if not _dimlike(other) or isinstance(other, bool):
            return NotImplemented
        return self._decide("==", other, self.hint == _hint(other))

    def __ne__(self, other):
        if not _dimlike(other) or isinstance(other, bool):
            return NotImplemented
        return self._decide("!=", other, self.hint != _hint(other))

    def __lt__(self, other):
        return self._decide("<", other, self.hint < _hint(other))

    def __le__(self, other):
        return self._decide("<=", other, self.hint <= _hint(other))

    def __gt__(self, other):
        return self._decide(">", other, self.hint > _hint(other))

    def __ge__(self, other):
        return self._decide(">=", other, self.hint >= _hint(other))

    def __bool__(self):
        return self._decide("!=", 0, self.hint != 0)

    def __int__(self):
        """Needing a concrete int specializes the dim to its hint (guarded)."""
        c = self.constant()
        if c is not None:
            return c
        _record(self, "==", self.hint, True)
        return self.hint

    __index__ = __int__

    def __hash__(self):
        return hash(self.key)

    # -------------------------------------------------------------- output
    def to_json(self):
        return [[c, [[_atom_json(a), p] for a, p in m]] for m, c in self.key]

    def __repr__(self):
        return f"SymDim({self})"

    def __str__(self):
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.key:
            factors = [_atom_str(a) + (f"^{p}" if p != 1 else "") for a, p in m]
            if c != 1 or not factors:
                factors.insert(0, str(c))
            parts.append("*".join(factors))
        return " + ".join(parts)


# a dim set during the run (a loop's trip count, the rows of the stacks it grows:
# compiler/regions.py), which no guard checked before the run can read
RUN_DIM_SUFFIX = ":trips"


def is_run_dim(symbol):
    return isinstance(symbol, str) and symbol.endswith(RUN_DIM_SUFFIX)


def set_during_run(dim):
    """Whether a dim is known only once a loop has run (a run dim's symbol in it)."""
    return isinstance(dim, SymDim) and any(is_run_dim(s) for s in dim.symbols())


# a loop variable's dim that changes between iterations, in the loop's bodies (compiler/
# regions.py carried_symbol): its loop sets it before each call, so no guard checked
# before the run can read it either
CARRIED_DIM_SUFFIX = ":carried"


def reads_carried_dims(dim):
    """Whether a dim reads a loop variable's carried dim."""
    return isinstance(dim, SymDim) and any(s.endswith(CARRIED_DIM_SUFFIX)
                                           for s in dim.symbols())


def unguardable(dim):
    """Whether no guard checked before the run can decide on a dim (set during the run,
    or carried by a loop)."""
    return set_during_run(dim) or reads_carried_dims(dim)


def _dimlike(x):
    return isinstance(x, (int, np.integer, SymDim))


def _hint(x):
    return x.hint if isinstance(x, SymDim) else int(x)


def _sign(e):
    """1 when e >= 0 for every value of its symbols, -1 when e <= 0, else 0: a sum of
    products of symbols (dims, never negative) whose coefficients all have one sign.
    Opaque atoms (a floor division, a max) are not looked into."""
    if any(not isinstance(atom, str) for mono in e.terms for atom, _ in mono):
        return 0
    coeffs = list(e.terms.values())
    if all(c >= 0 for c in coeffs):
        return 1
    if all(c <= 0 for c in coeffs):
        return -1
    return 0


# (comparison of e with 0, _sign(e)) -> its outcome
_PROVEN_BY_SIGN = {("<", 1): False, (">=", 1): True, (">", -1): False, ("<=", -1): True}
# (comparison of e with 0, _sign(e)) -> its outcome where e's constant term has e's sign
_PROVEN_NONZERO = {(op, sign): outcome for sign in (1, -1) for op, outcome in (
    ("==", False), ("!=", True), ("<", sign < 0), ("<=", sign < 0), (">", sign > 0),
    (">=", sign > 0))}


def as_expr(x):
    if isinstance(x, SymDim):
        return x
    if not _dimlike(x):
        raise TypeError(f"a dim cannot be combined with {type(x).__name__} {x!r}")
    v = int(x)
    return SymDim({(): v} if v else {}, v)


def simplify(e):
    c = e.constant()
    return e if c is None else SymDim({(): c} if c else {}, c)


def concrete(x):
    """An int when `x` is an int or a symbol-free SymDim, else the SymDim itself."""
    if isinstance(x, SymDim):
        c = x.constant()
        return x if c is None else c
    return x


def _mono_mul(a, b):
    powers = dict(a)
    for atom, p in b:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=repr))


def _exact_div(num, den):
    """num / den when den is a single monomial dividing every term of num, else None."""
    if len(den.terms) != 1:
        return None
    (dm, dc), = den.terms.items()
    if dc == 0:
        return None
    dpow = dict(dm)
    terms = {}
    for m, c in num.terms.items():
        powers = dict(m)
        if c % dc or any(powers.get(a, 0) < p for a, p in dpow.items()):
            return None
        for a, p in dpow.items():
            powers[a] -= p
        terms[tuple(sorted(((a, p) for a, p in powers.items() if p), key=repr))] = c // dc
    return simplify(SymDim(terms, num.hint // den.hint if den.hint else 0))


def _opaque(op, a, b, hint):
    atom = (op, a.key, b.key)
    return SymDim({((atom, 1),): 1}, hint)


def _atom_symbols(atom):
    if isinstance(atom, str):
        return {atom}
    out = set()
    for part in (atom[1], atom[2]):
        for mono, _ in part:
            for a, _ in mono:
                out |= _atom_symbols(a)
    return out


def _atom_json(atom):
    if isinstance(atom, str):
        return atom
    return [atom[0], SymDim(dict(atom[1]), 0).to_json(), SymDim(dict(atom[2]), 0).to_json()]


def _atom_from_json(atom):
    if isinstance(atom, str):
        return atom
    op, a, b = atom
    return (op, SymDim.from_json(a).key, SymDim.from_json(b).key)


def _atom_str(atom):
    if isinstance(atom, str):
        return atom
    a, b = (str(SymDim(dict(k), 0)) for k in (atom[1], atom[2]))
    return f"{atom[0]}({a}, {b})"


def evaluate(dim, env):
    """An int dim as is, a SymDim evaluated for symbol values `env`."""
    return dim.evaluate(env) if isinstance(dim, SymDim) else dim


def check_guards(guards, env):
    """The guards (lhs json, op, rhs json, outcome) that symbol values `env` violate."""
    return [g for g in guards if not guard_holds(g, env)]


def slice_size(begin, end, stride, dim):
    """len(range(*slice(begin, end, stride).indices(dim))) for an int or SymDim `dim`
    (begin/end ints or None): Python's clamping, decided on hints where dim is symbolic
    but where no guard can decide on it (unguardable: a loop variable's carried dim, out[1:]
    shrinking it), for a forward slice from a start >= 0 to the end or to a stop
    counted from it: max(dim + stop - start, 0) whatever dim is."""
    if stride > 0 and unguardable(dim) and (begin is None or begin >= 0) and \
            (end is None or end < 0):
        rows = (dim + (end or 0) - (begin or 0)).maximum(0)
        return rows if stride == 1 else (rows + stride - 1) // stride
    if stride > 0:
        start = 0 if begin is None else _clamp_index(begin, dim, 0, dim)
        stop = dim if end is None else _clamp_index(end, dim, 0, dim)
        diff, step = stop - start, stride
    else:
        start = dim - 1 if begin is None else _clamp_index(begin, dim, -1, dim - 1)
        stop = -1 if end is None else _clamp_index(end, dim, -1, dim - 1)
        diff, step = start - stop, -stride
    if diff <= 0:
        return 0
    return concrete((diff + step - 1) // step)


def _clamp_index(i, dim, lo, hi):
    if i < 0:
        i = i + dim
    if i < lo:
        return lo
    if i > hi:
        return hi
    return i
