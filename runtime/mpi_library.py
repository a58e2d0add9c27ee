"""The MPI library that compiled code may call for graphc.distribute's collectives.

Generated code calls MPI_Allreduce and MPI_Bcast directly (graphc/compiler/backends/cpu/
collectives.py) once `bind(path)` has loaded the library the process's mpi4py uses into
llvmlite's symbol table; until then the verifier refuses code declaring them, so a file
holding collectives never runs against a library nobody initialized.

The code reads the MPI handles it passes from one process-wide array of int64 words,
`WORDS`, exported to the code as the global `graphc_mpi` (slots below), which the
process's graphc.distribute fills once MPI is initialized. Handles are words, not
constants in the code, because what they are is the library's business: MPICH's
MPI_Comm, MPI_Datatype and MPI_Op are ints, Open MPI's (and the MPI 5 ABI's) pointers.
The code declares every handle parameter as i64 and passes the whole word: the x86-64
and AArch64 C conventions pass an int argument in the low half of a 64-bit register, so
the same code is right for either kind of library and a compiled module never depends on
which one compiled it. The code also writes which collective it is in (`IN_COLLECTIVE`,
`tag(name)`, 0 outside) and counts the calls it starts (`CALLS`): graphc.distribute's
watchdog reads them to bound the wait of a rank whose partners stopped.
"""
import hashlib
import threading

import llvmlite.binding as llvm

from . import jit

GLOBAL = "graphc_mpi"
FUNCTIONS = frozenset({"MPI_Allreduce", "MPI_Bcast"})
# slots of WORDS
COMM, SUM, SIZE, IN_COLLECTIVE, CALLS = range(5)
DATATYPE = {"float32": 5, "float64": 6, "int32": 7, "int64": 8}  # slot of each dtype's
SLOTS = 9

WORDS = (jit.ctypes.c_int64 * SLOTS)()
_lock = threading.Lock()
_bound = []  # [path] once bind() ran


def tag(name):
    """The nonzero number a collective's code writes to IN_COLLECTIVE while it waits in MPI
    (a hash of its op's name: the watchdog maps it back)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little",
                          signed=True) or 1


def bind(path):
    """Loads the MPI library at `path` for compiled code (idempotent; a second library is
    refused: the code's symbols resolve once per process)."""
    jit.initialize()
    with _lock:
        if _bound:
            if _bound[0] != path:
                raise RuntimeError(f"compiled code already calls the MPI library {_bound[0]}; "
                                   f"cannot switch to {path}")
            return
        llvm.load_library_permanently(path)
        missing = [f for f in sorted(FUNCTIONS) if not llvm.address_of_symbol(f)]
        if missing:
            raise RuntimeError(f"the MPI library {path} does not export {', '.join(missing)}")
        llvm.add_symbol(GLOBAL, jit.ctypes.addressof(WORDS))
        _bound.append(path)


def bound():
    """The path of the MPI library compiled code calls, or None."""
    return _bound[0] if _bound else None


def provided_functions():
    """The MPI functions compiled code may declare now (none before bind())."""
    return FUNCTIONS if _bound else frozenset()


def provided_globals():
    return frozenset({GLOBAL}) if _bound else frozenset()
