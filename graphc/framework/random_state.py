"""Random-op state: each random op's Philox key and run count, kept in the Session state.

Element i of a random op's output in its r-th run is a function of (key, r, i)
(graphc/ops/random_ops.py and kernels/philox.py compute it). The key and r live in the
Session state next to the variables, as an int64 array [k0, k1, runs] named
random_state_name(op name): created on first use by whichever backend runs the op first,
read and advanced by both, so the reference and the compiled code continue each other's
stream.
The compiler declares it as a variable of the module it lowers (graphc/compiler/lower.py).
"""
import secrets

import numpy as np


_SUFFIX = ":random_state"  # ':' cannot occur in op names: never a variable's name


def random_state_name(op_name):
    """The Session state entry holding an op's key and run counter."""
    return op_name + _SUFFIX


def random_op_name(name):
    """The op whose state entry `name` is (random_state_name's inverse), or None when
    `name` is not a random state."""
    return name[:-len(_SUFFIX)] if name.endswith(_SUFFIX) else None


def philox_key(seed, seed2):
    """The two 32-bit key words of a seeded op."""
    a, b = int(seed or 0) & (2 ** 64 - 1), int(seed2 or 0) & (2 ** 64 - 1)
    return (a & 0xFFFFFFFF) ^ (b >> 32), (b & 0xFFFFFFFF) ^ (a >> 32)


def random_state(state, op_name, seed, seed2):
    """The op's int64 [k0, k1, runs so far] array in the session state; created on first
    use, with an OS-random key for unseeded ops."""
    name = random_state_name(op_name)
    arr = state.variables.get(name)
    if arr is None:
        if seed is None and seed2 is None:
            key = (secrets.randbits(32), secrets.randbits(32))
        else:
            key = philox_key(seed, seed2)
        arr = state.variables[name] = np.array([key[0], key[1], 0], np.int64)
    return arr
