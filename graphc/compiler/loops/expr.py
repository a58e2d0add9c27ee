"""Scalar expressions of one loop kernel: what each element of each output is.

An `Expr` is a node of a hash-consed DAG built by an `ExprBuilder` (one per kernel):
- index arithmetic on int64: "const", "var" (a loop variable with its extent), "dim"
  (a run-time size: an int or a SymDim of the feed symbols), "add", "mul", "floordiv",
  "mod", "min", "max", comparisons "lt"/"le"/"eq" (bool);
- element values: "load" (buffer, linear index), "load_one_of" (one of several buffers
  of one layout, chosen by an index expr, at one linear index), "op" (an elementwise op
  type emitted by kernels.scalar_ops.emit_scalar), "select" (data BRANCH: only the arm
  taken is computed), "reduce" (kind, loop variables, body), "argreduce" (argmax/argmin:
  the int64 position), "check" (an index clamped into range, recording an error site
  when it was out of range).
Every expr knows its `free` loop variables, which is what lets codegen hoist a reduction
to the outermost loop where it is defined (a softmax row max is computed once per row).
Index arithmetic folds constants (x*1, x+0, broadcast dims of size 1 -> index 0) so
broadcasting and keep-dims costs nothing in the emitted loops.
"""
import itertools

from graphc.framework.symbolic import SymDim

INDEX = "int64"
# the data of a select that computes only the arm it takes (ExprBuilder.select)
BRANCH = "branch"


class Expr:
    __slots__ = ("kind", "dtype", "data", "args", "free")

    def __init__(self, kind, dtype, data, args, free):
        self.kind = kind
        self.dtype = dtype      # numpy dtype name of the value ("int64" for indices)
        self.data = data
        self.args = args
        self.free = free        # frozenset of loop variable ids this value depends on

    @property
    def is_const(self):
        return self.kind == "const"

    def __repr__(self):
        return f"<Expr {self.kind} {self.dtype} {self.data!r} {len(self.args)} args>"


def walk(roots):
    """Each distinct expression reachable from `roots`, once (expressions share
    subexpressions: a DAG), depth first from the last root."""
    stack, visited = list(roots), set()
    while stack:
        e = stack.pop()
        if id(e) in visited:
            continue
        visited.add(id(e))
        yield e
        stack.extend(e.args)


class LoopVar:
    """A loop variable: counts 0..extent-1 (extent: an index Expr)."""

    _ids = itertools.count()

    def __init__(self, extent, name):
        self.id = next(LoopVar._ids)
        self.extent = extent
        self.name = name


def dim_key(d):
    """A hashable structural key of a dim (int or SymDim): equal keys, equal sizes."""
    if isinstance(d, SymDim):
        c = d.constant()
        return c if c is not None else ("sym", d.key)
    if isinstance(d, str):  # a bare symbol name (older lowering)
        return ("sym", (((((d, 1),), 1),)))
    return int(d)


def dims_key(dims):
    return tuple(dim_key(d) for d in dims)


