"""Thread-team pieces for generated code: a parallel loop runs as an outlined *task*.

Generated code never calls a thread runtime directly. It calls functions it only
declares, and the runtime (runtime/jit.py) defines them when it JIT-compiles the module:
forwarding to the process's team (runtime/team.py) on Linux, to libgomp (`GOMP_parallel`,
`omp_get_thread_num`, `omp_get_num_threads`) elsewhere when that library is there, else
as a serial shim (the task runs once, as thread 0 of a team of 1). So one IR text runs
with any of them, decided at JIT time.

    PARALLEL_FN(ptr task, ptr data, i32 threads)  runs task(data) on a team of `threads`
    THREAD_NUM_FN() -> i32, NUM_THREADS_FN() -> i32  the caller's place in its team
                                                      (0 and 1 outside a team)
    RUN_BEGIN_FN(), RUN_END_FN()   a run of the module's entry starts / ends: the team's
                                   workers stay hot in between (runtime/team.py)

THREADS_GLOBAL (i32) is the team size the module may use, set by the runtime after
loading (Executable.set_num_threads); it starts at 1, so code run by anything else is
serial. TASKS_GLOBAL (i64) counts task invocations (one per thread per parallel loop,
one per serial call): the runtime reads it to show how many threads really ran.
"""
from llvmlite import ir

I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

PARALLEL_FN = "graphc_omp_parallel"
THREAD_NUM_FN = "graphc_omp_thread_num"
NUM_THREADS_FN = "graphc_omp_num_threads"
RUN_BEGIN_FN = "graphc_omp_run_begin"
RUN_END_FN = "graphc_omp_run_end"
THREADS_GLOBAL = "graphc_num_threads"
TASKS_GLOBAL = "graphc_parallel_tasks"
MAX_THREADS = 64  # team size cap: per-thread status slots are sized for it

TASK_TYPE = ir.FunctionType(ir.VoidType(), [PTR])


def _function(module, name, fnty):
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, fnty, name)
        fn.attributes.add("nounwind")
    return fn


def parallel_fn(module):
    return _function(module, PARALLEL_FN, ir.FunctionType(ir.VoidType(), [PTR, PTR, I32]))


def thread_num_fn(module):
    return _function(module, THREAD_NUM_FN, ir.FunctionType(I32, []))


def num_threads_fn(module):
    return _function(module, NUM_THREADS_FN, ir.FunctionType(I32, []))


def run_begin_fn(module):
    return _function(module, RUN_BEGIN_FN, ir.FunctionType(ir.VoidType(), []))


def run_end_fn(module):
    return _function(module, RUN_END_FN, ir.FunctionType(ir.VoidType(), []))


def _global(module, name, type_, initial):
    g = module.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(module, type_, name)
        g.initializer = ir.Constant(type_, initial)
        g.align = 8
    return g


def threads_global(module):
    return _global(module, THREADS_GLOBAL, I32, 1)


def tasks_global(module):
    return _global(module, TASKS_GLOBAL, I64, 0)


def emit_team_size(builder, want, limit):
    """min(want (i32, the module's thread setting), limit (i64), MAX_THREADS), at least 1."""
    want = builder.sext(want, I64)
    n = builder.select(builder.icmp_signed("<", want, limit), want, limit)
    cap = ir.Constant(I64, MAX_THREADS)
    n = builder.select(builder.icmp_signed("<", n, cap), n, cap)
    one = ir.Constant(I64, 1)
    return builder.trunc(builder.select(builder.icmp_signed("<", n, one), one, n), I32)


def count_task(builder):
    """TASKS_GLOBAL += 1 (atomic: the team's threads run this at once)."""
    builder.atomic_rmw("add", tasks_global(builder.module), ir.Constant(I64, 1), "monotonic")
