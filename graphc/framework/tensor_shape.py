"""TensorShape and Dimension: static shapes whose dimensions (or rank) may be unknown.

While the compiler lowers a graph, a dim may also be a SymDim (graphc/framework/symbolic.py):
a size known only at run time, as an expression of the feeds' dims.
"""
from graphc.framework.symbolic import SymDim, unguardable


class Dimension:
    """One dimension; `value` is an int or None (unknown)."""

    def __init__(self, value):
        if isinstance(value, Dimension):
            value = value.value
        if value is not None and not isinstance(value, SymDim):
            value = int(value)
            if value < 0:
                raise ValueError(f"Dimension {value} must be >= 0")
        self.value = value

    def __int__(self):
        if self.value is None:
            raise TypeError("Cannot convert an unknown Dimension to an int")
        return self.value

    __index__ = __int__

    def __eq__(self, other):
        other = _dim_value(other)
        if self.value is None or other is None:
            return None
        return self.value == other

    def __ne__(self, other):
        eq = self.__eq__(other)
        return None if eq is None else not eq

    def __hash__(self):
        return hash(self.value)

    def _arith(self, other, fn):
        other = _dim_value(other)
        if self.value is None or other is None:
            return Dimension(None)
        return Dimension(fn(self.value, other))

    def __add__(self, o):
        return self._arith(o, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, o):
        return self._arith(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return Dimension(o)._arith(self, lambda a, b: a - b)

    def __mul__(self, o):
        return self._arith(o, lambda a, b: a * b)

    __rmul__ = __mul__

    def __floordiv__(self, o):
        return self._arith(o, lambda a, b: a // b)

    def __mod__(self, o):
        return self._arith(o, lambda a, b: a % b)

    def is_compatible_with(self, other):
        other = _dim_value(other)
        return self.value is None or other is None or self.value == other

    def merge_with(self, other):
        other = _dim_value(other)
        if not self.is_compatible_with(other):
            raise ValueError(f"Dimensions {self} and {Dimension(other)} are not compatible")
        return Dimension(self.value if self.value is not None else other)

    def __repr__(self):
        return f"Dimension({self.value})"

    def __str__(self):
        return "?" if self.value is None else str(self.value)


def _dim_value(d):
    if isinstance(d, Dimension):
        return d.value
    return d if d is None or isinstance(d, SymDim) else int(d)


def dimension_value(d):
    return _dim_value(d)


class TensorShape:
    """A static shape: `dims` is None (unknown rank) or a list of Dimension."""

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims.dims
        if dims is None:
            self._dims = None
        else:
            if isinstance(dims, (int, Dimension)):
                dims = [dims]
            self._dims = [d if isinstance(d, Dimension) else Dimension(d) for d in dims]

    @property
    def dims(self):
        return None if self._dims is None else list(self._dims)

    @property
    def ndims(self):
        return None if self._dims is None else len(self._dims)

    rank = ndims

    def as_list(self):
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return [d.value for d in self._dims]

    def as_tuple_or_none(self):
        """The dims as a tuple of int/None, or None when the rank is unknown."""
        return None if self._dims is None else tuple([d.value for d in self._dims])

    def is_fully_defined(self):
        return self._dims is not None and all(d.value is not None for d in self._dims)

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d.value
        return n

    def is_compatible_with(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a.is_compatible_with(b) for a, b in zip(self._dims, other._dims))

    def merge_with(self, other):
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        return TensorShape([a.merge_with(b) for a, b in zip(self._dims, other._dims)])

    def assert_is_compatible_with(self, other):
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def assert_has_rank(self, rank):
        if self._dims is not None and len(self._dims) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")

    def with_rank_at_least(self, rank):
        if self._dims is not None and len(self._dims) < rank:
            raise ValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def with_rank(self, rank):
        if self._dims is None:
            return TensorShape([None] * rank)
        self.assert_has_rank(rank)
        return self

    def concatenate(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def __add__(self, other):
        return self.concatenate(other)

    def __radd__(self, other):
        return as_shape(other).concatenate(self)

    def __len__(self):
        if self._dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank.")
        return len(self._dims)

    def __bool__(self):
        return self._dims is not None

    def __iter__(self):
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else Dimension(None)
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self.as_tuple_or_none() == other.as_tuple_or_none() and (
            (self._dims is None) == (other._dims is None))

    def __hash__(self):
        return hash(self.as_tuple_or_none())

    def __repr__(self):
        return f"TensorShape({self.as_tuple_or_none() if self._dims is not None else None})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        if len(self._dims) == 1:
            return f"({self._dims[0]},)"
        return "(" + ", ".join(str(d) for d in self._dims) + ")"


def as_shape(shape):
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(rank=None):
    return TensorShape(None if rank is None else [None] * rank)


def _identical(x, y):
    """Whether two dims are one expression (equal for every value of their symbols)."""
    if isinstance(x, SymDim) and isinstance(y, SymDim):
        return (x - y).constant() == 0
    return False


def _literal_one(d):
    """Whether a dim is the number 1 (a missing leading dim of a lower rank shape, say),
    not a symbol that may be 1.

    A dim against it is the result whatever its value, 1 included: no guard is needed.
    A feed's dim still gets one (n != 1, from `x == 1` below): a batch of 1 then runs
    code of its own (runtime/variants.py). A dim set during the run (a loop's trip
    count, a stack's rows) or carried by a loop (a loop variable's dim that changes)
    gets none: the runtime checks guards before the run, so one
    would send the loop to the host (compiler/regions.py)."""
    return isinstance(d, int) and d == 1


def broadcast_shapes(a, b):
    """NumPy broadcasting of two static shapes; raises ValueError when they cannot broadcast.

    An unknown dim against a known d > 1 gives d; against 1 or unknown, unknown."""
    a, b = as_shape(a), as_shape(b)
    if a.ndims is None or b.ndims is None:
        return TensorShape(None)
    da, db = a.as_list(), b.as_list()
    n = max(len(da), len(db))
    da = [1] * (n - len(da)) + da
    db = [1] * (n - len(db)) + db
    out = []
    for x, y in zip(da, db):
        if _identical(x, y):  # whatever its value: no guard on it being 1
            out.append(x)
        elif _literal_one(y) and unguardable(x):
            out.append(x)
        elif _literal_one(x) and unguardable(y):
            out.append(y)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None or x == y:
            out.append(x)
        else:
            raise ValueError(f"Incompatible shapes for broadcasting: {a} and {b}")
    return TensorShape(out)