class ExprBuilder:
    """Makes Exprs, sharing identical ones and folding index arithmetic."""

    def __init__(self):
        self._table = {}
        self._dim_values = {}  # dim key -> the SymDim it stands for
        self._attrs = {}       # op key -> the attrs dict emit_scalar gets
        self.vars = {}         # var id -> LoopVar

    def _make(self, kind, dtype, data, args=(), free=None):
        key = (kind, dtype, data, tuple(id(a) for a in args))
        e = self._table.get(key)
        if e is None:
            if free is None:
                free = frozenset().union(*(a.free for a in args)) if args else frozenset()
            e = self._table[key] = Expr(kind, dtype, data, tuple(args), free)
        return e

    def with_args(self, e, args):
        """An expr of e's kind, dtype and data over other args (no folding)."""
        return self._make(e.kind, e.dtype, e.data, args)

    # ------------------------------------------------------------------ indices
    def const(self, value, dtype=INDEX):
        if dtype == "bool":
            value = bool(value)
        elif dtype.startswith(("int", "uint")):
            value = int(value)
        else:
            value = float(value)
        # repr tells 0.0 from -0.0, which compare equal
        return self._make("const", dtype, (type(value).__name__, repr(value), value))

    @staticmethod
    def const_value(e):
        return e.data[2]

    def dim(self, d):
        """A dim as an index expr: an int constant or a run-time SymDim."""
        key = dim_key(d)
        if isinstance(key, int):
            return self.const(key)
        self._dim_values[key] = SymDim.symbol(d, 2) if isinstance(d, str) else d
        return self._make("dim", INDEX, key)

    def dim_value(self, e):
        """The SymDim behind a "dim" expr."""
        return self._dim_values[e.data]

    def var(self, extent, name="i"):
        """A fresh loop variable over range(extent); extent 1 folds to the constant 0."""
        if extent.is_const and self.const_value(extent) == 1:
            return None, self.const(0)
        v = LoopVar(extent, name)
        self.vars[v.id] = v
        return v, self._make("var", INDEX, v.id, (), frozenset([v.id]))

    def _int_args(self, a, b):
        return (self.const_value(a) if a.is_const else None,
                self.const_value(b) if b.is_const else None)

    def add(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(ca + cb)
        if ca == 0:
            return b
        if cb == 0:
            return a
        return self._make("add", INDEX, None, (a, b))

    def sub(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(ca - cb)
        if cb == 0:
            return a
        return self._make("sub", INDEX, None, (a, b))

    def mul(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(ca * cb)
        if ca == 0 or cb == 0:
            return self.const(0)
        if ca == 1:
            return b
        if cb == 1:
            return a
        return self._make("mul", INDEX, None, (a, b))

    def floordiv(self, a, b):
        """a // b for a >= 0, b > 0 (index arithmetic)."""
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(ca // cb if cb else 0)
        if cb == 1 or ca == 0:
            return a
        return self._make("floordiv", INDEX, None, (a, b))

    def mod(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(ca % cb if cb else 0)
        if cb == 1 or ca == 0:
            return self.const(0)
        return self._make("mod", INDEX, None, (a, b))

    def min(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(min(ca, cb))
        return self._make("min", INDEX, None, (a, b))

    def max(self, a, b):
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            return self.const(max(ca, cb))
        return self._make("max", INDEX, None, (a, b))

    def compare(self, op, a, b):
        """Index comparison op in ("lt", "le", "eq", "ne", "ge", "gt") -> bool expr."""
        ca, cb = self._int_args(a, b)
        if ca is not None and cb is not None:
            result = {"lt": ca < cb, "le": ca <= cb, "eq": ca == cb, "ne": ca != cb,
                      "ge": ca >= cb, "gt": ca > cb}[op]
            return self.const(result, "bool")
        return self._make("icmp", "bool", op, (a, b))

    def linear(self, index, dims):
        """Row-major linear position of `index` (index exprs) in an array of `dims`."""
        pos = self.const(0)
        for i, d in zip(index, dims):
            pos = self.add(self.mul(pos, self.dim(d)), i)
        return pos

    def delinearize(self, pos, dims):
        """The index (one expr per dim) of linear position `pos` in row-major `dims`."""
        out = []
        for d in reversed(dims):
            size = self.dim(d)
            out.append(self.mod(pos, size))
            pos = self.floordiv(pos, size)
        return out[::-1]

    # ------------------------------------------------------------------- values
    def load(self, storage, index, dtype):
        """Element `index` (linear index expr) of the buffer named by `storage`."""
        return self._make("load", dtype, storage, (index,))

    def load_one_of(self, storages, which, index, dtype):
        """Element `index` of the buffer storages[which] (`which`: an index expr in
        [0, len(storages))): the pieces of a join that differ only in their buffers, one
        load from a chosen address rather than a choice among loads."""
        return self._make("load_one_of", dtype, tuple(storages), (index, which))

    def op(self, op_type, args, out_dtype, attrs=None, error_site=None):
        """An elementwise op applied to scalar exprs (kernels.scalar_ops.emit_scalar);
        ops that can fail at run time (integer division by zero) record `error_site`."""
        attrs = attrs or {}
        key = (op_type, tuple(a.dtype for a in args), _attrs_key(attrs), error_site)
        self._attrs[key] = attrs
        return self._make("op", out_dtype, key, args)

    def attrs_of(self, e):
        return self._attrs[e.data]

    def cast(self, x, dtype):
        if x.dtype == dtype:
            return x
        if x.is_const:
            return self.const(self.const_value(x), dtype)
        return self.op("Cast", [x], dtype, {"DstT": dtype})

    def select(self, cond, a, b, branch=False):
        """cond ? a : b. branch: compute only the arm taken (a branch, where a plain select
        computes both), for arms too costly to compute both: the pieces of a concat."""
        if cond.is_const:
            return a if self.const_value(cond) else b
        if a is b:
            return a
        return self._make("select", a.dtype, BRANCH if branch else None, (cond, a, b))

    def logical(self, op, a, b):
        """"and"/"or" of two bool exprs, folding constants."""
        for x, y in ((a, b), (b, a)):
            if x.is_const:
                v = self.const_value(x)
                if op == "and":
                    return y if v else x
                return x if v else y
        return self._make(op, "bool", None, (a, b))

    def reduce(self, kind, loop_vars, body, dtype):
        """Reduction `kind` of `body` over `loop_vars` (LoopVars; body uses their exprs)."""
        ids = tuple(v.id for v in loop_vars)
        if not ids:
            return body if kind not in ("sum", "prod") or body.dtype == dtype else \
                self.cast(body, dtype)
        free = body.free - frozenset(ids)
        return self._make("reduce", dtype, (kind, ids), (body,), free)

    def argreduce(self, kind, loop_var, body):
        """The int64 position along loop_var where body is largest/smallest (NaN first)."""
        if loop_var is None:
            return self.const(0)
        return self._make("argreduce", INDEX, (kind, loop_var.id), (body,),
                          body.free - {loop_var.id})

    def check(self, index, size, site, details=()):
        """`index` clamped into [0, size); out-of-range values record error site `site`
        with the run-time values (index, size, *details) for its message."""
        return self._make("check", INDEX, site, (index, size) + tuple(details))


def loaded_storages(e):
    """The buffers expression `e` itself reads (its operands' not included); for a
    "load", args[0] is the position read, as for a "load_one_of"."""
    if e.kind == "load":
        return (e.data,)
    if e.kind == "load_one_of":
        return e.data
    return ()


def _attrs_key(attrs):
    items = []
    for k, v in sorted(attrs.items()):
        items.append((k, repr(v)))
    return tuple(items)
