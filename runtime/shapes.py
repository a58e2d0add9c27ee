"""Evaluates the plain-data dim expressions of a spec (graphc's SymDim.to_json form).

An expression is an int or a list of terms [coeff, [[atom, power], ...]]; an atom is a
symbol name or [op, a, b] with op in floordiv/mod/max and a, b expressions. graphc's
compiler evaluates these through this module too (graphc.framework.symbolic).
"""
from .errors import ShapeError

_COMPARE = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def evaluate(expr, env):
    """The int value of `expr` given symbol values `env` {name: int}."""
    if isinstance(expr, int):
        return expr
    total = 0
    for coeff, mono in expr:
        term = coeff
        for atom, power in mono:
            term *= _atom_value(atom, env) ** power
        total += term
    return total


def _atom_value(atom, env):
    if isinstance(atom, str):
        return env[atom]
    op, a, b = atom
    a, b = evaluate(a, env), evaluate(b, env)
    if op == "max":
        return max(a, b)
    if b == 0:
        raise ShapeError(f"division by zero evaluating {op}({a}, {b}) in a dim")
    if op == "floordiv":
        return a // b
    if op == "mod":
        return a % b
    raise ShapeError(f"unknown dim operation {op!r}")


def evaluate_dims(dims, env):
    """A shape tuple from a list of dim expressions; negative sizes are errors."""
    shape = tuple(evaluate(d, env) for d in dims)
    if any(d < 0 for d in shape):
        raise ShapeError(f"dims {dims_text(dims)} evaluate to the negative shape {shape}")
    return shape


def guard_holds(guard, env):
    lhs, op, rhs, outcome = guard
    return _COMPARE[op](evaluate(lhs, env), evaluate(rhs, env)) == bool(outcome)


def guard_text(guard, env=None):
    """E.g. 'x.0 != 1 (expected True; x.0=1)'."""
    lhs, op, rhs, outcome = guard
    text = f"{to_text(lhs)} {op} {to_text(rhs)}"
    if not outcome:
        text = f"not ({text})"
    if env:
        used = sorted(_symbols(lhs) | _symbols(rhs))
        text += " with " + ", ".join(f"{s}={env[s]}" for s in used if s in env)
    return text


def to_text(expr):
    if isinstance(expr, int):
        return str(expr)
    if not expr:
        return "0"
    parts = []
    for coeff, mono in expr:
        factors = [_atom_text(a) + (f"^{p}" if p != 1 else "") for a, p in mono]
        if coeff != 1 or not factors:
            factors.insert(0, str(coeff))
        parts.append("*".join(factors))
    return " + ".join(parts)


def dims_text(dims):
    return "[" + ", ".join(to_text(d) for d in dims) + "]"


def _atom_text(atom):
    if isinstance(atom, str):
        return atom
    op, a, b = atom
    return f"{op}({to_text(a)}, {to_text(b)})"


def _symbols(expr):
    out = set()
    if isinstance(expr, int):
        return out
    for _, mono in expr:
        for atom, _ in mono:
            if isinstance(atom, str):
                out.add(atom)
            else:
                out |= _symbols(atom[1]) | _symbols(atom[2])
    return out
