"""The schedule stage: what code generation needs of an optimized module, always run.

    stats = schedule(module, scratch_bytes, fuse=True, reuse=True, dumps=None,
                     strided_products=False)

Two steps, in order (STEP_NAMES):
- fusion (fusion.py): groups the nodes into kernels (kernel.py) and orders them:
  `module.kernels`, the schedule, and `module.aliases`. fuse=False: one kernel per node.
  strided_products: the backend's batched products address transposed views (fusion 2b).
- memory_planning (memory_planning.py): places every intermediate buffer of the schedule
  in one arena: `module.memory_plan`. The backend says how much scratch memory each kernel
  needs while it runs (`scratch_bytes(kernel)`); reuse=False: no two buffers share memory.
Unlike the passes (pipeline.py) they cannot be skipped: the "fusion" and "memory_planning"
switches of GRAPHC_DISABLE_PASSES choose fuse=False and reuse=False instead.
"""
from graphc.compiler.ir import verify_every_stage
from graphc.compiler.schedule import fusion, memory_planning

STEP_NAMES = ("fusion", "memory_planning")


def schedule(module, scratch_bytes, fuse=True, reuse=True, dumps=None,
             strided_products=False):
    """Runs both steps over `module` (in place); returns {step name: its counts}.
    dumps: a pipeline.ModuleDumps recording the module after each step, or None."""
    stats = {"fusion": fusion.run(module, fuse, strided_products)}
    _after("fusion", module, dumps)
    stats["memory_planning"] = memory_planning.run(module, scratch_bytes, reuse)
    _after("memory_planning", module, dumps)
    return stats


def _after(step, module, dumps):
    # the steps set the kernels and the plan and leave the nodes as the passes left them
    # (verified then): checked again only when every stage is
    if verify_every_stage():
        module.verify()
    if dumps is not None:
        dumps.record(step, module)
