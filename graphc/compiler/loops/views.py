"""Views: each Value of a loop kernel as a function index -> scalar Expr.

A value computed inside the kernel is viewed through its node's lowering rule (the
table in op_lowering.py), which views the node's inputs at remapped indices; a value
computed elsewhere is a load from its buffer at the row-major position of the index.
Views are memoized per (value, index), so a value used twice at the same index is one
expression (and is emitted once).
"""
import numpy as np

from graphc.compiler.loops.expr import ExprBuilder, dim_key
from graphc.compiler.loops.program import MAX_ERROR_DETAILS
from graphc.compiler.lower import LoweringError
from graphc.framework.symbolic import SymDim



def _broadcasts(in_dim, out_dim):
    """Whether an input dim is stretched over out_dim. A dim expression of the feed
    symbols (size - 1 of a split, ...) whose value was 1 when this signature was compiled
    broadcast then, and shape inference recorded the guard `dim == 1` that keeps this
    executable to feeds where it still is; structurally it is not the constant 1."""
    key, out_key = dim_key(in_dim), dim_key(out_dim)
    if key == out_key:
        return False
    return key == 1 or (isinstance(in_dim, SymDim) and in_dim.hint == 1)

class KernelViews:
    """The views of one loop kernel's values.

    computed: the Values its nodes compute; storage_of(value) -> storage key of a value
    computed elsewhere; error_site(node, message) -> site number for run-time errors."""

    def __init__(self, computed, storage_of, error_site, rules):
        self.x = ExprBuilder()
        self.computed = computed
        self.storage_of = storage_of
        self.error_site = error_site
        # where a failing check stores its run-time values (the bad index...) in the syms
        # array: the Program's slots after the symbols, None when there is no Program
        self.detail_base = getattr(getattr(error_site, "__self__", None),
                                   "error_detail_base", None)
        self.rules = rules
        self.memo = {}    # for rules sharing work between indices (softmax row stats)
        self._memo = {}

    def view(self, value, index):
        """value[index] as an Expr (index: one index Expr per dim of value)."""
        index = tuple(index)
        if len(index) != len(value.dims):
            raise AssertionError(f"{value} viewed with {len(index)} indices")
        key = (value, tuple(id(i) for i in index))
        e = self._memo.get(key)
        if e is None:
            e = self._memo[key] = self._view(value, index)
        return e

    def _view(self, value, index):
        node = value.node
        if value in self.computed:
            rule = self.rules.get(node.type)
            if rule is None:
                raise LoweringError(f"no loop lowering for op type {node.type} "
                                    f"({node.describe()})")
            return rule(self, node, value.index, list(index))
        if node.type == "Const" and np.size(node.attrs["value"]) == 1:
            return self.x.const(np.reshape(node.attrs["value"], -1)[0], value.dtype.name)
        if any(dim_key(d) == 0 for d in value.dims):
            # an empty buffer holds nothing to read: only an index that failed its check
            # (gather from an empty axis) gets here, and it must not touch memory. The
            # value still uses the index (never negative), so that the check is emitted.
            total = self.x.const(0)
            for i in index:
                total = self.x.add(total, i)
            dtype = value.dtype.name
            return self.x.select(self.x.compare("lt", total, self.x.const(0)),
                                 self.x.const(1, dtype), self.x.const(0, dtype))
        return self.load(self.storage_of(value), index, value.dims, value.dtype.name)

    def load(self, storage, index, dims, dtype):
        return self.x.load(storage, self.x.linear(index, dims), dtype)

    # ---------------------------------------------------------------- helpers
    def site(self, node, message):
        """The error site (number) of `node` failing with `message`, made once."""
        key = ("site", node, message)
        if key not in self.memo:
            self.memo[key] = self.error_site(node, message)
        return self.memo[key]

    def checked_index(self, node, index, size, message, fallback, details=()):
        """`index` (an int64 Expr) clamped into [0, size), recording an error when it is
        out of range. `message` is a template of the run-time values: {0} the index, {1}
        size, {2}... the `details` [(Expr, kind)] where kind is "int" or {"index": dims}
        (a linear position shown as [i,j]); `fallback` is the message without values."""
        kinds = ["int", "int"] + [kind for _, kind in details]
        if self.detail_base is None or len(kinds) > MAX_ERROR_DETAILS:
            # more values than the code keeps (a rank-3 shape and the index and size):
            # the message without values, rather than one showing values never stored
            return self.x.check(index, size, self.site(node, fallback))
        key = ("site", node, message, repr(kinds))
        if key not in self.memo:
            self.memo[key] = self.error_site(node, message, args=kinds)
        return self.x.check(index, size, self.memo[key], [e for e, _ in details])

    def dims(self, value):
        return [self.x.dim(d) for d in value.dims]

    def constant(self, value):
        """The compile-time array of `value` (a Const node's output), else LoweringError."""
        node = value.node
        if node.type != "Const":
            raise LoweringError(f"{node.type} input {value.name} must be a compile-time "
                                f"constant for codegen")
        return np.asarray(node.attrs["value"])

    def broadcast_index(self, index, out_dims, in_dims):
        """The index of an input of dims `in_dims` broadcast (numpy rules) to `out_dims`."""
        lead = len(out_dims) - len(in_dims)
        return [self.x.const(0) if _broadcasts(d, out_dims[lead + i]) else index[lead + i]
                for i, d in enumerate(in_dims)]

    def view_broadcast(self, value, index, out_dims):
        return self.view(value, self.broadcast_index(index, out_dims, value.dims))

    def fresh_vars(self, dims, name="r"):
        """(LoopVars, their index exprs) for a reduction over `dims` (size-1 dims fold)."""
        loop_vars, exprs = [], []
        for d in dims:
            v, e = self.x.var(self.x.dim(d), name)
            if v is not None:
                loop_vars.append(v)
            exprs.append(e)
        return loop_vars, exprs


def normalize_axes(axes, rank):
    return sorted({int(a) % rank for a in np.reshape(axes, -1)}) if rank else []
