"""Collectives called from compiled code: MpiAllreduce and MpiBroadcast inside the CPU entry.

In a job of several ranks, a collective whose dims are static compiles into the native
stage around it (graphc/compiler/backends/cpu/collectives.py calls MPI_Allreduce /
MPI_Bcast on the arena's buffers), so a training step is one native call instead of the
gradients' stage, a host stage and the update stage. init() loads the MPI library that
mpi4py loaded (runtime.mpi_library.bind) and writes the handles the code passes.
GRAPHC_MPI_NATIVE=0 keeps every collective on the host (the path this one must equal).

What stays the host's, around each run of native code holding collectives (`Agreed`):
- the agreement (schedule.py): the run's collectives, in the order the code runs them
  (the graph's: fusion keeps stateful ops in module order), are one key of the agreed
  sequence, so a rank running other collectives, or the same on other shapes, still
  departs from the sequence, exchanges headers, and fails with a report naming what each
  rank runs; ranks that follow it run the same list of collectives, hence move matching
  buffers. What a native run checks is that whole list at once, before its first
  collective: a mismatch is reported before any data moves.
- the watchdog: the code writes which collective it waits in (runtime.mpi_library's
  IN_COLLECTIVE and CALLS words); the watchdog thread reads them while the entry runs (it
  holds no GIL) and ends the job after GRAPHC_MPI_TIMEOUT as for a host collective.
Allgather stays on the host: its output's size is known only once the ranks' sizes are.
"""
import warnings

import numpy as np

from graphc.distribute.schedule import NativeWait, describe, hash64
from graphc.framework.func_graph import FuncGraph
from runtime import mpi_library

NATIVE_TYPES = ("MpiAllreduce", "MpiBroadcast")
_MAX_COUNT = 2**31 - 1  # MPI's int count


def bind(world, comm, mpi):
    """Loads mpi4py's MPI library for compiled code and writes the handles of `comm`;
    returns why collectives stay on the host, or None when they compile."""
    if world.size == 1:
        return "a job of one process runs no collective"
    handle_bytes = mpi._sizeof(mpi.Comm)
    if handle_bytes not in (4, 8):
        return (f"this MPI library's handles are {handle_bytes}-byte values; compiled code "
                "passes 4-byte (MPICH) or 8-byte (Open MPI) ones")
    try:
        mpi_library.bind(mpi.__file__)
    except (OSError, RuntimeError) as e:
        return f"compiled code cannot call the MPI library mpi4py loaded: {e}"
    words = mpi_library.WORDS
    words[mpi_library.COMM] = mpi._handleof(comm)
    words[mpi_library.SUM] = mpi._handleof(mpi.SUM)
    words[mpi_library.SIZE] = world.size
    for dtype, slot in mpi_library.DATATYPE.items():
        words[slot] = mpi._handleof(mpi._typedict[np.dtype(dtype).char])
    return None


def warn_host_only(reason):
    warnings.warn(f"graphc.distribute: collectives run on the host between native stages: "
                  f"{reason}", RuntimeWarning, stacklevel=3)


class NativeCollectives:
    """The native_on_cpu fact of MpiAllreduce and MpiBroadcast (graphc/framework/op_def.py)."""

    def compiles(self, op):
        from graphc.distribute.world import current
        w = current()
        if w is None or not w.native or op.type not in NATIVE_TYPES:
            return False
        out = op.outputs[0]
        if not out.shape.is_fully_defined() or out.dtype.name not in mpi_library.DATATYPE:
            return False
        if out.shape.num_elements() > _MAX_COUNT or isinstance(op.graph, FuncGraph):
            # a loop body would run its collectives a number of times the agreement on
            # the run does not know
            return False
        return op.type != "MpiBroadcast" or op.attrs["root_rank"] < w.size

    def host_work(self, ops):
        return Agreed(ops)


NATIVE = NativeCollectives()


class Agreed:
    """Entered around every run of one native stage holding `ops` (collectives, in graph
    order): the ranks agree on the whole list (module docstring), and the watchdog
    watches the waits the code marks."""

    def __init__(self, ops):
        from graphc.distribute.collective_ops import op_identity
        from graphc.distribute.world import world
        self.agreement = world("a native collective").agreement
        self.ops = list(ops)
        shapes = tuple(tuple(op.outputs[0].shape.as_list()) for op in self.ops)
        self.key = (hash64("native|" + "|".join(str(op_identity(op)) for op in self.ops)),
                    shapes)
        self.wait = NativeWait({mpi_library.tag(op.name): op for op in self.ops})

    def __enter__(self):
        agreement = self.agreement
        if not agreement.follows(self.key):
            agreement.depart(self.ops[0], self.key, self.key[1], self._description)
        agreement.watchdog.watch_native(self.wait)
        return self

    def __exit__(self, *exc):
        self.agreement.watchdog.done()
        return False

    def _description(self):
        return "; ".join(describe(op, shape) for op, shape in zip(self.ops, self.key[1]))
