"""tf.nest: nested structures of lists, tuples, namedtuples and dicts, as TF's.

Mappings flatten in sorted key order (and are rebuilt with their own key order and type);
strings, bytes, arrays, tensors and None are leaves.
"""
import collections.abc as _abc


def is_nested(seq):
    return isinstance(seq, (list, tuple, _abc.Mapping))


is_sequence = is_nested


def _sorted_keys(mapping):
    try:
        return sorted(mapping)
    except TypeError:
        raise TypeError("nest only supports dicts with sortable keys, got keys "
                        f"{list(mapping)!r}") from None


def _children(seq):
    if isinstance(seq, _abc.Mapping):
        return [seq[k] for k in _sorted_keys(seq)]
    return list(seq)


def _rebuild(seq, children):
    """A sequence of seq's type holding `children` (in _children's order)."""
    if isinstance(seq, _abc.Mapping):
        by_key = dict(zip(_sorted_keys(seq), children))
        items = [(k, by_key[k]) for k in seq]
        if isinstance(seq, _abc.MutableMapping) and type(seq) is not dict:
            try:
                return type(seq)(items)
            except TypeError:  # a defaultdict needs its factory
                out = type(seq)(seq.default_factory)
                out.update(items)
                return out
        return dict(items)
    if isinstance(seq, tuple) and hasattr(seq, "_fields"):
        return type(seq)(*children)
    return type(seq)(children)


def flatten(structure, expand_composites=False):
    if not is_nested(structure):
        return [structure]
    return [leaf for child in _children(structure) for leaf in flatten(child)]


def _pack(structure, flat, start):
    if not is_nested(structure):
        return flat[start], start + 1
    children = []
    for child in _children(structure):
        packed, start = _pack(child, flat, start)
        children.append(packed)
    return _rebuild(structure, children), start


def pack_sequence_as(structure, flat_sequence, expand_composites=False):
    if not is_nested(flat_sequence):
        raise TypeError(f"flat_sequence must be a sequence, got {type(flat_sequence).__name__}")
    flat = list(flat_sequence)
    n = len(flatten(structure))
    if n != len(flat):
        raise ValueError(f"Could not pack sequence. Structure had {n} elements, but "
                         f"flat_sequence had {len(flat)} elements. Structure: {structure!r}, "
                         f"flat_sequence: {flat!r}.")
    return _pack(structure, flat, 0)[0]


def _same_type(a, b):
    if isinstance(a, _abc.Mapping) and isinstance(b, _abc.Mapping):
        return True  # TF treats any two mappings as the same kind of sequence
    return type(a) is type(b)


def assert_same_structure(nest1, nest2, check_types=True, expand_composites=False):
    """ValueError when the nesting or lengths differ, TypeError when check_types and the
    sequence types differ (a list against a tuple)."""
    _assert_same(nest1, nest2, check_types, nest1, nest2)


def _assert_same(a, b, check_types, whole1, whole2):
    if is_nested(a) != is_nested(b):
        raise ValueError("The two structures don't have the same nested structure.\n\n"
                         f"First structure: {whole1!r}\n\nSecond structure: {whole2!r}")
    if not is_nested(a):
        return
    if check_types and not _same_type(a, b):
        raise TypeError("The two structures don't have the same sequence type. First "
                        f"structure has type {type(a)}, while second structure has type "
                        f"{type(b)}.")
    if isinstance(a, _abc.Mapping) and isinstance(b, _abc.Mapping) and set(a) != set(b):
        raise ValueError(f"The two dictionaries don't have the same set of keys. First "
                         f"structure has keys {sorted(a)}, while second structure has keys "
                         f"{sorted(b)}.")
    ca, cb = _children(a), _children(b)
    if len(ca) != len(cb):
        raise ValueError("The two structures don't have the same number of elements.\n\n"
                         f"First structure: {whole1!r}\n\nSecond structure: {whole2!r}")
    for x, y in zip(ca, cb):
        _assert_same(x, y, check_types, whole1, whole2)


def map_structure(func, *structure, **kwargs):
    """func applied to the leaves of the structures (all of the same structure), packed as
    the first."""
    if not structure:
        raise ValueError("Must provide at least one structure")
    check_types = kwargs.pop("check_types", True)
    kwargs.pop("expand_composites", None)
    if kwargs:
        raise ValueError(f"Only valid keyword arguments are `check_types` and "
                         f"`expand_composites`, got {sorted(kwargs)}")
    for other in structure[1:]:
        assert_same_structure(structure[0], other, check_types=check_types)
    leaves = zip(*(flatten(s) for s in structure))
    return pack_sequence_as(structure[0], [func(*args) for args in leaves])
