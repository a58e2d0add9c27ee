"""Data-parallel training over MPI, with Horovod's API: `import graphc.distribute as hvd`.

The same script runs as N processes (`mpiexec -n N python train.py`), each on its share
of the data; DistributedOptimizer averages the gradients over the processes between the
backward pass and the update, so every process applies the same update to the same
variables. A script not started by an MPI launcher is a job of one process: size() is 1
and everything runs (mpi4py is then not even imported).

    hvd.init()
    opt = hvd.DistributedOptimizer(gc.train.GradientDescentOptimizer(0.1 * hvd.size()))
    train_op = opt.minimize(loss)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(hvd.broadcast_global_variables(0))   # every rank starts from rank 0's
        ...

Collectives are graph ops (MpiAllreduce, MpiAllgather, MpiBroadcast, collective_ops.py)
run on the host between native stages; DistributedOptimizer packs small gradients into
fusion buffers (optimizer.py); the ranks check that they run the same collectives where
their sequence of collectives changes, and a watchdog bounds every wait (schedule.py).
init() installs an excepthook that aborts every rank when one raises (world.py).
Checkpoints: Saver.save writes on rank 0 only (see graphc.train.Saver). With
MonitoredTrainingSession, BroadcastGlobalVariablesHook(0) does what
broadcast_global_variables(0) after the initializer does.
"""
from graphc.distribute import world as _world
from graphc.distribute.collective_ops import Average, Sum, allgather, allreduce, broadcast
from graphc.distribute.optimizer import DistributedOptimizer, reduce_gradients

from graphc.train.session_run_hook import SessionRunHook

__all__ = ["init", "is_initialized", "size", "rank", "local_size", "local_rank", "Average",
           "Sum", "allreduce", "allgather", "broadcast", "broadcast_global_variables",
           "broadcast_variables", "DistributedOptimizer", "reduce_gradients",
           "BroadcastGlobalVariablesHook"]


def init(abort_on_error=True):
    """Joins the job's processes (idempotent). abort_on_error: an uncaught exception on
    one rank aborts every rank (MPI_Abort) instead of leaving them waiting."""
    _world.init(abort_on_error)


def is_initialized():
    return bool(_world._world)


def size():
    """The number of processes of the job."""
    return _world.world("size()").size


def rank():
    """This process's number, 0 .. size() - 1."""
    return _world.world("rank()").rank


def local_size():
    """The number of processes of the job on this host."""
    return _world.world("local_size()").local_size


def local_rank():
    """This process's number among those on this host (e.g. the GPU it should use)."""
    return _world.world("local_rank()").local_rank


def broadcast_variables(variables, root_rank):
    """One op assigning to each of `variables` its value on rank `root_rank`."""
    from graphc.ops.control_flow_ops import group
    from graphc.variables import assign
    return group(*[assign(v, broadcast(v, root_rank, name="Broadcast_" + v.op.name))
                   for v in variables], name="BroadcastVariables")


def broadcast_global_variables(root_rank):
    """One op giving every global variable its value on rank `root_rank`: run it after the
    initializer so all ranks start from the same weights (random initializers differ)."""
    from graphc.variables import global_variables
    return broadcast_variables(global_variables(), root_rank)


class BroadcastGlobalVariablesHook(SessionRunHook):
    """Horovod's hook for MonitoredTrainingSession: once the Session exists (variables
    initialized or restored), every global variable takes its value on `root_rank`."""

    def __init__(self, root_rank, device=""):
        self.root_rank = root_rank
        self.device = device  # accepted as Horovod's; graphc places the broadcast itself
        self._op = None

    def begin(self):
        if self._op is None:  # before the graph is finalized
            self._op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self._op)
