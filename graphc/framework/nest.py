"""Nested structures of values (TF's nest): tuples, lists, namedtuples and dicts (by
sorted key), flattened depth first. Control flow uses them for the outputs of cond's
branches, while_loop's loop variables and the elements of map_fn and scan."""


def is_nested(x):
    return isinstance(x, (list, tuple, dict))


def _children(structure):
    if isinstance(structure, dict):
        return [structure[k] for k in sorted(structure)]
    return list(structure)


def flatten(structure):
    """The leaves of `structure`, depth first; a leaf alone is [leaf]."""
    if not is_nested(structure):
        return [structure]
    return [leaf for part in _children(structure) for leaf in flatten(part)]


def pack_sequence_as(structure, leaves):
    """`leaves` (flat, as flatten gives them) rebuilt into the form of `structure`."""
    leaves = list(leaves)
    if len(leaves) != len(flatten(structure)):
        raise ValueError(f"Structure had {len(flatten(structure))} elements, but flat_sequence "
                         f"had {len(leaves)} elements.")
    it = iter(leaves)

    def build(s):
        if not is_nested(s):
            return next(it)
        if isinstance(s, dict):
            built = {k: build(s[k]) for k in sorted(s)}
            return type(s)((k, built[k]) for k in s)
        parts = [build(p) for p in s]
        return type(s)(*parts) if hasattr(s, "_fields") else type(s)(parts)
    return build(structure)


def assert_same_structure(a, b, what="structures"):
    """ValueError unless a and b nest the same way (sequence types may differ, as TF's
    check_types=False)."""
    if is_nested(a) != is_nested(b):
        raise ValueError(f"The two {what} don't have the same nested structure: {a!r} and "
                         f"{b!r}")
    if not is_nested(a):
        return
    if isinstance(a, dict) != isinstance(b, dict) or len(a) != len(b) or \
            (isinstance(a, dict) and sorted(a) != sorted(b)):
        raise ValueError(f"The two {what} don't have the same nested structure: {a!r} and "
                         f"{b!r}")
    for x, y in zip(_children(a), _children(b)):
        assert_same_structure(x, y, what)


def map_structure(fn, *structures):
    for s in structures[1:]:
        assert_same_structure(structures[0], s)
    flat = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*flat)])
