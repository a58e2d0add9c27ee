"""The process group graphc's collectives run over: MPI's COMM_WORLD, or this process alone.

init() decides once per process. A process started by an MPI launcher (mpiexec, mpirun,
srun: they set PMI_*/OMPI_*/PMIX_* variables) joins COMM_WORLD through mpi4py; any other
process is a world of one (`Solo`), which needs no MPI library at all, so a script written
for N processes runs unchanged as one.

Failure: a Python exception that reaches the top of a rank (sys.excepthook) prints its
traceback and then calls MPI_Abort, which makes the launcher end every rank at once:
the other ranks exit non-zero within moments instead of waiting forever in their next
collective. A rank that stops calling collectives without raising (it left its training
loop early, it hangs) is caught by the others' watchdog (schedule.Watchdog).
"""
import os
import sys
import traceback

from graphc.distribute import native
from graphc.distribute.schedule import Agreement

# Variables an MPI launcher sets in the processes it starts (MPICH/Intel MPI/Slurm PMI,
# Open MPI, PMIx, MVAPICH).
_LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                       "MV2_COMM_WORLD_SIZE")

_world = []  # [World] once init() ran


class Solo:
    """The communicator of a process that was not launched by MPI: size 1, rank 0
    (collective_ops computes a collective of one process without calling it)."""

    rank = 0
    size = 1

    def Get_rank(self):  # noqa: N802 - mpi4py's names: World reads either kind
        return 0

    def Get_size(self):  # noqa: N802
        return 1

    def Abort(self, code=1):  # noqa: N802
        os._exit(code)


class World:
    """The communicator and the facts derived from it once."""

    def __init__(self, comm, local_comm, mpi, agreement=None):
        self.comm = comm
        self.mpi = mpi  # the mpi4py.MPI module, or None for a Solo world
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.local_rank, self.local_size = local_comm.Get_rank(), local_comm.Get_size()
        self.agreement = agreement  # of the ranks on their collectives; None for one rank
        # whether compiled code calls MPI itself (native.py), and why not when it does not
        self.native, self.host_only_reason = False, "a job of one process"


def launched_by_mpi():
    """Whether an MPI launcher started this process."""
    return os.environ.get("GRAPHC_MPI", "") == "1" or \
        any(v in os.environ for v in _LAUNCHER_VARIABLES)


def init(abort_on_error=True):
    """Joins the process group (idempotent). With `abort_on_error` (the default), an
    uncaught exception on any rank aborts every rank (MPI_Abort) once it is printed."""
    if _world:
        return _world[0]
    if not launched_by_mpi():
        solo = Solo()
        _world.append(World(solo, solo, None))
        return _world[0]
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("graphc.distribute: this process was started by an MPI launcher, "
                          "which needs mpi4py (pip install 'graphc[distribute]', which also "
                          f"installs the MPICH library): {e}") from None
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    agreement = Agreement(comm.Dup(), comm.Get_rank(), comm.Get_size()) \
        if comm.Get_size() > 1 else None
    w = World(comm, local, MPI, agreement)
    _use_native_collectives(w, comm, MPI)
    _world.append(w)
    if abort_on_error and comm.Get_size() > 1:
        _abort_on_uncaught_exceptions(comm)
    return _world[0]


def _use_native_collectives(w, comm, mpi):
    """Lets compiled code call MPI (native.py) unless GRAPHC_MPI_NATIVE=0 or this MPI
    library cannot be called so (a warning says why)."""
    if w.size == 1:
        return
    if os.environ.get("GRAPHC_MPI_NATIVE", "1").strip() == "0":
        w.host_only_reason = "GRAPHC_MPI_NATIVE=0"
        return
    reason = native.bind(w, comm, mpi)
    if reason is not None:
        native.warn_host_only(reason)
        w.host_only_reason = reason
        return
    w.native, w.host_only_reason = True, None


def world(what="graphc.distribute"):
    """The World of init(); a clear error when init() was not called."""
    if not _world:
        raise ValueError(f"{what} needs graphc.distribute.init() to be called first "
                         "(hvd.init(), before building the graph)")
    return _world[0]


def current():
    """The World of init(), or None before it (what a collective's every call asks)."""
    return _world[0] if _world else None


def writes_checkpoints():
    """Whether this process writes checkpoints: rank 0 of a job, or a process that never
    joined one (graphc.train.Saver.save asks)."""
    return not _world or _world[0].rank == 0


def _abort_on_uncaught_exceptions(comm):
    """Prints an uncaught exception with this rank's number, then aborts the whole job.

    The report is one write that names the error before the traceback: MPI_Abort makes the
    launcher kill every rank, and mpiexec may drop what it has not yet forwarded, so the
    error itself must not be the last line (CI lost exactly that line once)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        summary = "".join(traceback.format_exception_only(kind, value))
        report = (f"graphc.distribute: rank {comm.Get_rank()} of {comm.Get_size()} failed; "
                  f"aborting all ranks (MPI_Abort):\n{summary}")
        if previous is sys.__excepthook__:
            report += "".join(traceback.format_exception(kind, value, tb))
        sys.stdout.flush()
        sys.stderr.write(report)
        sys.stderr.flush()
        if previous is not sys.__excepthook__:
            previous(kind, value, tb)  # a debugger's or IDE's hook still sees the error
            sys.stderr.flush()
        comm.Abort(1)

    sys.excepthook = hook
